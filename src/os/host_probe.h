// Feature checks of the host for `sandbox doctor`: the pieces the docker,
// gvisor and microvm backends need, probed with plain syscalls. Kept small
// and replaceable: the docker backend's own Engine client can take over the
// socket check once it exists.
#ifndef SANDBOX_OS_HOST_PROBE_H_
#define SANDBOX_OS_HOST_PROBE_H_

#include <chrono>
#include <cstddef>
#include <string>

#include "sandbox/error.h"

namespace sandbox::os {

// Connects to the Unix socket at `path`, writes `request`, and reads the
// reply until the peer closes, at most `max_reply` bytes (TooLarge beyond)
// and for at most `timeout` in all (DeadlineExceeded). Every fd is
// O_CLOEXEC and closed on return. For a one-shot HTTP/1.0 exchange.
Expected<std::string> UnixSocketExchange(const std::string& path, const std::string& request,
                                         std::size_t max_reply,
                                         std::chrono::milliseconds timeout);

// What /dev/kvm offers this process.
struct KvmProbe {
  bool present = false;     // /dev/kvm exists
  bool usable = false;      // opened read-write, API version 12, and a VM could be created
  int api_version = -1;     // KVM_GET_API_VERSION, -1 when not reached
  std::string detail;       // what was found, or the failing step and its errno
};

// Opens /dev/kvm, asks its API version and creates (then closes) an empty VM.
KvmProbe ProbeKvm();

}  // namespace sandbox::os

#endif  // SANDBOX_OS_HOST_PROBE_H_
