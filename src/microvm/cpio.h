// A writer of "newc" cpio archives, the format the Linux kernel unpacks as
// an initramfs. Entries are built in memory with fixed owners (root) and
// modes, so no staging directory and no root privileges are needed.
#ifndef SANDBOX_MICROVM_CPIO_H_
#define SANDBOX_MICROVM_CPIO_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace sandbox::vm {

// Appends entries to an archive held in memory. Not thread-safe.
class CpioWriter {
 public:
  // A directory (mode e.g. 0755); parents must have been added first.
  void AddDirectory(std::string_view path, std::uint32_t mode);
  // A regular file with `data` as its contents.
  void AddFile(std::string_view path, std::uint32_t mode, std::string_view data);
  // A symbolic link at `path` pointing to `target`.
  void AddSymlink(std::string_view path, std::string_view target);
  // A character device node (the kernel opens /dev/console for /init).
  void AddCharDevice(std::string_view path, std::uint32_t mode, std::uint32_t major,
                     std::uint32_t minor);
  // Appends the trailer and returns the archive; the writer is then empty.
  std::string Finish();

 private:
  void AddEntry(std::string_view path, std::uint32_t mode, std::string_view data,
                std::uint32_t rdev_major = 0, std::uint32_t rdev_minor = 0);

  std::string archive_;
  std::uint32_t next_inode_ = 1;
};

}  // namespace sandbox::vm

#endif  // SANDBOX_MICROVM_CPIO_H_
