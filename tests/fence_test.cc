// Unit tests of the path fence (src/os/fence.h) and of local::FileSystem used
// directly, without a Sandbox around it.
#include "os/fence.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <vector>

#include "local/files.h"
#include "os/syscalls.h"
#include "sandbox/local.h"
#include "test_util.h"

namespace sandbox::testing {
namespace {

using local::FileSystem;

struct RelativeCase {
  std::string path;
  std::string workdir;
  std::optional<std::string> relative;  // nullopt: refused with `code`
  Error::Code code = Error::Code::EscapesRoot;
};

TEST(FenceRelativePathTest, TurnsSandboxPathsIntoRelativePaths) {
  const std::vector<RelativeCase> cases = {
      {"", "/w", "."},
      {".", "/w", "."},
      {"a/b", "/w", "a/b"},
      {"a/../b", "/w", "a/../b"},  // the kernel judges ".."
      {"../x", "/w", "../x"},      // ... including one that escapes
      {"a/", "/w", "a/"},
      {"/w", "/w", "."},
      {"/w/", "/w", "."},
      {"/w//", "/w", "."},
      {"/w/a", "/w", "a"},
      {"/w//a/b/", "/w", "a/b/"},
      {"//w/a", "/w", "a"},
      {"/./w/./a", "/w", "./a"},
      {"/w/../etc/passwd", "/w", "../etc/passwd"},
      {"/ab/w/x", "/ab/w", "x"},
      {"/etc/passwd", "/", "etc/passwd"},
      {"/", "/", "."},
      {"/w2/x", "/w", std::nullopt},
      {"/wx", "/w", std::nullopt},
      {"/", "/w", std::nullopt},
      {"/etc/passwd", "/w", std::nullopt},
      {"/ab/x", "/ab/w", std::nullopt},
      {"/ab", "/ab/w", std::nullopt},
      {"/../w/x", "/w", std::nullopt},
      {"/x/../w/a", "/w", std::nullopt},
      {std::string("a\0b", 3), "/w", std::nullopt, Error::Code::InvalidArgument},
      {std::string("/w/a\0", 5), "/w", std::nullopt, Error::Code::InvalidArgument},
      {std::string("\0", 1), "/w", std::nullopt, Error::Code::InvalidArgument},
  };
  for (const auto& c : cases) {
    auto relative = os::FenceRelativePath(c.path, c.workdir);
    if (c.relative) {
      ASSERT_TRUE(relative.has_value())
          << "'" << c.path << "' under " << c.workdir << ": " << relative.error().ToString();
      EXPECT_EQ(*relative, *c.relative) << "'" << c.path << "' under " << c.workdir;
    } else {
      ASSERT_FALSE(relative.has_value()) << "'" << c.path << "' under " << c.workdir;
      EXPECT_EQ(relative.error().code(), c.code) << relative.error().ToString();
    }
  }
  auto refused = os::FenceRelativePath("/etc/passwd", "/w");
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message().find("path '/etc/passwd' escapes the sandbox root"),
            std::string::npos)
      << refused.error().message();
}

TEST(FenceRelativePathTest, NormalizeWorkdir) {
  EXPECT_EQ(os::NormalizeWorkdir("/a//./b/").value(), "/a/b");
  EXPECT_EQ(os::NormalizeWorkdir("/").value(), "/");
  EXPECT_EQ(os::NormalizeWorkdir("//").value(), "/");
  EXPECT_EQ(os::NormalizeWorkdir("/workspace").value(), "/workspace");
  for (const std::string& bad :
       std::vector<std::string>{"", "a", "./a", "/a/../b", "/..", std::string("/a\0", 3)}) {
    auto result = os::NormalizeWorkdir(bad);
    ASSERT_FALSE(result.has_value()) << bad;
    EXPECT_EQ(result.error().code(), Error::Code::InvalidArgument);
  }
}

class FenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!os::HasOpenat2()) GTEST_SKIP() << "openat2 is unavailable (Linux < 5.6)";
    root_fd_ = open(dir_.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(root_fd_, 0);
    ASSERT_EQ(mkdir(dir_.Join("a").c_str(), 0755), 0);
    ASSERT_EQ(mkdir(dir_.Join("a/b").c_str(), 0755), 0);
    WriteHostFile(dir_.Join("a/b/file"), "data");
    ASSERT_EQ(symlink("a", dir_.Join("link").c_str()), 0);
  }
  void TearDown() override {
    if (root_fd_ >= 0) close(root_fd_);
  }

  static ino_t InodeOfFd(int fd) {
    struct stat st {};
    EXPECT_EQ(fstat(fd, &st), 0);
    return st.st_ino;
  }
  ino_t InodeOfHost(const std::string& relative) {
    struct stat st {};
    EXPECT_EQ(lstat(dir_.Join(relative).c_str(), &st), 0);
    return st.st_ino;
  }

  TempDir dir_;
  int root_fd_ = -1;
};

