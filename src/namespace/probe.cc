// `sandbox doctor` and `sandbox gc` for the namespace backend.
#include <unistd.h>

#include <string>

#include "os/landlock.h"
#include "os/limits.h"
#include "os/namespaces.h"
#include "os/seccomp.h"
#include "sandbox/namespace.h"

namespace sandbox {

namespace {

// The checks without which the backend cannot run at all.
std::vector<NamespaceCheck> RequiredChecks() {
  std::vector<NamespaceCheck> checks;
  Status userns = os::ProbeUserNamespaces();
  checks.push_back({"user namespaces", bool(userns), true,
                    userns ? (geteuid() == 0 ? "as root: ids map to an unprivileged host range"
                                             : "as an unprivileged user: one id mapped (yours)")
                           : userns.error().message()});
  bool setattr = os::HasMountSetattr();
  checks.push_back({"mount_setattr (Linux >= 5.12)", setattr, true,
                    setattr ? "read-only binds and idmapped workspace mounts"
                            : "this kernel lacks mount_setattr: upgrade to Linux >= 5.12"});
  auto filter = os::BuildBoundarySeccompFilter();
  checks.push_back({"seccomp (libseccomp)", bool(filter), true,
                    filter ? std::to_string(os::BoundaryDeniedSyscalls().size()) + " deny rules, " +
                                 std::to_string(filter->size()) + " BPF instructions"
                           : filter.error().message()});
  return checks;
}

}  // namespace

std::vector<NamespaceCheck> ProbeNamespaceBackend() {
  std::vector<NamespaceCheck> checks = RequiredChecks();
  int abi = os::LandlockAbi();
  checks.push_back(
      {"landlock", abi > 0, false,
       abi > 0 ? "ABI " + std::to_string(abi) +
                     (abi >= 6 ? " (with signal and abstract unix socket scoping)" : "")
               : "absent or disabled (add landlock to the lsm= boot parameter); mounts and "
                 "seccomp still confine the sandbox"});
  for (const os::ControllerSupport& support : os::ProbeLimitSupport()) {
    std::string name = support.controller == "memory" ? "--memory"
                       : support.controller == "pids" ? "--pids"
                                                      : "--cpus";
    checks.push_back(
        {name + " limit", support.usable, false,
         support.usable ? "cgroup v" + std::to_string(support.version) + " under " + support.parent
                        : support.reason});
  }
  return checks;
}

std::string NamespaceUnavailableReason() {
  for (const NamespaceCheck& check : RequiredChecks())
    if (check.required && !check.ok) return check.name + ": " + check.detail;
  return "";
}

int RemoveNamespaceLeftovers() { return os::RemoveStaleLimitGroups(); }

}  // namespace sandbox
