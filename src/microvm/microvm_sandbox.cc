// NewMicroVmSandbox: BuildVmImage + a VMM driver's Boot + NewRemoteSandbox
// over the agent's virtio-serial port.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <mutex>

#include "microvm/host_tools.h"
#include "microvm/vmm.h"
#include "sandbox/microvm.h"
#include "sandbox/context.h"
#include "sandbox/remote.h"

namespace sandbox {
namespace {

namespace fs = std::filesystem;

// The shares every guest mounts: the host's /usr read-only as its system
// (the initramfs links /bin, /lib, ... into it), the workspace read-write.
std::vector<vm::VmShare> Shares(const std::string& workspace) {
  std::vector<vm::VmShare> shares = {
      {.tag = "usr", .host_path = "/usr", .guest_path = "/usr", .read_only = true},
  };
  // Top-level system directories not merged into /usr on this host.
  for (const char* name : {"bin", "sbin", "lib", "lib64"}) {
    std::error_code ec;
    fs::path host = fs::path("/") / name;
    if (fs::is_directory(host, ec) && !fs::is_symlink(host, ec))
      shares.push_back({.tag = name, .host_path = host, .guest_path = host, .read_only = true});
  }
  shares.push_back(
      {.tag = "workspace", .host_path = workspace, .guest_path = "/workspace", .read_only = false});
  return shares;
}

// The image to boot. One built here is marked used by BuildVmImage; one the
// caller built (a pool boots from one image for as long as it lives) is
// marked here, so the cache keeps it.
Expected<VmImage> DefaultImage(const MicroVmOptions& options) {
  if (options.image.kernel.empty()) return BuildVmImage(options.image_options);
  vm::MarkImageUsed(options.image.initramfs);
  return options.image;
}

}  // namespace

std::string MicroVmUnavailableReason() {
  auto qemu = vm::FindTool(vm::QemuBinary(), "qemu-system-x86");
  return qemu ? std::string() : qemu.error().message();
}

Expected<std::unique_ptr<Sandbox>> NewMicroVmSandbox(const MicroVmOptions& options) {
  if (options.network)
    return Fail(Error::Code::Unsupported,
                "the microvm backend has no guest networking yet: run without --network");
  std::unique_ptr<vm::VmmDriver> driver;
  if (options.vmm == "qemu" || options.vmm.empty()) {
    driver = vm::NewQemuDriver();
  } else if (options.vmm == "firecracker") {
    driver = vm::NewFirecrackerDriver();
  } else {
    return Fail(Error::Code::InvalidArgument,
                "unknown VMM '" + options.vmm + "' (want qemu or firecracker)");
  }
  std::error_code ec;
  std::string workspace =
      fs::canonical(options.workspace.empty() ? "." : options.workspace, ec).string();
  if (ec) return Fail(Error::Code::NotFound, "workspace '" + options.workspace + "': " + ec.message());
  if (!fs::is_directory(workspace, ec))
    return Fail(Error::Code::NotADirectory, "workspace '" + workspace + "' is not a directory");
  auto image = DefaultImage(options);
  if (!image) return Fail(image.error());

  vm::VmSpec spec;
  spec.kernel = image->kernel;
  spec.initramfs = image->initramfs;
  spec.vcpus = options.vcpus;
  spec.memory_mib = options.memory_mib;
  spec.shares = Shares(workspace);
  spec.console_fd = options.console_fd;
  auto booted = driver->Boot(spec);
  if (!booted) return Fail(booted.error());
  std::shared_ptr<vm::RunningVm> vm = std::move(*booted);

  RemoteOptions remote;
  remote.read_fd = vm->TakeAgentStream().release();
  remote.write_fd = -1;
  remote.capabilities = Capabilities{
      .isolation = Isolation::VM,
      .network = false,
      .backend = "microvm",
      .detail = std::string(driver->name()) + " " +
                (driver->name() == "qemu" ? (vm::KvmUsable() ? "kvm" : "tcg (software emulation)")
                                          : "") +
                ", guest kernel " + image->kernel_release};
  remote.handshake_timeout = std::chrono::milliseconds(30000);
  remote.on_close = [vm] { return vm->PowerOff(); };
  auto sandbox = NewRemoteSandbox(std::move(remote));
  if (!sandbox) {
    (void)vm->PowerOff();
    std::string tail = vm->ConsoleTail();
    if (tail.size() > 4096) tail = tail.substr(tail.size() - 4096);
    return Fail(Error::Code::Unavailable, "the microvm guest did not start its agent (" +
                                              sandbox.error().message() + "); console:\n" + tail);
  }
  // One shell first, so the caller's first command starts warm: under
  // emulation, pulling the shell and the C library through 9p the first
  // time costs hundreds of milliseconds, more than a short timeout allows.
  // Named as most commands are, so the agent's PATH search has run once
  // too (its first run, translated afresh, cost the first command of a
  // pooled guest about 6 ms more).
  auto warm = (*sandbox)->Exec(Context::WithTimeout(std::chrono::seconds(30)),
                               Command{.path = "sh", .args = {"-c", "true"}});
  if (!warm || warm->exit_code != 0)
    return Fail(Error::Code::Unavailable,
                "the microvm guest cannot run /bin/sh from the host's /usr: " +
                    (warm ? warm->stderr_data : warm.error().message()));
  return sandbox;
}

}  // namespace sandbox
