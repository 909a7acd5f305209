// The docker and gvisor backends assembled (agent as a container's
// entrypoint + RemoteSandbox over the attach stream), attacked from inside
// the way model-written code would, and killed from outside: what the
// container may touch, what it may exhaust, and what is left behind.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "backends.h"
#include "docker/engine.h"
#include "sandbox/docker.h"
#include "test_util.h"

namespace sandbox::testing {
namespace {

using std::chrono::milliseconds;

std::string HostKernel() {
  std::ifstream version("/proc/version");
  std::string line;
  std::getline(version, line);
  return line + "\n";
}

std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

class ContainerHostileTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    SANDBOX_SKIP_UNLESS_AVAILABLE(GetParam());
    // The default image exists once the backend's factory has run.
    auto probe = FindBackend(GetParam()).make(dir_.path());
    ASSERT_TRUE(probe) << probe.error().ToString();
    sandbox_ = std::move(*probe);
  }

  bool gvisor() const { return GetParam() == "gvisor"; }

  void Make(DockerOptions options) {
    if (sandbox_) {
      ASSERT_TRUE(sandbox_->Close());
    }
    options.workspace = dir_.path();
    options.agent_path = ContainerAgentPath();
    auto made = gvisor() ? NewGvisorSandbox(options) : NewDockerSandbox(options);
    ASSERT_TRUE(made) << made.error().ToString();
    sandbox_ = std::move(*made);
  }

  Result Sh(const std::string& script, std::chrono::nanoseconds timeout = {}) {
    auto result =
        sandbox_->Exec({}, Command{.path = "/bin/sh", .args = {"-c", script}, .timeout = timeout});
    EXPECT_TRUE(result) << result.error().ToString();
    return result ? *result : Result{.exit_code = -1};
  }

  // The container's id prefix, from Capabilities().detail.
  std::string ContainerId() const {
    std::string detail = sandbox_->GetCapabilities().detail;
    auto at = detail.find("container ");
    return at == std::string::npos ? "" : detail.substr(at + 10, 12);
  }

  static long ContainerStatus(const std::string& id) {
    auto engine = docker::Engine::Connect();
    if (!engine) return -1;
    auto response = engine->Request("GET", "/containers/" + id + "/json");
    return response ? response->status : -1;
  }

  TempDir dir_;
  std::unique_ptr<Sandbox> sandbox_;
};

TEST_P(ContainerHostileTest, ReportsTheIsolationAndRuntimeReallyUsed) {
  Capabilities caps = sandbox_->GetCapabilities();
  EXPECT_EQ(caps.backend, GetParam());
  EXPECT_FALSE(caps.network);
  auto* workdir = As<WorkdirReporter>(*sandbox_);
  ASSERT_NE(workdir, nullptr);
  EXPECT_EQ(workdir->Workdir(), "/workspace");
  Result kernel = Sh("cat /proc/version");
  if (gvisor()) {
    EXPECT_EQ(caps.isolation, Isolation::Kernel);
    EXPECT_NE(caps.detail.find("runtime runsc"), std::string::npos) << caps.detail;
    EXPECT_NE(kernel.stdout_data, HostKernel());
    EXPECT_NE(Sh("dmesg").stdout_data.find("Starting gVisor..."), std::string::npos);
  } else {
    EXPECT_EQ(caps.isolation, Isolation::Process);
    EXPECT_NE(caps.detail.find("runtime runc"), std::string::npos) << caps.detail;
    EXPECT_EQ(kernel.stdout_data, HostKernel());
  }
}

TEST_P(ContainerHostileTest, CommandsHoldNoCapabilityAtAll) {
  Result caps = Sh("grep -E '^Cap(Prm|Eff|Bnd|Amb)|^NoNewPrivs' /proc/self/status");
  if (gvisor()) {
    // gVisor's /proc/PID/status has no CapAmb or NoNewPrivs lines.
    EXPECT_EQ(caps.stdout_data,
              "CapPrm:\t0000000000000000\n"
              "CapEff:\t0000000000000000\n"
              "CapBnd:\t0000000000000000\n");
    return;
  }
  EXPECT_EQ(caps.stdout_data,
            "CapPrm:\t0000000000000000\n"
            "CapEff:\t0000000000000000\n"
            "CapBnd:\t0000000000000000\n"
            "CapAmb:\t0000000000000000\n"
            "NoNewPrivs:\t1\n");
}

