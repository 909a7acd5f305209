// The PID-namespace containment of the local backend (the one the agent uses
// inside every isolated backend): its init reaps every orphan, holds no fd of
// the host, and takes the whole tree down with it.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backends.h"
#include "sandbox/local.h"
#include "test_util.h"

namespace sandbox::testing {
namespace {

using std::chrono::milliseconds;

// One line of /proc/<pid>/status ("PPid", "State", "NSpid"), "" if absent.
std::string StatusField(const std::string& pid, const std::string& field) {
  std::ifstream in("/proc/" + pid + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      auto value = line.substr(field.size() + 1);
      return value.substr(value.find_first_not_of(" \t"));
    }
  }
  return "";
}

std::vector<std::string> AllPids() {
  std::vector<std::string> pids;
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return pids;
  while (dirent* entry = readdir(dir)) {
    std::string name = entry->d_name;
    if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos)
      pids.push_back(name);
  }
  closedir(dir);
  return pids;
}

// The host pids of the PID-namespace inits this test process started: its
// children whose NSpid ends in 1.
std::vector<std::string> OurInits() {
  std::vector<std::string> inits;
  std::string self = std::to_string(getpid());
  for (const std::string& pid : AllPids()) {
    if (StatusField(pid, "PPid") != self) continue;
    std::string nspid = StatusField(pid, "NSpid");
    if (nspid.size() >= 2 && nspid.substr(nspid.size() - 2) == "\t1") inits.push_back(pid);
  }
  return inits;
}

int ZombieChildrenOf(const std::string& parent) {
  int zombies = 0;
  for (const std::string& pid : AllPids())
    if (StatusField(pid, "PPid") == parent && StatusField(pid, "State").rfind("Z", 0) == 0)
      ++zombies;
  return zombies;
}

class PidNamespaceTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SANDBOX_SKIP_UNLESS_AVAILABLE("local_pidns");
    LocalOptions options;
    options.root = dir_.path();
    options.containment = LocalOptions::Containment::kPidNamespace;
    auto made = NewLocalSandbox(options);
    ASSERT_TRUE(made) << made.error().ToString();
    sandbox_ = std::move(*made);
  }

  std::unique_ptr<Process> Start(const std::string& script) {
    auto* host = As<ProcessHost>(*sandbox_);
    EXPECT_NE(host, nullptr);
    auto process = host->StartProcess({}, Command{.path = "/bin/sh", .args = {"-c", script}});
    EXPECT_TRUE(process) << process.error().ToString();
    return process ? std::move(*process) : nullptr;
  }

  static std::string ReadLine(Process& process) {
    std::string line;
    char c;
    while (line.size() < 4096) {
      auto n = process.Stdout().Read(std::span<char>(&c, 1));
      if (!n || *n == 0) break;
      if (c == '\n') break;
      line.push_back(c);
    }
    return line;
  }

  TempDir dir_;
  std::unique_ptr<Sandbox> sandbox_;
};

TEST_F(PidNamespaceTreeTest, TheInitReapsThousandsOfOrphans) {
  // Each inner shell exits at once, orphaning two background jobs: 2000
  // orphans reparent to the namespace's init, which must reap them all.
  auto process = Start(
      "i=0; while [ $i -lt 1000 ]; do sh -c 'true & true &'; i=$((i+1)); done; "
      "echo spawned; exec sleep 60");
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(ReadLine(*process), "spawned");
  std::vector<std::string> inits = OurInits();
  ASSERT_EQ(inits.size(), 1u);
  int zombies = ZombieChildrenOf(inits[0]);
  for (int i = 0; i < 50 && zombies > 0; ++i) {
    std::this_thread::sleep_for(milliseconds(20));
    zombies = ZombieChildrenOf(inits[0]);
  }
  EXPECT_EQ(zombies, 0);
  EXPECT_TRUE(process->Kill());
  auto status = process->Wait();
  ASSERT_TRUE(status);
  EXPECT_EQ(status->signal, SIGKILL);
}

TEST_F(PidNamespaceTreeTest, TheInitHoldsNoFileDescriptor) {
  auto process = Start("echo up; exec sleep 60");
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(ReadLine(*process), "up");
  std::vector<std::string> inits = OurInits();
  ASSERT_EQ(inits.size(), 1u);
  std::vector<std::string> fds;
  if (DIR* dir = opendir(("/proc/" + inits[0] + "/fd").c_str())) {
    while (dirent* entry = readdir(dir))
      if (entry->d_name[0] != '.') fds.push_back(entry->d_name);
    closedir(dir);
  }
  std::string open_fds;
  for (const std::string& fd : fds) {
    char target[256] = {};
    (void)!readlink(("/proc/" + inits[0] + "/fd/" + fd).c_str(), target, sizeof target - 1);
    open_fds += fd + " -> " + target + "\n";
  }
  EXPECT_TRUE(fds.empty()) << "fds open in the init " << inits[0] << ":\n" << open_fds;
}

TEST_F(PidNamespaceTreeTest, TheCommandIsNotTheNamespaceInit) {
  // PID 1 ignores signals it has no handler for; the command must not be
  // PID 1, so that `kill $$` works as everywhere else.
  auto result = sandbox_->Exec({}, Command{.path = "/bin/sh", .args = {"-c", "echo $$; kill $$"}});
  ASSERT_TRUE(result) << result.error().ToString();
  EXPECT_EQ(result->stdout_data, "2\n");
  EXPECT_EQ(result->exit_code, 128 + SIGTERM);
  ASSERT_TRUE(result->signal.has_value());
  EXPECT_EQ(*result->signal, SIGTERM);
}

TEST_F(PidNamespaceTreeTest, WhenTheCommandExitsNothingItStartedSurvives) {
  std::string marker = UniqueMarker();
  auto result = sandbox_->Exec(
      {}, Command{.path = "/bin/sh",
                  .args = {"-c", "setsid sleep " + marker + " >/dev/null 2>&1 & "
                                 "(sleep " + marker + " >/dev/null 2>&1 &) ; echo started"}});
  ASSERT_TRUE(result) << result.error().ToString();
  EXPECT_EQ(result->stdout_data, "started\n");
  EXPECT_EQ(WaitForNoProcessesWithArg(marker, 2000), 0);
  EXPECT_TRUE(OurInits().empty());
}

}  // namespace
}  // namespace sandbox::testing
