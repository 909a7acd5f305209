#include "mcp.h"

#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "flags.h"
#include "gate.h"
#include "mcp/server.h"
#include "mcp/stdio.h"
#include "os/syscalls.h"
#include "os/unique_fd.h"
#include "run.h"
#include "signal_watcher.h"

namespace sandbox::cli {
namespace {

constexpr std::string_view kUsage = R"(usage: sandbox mcp [OPTIONS]

Serves one sandbox to an MCP client (Model Context Protocol, revision
2025-06-18; 2025-03-26 too) over stdin/stdout until stdin closes, then closes
the sandbox. Tools: run_command, read_file, write_file, append_file, list_dir,
make_dir, remove.

options (those of sandbox run, without PROGRAM and --json):
  --backend local|namespace|docker|gvisor|microvm
  --isolation none|process|kernel|vm   minimum required
  --workspace DIR        host folder that becomes the sandbox root (default: current directory)
  --timeout DURATION     run_command's timeout when a call gives none (default: 10m)
  --env KEY=VALUE        repeatable; given to every command
  --dir PATH             run_command's directory when a call gives none
  --rootfs DIR           namespace backend: an unpacked root filesystem
  --network              allow network (default off where the backend can take it away)
  --memory SIZE --pids N --cpus N      resource limits where the backend supports them
  -h, --help             print this help and exit

Logs go to stderr; stdout carries protocol messages only.
)";

void Log(std::string_view message) { PrintError("mcp: " + std::string(message)); }

}  // namespace

int McpCommand(std::span<const std::string> args) {
  auto flags = ParseServeFlags(args);
  if (!flags) {
    PrintError(flags.error().message());
    return kExitSandboxFailed;
  }
  if (flags->help) {
    WriteAll(STDOUT_FILENO, kUsage);
    return 0;
  }
  if (flags->json) {
    PrintError("--json is an option of sandbox run; sandbox mcp always speaks JSON-RPC");
    return kExitSandboxFailed;
  }
  auto backend = SelectBackend(*flags);
  if (!backend) {
    PrintError(backend.error().message());
    return kExitSandboxFailed;
  }
  // Before any sandbox starts: a malformed policy is refused here. `--review
  // ask` asks on the terminal (/dev/tty), never on stdio, which is the
  // protocol's.
  auto gate = PrepareGate(*flags);
  if (!gate) {
    PrintError(gate.error().message());
    return kExitSandboxFailed;
  }
  auto wake = os::MakeEventFd();
  if (!wake) {
    PrintError(wake.error().message());
    return kExitSandboxFailed;
  }
  // A signal cancels the running call and wakes the reader, so the server
  // stops and the sandbox is closed.
  const int wake_fd = wake->get();
  SignalWatcher signals([wake_fd] {
    const std::uint64_t one = 1;
    (void)!write(wake_fd, &one, sizeof one);
  });
  signals.CancelFromNowOn();

  auto opened = OpenSandbox(*flags, *backend, *gate);
  if (!opened) {
    PrintError(opened.error().message());
    return kExitSandboxFailed;
  }
  std::unique_ptr<Sandbox> sandbox = std::move(*opened);
  const Capabilities caps = sandbox->GetCapabilities();
  Log("serving the " + caps.backend + " backend (isolation " +
      std::string(ToString(caps.isolation)) + ") on stdio");

  mcp::ToolOptions options;
  if (flags->timeout.count() > 0) options.default_timeout = flags->timeout;
  options.default_dir = flags->dir;
  options.env = flags->env;
  options.stop = signals.token();
  Status served;
  {
    mcp::Server server(*sandbox, std::move(options),
                       mcp::ServerInfo{.name = "sandbox", .version = SANDBOX_VERSION});
    served = mcp::Serve(server, STDIN_FILENO, STDOUT_FILENO, wake->get(), Log);
  }  // closes the shell sessions before the sandbox
  if (auto closed = sandbox->Close(); !closed)
    Log("warning: closing the sandbox: " + closed.error().message());
  if (signals.received() != 0) {
    Log("stopped by signal " + std::to_string(signals.received()));
    return 128 + signals.received();
  }
  if (!served) {
    Log("stopped: " + served.error().message());
    return kExitSandboxFailed;
  }
  Log("stdin closed; sandbox closed");
  return 0;
}

}  // namespace sandbox::cli
