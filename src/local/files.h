// FileSystem: the local backend's file operations, confined by the kernel to
// one root directory. Also used inside every boundary by the agent.
#ifndef SANDBOX_LOCAL_FILES_H_
#define SANDBOX_LOCAL_FILES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "os/unique_fd.h"
#include "sandbox/sandbox.h"

namespace sandbox::local {

// Every path is resolved by openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS |
// RESOLVE_NO_SYMLINKS) from a directory fd of the root (src/os/fence.h); no
// string checks decide containment. Every symlink in a path is refused with
// EscapesRoot, except that Remove of a symlink entry removes the link itself
// (unlinkat never follows it). Only regular files and directories are acted
// on: a FIFO, socket or device is refused with NotARegularFile without being
// opened for I/O, so no call ever hangs on one. Modes are applied exactly
// (permission bits only, umask ignored) to files and directories created.
// Thread-safe: all methods are const and share only the root fd.
class FileSystem {
 public:
  // Opens `root` (a host directory). `workdir` is the absolute directory under
  // which absolute paths are accepted ("" means root's canonical path).
  // `max_read_bytes` bounds ReadFile. Without openat2 it fails, unless
  // `fence_without_openat2` accepts the component-walk fence (os::WalkOpen).
  static Expected<FileSystem> Open(const std::string& root, const std::string& workdir,
                                   std::uint64_t max_read_bytes, bool fence_without_openat2 = false);

  // The absolute path absolute sandbox paths must lie under.
  const std::string& workdir() const { return workdir_; }
  // The canonical host path of the root.
  const std::string& host_root() const { return host_root_; }
  int root_fd() const { return root_.get(); }

  // An O_PATH|O_DIRECTORY fd of a directory beneath the root, for
  // Command::dir ("" and "." are the root).
  Expected<os::UniqueFd> OpenDirectory(std::string_view path) const;

  // The whole regular file; TooLarge (before allocating) when it holds more
  // than max_read_bytes, also if it grows past that while being read.
  Expected<std::string> ReadFile(std::string_view path) const;
  // At most min(max, max_read_bytes) bytes, truncated when the file has more
  // (learned by reading one more byte, not from st_size). max <= 0 is ReadFile.
  Expected<LimitedRead> ReadFileLimit(std::string_view path, std::int64_t max) const;
  // Atomic replace: a new inode written beside the target and renamed over it.
  // IsADirectory onto a directory, NotARegularFile onto a FIFO/socket/device.
  Status WriteFile(std::string_view path, std::string_view data, FileMode mode) const;
  // Appends without reading; a missing file is created with `mode`.
  Status AppendFile(std::string_view path, std::string_view data, FileMode mode) const;
  // One file, symlink entry or empty directory (NotEmpty otherwise); never
  // recursive; the root itself is refused with InvalidArgument.
  Status Remove(std::string_view path) const;
  // Sorted by name, without "." and ".."; a symlink is never is_dir.
  Expected<std::vector<DirEntry>> ListDir(std::string_view path) const;
  // Creates the missing directories of `path`, each with `mode`; NotADirectory
  // when a component exists and is not a directory.
  Status MakeDirAll(std::string_view path, FileMode mode) const;

 private:
  FileSystem(os::UniqueFd root, std::string host_root, std::string workdir,
             std::uint64_t max_read_bytes)
      : root_(std::move(root)),
        host_root_(std::move(host_root)),
        workdir_(std::move(workdir)),
        max_read_bytes_(max_read_bytes) {}

  // The relative path handed to openat2 for a sandbox path (os::FenceRelativePath).
  Expected<std::string> Resolve(std::string_view path) const;

  os::UniqueFd root_;
  std::string host_root_;
  std::string workdir_;
  std::uint64_t max_read_bytes_;
};

}  // namespace sandbox::local

#endif  // SANDBOX_LOCAL_FILES_H_
