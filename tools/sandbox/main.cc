// The sandbox command-line tool: dispatches subcommands. Each subcommand is a
// thin adapter over the library; the contract is DESIGN.md section 7.
#include <unistd.h>

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "doctor.h"
#include "image.h"
#include "mcp.h"
#include "run.h"

// SANDBOX_VERSION comes from the build (the project's version in CMake).

namespace {

constexpr std::string_view kUsage = R"(usage: sandbox COMMAND [OPTIONS]

One isolation boundary for AI agents: every command runs through a sandbox.

commands:
  run       run one command in a sandbox and exit with its status
            (sandbox run [OPTIONS] -- PROGRAM [ARGS...]; see sandbox run --help)
  doctor    say which backends can run here, and why not
  gc        remove what sandboxes of crashed processes left behind
  image     build the image the docker and gvisor backends run
            (sandbox image build [--rootfs DIR] [--tag NAME]), or the
            microvm guest image (sandbox image build --vm)
  version   print the version
  mcp       serve a sandbox to an MCP client over stdio (see sandbox mcp --help)

options:
  -h, --help   print this help and exit
)";

}  // namespace

int main(int argc, char** argv) {
  // Before any thread exists, so that only `run`'s signal thread sees them.
  sandbox::cli::BlockTerminationSignals();

  std::vector<std::string> args(argv + (argc > 0 ? 1 : 0), argv + argc);
  if (args.empty()) {
    sandbox::cli::WriteAll(STDERR_FILENO, "sandbox: missing COMMAND\n\n");
    sandbox::cli::WriteAll(STDERR_FILENO, kUsage);
    return sandbox::cli::kExitSandboxFailed;
  }
  const std::string& command = args.front();
  if (command == "-h" || command == "--help" || command == "help") {
    sandbox::cli::WriteAll(STDOUT_FILENO, kUsage);
    return 0;
  }
  if (command == "version" || command == "--version") {
    sandbox::cli::WriteAll(STDOUT_FILENO, "sandbox " SANDBOX_VERSION "\n");
    return 0;
  }
  if (command == "run") {
    return sandbox::cli::RunCommand(std::span<const std::string>(args).subspan(1));
  }
  if (command == "doctor") {
    return sandbox::cli::DoctorCommand(std::span<const std::string>(args).subspan(1));
  }
  if (command == "gc") {
    return sandbox::cli::GcCommand(std::span<const std::string>(args).subspan(1));
  }
  if (command == "image") {
    return sandbox::cli::ImageCommand(std::span<const std::string>(args).subspan(1));
  }
  if (command == "mcp") {
    return sandbox::cli::McpCommand(std::span<const std::string>(args).subspan(1));
  }
  sandbox::cli::WriteAll(STDERR_FILENO, "sandbox: unknown command '" + command + "'\n\n");
  sandbox::cli::WriteAll(STDERR_FILENO, kUsage);
  return sandbox::cli::kExitSandboxFailed;
}