TEST_F(FenceTest, OpenParentSplitsTheFinalComponent) {
  struct Case {
    std::string relative, parent, name;
    bool trailing_slash;
  };
  for (const Case& c :
       {Case{"a/b/file", "a/b", "file", false}, Case{"a", ".", "a", false},
        Case{"a/b/", "a", "b", true}, Case{"a//b//", "a", "b", true}, Case{".", ".", ".", false},
        Case{"a/..", "a", "..", false}, Case{"a/b/missing", "a/b", "missing", false}}) {
    auto parent = os::FenceOpenParent(root_fd_, c.relative, c.relative);
    ASSERT_TRUE(parent.has_value()) << c.relative << ": " << parent.error().ToString();
    EXPECT_EQ(parent->name, c.name) << c.relative;
    EXPECT_EQ(parent->trailing_slash, c.trailing_slash) << c.relative;
    EXPECT_EQ(parent->NameIsDot(), c.name == "." || c.name == "..") << c.relative;
    EXPECT_EQ(InodeOfFd(parent->dir.get()), InodeOfHost(c.parent)) << c.relative;
    EXPECT_NE(fcntl(parent->dir.get(), F_GETFD) & FD_CLOEXEC, 0);
  }
  for (const char* escape : {"../x", "a/../../x", "link/b/file", "a/b/file/x"}) {
    auto parent = os::FenceOpenParent(root_fd_, escape, escape);
    EXPECT_FALSE(parent.has_value()) << escape;
  }
  EXPECT_EQ(os::FenceOpenParent(root_fd_, "link/b/file", "link/b/file").error().code(),
            Error::Code::EscapesRoot);
  EXPECT_EQ(os::FenceOpenParent(root_fd_, "a/b/file/x", "a/b/file/x").error().code(),
            Error::Code::NotADirectory);
  EXPECT_EQ(os::FenceOpenParent(root_fd_, "missing/x", "missing/x").error().code(),
            Error::Code::NotFound);
}

