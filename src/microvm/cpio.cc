#include "microvm/cpio.h"

#include <sys/stat.h>

#include <cstdio>
#include <utility>

namespace sandbox::vm {
namespace {

void PadTo4(std::string& out) {
  while (out.size() % 4 != 0) out.push_back('\0');
}

void AppendHex(std::string& out, std::uint32_t value) {
  char buffer[9];
  std::snprintf(buffer, sizeof buffer, "%08X", value);
  out.append(buffer, 8);
}

}  // namespace

void CpioWriter::AddEntry(std::string_view path, std::uint32_t mode, std::string_view data,
                          std::uint32_t rdev_major, std::uint32_t rdev_minor) {
  // newc: "070701", then 13 eight-digit hex fields, the NUL-terminated name
  // and the data, each padded to a multiple of four bytes.
  archive_.append("070701");
  std::uint32_t fields[13] = {
      next_inode_++,
      mode,
      0,  // uid
      0,  // gid
      S_ISDIR(mode) ? 2u : 1u,
      0,  // mtime: fixed, so an image depends only on its contents
      static_cast<std::uint32_t>(data.size()),
      0, 0,  // dev major/minor
      rdev_major,
      rdev_minor,
      static_cast<std::uint32_t>(path.size() + 1),
      0,  // checksum (unused by newc)
  };
  for (std::uint32_t field : fields) AppendHex(archive_, field);
  archive_.append(path);
  archive_.push_back('\0');
  PadTo4(archive_);
  archive_.append(data);
  PadTo4(archive_);
}

void CpioWriter::AddDirectory(std::string_view path, std::uint32_t mode) {
  AddEntry(path, S_IFDIR | (mode & 07777), {});
}

void CpioWriter::AddFile(std::string_view path, std::uint32_t mode, std::string_view data) {
  AddEntry(path, S_IFREG | (mode & 07777), data);
}

void CpioWriter::AddSymlink(std::string_view path, std::string_view target) {
  AddEntry(path, S_IFLNK | 0777, target);
}

void CpioWriter::AddCharDevice(std::string_view path, std::uint32_t mode, std::uint32_t major,
                               std::uint32_t minor) {
  AddEntry(path, S_IFCHR | (mode & 07777), {}, major, minor);
}

std::string CpioWriter::Finish() {
  AddEntry("TRAILER!!!", 0, {});
  next_inode_ = 1;
  return std::exchange(archive_, {});
}

}  // namespace sandbox::vm
