#include "os/host_probe.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <system_error>

#include "os/unique_fd.h"

namespace sandbox::os {

KvmProbe ProbeKvm() {
  KvmProbe probe;
  UniqueFd kvm(open("/dev/kvm", O_RDWR | O_CLOEXEC));
  if (!kvm) {
    probe.present = errno != ENOENT;
    probe.detail = probe.present
                       ? "open /dev/kvm: " + std::generic_category().message(errno) +
                             " (add this user to the kvm group, or run as root)"
                       : "/dev/kvm does not exist (load kvm_intel or kvm_amd, enable "
                         "virtualization in the firmware, or nested virtualization in the "
                         "host of this VM)";
    return probe;
  }
  probe.present = true;
  probe.api_version = ioctl(kvm.get(), KVM_GET_API_VERSION, 0);
  if (probe.api_version != KVM_API_VERSION) {
    probe.detail = "KVM_GET_API_VERSION returned " + std::to_string(probe.api_version) +
                   ", expected " + std::to_string(KVM_API_VERSION);
    return probe;
  }
  UniqueFd vm(ioctl(kvm.get(), KVM_CREATE_VM, 0));
  if (!vm) {
    probe.detail = "KVM_CREATE_VM: " + std::generic_category().message(errno) +
                   " (/dev/kvm exists but cannot create a VM here)";
    return probe;
  }
  // PVM, a KVM for guests that are themselves VMs, creates VMs but QEMU's
  // guests abort on it (setting MSRs); the microvm backend does not use it.
  if (access("/sys/module/kvm_pvm", F_OK) == 0) {
    probe.detail = "/dev/kvm is PVM (kvm_pvm is loaded), on which QEMU's guests cannot run";
    return probe;
  }
  probe.usable = true;
  probe.detail = "/dev/kvm, API version " + std::to_string(probe.api_version) + ", can create a VM";
  return probe;
}

}  // namespace sandbox::os
