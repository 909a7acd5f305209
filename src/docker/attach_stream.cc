#include "docker/attach_stream.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string_view>

#include "os/syscalls.h"

namespace sandbox::docker {
namespace {

// Waits until `fd` is ready for `events` (or hung up / shut down).
void WaitFor(int fd, short events) {
  pollfd waiter{.fd = fd, .events = events, .revents = 0};
  while (::poll(&waiter, 1, -1) < 0 && errno == EINTR) {
  }
}

// Sends all of `data` to the socket `fd`; false once the peer is gone or
// the socket was shut down.
bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    long n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      WaitFor(fd, POLLOUT);
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

Expected<std::unique_ptr<AttachStream>> AttachStream::Start(os::UniqueFd attach,
                                                            std::string leftover, int stderr_fd) {
  std::unique_ptr<AttachStream> stream(new AttachStream());
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
    return Fail(os::ErrnoError(errno, "socketpair"));
  stream->relay_end_.reset(pair[0]);
  stream->read_fd_.reset(pair[1]);
  stream->write_fd_.reset(::fcntl(attach.get(), F_DUPFD_CLOEXEC, 3));
  if (!stream->write_fd_) return Fail(os::ErrnoError(errno, "dup the attach socket"));
  // The relay waits in poll(2); Stop() wakes it with shutdown(2). (The
  // descriptor shares its O_NONBLOCK with the dup RemoteSandbox writes to.)
  stream->attach_ = std::move(attach);
  stream->stderr_fd_ = stderr_fd;
  stream->thread_ = std::thread([raw = stream.get(), bytes = std::move(leftover)]() mutable {
    raw->Relay(std::move(bytes));
  });
  return stream;
}

AttachStream::~AttachStream() { Stop(); }

void AttachStream::Stop() {
  if (!thread_.joinable()) return;
  ::shutdown(attach_.get(), SHUT_RDWR);
  ::shutdown(relay_end_.get(), SHUT_RDWR);
  thread_.join();
}

std::string AttachStream::violation() const {
  return thread_.joinable() ? std::string() : violation_;
}

void AttachStream::Relay(std::string pending) {
  // Every byte here comes from the daemon on behalf of the container: the
  // header is checked before its payload is touched, and payloads are passed
  // through in bounded chunks, never buffered whole.
  unsigned char header[kFrameHeaderBytes];
  std::size_t header_have = 0;
  std::uint64_t payload_left = 0;
  int payload_type = 0;
  char buffer[64 * 1024];
  for (;;) {
    std::string_view data;
    if (!pending.empty()) {
      data = pending;
    } else {
      long n = ::recv(attach_.get(), buffer, sizeof buffer, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) {
        WaitFor(attach_.get(), POLLIN);
        continue;
      }
      if (n <= 0) break;  // the daemon closed the stream: the agent is gone
      data = std::string_view(buffer, static_cast<std::size_t>(n));
    }
    while (!data.empty()) {
      if (payload_left == 0) {
        std::size_t take = std::min(kFrameHeaderBytes - header_have, data.size());
        std::memcpy(header + header_have, data.data(), take);
        header_have += take;
        data.remove_prefix(take);
        if (header_have < kFrameHeaderBytes) break;
        header_have = 0;
        payload_type = header[0];
        if ((payload_type != 1 && payload_type != 2) || header[1] || header[2] || header[3]) {
          violation_ = "the Docker attach stream sent a malformed frame header";
          ::shutdown(relay_end_.get(), SHUT_RDWR);
          return;
        }
        payload_left = (std::uint64_t{header[4]} << 24) | (std::uint64_t{header[5]} << 16) |
                       (std::uint64_t{header[6]} << 8) | std::uint64_t{header[7]};
        continue;
      }
      std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(payload_left, data.size()));
      std::string_view chunk = data.substr(0, take);
      data.remove_prefix(take);
      payload_left -= take;
      if (payload_type == 1) {
        if (!SendAll(relay_end_.get(), chunk)) return;  // RemoteSandbox has gone
      } else if (stderr_fd_ >= 0) {
        (void)os::WriteAllNoSigpipe(stderr_fd_, chunk);
      }
    }
    pending.clear();
  }
  // End of the daemon's stream: RemoteSandbox sees end of stream too.
  ::shutdown(relay_end_.get(), SHUT_RDWR);
}

}  // namespace sandbox::docker