TEST_P(ContainerHostileTest, TheNetworkIsUnreachable) {
  Result connect = Sh("nc -w 3 1.1.1.1 80 </dev/null; echo exit=$?", std::chrono::seconds(20));
  EXPECT_EQ(connect.stdout_data, "exit=1\n");
  Result links = Sh("cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '");
  EXPECT_EQ(links.stdout_data, "lo\n");
}

TEST_P(ContainerHostileTest, NoDockerSocketIsVisibleInside) {
  std::string host_socket;
  if (const char* env = std::getenv("DOCKER_HOST"); env && std::string(env).starts_with("unix://"))
    host_socket = std::string(env).substr(7);
  Result seen = Sh("for s in /var/run/docker.sock /run/docker.sock " + host_socket +
                   " /run/containerd/containerd.sock; do [ -e $s ] && echo $s; done; "
                   "find / -xdev -type s 2>/dev/null; echo done");
  EXPECT_EQ(seen.stdout_data, "done\n");
}

// /tmp, /dev and /dev/shm are the container's own tmpfs mounts (scratch that
// dies with it); everything else but the workspace is read-only.
TEST_P(ContainerHostileTest, NothingOutsideTheWorkspaceAndScratchIsWritable) {
  Result writes =
      Sh("for p in /x /etc/x /bin/x /bin/sh /.sandbox/x /.sandbox/sandbox-agent /proc/sys/kernel/x "
         "/sys/x /var/x /usr/x; do (echo x > $p) 2>/dev/null && echo wrote $p; done; "
         "mkdir /newdir 2>/dev/null && echo made /newdir; "
         "echo ok > /workspace/ok && echo ok > /tmp/ok && echo fine");
  EXPECT_EQ(writes.stdout_data, "fine\n");
  EXPECT_EQ(ReadHostFile(dir_.Join("ok")), "ok\n");
}

TEST_P(ContainerHostileTest, TheAgentBinaryCannotBeRewrittenFromInside) {
  const std::string before = FileBytes(ContainerAgentPath());
  Result attack =
      Sh("for e in /proc/[0-9]*/exe /.sandbox/sandbox-agent; do "
         "(printf x > $e) 2>/dev/null && echo wrote $e; "
         "(printf x >> $e) 2>/dev/null && echo appended $e; done; echo tried");
  EXPECT_EQ(attack.stdout_data, "tried\n");
  EXPECT_EQ(FileBytes(ContainerAgentPath()), before);
  EXPECT_EQ(Sh("echo alive").stdout_data, "alive\n");
}

TEST_P(ContainerHostileTest, AForkBombStopsAtThePidsLimit) {
  DockerOptions options;
  options.pids = 64;
  if (gvisor()) {
    // On gVisor's ptrace platform every guest task is a host task, and the
    // host's pids limit also counts the sentry's own: at 64 the sandbox may
    // not even start, or the bomb may end the whole sandbox (documented in
    // the README). Bounded either way: refused, stopped, or Unavailable.
    options.workspace = dir_.path();
    options.agent_path = ContainerAgentPath();
    auto made = NewGvisorSandbox(options);
    if (!made) {
      EXPECT_TRUE(made.error().code() == Error::Code::InsufficientIsolation ||
                  made.error().code() == Error::Code::Unavailable)
          << made.error().ToString();
      return;
    }
    ASSERT_TRUE(sandbox_->Close());
    sandbox_ = std::move(*made);
    auto bomb = sandbox_->Exec(
        {}, Command{.path = "/bin/sh",
                    .args = {"-c", kForkBombScript},
                    .timeout = std::chrono::seconds(30)});
    if (!bomb) {
      EXPECT_EQ(bomb.error().code(), Error::Code::Unavailable) << bomb.error().ToString();
    } else {
      EXPECT_FALSE(bomb->timed_out);
      EXPECT_LT(std::atoi(bomb->stdout_data.c_str()), 64) << bomb->stdout_data;
    }
    return;
  }
  Make(options);
  Result bomb = Sh(kForkBombScript, std::chrono::seconds(30));
  ASSERT_FALSE(bomb.timed_out);
  int started = std::atoi(bomb.stdout_data.c_str());
  EXPECT_GT(started, 0);
  EXPECT_LT(started, 64);
  EXPECT_EQ(Sh("echo alive").stdout_data, "alive\n");
}

