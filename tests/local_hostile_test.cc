// Hostile tests specific to the local backend's host-side bounds: floods
// that must not grow this process, and containment state left behind.
#include <gtest/gtest.h>
#include <stdio.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "backends.h"
#include "os/cgroup.h"
#include "sandbox/local.h"
#include "test_util.h"

namespace sandbox::testing {
namespace {

std::unique_ptr<Sandbox> MakeLocal(const std::string& root) {
  LocalOptions options;
  options.root = root;
  auto made = NewLocalSandbox(options);
  EXPECT_TRUE(made) << made.error().ToString();
  return made ? std::move(*made) : nullptr;
}

// `yes` for 10 s floods stdout with gigabytes; the host keeps only the cap.
TEST(LocalHostile, TenSecondsOfYesKeepsHostMemoryUnderTheCap) {
  SANDBOX_SKIP_UNLESS_AVAILABLE("local");
  TempDir dir;
  auto sb = MakeLocal(dir.path());
  ASSERT_NE(sb, nullptr);
  {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";  // resets VmHWM to the current RSS
  }
  std::size_t before = CurrentRssBytes();
  auto result = sb->Exec({}, Command{.path = "yes", .timeout = std::chrono::seconds(10)});
  std::size_t peak = PeakRssBytes();
  ASSERT_TRUE(result) << result.error().ToString();
  EXPECT_TRUE(result->timed_out);
  EXPECT_EQ(result->stdout_data.size(), std::size_t{1} << 20);
  EXPECT_TRUE(result->stdout_truncated);
  EXPECT_GT(result->stdout_dropped, std::uint64_t{100} << 20);
  EXPECT_EQ(result->stdout_data.substr(0, 4), "y\ny\n");
  constexpr std::size_t kCap = std::size_t{1} << 20;
  EXPECT_LT(peak, before + kCap + (std::size_t{16} << 20))
      << "peak RSS grew by " << (peak - before) << " bytes";
}

// A stream of stderr at the same time as stdout: both capped independently.
TEST(LocalHostile, BothStreamsFloodingAreCappedIndependently) {
  SANDBOX_SKIP_UNLESS_AVAILABLE("local");
  TempDir dir;
  auto sb = MakeLocal(dir.path());
  ASSERT_NE(sb, nullptr);
  auto result = sb->Exec(
      {}, Command{.path = "/bin/sh",
                  .args = {"-c", "head -c 5000000 /dev/zero & head -c 3000000 /dev/zero >&2; wait"},
                  .output_limit = 4096});
  ASSERT_TRUE(result);
  EXPECT_EQ(result->exit_code, 0);
  EXPECT_EQ(result->stdout_data, std::string(4096, '\0'));
  EXPECT_EQ(result->stderr_data, std::string(4096, '\0'));
  EXPECT_EQ(result->stdout_dropped, 5000000u - 4096u);
  EXPECT_EQ(result->stderr_dropped, 3000000u - 4096u);
}

// Every command's tree lives in a cgroup that is empty again afterwards.
TEST(LocalHostile, NoCgroupStaysPopulatedAfterExec) {
  SANDBOX_SKIP_UNLESS_AVAILABLE("local");
  TempDir dir;
  auto sb = MakeLocal(dir.path());
  ASSERT_NE(sb, nullptr);
  std::string marker = UniqueMarker();
  auto result = sb->Exec(
      {}, Command{.path = "/bin/sh", .args = {"-c", "setsid sleep " + marker + " & echo ok"}});
  ASSERT_TRUE(result);
  EXPECT_EQ(result->stdout_data, "ok\n");
  auto pool = os::CgroupPool::Shared();
  ASSERT_TRUE(pool);
  int cgroups = 0;
  for (const auto& entry : std::filesystem::directory_iterator((*pool)->path())) {
    if (!entry.is_directory()) continue;
    ++cgroups;
    std::string events = ReadHostFile(entry.path().string() + "/cgroup.events");
    EXPECT_NE(events.find("populated 0"), std::string::npos) << entry.path() << ": " << events;
  }
  EXPECT_GE(cgroups, 1);
  EXPECT_EQ(WaitForNoProcessesWithArg(marker, 2000), 0);
}

// A sandbox destroyed without Close still kills what it started.
TEST(LocalHostile, DestroyingTheSandboxKillsLiveProcessesAndSessions) {
  SANDBOX_SKIP_UNLESS_AVAILABLE("local");
  TempDir dir;
  std::string marker = UniqueMarker();
  std::unique_ptr<Process> process;
  std::unique_ptr<Session> session;
  {
    auto sb = MakeLocal(dir.path());
    ASSERT_NE(sb, nullptr);
    auto started =
        As<ProcessHost>(*sb)->StartProcess({}, Command{.path = "sleep", .args = {marker}});
    ASSERT_TRUE(started);
    process = std::move(*started);
    auto opened = As<Sessioner>(*sb)->NewSession({});
    ASSERT_TRUE(opened);
    session = std::move(*opened);
    auto bg = session->Exec({}, Command{.path = "eval", .args = {"sleep " + marker + " &"}});
    ASSERT_TRUE(bg);
    EXPECT_EQ(CountProcessesWithArg(marker), 2);
  }
  EXPECT_EQ(WaitForNoProcessesWithArg(marker, 2000), 0);
  auto after = session->Exec({}, Command{.path = "true"});
  ASSERT_FALSE(after);
  EXPECT_EQ(after.error().code(), Error::Code::Unavailable);
}

// A session keeps its per-call FIFOs in a private directory under TMPDIR; a
// call that ends the session (a timeout, the shell exiting) must not leave
// that directory behind.
TEST(LocalHostile, SessionsThatDieLeaveNoPrivateDirectoryBehind) {
  SANDBOX_SKIP_UNLESS_AVAILABLE("local");
  TempDir dir, tmp;
  const char* old_tmpdir = getenv("TMPDIR");
  std::string saved = old_tmpdir ? old_tmpdir : "";
  ASSERT_EQ(setenv("TMPDIR", tmp.path().c_str(), 1), 0);
  {
    auto sb = MakeLocal(dir.path());
    ASSERT_NE(sb, nullptr);
    for (const char* script : {"sleep 5", "exit 3"}) {
      auto opened = As<Sessioner>(*sb)->NewSession({});
      ASSERT_TRUE(opened) << opened.error().ToString();
      EXPECT_EQ(std::distance(std::filesystem::directory_iterator(tmp.path()), {}), 1);
      auto result = (*opened)->Exec(
          {}, Command{.path = "eval", .args = {script}, .timeout = std::chrono::milliseconds(200)});
      EXPECT_FALSE(result && result->exit_code == 0) << script;
      ASSERT_FALSE((*opened)->Exec({}, Command{.path = "true"})) << script;  // the session is dead
      EXPECT_EQ(std::distance(std::filesystem::directory_iterator(tmp.path()), {}), 0) << script;
    }
  }
  if (old_tmpdir)
    setenv("TMPDIR", saved.c_str(), 1);
  else
    unsetenv("TMPDIR");
}

TEST(LocalOptionsTest, RejectsBadOptionsWithClearErrors) {
  LocalOptions none;
  auto missing_root = NewLocalSandbox(none);
  ASSERT_FALSE(missing_root);
  EXPECT_EQ(missing_root.error().code(), Error::Code::InvalidArgument);
  LocalOptions nowhere;
  nowhere.root = "/definitely/not/here";
  auto not_found = NewLocalSandbox(nowhere);
  ASSERT_FALSE(not_found);
  EXPECT_EQ(not_found.error().code(), Error::Code::NotFound);
}

}  // namespace
}  // namespace sandbox::testing
