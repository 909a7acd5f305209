#include "os/syscalls.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <string>

namespace sandbox::os {

Error::Code CodeForErrno(int err) {
  switch (err) {
    case ENOENT:
      return Error::Code::NotFound;
    case EXDEV:
    case ELOOP:
      return Error::Code::EscapesRoot;
    case EEXIST:
      return Error::Code::AlreadyExists;
    case ENOTDIR:
      return Error::Code::NotADirectory;
    case EISDIR:
      return Error::Code::IsADirectory;
    case ENOTEMPTY:
      return Error::Code::NotEmpty;
    case EACCES:
    case EPERM:
    case EROFS:
      return Error::Code::PermissionDenied;
    case EINVAL:
    case ENAMETOOLONG:
      return Error::Code::InvalidArgument;
    case EFBIG:
    case ENOSPC:
    case EDQUOT:
      return Error::Code::TooLarge;
    case ENOSYS:
    case EOPNOTSUPP:
      return Error::Code::Unsupported;
    case EPIPE:
    case ECONNRESET:
    case EAGAIN:
      return Error::Code::Unavailable;
    default:
      return Error::Code::Internal;
  }
}

Error ErrnoError(int err, std::string_view call, std::string_view argument) {
  std::string message(call);
  if (!argument.empty()) {
    message += " '";
    message += argument;
    message += "'";
  }
  message += ": ";
  char buffer[128];
  message += strerror_r(err, buffer, sizeof buffer);
  return Error(CodeForErrno(err), std::move(message));
}

int RawOpenat2(int dirfd, const char* path, std::uint64_t flags, std::uint64_t mode,
               std::uint64_t resolve) {
  open_how how{};
  how.flags = flags | O_CLOEXEC;
  // openat2 refuses a mode unless a file may be created. O_TMPFILE contains
  // the O_DIRECTORY bit, so test for all of it.
  bool creates = (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE;
  how.mode = creates ? mode : 0;
  how.resolve = resolve;
  // EAGAIN: a concurrent rename or mount raced the ".." checks of
  // RESOLVE_BENEATH. Retrying is safe; a bounded number of times, so a
  // hostile process renaming in a loop cannot hold the caller forever.
  constexpr int kMaxAttempts = 64;
  long fd = -1;
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    fd = syscall(SYS_openat2, dirfd, path, &how, sizeof how);
    if (fd >= 0 || (errno != EINTR && errno != EAGAIN)) break;
  }
  return fd < 0 ? -errno : static_cast<int>(fd);
}

Expected<UniqueFd> Openat2(int dirfd, const std::string& path, std::uint64_t flags,
                           std::uint64_t mode, std::uint64_t resolve) {
  int fd = RawOpenat2(dirfd, path.c_str(), flags, mode, resolve);
  if (fd < 0) return Fail(ErrnoError(-fd, "openat2", path));
  return UniqueFd(fd);
}

bool HasOpenat2() {
  static const bool has = [] {
    int fd = RawOpenat2(AT_FDCWD, "/", O_PATH | O_DIRECTORY, 0, 0);
    if (fd >= 0) ::close(fd);
    return fd >= 0;
  }();
  return has;
}

Expected<UniqueFd> PidfdOpen(pid_t pid) {
  long fd = syscall(SYS_pidfd_open, pid, 0);
  if (fd < 0) return Fail(ErrnoError(errno, "pidfd_open", std::to_string(pid)));
  return UniqueFd(static_cast<int>(fd));
}

Status PidfdSendSignal(int pidfd, int signal) {
  if (syscall(SYS_pidfd_send_signal, pidfd, signal, nullptr, 0) < 0 && errno != ESRCH)
    return Fail(ErrnoError(errno, "pidfd_send_signal"));
  return {};
}

long WriteNoSigpipe(int fd, const char* data, std::size_t size) {
  // SIGPIPE raised by write(2) is directed at the calling thread. Block it in
  // this thread only, and if the write raised it, consume it before
  // unblocking, so the host process's disposition is never involved.
  sigset_t pipe_set, old_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  bool already_pending = false;
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
  {
    sigset_t pending;
    sigpending(&pending);
    already_pending = sigismember(&pending, SIGPIPE);
  }
  long n;
  do {
    n = ::write(fd, data, size);
  } while (n < 0 && errno == EINTR);
  int saved = errno;
  if (n < 0 && saved == EPIPE && !already_pending) {
    timespec zero{};
    while (sigtimedwait(&pipe_set, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
  return n < 0 ? -saved : n;
}

Status WriteAllNoSigpipe(int fd, std::string_view data) {
  while (!data.empty()) {
    long n = WriteNoSigpipe(fd, data.data(), data.size());
    if (n < 0) {
      if (n == -EPIPE) return Fail(Error::Code::Unavailable, "write: the reader has closed the stream");
      return Fail(ErrnoError(static_cast<int>(-n), "write"));
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

Expected<std::string> ReadAll(int fd, std::size_t max) {
  std::string out;
  char buffer[65536];
  for (;;) {
    long n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Fail(ErrnoError(errno, "read"));
    }
    if (n == 0) return out;
    if (out.size() + static_cast<std::size_t>(n) > max)
      return Fail(Error::Code::TooLarge, "read: more than " + std::to_string(max) + " bytes");
    out.append(buffer, static_cast<std::size_t>(n));
  }
}

Expected<UniqueFd> MakeEventFd() {
  int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) return Fail(ErrnoError(errno, "eventfd"));
  return UniqueFd(fd);
}

Expected<Pipe> MakePipe(int extra_flags) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | extra_flags) < 0) return Fail(ErrnoError(errno, "pipe2"));
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

Status SetNonBlocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0) return Fail(ErrnoError(errno, "fcntl F_GETFL"));
  int wanted = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (wanted != flags && fcntl(fd, F_SETFL, wanted) < 0)
    return Fail(ErrnoError(errno, "fcntl F_SETFL"));
  return {};
}

}  // namespace sandbox::os
