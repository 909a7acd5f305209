#include "local/session.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <deque>
#include <mutex>
#include <random>

#include "os/capture.h"
#include "os/spawn.h"
#include "os/syscalls.h"

namespace sandbox::local {
namespace {

using Clock = std::chrono::steady_clock;

// POSIX special builtins: an error in one (a syntax error inside eval, say)
// makes a non-interactive shell exit, so they run through `command`, which
// drops that property.
constexpr std::array<std::string_view, 16> kSpecialBuiltins = {
    "break",    ":",      "continue", ".",     "eval",  "exec", "exit",  "export",
    "readonly", "return", "set",      "shift", "times", "trap", "unset", "source"};

// How many earlier calls' output FIFOs (still held by background jobs) are
// kept open and drained; older ones are closed.
constexpr std::size_t kMaxRetiredFifos = 16;
// The status line is "<32 hex nonce> <exit code>\n".
constexpr std::size_t kMaxStatusLine = 64;
// After the status arrives, how long output still held open by a background
// job is awaited before the call returns.
constexpr std::chrono::milliseconds kOutputSettle{25};

std::string RandomNonce() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string nonce;
  for (int i = 0; i < 2; ++i) {
    std::uint64_t v = rng();
    for (int j = 0; j < 16; ++j, v >>= 4) nonce.push_back(kHex[v & 15]);
  }
  return nonce;
}

bool IsSpecialBuiltin(std::string_view word) {
  for (std::string_view b : kSpecialBuiltins)
    if (b == word) return true;
  return false;
}

class LocalSession final : public Session {
 public:
  LocalSession(std::shared_ptr<const ExecConfig> config, std::unique_ptr<os::ProcessTree> tree,
               os::Child shell, os::UniqueFd control, os::UniqueFd status, std::string private_dir)
      : config_(std::move(config)),
        tree_(std::move(tree)),
        shell_(std::move(shell)),
        control_(std::move(control)),
        status_(std::move(status)),
        private_dir_(std::move(private_dir)) {}

  ~LocalSession() override { (void)Close(); }

  Expected<Result> Exec(const Context& ctx, const Command& cmd) override;

  Status Close() override {
    std::lock_guard lock(mu_);
    if (closed_) return {};
    closed_ = true;
    if (dead_reason_.empty()) dead_reason_ = "the session is closed";
    Shutdown();
    return {};
  }

 private:
  void Shutdown() {
    if (tree_) {
      tree_->KillAndWait(1000);
      (void)shell_.Kill();
      (void)shell_.Wait();
      config_->trees->Remove(tree_.get());
      tree_.reset();
    }
    control_.reset();
    status_.reset();
    retired_.clear();
    if (!private_dir_.empty()) {
      // Calls run one at a time: only the last one's files can be left (a
      // call that ends the session dies before its own cleanup runs).
      if (calls_ > 0)
        for (const char* stream : {"in", "out", "err"})
          unlink(FifoPath(calls_ - 1, stream).c_str());
      rmdir(private_dir_.c_str());
      private_dir_.clear();
    }
  }

  void Die(std::string reason) {
    dead_reason_ = std::move(reason);
    Shutdown();
  }

  std::string FifoPath(unsigned long call, const char* stream) const {
    return private_dir_ + "/" + std::to_string(call) + "." + stream;
  }

  Expected<std::string> BuildLine(const Command& cmd, unsigned long call, bool has_stdin,
                                  const std::string& nonce);
  void DrainRetired();

