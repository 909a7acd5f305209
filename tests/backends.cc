#include "backends.h"

#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "os/tree.h"
#include "sandbox/local.h"

namespace sandbox::testing {

const std::vector<BackendUnderTest>& AllBackends() {
  static const std::vector<BackendUnderTest> backends = {
      {
          "local",
          [] { return std::string(); },
          [](const std::string& workspace) {
            LocalOptions options;
            options.root = workspace;
            return NewLocalSandbox(options);
          },
      },
      {
          // The local backend containing each command in its own PID
          // namespace, as the agent does inside every isolated backend.
          "local_pidns",
          [] {
            auto can = os::CanCreatePidNamespace();
            return can ? std::string() : can.error().message();
          },
          [](const std::string& workspace) {
            LocalOptions options;
            options.root = workspace;
            options.containment = LocalOptions::Containment::kPidNamespace;
            return NewLocalSandbox(options);
          },
          "local",
      },
  };
  return backends;
}

const BackendUnderTest& FindBackend(const std::string& name) {
  for (const auto& backend : AllBackends())
    if (backend.name == name) return backend;
  throw std::invalid_argument("unknown backend " + name);
}

std::vector<std::string> AllBackendNames() {
  std::vector<std::string> names;
  for (const auto& backend : AllBackends()) names.push_back(backend.name);
  return names;
}

bool BackendRequired(const std::string& backend) {
  const char* env = std::getenv("SANDBOX_REQUIRE_BACKENDS");
  if (!env) return false;
  std::stringstream list(env);
  std::string item;
  while (std::getline(list, item, ','))
    if (item == backend || item == "all") return true;
  return false;
}

}  // namespace sandbox::testing
