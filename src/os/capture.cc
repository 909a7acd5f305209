#include "os/capture.h"

#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <array>

#include "os/syscalls.h"

namespace sandbox::os {

BoundedCapture::BoundedCapture(std::size_t limit)
    : head_limit_(limit / 2), tail_limit_(limit - limit / 2) {}

void BoundedCapture::Append(std::string_view data) {
  total_ += data.size();
  if (head_.size() < head_limit_) {
    std::size_t take = std::min(head_limit_ - head_.size(), data.size());
    head_.append(data.substr(0, take));
    data.remove_prefix(take);
  }
  if (data.empty() || tail_limit_ == 0) {
    dropped_ += tail_limit_ == 0 ? data.size() : 0;
    return;
  }
  if (tail_.size() < tail_limit_) {
    std::size_t take = std::min(tail_limit_ - tail_.size(), data.size());
    tail_.append(data.substr(0, take));
    data.remove_prefix(take);
    if (data.empty()) return;
  }
  // The ring is full: everything older than the last tail_limit_ bytes is
  // dropped. Only the final tail_limit_ bytes of `data` can survive.
  if (data.size() >= tail_limit_) {
    dropped_ += tail_limit_ + (data.size() - tail_limit_);
    data.remove_prefix(data.size() - tail_limit_);
    tail_.assign(data);
    tail_pos_ = 0;
    return;
  }
  dropped_ += data.size();
  for (std::size_t i = 0; i < data.size();) {
    std::size_t run = std::min(data.size() - i, tail_limit_ - tail_pos_);
    tail_.replace(tail_pos_, run, data.substr(i, run));
    tail_pos_ = (tail_pos_ + run) % tail_limit_;
    i += run;
  }
}

std::string BoundedCapture::Take() {
  std::string out = std::move(head_);
  if (tail_pos_ == 0) {
    out += tail_;
  } else {
    out.append(tail_, tail_pos_, std::string::npos);
    out.append(tail_, 0, tail_pos_);
  }
  head_.clear();
  tail_.clear();
  tail_pos_ = 0;
  return out;
}

namespace {

using Clock = std::chrono::steady_clock;

int MillisUntil(Clock::time_point when) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(when - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
}

// Reads what is available from `fd` into `capture`; false at end of file or
// on error. Bounded per call so one flooding stream cannot starve the others.
bool DrainSome(int fd, BoundedCapture* capture) {
  std::array<char, 65536> buffer;
  for (int rounds = 0; rounds < 16; ++rounds) {
    long n = ::read(fd, buffer.data(), buffer.size());
    if (n > 0) {
      if (capture) capture->Append(std::string_view(buffer.data(), static_cast<std::size_t>(n)));
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN;
  }
  return true;
}

}  // namespace

Expected<PumpOutcome> Pump(PumpSpec& spec) {
  PumpOutcome outcome;
  bool stdout_open = spec.stdout_fd >= 0;
  bool stderr_open = spec.stderr_fd >= 0;
  bool exited = spec.exit_fd < 0;
  bool killed = false;
  std::size_t stdin_offset = 0;
  std::optional<Clock::time_point> drain_deadline;
  if (spec.stdin_fd && spec.stdin_data.empty()) spec.stdin_fd.reset();

  auto kill_tree = [&] {
    if (spec.kill_tree) spec.kill_tree();
  };
  auto stop = [&](PumpEnd end) {
    if (killed || exited) return;
    outcome.end = end;
    outcome.finished = Clock::now();
    killed = true;
    kill_tree();
    spec.stdin_fd.reset();
  };

  for (;;) {
    if (exited && !stdout_open && !stderr_open) break;
    if (drain_deadline && Clock::now() >= *drain_deadline) break;

    std::array<pollfd, 5> fds;
    std::array<int, 5> role;
    nfds_t count = 0;
    auto add = [&](int fd, short events, int r) {
      fds[count] = pollfd{fd, events, 0};
      role[count++] = r;
    };
    if (spec.stdin_fd) add(spec.stdin_fd.get(), POLLOUT, 0);
    if (stdout_open) add(spec.stdout_fd, POLLIN, 1);
    if (stderr_open) add(spec.stderr_fd, POLLIN, 2);
    if (!exited) add(spec.exit_fd, POLLIN, 3);
    if (!killed && !exited && spec.cancel_fd >= 0) add(spec.cancel_fd, POLLIN, 4);

    int timeout = -1;
    if (drain_deadline) {
      timeout = MillisUntil(*drain_deadline);
    } else if (!killed && spec.deadline) {
      timeout = MillisUntil(*spec.deadline);
    }
    int ready = poll(fds.data(), count, timeout);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return Fail(ErrnoError(errno, "poll"));
    }
    if (ready == 0) {
      if (!killed && !exited && spec.deadline && Clock::now() >= *spec.deadline) {
        stop(PumpEnd::kTimedOut);
        drain_deadline = Clock::now() + spec.drain_grace;
      }
      continue;
    }
    for (nfds_t i = 0; i < count; ++i) {
      if (fds[i].revents == 0) continue;
      switch (role[i]) {
        case 0: {
          if (fds[i].revents & (POLLERR | POLLHUP)) {
            spec.stdin_fd.reset();
            break;
          }
          std::string_view rest = spec.stdin_data.substr(stdin_offset);
          long n = WriteNoSigpipe(spec.stdin_fd.get(), rest.data(),
                                  std::min<std::size_t>(rest.size(), 1 << 16));
          if (n > 0) stdin_offset += static_cast<std::size_t>(n);
          if ((n < 0 && n != -EAGAIN && n != -EINTR) ||
              stdin_offset == spec.stdin_data.size())
            spec.stdin_fd.reset();
          break;
        }
        case 1:
          stdout_open = DrainSome(spec.stdout_fd, spec.stdout_capture);
          break;
        case 2:
          stderr_open = DrainSome(spec.stderr_fd, spec.stderr_capture);
          break;
        case 3:
          exited = true;
          if (!killed) {
            outcome.finished = Clock::now();
            // Whatever the command left behind dies with it; its pipes then
            // reach end of file at once.
            kill_tree();
          }
          spec.stdin_fd.reset();
          drain_deadline = Clock::now() + spec.drain_grace;
          break;
        case 4:
          stop(PumpEnd::kCancelled);
          drain_deadline = Clock::now() + spec.drain_grace;
          break;
      }
    }
  }
  return outcome;
}

}  // namespace sandbox::os