TEST_F(FenceTest, OpenRefusesEscapesWithClearMessages) {
  auto up = os::FenceOpen(root_fd_, "../x", O_PATH, 0, "../x");
  ASSERT_FALSE(up.has_value());
  EXPECT_EQ(up.error().code(), Error::Code::EscapesRoot);
  EXPECT_EQ(up.error().message(), "openat2 '../x': path '../x' escapes the sandbox root");

  auto link = os::FenceOpen(root_fd_, "link/b/file", O_RDONLY, 0, "link/b/file");
  ASSERT_FALSE(link.has_value());
  EXPECT_EQ(link.error().code(), Error::Code::EscapesRoot);
  EXPECT_NE(link.error().message().find("symlinks are refused"), std::string::npos)
      << link.error().message();

  auto missing = os::FenceOpen(root_fd_, "a/missing", O_RDONLY, 0, "a/missing");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code(), Error::Code::NotFound);
  EXPECT_EQ(missing.error().message(), "openat2 'a/missing': No such file or directory");

  auto absolute = os::FenceOpen(root_fd_, "/etc/passwd", O_RDONLY, 0, "/etc/passwd");
  ASSERT_FALSE(absolute.has_value());
  EXPECT_EQ(absolute.error().code(), Error::Code::EscapesRoot);

  auto magic = os::FenceOpen(root_fd_, "a", O_PATH, 0, "a");
  ASSERT_TRUE(magic.has_value());
  ASSERT_EQ(symlink(("/proc/self/fd/" + std::to_string(magic->get())).c_str(),
                    dir_.Join("magic").c_str()),
            0);
  auto through_magic = os::FenceOpen(root_fd_, "magic/b/file", O_RDONLY, 0, "magic/b/file");
  ASSERT_FALSE(through_magic.has_value());
  EXPECT_EQ(through_magic.error().code(), Error::Code::EscapesRoot);

  auto file = os::FenceOpen(root_fd_, "a/b/file", O_RDONLY, 0, "a/b/file");
  ASSERT_TRUE(file.has_value()) << file.error().ToString();
  EXPECT_NE(fcntl(file->get(), F_GETFD) & FD_CLOEXEC, 0);
  char buffer[8];
  EXPECT_EQ(read(file->get(), buffer, sizeof buffer), 4);
}

