// The namespace backend assembled: the real sandbox-agent as PID 1 of a
// boundary, driven through RemoteSandbox.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <vector>

#include "backends.h"
#include "sandbox/namespace.h"
#include "test_util.h"

namespace sandbox::testing {
namespace {

#ifdef SANDBOX_AGENT_PATH
std::unique_ptr<Sandbox> MakeNamespaceSandbox(const std::string& workspace) {
  NamespaceOptions options;
  options.workspace = workspace;
  options.agent_path = SANDBOX_AGENT_PATH;
  options.agent_stderr_fd = STDERR_FILENO;
  auto made = NewNamespaceSandbox(options);
  EXPECT_TRUE(made) << made.error().ToString();
  return made ? std::move(*made) : nullptr;
}

#define SKIP_UNLESS_NAMESPACES()                                    \
  do {                                                              \
    std::string reason_ = NamespaceUnavailableReason();             \
    if (!reason_.empty()) {                                         \
      if (BackendRequired("namespace")) FAIL() << reason_;          \
      GTEST_SKIP() << "namespace backend unavailable: " << reason_; \
    }                                                               \
  } while (0)

TEST(NamespaceSandbox, RunsCommandsAsTheAgentsChildrenInsideTheBoundary) {
  SKIP_UNLESS_NAMESPACES();
  TempDir dir;
  auto sb = MakeNamespaceSandbox(dir.path());
  ASSERT_NE(sb, nullptr);
  Capabilities caps = sb->GetCapabilities();
  EXPECT_EQ(caps.isolation, Isolation::Process);
  EXPECT_EQ(caps.backend, "namespace");
  EXPECT_FALSE(caps.network);
  auto result = sb->Exec(
      {}, Command{.path = "/bin/sh", .args = {"-c", "hostname; pwd; echo made > made; id -u"}});
  ASSERT_TRUE(result) << result.error().ToString();
  EXPECT_EQ(result->exit_code, 0) << result->stderr_data;
  EXPECT_EQ(result->stdout_data, "sandbox\n/workspace\n0\n") << result->stderr_data;
  struct stat st;
  ASSERT_EQ(stat(dir.Join("made").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, geteuid());
  ASSERT_TRUE(sb->WriteFile({}, "written", "data", FileMode{0644}));
  ASSERT_EQ(stat(dir.Join("written").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, geteuid());
  EXPECT_EQ(ReadHostFile(dir.Join("written")), "data");
  EXPECT_TRUE(sb->Close());
}

TEST(NamespaceSandbox, ACommandCannotKillTheAgent) {
  SKIP_UNLESS_NAMESPACES();
  TempDir dir;
  auto sb = MakeNamespaceSandbox(dir.path());
  ASSERT_NE(sb, nullptr);
  auto result =
      sb->Exec({}, Command{.path = "/bin/sh",
                           .args = {"-c",
                                    "kill -KILL -1; kill -KILL 1; kill -TERM 1; "
                                    "for p in /proc/[0-9]*; do kill -KILL ${p#/proc/}; done; "
                                    "echo done"}});
  ASSERT_TRUE(result) << result.error().ToString();
  auto again = sb->Exec({}, Command{.path = "/bin/echo", .args = {"still here"}});
  ASSERT_TRUE(again) << again.error().ToString();
  EXPECT_EQ(again->stdout_data, "still here\n");
}

// The agent shares its uid with the commands: its fds, memory and
// environment must still be out of their reach. ptrace access checks deny
// them because the agent holds capabilities (CAP_SYS_ADMIN, CAP_SETPCAP in
// its namespace) that the commands have dropped; seccomp denies ptrace and
// process_vm_readv outright. (The fd *numbers* in /proc/<agent>/fd stay
// listable: same owner.)
TEST(NamespaceSandbox, ACommandCannotReachIntoTheAgent) {
  SKIP_UNLESS_NAMESPACES();
  TempDir dir;
  auto sb = MakeNamespaceSandbox(dir.path());
  ASSERT_NE(sb, nullptr);
  auto result = sb->Exec(
      {},
      Command{.path = "/bin/sh",
              .args = {"-c",
                       "for p in /proc/[0-9]*; do n=${p#/proc/}; "
                       "c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null); case \"$c\" in sandbox-agent*) "
                       "readlink $p/fd/0 >/dev/null 2>&1 && echo fd-open || echo fd-denied; "
                       "head -c1 $p/environ >/dev/null 2>&1 && echo env-open || echo env-denied; "
                       "head -c1 $p/mem >/dev/null 2>&1 && echo mem-open || echo mem-denied;; "
                       "esac; done"}});
  ASSERT_TRUE(result) << result.error().ToString();
  EXPECT_NE(result->stdout_data.find("fd-denied"), std::string::npos) << result->stdout_data;
  EXPECT_EQ(result->stdout_data.find("-open"), std::string::npos) << result->stdout_data;
}
TEST(NamespaceSandbox, WorksForAnUnprivilegedUser) {
  SKIP_UNLESS_NAMESPACES();
  if (geteuid() != 0) GTEST_SKIP() << "needs root to switch to nobody (already unprivileged)";
  TempDir dir;
  ASSERT_EQ(chown(dir.path().c_str(), 65534, 65534), 0);
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  pid_t pid = fork();
  if (pid == 0) {
    std::string out;
    if (setgroups(0, nullptr) != 0 || setresgid(65534, 65534, 65534) != 0 ||
        setresuid(65534, 65534, 65534) != 0 || prctl(PR_SET_DUMPABLE, 1) != 0) {
      out = "cannot become nobody";
    } else {
      NamespaceOptions options;
      options.workspace = dir.path();
      options.agent_path = SANDBOX_AGENT_PATH;
      auto sb = NewNamespaceSandbox(options);
      if (!sb) {
        out = sb.error().ToString();
      } else {
        auto result =
            (*sb)->Exec({}, Command{.path = "/bin/sh", .args = {"-c", "echo hi > f; id -u"}});
        out = result ? result->stdout_data + result->stderr_data : result.error().ToString();
        (void)(*sb)->Close();
      }
    }
    (void)!write(fds[1], out.data(), out.size());
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buffer[512];
  for (ssize_t got; (got = read(fds[0], buffer, sizeof(buffer))) > 0;) out.append(buffer, got);
  close(fds[0]);
  int status;
  waitpid(pid, &status, 0);
  EXPECT_EQ(out, "0\n");
  struct stat st;
  ASSERT_EQ(stat(dir.Join("f").c_str(), &st), 0) << out;
  EXPECT_EQ(st.st_uid, 65534u);
}

// Create -> first Exec result, printed (a benchmark, not an assertion).
TEST(NamespaceSandbox, ReportsCreateToFirstExecLatency) {
  SKIP_UNLESS_NAMESPACES();
  TempDir dir;
  std::vector<double> samples;
  for (int i = 0; i < 20; ++i) {
    auto start = std::chrono::steady_clock::now();
    NamespaceOptions options;
    options.workspace = dir.path();
    options.agent_path = SANDBOX_AGENT_PATH;
    auto sb = NewNamespaceSandbox(options);
    ASSERT_TRUE(sb) << sb.error().ToString();
    auto result = (*sb)->Exec({}, Command{.path = "/bin/true"});
    ASSERT_TRUE(result) << result.error().ToString();
    samples.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
    ASSERT_TRUE((*sb)->Close());
  }
  std::sort(samples.begin(), samples.end());
  std::cout << "namespace sandbox: create -> first Exec(/bin/true) result median "
            << samples[samples.size() / 2] << " ms (p90 " << samples[samples.size() * 9 / 10]
            << " ms)\n";
}
#endif

}  // namespace
}  // namespace sandbox::testing
