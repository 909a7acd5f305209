// RemoteSandbox against a real Serve(LocalSandbox): many threads on one
// connection, large files in chunks, process streams under flow control,
// and the statically linked sandbox-agent binary itself.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <thread>

#include "backends.h"
#include "sandbox/local.h"
#include "sandbox/remote.h"
#include "test_util.h"

extern char** environ;

// Resident-memory bounds mean nothing under sanitizers (shadow memory,
// quarantine, and a dynamically linked agent).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kMeasuresMemory = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kMeasuresMemory = false;
#else
constexpr bool kMeasuresMemory = true;
#endif
#else
constexpr bool kMeasuresMemory = true;
#endif

namespace sandbox::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::unique_ptr<Sandbox> MakeRemote(const std::string& root) {
  auto made = FindBackend("remote").make(root);
  EXPECT_TRUE(made) << made.error().ToString();
  return made ? std::move(*made) : nullptr;
}

// A local sandbox served by Serve on a thread of this process, whose other
// end of a socketpair is host_fd (for NewRemoteSandbox). The thread is
// joined on destruction: close the RemoteSandbox first.
class ServedLocalSandbox {
 public:
  explicit ServedLocalSandbox(ServeOptions serve = {}) {
    LocalOptions local;
    local.root = dir_.path();
    auto inner = NewLocalSandbox(local);
    EXPECT_TRUE(inner) << inner.error().ToString();
    int fds[2];
    if (!inner || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      ADD_FAILURE() << "no local sandbox or no socketpair";
      return;
    }
    inner_ = std::move(*inner);
    host_fd_ = fds[0];
    agent_ = std::thread([this, fd = fds[1], serve] { served_ = Serve(*inner_, fd, -1, serve); });
  }
  ~ServedLocalSandbox() { (void)Join(); }

  int host_fd() const { return host_fd_; }
  // Waits for Serve to return; its status.
  const Status& Join() {
    if (agent_.joinable()) agent_.join();
    return served_;
  }

 private:
  TempDir dir_;
  std::unique_ptr<Sandbox> inner_;
  int host_fd_ = -1;
  Status served_ = Fail(Error::Code::Internal, "Serve has not returned");
  std::thread agent_;
};

std::string Pattern(std::size_t size) {
  std::string data(size, '\0');
  for (std::size_t i = 0; i < size; ++i) data[i] = static_cast<char>((i * 131 + i / 4096) & 0xff);
  return data;
}

TEST(RemoteSandbox, ConcurrentExecAndFileOpsShareOneConnection) {
  TempDir dir;
  auto sandbox = MakeRemote(dir.path());
  ASSERT_NE(sandbox, nullptr);
  constexpr int kThreads = 16, kIterations = 20;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIterations; ++i) {
        const std::string word = std::to_string(t) + "-" + std::to_string(i);
        const std::string name = "f" + word;
        auto exec = sandbox->Exec({}, Command{.path = "cat", .stdin_data = word});
        if (!exec || exec->stdout_data != word) continue;
        std::string content = Pattern(static_cast<std::size_t>(1000 * (i + 1))) + word;
        if (!sandbox->WriteFile({}, name, content, 0644)) continue;
        auto read = sandbox->ReadFile({}, name);
        if (!read || *read != content) continue;
        if (!sandbox->Remove({}, name)) continue;
        ++ok;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(ok.load(), kThreads * kIterations);
  auto left = sandbox->ListDir({}, ".");
  ASSERT_TRUE(left);
  EXPECT_TRUE(left->empty());
}

