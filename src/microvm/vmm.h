// The VMM driver interface of the microvm backend: boot a guest described
// by a VmSpec and hand back the byte stream to its agent. Drivers: QEMU
// (`-M microvm`, boots here) and Firecracker (REST API over its socket).
#ifndef SANDBOX_MICROVM_VMM_H_
#define SANDBOX_MICROVM_VMM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "os/unique_fd.h"
#include "sandbox/error.h"

namespace sandbox::vm {

// A host directory the guest mounts (9p) at `guest_path`.
struct VmShare {
  std::string tag;  // the 9p mount tag
  std::string host_path;
  std::string guest_path;
  bool read_only = true;
};

// A host file the guest sees as a virtio block device.
struct VmDrive {
  std::string id;
  std::string host_path;
  bool read_only = true;
  bool is_root = false;
};

// One guest to boot.
struct VmSpec {
  std::string kernel;     // uncompressed vmlinux
  std::string initramfs;  // cpio whose /init is the agent
  unsigned vcpus = 1;
  std::uint64_t memory_mib = 512;
  std::vector<VmShare> shares;
  std::vector<VmDrive> drives;
  bool network = false;  // no network device at all when false
  // A private directory the driver may put sockets and files in; removed
  // by whoever made it after the VM is gone.
  std::string run_dir;
  // Where the guest console is copied as it arrives (borrowed); -1: nowhere.
  int console_fd = -1;
  // The bounded tail of the console kept in memory.
  std::size_t console_tail_bytes = 64 * 1024;
};

// The kernel command line for `spec`: console, panic handling, the guest
// /init's keys (guest_layout.h), `extra` words, and the guest flag.
std::string GuestCommandLine(const VmSpec& spec, std::string_view extra);

// A booted guest. Destruction kills the VMM and reaps it.
class RunningVm {
 public:
  virtual ~RunningVm() = default;
  RunningVm() = default;
  RunningVm(const RunningVm&) = delete;
  RunningVm& operator=(const RunningVm&) = delete;

  // The connected stream to the guest's agent (once; later calls: invalid).
  virtual os::UniqueFd TakeAgentStream() = 0;
  // Stops the guest at once (the guest holds nothing to save: the
  // workspace is written through) and reaps the VMM. Idempotent.
  virtual Status PowerOff() = 0;
  // The last bytes the guest wrote to its console (bounded), for errors.
  virtual std::string ConsoleTail() const = 0;
  // The VMM's process id (for tests and diagnostics).
  virtual int pid() const = 0;
};

// A way of booting guests. Implementations are thread-safe.
class VmmDriver {
 public:
  virtual ~VmmDriver() = default;
  virtual std::string_view name() const = 0;
  // Starts the guest; returns once the VMM runs (not when the guest has
  // booted: the agent's handshake tells that).
  virtual Expected<std::unique_ptr<RunningVm>> Boot(const VmSpec& spec) = 0;
};

// How QEMU accelerates the guest.
enum class Accel { kAuto, kKvm, kTcg };

// QEMU's `microvm` machine. `binary` "" finds qemu-system-x86_64 on PATH.
// kAuto uses KVM when /dev/kvm opens and is not PVM (whose KVM cannot run
// QEMU guests), TCG otherwise; $SANDBOX_VM_ACCEL=kvm|tcg overrides.
std::unique_ptr<VmmDriver> NewQemuDriver(std::string binary = "", Accel accel = Accel::kAuto);

// The QEMU command line for `spec` (without the program name); the agent
// socket is fd 3 of QEMU, the console its stdout. Exposed for tests.
std::vector<std::string> QemuArguments(const VmSpec& spec, bool kvm);

// Firecracker (https://github.com/firecracker-microvm/firecracker): its
// REST API over a Unix socket. Has no shared folders, so shares are refused.
std::unique_ptr<VmmDriver> NewFirecrackerDriver(std::string binary = "");

// True when KVM can run a guest here (see NewQemuDriver).
bool KvmUsable();

}  // namespace sandbox::vm

#endif  // SANDBOX_MICROVM_VMM_H_