TEST_P(ContainerHostileTest, AMemoryBombIsKilledAtTheLimit) {
  DockerOptions options;
  options.memory_bytes = std::uint64_t{64} << 20;
  Make(options);
  if (gvisor()) {
    // Under gVisor the host's memory limit covers the sentry, which the OOM
    // killer takes with the command: the whole sandbox ends, Unavailable
    // (documented in the README). Bounded, and the host is unharmed.
    auto killed =
        sandbox_->Exec({}, Command{.path = "/bin/sh",
                                   .args = {"-c", "x=0123456789abcdef; while :; do x=$x$x; done"},
                                   .timeout = std::chrono::seconds(60)});
    if (!killed) {
      EXPECT_EQ(killed.error().code(), Error::Code::Unavailable) << killed.error().ToString();
    } else {
      EXPECT_FALSE(killed->timed_out);
      EXPECT_EQ(killed->signal, std::optional<int>(SIGKILL));
    }
    return;
  }
  Result bomb = Sh("x=0123456789abcdef; while :; do x=$x$x; done", std::chrono::seconds(60));
  EXPECT_FALSE(bomb.timed_out);
  ASSERT_TRUE(bomb.signal.has_value()) << "exit " << bomb.exit_code << " " << bomb.stderr_data;
  EXPECT_EQ(*bomb.signal, SIGKILL);
  EXPECT_EQ(Sh("echo alive").stdout_data, "alive\n");
}

TEST_P(ContainerHostileTest, CloseRemovesTheContainer) {
  std::string id = ContainerId();
  ASSERT_EQ(id.size(), 12u);
  EXPECT_EQ(ContainerStatus(id), 200);
  ASSERT_TRUE(sandbox_->Close());
  EXPECT_EQ(ContainerStatus(id), 404);
}

TEST_P(ContainerHostileTest, GcRemovesTheContainerOfAKilledHostProcess) {
  // A host process (the CLI) SIGKILLed mid-run cannot remove its container.
  const std::string marker = UniqueMarker();
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    dup2(null, 2);
    execl(SANDBOX_CLI_PATH, "sandbox", "run", "--backend", GetParam().c_str(), "--workspace",
          dir_.path().c_str(), "--", "sleep", marker.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  auto engine = docker::Engine::Connect();
  ASSERT_TRUE(engine) << engine.error().ToString();
  std::string filter = "%7B%22label%22%3A%5B%22dev.sandbox.pid%3D" + std::to_string(child) +
                       "%22%5D%7D";  // {"label":["dev.sandbox.pid=PID"]}
  auto count = [&]() -> long {
    auto listed = engine->Request("GET", "/containers/json?all=1&filters=" + filter);
    if (!listed || listed->status != 200) return -1;
    auto parsed = nlohmann::json::parse(listed->body, nullptr, false);
    return parsed.is_array() ? static_cast<long>(parsed.size()) : -1;
  };
  for (int i = 0; i < 200 && count() == 0; ++i) std::this_thread::sleep_for(milliseconds(50));
  ASSERT_EQ(count(), 1);
  if (!gvisor()) {
    // Under runc the command is a host process (gVisor's are not visible).
    for (int i = 0; i < 200 && CountProcessesWithArg(marker) == 0; ++i)
      std::this_thread::sleep_for(milliseconds(50));
    ASSERT_EQ(CountProcessesWithArg(marker), 1);
  }
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(count(), 1);  // left behind
  auto removed = RemoveDockerLeftovers();
  ASSERT_TRUE(removed) << removed.error().ToString();
  EXPECT_GE(*removed, 1);
  EXPECT_EQ(count(), 0);
  EXPECT_EQ(WaitForNoProcessesWithArg(marker, 5000), 0);
}

INSTANTIATE_TEST_SUITE_P(Containers, ContainerHostileTest, ::testing::Values("docker", "gvisor"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace sandbox::testing
