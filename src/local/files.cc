#include "local/files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "os/fence.h"
#include "os/syscalls.h"

namespace sandbox::local {
namespace {

using os::FenceError;
using os::FenceOpen;
using os::FenceOpenEntry;
using os::FenceOpenParent;
using os::FenceParent;
using os::UniqueFd;

// FileMode carries permission bits only: setuid, setgid and sticky bits are
// never applied, so a caller cannot plant a set-id program in the workspace.
constexpr mode_t kPermissionBits = 0777;

// How many bytes one read(2) asks for when the file is longer than expected.
constexpr std::size_t kReadChunk = 64 * 1024;

struct CloseDir {
  void operator()(DIR* stream) const { closedir(stream); }
};
struct FreeMemory {
  void operator()(char* memory) const { free(memory); }
};

std::string Quoted(std::string_view text) {
  std::string out = "'";
  out += text;
  out += "'";
  return out;
}

Error OpError(Error::Code code, std::string_view op, std::string_view path, std::string_view what) {
  return Error(code, std::string(op) + " " + Quoted(path) + ": " + std::string(what));
}

// The error for an entry that is not a regular file, or ok for one.
Status RequireRegular(const struct stat& st, std::string_view op, std::string_view path) {
  if (S_ISREG(st.st_mode)) return {};
  if (S_ISDIR(st.st_mode))
    return Fail(
        OpError(Error::Code::IsADirectory, op, path, "is a directory; a regular file is required"));
  if (S_ISLNK(st.st_mode))
    return Fail(OpError(Error::Code::EscapesRoot, op, path,
                        "path " + Quoted(path) +
                            " escapes the sandbox root: it is a symlink, and symlinks are "
                            "refused inside the sandbox"));
  const char* kind = S_ISFIFO(st.st_mode)   ? "a FIFO"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                     : S_ISCHR(st.st_mode)  ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                                            : "not a regular file";
  return Fail(
      OpError(Error::Code::NotARegularFile, op, path,
              std::string("is ") + kind + "; only regular files and directories are supported"));
}

Expected<struct stat> Fstat(int fd, std::string_view path) {
  struct stat st;
  if (fstat(fd, &st) < 0) return Fail(os::ErrnoError(errno, "fstat", path));
  return st;
}

// Opens a fenced path for reading, refusing everything but a regular file
// without ever opening it: the path is first resolved with O_PATH (which
// runs no driver open and never blocks on a FIFO) and checked, and only then
// opened for reading, non-blocking, and checked again in case it was swapped.
Expected<UniqueFd> OpenRegularForRead(int root_fd, const std::string& relative, std::string_view op,
                                      std::string_view path, struct stat* st) {
  auto probe = FenceOpen(root_fd, relative, O_PATH, 0, path);
  if (!probe) return Fail(std::move(probe).error());
  auto probe_st = Fstat(probe->get(), path);
  if (!probe_st) return Fail(std::move(probe_st).error());
  SANDBOX_RETURN_IF_ERROR(RequireRegular(*probe_st, op, path));
  auto fd = FenceOpen(root_fd, relative, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0, path);
  if (!fd) return Fail(std::move(fd).error());
  auto fd_st = Fstat(fd->get(), path);
  if (!fd_st) return Fail(std::move(fd_st).error());
  SANDBOX_RETURN_IF_ERROR(RequireRegular(*fd_st, op, path));
  *st = *fd_st;
  return std::move(*fd);
}

struct BoundedRead {
  std::string data;
  bool more = false;  // the file holds bytes beyond `limit`
};

// Reads at most `limit` bytes from `fd`, then tries one more byte to learn
// whether the file has more; never trusts st_size. `size_hint` (st_size)
// sizes the first allocation; the buffer's capacity never exceeds `limit`.
Expected<BoundedRead> ReadBounded(int fd, std::uint64_t limit, std::uint64_t size_hint,
                                  std::string_view path) {
  BoundedRead out;
  out.data.reserve(static_cast<std::size_t>(std::min(limit, size_hint)));
  char chunk[kReadChunk];
  while (out.data.size() < limit) {
    std::size_t old_size = out.data.size();
    std::size_t room = out.data.capacity() - old_size;
    long got = 0;
    int err = 0;
    if (room > 0) {
      // Read straight into the reserved buffer.
      room = static_cast<std::size_t>(std::min<std::uint64_t>(room, limit - old_size));
      out.data.resize_and_overwrite(old_size + room, [&](char* buffer, std::size_t) {
        got = ::read(fd, buffer + old_size, room);
        err = errno;
        return got > 0 ? old_size + static_cast<std::size_t>(got) : old_size;
      });
    } else {
      // The file is longer than the hint: read into a stack buffer and grow
      // geometrically, never beyond `limit`.
      std::size_t want =
          static_cast<std::size_t>(std::min<std::uint64_t>(sizeof chunk, limit - old_size));
      got = ::read(fd, chunk, want);
      err = errno;
      if (got > 0) {
        std::size_t needed = old_size + static_cast<std::size_t>(got);
        if (needed > out.data.capacity())
          out.data.reserve(static_cast<std::size_t>(
              std::min<std::uint64_t>(limit, std::max(needed, 2 * out.data.capacity()))));
        out.data.append(chunk, static_cast<std::size_t>(got));
      }
    }
    if (got < 0) {
      if (err == EINTR) continue;
      return Fail(os::ErrnoError(err, "read", path));
    }
    if (got == 0) return out;
  }
  for (;;) {
    char probe;
    long got = ::read(fd, &probe, 1);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return Fail(os::ErrnoError(errno, "read", path));
    out.more = got > 0;
    return out;
  }
}

Status WriteAll(int fd, std::string_view data, std::string_view path) {
  while (!data.empty()) {
    long n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Fail(os::ErrnoError(errno, "write", path));
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

// The checks for a path that cannot name a file to write: one ending in '/'
// or in "." / "..". The kernel still judges escapes and missing components.
Status RefuseDirectoryTarget(int root_fd, const std::string& relative, std::string_view op,
                             std::string_view path) {
  auto fd = FenceOpen(root_fd, relative, O_PATH, 0, path);
  if (!fd) return Fail(std::move(fd).error());
  auto st = Fstat(fd->get(), path);
  if (!st) return Fail(std::move(st).error());
  if (!S_ISDIR(st->st_mode))
    return Fail(OpError(Error::Code::NotADirectory, op, path,
                        "a path ending in '/' must name a directory"));
  return Fail(
      OpError(Error::Code::IsADirectory, op, path, "is a directory; a regular file is required"));
}

// A temporary entry of a directory, unlinked on destruction unless released.
class TempEntryGuard {
 public:
  TempEntryGuard(int dir_fd, std::string name) : dir_fd_(dir_fd), name_(std::move(name)) {}
  ~TempEntryGuard() {
    if (!name_.empty()) unlinkat(dir_fd_, name_.c_str(), 0);
  }
  TempEntryGuard(const TempEntryGuard&) = delete;
  TempEntryGuard& operator=(const TempEntryGuard&) = delete;
  void Release() { name_.clear(); }

 private:
  int dir_fd_;
  std::string name_;
};

Expected<std::uint64_t> RandomU64() {
  std::uint64_t value;
  std::size_t filled = 0;
  while (filled < sizeof value) {
    long n = getrandom(reinterpret_cast<char*>(&value) + filled, sizeof value - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Fail(os::ErrnoError(errno, "getrandom"));
    }
    filled += static_cast<std::size_t>(n);
  }
  return value;
}

// A temporary name beside `name`, short enough for NAME_MAX.
Expected<std::string> TempName(const std::string& name) {
  auto random = RandomU64();
  if (!random) return Fail(std::move(random).error());
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, ".%016llx.tmp", static_cast<unsigned long long>(*random));
  return ".sandbox-" + name.substr(0, 160) + suffix;
}

}  // namespace

Expected<FileSystem> FileSystem::Open(const std::string& root, const std::string& workdir,
                                      std::uint64_t max_read_bytes, bool fence_without_openat2) {
  if (!os::HasOpenat2() && !fence_without_openat2)
    return Fail(Error::Code::Unsupported,
                "openat2(2) is not available: the local backend needs Linux >= 5.6 for its "
                "kernel-enforced path fence; upgrade the kernel");
  if (root.empty())
    return Fail(Error::Code::InvalidArgument, "no sandbox root given: name a host directory");
  if (root.find('\0') != std::string::npos)
    return Fail(Error::Code::InvalidArgument, "the sandbox root contains a NUL byte");
  std::unique_ptr<char, FreeMemory> real(realpath(root.c_str(), nullptr));
  if (!real) {
    int err = errno;
    Error error = os::ErrnoError(err, "realpath", root);
    if (err == ENOENT)
      return Fail(Error::Code::NotFound, "sandbox root " + Quoted(root) +
                                             " does not exist: create it first (" +
                                             error.message() + ")");
    return Fail(std::move(error));
  }
  std::string host_root = real.get();
  // realpath resolved the root already: opening it needs no fence.
  auto fd = os::HasOpenat2() ? os::Openat2(AT_FDCWD, host_root, O_PATH | O_DIRECTORY, 0, 0)
                             : [&]() -> Expected<UniqueFd> {
                                 int raw = ::open(host_root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
                                 if (raw < 0) return Fail(os::ErrnoError(errno, "open", host_root));
                                 return UniqueFd(raw);
                               }();
  if (!fd) {
    if (fd.error().code() == Error::Code::NotADirectory)
      return Fail(Error::Code::NotADirectory,
                  "sandbox root " + Quoted(root) + " is not a directory");
    return Fail(std::move(fd).error());
  }
  std::string normal_workdir = host_root;
  if (!workdir.empty()) {
    auto normal = os::NormalizeWorkdir(workdir);
    if (!normal) return Fail(std::move(normal).error());
    normal_workdir = std::move(*normal);
  }
  return FileSystem(std::move(*fd), std::move(host_root), std::move(normal_workdir),
                    max_read_bytes);
}

Expected<std::string> FileSystem::Resolve(std::string_view path) const {
  return os::FenceRelativePath(path, workdir_);
}

Expected<UniqueFd> FileSystem::OpenDirectory(std::string_view path) const {
  auto relative = Resolve(path);
  if (!relative) return Fail(std::move(relative).error());
  return FenceOpen(root_fd(), *relative, O_PATH | O_DIRECTORY, 0, path);
}

Expected<std::string> FileSystem::ReadFile(std::string_view path) const {
  auto relative = Resolve(path);
  if (!relative) return Fail(std::move(relative).error());
  struct stat st;
  auto fd = OpenRegularForRead(root_fd(), *relative, "ReadFile", path, &st);
  if (!fd) return Fail(std::move(fd).error());
  std::uint64_t size = static_cast<std::uint64_t>(st.st_size);
  if (size > max_read_bytes_)
    return Fail(OpError(
        Error::Code::TooLarge, "ReadFile", path,
        "the file is " + std::to_string(size) + " bytes, more than the sandbox's read bound of " +
            std::to_string(max_read_bytes_) + " bytes; read a bounded part with ReadFileLimit"));
  auto read = ReadBounded(fd->get(), max_read_bytes_, size, path);
  if (!read) return Fail(std::move(read).error());
  if (read->more)
    return Fail(OpError(Error::Code::TooLarge, "ReadFile", path,
                        "the file grew past the sandbox's read bound of " +
                            std::to_string(max_read_bytes_) +
                            " bytes while it was read; read a bounded part with ReadFileLimit"));
  return std::move(read->data);
}

Expected<LimitedRead> FileSystem::ReadFileLimit(std::string_view path, std::int64_t max) const {
  if (max <= 0) {
    auto whole = ReadFile(path);
    if (!whole) return Fail(std::move(whole).error());
    return LimitedRead{.data = std::move(*whole), .truncated = false};
  }
  auto relative = Resolve(path);
  if (!relative) return Fail(std::move(relative).error());
  struct stat st;
  auto fd = OpenRegularForRead(root_fd(), *relative, "ReadFileLimit", path, &st);
  if (!fd) return Fail(std::move(fd).error());
  // The sandbox's read bound holds here too: a larger `max` is lowered to it
  // and the result says truncated.
  std::uint64_t limit = std::min(static_cast<std::uint64_t>(max), max_read_bytes_);
  auto read = ReadBounded(fd->get(), limit, static_cast<std::uint64_t>(st.st_size), path);
  if (!read) return Fail(std::move(read).error());
  return LimitedRead{.data = std::move(read->data), .truncated = read->more};
}

Status FileSystem::WriteFile(std::string_view path, std::string_view data, FileMode mode) const {
  auto relative = Resolve(path);
  if (!relative) return Fail(std::move(relative).error());
  auto parent = FenceOpenParent(root_fd(), *relative, path);
  if (!parent) return Fail(std::move(parent).error());
  if (parent->trailing_slash || parent->NameIsDot())
    return RefuseDirectoryTarget(root_fd(), *relative, "WriteFile", path);
  int dir = parent->dir.get();

  // Refuse to replace anything but a regular file. The rename below never
  // follows the name, so this check only shapes the error; it is not what
  // keeps the write inside the root.
  struct stat existing;
  if (fstatat(dir, parent->name.c_str(), &existing, AT_SYMLINK_NOFOLLOW) == 0) {
    SANDBOX_RETURN_IF_ERROR(RequireRegular(existing, "WriteFile", path));
  } else if (errno != ENOENT) {
    return Fail(FenceError(errno, "fstatat", path));
  }

  // A randomly named temporary file beside the target, created exclusively
  // and never through a symlink. It is not fsync'ed: atomicity against
  // concurrent readers needs only the rename; durability across a host crash
  // is not promised (as with Go's os.WriteFile).
  UniqueFd fd;
  std::string temp_name;
  for (int attempt = 0;; ++attempt) {
    auto name = TempName(parent->name);
    if (!name) return Fail(std::move(name).error());
    auto created = FenceOpenEntry(dir, *name, O_WRONLY | O_CREAT | O_EXCL | O_NOCTTY, 0600, path);
    if (created) {
      fd = std::move(*created);
      temp_name = std::move(*name);
      break;
    }
    if (created.error().code() != Error::Code::AlreadyExists || attempt >= 16)
      return Fail(std::move(created).error());
  }
  TempEntryGuard guard(dir, temp_name);
  SANDBOX_RETURN_IF_ERROR(WriteAll(fd.get(), data, path));
  // fchmod, not the creation mode: the mode is applied exactly, untouched by
  // the process umask.
  if (fchmod(fd.get(), mode & kPermissionBits) < 0)
    return Fail(os::ErrnoError(errno, "fchmod", path));
  if (renameat(dir, temp_name.c_str(), dir, parent->name.c_str()) < 0) {
    int err = errno;
    if (err == EISDIR || err == ENOTEMPTY || err == EEXIST)
      return Fail(OpError(Error::Code::IsADirectory, "WriteFile", path,
                          "is a directory; a regular file is required"));
    return Fail(FenceError(err, "renameat", path));
  }
  guard.Release();
  return {};
}

Status FileSystem::AppendFile(std::string_view path, std::string_view data, FileMode mode) const {
  auto relative = Resolve(path);
  if (!relative) return Fail(std::move(relative).error());
  auto parent = FenceOpenParent(root_fd(), *relative, path);
  if (!parent) return Fail(std::move(parent).error());
  if (parent->trailing_slash || parent->NameIsDot())
    return RefuseDirectoryTarget(root_fd(), *relative, "AppendFile", path);
  int dir = parent->dir.get();

  // Retried only when the entry appears or disappears between two steps.
  for (int attempt = 0; attempt < 16; ++attempt) {
    auto probe = FenceOpenEntry(dir, parent->name, O_PATH, 0, path);
    if (!probe) {
      if (probe.error().code() != Error::Code::NotFound) return Fail(std::move(probe).error());
      auto created = FenceOpenEntry(dir, parent->name,
                                    O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOCTTY, 0600, path);
      if (!created) {
        if (created.error().code() == Error::Code::AlreadyExists) continue;
        return Fail(std::move(created).error());
      }
      if (fchmod(created->get(), mode & kPermissionBits) < 0)
        return Fail(os::ErrnoError(errno, "fchmod", path));
      return WriteAll(created->get(), data, path);
    }
    auto probe_st = Fstat(probe->get(), path);
    if (!probe_st) return Fail(std::move(probe_st).error());
    SANDBOX_RETURN_IF_ERROR(RequireRegular(*probe_st, "AppendFile", path));
    // O_NONBLOCK: if the entry was swapped for a FIFO since the probe, the
    // open fails (no reader) or returns at once instead of hanging.
    auto fd =
        FenceOpenEntry(dir, parent->name, O_WRONLY | O_APPEND | O_NONBLOCK | O_NOCTTY, 0, path);
    if (!fd) {
      if (fd.error().code() == Error::Code::NotFound) continue;
      return Fail(std::move(fd).error());
    }
    auto st = Fstat(fd->get(), path);
    if (!st) return Fail(std::move(st).error());
    SANDBOX_RETURN_IF_ERROR(RequireRegular(*st, "AppendFile", path));
    return WriteAll(fd->get(), data, path);
  }
  return Fail(OpError(Error::Code::Unavailable, "AppendFile", path,
                      "the file kept appearing and disappearing; try again"));
}

Status FileSystem::Remove(std::string_view path) const {
  auto relative = Resolve(path);
  if (!relative) return Fail(std::move(relative).error());
  auto parent = FenceOpenParent(root_fd(), *relative, path);
  if (!parent) return Fail(std::move(parent).error());
  if (parent->NameIsDot()) {
    // Let the kernel judge escapes ("../..") and missing components first.
    auto fd = FenceOpen(root_fd(), *relative, O_PATH | O_DIRECTORY, 0, path);
    if (!fd) return Fail(std::move(fd).error());
    return Fail(OpError(Error::Code::InvalidArgument, "Remove", path,
                        "the path ends in '.' or '..' (or names the sandbox root), not in an "
                        "entry; name the file or directory to remove"));
  }
  int dir = parent->dir.get();
  if (parent->trailing_slash) {
    // "x/" must name a directory, and "link/" would follow a symlink: the
    // fenced open refuses both before anything is removed.
    auto fd = FenceOpen(root_fd(), *relative, O_PATH | O_DIRECTORY, 0, path);
    if (!fd) return Fail(std::move(fd).error());
    if (unlinkat(dir, parent->name.c_str(), AT_REMOVEDIR) < 0)
      return Fail(FenceError(errno == EEXIST ? ENOTEMPTY : errno, "unlinkat", path));
    return {};
  }
  // unlinkat never follows the final component: a symlink entry is removed
  // itself, its target is untouched.
  if (unlinkat(dir, parent->name.c_str(), 0) == 0) return {};
  int err = errno;
  if (err == EISDIR) {
    if (unlinkat(dir, parent->name.c_str(), AT_REMOVEDIR) == 0) return {};
    err = errno;
    if (err == EEXIST) err = ENOTEMPTY;
  }
  return Fail(FenceError(err, "unlinkat", path));
}

Expected<std::vector<DirEntry>> FileSystem::ListDir(std::string_view path) const {
  auto relative = Resolve(path);
  if (!relative) return Fail(std::move(relative).error());
  auto fd = FenceOpen(root_fd(), *relative, O_RDONLY | O_DIRECTORY | O_NOCTTY, 0, path);
  if (!fd) return Fail(std::move(fd).error());
  std::unique_ptr<DIR, CloseDir> stream(fdopendir(fd->get()));
  if (!stream) return Fail(os::ErrnoError(errno, "fdopendir", path));
  fd->release();  // now owned by `stream`
  std::vector<DirEntry> entries;
  for (;;) {
    errno = 0;
    dirent* entry = readdir(stream.get());
    if (!entry) {
      if (errno != 0) return Fail(os::ErrnoError(errno, "readdir", path));
      break;
    }
    std::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    bool is_dir = entry->d_type == DT_DIR;
    if (entry->d_type == DT_UNKNOWN) {
      struct stat st;
      if (fstatat(dirfd(stream.get()), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
        is_dir = S_ISDIR(st.st_mode);
    }
    entries.push_back(DirEntry{.name = std::string(name), .is_dir = is_dir});
  }
  std::sort(entries.begin(), entries.end(),
            [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  return entries;
}

Status FileSystem::MakeDirAll(std::string_view path, FileMode mode) const {
  auto relative = Resolve(path);
  if (!relative) return Fail(std::move(relative).error());
  auto existing = FenceOpen(root_fd(), *relative, O_PATH | O_DIRECTORY, 0, path);
  if (existing) return {};
  if (existing.error().code() != Error::Code::NotFound) return Fail(std::move(existing).error());

  // Walk the components, creating the missing ones. Every directory is
  // reopened from the root with the fence, so `..` and symlinks are judged by
  // the kernel at every step; mkdirat acts on a plain name inside a
  // directory fd that was beneath the root when it was opened.
  const std::string& rel = *relative;
  UniqueFd parent;  // invalid: the root itself
  std::string prefix;
  std::size_t pos = 0;
  while (pos < rel.size()) {
    while (pos < rel.size() && rel[pos] == '/') ++pos;
    std::size_t start = pos;
    while (pos < rel.size() && rel[pos] != '/') ++pos;
    if (start == pos) break;
    std::string component = rel.substr(start, pos - start);
    std::string next_prefix = prefix.empty() ? component : prefix + "/" + component;
    int parent_fd = parent ? parent.get() : root_fd();
    if (component != "." && component != "..") {
      // Created owner-only, then set to `mode` exactly through an fd of the
      // new directory (never a path that could be swapped for a symlink).
      if (mkdirat(parent_fd, component.c_str(), 0700) == 0) {
        auto made = FenceOpenEntry(parent_fd, component, O_RDONLY | O_DIRECTORY, 0, path);
        if (!made) return Fail(std::move(made).error());
        if (fchmod(made->get(), mode & kPermissionBits) < 0)
          return Fail(os::ErrnoError(errno, "fchmod", path));
      } else if (errno != EEXIST) {
        return Fail(FenceError(errno, "mkdirat", path));
      }
    }
    auto opened = FenceOpen(root_fd(), next_prefix, O_PATH | O_DIRECTORY, 0, path);
    if (!opened) {
      if (opened.error().code() == Error::Code::NotADirectory)
        return Fail(OpError(Error::Code::NotADirectory, "MakeDirAll", path,
                            Quoted(next_prefix) + " exists and is not a directory"));
      return Fail(std::move(opened).error());
    }
    parent = std::move(*opened);
    prefix = std::move(next_prefix);
  }
  return {};
}

}  // namespace sandbox::local