  std::shared_ptr<const ExecConfig> config_;
  std::mutex mu_;
  std::unique_ptr<os::ProcessTree> tree_;
  os::Child shell_;
  os::UniqueFd control_;
  os::UniqueFd status_;
  std::string private_dir_;
  std::deque<os::UniqueFd> retired_;
  unsigned long calls_ = 0;
  bool closed_ = false;
  std::string dead_reason_;
};

Expected<std::string> LocalSession::BuildLine(const Command& cmd, unsigned long call,
                                              bool has_stdin, const std::string& nonce) {
  std::string words;
  for (const std::string& entry : cmd.env) {
    auto eq = entry.find('=');
    words += entry.substr(0, eq + 1) + ShellQuote(entry.substr(eq + 1)) + " ";
  }
  if (IsSpecialBuiltin(cmd.path)) words += "command ";
  words += ShellQuote(cmd.path);
  for (const std::string& arg : cmd.args) words += " " + ShellQuote(arg);

  std::string body = words;
  if (!cmd.dir.empty() && cmd.dir != ".") {
    // The directory is checked by the fence; the shell gets its host path.
    auto dir = config_->files->OpenDirectory(cmd.dir);
    if (!dir) return Fail(dir.error());
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", dir->get());
    char target[4096];
    long n = readlink(link, target, sizeof target - 1);
    if (n < 0) return Fail(os::ErrnoError(errno, "readlink", link));
    body = "( cd -- " + ShellQuote(std::string_view(target, static_cast<std::size_t>(n))) + " && " +
           words + " )";
  }
  std::string in = has_stdin ? ShellQuote(FifoPath(call, "in")) : "/dev/null";
  // Built by appending: GCC 12 flags a chain of operator+ here (-Wrestrict,
  // a known false positive).
  std::string line = "{ ";
  line.append(body).append("\n} <").append(in);
  line.append(" >").append(ShellQuote(FifoPath(call, "out")));
  line.append(" 2>").append(ShellQuote(FifoPath(call, "err")));
  line.append(" 3>&-; printf '%s %d\\n' ").append(nonce).append(" \"$?\" >&3\n");
  return line;
}

void LocalSession::DrainRetired() {
  char buffer[65536];
  for (auto it = retired_.begin(); it != retired_.end();) {
    long n;
    while ((n = ::read(it->get(), buffer, sizeof buffer)) > 0) {
    }
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      it = retired_.erase(it);
    } else {
      ++it;
    }
  }
}

