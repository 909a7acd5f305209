#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "os/syscalls.h"
#include "sandbox/audit.h"

namespace sandbox {
namespace {

using Json = nlohmann::ordered_json;

// "2026-12-01T05:10:00.123Z".
std::string Rfc3339(std::chrono::system_clock::time_point time) {
  const auto since_epoch = time.time_since_epoch();
  const auto seconds = std::chrono::floor<std::chrono::seconds>(since_epoch);
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch - seconds);
  const time_t whole = static_cast<time_t>(seconds.count());
  struct tm utc {};
  gmtime_r(&whole, &utc);
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<int>(millis.count()));
  return buffer;
}

}  // namespace

AuditLog::AuditLog(AuditOptions options) : options_(std::move(options)) {}

AuditLog::~AuditLog() {
  if (fd_ >= 0) close(fd_);
}

Expected<std::shared_ptr<AuditLog>> AuditLog::Open(const AuditOptions& options) {
  if (options.path.empty())
    return Fail(Error::Code::InvalidArgument, "the audit log needs a file path");
  if (options.max_bytes < 4096)
    return Fail(Error::Code::InvalidArgument,
                "the audit log's size bound must be at least 4096 bytes");
  if (options.keep_rotated < 0 || options.keep_rotated > 1000)
    return Fail(Error::Code::InvalidArgument,
                "the audit log keeps between 0 and 1000 rotated files");
  std::shared_ptr<AuditLog> log(new AuditLog(options));
  SANDBOX_RETURN_IF_ERROR(log->OpenFile());
  return log;
}

Status AuditLog::OpenFile() {
  // O_APPEND: every write lands at the end, even with another writer.
  // O_NOFOLLOW: a symlink planted at the path is refused, not followed.
  // O_NONBLOCK: a FIFO planted there fails instead of hanging the open
  // (it changes nothing for the regular file the log must be).
  int fd =
      open(options_.path.c_str(),
           O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK, 0600);
  if (fd < 0) {
    Error error = os::ErrnoError(errno, "open", options_.path);
    return Fail(error.code(), "cannot open the audit log: " + error.message());
  }
  struct stat info {};
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    close(fd);
    return Fail(Error::Code::NotARegularFile,
                "the audit log '" + options_.path + "' is not a regular file");
  }
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
  size_ = static_cast<std::uint64_t>(info.st_size);
  return {};
}

Status AuditLog::Rotate() {
  const std::string& path = options_.path;
  if (options_.keep_rotated == 0) {
    if (unlink(path.c_str()) != 0 && errno != ENOENT)
      return Fail(os::ErrnoError(errno, "unlink", path));
  } else {
    for (int i = options_.keep_rotated - 1; i >= 1; --i) {
      std::string from = path + "." + std::to_string(i);
      std::string to = path + "." + std::to_string(i + 1);
      if (rename(from.c_str(), to.c_str()) != 0 && errno != ENOENT)
        return Fail(os::ErrnoError(errno, "rename", from));
    }
    if (rename(path.c_str(), (path + ".1").c_str()) != 0 && errno != ENOENT)
      return Fail(os::ErrnoError(errno, "rename", path));
  }
  return OpenFile();
}

std::string AuditLog::Format(const AuditRecord& record,
                             std::chrono::system_clock::time_point time) const {
  const std::size_t max = options_.max_field_bytes;
  auto cut = [max](const std::string& text) -> std::string {
    if (text.size() <= max) return text;
    return text.substr(0, max) + "...[" + std::to_string(text.size() - max) + " more bytes]";
  };
  Json line;
  line["time"] = Rfc3339(time);
  line["event"] = record.event;
  line["sandbox"] = cut(record.sandbox_id);
  if (!record.backend.empty()) line["backend"] = cut(record.backend);
  line["operation"] = record.operation;
  if (record.in_session) line["session"] = true;
  if (!record.argv.empty()) {
    Json argv = Json::array();
    for (std::size_t i = 0; i < record.argv.size() && i < options_.max_argv; ++i)
      argv.push_back(cut(record.argv[i]));
    line["argv"] = std::move(argv);
    if (record.argv.size() > options_.max_argv)
      line["argv_omitted"] = record.argv.size() - options_.max_argv;
  }
  if (record.operation == "exec") line["dir"] = cut(record.dir);
  if (!record.path.empty()) line["path"] = cut(record.path);
  if (record.bytes) line["bytes"] = *record.bytes;
  if (!record.decision.empty()) line["decision"] = record.decision;
  if (!record.reviewer.empty()) line["reviewer"] = cut(record.reviewer);
  if (!record.reason.empty()) line["reason"] = cut(record.reason);
  if (record.exit_code) line["exit_code"] = *record.exit_code;
  if (record.signal) line["signal"] = *record.signal;
  if (record.duration) line["duration_ms"] = static_cast<double>(record.duration->count()) / 1e6;
  if (record.timed_out) line["timed_out"] = *record.timed_out;
  if (record.stdout_truncated) line["stdout_truncated"] = *record.stdout_truncated;
  if (record.stderr_truncated) line["stderr_truncated"] = *record.stderr_truncated;
  if (record.truncated) line["truncated"] = *record.truncated;
  if (!record.error.empty()) line["error"] = cut(record.error);
  // ensure_ascii: every byte outside printable ASCII is a \u escape (control
  // characters, DEL, C1 controls, bidi overrides); invalid UTF-8 becomes
  // U+FFFD rather than an exception.
  return line.dump(-1, ' ', /*ensure_ascii=*/true, Json::error_handler_t::replace);
}

Status AuditLog::Write(const AuditRecord& record) {
  std::string line = Format(record, std::chrono::system_clock::now());
  line.push_back('\n');
  std::lock_guard lock(mutex_);
  if (fd_ < 0) return Fail(Error::Code::Unavailable, "the audit log is closed");
  if (size_ > 0 && size_ + line.size() > options_.max_bytes) SANDBOX_RETURN_IF_ERROR(Rotate());
  // One write(2) per line: with O_APPEND it is never interleaved with
  // another writer's line.
  std::string_view rest = line;
  while (!rest.empty()) {
    ssize_t written = write(fd_, rest.data(), rest.size());
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {
      Error error = os::ErrnoError(errno, "write", options_.path);
      return Fail(error.code(), "cannot write the audit log: " + error.message());
    }
    rest.remove_prefix(static_cast<std::size_t>(written));
  }
  size_ += line.size();
  if (options_.fsync && fdatasync(fd_) != 0)
    return Fail(os::ErrnoError(errno, "fdatasync", options_.path));
  return {};
}

}  // namespace sandbox
