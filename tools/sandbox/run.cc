#include "run.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "flags.h"
#include "gate.h"
#include "json/result_json.h"
#include "microvm_cli.h"
#include "sandbox/context.h"
#include "sandbox/docker.h"
#include "sandbox/error.h"
#include "sandbox/local.h"
#include "sandbox/namespace.h"
#include "sandbox/sandbox.h"
#include "select.h"
#include "signal_watcher.h"

namespace sandbox::cli {
namespace {

// The most standard input `sandbox run` buffers for the command.
constexpr std::size_t kMaxStdinBytes = std::size_t{256} << 20;

// The CLI's standard input, read to its end unless it is a terminal (then the
// command gets none). A closed fd 0 counts as empty.
Expected<std::string> ReadStandardInput() {
  std::string data;
  if (isatty(STDIN_FILENO)) return data;
  char buffer[64 * 1024];
  while (true) {
    ssize_t got = read(STDIN_FILENO, buffer, sizeof buffer);
    if (got == 0) return data;
    if (got > 0) {
      if (data.size() + static_cast<std::size_t>(got) > kMaxStdinBytes)
        return Fail(Error::Code::TooLarge,
                    "standard input is larger than 256 MiB; put large data in a file in the "
                    "workspace and let the command read it");
      data.append(buffer, static_cast<std::size_t>(got));
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd waiter{.fd = STDIN_FILENO, .events = POLLIN, .revents = 0};
      poll(&waiter, 1, -1);
      continue;
    }
    if (errno == EBADF) return data;
    return Fail(Error::Code::Internal,
                std::string("read standard input: ") + std::generic_category().message(errno));
  }
}

// Why a backend named on the command line cannot run in this build.
std::string BackendUnavailable(std::string_view backend) {
  std::string needs;
  if (backend == "docker") needs = "a Docker Engine at DOCKER_HOST or /var/run/docker.sock";
  if (backend == "gvisor") needs = "Docker with runsc registered as a runtime";
  if (backend == "microvm") needs = "firecracker with /dev/kvm, or qemu-system-x86_64";
  return "the " + std::string(backend) +
         " backend is not available in this build yet (it will need " + needs +
         "); use --backend local for trusted code";
}

// Refuses what the local backend cannot do: never pretend a limit.
Status CheckLocalFlags(const RunFlags& flags) {
  const char* limit = flags.memory ? "--memory"
                      : flags.pids ? "--pids"
                      : flags.cpus ? "--cpus"
                                   : nullptr;
  if (limit)
    return Fail(Error::Code::Unsupported,
                std::string("the local backend cannot enforce ") + limit +
                    "; it runs commands as plain host processes without resource limits (use "
                    "--backend namespace)");
  if (flags.rootfs)
    return Fail(Error::Code::InvalidArgument,
                "--rootfs needs the namespace backend; the local backend runs on the host's root");
  return {};
}

// The sandbox for the flags, rooted at `workspace`.
Expected<std::unique_ptr<Sandbox>> MakeSandbox(const RunFlags& flags, const std::string& backend,
                                               const std::string& workspace) {
  if (flags.image && backend != "docker" && backend != "gvisor")
    return Fail(Error::Code::InvalidArgument,
                "--image needs the docker or gvisor backend (--backend docker)");
  if (backend == "local") {
    SANDBOX_RETURN_IF_ERROR(CheckLocalFlags(flags));
    LocalOptions options;
    options.root = workspace;
    return NewLocalSandbox(options);
  }
  if (backend == "docker" || backend == "gvisor") {
    if (flags.rootfs)
      return Fail(Error::Code::InvalidArgument,
                  "--rootfs is for the namespace backend; the " + backend +
                      " backend runs an image (build one from a root filesystem with `sandbox "
                      "image build --rootfs DIR`, then pass --image)");
    DockerOptions options;
    options.workspace = workspace;
    if (flags.image) options.image = *flags.image;
    options.network = flags.network;
    options.memory_bytes = flags.memory;
    if (flags.pids) options.pids = flags.pids;
    options.cpus = flags.cpus;
    return backend == "gvisor" ? NewGvisorSandbox(options) : NewDockerSandbox(options);
  }
  if (backend == "microvm") return MakeMicroVmSandbox(flags, workspace);
  NamespaceOptions options;
  options.workspace = workspace;
  if (flags.rootfs) options.rootfs = *flags.rootfs;
  options.network = flags.network;
  options.memory_bytes = flags.memory;
  options.pids = flags.pids;
  options.cpus = flags.cpus;
  return NewNamespaceSandbox(options);
}

std::string ResultJson(const Result& result, const Capabilities& caps) {
  return json::Dump(json::ResultObject(result, caps)) + "\n";
}

void WriteResult(const Result& result, const Capabilities& caps, bool json) {
  if (json) {
    WriteAll(STDOUT_FILENO, ResultJson(result, caps));
    return;
  }
  WriteAll(STDOUT_FILENO, result.stdout_data);
  WriteAll(STDERR_FILENO, result.stderr_data);
  if (result.stdout_truncated)
    PrintError("stdout truncated: " + std::to_string(result.stdout_dropped) +
               " bytes dropped from the middle");
  if (result.stderr_truncated)
    PrintError("stderr truncated: " + std::to_string(result.stderr_dropped) +
               " bytes dropped from the middle");
}

int ExitStatusOf(const Result& result) {
  if (result.timed_out) return kExitTimedOut;
  if (result.exit_code < 0 || result.exit_code > 255) return kExitSandboxFailed;
  return result.exit_code;
}

}  // namespace

// Picks the backend for the flags (DESIGN.md section 7): the one named, else
// the fastest that gives the isolation asked for (select.h), else namespace.
// Running hostile code without isolation is never a silent default: where
// namespace cannot run, the user must ask for --backend local.
Expected<std::string> SelectBackend(const RunFlags& flags) {
  if (flags.backend) {
    const BackendOption* option = FindBackendOption(*flags.backend);
    if (option && flags.isolation && option->isolation < *flags.isolation)
      return Fail(Error::Code::InsufficientIsolation,
                  "--backend " + *flags.backend + " gives isolation " +
                      std::string(ToString(option->isolation)) + " but --isolation " +
                      std::string(ToString(*flags.isolation)) +
                      " was asked for; drop --backend to pick one that gives it");
    if (option) return *flags.backend;
    return Fail(Error::Code::Unsupported, BackendUnavailable(*flags.backend));
  }
  if (flags.isolation) return PickBackend(*flags.isolation);
  return std::string("namespace");
}

Expected<std::unique_ptr<Sandbox>> OpenSandbox(const RunFlags& flags, const std::string& backend,
                                               const GateSetup& gate) {
  std::string workspace;
  if (flags.workspace) {
    workspace = *flags.workspace;
  } else {
    std::error_code error;
    workspace = std::filesystem::current_path(error).string();
    if (error)
      return Fail(Error::Code::InvalidArgument, "cannot determine the current directory (" +
                                                    error.message() + "); pass --workspace DIR");
  }
  auto made = MakeSandbox(flags, backend, workspace);
  if (!made) {
    if (flags.backend || backend != "namespace") return Fail(made.error());
    // namespace was chosen for the user: say what to do instead.
    return Fail(made.error().code(),
                "the namespace backend" +
                    std::string(flags.isolation ? " (needed for --isolation " +
                                                      std::string(ToString(*flags.isolation)) + ")"
                                                : " (the default)") +
                    " cannot run here: " + made.error().message() +
                    ". Run `sandbox doctor` for details" +
                    (flags.isolation ? ""
                                     : "; to run trusted code without isolation, ask for "
                                       "it with --backend local"));
  }
  SANDBOX_RETURN_IF_ERROR(Require(**made, flags.isolation.value_or(Isolation::None)));
  return ApplyGate(gate, std::move(*made));
}

bool WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t written = write(fd, data.data(), data.size());
    if (written > 0) {
      data.remove_prefix(static_cast<std::size_t>(written));
    } else if (written < 0 && errno == EINTR) {
      continue;
    } else if (written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd waiter{.fd = fd, .events = POLLOUT, .revents = 0};
      poll(&waiter, 1, -1);
    } else {
      return false;
    }
  }
  return true;
}

