// The seccomp-bpf deny list of the namespace boundary, built with libseccomp
// and exported as a BPF program so the child can install it between clone and
// exec without allocating.
#ifndef SANDBOX_OS_SECCOMP_H_
#define SANDBOX_OS_SECCOMP_H_

#include <linux/filter.h>

#include <string>
#include <vector>

#include "sandbox/error.h"

namespace sandbox::os {

// One entry of the deny list, for documentation and `sandbox doctor`.
struct DeniedSyscall {
  const char* name;
  const char* when;  // "" for always, else the argument condition
};

// The deny list, modelled on Docker's default profile. Everything not listed
// is allowed. Denied calls fail with EPERM, except clone3 which fails with
// ENOSYS so that libc falls back to clone(2), whose flags a filter can see.
const std::vector<DeniedSyscall>& BoundaryDeniedSyscalls();

// Builds the deny list as a BPF program for the native architecture. Calls
// from any other architecture (int 0x80, x32) kill the process. Thread-safe;
// the program is built once and copied.
Expected<std::vector<sock_filter>> BuildBoundarySeccompFilter();

}  // namespace sandbox::os

#endif  // SANDBOX_OS_SECCOMP_H_