TEST(RemoteSandbox, SixtyFourMiBFileRoundTripsInChunks) {
  TempDir dir;
  auto sandbox = MakeRemote(dir.path());
  ASSERT_NE(sandbox, nullptr);
  const std::string data = Pattern(64u << 20);
  ASSERT_TRUE(sandbox->WriteFile({}, "big.bin", data, 0600));
  EXPECT_TRUE(ReadHostFile(dir.Join("big.bin")) == data);
  auto read = sandbox->ReadFile({}, "big.bin");
  ASSERT_TRUE(read) << read.error().ToString();
  EXPECT_EQ(read->size(), data.size());
  EXPECT_TRUE(*read == data);
  auto head = As<LimitedReader>(*sandbox)->ReadFileLimit({}, "big.bin", 1000);
  ASSERT_TRUE(head);
  EXPECT_EQ(head->data, data.substr(0, 1000));
  EXPECT_TRUE(head->truncated);
  ASSERT_TRUE(As<Appender>(*sandbox)->AppendFile({}, "big.bin", data.substr(0, 3 << 20), 0600));
  auto appended = sandbox->ReadFile({}, "big.bin");
  ASSERT_TRUE(appended);
  EXPECT_EQ(appended->size(), data.size() + (3u << 20));
}

TEST(RemoteSandbox, ProcessStdoutWithASlowReaderStaysBounded) {
  TempDir dir;
  auto sandbox = MakeRemote(dir.path());
  ASSERT_NE(sandbox, nullptr);
  constexpr std::size_t kTotal = 64u << 20;
  const std::size_t rss_before = CurrentRssBytes();
  auto process = As<ProcessHost>(*sandbox)->StartProcess(
      {}, Command{.path = "head", .args = {"-c", std::to_string(kTotal), "/dev/zero"}});
  ASSERT_TRUE(process) << process.error().ToString();
  // Read nothing for a while: the producer must stall, not fill memory.
  std::this_thread::sleep_for(700ms);
  const std::size_t rss_stalled = CurrentRssBytes();
  if (kMeasuresMemory) {
    EXPECT_LT(rss_stalled, rss_before + (16u << 20))
        << "before " << rss_before << " stalled " << rss_stalled;
  }
  // Then read slowly, in small pieces, to the end.
  std::size_t total = 0;
  std::vector<char> buffer(4096);
  std::size_t max_rss = rss_stalled;
  for (int i = 0;; ++i) {
    auto got = (*process)->Stdout().Read(buffer);
    ASSERT_TRUE(got) << got.error().ToString();
    if (*got == 0) break;
    total += *got;
    if (i % 4096 == 0) max_rss = std::max(max_rss, CurrentRssBytes());
  }
  EXPECT_EQ(total, kTotal);
  if (kMeasuresMemory) {
    EXPECT_LT(max_rss, rss_before + (16u << 20));
  }
  auto status = (*process)->Wait();
  ASSERT_TRUE(status);
  EXPECT_EQ(status->exit_code, 0);
}

TEST(RemoteSandbox, ProcessStdinStreamsWhileStdoutIsRead) {
  TempDir dir;
  auto sandbox = MakeRemote(dir.path());
  ASSERT_NE(sandbox, nullptr);
  auto process = As<ProcessHost>(*sandbox)->StartProcess({}, Command{.path = "cat"});
  ASSERT_TRUE(process) << process.error().ToString();
  const std::string data = Pattern(16u << 20);
  std::thread writer([&] {
    for (std::size_t at = 0; at < data.size(); at += 100000)
      ASSERT_TRUE((*process)->Stdin().Write(std::string_view(data).substr(at, 100000)));
    ASSERT_TRUE((*process)->Stdin().Close());
  });
  std::string echoed;
  std::vector<char> buffer(65536);
  for (;;) {
    auto got = (*process)->Stdout().Read(buffer);
    ASSERT_TRUE(got) << got.error().ToString();
    if (*got == 0) break;
    echoed.append(buffer.data(), *got);
  }
  writer.join();
  EXPECT_EQ(echoed.size(), data.size());
  EXPECT_TRUE(echoed == data);
  auto status = (*process)->Wait();
  ASSERT_TRUE(status);
  EXPECT_EQ(*status, (ExitStatus{0, std::nullopt}));
}

