// The error type every fallible call in sandbox returns.
#ifndef SANDBOX_ERROR_H_
#define SANDBOX_ERROR_H_

#include <expected>
#include <string>
#include <string_view>
#include <utility>

namespace sandbox {

// Error describes a failure of the sandbox machinery itself: a process that
// could not be started, a cancelled call, a path that escapes the root, a dead
// boundary. A command that runs and exits non-zero is NOT an Error; that is a
// normal Result. The message is written for a person and, where it can, says
// what to do next.
class Error {
 public:
  enum class Code {
    InvalidArgument,        // the caller passed something malformed
    EscapesRoot,            // the path resolves outside the sandbox root
    NotFound,               // the file or directory does not exist
    AlreadyExists,          // the target exists and must not
    NotADirectory,          // a directory was required
    IsADirectory,           // a regular file was required
    NotARegularFile,        // a FIFO, socket or device, refused on purpose
    NotEmpty,               // Remove of a non-empty directory
    PermissionDenied,       // the OS refused access
    TooLarge,               // a bound was exceeded before anything was buffered
    Cancelled,              // the Context's stop token fired
    DeadlineExceeded,       // the Context's deadline passed
    Denied,                 // a reviewer refused the operation
    InsufficientIsolation,  // the backend is weaker than required
    Unsupported,            // this backend or machine cannot do it
    Unavailable,            // the sandbox is closed, dead or broken
    Internal,               // anything else; a bug or an unexpected errno
  };

  Error(Code code, std::string message)
      : code_(code), message_(std::move(message)) {}

  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // "escapes_root: openat2 '../x': path escapes the sandbox root".
  std::string ToString() const;

 private:
  Code code_;
  std::string message_;
};

// The stable snake_case name of a code ("escapes_root"), used on the wire and
// in JSON output.
std::string_view ToString(Error::Code code);

// Parses a name produced by ToString(Error::Code); Internal when unknown.
Error::Code ErrorCodeFromString(std::string_view name);

template <class T>
using Expected = std::expected<T, Error>;

// The result of a call that returns nothing but may fail.
using Status = std::expected<void, Error>;

// Builds the unexpected value to return from a function yielding Expected<T>.
inline std::unexpected<Error> Fail(Error::Code code, std::string message) {
  return std::unexpected<Error>(std::in_place, code, std::move(message));
}

inline std::unexpected<Error> Fail(Error error) {
  return std::unexpected<Error>(std::move(error));
}

}  // namespace sandbox

// Propagates the error of an expression yielding Status or Expected<T>.
#define SANDBOX_RETURN_IF_ERROR(expr)                           \
  do {                                                          \
    if (auto sandbox_status_ = (expr); !sandbox_status_)        \
      return ::std::unexpected(std::move(sandbox_status_).error()); \
  } while (0)

#endif  // SANDBOX_ERROR_H_
