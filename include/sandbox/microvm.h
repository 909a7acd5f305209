// The `microvm` backend (Isolation::VM): the sandbox agent as /init of a
// small virtual machine booted by a VMM (QEMU's `microvm` machine here,
// Firecracker as a second driver). This header holds what front ends (the
// CLI's run and `image build --vm`, the tests) need; the VMM drivers are in
// src/microvm/vmm.h.
#ifndef SANDBOX_MICROVM_H_
#define SANDBOX_MICROVM_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "sandbox/error.h"
#include "sandbox/sandbox.h"

namespace sandbox {

// Options of the guest image builder.
struct VmImageOptions {
  // Where the kernel package, the extracted kernel and the images are kept;
  // "" for $SANDBOX_VM_CACHE, else $XDG_CACHE_HOME/sandbox/vm, else
  // ~/.cache/sandbox/vm.
  std::string cache_dir;
  // A Debian linux-image-*-amd64 .deb to take the kernel from; "" for
  // $SANDBOX_VM_KERNEL_DEB, else one already in the cache, else one fetched
  // with `apt-get download` (the version linux-image-amd64 depends on).
  std::string kernel_deb;
  // The static sandbox-agent that becomes the guest's /init; "" for
  // $SANDBOX_AGENT, else "sandbox-agent" beside the running executable.
  std::string agent_path;
  // Called with one line per step ("extracting the kernel ..."); may be empty.
  std::function<void(std::string_view)> progress;
};

// A built guest image: files in the cache, read by every VM booted from it.
struct VmImage {
  std::string kernel;          // uncompressed vmlinux (ELF with a PVH entry)
  std::string initramfs;       // cpio (newc): /init (the agent), modules, /etc
  std::string kernel_release;  // "6.1.0-50-amd64"
};

// Builds (or finds up to date in the cache) the guest image: extracts the
// kernel and the virtio, 9p and vsock modules from the Debian kernel
// package, and writes an initramfs whose /init is the agent. Idempotent and
// cheap when nothing changed. Not thread-safe for one cache directory.
Expected<VmImage> BuildVmImage(const VmImageOptions& options);

// Options of a microvm sandbox.
struct MicroVmOptions {
  std::string workspace;  // host directory shared read-write at /workspace
  // Adds a virtio network device with user-mode networking. Not supported
  // yet: asking for it is an error, never silently ignored.
  bool network = false;
  std::uint64_t memory_mib = 512;
  unsigned vcpus = 1;
  // The image to boot; an empty kernel means BuildVmImage(image_options).
  VmImage image;
  VmImageOptions image_options;
  // "qemu" (the only driver that boots here) or "firecracker".
  std::string vmm = "qemu";
  // Where the agent's diagnostics and the guest console go: a bounded tail
  // is kept either way (see MicroVmConsoleTail); -1 for nowhere else.
  int console_fd = -1;
};

// Boots a VM running the agent as /init and returns the Sandbox talking to
// it over a virtio-serial port (Isolation::VM, no network device; every
// optional capability of the remote backend; WorkdirReporter says
// /workspace). Close() or the destructor powers the VM off and removes every
// file, socket and process it created; the VMM also dies with this process,
// even when it is killed with SIGKILL. A guest that stops answering (panic,
// power-off) makes calls fail with Unavailable. Thread-safe.
Expected<std::unique_ptr<Sandbox>> NewMicroVmSandbox(const MicroVmOptions& options);

// A warm pool of booted microvm guests, so handing one out costs no boot.
// Each guest shares a fresh, empty workspace directory of its own, made
// under `workspaces_dir`; a guest handed out is replaced by booting another
// in the background.
struct MicroVmPoolOptions {
  MicroVmOptions vm;           // its workspace is ignored: the pool makes one per guest
  std::string workspaces_dir;  // where the per-guest workspaces are made
  std::size_t size = 2;        // guests kept booted and idle
  // How long after a hand-out the guest that replaces it starts booting,
  // unless a caller is already waiting for one. A boot keeps a core busy
  // for a second or more under emulation; started at once, it competes
  // with the guest just handed out for its first commands (on 2 cores,
  // acquire -> first Exec took 26 ms with an immediate refill, 22 ms with
  // this pause; bench/microvm_bench). Zero refills at once.
  std::chrono::milliseconds refill_delay{250};
};

class MicroVmPool {
 public:
  // A guest handed out: the sandbox, and the host directory it shares as
  // /workspace (now the caller's: the pool no longer removes it).
  struct Lease {
    std::unique_ptr<Sandbox> sandbox;
    std::string workspace;
  };

  // Starts booting `size` guests in the background and returns at once.
  static Expected<std::unique_ptr<MicroVmPool>> Create(const MicroVmPoolOptions& options);
  // Stops booting, closes the idle guests and removes their workspaces.
  virtual ~MicroVmPool() = default;

  // An idle booted guest; waits while none is ready. Fails with the error
  // of the last boot when booting fails and no guest is idle. Thread-safe.
  virtual Expected<Lease> Acquire() = 0;
};

// "" when the backend can boot here (a VMM and a kernel package are
// reachable), else why not and what to install.
std::string MicroVmUnavailableReason();

}  // namespace sandbox

#endif  // SANDBOX_MICROVM_H_
