// The microvm image builder's pieces that need no VM: the cpio writer, the
// vmlinux extraction, module dependencies and signatures.
#include <gtest/gtest.h>
#include <lzma.h>

#include <map>
#include <string>

#include "microvm/cpio.h"
#include "microvm/kernel.h"

namespace sandbox::vm {
namespace {

std::string Xz(std::string_view data) {
  std::string out(data.size() + 1024, '\0');
  std::size_t written = 0;
  EXPECT_EQ(lzma_easy_buffer_encode(6, LZMA_CHECK_CRC32, nullptr,
                                    reinterpret_cast<const std::uint8_t*>(data.data()), data.size(),
                                    reinterpret_cast<std::uint8_t*>(out.data()), &written, out.size()),
            LZMA_OK);
  out.resize(written);
  return out;
}

TEST(MicroVmCpio, WritesNewcEntriesPaddedToFourBytes) {
  CpioWriter cpio;
  cpio.AddDirectory("etc", 0755);
  cpio.AddFile("etc/hosts", 0644, "abcde");
  cpio.AddSymlink("bin", "usr/bin");
  cpio.AddCharDevice("dev/console", 0600, 5, 1);
  std::string archive = cpio.Finish();
  // Directory entry: magic, inode 1, mode 040755, uid 0, gid 0, nlink 2,
  // mtime 0, size 0, dev 0:0, rdev 0:0, namesize 4, check 0; "etc\0" pads
  // the 110-byte header + 4 to 116.
  std::string expected_dir = "070701" "00000001" "000041ED" "00000000" "00000000" "00000002"
                             "00000000" "00000000" "00000000" "00000000" "00000000" "00000000"
                             "00000004" "00000000" "etc" + std::string(1, '\0') +
                             std::string(2, '\0');
  ASSERT_GE(archive.size(), expected_dir.size());
  EXPECT_EQ(archive.substr(0, expected_dir.size()), expected_dir);
  std::size_t file = expected_dir.size();
  EXPECT_EQ(archive.substr(file, 14), "070701" "00000002");
  EXPECT_EQ(archive.substr(file + 14, 8), "000081A4");  // S_IFREG | 0644
  EXPECT_EQ(archive.substr(file + 54, 8), "00000005");  // file size
  // header 110 + "etc/hosts\0" 10 = 120 (aligned), then "abcde" padded to 8.
  EXPECT_EQ(archive.substr(file + 120, 8), std::string("abcde") + std::string(3, '\0'));
  std::size_t link = file + 128;
  EXPECT_EQ(archive.substr(link + 14, 8), "0000A1FF");  // S_IFLNK | 0777
  std::size_t console = archive.find("dev/console");
  ASSERT_NE(console, std::string::npos);
  std::size_t header = console - 110;
  EXPECT_EQ(archive.substr(header + 14, 8), "00002180");  // S_IFCHR | 0600
  EXPECT_EQ(archive.substr(header + 78, 16), "00000005" "00000001");  // rdev 5:1
  EXPECT_NE(archive.find("TRAILER!!!"), std::string::npos);
  EXPECT_EQ(archive.size() % 4, 0u);
}

TEST(MicroVmKernel, ExtractsTheXzCompressedElfAfterDecoys) {
  std::string elf = std::string("\x7f" "ELF", 4) + std::string(100000, 'k');
  std::string not_elf = Xz("not a kernel");
  // A bzImage-like file: setup code, a stray magic, a non-ELF stream, then
  // the kernel, then trailing bytes.
  std::string vmlinuz = std::string(5000, '\x90') + std::string("\xfd" "7zXZ\0", 6) + "junk" +
                        not_elf + Xz(elf) + std::string(300, '\0');
  auto extracted = ExtractVmlinux(vmlinuz);
  ASSERT_TRUE(extracted) << extracted.error().ToString();
  EXPECT_EQ(*extracted, elf);
}

TEST(MicroVmKernel, RefusesAKernelLargerThanTheBound) {
  std::string elf = std::string("\x7f" "ELF", 4) + std::string(1 << 20, 'k');
  auto extracted = ExtractVmlinux(Xz(elf), 64 * 1024);
  ASSERT_FALSE(extracted);
  EXPECT_EQ(extracted.error().code(), Error::Code::TooLarge);
}

TEST(MicroVmKernel, RefusesAFileWithoutAnXzKernel) {
  auto extracted = ExtractVmlinux("MZ plain bytes, no kernel here");
  ASSERT_FALSE(extracted);
  EXPECT_EQ(extracted.error().code(), Error::Code::InvalidArgument);
}

TEST(MicroVmKernel, ReadsModuleDependsFromModinfo) {
  std::string module = std::string("\x7f" "ELF....", 8) + std::string("license=GPL\0", 12) +
                       std::string("depends=9pnet,fscache,netfs-x\0", 30) +
                       std::string("name=9p\0", 8);
  EXPECT_EQ(ModuleDepends(module), (std::vector<std::string>{"9pnet", "fscache", "netfs_x"}));
  EXPECT_TRUE(ModuleDepends(std::string("\0depends=\0name=x\0", 17)).empty());
  EXPECT_TRUE(ModuleDepends("no modinfo at all").empty());
}

TEST(MicroVmKernel, OrdersModulesAfterTheirDependencies) {
  std::map<std::string, std::vector<std::string>> depends = {
      {"9p", {"9pnet", "fscache", "netfs"}}, {"9pnet", {}},
      {"fscache", {"netfs"}},                {"netfs", {}},
      {"9pnet_virtio", {"virtio", "9pnet", "virtio_ring"}},
      {"virtio", {}},                        {"virtio_ring", {}},
  };
  auto order = ModuleLoadOrder({"9pnet_virtio", "9p"}, depends);
  ASSERT_TRUE(order) << order.error().ToString();
  EXPECT_EQ(*order, (std::vector<std::string>{"virtio", "9pnet", "virtio_ring", "9pnet_virtio",
                                              "netfs", "fscache", "9p"}));
  auto missing = ModuleLoadOrder({"9p", "nosuch"}, depends);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), Error::Code::NotFound);
  depends["netfs"] = {"9p"};
  auto cycle = ModuleLoadOrder({"9p"}, depends);
  ASSERT_FALSE(cycle);
  EXPECT_EQ(cycle.error().code(), Error::Code::InvalidArgument);
}

TEST(MicroVmKernel, StripsAnAppendedModuleSignature) {
  std::string body = "\x7f" "ELF module body";
  std::string signature(300, 's');
  std::string info = std::string(8, '\0') + std::string("\x00\x00\x01\x2c", 4);  // 300
  std::string signed_module = body + signature + info + "~Module signature appended~\n";
  EXPECT_EQ(StripModuleSignature(signed_module), body);
  EXPECT_EQ(StripModuleSignature(body), body);
  // A length pointing before the start of the file is not trusted.
  std::string bogus = body + std::string(8, '\0') + std::string("\x7f\x00\x00\x00", 4) +
                      "~Module signature appended~\n";
  EXPECT_EQ(StripModuleSignature(bogus), bogus);
}

}  // namespace
}  // namespace sandbox::vm
