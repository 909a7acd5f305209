#include "local/exec.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <functional>

#include "os/capture.h"
#include "os/spawn.h"
#include "os/syscalls.h"

namespace sandbox::local {
namespace {

constexpr const char* kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

bool HasNul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

std::string_view EnvKey(std::string_view entry) { return entry.substr(0, entry.find('=')); }

std::string LookupEnv(const std::vector<std::string>& env, std::string_view key) {
  for (auto it = env.rbegin(); it != env.rend(); ++it)
    if (EnvKey(*it) == key && it->size() > key.size()) return it->substr(key.size() + 1);
  return "";
}

}  // namespace

Status LiveTrees::Add(const os::ProcessTree* tree) {
  std::lock_guard lock(mu_);
  if (closed_) return Fail(Error::Code::Unavailable, "the sandbox is closed");
  trees_.insert(tree);
  return {};
}

void LiveTrees::Remove(const os::ProcessTree* tree) {
  std::lock_guard lock(mu_);
  trees_.erase(tree);
}

void LiveTrees::CloseAll() {
  std::lock_guard lock(mu_);
  closed_ = true;
  for (const os::ProcessTree* tree : trees_) (void)tree->Kill();
}

bool LiveTrees::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
}

std::vector<std::string> MergeEnv(const std::vector<std::string>& base,
                                  const std::vector<std::string>& extra) {
  std::vector<std::string> out;
  out.reserve(base.size() + extra.size());
  auto put = [&out](const std::string& entry) {
    std::string_view key = EnvKey(entry);
    for (std::string& existing : out) {
      if (EnvKey(existing) == key) {
        existing = entry;
        return;
      }
    }
    out.push_back(entry);
  };
  for (const std::string& entry : base) put(entry);
  for (const std::string& entry : extra) put(entry);
  return out;
}

std::vector<std::string> BuildBaseEnv(const std::vector<std::string>& allow,
                                      const std::vector<std::string>& overrides) {
  std::vector<std::string> env;
  for (const std::string& name : allow) {
    if (const char* value = getenv(name.c_str())) env.push_back(name + "=" + value);
  }
  env = MergeEnv(env, overrides);
  if (LookupEnv(env, "PATH").empty()) env = MergeEnv(env, {std::string("PATH=") + kDefaultPath});
  return env;
}

Result ExecFailureResult(const std::string& program, int err) {
  Result result;
  if (err == ENOENT || err == ENOTDIR) {
    result.exit_code = 127;
    result.stderr_data = "sandbox: " + program + ": " +
                         (program.find('/') == std::string::npos ? "command not found"
                                                                 : "No such file or directory") +
                         "\n";
  } else {
    result.exit_code = 126;
    char buffer[128];
    result.stderr_data = "sandbox: " + program + ": " + strerror_r(err, buffer, sizeof buffer) + "\n";
  }
  return result;
}

Expected<PreparedCommand> PrepareCommand(const ExecConfig& config, const Command& cmd) {
  if (cmd.path.empty()) return Fail(Error::Code::InvalidArgument, "command path is empty");
  if (HasNul(cmd.path)) return Fail(Error::Code::InvalidArgument, "command path contains a NUL byte");
  for (const std::string& arg : cmd.args)
    if (HasNul(arg)) return Fail(Error::Code::InvalidArgument, "a command argument contains a NUL byte");
  for (const std::string& entry : cmd.env) {
    if (HasNul(entry))
      return Fail(Error::Code::InvalidArgument, "an environment entry contains a NUL byte");
    auto eq = entry.find('=');
    if (eq == std::string::npos || eq == 0)
      return Fail(Error::Code::InvalidArgument,
                  "environment entry '" + entry + "' is not of the form KEY=VALUE");
  }

  PreparedCommand prepared;
  auto cwd = config.files->OpenDirectory(cmd.dir);
  if (!cwd) return Fail(cwd.error());
  prepared.cwd = std::move(*cwd);
  prepared.env = MergeEnv(config.base_env, cmd.env);
  prepared.argv.reserve(cmd.args.size() + 1);
  prepared.argv.push_back(cmd.path);
  prepared.argv.insert(prepared.argv.end(), cmd.args.begin(), cmd.args.end());

  if (cmd.path.find('/') != std::string::npos) {
    prepared.exec_path = cmd.path;
  } else if (auto found = os::FindExecutable(cmd.path, LookupEnv(prepared.env, "PATH"),
                                             prepared.cwd.get(), config.missing_names.get())) {
    prepared.exec_path = std::move(*found);
  } else {
    prepared.not_found = ExecFailureResult(cmd.path, ENOENT);
  }
  return prepared;
}

os::SpawnSpec CommandSpawnSpec(const ExecConfig& config, PreparedCommand& prepared, int stdin_fd,
                               int stdout_fd, int stderr_fd) {
  os::SpawnSpec spec;
  spec.exec_path = std::move(prepared.exec_path);
  spec.argv = std::move(prepared.argv);
  spec.env = std::move(prepared.env);
  spec.cwd_fd = prepared.cwd.get();
  spec.stdin_fd = stdin_fd;
  spec.stdout_fd = stdout_fd;
  spec.stderr_fd = stderr_fd;
  spec.drop_capabilities = config.drop_capabilities;
  return spec;
}

