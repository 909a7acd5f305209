// The backends the conformance suite runs against, and the policy for a
// backend that cannot run here: skip loudly, or fail when
// SANDBOX_REQUIRE_BACKENDS names it.
#ifndef SANDBOX_TESTS_BACKENDS_H_
#define SANDBOX_TESTS_BACKENDS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sandbox/microvm.h"
#include "sandbox/sandbox.h"

namespace sandbox::testing {

struct BackendUnderTest {
  std::string name;
  // "" when the backend can run on this machine, else why not.
  std::function<std::string()> unavailable_reason;
  // Creates a sandbox whose root is the host directory `workspace`.
  std::function<Expected<std::unique_ptr<Sandbox>>(const std::string& workspace)> make;
  // What GetCapabilities().backend reports, when it is not `name` (a variant
  // of a backend under test, such as local_pidns).
  std::string reports_as;

  const std::string& reported_name() const { return reports_as.empty() ? name : reports_as; }
};

// Every backend the project has, in order of isolation.
const std::vector<BackendUnderTest>& AllBackends();
const BackendUnderTest& FindBackend(const std::string& name);
std::vector<std::string> AllBackendNames();

// The static agent the docker and gvisor backends mount into containers:
// $SANDBOX_CONTAINER_AGENT when set (the sanitizer builds point it at the
// normal build's static agent, theirs being dynamically linked against
// runtimes no image has), else the agent built with the tests.
std::string ContainerAgentPath();
// The microvm guest image of this build (built once per process).
Expected<VmImage> TestVmImage();

// True when SANDBOX_REQUIRE_BACKENDS (comma-separated) names `backend`.
bool BackendRequired(const std::string& backend);

}  // namespace sandbox::testing

// In a test body: skip with the reason when `backend` cannot run here, or
// fail when SANDBOX_REQUIRE_BACKENDS requires it.
#define SANDBOX_SKIP_UNLESS_AVAILABLE(backend)                                            \
  do {                                                                                    \
    std::string reason_ = ::sandbox::testing::FindBackend(backend).unavailable_reason();  \
    if (!reason_.empty()) {                                                               \
      if (::sandbox::testing::BackendRequired(backend)) {                                 \
        FAIL() << "backend " << (backend)                                                 \
               << " is required by SANDBOX_REQUIRE_BACKENDS but cannot run: " << reason_; \
      }                                                                                   \
      GTEST_SKIP() << "backend " << (backend) << " unavailable: " << reason_;             \
    }                                                                                     \
  } while (0)

#endif  // SANDBOX_TESTS_BACKENDS_H_
