// The stdio transport of MCP: newline-delimited JSON-RPC messages, read with
// a bound on the length of a line.
#ifndef SANDBOX_MCP_STDIO_H_
#define SANDBOX_MCP_STDIO_H_

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "mcp/server.h"
#include "sandbox/error.h"

namespace sandbox::mcp {

// The longest message `sandbox mcp` accepts (write_file content included).
inline constexpr std::size_t kMaxLineBytes = std::size_t{16} << 20;

// Splits a byte stream into lines without ever holding more than
// `max_line` bytes of one line (plus one read buffer): a longer line is
// reported as kTooLong once and its bytes are skipped up to the next
// newline unbuffered. Owns nothing; the fd is the caller's. Not thread-safe.
class LineReader {
 public:
  enum class Event { kLine, kTooLong, kEnd };

  LineReader(int fd, std::size_t max_line, int wake_fd = -1)
      : fd_(fd), wake_fd_(wake_fd), max_line_(max_line) {}

  // The next event. kLine fills `line` (without "\n" or a trailing "\r");
  // kEnd is end of input, a read error, or `wake_fd` becoming readable. A
  // last line without a newline is still a line.
  Event Next(std::string& line);

 private:
  bool Fill();  // reads more into buffer_; false at the end

  int fd_;
  int wake_fd_;
  std::size_t max_line_;
  std::string buffer_;       // bytes read; those before start_ are consumed
  std::size_t start_ = 0;    // where the unconsumed bytes begin
  std::size_t scanned_ = 0;  // buffer_[start_, scanned_) holds no newline
  bool skipping_ = false;  // inside a line that was too long
  bool at_end_ = false;
  bool woken_ = false;     // wake_fd_ fired: end now
};

// Serves `server` on `in_fd`/`out_fd` until input ends (or `wake_fd`, when
// not -1, becomes readable): one response line per request, in order.
// Requests still buffered when input ends are answered. `log` gets one line
// per notable event (for stderr; never stdout). Fails only when `out_fd`
// cannot be written (the client is gone).
Status Serve(Server& server, int in_fd, int out_fd, int wake_fd,
             const std::function<void(std::string_view)>& log);

}  // namespace sandbox::mcp

#endif  // SANDBOX_MCP_STDIO_H_