void TakeOutput(os::BoundedCapture& stdout_capture, os::BoundedCapture& stderr_capture,
                Result& result) {
  result.stdout_truncated = stdout_capture.truncated();
  result.stderr_truncated = stderr_capture.truncated();
  result.stdout_dropped = stdout_capture.dropped();
  result.stderr_dropped = stderr_capture.dropped();
  result.stdout_data = stdout_capture.Take();
  result.stderr_data = stderr_capture.Take();
}

Expected<std::unique_ptr<CancelEvent>> CancelEvent::ForContext(const Context& ctx) {
  std::unique_ptr<CancelEvent> event(new CancelEvent());
  auto fd = os::MakeEventFd();
  if (!fd) return Fail(fd.error());
  event->fd_ = std::move(*fd);
  if (ctx.stop_token().stop_possible())
    event->callback_.emplace(ctx.stop_token(), std::function<void()>([e = event.get()] { e->Fire(); }));
  return event;
}

void CancelEvent::Fire() {
  std::uint64_t one = 1;
  (void)!::write(fd_.get(), &one, sizeof one);
}

Expected<Result> RunToCompletion(const ExecConfig& config, const Context& ctx, const Command& cmd) {
  SANDBOX_RETURN_IF_ERROR(ctx.Check());
  auto prepared = PrepareCommand(config, cmd);
  if (!prepared) return Fail(prepared.error());
  if (prepared->not_found) return std::move(*prepared->not_found);

  auto tree = os::ProcessTree::Create(config.tree_source);
  if (!tree) return Fail(tree.error());
  SANDBOX_RETURN_IF_ERROR(config.trees->Add(tree->get()));
  LiveTreeGuard guard(*config.trees, tree->get());

  // Only our ends are non-blocking: O_NONBLOCK on the child's ends would
  // make a command's writes fail with EAGAIN when the pipe is full.
  auto in = os::MakePipe();
  auto out = os::MakePipe();
  auto err = os::MakePipe();
  if (!in) return Fail(in.error());
  if (!out) return Fail(out.error());
  if (!err) return Fail(err.error());
  SANDBOX_RETURN_IF_ERROR(os::SetNonBlocking(out->read.get(), true));
  SANDBOX_RETURN_IF_ERROR(os::SetNonBlocking(err->read.get(), true));
  auto cancel = CancelEvent::ForContext(ctx);
  if (!cancel) return Fail(cancel.error());

  os::SpawnSpec spec =
      CommandSpawnSpec(config, *prepared, in->read.get(), out->write.get(), err->write.get());

  auto start = std::chrono::steady_clock::now();
  os::ExecFailure failure{};
  auto child = (*tree)->Spawn(std::move(spec), &failure);
  if (!child) {
    if (failure.step && std::string_view(failure.step) == "execve")
      return ExecFailureResult(cmd.path, failure.err);
    return Fail(child.error());
  }
  in->read.reset();
  out->write.reset();
  err->write.reset();

  std::size_t limit = cmd.output_limit > 0 ? cmd.output_limit : config.output_limit;
  os::BoundedCapture stdout_capture(limit), stderr_capture(limit);
  os::PumpSpec pump;
  if (!cmd.stdin_data.empty()) SANDBOX_RETURN_IF_ERROR(os::SetNonBlocking(in->write.get(), true));
  pump.stdin_fd = std::move(in->write);
  pump.stdin_data = cmd.stdin_data;
  pump.stdout_fd = out->read.get();
  pump.stderr_fd = err->read.get();
  pump.stdout_capture = &stdout_capture;
  pump.stderr_capture = &stderr_capture;
  pump.exit_fd = child->pidfd();
  pump.cancel_fd = (*cancel)->fd();
  pump.drain_grace = config.drain_grace;
  std::optional<std::chrono::steady_clock::time_point> deadline = ctx.deadline();
  if (cmd.timeout > std::chrono::nanoseconds::zero()) {
    auto by_timeout = start + cmd.timeout;
    if (!deadline || by_timeout < *deadline) deadline = by_timeout;
  }
  pump.deadline = deadline;
  const os::ProcessTree* live = tree->get();
  pump.kill_tree = [live] { (void)live->Kill(); };

  auto outcome = os::Pump(pump);
  if (!outcome) {
    (void)live->Kill();
    return Fail(outcome.error());
  }
  auto status = child->Wait();
  if (!status) return Fail(status.error());

  Result result;
  result.exit_code = status->exit_code;
  result.signal = status->signal;
  result.timed_out = outcome->end != os::PumpEnd::kExited;
  result.duration = outcome->finished - start;
  TakeOutput(stdout_capture, stderr_capture, result);
  return result;
}

}  // namespace sandbox::local
