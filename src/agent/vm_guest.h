// The agent as /init of a microvm guest (`--vm-guest`, a bare word of the
// kernel command line, which the kernel hands on to /init): prepares the
// guest's filesystems and finds the stream to the host before the agent
// serves on it.
#ifndef SANDBOX_AGENT_VM_GUEST_H_
#define SANDBOX_AGENT_VM_GUEST_H_

#include "sandbox/error.h"

namespace sandbox::agent {

// Mounts /dev, /proc, /sys and /tmp, loads the modules of the initramfs in
// their order (with the MODULE.PARAM= values of the kernel command line),
// mounts the 9p shares the command line names (sandbox.mount=), and returns
// the stream to the host: the virtio-serial port named "sandbox.agent", or
// a vsock connection accepted on sandbox.vsock=PORT. Call as PID 1's worker
// child, before any thread exists.
Expected<int> PrepareVmGuest();

// Flushes and powers the machine off (the VMM then exits). For PID 1 only.
[[noreturn]] void PowerOffVm();

}  // namespace sandbox::agent

#endif  // SANDBOX_AGENT_VM_GUEST_H_
