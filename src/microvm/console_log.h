// The guest console, drained from the VMM as it arrives into a bounded tail:
// a guest flooding its console costs the host a fixed amount of memory (and
// a thread's reading), never more.
#ifndef SANDBOX_MICROVM_CONSOLE_LOG_H_
#define SANDBOX_MICROVM_CONSOLE_LOG_H_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "os/unique_fd.h"

namespace sandbox::vm {

// Reads `source` (a socket) on a thread of its own until end of stream or
// Stop(), keeping the last `capacity` bytes and copying everything to
// `copy_fd` (borrowed, -1 for none) on the way. Thread-safe.
class ConsoleLog {
 public:
  ConsoleLog(os::UniqueFd source, std::size_t capacity, int copy_fd);
  ~ConsoleLog();
  ConsoleLog(const ConsoleLog&) = delete;
  ConsoleLog& operator=(const ConsoleLog&) = delete;

  // The kept bytes, oldest first.
  std::string Tail() const;
  // Every byte read so far (the tail is the last `capacity` of them).
  std::uint64_t total_bytes() const;
  // Stops reading and joins the thread. Idempotent.
  void Stop();

 private:
  void Drain();

  os::UniqueFd source_;
  const std::size_t capacity_;
  const int copy_fd_;
  mutable std::mutex mu_;
  std::string ring_;       // capacity_ bytes once full
  std::size_t next_ = 0;   // where the next byte goes once full
  std::uint64_t total_ = 0;
  std::thread thread_;
};

}  // namespace sandbox::vm

#endif  // SANDBOX_MICROVM_CONSOLE_LOG_H_
