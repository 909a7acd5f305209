// The namespace backend assembled (agent as PID 1 + RemoteSandbox), attacked
// from inside the way model-written code would: the agent must survive, hold
// nothing of the host's, reap every orphan, and take everything down with it
// when the sandbox closes or the host process dies.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backends.h"
#include "sandbox/namespace.h"
#include "test_util.h"

namespace sandbox::testing {
namespace {

using std::chrono::milliseconds;

class NamespaceHostileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SANDBOX_SKIP_UNLESS_AVAILABLE("namespace");
    Make({});
  }

  void Make(NamespaceOptions options) {
    options.workspace = dir_.path();
    options.agent_path = SANDBOX_AGENT_PATH;
    auto made = NewNamespaceSandbox(options);
    ASSERT_TRUE(made) << made.error().ToString();
    sandbox_ = std::move(*made);
  }

  Result Sh(const std::string& script, std::chrono::nanoseconds timeout = {}) {
    auto result =
        sandbox_->Exec({}, Command{.path = "/bin/sh", .args = {"-c", script}, .timeout = timeout});
    EXPECT_TRUE(result) << result.error().ToString();
    return result ? *result : Result{.exit_code = -1};
  }

  TempDir dir_;
  std::unique_ptr<Sandbox> sandbox_;
};

TEST_F(NamespaceHostileTest, ReportsProcessIsolationWithoutNetwork) {
  Capabilities caps = sandbox_->GetCapabilities();
  EXPECT_EQ(caps.backend, "namespace");
  EXPECT_EQ(caps.isolation, Isolation::Process);
  EXPECT_FALSE(caps.network);
  auto* workdir = As<WorkdirReporter>(*sandbox_);
  ASSERT_NE(workdir, nullptr);
  EXPECT_EQ(workdir->Workdir(), "/workspace");
  EXPECT_EQ(Sh("pwd; hostname").stdout_data, "/workspace\nsandbox\n");
}

TEST_F(NamespaceHostileTest, CommandsHoldNoCapabilityAtAll) {
  Result caps =
      Sh("grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status; "
         "grep -E '^NoNewPrivs|^Seccomp:' /proc/self/status");
  EXPECT_EQ(caps.stdout_data,
            "CapInh:\t0000000000000000\n"
            "CapPrm:\t0000000000000000\n"
            "CapEff:\t0000000000000000\n"
            "CapBnd:\t0000000000000000\n"
            "CapAmb:\t0000000000000000\n"
            "NoNewPrivs:\t1\n"
            "Seccomp:\t2\n");
}

TEST_F(NamespaceHostileTest, TheCommandHoldsNoHostFileDescriptor) {
  // fd 3 is the directory ls itself opens; nothing else may be open.
  Result fds = Sh("ls /proc/self/fd");
  EXPECT_EQ(fds.stdout_data, "0\n1\n2\n3\n");
}

