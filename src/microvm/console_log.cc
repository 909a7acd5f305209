#include "microvm/console_log.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "os/syscalls.h"

namespace sandbox::vm {

ConsoleLog::ConsoleLog(os::UniqueFd source, std::size_t capacity, int copy_fd)
    : source_(std::move(source)), capacity_(capacity == 0 ? 1 : capacity), copy_fd_(copy_fd) {
  ring_.reserve(capacity_);
  thread_ = std::thread([this] { Drain(); });
}

ConsoleLog::~ConsoleLog() { Stop(); }

void ConsoleLog::Stop() {
  // shutdown wakes the blocked read(2) with end of stream.
  if (source_) ::shutdown(source_.get(), SHUT_RDWR);
  if (thread_.joinable()) thread_.join();
}

void ConsoleLog::Drain() {
  char buffer[16384];
  for (;;) {
    ssize_t n = ::read(source_.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    if (copy_fd_ >= 0) (void)os::WriteNoSigpipe(copy_fd_, buffer, static_cast<std::size_t>(n));
    std::lock_guard lock(mu_);
    total_ += static_cast<std::uint64_t>(n);
    for (ssize_t i = 0; i < n; ++i) {
      if (ring_.size() < capacity_) {
        ring_.push_back(buffer[i]);
      } else {
        ring_[next_] = buffer[i];
        next_ = (next_ + 1) % capacity_;
      }
    }
  }
}

std::string ConsoleLog::Tail() const {
  std::lock_guard lock(mu_);
  if (ring_.size() < capacity_) return ring_;
  return ring_.substr(next_) + ring_.substr(0, next_);
}

std::uint64_t ConsoleLog::total_bytes() const {
  std::lock_guard lock(mu_);
  return total_;
}

}  // namespace sandbox::vm
