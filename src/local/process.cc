#include "local/process.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cstdint>
#include <mutex>
#include <thread>

#include "os/spawn.h"
#include "os/syscalls.h"

namespace sandbox::local {
namespace {

// The process's stdin: a blocking pipe write end.
class PipeWriter final : public Writer {
 public:
  explicit PipeWriter(os::UniqueFd fd) : fd_(std::move(fd)) {}
  Status Write(std::string_view data) override {
    std::lock_guard lock(mu_);
    if (!fd_) return Fail(Error::Code::Unavailable, "stdin is closed");
    return os::WriteAllNoSigpipe(fd_.get(), data);
  }
  Status Close() override {
    std::lock_guard lock(mu_);
    fd_.reset();
    return {};
  }

 private:
  std::mutex mu_;
  os::UniqueFd fd_;
};

// The process's stdout: a blocking pipe read end.
class PipeReader final : public Reader {
 public:
  explicit PipeReader(os::UniqueFd fd) : fd_(std::move(fd)) {}
  Expected<std::size_t> Read(std::span<char> buffer) override {
    for (;;) {
      long n = ::read(fd_.get(), buffer.data(), buffer.size());
      if (n >= 0) return static_cast<std::size_t>(n);
      if (errno != EINTR) return Fail(os::ErrnoError(errno, "read stdout"));
    }
  }

 private:
  os::UniqueFd fd_;
};

// A bounded ring of the most recent bytes. Thread-safe.
class Ring {
 public:
  explicit Ring(std::size_t capacity) : capacity_(capacity) {}
  void Append(std::string_view data) {
    std::lock_guard lock(mu_);
    if (capacity_ == 0) return;
    if (data.size() >= capacity_) {
      bytes_.assign(data.substr(data.size() - capacity_));
      return;
    }
    bytes_.append(data);
    if (bytes_.size() > capacity_) bytes_.erase(0, bytes_.size() - capacity_);
  }
  std::string Snapshot() const {
    std::lock_guard lock(mu_);
    return bytes_;
  }

 private:
  mutable std::mutex mu_;
  std::size_t capacity_;
  std::string bytes_;
};

class LocalProcess final : public Process {
 public:
  LocalProcess(std::unique_ptr<os::ProcessTree> tree, std::shared_ptr<const ExecConfig> config,
               os::Child child, os::UniqueFd stdin_fd, os::UniqueFd stdout_fd,
               os::UniqueFd stderr_fd, os::UniqueFd stop_fd, std::size_t ring_bytes)
      : tree_(std::move(tree)),
        config_(std::move(config)),
        child_(std::move(child)),
        stdin_(std::move(stdin_fd)),
        stdout_(std::move(stdout_fd)),
        stderr_ring_(ring_bytes),
        stderr_fd_(std::move(stderr_fd)),
        stop_fd_(std::move(stop_fd)) {
    stderr_thread_ = std::thread([this] { DrainStderrUntilStopped(); });
  }

  ~LocalProcess() override {
    (void)Kill();
    (void)Wait();
    std::uint64_t one = 1;
    (void)::write(stop_fd_.get(), &one, sizeof one);
    if (stderr_thread_.joinable()) stderr_thread_.join();
    config_->trees->Remove(tree_.get());
  }

  Writer& Stdin() override { return stdin_; }
  Reader& Stdout() override { return stdout_; }
  std::string StderrSnapshot() override { return stderr_ring_.Snapshot(); }

  Expected<ExitStatus> Wait() override {
    std::call_once(wait_once_, [this] {
      auto status = child_.Wait();
      // Whatever the process wrote to stderr before it exited is in the pipe
      // now: take it, so a snapshot after Wait holds the process's last words.
      DrainAvailableStderr();
      if (status) {
        status_ = *status;
      } else {
        wait_error_ = status.error();
      }
    });
    if (status_) return *status_;
    return Fail(*wait_error_);
  }

  Status Kill() override { return tree_->Kill(); }

 private:
  // Reads what the stderr pipe holds right now (it is non-blocking) into the
  // ring. Serialized, so chunks land in the order they were written.
  // Returns false at end of file.
  bool DrainAvailableStderr() {
    std::lock_guard lock(drain_mu_);
    if (stderr_eof_) return false;
    char buffer[16384];
    for (;;) {
      long n = ::read(stderr_fd_.get(), buffer, sizeof buffer);
      if (n > 0) {
        stderr_ring_.Append(std::string_view(buffer, static_cast<std::size_t>(n)));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return true;
      stderr_eof_ = true;
      return false;
    }
  }

  void DrainStderrUntilStopped() {
    for (;;) {
      pollfd fds[2] = {{stderr_fd_.get(), POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[1].revents) return;
      if (!DrainAvailableStderr()) return;
    }
  }

  std::unique_ptr<os::ProcessTree> tree_;  // LiveTrees keys on its address
  std::shared_ptr<const ExecConfig> config_;
  os::Child child_;
  PipeWriter stdin_;
  PipeReader stdout_;
  Ring stderr_ring_;
  os::UniqueFd stderr_fd_;  // non-blocking
  os::UniqueFd stop_fd_;    // eventfd: the drain thread stops when it is signalled
  std::mutex drain_mu_;
  bool stderr_eof_ = false;  // guarded by drain_mu_
  std::thread stderr_thread_;
  std::once_flag wait_once_;
  std::optional<ExitStatus> status_;
  std::optional<Error> wait_error_;
};

}  // namespace

Expected<std::unique_ptr<Process>> StartLocalProcess(std::shared_ptr<const ExecConfig> config,
                                                     const Context& ctx,
                                                     const Command& cmd,
                                                     std::size_t stderr_ring_bytes) {
  SANDBOX_RETURN_IF_ERROR(ctx.Check());
  auto prepared = PrepareCommand(*config, cmd);
  if (!prepared) return Fail(prepared.error());
  if (prepared->not_found)
    return Fail(Error::Code::NotFound, "cannot start '" + cmd.path + "': command not found");

  auto tree = os::ProcessTree::Create(config->tree_source);
  if (!tree) return Fail(tree.error());
  auto in = os::MakePipe();
  auto out = os::MakePipe();
  auto err = os::MakePipe();
  auto stop = os::MakeEventFd();
  if (!in) return Fail(in.error());
  if (!out) return Fail(out.error());
  if (!err) return Fail(err.error());
  if (!stop) return Fail(stop.error());
  SANDBOX_RETURN_IF_ERROR(os::SetNonBlocking(err->read.get(), true));

  os::SpawnSpec spec =
      CommandSpawnSpec(*config, *prepared, in->read.get(), out->write.get(), err->write.get());
  SANDBOX_RETURN_IF_ERROR(config->trees->Add(tree->get()));
  auto child = (*tree)->Spawn(std::move(spec));
  if (!child) {
    config->trees->Remove(tree->get());
    return Fail(child.error().code(), "cannot start '" + cmd.path + "': " + child.error().message());
  }
  auto process = std::make_unique<LocalProcess>(std::move(*tree), config, std::move(*child),
                                                std::move(in->write), std::move(out->read),
                                                std::move(err->read), std::move(*stop),
                                                stderr_ring_bytes);
  return std::unique_ptr<Process>(std::move(process));
}

}  // namespace sandbox::local
