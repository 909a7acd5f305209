// The contract between the host's image builder and VMM drivers and the
// guest's /init (src/agent/vm_guest.cc): names and kernel command line keys
// both sides must agree on. Constants only.
#ifndef SANDBOX_MICROVM_GUEST_LAYOUT_H_
#define SANDBOX_MICROVM_GUEST_LAYOUT_H_

#include <string_view>

namespace sandbox::vm {

// The virtio-serial port the agent serves on (QEMU: virtserialport name=).
inline constexpr std::string_view kAgentPortName = "sandbox.agent";
// The vsock port the agent listens on when the VMM offers vsock only
// (Firecracker): the kernel command line then says `sandbox.vsock=PORT`.
inline constexpr unsigned kAgentVsockPort = 1024;

// Directory of the initramfs with the modules (NAME.ko) and the file
// listing them, one name a line, in load order.
inline constexpr std::string_view kModuleDir = "/sandbox/modules";
inline constexpr std::string_view kModuleOrderFile = "/sandbox/modules/order";

// Kernel command line keys read by the guest's /init:
//   sandbox.mount=TAG:PATH:ro|rw   mount the 9p share TAG at PATH (repeatable)
//   sandbox.vsock=PORT              serve on vsock PORT, not the serial port
//   MODULE.PARAM=VALUE              module parameters, as modprobe passes them
inline constexpr std::string_view kMountKey = "sandbox.mount=";
inline constexpr std::string_view kVsockKey = "sandbox.vsock=";
// The word of the kernel command line that the kernel hands on to /init.
inline constexpr std::string_view kGuestFlag = "--vm-guest";

}  // namespace sandbox::vm

#endif  // SANDBOX_MICROVM_GUEST_LAYOUT_H_