TEST(RemoteSandbox, WritingToAProcessThatStoppedReadingFails) {
  TempDir dir;
  auto sandbox = MakeRemote(dir.path());
  ASSERT_NE(sandbox, nullptr);
  auto process = As<ProcessHost>(*sandbox)->StartProcess({}, Command{.path = "true"});
  ASSERT_TRUE(process);
  ASSERT_TRUE((*process)->Wait());
  Status wrote;
  for (int i = 0; i < 100 && wrote; ++i) wrote = (*process)->Stdin().Write(std::string(1 << 20, 'x'));
  ASSERT_FALSE(wrote);
  EXPECT_EQ(wrote.error().code(), Error::Code::Unavailable);
}

TEST(RemoteSandbox, DroppingAProcessHandleKillsItsTree) {
  TempDir dir;
  auto sandbox = MakeRemote(dir.path());
  ASSERT_NE(sandbox, nullptr);
  const std::string marker = UniqueMarker();
  {
    auto process = As<ProcessHost>(*sandbox)->StartProcess(
        {}, Command{.path = "/bin/sh", .args = {"-c", "sleep " + marker + " & sleep " + marker}});
    ASSERT_TRUE(process);
    for (int i = 0; i < 100 && CountProcessesWithArg(marker) < 2; ++i) std::this_thread::sleep_for(10ms);
    EXPECT_EQ(CountProcessesWithArg(marker), 2);
  }
  EXPECT_EQ(WaitForNoProcessesWithArg(marker, 3000), 0);
  // The connection is still healthy afterwards.
  auto echo = sandbox->Exec({}, Command{.path = "echo", .args = {"ok"}});
  ASSERT_TRUE(echo);
  EXPECT_EQ(echo->stdout_data, "ok\n");
}

TEST(RemoteSandbox, StdinLargerThanTheAgentTakesIsRefusedUpFront) {
  ServeOptions serve;
  serve.max_stdin_bytes = 1000;
  ServedLocalSandbox agent(serve);
  RemoteOptions options;
  options.read_fd = agent.host_fd();
  auto remote = NewRemoteSandbox(std::move(options));
  ASSERT_TRUE(remote);
  auto result = (*remote)->Exec({}, Command{.path = "cat", .stdin_data = std::string(1001, 'x')});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code(), Error::Code::TooLarge);
  auto fits = (*remote)->Exec({}, Command{.path = "cat", .stdin_data = std::string(1000, 'x')});
  ASSERT_TRUE(fits);
  EXPECT_EQ(fits->stdout_data.size(), 1000u);
  EXPECT_TRUE((*remote)->Close());
  EXPECT_TRUE(agent.Join());
}

TEST(RemoteSandbox, ServeEndsCleanlyWhenTheStreamDropsAndKillsWhatItStarted) {
  ServedLocalSandbox agent;
  const int host_alias = dup(agent.host_fd());  // to drop the connection under the client
  RemoteOptions options;
  options.read_fd = agent.host_fd();
  auto remote = NewRemoteSandbox(std::move(options));
  ASSERT_TRUE(remote);
  const std::string marker = UniqueMarker();
  auto process = As<ProcessHost>(**remote)->StartProcess({}, Command{.path = "sleep", .args = {marker}});
  ASSERT_TRUE(process);
  auto session = As<Sessioner>(**remote)->NewSession({});
  ASSERT_TRUE(session);
  auto job = (*session)->Exec({}, Command{.path = "eval", .args = {"sleep " + marker + " &"}});
  ASSERT_TRUE(job);
  for (int i = 0; i < 100 && CountProcessesWithArg(marker) < 2; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(CountProcessesWithArg(marker), 2);

  shutdown(host_alias, SHUT_RDWR);
  const Status& served = agent.Join();
  EXPECT_TRUE(served) << served.error().ToString();
  EXPECT_EQ(WaitForNoProcessesWithArg(marker, 3000), 0);
  auto status = (*process)->Wait();
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error().code(), Error::Code::Unavailable);
  auto after = (*remote)->Exec({}, Command{.path = "true"});
  ASSERT_FALSE(after);
  EXPECT_EQ(after.error().code(), Error::Code::Unavailable);
  close(host_alias);
}

