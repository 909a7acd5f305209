// The audit log of the review gate: one JSON object per line for every
// review decision and every operation the gate passed on, written
// append-only, flushed to the kernel line by line, bounded in size by
// rotation. Every string is escaped to printable ASCII, so neither a JSON
// reader nor a person running `cat` on the log can be fooled by what a
// command put in its arguments. The format is docs/audit-log.md.
#ifndef SANDBOX_AUDIT_H_
#define SANDBOX_AUDIT_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "sandbox/error.h"

namespace sandbox {

// One line of the audit log. Empty/unset fields are left out of the line.
struct AuditRecord {
  std::string event;  // "decision" or "operation"
  std::string sandbox_id;
  std::string backend;
  std::string operation;  // "exec", "write_file", ...
  bool in_session = false;
  std::vector<std::string> argv;       // exec: program then arguments
  std::string dir;                     // exec: working directory
  std::string path;                    // file operations
  std::optional<std::uint64_t> bytes;  // bytes written, appended or read
  // event "decision":
  std::string decision;  // "allow", "allow_remember", "remembered", "deny"
  std::string reviewer;
  std::string reason;
  // event "operation":
  std::optional<int> exit_code;
  std::optional<std::chrono::nanoseconds> duration;
  std::optional<bool> timed_out;
  std::optional<bool> stdout_truncated;
  std::optional<bool> stderr_truncated;
  std::optional<bool> truncated;  // ReadFileLimit
  std::optional<int> signal;
  std::string error;  // the Error's "code: message" when the operation failed
};

// Where and how big.
struct AuditOptions {
  std::string path;  // the log file; created 0600 if missing, never followed if a symlink
  // When writing a line would make the file larger than this, it is rotated:
  // PATH.N-1 -> PATH.N ... PATH -> PATH.1, and a fresh PATH is started.
  std::uint64_t max_bytes = std::uint64_t{64} << 20;
  int keep_rotated = 3;  // how many rotated files are kept (PATH.1 .. PATH.N); 0 keeps none
  bool fsync = false;    // also fdatasync after every line (slow; survives a power cut)
  // Strings longer than this are cut in the log, saying how much was cut;
  // argv holds at most max_argv entries.
  std::size_t max_field_bytes = 4096;
  std::size_t max_argv = 256;
};

// An append-only JSON-lines log. Thread-safe: lines from concurrent callers
// are never interleaved.
class AuditLog {
 public:
  // Opens (or creates) the log. Fails with a message naming the path.
  static Expected<std::shared_ptr<AuditLog>> Open(const AuditOptions& options);

  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // Appends one line with the current time, rotating first when needed.
  Status Write(const AuditRecord& record);

  // The line Write would write for `record` at `time`, without the newline.
  std::string Format(const AuditRecord& record, std::chrono::system_clock::time_point time) const;

 private:
  explicit AuditLog(AuditOptions options);
  Status OpenFile();
  Status Rotate();

  AuditOptions options_;
  std::mutex mutex_;
  int fd_ = -1;  // guarded by mutex_
  std::uint64_t size_ = 0;
};

}  // namespace sandbox

#endif  // SANDBOX_AUDIT_H_