void PrintError(std::string_view message) {
  WriteAll(STDERR_FILENO, "sandbox: " + std::string(message) + "\n");
}

void BlockTerminationSignals() {
  const sigset_t set = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int RunCommand(std::span<const std::string> args) {
  auto flags = ParseRunFlags(args);
  if (!flags) {
    PrintError(flags.error().message());
    return kExitSandboxFailed;
  }
  if (flags->help) {
    WriteAll(STDOUT_FILENO, RunUsage());
    return 0;
  }
  auto backend = SelectBackend(*flags);
  if (!backend) {
    PrintError(backend.error().message());
    return kExitSandboxFailed;
  }
  // Before any sandbox starts: a malformed policy is refused here.
  auto gate = PrepareGate(*flags);
  if (!gate) {
    PrintError(gate.error().message());
    return kExitSandboxFailed;
  }

  SignalWatcher signals;

  auto stdin_data = ReadStandardInput();
  if (!stdin_data) {
    PrintError(stdin_data.error().message());
    return kExitSandboxFailed;
  }
  signals.CancelFromNowOn();

  auto opened = OpenSandbox(*flags, *backend, *gate);
  if (!opened) {
    PrintError(opened.error().message());
    return kExitSandboxFailed;
  }
  std::unique_ptr<Sandbox> sandbox = std::move(*opened);
  const Capabilities caps = sandbox->GetCapabilities();

  Command command{
      .path = flags->program,
      .args = flags->args,
      .dir = flags->dir,
      .env = flags->env,
      .stdin_data = std::move(*stdin_data),
      .timeout = flags->timeout,
  };
  const Context ctx = Context().StopToken(signals.token());
  if (signals.received() != 0) return 128 + signals.received();
  auto result = sandbox->Exec(ctx, command);
  const int signal_number = signals.received();
  if (auto closed = sandbox->Close(); !closed)
    PrintError("warning: closing the sandbox: " + closed.error().message());

  if (!result) {
    if (signal_number != 0) return 128 + signal_number;
    PrintError(result.error().message());
    return kExitSandboxFailed;
  }
  WriteResult(*result, caps, flags->json);
  if (signal_number != 0) return 128 + signal_number;
  return ExitStatusOf(*result);
}

}  // namespace sandbox::cli
