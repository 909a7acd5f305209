// ByteStream: the two ends of a byte stream (a pipe pair, a socketpair, a
// Unix socket, later a Docker attach stream or a VM serial/vsock port) with
// reads and writes that another thread can interrupt. The wire protocol's
// transport; it knows nothing of frames.
#ifndef SANDBOX_OS_BYTE_STREAM_H_
#define SANDBOX_OS_BYTE_STREAM_H_

#include <chrono>
#include <cstddef>
#include <span>
#include <string_view>

#include "os/unique_fd.h"
#include "sandbox/error.h"

namespace sandbox::os {

// Owns the read and write descriptors of one stream (possibly one socket).
// Both are switched to non-blocking mode and driven through poll(2) together
// with an eventfd, so Interrupt() wakes a blocked reader or writer. Read is
// for one thread at a time, WriteAll for one thread at a time (callers
// serialize); Interrupt and ShutdownWrite are thread-safe.
class ByteStream {
 public:
  // `write_fd` invalid means "write to read_fd" (a socket).
  static Expected<ByteStream> Open(UniqueFd read_fd, UniqueFd write_fd);

  ByteStream(ByteStream&&) = default;
  ByteStream& operator=(ByteStream&&) = default;

  // Reads at most buffer.size() bytes, blocking until some arrive; 0 is end
  // of stream. Unavailable once Interrupt() was called.
  Expected<std::size_t> Read(std::span<char> buffer);

  // Writes all of `data`. Unavailable when the reader has gone, when
  // Interrupt() was called, or when no byte could be written for
  // `stall_timeout` (the peer stopped reading). Never raises SIGPIPE.
  Status WriteAll(std::string_view data, std::chrono::milliseconds stall_timeout);

  // Makes every blocked and future Read/WriteAll fail. Idempotent.
  void Interrupt();

  // Tells the peer no more bytes will come: shutdown(SHUT_WR) on a socket,
  // close of the write end of a pipe pair. Call only when no WriteAll runs.
  void ShutdownWrite();

 private:
  ByteStream() = default;
  int write_fd() const { return write_fd_ ? write_fd_.get() : read_fd_.get(); }

  UniqueFd read_fd_;
  UniqueFd write_fd_;  // invalid: writes go to read_fd_
  UniqueFd wake_fd_;   // eventfd, readable once interrupted
  bool write_is_socket_ = false;
  bool write_shut_ = false;
};

}  // namespace sandbox::os

#endif  // SANDBOX_OS_BYTE_STREAM_H_
