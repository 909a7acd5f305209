// The PATH search (os::FindExecutable) and the misses it remembers on
// stable mounts (os::MissingNames, LocalOptions::stable_mounts).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <string>
#include <thread>

#include "os/missing_names.h"
#include "os/spawn.h"
#include "sandbox/local.h"
#include "test_util.h"

namespace sandbox::testing {
namespace {

using namespace std::chrono_literals;

dev_t DeviceOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_dev;
}

void WriteProgram(const std::string& path) {
  WriteHostFile(path, "#!/bin/sh\necho from " + path + "\n");
  ASSERT_EQ(::chmod(path.c_str(), 0755), 0);
}

TEST(PathSearchTest, FindsTheFirstExecutableRegularFileInPathOrder) {
  TempDir dirs;
  std::string a = dirs.Join("a"), b = dirs.Join("b"), c = dirs.Join("c");
  for (const auto& dir : {a, b, c}) ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  WriteHostFile(a + "/tool", "not executable");  // skipped: no x bit
  ASSERT_EQ(::mkdir((b + "/tool").c_str(), 0755), 0);  // skipped: a directory
  WriteProgram(c + "/tool");
  EXPECT_EQ(os::FindExecutable("tool", a + ":" + b + ":" + c, AT_FDCWD), c + "/tool");
  EXPECT_EQ(os::FindExecutable("absent", a + ":" + b + ":" + c, AT_FDCWD), std::nullopt);
}

TEST(PathSearchTest, AMissOnAStableDeviceIsRememberedForItsLifetime) {
  TempDir dirs;
  std::string bin = dirs.Join("bin");
  ASSERT_EQ(::mkdir(bin.c_str(), 0755), 0);
  os::MissingNames missing({DeviceOf(bin)}, 500ms);
  EXPECT_EQ(os::FindExecutable("tool", bin, AT_FDCWD, &missing), std::nullopt);
  EXPECT_EQ(missing.size(), 1u);
  // A program that appears within the lifetime is not asked for: the mount
  // was declared unchanging.
  WriteProgram(bin + "/tool");
  EXPECT_EQ(os::FindExecutable("tool", bin, AT_FDCWD, &missing), std::nullopt);
  std::this_thread::sleep_for(600ms);
  EXPECT_EQ(os::FindExecutable("tool", bin, AT_FDCWD, &missing), bin + "/tool");
}

TEST(PathSearchTest, AMissOnAnotherDeviceIsAskedForEveryTime) {
  TempDir dirs;
  std::string bin = dirs.Join("bin");
  ASSERT_EQ(::mkdir(bin.c_str(), 0755), 0);
  os::MissingNames missing({DeviceOf("/proc")}, 1h);
  EXPECT_EQ(os::FindExecutable("tool", bin, AT_FDCWD, &missing), std::nullopt);
  EXPECT_EQ(missing.size(), 0u);
  WriteProgram(bin + "/tool");
  EXPECT_EQ(os::FindExecutable("tool", bin, AT_FDCWD, &missing), bin + "/tool");
}

TEST(PathSearchTest, OnlyNamesThatDoNotExistAreRemembered) {
  TempDir dirs;
  std::string bin = dirs.Join("bin");
  ASSERT_EQ(::mkdir(bin.c_str(), 0755), 0);
  WriteHostFile(bin + "/data", "not executable");
  WriteProgram(bin + "/tool");
  os::MissingNames missing({DeviceOf(bin)}, 1h);
  EXPECT_EQ(os::FindExecutable("tool", bin, AT_FDCWD, &missing), bin + "/tool");
  EXPECT_EQ(os::FindExecutable("data", bin, AT_FDCWD, &missing), std::nullopt);
  EXPECT_EQ(missing.size(), 0u);
  // Made executable, it is found at once.
  ASSERT_EQ(::chmod((bin + "/data").c_str(), 0755), 0);
  EXPECT_EQ(os::FindExecutable("data", bin, AT_FDCWD, &missing), bin + "/data");
}

TEST(PathSearchTest, TheSameNameInAnotherDirectoryIsItsOwnMiss) {
  TempDir dirs;
  std::string first = dirs.Join("first"), second = dirs.Join("second");
  ASSERT_EQ(::mkdir(first.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(second.c_str(), 0755), 0);
  os::MissingNames missing({DeviceOf(first)}, 1h);
  EXPECT_EQ(os::FindExecutable("tool", first, AT_FDCWD, &missing), std::nullopt);
  WriteProgram(second + "/tool");
  EXPECT_EQ(os::FindExecutable("tool", first + ":" + second, AT_FDCWD, &missing), second + "/tool");
}

TEST(PathSearchTest, RememberedMissesAreBounded) {
  TempDir dirs;
  struct stat dir {};
  ASSERT_EQ(::stat(dirs.path().c_str(), &dir), 0);
  os::MissingNames missing({dir.st_dev}, 1h);
  for (std::size_t i = 0; i < os::MissingNames::kMaxNames + 100; ++i) {
    missing.Remember(dir, "name" + std::to_string(i));
    ASSERT_LE(missing.size(), os::MissingNames::kMaxNames);
  }
  EXPECT_TRUE(missing.Remembered(dir, "name" + std::to_string(os::MissingNames::kMaxNames + 99)));
}

TEST(PathSearchTest, ALocalSandboxRemembersMissesOnItsStableMounts) {
  TempDir workspace, system;
  std::string bin = system.Join("bin");
  ASSERT_EQ(::mkdir(bin.c_str(), 0755), 0);
  Command tool{.path = "tool", .env = {"PATH=" + bin}};
  LocalOptions options;
  options.root = workspace.path();
  options.stable_mounts = {system.path()};
  auto stable = NewLocalSandbox(options);
  ASSERT_TRUE(stable) << stable.error().ToString();
  options.stable_mounts.clear();
  auto plain = NewLocalSandbox(options);
  ASSERT_TRUE(plain) << plain.error().ToString();
  for (auto* sandbox : {stable->get(), plain->get()}) {
    auto result = sandbox->Exec({}, tool);
    ASSERT_TRUE(result) << result.error().ToString();
    EXPECT_EQ(result->exit_code, 127);
  }
  WriteProgram(bin + "/tool");
  auto remembered = (*stable)->Exec({}, tool);
  ASSERT_TRUE(remembered) << remembered.error().ToString();
  EXPECT_EQ(remembered->exit_code, 127) << "the miss is remembered for 5 s";
  auto asked = (*plain)->Exec({}, tool);
  ASSERT_TRUE(asked) << asked.error().ToString();
  EXPECT_EQ(asked->exit_code, 0) << asked->stderr_data;
  EXPECT_EQ(asked->stdout_data, "from " + bin + "/tool\n");
}

TEST(PathSearchTest, BadStableMountsAreRefused) {
  TempDir workspace;
  WriteHostFile(workspace.Join("file"), "x");
  struct Case {
    std::string mount;
    Error::Code code;
  };
  for (const Case& c : {Case{"relative/dir", Error::Code::InvalidArgument},
                        Case{"", Error::Code::InvalidArgument},
                        Case{workspace.Join("missing"), Error::Code::NotFound},
                        Case{workspace.Join("file"), Error::Code::NotADirectory}}) {
    LocalOptions options;
    options.root = workspace.path();
    options.stable_mounts = {c.mount};
    auto sandbox = NewLocalSandbox(options);
    ASSERT_FALSE(sandbox) << c.mount;
    EXPECT_EQ(sandbox.error().code(), c.code) << c.mount << ": " << sandbox.error().ToString();
  }
}

}  // namespace
}  // namespace sandbox::testing
