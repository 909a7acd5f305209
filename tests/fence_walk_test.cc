// The component-walk fence (os::WalkOpen, for kernels without openat2 such
// as gVisor's) against the kernel's: for every path and open mode of a tree
// with escapes, symlinks and `..`, WalkOpen must give what openat2 with the
// fence's resolve flags gives (the same success, the same errno).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "os/fence.h"
#include "os/syscalls.h"
#include "test_util.h"

namespace sandbox::testing {
namespace {

class FenceWalkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!os::HasOpenat2()) GTEST_SKIP() << "needs openat2 on this kernel to compare against";
    outside_ = dir_.path() + "/outside";
    root_ = dir_.path() + "/root";
    ASSERT_EQ(mkdir(outside_.c_str(), 0755), 0);
    ASSERT_EQ(mkdir(root_.c_str(), 0755), 0);
    WriteHostFile(outside_ + "/secret", "s");
    ASSERT_EQ(mkdir((root_ + "/d").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((root_ + "/d/e").c_str(), 0755), 0);
    WriteHostFile(root_ + "/f", "f");
    WriteHostFile(root_ + "/d/g", "g");
    ASSERT_EQ(symlink("f", (root_ + "/link_in").c_str()), 0);
    ASSERT_EQ(symlink("d", (root_ + "/dirlink_in").c_str()), 0);
    ASSERT_EQ(symlink((outside_ + "/secret").c_str(), (root_ + "/link_abs").c_str()), 0);
    ASSERT_EQ(symlink("../outside/secret", (root_ + "/link_up").c_str()), 0);
    ASSERT_EQ(symlink("nowhere", (root_ + "/dangling").c_str()), 0);
    ASSERT_EQ(symlink("/proc/self/root", (root_ + "/proc_root").c_str()), 0);
    root_fd_.reset(open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(root_fd_);
  }

  // errno as a negative number, or 0 for success (the fd is closed).
  static int Outcome(int fd) {
    if (fd < 0) return fd;
    close(fd);
    return 0;
  }

  TempDir dir_;
  std::string outside_, root_;
  os::UniqueFd root_fd_;
};

TEST_F(FenceWalkTest, AgreesWithOpenat2OnEveryPathAndMode) {
  const std::vector<std::string> paths = {
      ".", "", "f", "./f", "d", "d/", "d/g", "d/e/..", "d/e/../g", "d/../f", "d/../../outside/secret",
      "..", "../root/f", "d/e/../../..", "/etc/passwd", "f/", "f/x", "missing", "missing/x",
      "link_in", "link_in/", "dirlink_in", "dirlink_in/g", "link_abs", "link_up", "dangling",
      "proc_root", "proc_root/etc/passwd", "d//g", "d/./g", "d/e/", "d/g/..",
  };
  const std::vector<int> modes = {O_PATH, O_RDONLY, O_PATH | O_NOFOLLOW, O_RDONLY | O_DIRECTORY,
                                  O_PATH | O_DIRECTORY, O_RDONLY | O_NOFOLLOW};
  int compared = 0;
  for (const std::string& path : paths) {
    for (int mode : modes) {
      int kernel = Outcome(os::RawOpenat2(root_fd_.get(), path.c_str(),
                                          static_cast<std::uint64_t>(mode), 0, os::kFenceResolve));
      int walk = Outcome(os::WalkOpen(root_fd_.get(), path, mode, 0));
      EXPECT_EQ(walk, kernel) << "path '" << path << "' flags 0" << std::oct << mode;
      ++compared;
    }
  }
  EXPECT_EQ(compared, static_cast<int>(paths.size() * modes.size()));
}

TEST_F(FenceWalkTest, CreatesBeneathTheRootAndRefusesThroughSymlinks) {
  int created = os::WalkOpen(root_fd_.get(), "d/new", O_WRONLY | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(created, 0) << strerror(-created);
  close(created);
  struct stat st {};
  EXPECT_EQ(stat((root_ + "/d/new").c_str(), &st), 0);
  EXPECT_EQ(os::WalkOpen(root_fd_.get(), "link_abs", O_WRONLY | O_CREAT, 0600), -ELOOP);
  EXPECT_EQ(os::WalkOpen(root_fd_.get(), "dangling", O_WRONLY | O_CREAT, 0600), -ELOOP);
  EXPECT_EQ(os::WalkOpen(root_fd_.get(), "dirlink_in/new", O_WRONLY | O_CREAT, 0600), -ELOOP);
  EXPECT_EQ(os::WalkOpen(root_fd_.get(), "../escaped", O_WRONLY | O_CREAT, 0600), -EXDEV);
  EXPECT_NE(stat((dir_.path() + "/escaped").c_str(), &st), 0);
  EXPECT_NE(stat((outside_ + "/nowhere").c_str(), &st), 0);
  EXPECT_EQ(stat((outside_ + "/secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 1);  // not truncated through link_abs
}

}  // namespace
}  // namespace sandbox::testing