TEST_F(FenceTest, OpenEntryNeverFollowsTheName) {
  auto root = os::FenceOpen(root_fd_, ".", O_PATH | O_DIRECTORY, 0, ".");
  ASSERT_TRUE(root.has_value());
  // With O_PATH, a symlink entry yields an fd of the link itself.
  auto link = os::FenceOpenEntry(root->get(), "link", O_PATH, 0, "link");
  ASSERT_TRUE(link.has_value()) << link.error().ToString();
  struct stat st {};
  ASSERT_EQ(fstat(link->get(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  auto followed = os::FenceOpenEntry(root->get(), "link", O_RDONLY, 0, "link");
  ASSERT_FALSE(followed.has_value());
  EXPECT_EQ(followed.error().code(), Error::Code::EscapesRoot);
  // O_NOFOLLOW|O_DIRECTORY on a symlink: the kernel says ENOTDIR; not followed.
  auto as_dir = os::FenceOpenEntry(root->get(), "link", O_RDONLY | O_DIRECTORY, 0, "link");
  ASSERT_FALSE(as_dir.has_value());
  EXPECT_EQ(as_dir.error().code(), Error::Code::NotADirectory);
  // A dangling symlink is never created through.
  ASSERT_EQ(symlink(dir_.Join("created").c_str(), dir_.Join("dangling").c_str()), 0);
  auto created = os::FenceOpenEntry(root->get(), "dangling", O_WRONLY | O_CREAT, 0644, "dangling");
  ASSERT_FALSE(created.has_value());
  EXPECT_EQ(created.error().code(), Error::Code::EscapesRoot);
  EXPECT_FALSE(HostPathExists(dir_.Join("created")));
  for (const char* bad : {".", "..", "a/b", ""}) {
    auto refused = os::FenceOpenEntry(root->get(), bad, O_PATH, 0, bad);
    ASSERT_FALSE(refused.has_value()) << bad;
    EXPECT_EQ(refused.error().code(), Error::Code::Internal) << bad;
  }
}

TEST_F(FenceTest, FenceErrorMapsErrno) {
  EXPECT_EQ(os::FenceError(EXDEV, "openat2", "x").code(), Error::Code::EscapesRoot);
  EXPECT_EQ(os::FenceError(ELOOP, "openat2", "x").code(), Error::Code::EscapesRoot);
  EXPECT_EQ(os::FenceError(ENXIO, "openat2", "x").code(), Error::Code::NotARegularFile);
  EXPECT_EQ(os::FenceError(ENOTEMPTY, "unlinkat", "x").code(), Error::Code::NotEmpty);
  EXPECT_EQ(os::FenceError(ENOENT, "openat2", "x").code(), Error::Code::NotFound);
  EXPECT_EQ(os::FenceError(ENOTDIR, "openat2", "x").code(), Error::Code::NotADirectory);
  EXPECT_EQ(os::FenceError(EACCES, "openat2", "x").code(), Error::Code::PermissionDenied);
  EXPECT_EQ(os::FenceError(ENOENT, "openat2", "src/x").message(),
            "openat2 'src/x': No such file or directory");
}

TEST(FenceFileSystemTest, OpenValidatesTheRoot) {
  TempDir dir;
  WriteHostFile(dir.Join("file"), "x");
  ASSERT_EQ(mkdir(dir.Join("root").c_str(), 0755), 0);
  ASSERT_EQ(symlink(dir.Join("root").c_str(), dir.Join("root-link").c_str()), 0);

  auto missing = FileSystem::Open(dir.Join("missing"), "", 1024);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code(), Error::Code::NotFound);
  auto file = FileSystem::Open(dir.Join("file"), "", 1024);
  ASSERT_FALSE(file.has_value());
  EXPECT_EQ(file.error().code(), Error::Code::NotADirectory);
  auto empty = FileSystem::Open("", "", 1024);
  ASSERT_FALSE(empty.has_value());
  EXPECT_EQ(empty.error().code(), Error::Code::InvalidArgument);
  auto relative_workdir = FileSystem::Open(dir.Join("root"), "workspace", 1024);
  ASSERT_FALSE(relative_workdir.has_value());
  EXPECT_EQ(relative_workdir.error().code(), Error::Code::InvalidArgument);

  // The root is canonical even when named through a symlink and "..".
  auto fs = FileSystem::Open(dir.Join("root-link/../root/"), "", 1024);
  ASSERT_TRUE(fs.has_value()) << fs.error().ToString();
  EXPECT_EQ(fs->host_root(), dir.Join("root"));
  EXPECT_EQ(fs->workdir(), dir.Join("root"));
  auto with_workdir = FileSystem::Open(dir.Join("root"), "/workspace//", 1024);
  ASSERT_TRUE(with_workdir.has_value());
  EXPECT_EQ(with_workdir->workdir(), "/workspace");
  EXPECT_EQ(with_workdir->host_root(), dir.Join("root"));
  EXPECT_NE(fcntl(with_workdir->root_fd(), F_GETFD) & FD_CLOEXEC, 0);
}

TEST(FenceFileSystemTest, AbsolutePathsAreJudgedAgainstTheWorkdirNotTheHostPath) {
  TempDir dir;
  WriteHostFile(dir.Join("f"), "data");
  auto fs = FileSystem::Open(dir.path(), "/workspace", 1024);
  ASSERT_TRUE(fs.has_value());
  auto read = fs->ReadFile("/workspace/f");
  ASSERT_TRUE(read.has_value()) << read.error().ToString();
  EXPECT_EQ(*read, "data");
  auto host = fs->ReadFile(dir.Join("f"));
  ASSERT_FALSE(host.has_value());
  EXPECT_EQ(host.error().code(), Error::Code::EscapesRoot);
  auto sibling = fs->ReadFile("/workspace2/f");
  ASSERT_FALSE(sibling.has_value());
  EXPECT_EQ(sibling.error().code(), Error::Code::EscapesRoot);
}

TEST(FenceFileSystemTest, OpenDirectoryGivesAPathFdBeneathTheRoot) {
  TempDir dir;
  ASSERT_EQ(mkdir(dir.Join("sub").c_str(), 0755), 0);
  WriteHostFile(dir.Join("file"), "x");
  ASSERT_EQ(symlink("sub", dir.Join("link").c_str()), 0);
  auto fs = FileSystem::Open(dir.path(), "", 1024);
  ASSERT_TRUE(fs.has_value());
  for (const char* path : {"", ".", "sub", "sub/", "sub/.."}) {
    auto fd = fs->OpenDirectory(path);
    ASSERT_TRUE(fd.has_value()) << path << ": " << fd.error().ToString();
    int flags = fcntl(fd->get(), F_GETFL);
    EXPECT_NE(flags & O_PATH, 0) << path;
    EXPECT_NE(fcntl(fd->get(), F_GETFD) & FD_CLOEXEC, 0) << path;
  }
  struct Case {
    const char* path;
    Error::Code code;
  };
  for (const Case& c :
       {Case{"file", Error::Code::NotADirectory}, Case{"link", Error::Code::EscapesRoot},
        Case{"..", Error::Code::EscapesRoot}, Case{"/", Error::Code::EscapesRoot},
        Case{"missing", Error::Code::NotFound}}) {
    auto fd = fs->OpenDirectory(c.path);
    ASSERT_FALSE(fd.has_value()) << c.path;
    EXPECT_EQ(fd.error().code(), c.code) << c.path << ": " << fd.error().ToString();
  }
}

TEST(FenceFileSystemTest, ReadFileRefusesFilesAboveTheBound) {
  TempDir dir;
  WriteHostFile(dir.Join("sixteen"), std::string(16, 's'));
  WriteHostFile(dir.Join("seventeen"), std::string(17, 's'));
  auto fs = FileSystem::Open(dir.path(), "", 16);
  ASSERT_TRUE(fs.has_value());
  auto ok = fs->ReadFile("sixteen");
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(*ok, std::string(16, 's'));
  auto big = fs->ReadFile("seventeen");
  ASSERT_FALSE(big.has_value());
  EXPECT_EQ(big.error().code(), Error::Code::TooLarge);
  EXPECT_NE(big.error().message().find("17 bytes"), std::string::npos) << big.error().message();
  // ReadFileLimit never exceeds the sandbox's bound either.
  auto limited = fs->ReadFileLimit("seventeen", 100);
  ASSERT_TRUE(limited.has_value());
  EXPECT_EQ(limited->data, std::string(16, 's'));
  EXPECT_TRUE(limited->truncated);
  auto unlimited = fs->ReadFileLimit("seventeen", 0);
  ASSERT_FALSE(unlimited.has_value());
  EXPECT_EQ(unlimited.error().code(), Error::Code::TooLarge);
}

TEST(FenceFileSystemTest, HugeSparseFileIsRefusedBeforeAnythingIsAllocated) {
  TempDir dir;
  int fd = open(dir.Join("huge").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, std::int64_t{64} << 30), 0);  // 64 GiB, no blocks
  close(fd);
  auto fs = FileSystem::Open(dir.path(), "", std::uint64_t{1} << 30);
  ASSERT_TRUE(fs.has_value());
  std::size_t before = PeakRssBytes();
  auto read = fs->ReadFile("huge");
  ASSERT_FALSE(read.has_value());
  EXPECT_EQ(read.error().code(), Error::Code::TooLarge);
  auto limited = fs->ReadFileLimit("huge", 1 << 20);
  ASSERT_TRUE(limited.has_value()) << limited.error().ToString();
  EXPECT_EQ(limited->data, std::string(1 << 20, '\0'));
  EXPECT_TRUE(limited->truncated);
  EXPECT_LT(PeakRssBytes(), before + (std::size_t{64} << 20));
}

TEST(FenceFileSystemTest, ReadFileLimitReadsFilesWhoseSizeIsNotKnownAhead) {
  // /proc files report st_size 0: the bound must come from reading, not stat.
  TempDir dir;
  auto fs = FileSystem::Open("/proc/self", "", 1 << 20);
  ASSERT_TRUE(fs.has_value());
  auto status = fs->ReadFileLimit("status", 10);
  ASSERT_TRUE(status.has_value()) << status.error().ToString();
  EXPECT_EQ(status->data.size(), 10u);
  EXPECT_TRUE(status->truncated);
  auto whole = fs->ReadFile("status");
  ASSERT_TRUE(whole.has_value()) << whole.error().ToString();
  EXPECT_NE(whole->find("VmRSS"), std::string::npos);
  auto tiny = FileSystem::Open("/proc/self", "", 10);
  ASSERT_TRUE(tiny.has_value());
  auto too_large = tiny->ReadFile("status");
  ASSERT_FALSE(too_large.has_value());
  EXPECT_EQ(too_large.error().code(), Error::Code::TooLarge);
}

int CountOpenFds() {
  int count = 0;
  DIR* fds = opendir("/proc/self/fd");
  while (dirent* entry = readdir(fds)) count += entry->d_name[0] != '.';
  closedir(fds);
  return count;
}

TEST(FenceFileSystemTest, NoDescriptorLeaksOnSuccessOrFailure) {
  TempDir dir;
  ASSERT_EQ(mkdir(dir.Join("d").c_str(), 0755), 0);
  ASSERT_EQ(mkfifo(dir.Join("fifo").c_str(), 0644), 0);
  ASSERT_EQ(symlink("/etc", dir.Join("link").c_str()), 0);
  auto fs = FileSystem::Open(dir.path(), "", 1024);
  ASSERT_TRUE(fs.has_value());
  int before = CountOpenFds();
  for (int i = 0; i < 50; ++i) {
    for (const char* path : {"d/f", "fifo", "link/passwd", "../x", "d", "missing/x"}) {
      (void)fs->WriteFile(path, "data", 0644);
      (void)fs->AppendFile(path, "data", 0644);
      (void)fs->ReadFile(path);
      (void)fs->ReadFileLimit(path, 2);
      (void)fs->ListDir(path);
      (void)fs->OpenDirectory(path);
      (void)fs->MakeDirAll(std::string(path) + "/m", 0755);
      (void)fs->Remove(std::string(path) + "/m");
    }
    (void)fs->Remove("d/f");
  }
  EXPECT_EQ(CountOpenFds(), before);
  // No temporary file is left; "missing" was made by MakeDirAll("missing/x/m").
  auto list = fs->ListDir(".");
  ASSERT_TRUE(list.has_value());
  EXPECT_EQ(*list, (std::vector<DirEntry>{
                       {"d", true}, {"fifo", false}, {"link", false}, {"missing", true}}));
}

TEST(FenceFileSystemTest, WriteFileOverAVeryLongNameWorks) {
  TempDir dir;
  auto fs = FileSystem::Open(dir.path(), "", 1024);
  ASSERT_TRUE(fs.has_value());
  const std::string name(255, 'n');  // NAME_MAX: the temporary name must still fit
  ASSERT_TRUE(fs->WriteFile(name, "long", 0644).has_value());
  EXPECT_EQ(ReadHostFile(dir.Join(name)), "long");
  auto too_long = fs->WriteFile(std::string(256, 'n'), "x", 0644);
  ASSERT_FALSE(too_long.has_value());
  EXPECT_EQ(too_long.error().code(), Error::Code::InvalidArgument);
}

TEST(LocalSandboxFilesTest, ReadBoundComesFromTheFactoryOptions) {
  TempDir dir;
  WriteHostFile(dir.Join("small"), std::string(16, 'x'));
  WriteHostFile(dir.Join("big"), std::string(17, 'x'));
  LocalOptions options;
  options.root = dir.path();
  options.max_read_bytes = 16;
  auto sandbox = NewLocalSandbox(options);
  ASSERT_TRUE(sandbox.has_value()) << sandbox.error().ToString();
  auto small = (*sandbox)->ReadFile({}, "small");
  ASSERT_TRUE(small.has_value());
  EXPECT_EQ(*small, std::string(16, 'x'));
  auto big = (*sandbox)->ReadFile({}, "big");
  ASSERT_FALSE(big.has_value());
  EXPECT_EQ(big.error().code(), Error::Code::TooLarge);
  auto* limited = As<LimitedReader>(**sandbox);
  ASSERT_NE(limited, nullptr);
  auto part = limited->ReadFileLimit({}, "big", 4);
  ASSERT_TRUE(part.has_value());
  EXPECT_EQ(part->data, "xxxx");
  EXPECT_TRUE(part->truncated);
}

}  // namespace
}  // namespace sandbox::testing
