#include "image.h"

#include <unistd.h>

#include <string>
#include <string_view>

#include "microvm_cli.h"
#include "run.h"
#include "sandbox/docker.h"

namespace sandbox::cli {
namespace {

constexpr std::string_view kImageUsage = R"(usage: sandbox image build [--rootfs DIR] [--tag NAME]
       sandbox image build --vm [--cache DIR] [--kernel-deb FILE]

Builds a Docker image for the docker and gvisor backends through the Docker
Engine's import (no registry needed), labelled dev.sandbox.owner=image.

  --rootfs DIR   the root filesystem to import (default: one made from the
                 host's static busybox, /bin/busybox from busybox-static)
  --tag NAME     the image's name (default: sandbox-default:latest, the image
                 the backends run unless given --image)

The daemon is the one at DOCKER_HOST, else unix:///var/run/docker.sock.
With --vm it builds the microvm backend's guest image instead
(`sandbox image build --vm --help`).
)";

}  // namespace

int ImageCommand(std::span<const std::string> args) {
  for (const std::string& arg : args)
    if (arg == "--vm") return VmImageCommand(args);
  if (args.empty() || args.front() == "-h" || args.front() == "--help") {
    WriteAll(args.empty() ? STDERR_FILENO : STDOUT_FILENO, kImageUsage);
    return args.empty() ? kExitSandboxFailed : 0;
  }
  if (args.front() != "build") {
    PrintError("image: unknown subcommand '" + args.front() + "' (expected build)");
    return kExitSandboxFailed;
  }
  std::string rootfs, tag;
  for (std::size_t i = 1; i < args.size(); ++i) {
    std::string_view arg = args[i];
    std::string* target = arg == "--rootfs" ? &rootfs : arg == "--tag" ? &tag : nullptr;
    if (arg == "-h" || arg == "--help") {
      WriteAll(STDOUT_FILENO, kImageUsage);
      return 0;
    }
    if (!target) {
      PrintError("image build: unknown argument '" + std::string(arg) + "'");
      return kExitSandboxFailed;
    }
    if (i + 1 >= args.size() || args[i + 1].empty()) {
      PrintError("image build: " + std::string(arg) + " needs a value");
      return kExitSandboxFailed;
    }
    *target = args[++i];
  }
  auto built = BuildDockerImage(rootfs, tag, [](const std::string& line) {
    WriteAll(STDERR_FILENO, "sandbox image: " + line + "\n");
  });
  if (!built) {
    PrintError(built.error().message());
    return kExitSandboxFailed;
  }
  WriteAll(STDOUT_FILENO, (tag.empty() ? std::string(kDefaultDockerImage) : tag) + "\n");
  return 0;
}

}  // namespace sandbox::cli
