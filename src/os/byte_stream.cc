#include "os/byte_stream.h"

#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "os/syscalls.h"

namespace sandbox::os {
namespace {

Error Interrupted() {
  return Error(Error::Code::Unavailable, "the stream to the sandbox agent was shut down");
}

bool IsSocket(int fd) {
  struct stat st {};
  return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

}  // namespace

Expected<ByteStream> ByteStream::Open(UniqueFd read_fd, UniqueFd write_fd) {
  if (!read_fd) return Fail(Error::Code::InvalidArgument, "the stream needs a readable fd");
  ByteStream stream;
  stream.read_fd_ = std::move(read_fd);
  if (write_fd && write_fd.get() != stream.read_fd_.get()) stream.write_fd_ = std::move(write_fd);
  else (void)write_fd.release();  // the same descriptor, owned once
  SANDBOX_RETURN_IF_ERROR(SetNonBlocking(stream.read_fd_.get(), true));
  if (stream.write_fd_) SANDBOX_RETURN_IF_ERROR(SetNonBlocking(stream.write_fd_.get(), true));
  auto wake = MakeEventFd();
  if (!wake) return Fail(wake.error());
  stream.wake_fd_ = std::move(*wake);
  stream.write_is_socket_ = IsSocket(stream.write_fd());
  return stream;
}

Expected<std::size_t> ByteStream::Read(std::span<char> buffer) {
  for (;;) {
    long n = ::read(read_fd_.get(), buffer.data(), buffer.size());
    if (n >= 0) return static_cast<std::size_t>(n);
    if (errno == EINTR) continue;
    if (errno == ECONNRESET) return 0;
    if (errno != EAGAIN) return Fail(ErrnoError(errno, "read from the sandbox agent's stream"));
    pollfd fds[2] = {{read_fd_.get(), POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR)
      return Fail(ErrnoError(errno, "poll the sandbox agent's stream"));
    if (fds[1].revents) return Fail(Interrupted());
  }
}

Status ByteStream::WriteAll(std::string_view data, std::chrono::milliseconds stall_timeout) {
  if (write_shut_) return Fail(Error::Code::Unavailable, "the stream to the sandbox agent is shut down");
  const int fd = write_fd();
  while (!data.empty()) {
    long n;
    if (write_is_socket_) {
      do {
        n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      } while (n < 0 && errno == EINTR);
      if (n < 0) n = -errno;
    } else {
      n = WriteNoSigpipe(fd, data.data(), data.size());
    }
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n == -EPIPE || n == -ECONNRESET)
      return Fail(Error::Code::Unavailable, "the sandbox agent's stream was closed by the peer");
    if (n != -EAGAIN && n != 0)
      return Fail(ErrnoError(static_cast<int>(-n), "write to the sandbox agent's stream"));
    pollfd fds[2] = {{fd, POLLOUT, 0}, {wake_fd_.get(), POLLIN, 0}};
    int ready = ::poll(fds, 2, static_cast<int>(stall_timeout.count()));
    if (ready < 0 && errno != EINTR) return Fail(ErrnoError(errno, "poll the sandbox agent's stream"));
    if (fds[1].revents) return Fail(Interrupted());
    if (ready == 0)
      return Fail(Error::Code::Unavailable,
                  "the peer has not read from the stream for " +
                      std::to_string(stall_timeout.count()) + " ms");
  }
  return {};
}

void ByteStream::Interrupt() {
  if (!wake_fd_) return;
  std::uint64_t one = 1;
  (void)!::write(wake_fd_.get(), &one, sizeof one);
}

void ByteStream::ShutdownWrite() {
  if (write_shut_) return;
  write_shut_ = true;
  if (write_fd_) {
    write_fd_.reset();
  } else if (write_is_socket_) {
    ::shutdown(read_fd_.get(), SHUT_WR);
  }
}

}  // namespace sandbox::os
