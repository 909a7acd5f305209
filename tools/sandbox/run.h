// `sandbox run`: run one command through a sandbox and exit with its status.
#ifndef SANDBOX_TOOLS_SANDBOX_RUN_H_
#define SANDBOX_TOOLS_SANDBOX_RUN_H_

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "flags.h"
#include "gate.h"
#include "sandbox/sandbox.h"

namespace sandbox::cli {

// Exit statuses of the CLI beyond the command's own (DESIGN.md section 7).
inline constexpr int kExitTimedOut = 124;       // the sandbox's timeout killed the command
inline constexpr int kExitSandboxFailed = 125;  // the sandbox itself failed, or bad usage

// Writes all of `data` to `fd`, waiting out EINTR and a non-blocking fd.
// False when the reader is gone or the write fails.
bool WriteAll(int fd, std::string_view data);

// Writes "sandbox: MESSAGE\n" to stderr.
void PrintError(std::string_view message);

// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread. main() calls it
// first, before any thread exists, so every thread inherits the mask and only
// RunCommand's signal thread ever receives them (with sigwait).
void BlockTerminationSignals();

// The backend the flags ask for (DESIGN.md section 7): the one named, else
// the fastest giving --isolation (probing what runs here), else namespace.
Expected<std::string> SelectBackend(const RunFlags& flags);

// Opens `backend` (from SelectBackend, called once) for the flags; rooted at
// --workspace or the current directory; checked against --isolation. Shared
// by `sandbox run` and `sandbox mcp`; wrapped in the review gate `gate`
// (PrepareGate, which refuses a bad policy before any sandbox starts). The
// message of a failure says what to do next.
Expected<std::unique_ptr<Sandbox>> OpenSandbox(const RunFlags& flags, const std::string& backend,
                                               const GateSetup& gate);

// Runs `sandbox run` with the arguments that follow "run" and returns the
// process exit status. Writes the command's output (or one JSON object) to
// stdout/stderr. Requires BlockTerminationSignals() to have run.
int RunCommand(std::span<const std::string> args);

}  // namespace sandbox::cli

#endif  // SANDBOX_TOOLS_SANDBOX_RUN_H_
