#include "os/fence.h"

#include <errno.h>
#include <fcntl.h>

#include <string>
#include <utility>

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

Expected<UniqueFd> FenceOpen(int dirfd, const std::string& relative, int flags, mode_t mode,
                             std::string_view shown) {
  int fd = RawOpenat2(dirfd, relative.c_str(), static_cast<std::uint64_t>(flags),
                      (flags & O_CREAT) ? mode : 0, kFenceResolve);
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
