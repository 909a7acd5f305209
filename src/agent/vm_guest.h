// The agent as /init of a microvm guest (`--vm-guest`, a bare word of the
// kernel command line, which the kernel hands on to /init): prepares the
// guest's filesystems and finds the stream to the host before the agent
// serves on it.
#ifndef SANDBOX_AGENT_VM_GUEST_H_
#define SANDBOX_AGENT_VM_GUEST_H_

#include <string>
#include <vector>

#include "sandbox/error.h"

namespace sandbox::agent {

// What the guest's /init hands the agent. Both descriptors are O_CLOEXEC and
// owned by the caller.
struct VmGuest {
  // The stream to the host.
  int stream_fd = -1;
  // A cgroup v2 directory for the commands' trees (cgroup.kill per
  // command), or -1 where the guest kernel offers none: the agent then
  // falls back to a PID namespace per command.
  int cgroup_fd = -1;
  // Where the read-only shares (the host's system directories) are mounted.
  std::vector<std::string> read_only_mounts;
};

// Mounts /dev, /proc, /sys and /tmp, loads the modules of the initramfs in
// their order (with the MODULE.PARAM= values of the kernel command line),
// mounts the 9p shares the command line names (sandbox.mount=), makes a
// cgroup v2 directory for the commands and unmounts the cgroup file system
// again (the agent keeps a descriptor; commands, without CAP_SYS_ADMIN,
// can neither reach nor remount it), and returns those with the stream to
// the host: the virtio-serial port named "sandbox.agent", or a vsock
// connection accepted on sandbox.vsock=PORT. Call as PID 1's worker child,
// before any thread exists.
Expected<VmGuest> PrepareVmGuest();

// Flushes and powers the machine off (the VMM then exits). For PID 1 only.
[[noreturn]] void PowerOffVm();

}  // namespace sandbox::agent

#endif  // SANDBOX_AGENT_VM_GUEST_H_