TEST_F(NamespaceHostileTest, FilesCreatedInTheWorkspaceBelongToTheInvokingUser) {
  ASSERT_EQ(Sh("echo hi > made-inside && mkdir dir-inside").exit_code, 0);
  struct stat st;
  ASSERT_EQ(stat(dir_.Join("made-inside").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, geteuid());
  EXPECT_EQ(st.st_gid, getegid());
  ASSERT_EQ(stat(dir_.Join("dir-inside").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, geteuid());
  EXPECT_EQ(ReadHostFile(dir_.Join("made-inside")), "hi\n");
}

TEST_F(NamespaceHostileTest, TheAgentReapsThousandsOfOrphans) {
  Result spawn =
      Sh("i=0; while [ $i -lt 1000 ]; do sh -c 'true & true &'; i=$((i+1)); done; echo spawned");
  EXPECT_EQ(spawn.stdout_data, "spawned\n");
  // /proc inside shows every process of the boundary.
  std::string zombies;
  for (int i = 0; i < 50; ++i) {
    zombies = Sh("grep -l '^State:.Z' /proc/[0-9]*/status 2>/dev/null | wc -l").stdout_data;
    if (zombies == "0\n") break;
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(zombies, "0\n");
}

TEST_F(NamespaceHostileTest, CloseLeavesNoProcessBehind) {
  std::string marker = UniqueMarker();
  auto* host = As<ProcessHost>(*sandbox_);
  ASSERT_NE(host, nullptr);
  auto process = host->StartProcess(
      {},
      Command{.path = "/bin/sh", .args = {"-c", "setsid sleep " + marker + " & sleep " + marker}});
  ASSERT_TRUE(process) << process.error().ToString();
  for (int i = 0; i < 100 && CountProcessesWithArg(marker) < 2; ++i)
    std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(CountProcessesWithArg(marker), 2);
  ASSERT_TRUE(sandbox_->Close());
  EXPECT_EQ(WaitForNoProcessesWithArg(marker, 2000), 0);
  process->reset();
  sandbox_.reset();
}

TEST_F(NamespaceHostileTest, AMemoryBombIsKilledAtTheLimit) {
  NamespaceOptions options;
  options.memory_bytes = std::uint64_t{64} << 20;
  Make(options);
  // Grows a shell variable without bound: doubling a string until killed.
  Result bomb = Sh("x=0123456789abcdef; while :; do x=$x$x; done", std::chrono::seconds(30));
  EXPECT_FALSE(bomb.timed_out);
  ASSERT_TRUE(bomb.signal.has_value());
  EXPECT_EQ(*bomb.signal, SIGKILL);
  EXPECT_EQ(bomb.stderr_data,
            "sandbox: killed: the sandbox exceeded its memory limit (67108864 bytes)\n");
  EXPECT_EQ(Sh("echo alive").stdout_data, "alive\n");
}

TEST_F(NamespaceHostileTest, AForkBombStopsAtThePidsLimit) {
  NamespaceOptions options;
  options.pids = 64;
  Make(options);
  // Forks fail once the boundary holds 64 tasks (the agent's included).
  Result bomb = Sh(kForkBombScript, std::chrono::seconds(20));
  ASSERT_FALSE(bomb.timed_out);
  int started = std::atoi(bomb.stdout_data.c_str());
  EXPECT_GT(started, 0);
  EXPECT_LT(started, 64);
  EXPECT_EQ(Sh("echo alive").stdout_data, "alive\n");
}

// Commands share the agent's uid. They run in a PID namespace below the
// agent's, so no pid they can name is the agent's: signalling every pid they
// can, and every process at once, leaves it serving.
TEST_F(NamespaceHostileTest, CommandsCannotSignalTheAgent) {
  Result attack =
      Sh("kill -KILL -1; i=1; while [ $i -le 400 ]; do "
         "[ $i -ne $$ ] && kill -KILL $i 2>/dev/null; i=$((i+1)); done; echo sent");
  EXPECT_EQ(attack.stdout_data, "sent\n");
  EXPECT_EQ(Sh("echo alive").stdout_data, "alive\n");
  // What they see of it through /proc (the boundary's PID namespace: PID 1
  // the init, PID 2 the agent) stays closed: both are non-dumpable, so no fd
  // of theirs (the delegated cgroup's among them) can be followed or opened.
  Result peek =
      Sh("tr '\\0' ' ' < /proc/2/cmdline; echo; for p in 1 2 self; do "
         "n=0; for f in /proc/$p/fd/*; do readlink $f >/dev/null 2>&1 && n=$((n+1)); "
         "( : < $f ) 2>/dev/null && n=$((n+1)); ls $f/ >/dev/null 2>&1 && n=$((n+1)); done; "
         "echo fd$p=$n; "
         "head -c1 /proc/$p/environ >/dev/null 2>&1 && echo env$p=open || "
         "echo env$p=denied; done");
  EXPECT_EQ(peek.stdout_data.substr(0, 14), "sandbox-agent ") << peek.stdout_data;
  EXPECT_NE(peek.stdout_data.find("\nfd1=0\nenv1=denied\nfd2=0\nenv2=denied\nfdself="),
            std::string::npos)
      << peek.stdout_data;
  // The same probes do reach the command's own fds and environment.
  EXPECT_EQ(peek.stdout_data.find("fdself=0\n"), std::string::npos) << peek.stdout_data;
  EXPECT_TRUE(peek.stdout_data.ends_with("envself=open\n")) << peek.stdout_data;
}

// The cgroup v2 directory of this process (in the hierarchy's mount), or "".
std::string OwnCgroup2Dir() {
  std::ifstream mounts("/proc/self/mountinfo");
  std::string line, mount_point;
  while (std::getline(mounts, line)) {
    auto dash = line.find(" - cgroup2 ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash));
    std::string id, parent, dev, root;
    head >> id >> parent >> dev >> root >> mount_point;
    break;
  }
  std::ifstream cgroup("/proc/self/cgroup");
  while (std::getline(cgroup, line))
    if (line.rfind("0::", 0) == 0 && !mount_point.empty())
      return mount_point + (line == "0::/" ? "" : line.substr(3));
  return "";
}

// Every delegated cgroup ("d<N>") in this process's cgroup pool.
std::vector<std::string> DelegatedCgroups() {
  std::vector<std::string> found;
  std::string own = OwnCgroup2Dir();
  std::error_code ec;
  for (const auto& pool : std::filesystem::directory_iterator(own, ec)) {
    std::string name = pool.path().filename().string();
    if (name.rfind("sandbox.", 0) != 0 || !name.ends_with("." + std::to_string(getpid()))) continue;
    for (const auto& child : std::filesystem::directory_iterator(pool.path(), ec))
      if (child.path().filename().string().rfind("d", 0) == 0) found.push_back(child.path());
  }
  return found;
}

// As root the boundary delegates a cgroup v2 to the agent, which contains each
// command in a cgroup of its own there; commands see only that subtree (their
// cgroup namespace is rooted at the delegated cgroup), and Close removes it.
TEST_F(NamespaceHostileTest, AsRootEachCommandRunsInACgroupOfTheDelegatedOne) {
  if (geteuid() != 0) GTEST_SKIP() << "delegation needs a writable cgroup v2 (root here)";
  EXPECT_NE(sandbox_->GetCapabilities().detail.find("a delegated cgroup per command"),
            std::string::npos)
      << sandbox_->GetCapabilities().detail;
  Result cgroup = Sh("grep '^0::' /proc/self/cgroup");
  const std::string& line = cgroup.stdout_data;  // "0::/t<N>\n"
  EXPECT_TRUE(line.starts_with("0::/t") && line.ends_with("\n") && line.size() > 6 &&
              line.find_first_not_of("0123456789", 5) == line.size() - 1)
      << line;
  // A setsid'd, double-forked process is killed with the command's tree.
  std::string marker = UniqueMarker();
  Result escape = Sh("(setsid sleep " + marker + " &) ; echo started");
  EXPECT_EQ(escape.stdout_data, "started\n");
  EXPECT_EQ(WaitForNoProcessesWithArg(marker, 2000), 0);
  std::vector<std::string> delegated = DelegatedCgroups();
  ASSERT_FALSE(delegated.empty());
  ASSERT_TRUE(sandbox_->Close());
  for (const std::string& dir : delegated)
    EXPECT_FALSE(std::filesystem::exists(dir)) << dir << " is left behind";
}

}  // namespace
}  // namespace sandbox::testing
