#include "os/fence.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <string>
#include <utility>
#include <vector>

#include "os/syscalls.h"

namespace sandbox::os {
namespace {

// Returns the next component of `path` starting at `*pos` (skipping any run
// of slashes) and advances `*pos` past it; "" at the end.
std::string_view NextComponent(std::string_view path, std::size_t* pos) {
  while (*pos < path.size() && path[*pos] == '/') ++*pos;
  std::size_t start = *pos;
  while (*pos < path.size() && path[*pos] != '/') ++*pos;
  return path.substr(start, *pos - start);
}

std::string Quoted(std::string_view text) {
  std::string out = "'";
  out += text;
  out += "'";
  return out;
}

}  // namespace

Expected<std::string> NormalizeWorkdir(std::string_view workdir) {
  if (workdir.find('\0') != std::string_view::npos)
    return Fail(Error::Code::InvalidArgument, "workdir contains a NUL byte");
  if (workdir.empty() || workdir[0] != '/')
    return Fail(Error::Code::InvalidArgument,
                "workdir " + Quoted(workdir) + " must be an absolute path such as /workspace");
  std::string normal;
  std::size_t pos = 0;
  for (;;) {
    std::string_view component = NextComponent(workdir, &pos);
    if (component.empty()) break;
    if (component == ".") continue;
    if (component == "..")
      return Fail(Error::Code::InvalidArgument,
                  "workdir " + Quoted(workdir) + " must not contain '..'");
    normal += '/';
    normal += component;
  }
  if (normal.empty()) normal = "/";
  return normal;
}

Expected<std::string> FenceRelativePath(std::string_view path, std::string_view workdir) {
  if (path.find('\0') != std::string_view::npos)
    return Fail(Error::Code::InvalidArgument,
                "path " + Quoted(path.substr(0, path.find('\0'))) +
                    "... contains a NUL byte; a path is a NUL-free string");
  if (path.empty()) return std::string(".");
  if (path[0] != '/') return std::string(path);

  // An absolute path: it must lie under the workdir, compared component by
  // component. Empty and "." components of the path's prefix are identities
  // and are skipped; ".." in the prefix never matches, so it is refused.
  std::size_t path_pos = 0;
  std::size_t workdir_pos = 0;
  for (;;) {
    std::string_view want = NextComponent(workdir, &workdir_pos);
    if (want.empty()) break;
    std::string_view got;
    do {
      got = NextComponent(path, &path_pos);
    } while (got == ".");
    if (got != want)
      return Fail(Error::Code::EscapesRoot,
                  "path " + Quoted(path) +
                      " escapes the sandbox root: an absolute path must lie under " +
                      std::string(workdir) + "; use a path relative to the sandbox root");
  }
  while (path_pos < path.size() && path[path_pos] == '/') ++path_pos;
  if (path_pos == path.size()) return std::string(".");
  return std::string(path.substr(path_pos));
}

Error FenceError(int err, std::string_view call, std::string_view shown) {
  std::string prefix = std::string(call) + " " + Quoted(shown) + ": ";
  switch (err) {
    case EXDEV:
      return Error(Error::Code::EscapesRoot,
                   prefix + "path " + Quoted(shown) + " escapes the sandbox root");
    case ELOOP:
      return Error(Error::Code::EscapesRoot,
                   prefix + "path " + Quoted(shown) +
                       " escapes the sandbox root: it goes through a symlink, and symlinks are "
                       "refused inside the sandbox");
    case ENXIO:
      return Error(Error::Code::NotARegularFile,
                   prefix +
                       "not a regular file (a socket, a FIFO without a reader or a "
                       "device); only regular files and directories are supported");
    case ENOTEMPTY:
      return Error(Error::Code::NotEmpty,
                   prefix +
                       "the directory is not empty; Remove is never recursive, remove "
                       "its entries first");
    default:
      return ErrnoError(err, call, shown);
  }
}

namespace {

int OpenatNoIntr(int dirfd, const char* name, int flags, mode_t mode) {
  int fd;
  do {
    fd = ::openat(dirfd, name, flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  return fd < 0 ? -errno : fd;
}

// The -errno a symlink or non-directory at `fd` gives as an intermediate
// component, 0 for a directory.
int CheckDirectory(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return -errno;
  if (S_ISLNK(st.st_mode)) return -ELOOP;
  if (!S_ISDIR(st.st_mode)) return -ENOTDIR;
  return 0;
}

}  // namespace

// How often WalkOpen's last open is tried when gVisor answers EINVAL.
constexpr int kEinvalRetries = 8;

int WalkOpen(int dirfd, const std::string& relative, int flags, mode_t mode) {
  if (relative.empty()) return -ENOENT;
  if (relative[0] == '/') return -EXDEV;
  std::vector<std::string_view> components;
  std::size_t pos = 0;
  for (;;) {
    std::string_view component = NextComponent(relative, &pos);
    if (component.empty()) break;
    if (component != ".") components.push_back(component);
  }
  std::size_t end = relative.size();
  bool trailing_slash = end > 0 && relative[end - 1] == '/';
  // The directories walked so far; ".." steps back along this stack and
  // never asks the kernel, so it cannot leave `dirfd`.
  std::vector<UniqueFd> walked;
  auto current = [&] { return walked.empty() ? dirfd : walked.back().get(); };
  std::string final_name = ".";
  for (std::size_t i = 0; i < components.size(); ++i) {
    std::string name(components[i]);
    bool last = i + 1 == components.size();
    if (name == "..") {
      if (walked.empty()) return -EXDEV;
      walked.pop_back();
      continue;
    }
    if (last) {
      final_name = name;
      break;
    }
    int fd = OpenatNoIntr(current(), name.c_str(), O_PATH | O_NOFOLLOW, 0);
    if (fd < 0) return fd;
    UniqueFd owned(fd);
    if (int bad = CheckDirectory(fd); bad != 0) {
      // Swapped for a symlink meanwhile (gVisor's proxy can show the old
      // entry's type): refused as a symlink, as openat2 would.
      struct stat st {};
      if (bad == -ENOTDIR && ::fstatat(current(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          (S_ISLNK(st.st_mode) || S_ISDIR(st.st_mode)))
        return -ELOOP;
      return bad;
    }
    walked.push_back(std::move(owned));
  }
  if (final_name == "." && trailing_slash) trailing_slash = false;
  int final_flags = flags | O_NOFOLLOW;
  if (trailing_slash) {
    if (flags & O_CREAT) return -EISDIR;
    final_flags |= O_DIRECTORY;
  }
  // What the kernel's openat2 would say of a symlink, socket or FIFO, said
  // before opening: gVisor's file proxy answers EPERM or ENOENT for them.
  // (A swap after this check changes only the error: the open below still
  // never follows a symlink.)
  if (final_name != "." && final_name != "..") {
    struct stat st {};
    if (::fstatat(current(), final_name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (S_ISLNK(st.st_mode) && (trailing_slash || !(flags & O_NOFOLLOW))) return -ELOOP;
      if (!S_ISLNK(st.st_mode) && !S_ISDIR(st.st_mode) && (final_flags & O_DIRECTORY))
        return -ENOTDIR;
      if ((S_ISSOCK(st.st_mode) || S_ISFIFO(st.st_mode)) && !(flags & O_PATH)) return -ENXIO;
    }
  }
  // gVisor's file proxy answers EINVAL to an open that races with a rename
  // over the same name (another thread's atomic WriteFile). The flags are
  // valid, so EINVAL can mean only that: try again, a bounded number of times.
  int fd = -EINVAL;
  for (int attempt = 0; attempt < kEinvalRetries && fd == -EINVAL; ++attempt)
    fd = OpenatNoIntr(current(), final_name.c_str(), final_flags, (flags & O_CREAT) ? mode : 0);
  if (fd == -ENOTDIR && (trailing_slash || !(flags & O_NOFOLLOW))) {
    // A symlink where a directory was wanted: the fence's refusal is ELOOP.
    // A directory seen now was swapped back since: it was a symlink then.
    struct stat st {};
    if (::fstatat(current(), final_name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        (S_ISLNK(st.st_mode) || S_ISDIR(st.st_mode)))
      return -ELOOP;
  }
  if (fd < 0) return fd;
  if ((flags & O_PATH) && !(flags & O_NOFOLLOW)) {
    // O_PATH|O_NOFOLLOW opens a symlink itself; the fence refuses it unless
    // the caller asked for the link.
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISLNK(st.st_mode)) {
      ::close(fd);
      return -ELOOP;
    }
  }
  return fd;
}

Expected<UniqueFd> FenceOpen(int dirfd, const std::string& relative, int flags, mode_t mode,
                             std::string_view shown) {
  int fd = HasOpenat2() ? RawOpenat2(dirfd, relative.c_str(), static_cast<std::uint64_t>(flags),
                                     (flags & O_CREAT) ? mode : 0, kFenceResolve)
                        : WalkOpen(dirfd, relative, flags, mode);
  if (fd < 0) return Fail(FenceError(-fd, "openat2", shown));
  return UniqueFd(fd);
}

Expected<UniqueFd> FenceOpenEntry(int dir_fd, const std::string& name, int flags, mode_t mode,
                                  std::string_view shown) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    return Fail(Error::Code::Internal, "FenceOpenEntry " + Quoted(shown) + ": " + Quoted(name) +
                                           " is not a single directory entry name");
  return FenceOpen(dir_fd, name, flags | O_NOFOLLOW, mode, shown);
}

Expected<FenceParent> FenceOpenParent(int root_fd, const std::string& relative,
                                      std::string_view shown) {
  FenceParent parent;
  std::size_t end = relative.size();
  while (end > 0 && relative[end - 1] == '/') --end;
  parent.trailing_slash = end < relative.size();
  std::string parent_path = ".";
  if (end == 0) {
    parent.name = ".";
  } else {
    std::size_t slash = relative.rfind('/', end - 1);
    if (slash == std::string::npos) {
      parent.name = relative.substr(0, end);
    } else {
      parent.name = relative.substr(slash + 1, end - slash - 1);
      std::size_t parent_end = slash;
      while (parent_end > 0 && relative[parent_end - 1] == '/') --parent_end;
      if (parent_end > 0) parent_path = relative.substr(0, parent_end);
    }
  }
  auto dir = FenceOpen(root_fd, parent_path, O_PATH | O_DIRECTORY, 0, shown);
  if (!dir) return Fail(std::move(dir).error());
  parent.dir = std::move(*dir);
  return parent;
}

}  // namespace sandbox::os
