#include "select.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "sandbox/docker.h"
#include "sandbox/microvm.h"
#include "sandbox/namespace.h"

namespace sandbox::cli {
namespace {

// True when `program` is an executable file in a directory of $PATH.
bool OnPath(std::string_view program) {
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (!dirs.empty()) {
    std::size_t colon = dirs.find(':');
    std::string_view dir = dirs.substr(0, colon);
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
    if (dir.empty()) continue;
    std::string candidate = std::string(dir) + "/" + std::string(program);
    if (access(candidate.c_str(), X_OK) == 0) return true;
  }
  return false;
}

bool Exists(const char* path) {
  struct stat info {};
  return stat(path, &info) == 0;
}

// The Docker Engine socket this machine would use.
std::string DockerState() {
  const char* host = std::getenv("DOCKER_HOST");
  if (host && *host) return std::string("DOCKER_HOST is ") + host;
  return Exists("/var/run/docker.sock") ? "/var/run/docker.sock exists"
                                        : "no Docker Engine: /var/run/docker.sock does not exist";
}

std::string LocalUnavailable() { return ""; }

std::string NamespaceUnavailable() { return NamespaceUnavailableReason(); }

std::string DockerUnavailable() {
  std::string reason = DockerUnavailableReason();
  if (reason.empty()) return "";
  return reason + "; the docker backend needs a Docker Engine (API >= 1.41) at DOCKER_HOST or "
                  "/var/run/docker.sock (apt-get install docker.io) (here: " +
         DockerState() + ")";
}

std::string GvisorUnavailable() {
  std::string reason = DockerUnavailableReason("runsc");
  if (reason.empty()) return "";
  return reason + "; the gvisor backend needs Docker with gVisor's runsc registered as the "
                  "runtime \"runsc\": apt-get install docker.io runsc, register it in "
                  "daemon.json (see the README's set-up notes) and restart dockerd (here: runsc "
                  "is " +
         std::string(OnPath("runsc") ? "on PATH" : "not on PATH") + "; " + DockerState() + ")";
}

std::string MicrovmUnavailable() {
  std::string reason = MicroVmUnavailableReason();
  if (reason.empty()) return "";
  return reason + "; the microvm backend needs qemu-system-x86_64 (apt-get install "
                  "qemu-system-x86, or scripts/setup-microvm, which also fetches the guest "
                  "kernel) (here: /dev/kvm " +
         std::string(Exists("/dev/kvm") ? "exists" : "is missing") + "; firecracker is " +
         (OnPath("firecracker") ? "on PATH" : "not on PATH") + "; qemu-system-x86_64 is " +
         (OnPath("qemu-system-x86_64") ? "on PATH" : "not on PATH") + ")";
}

constexpr BackendOption kBackends[] = {
    {"local", Isolation::None, LocalUnavailable},
    {"namespace", Isolation::Process, NamespaceUnavailable},
    {"docker", Isolation::Process, DockerUnavailable},
    {"gvisor", Isolation::Kernel, GvisorUnavailable},
    {"microvm", Isolation::VM, MicrovmUnavailable},
};

}  // namespace

std::span<const BackendOption> BackendTable() { return kBackends; }

const BackendOption* FindBackendOption(std::string_view name) {
  for (const BackendOption& option : kBackends)
    if (option.name == name) return &option;
  return nullptr;
}

Expected<std::string> PickBackend(Isolation minimum) {
  std::string missing;
  for (const BackendOption& option : kBackends) {
    if (option.isolation < minimum) continue;
    std::string reason = option.unavailable_reason();
    if (reason.empty()) return std::string(option.name);
    missing += "\n  " + std::string(option.name) + " (isolation " +
               std::string(ToString(option.isolation)) + "): " + reason;
  }
  return Fail(Error::Code::InsufficientIsolation,
              "--isolation " + std::string(ToString(minimum)) +
                  ": no backend on this machine gives isolation " + std::string(ToString(minimum)) +
                  " or stronger, and a weaker one is never used "
                  "instead:" +
                  missing);
}

}  // namespace sandbox::cli
