#include "mcp/stdio.h"

#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include <optional>

#include "os/syscalls.h"

namespace sandbox::mcp {
namespace {

constexpr std::size_t kReadChunk = 64 * 1024;

}  // namespace

bool LineReader::Fill() {
  for (;;) {
    pollfd fds[2] = {{.fd = fd_, .events = POLLIN, .revents = 0},
                     {.fd = wake_fd_, .events = POLLIN, .revents = 0}};
    int ready = poll(fds, wake_fd_ >= 0 ? 2 : 1, -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (wake_fd_ >= 0 && fds[1].revents != 0) {
      woken_ = true;
      return false;
    }
    if (fds[0].revents == 0) continue;
    // Room for the longest line plus one read, once: the buffer then never
    // reallocates (no doubling to twice the bound, no freed copies).
    if (buffer_.capacity() < max_line_ + kReadChunk) buffer_.reserve(max_line_ + kReadChunk);
    // Drop what was consumed before growing the buffer.
    if (start_ > 0) {
      buffer_.erase(0, start_);
      scanned_ -= start_;
      start_ = 0;
    }
    const std::size_t old_size = buffer_.size();
    buffer_.resize(old_size + kReadChunk);
    ssize_t got = read(fd_, buffer_.data() + old_size, kReadChunk);
    buffer_.resize(old_size + (got > 0 ? static_cast<std::size_t>(got) : 0));
    if (got > 0) return true;
    if (got < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    return false;
  }
}

LineReader::Event LineReader::Next(std::string& line) {
  for (;;) {
    std::size_t newline = buffer_.find('\n', scanned_);
    if (newline != std::string::npos) {
      const std::size_t length = newline - start_;
      const bool was_skipping = skipping_;
      skipping_ = false;
      if (was_skipping || length > max_line_) {
        start_ = scanned_ = newline + 1;
        if (was_skipping) continue;  // the rest of a line already reported
        return Event::kTooLong;
      }
      line.assign(buffer_, start_, length);
      start_ = scanned_ = newline + 1;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return Event::kLine;
    }
    scanned_ = buffer_.size();
    if (!skipping_ && scanned_ - start_ > max_line_) {
      skipping_ = true;
      buffer_.clear();
      start_ = scanned_ = 0;
      return Event::kTooLong;
    }
    if (skipping_) {
      // Nothing of an over-long line is kept.
      buffer_.clear();
      start_ = scanned_ = 0;
    }
    if (at_end_) {
      if (start_ == buffer_.size()) return Event::kEnd;
      line.assign(buffer_, start_, buffer_.size() - start_);
      buffer_.clear();
      start_ = scanned_ = 0;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return Event::kLine;
    }
    if (!Fill()) {
      if (woken_) return Event::kEnd;  // stopped: a partial line is not a message
      at_end_ = true;
    }
  }
}

Status Serve(Server& server, int in_fd, int out_fd, int wake_fd,
             const std::function<void(std::string_view)>& log) {
  LineReader reader(in_fd, kMaxLineBytes, wake_fd);
  std::string line;
  for (;;) {
    LineReader::Event event = reader.Next(line);
    if (event == LineReader::Event::kEnd) return {};
    std::optional<std::string> reply;
    if (event == LineReader::Event::kTooLong) {
      log("refused a message longer than " + std::to_string(kMaxLineBytes) + " bytes");
      reply = Server::TooLargeResponse(kMaxLineBytes);
    } else if (line.find_first_not_of(" \t") == std::string::npos) {
      continue;  // blank lines are not messages
    } else {
      reply = server.Handle(line);
    }
    if (!reply) continue;
    reply->push_back('\n');
    SANDBOX_RETURN_IF_ERROR(os::WriteAllNoSigpipe(out_fd, *reply));
  }
}

}  // namespace sandbox::mcp