// ---- The sandbox-agent binary ----

struct SpawnedAgent {
  pid_t pid = -1;
  std::unique_ptr<Sandbox> sandbox;
};

// Starts `sandbox-agent --root root` on a socketpair, behind `wrapper` (a
// command prefix such as unshare) when given.
SpawnedAgent SpawnAgent(const std::string& root, std::vector<std::string> wrapper = {},
                        std::vector<std::string> extra_args = {}) {
  SpawnedAgent out;
  int fds[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  std::string agent = SANDBOX_AGENT_PATH;
  std::vector<std::string> args = std::move(wrapper);
  for (std::string arg : {agent, std::string("--root"), root}) args.push_back(arg);
  for (auto& arg : extra_args) args.push_back(arg);
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  int spawned = posix_spawnp(&out.pid, args[0].c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  EXPECT_EQ(spawned, 0);
  RemoteOptions options;
  options.read_fd = fds[0];
  options.capabilities.backend = "agent-binary";
  auto made = NewRemoteSandbox(std::move(options));
  EXPECT_TRUE(made) << made.error().ToString();
  if (made) out.sandbox = std::move(*made);
  return out;
}

std::size_t RssOfPid(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6)) * 1024;
  return 0;
}

int WaitExitCode(pid_t pid) {
  int status = 0;
  for (int i = 0; i < 500; ++i) {
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(10ms);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

TEST(SandboxAgent, ServesOverItsStdioAndExitsWhenTheStreamCloses) {
  TempDir dir;
  auto agent = SpawnAgent(dir.path());
  ASSERT_NE(agent.sandbox, nullptr);
  Sandbox& sb = *agent.sandbox;
  auto echo = sb.Exec({}, Command{.path = "echo", .args = {"from", "the", "agent"}});
  ASSERT_TRUE(echo) << echo.error().ToString();
  EXPECT_EQ(echo->stdout_data, "from the agent\n");
  ASSERT_TRUE(sb.WriteFile({}, "a.txt", "hello", 0644));
  EXPECT_EQ(ReadHostFile(dir.Join("a.txt")), "hello");
  auto escape = sb.ReadFile({}, "../../etc/passwd");
  ASSERT_FALSE(escape);
  EXPECT_EQ(escape.error().code(), Error::Code::EscapesRoot);
  auto* reporter = As<WorkdirReporter>(sb);
  ASSERT_NE(reporter, nullptr);
  auto pwd = sb.Exec({}, Command{.path = "pwd"});
  ASSERT_TRUE(pwd);
  EXPECT_EQ(pwd->stdout_data, reporter->Workdir() + "\n");
  EXPECT_EQ(sb.GetCapabilities().backend, "agent-binary");

  // Resident memory after some work, and /bin/true round trips compared
  // with the local backend (reported, not asserted: speed belongs in bench/).
  constexpr int kRuns = 200;
  auto time_runs = [&](Sandbox& target) {
    auto start = Clock::now();
    for (int i = 0; i < kRuns; ++i) EXPECT_TRUE(target.Exec({}, Command{.path = "/bin/true"}));
    return std::chrono::duration<double, std::micro>(Clock::now() - start).count() / kRuns;
  };
  LocalOptions local_options;
  local_options.root = dir.path();
  auto local = NewLocalSandbox(local_options);
  ASSERT_TRUE(local);
  double local_us = time_runs(**local);
  double remote_us = time_runs(sb);
  std::size_t rss = RssOfPid(agent.pid);
  std::cout << "[ measured ] /bin/true: local Exec " << local_us << " us, over the wire to sandbox-agent "
            << remote_us << " us (" << remote_us / local_us << "x); agent VmRSS " << rss / 1024
            << " KiB\n";
  RecordProperty("agent_rss_kib", static_cast<int>(rss / 1024));
  if (kMeasuresMemory) {
    EXPECT_LT(rss, 8u << 20);
  }

  EXPECT_TRUE(sb.Close());
  EXPECT_EQ(WaitExitCode(agent.pid), 0);
}

TEST(SandboxAgent, CommandsStartWithDefaultSignalDispositionsWhateverTheAgentInherited) {
  // The agent resets its dispositions once at start (os::ClaimProcessForSpawn)
  // instead of in every child: signals ignored by whoever started it must
  // still not reach the commands ignored.
  TempDir dir;
  auto agent = SpawnAgent(dir.path(), {"/bin/sh", "-c", "trap '' PIPE HUP INT TERM USR1; exec \"$0\" \"$@\""});
  ASSERT_NE(agent.sandbox, nullptr);
  Sandbox& sb = *agent.sandbox;
  // SIGHUP, SIGINT, SIGUSR1, SIGPIPE and SIGTERM: bits 0, 1, 9, 12 and 14.
  constexpr unsigned long kTrapped = 0x5203;
  for (int round = 0; round < 2; ++round) {
    auto seen = sb.Exec({}, Command{.path = "grep", .args = {"^SigIgn:", "/proc/self/status"}});
    ASSERT_TRUE(seen) << seen.error().ToString();
    ASSERT_TRUE(seen->stdout_data.starts_with("SigIgn:\t")) << seen->stdout_data;
    unsigned long ignored = std::stoul(seen->stdout_data.substr(8), nullptr, 16);
    EXPECT_EQ(ignored & kTrapped, 0u) << seen->stdout_data;
  }
  EXPECT_TRUE(sb.Close());
  EXPECT_EQ(WaitExitCode(agent.pid), 0);
}

TEST(SandboxAgent, AsPid1ItReapsOrphansWithoutStealingExitStatuses) {
  if (geteuid() != 0 || system("unshare --pid --fork true >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "needs root and unshare(1) to start the agent as PID 1 of a PID namespace";
  TempDir dir;
  // Per-command PID namespaces: a cgroup pool named after the agent's pid
  // inside the namespace would collide with the host's (see the report).
  auto agent = SpawnAgent(dir.path(), {"unshare", "--pid", "--fork", "--mount-proc"}, {"--containment", "pidns"});
  ASSERT_NE(agent.sandbox, nullptr);
  Sandbox& sb = *agent.sandbox;
  auto sh = [&](const std::string& script) {
    auto result = sb.Exec({}, Command{.path = "/bin/sh", .args = {"-c", script}});
    EXPECT_TRUE(result) << result.error().ToString();
    return result ? *result : Result{.exit_code = -1};
  };
  // PID 1 is the reaping init, PID 2 the agent serving us.
  Result layout = sh("tr '\\0' ' ' </proc/1/cmdline; echo; tr '\\0' ' ' </proc/2/cmdline");
  EXPECT_NE(layout.stdout_data.find("sandbox-agent"), std::string::npos) << layout.stdout_data;
  // Orphans of every shape; each command's own status must still arrive.
  for (int i = 0; i < 100; ++i) {
    Result orphaned = sh("(sleep 0.05 &); (sh -c 'sleep 0.05 & exit 0' &); exit " + std::to_string(i % 7));
    EXPECT_EQ(orphaned.exit_code, i % 7);
  }
  Result zombies = sh("sleep 0.5; grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l");
  EXPECT_EQ(zombies.stdout_data, "0\n");
  EXPECT_TRUE(sb.Close());
  EXPECT_EQ(WaitExitCode(agent.pid), 0);
}

TEST(SandboxAgent, RejectsBadArgumentsWithUsage) {
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, null_fd, 0);
  posix_spawn_file_actions_adddup2(&actions, null_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, null_fd, 2);
  std::string agent = SANDBOX_AGENT_PATH;
  std::vector<std::string> args = {agent, "--bogus"};
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid;
  ASSERT_EQ(posix_spawn(&pid, agent.c_str(), &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  close(null_fd);
  EXPECT_EQ(WaitExitCode(pid), 2);
}

}  // namespace
}  // namespace sandbox::testing
