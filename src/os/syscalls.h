// Thin wrappers over the raw syscalls sandbox needs, with kernel constants
// missing from older headers defined once. The only layer that makes raw
// syscalls is src/os/.
#ifndef SANDBOX_OS_SYSCALLS_H_
#define SANDBOX_OS_SYSCALLS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "os/unique_fd.h"
#include "sandbox/error.h"

namespace sandbox::os {

// Builds an Error from errno (or `err`), naming the call and its argument:
// "openat2 'src/main.py': No such file or directory". The code is chosen
// from the errno value (ENOENT -> NotFound, EXDEV -> EscapesRoot, ...).
Error ErrnoError(int err, std::string_view call, std::string_view argument = {});

// Maps an errno value to the closest Error::Code.
Error::Code CodeForErrno(int err);

// openat2(2) with `resolve` flags; returns the new fd or an Error built
// with ErrnoError. O_CLOEXEC is always added.
Expected<UniqueFd> Openat2(int dirfd, const std::string& path, std::uint64_t flags,
                           std::uint64_t mode, std::uint64_t resolve);

// Raw openat2 returning -errno on failure, for callers that map errors.
int RawOpenat2(int dirfd, const char* path, std::uint64_t flags, std::uint64_t mode,
               std::uint64_t resolve);

// True when the running kernel implements openat2 (Linux >= 5.6).
bool HasOpenat2();

// pidfd_open(2); O_CLOEXEC is implied by the kernel.
Expected<UniqueFd> PidfdOpen(pid_t pid);

// pidfd_send_signal(2). ESRCH (already gone) is success.
Status PidfdSendSignal(int pidfd, int signal);

// Writes all of `data` to `fd` without ever raising SIGPIPE in this process:
// a closed reader yields an Error (code Unavailable) instead. For blocking fds.
Status WriteAllNoSigpipe(int fd, std::string_view data);

// One write(2) that never raises SIGPIPE. Returns bytes written, or -errno.
long WriteNoSigpipe(int fd, const char* data, std::size_t size);

// Reads `fd` to end of file, refusing (TooLarge) more than `max` bytes.
Expected<std::string> ReadAll(int fd, std::size_t max);

// eventfd(2) with EFD_CLOEXEC|EFD_NONBLOCK.
Expected<UniqueFd> MakeEventFd();

// pipe2(2) with O_CLOEXEC (| extra flags).
struct Pipe {
  UniqueFd read;
  UniqueFd write;
};
Expected<Pipe> MakePipe(int extra_flags = 0);

// Sets or clears O_NONBLOCK.
Status SetNonBlocking(int fd, bool on);

}  // namespace sandbox::os

#endif  // SANDBOX_OS_SYSCALLS_H_
