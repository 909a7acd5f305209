#include "microvm_cli.h"

#include <unistd.h>

#include <cmath>

#include "run.h"
#include "sandbox/microvm.h"

namespace sandbox::cli {
namespace {

constexpr std::string_view kImageUsage =
    "usage: sandbox image build --vm [--cache DIR] [--kernel-deb FILE]\n"
    "  Builds the microvm guest image: the kernel from a Debian linux-image package\n"
    "  (downloaded with apt-get unless given), and an initramfs whose /init is the\n"
    "  sandbox agent. Progress goes to stderr, the image's files to stdout.\n"
    "  --cache DIR        where images are kept (default $SANDBOX_VM_CACHE, else\n"
    "                     ~/.cache/sandbox/vm)\n"
    "  --kernel-deb FILE  the linux-image-*-amd64 .deb to take the kernel from\n";

}  // namespace

int VmImageCommand(std::span<const std::string> args) {
  VmImageOptions options;
  bool vm = false;
  if (args.size() == 1 && (args[0] == "-h" || args[0] == "--help")) {
    WriteAll(STDOUT_FILENO, kImageUsage);
    return 0;
  }
  if (args.empty() || args[0] != "build") {
    PrintError(std::string(args.empty() ? "image: missing subcommand" : "image: unknown subcommand '" + args[0] + "'") +
               ": usage: sandbox image build --vm [--cache DIR] [--kernel-deb FILE]");
    return kExitSandboxFailed;
  }
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--vm") {
      vm = true;
    } else if ((arg == "--cache" || arg == "--kernel-deb") && i + 1 < args.size()) {
      (arg == "--cache" ? options.cache_dir : options.kernel_deb) = args[++i];
    } else if (arg == "-h" || arg == "--help") {
      WriteAll(STDOUT_FILENO, kImageUsage);
      return 0;
    } else {
      PrintError("image build: unknown argument '" + arg + "'");
      WriteAll(STDERR_FILENO, kImageUsage);
      return kExitSandboxFailed;
    }
  }
  if (!vm) {
    PrintError("image build: only --vm images can be built (the microvm backend's guest)");
    return kExitSandboxFailed;
  }
  options.progress = [](std::string_view line) {
    WriteAll(STDERR_FILENO, "sandbox image: " + std::string(line) + "\n");
  };
  auto image = BuildVmImage(options);
  if (!image) {
    PrintError("image build: " + image.error().message());
    return kExitSandboxFailed;
  }
  WriteAll(STDOUT_FILENO, "kernel " + image->kernel + "\ninitramfs " + image->initramfs +
                              "\nrelease " + image->kernel_release + "\n");
  return 0;
}

Expected<std::unique_ptr<Sandbox>> MakeMicroVmSandbox(const RunFlags& flags,
                                                      const std::string& workspace) {
  if (flags.pids)
    return Fail(Error::Code::Unsupported,
                "the microvm backend cannot enforce --pids (the guest's own kernel counts them)");
  if (flags.rootfs)
    return Fail(Error::Code::InvalidArgument,
                "--rootfs needs the namespace backend; the microvm guest's system is the host's "
                "/usr shared read-only");
  MicroVmOptions options;
  options.workspace = workspace;
  options.network = flags.network;
  if (flags.memory) options.memory_mib = std::max<std::uint64_t>(64, *flags.memory >> 20);
  if (flags.cpus) options.vcpus = static_cast<unsigned>(std::max(1.0, std::ceil(*flags.cpus)));
  return NewMicroVmSandbox(options);
}

}  // namespace sandbox::cli
