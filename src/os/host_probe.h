// Feature checks of the host for `sandbox doctor` that no backend's own
// probe makes: what /dev/kvm offers. (The Docker Engine is probed through
// the docker backend's client, src/docker/engine.h.)
#ifndef SANDBOX_OS_HOST_PROBE_H_
#define SANDBOX_OS_HOST_PROBE_H_

#include <string>

#include "sandbox/error.h"

namespace sandbox::os {

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