Expected<Result> LocalSession::Exec(const Context& ctx, const Command& cmd) {
  std::lock_guard lock(mu_);
  if (closed_ || !dead_reason_.empty())
    return Fail(Error::Code::Unavailable,
                dead_reason_.empty() ? "the session is closed" : dead_reason_);
  SANDBOX_RETURN_IF_ERROR(ctx.Check());
  if (cmd.path.empty()) return Fail(Error::Code::InvalidArgument, "command path is empty");
  auto has_nul = [](std::string_view s) { return s.find('\0') != std::string_view::npos; };
  if (has_nul(cmd.path) || has_nul(cmd.dir))
    return Fail(Error::Code::InvalidArgument, "the command contains a NUL byte");
  for (const std::string& arg : cmd.args)
    if (has_nul(arg)) return Fail(Error::Code::InvalidArgument, "an argument contains a NUL byte");
  for (const std::string& entry : cmd.env) {
    auto eq = entry.find('=');
    bool valid_key = eq != std::string::npos && eq > 0;
    for (std::size_t i = 0; valid_key && i < eq; ++i) {
      char c = entry[i];
      valid_key = c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                  (i > 0 && c >= '0' && c <= '9');
    }
    if (!valid_key || has_nul(entry))
      return Fail(Error::Code::InvalidArgument,
                  "environment entry '" + entry + "' is not NAME=VALUE with a shell variable name");
  }

  DrainRetired();
  unsigned long call = calls_++;
  bool has_stdin = !cmd.stdin_data.empty();
  std::string nonce = RandomNonce();
  auto line = BuildLine(cmd, call, has_stdin, nonce);
  if (!line) return Fail(line.error());

  // Per-call FIFOs: our read ends open first (non-blocking), so the shell's
  // opens for writing never block.
  std::string out_path = FifoPath(call, "out"), err_path = FifoPath(call, "err"),
              in_path = FifoPath(call, "in");
  struct Cleanup {
    std::vector<std::string> paths;
    ~Cleanup() {
      for (const auto& p : paths) unlink(p.c_str());
    }
  } cleanup{{out_path, err_path}};
  if (mkfifo(out_path.c_str(), 0600) < 0 || mkfifo(err_path.c_str(), 0600) < 0)
    return Fail(os::ErrnoError(errno, "mkfifo", out_path));
  os::UniqueFd out(open(out_path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  os::UniqueFd err(open(err_path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!out || !err) return Fail(os::ErrnoError(errno, "open fifo", out_path));
  if (has_stdin) {
    // Stdin is a file: its end of file is exact and feeding it never blocks.
    cleanup.paths.push_back(in_path);
    os::UniqueFd in(open(in_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!in) return Fail(os::ErrnoError(errno, "create", in_path));
    SANDBOX_RETURN_IF_ERROR(os::WriteAllNoSigpipe(in.get(), cmd.stdin_data));
  }

  auto cancel = CancelEvent::ForContext(ctx);
  if (!cancel) return Fail(cancel.error());
  auto start = Clock::now();
  if (auto written = os::WriteAllNoSigpipe(control_.get(), *line); !written) {
    Die("the session's shell is gone: " + written.error().message());
    return Fail(Error::Code::Unavailable, dead_reason_);
  }

  std::size_t limit = cmd.output_limit > 0 ? cmd.output_limit : config_->output_limit;
  os::BoundedCapture stdout_capture(limit), stderr_capture(limit);
  std::optional<Clock::time_point> deadline = ctx.deadline();
  if (cmd.timeout > std::chrono::nanoseconds::zero() &&
      (!deadline || start + cmd.timeout < *deadline))
    deadline = start + cmd.timeout;

  std::string status_line;
  std::optional<int> exit_code;
  std::optional<ExitStatus> shell_exit;
  bool timed_out = false;
  bool status_eof = false;
  bool out_open = true, err_open = true;
  Clock::time_point finished{};
  std::optional<Clock::time_point> settle_deadline;
  char buffer[65536];

  auto drain = [&](int fd, os::BoundedCapture& capture) {
    for (;;) {
      long n = ::read(fd, buffer, sizeof buffer);
      if (n > 0) {
        capture.Append(std::string_view(buffer, static_cast<std::size_t>(n)));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      return n < 0 && errno == EAGAIN;  // false: end of file
    }
  };

  for (;;) {
    bool done_waiting = exit_code || shell_exit || timed_out;
    if (done_waiting && !out_open && !err_open) break;
    if (settle_deadline && Clock::now() >= *settle_deadline) break;
    std::array<pollfd, 5> fds;
    std::array<int, 5> role;
    nfds_t count = 0;
    auto add = [&](int fd, int r) {
      fds[count] = pollfd{fd, POLLIN, 0};
      role[count++] = r;
    };
    if (out_open) add(out.get(), 0);
    if (err_open) add(err.get(), 1);
    if (!done_waiting) {
      if (!status_eof) add(status_.get(), 2);
      add(shell_.pidfd(), 3);
      add((*cancel)->fd(), 4);
    }
    int timeout = -1;
    auto until = [](Clock::time_point t) {
      return static_cast<int>(std::clamp<long long>(
          std::chrono::ceil<std::chrono::milliseconds>(t - Clock::now()).count(), 0, 1 << 30));
    };
    if (settle_deadline) {
      timeout = until(*settle_deadline);
    } else if (deadline) {
      timeout = until(*deadline);
    }
    int ready = poll(fds.data(), count, timeout);
    if (ready < 0 && errno != EINTR) {
      Die("the session failed: " + os::ErrnoError(errno, "poll").message());
      return Fail(Error::Code::Unavailable, dead_reason_);
    }
    if (ready == 0 && !done_waiting && deadline && Clock::now() >= *deadline) {
      timed_out = true;
      finished = Clock::now();
      (void)tree_->Kill();
      settle_deadline = Clock::now() + config_->drain_grace;
      continue;
    }
    for (nfds_t i = 0; i < count && ready > 0; ++i) {
      if (fds[i].revents == 0) continue;
      switch (role[i]) {
        case 0:
          out_open = drain(out.get(), stdout_capture);
          break;
        case 1:
          err_open = drain(err.get(), stderr_capture);
          break;
        case 2: {
          long n = ::read(status_.get(), buffer, sizeof buffer);
          if (n > 0) status_line.append(buffer, static_cast<std::size_t>(n));
          if (n == 0) {
            // The shell is exiting; its exit status follows on the pidfd.
            status_eof = true;
            break;
          }
          if (status_line.size() > kMaxStatusLine) {
            Die("the session's status channel broke; the session was closed");
            return Fail(Error::Code::Unavailable, dead_reason_);
          }
          if (auto nl = status_line.find('\n'); nl != std::string::npos) {
            std::string_view got(status_line.data(), nl);
            if (got.size() <= nonce.size() + 1 || got.substr(0, nonce.size()) != nonce ||
                got[nonce.size()] != ' ') {
              Die("the session's status channel was tampered with; the session was closed");
              return Fail(Error::Code::Unavailable, dead_reason_);
            }
            exit_code = std::atoi(std::string(got.substr(nonce.size() + 1)).c_str());
            finished = Clock::now();
            settle_deadline = finished + kOutputSettle;
          }
          break;
        }
        case 3: {
          auto status = shell_.Wait();
          shell_exit = status ? *status : ExitStatus{-1, std::nullopt};
          finished = Clock::now();
          settle_deadline = finished + config_->drain_grace;
          (void)tree_->Kill();
          break;
        }
        case 4:
          timed_out = true;
          finished = Clock::now();
          (void)tree_->Kill();
          settle_deadline = Clock::now() + config_->drain_grace;
          break;
      }
    }
  }

  // Output FIFOs still held by background jobs stay open and drained, so
  // those jobs neither block nor die of SIGPIPE.
  if (out_open) retired_.push_back(std::move(out));
  if (err_open) retired_.push_back(std::move(err));
  while (retired_.size() > kMaxRetiredFifos) retired_.pop_front();

  Result result;
  result.duration = finished - start;
  TakeOutput(stdout_capture, stderr_capture, result);
  if (timed_out) {
    result.timed_out = true;
    result.exit_code = 128 + 9;
    result.signal = 9;
    Die("the session was killed because a command timed out or was cancelled; open a new session");
  } else if (exit_code) {
    result.exit_code = *exit_code;
  } else {
    result.exit_code = shell_exit->exit_code;
    result.signal = shell_exit->signal;
    Die("the session's shell exited (status " + std::to_string(shell_exit->exit_code) +
        "); open a new session");
  }
  return result;
}

}  // namespace

std::string ShellQuote(std::string_view word) {
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

Expected<std::unique_ptr<Session>> StartLocalSession(std::shared_ptr<const ExecConfig> config,
                                                     const Context& ctx, const std::string& shell) {
  SANDBOX_RETURN_IF_ERROR(ctx.Check());
  const char* tmp = getenv("TMPDIR");
  std::string dir_template =
      std::string(tmp && *tmp == '/' ? tmp : "/tmp") + "/sandbox-session-XXXXXX";
  if (!mkdtemp(dir_template.data())) return Fail(os::ErrnoError(errno, "mkdtemp", dir_template));
  std::string private_dir = dir_template;
  struct DirGuard {
    std::string* dir;
    ~DirGuard() {
      if (dir && !dir->empty()) rmdir(dir->c_str());
    }
  } dir_guard{&private_dir};

  auto cwd = config->files->OpenDirectory("");
  if (!cwd) return Fail(cwd.error());
  auto control = os::MakePipe();
  auto status = os::MakePipe(O_NONBLOCK);
  if (!control) return Fail(control.error());
  if (!status) return Fail(status.error());
  os::UniqueFd null_fd(open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!null_fd) return Fail(os::ErrnoError(errno, "open", "/dev/null"));
  // The shell must block on its reads; only our end of status is non-blocking.
  SANDBOX_RETURN_IF_ERROR(os::SetNonBlocking(status->write.get(), false));

  auto tree = os::ProcessTree::Create(config->tree_source);
  if (!tree) return Fail(tree.error());
  SANDBOX_RETURN_IF_ERROR(config->trees->Add(tree->get()));

  os::SpawnSpec spec;
  spec.exec_path = shell;
  spec.argv = {shell, "-s"};
  spec.env = config->base_env;
  spec.cwd_fd = cwd->get();
  spec.stdin_fd = control->read.get();
  spec.stdout_fd = null_fd.get();
  spec.stderr_fd = null_fd.get();
  spec.extra_fd = status->write.get();
  spec.drop_capabilities = config->drop_capabilities;
  auto child = (*tree)->Spawn(std::move(spec));
  if (!child) {
    config->trees->Remove(tree->get());
    return Fail(Error::Code::Unavailable,
                "cannot start the session shell " + shell + ": " + child.error().message());
  }
  auto session = std::make_unique<LocalSession>(std::move(config), std::move(*tree),
                                                std::move(*child), std::move(control->write),
                                                std::move(status->read), private_dir);
  private_dir.clear();
  return std::unique_ptr<Session>(std::move(session));
}

}  // namespace sandbox::local
