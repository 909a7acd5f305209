// Bounded capture of an output stream, and the loop that feeds a child's
// stdin while draining its stdout and stderr.
#ifndef SANDBOX_OS_CAPTURE_H_
#define SANDBOX_OS_CAPTURE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "os/unique_fd.h"
#include "sandbox/error.h"

namespace sandbox::os {

// Keeps at most `limit` bytes of a stream: the first half and the most recent
// half, counting what was dropped in between. Memory never exceeds `limit`
// plus a constant. Not thread-safe.
class BoundedCapture {
 public:
  explicit BoundedCapture(std::size_t limit);

  void Append(std::string_view data);

  bool truncated() const { return dropped_ > 0; }
  std::uint64_t dropped() const { return dropped_; }
  std::uint64_t total() const { return total_; }

  // The kept bytes: head followed by tail. Leaves the capture empty.
  std::string Take();

 private:
  std::size_t head_limit_;
  std::size_t tail_limit_;
  std::string head_;
  std::string tail_;         // ring buffer of tail_limit_ bytes once full
  std::size_t tail_pos_ = 0; // next write position once the ring is full
  std::uint64_t dropped_ = 0;
  std::uint64_t total_ = 0;
};

// How a pumped run ended.
enum class PumpEnd { kExited, kTimedOut, kCancelled };

// The streams and events one run is pumped through. Fds must be
// non-blocking; -1 means absent. Only stdin_fd is owned (the pump closes it
// when all data is written or the child stops reading).
struct PumpSpec {
  UniqueFd stdin_fd;            // write end of the child's stdin
  std::string_view stdin_data;  // bytes to feed
  int stdout_fd = -1;
  int stderr_fd = -1;
  BoundedCapture* stdout_capture = nullptr;
  BoundedCapture* stderr_capture = nullptr;
  int exit_fd = -1;    // readable when the main process has exited (a pidfd)
  int cancel_fd = -1;  // readable when the caller cancelled (an eventfd)
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // After the main process exits (or is killed), how long to keep draining
  // pipes still held open by something outside the killed tree.
  std::chrono::milliseconds drain_grace{1000};
  // Kills the whole process tree. Called once on exit (to end stray
  // descendants) or on timeout/cancel.
  std::function<void()> kill_tree;
};

// Result of Pump: how it ended and when the main process exited (or was
// killed), for the duration.
struct PumpOutcome {
  PumpEnd end = PumpEnd::kExited;
  std::chrono::steady_clock::time_point finished;
};

// Writes stdin concurrently with draining stdout/stderr (so neither side can
// deadlock on a full pipe), until the main process has exited and both
// output pipes reached end of file (or the drain grace ran out). On
// timeout or cancellation it kills the tree and keeps what was captured.
Expected<PumpOutcome> Pump(PumpSpec& spec);

}  // namespace sandbox::os

#endif  // SANDBOX_OS_CAPTURE_H_
