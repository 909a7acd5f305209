// The path fence: every sandbox path is resolved by the kernel, with
// openat2(2) from a directory fd of the root, never by string checks.
//
// The resolve flags are RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS |
// RESOLVE_NO_SYMLINKS: a path that leaves the root through `..`, an absolute
// path, any symlink (final, intermediate or dangling, and a trailing '/' after
// one) and every /proc magic link are refused by the kernel. The only string
// operations here are the checks a kernel cannot make (a NUL byte) and the
// component-wise removal of the workdir prefix from an absolute path.
#ifndef SANDBOX_OS_FENCE_H_
#define SANDBOX_OS_FENCE_H_

#include <linux/openat2.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "os/unique_fd.h"
#include "sandbox/error.h"

namespace sandbox::os {

// The resolve flags of every fenced lookup.
inline constexpr std::uint64_t kFenceResolve =
    RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS;

// Turns a sandbox path into the relative path handed to openat2 beneath the
// root. "" and "." become "."; a relative path is returned unchanged (the
// kernel judges its `..`). An absolute path is accepted only when it lies
// under `workdir` (an absolute, normalised directory such as "/workspace"),
// compared component by component ("/work2/x" is not under "/work"); the
// remainder is returned, "." when the path is the workdir itself. Fails with
// InvalidArgument for a NUL byte and EscapesRoot for any other absolute path.
Expected<std::string> FenceRelativePath(std::string_view path, std::string_view workdir);

// Normalises a workdir for FenceRelativePath: it must be absolute and free of
// `..`; repeated slashes, "." components and a trailing slash are dropped
// ("/a//./b/" -> "/a/b"). InvalidArgument otherwise.
Expected<std::string> NormalizeWorkdir(std::string_view workdir);

// The Error for errno `err` returned by a fenced call `call` on the sandbox
// path `shown`. EXDEV and ELOOP become EscapesRoot ("path 'x' escapes the
// sandbox root"), ENXIO NotARegularFile, the rest as os::ErrnoError.
Error FenceError(int err, std::string_view call, std::string_view shown);

// openat2(dirfd, relative, flags | O_CLOEXEC, mode, kFenceResolve). `shown` is
// the caller's path, used in error messages. The fd is owned by the caller.
Expected<UniqueFd> FenceOpen(int dirfd, const std::string& relative, int flags, mode_t mode,
                             std::string_view shown);

// The fence where the kernel has no openat2 (gVisor's, which the gvisor
// backend's agent runs on): the same rules, enforced by walking `relative`
// one component at a time from `dirfd` with openat(O_PATH | O_NOFOLLOW),
// each directory pinned by its fd. Every symlink is refused (ELOOP), `..`
// steps back along the walked fds and never above `dirfd` (EXDEV), an
// absolute path is EXDEV. Returns the fd or -errno. FenceOpen uses it only
// when HasOpenat2() is false; the local backend refuses that case unless
// asked (LocalOptions::fence_without_openat2).
int WalkOpen(int dirfd, const std::string& relative, int flags, mode_t mode);

// The directory that holds the final component of a fenced path, and that
// component's name. The operations that create, replace or remove an entry
// act on `name` inside `dir` with *at calls that never follow it.
struct FenceParent {
  UniqueFd dir;                 // O_PATH|O_DIRECTORY fd of the parent, beneath the root
  std::string name;             // the final component: never empty, never contains '/'
  bool trailing_slash = false;  // the path ended in '/' (it must name a directory)

  // True when `name` is "." or "..": it does not name an entry of `dir`,
  // so the path can only refer to a directory.
  bool NameIsDot() const { return name == "." || name == ".."; }
};

// Opens the parent of `relative` (a result of FenceRelativePath) beneath
// `root_fd` and splits off the final component: "a/b/c" -> ("a/b", "c"),
// "c" -> (".", "c"), "a/b/" -> ("a", "b", trailing_slash), "." -> (".", ".").
// Errors as FenceOpen.
Expected<FenceParent> FenceOpenParent(int root_fd, const std::string& relative,
                                      std::string_view shown);

// openat2(dir_fd, name, flags | O_NOFOLLOW | O_CLOEXEC, mode, kFenceResolve)
// for one component `name` (no '/', not "." or ".."): opens an entry of a
// fenced directory without ever following it. With O_PATH a symlink yields
// an fd of the link itself (fstat shows S_IFLNK); otherwise a symlink fails
// with EscapesRoot.
Expected<UniqueFd> FenceOpenEntry(int dir_fd, const std::string& name, int flags, mode_t mode,
                                  std::string_view shown);

}  // namespace sandbox::os

#endif  // SANDBOX_OS_FENCE_H_
