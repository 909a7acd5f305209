// End-to-end tests of the `sandbox` command-line tool (DESIGN.md section 7):
// each test runs the built binary, feeds its stdin, captures stdout, stderr
// and the exit status, and asserts exact values.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "backends.h"
#include "sandbox/local.h"
#include "test_util.h"

extern char** environ;

namespace sandbox::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Shows what the CLI said when an assertion on its exit status fails.
std::string Describe(const CliRun& run) {
  return "exit " + std::to_string(run.exit_code) + " signal " + std::to_string(run.term_signal) +
         "\nstdout: " + run.out + "\nstderr: " + run.err;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(kCliPath).empty()) GTEST_SKIP() << "the sandbox CLI is not built";
  }
  // `sandbox run --workspace <temp> ARGS...`.
  CliRun Run(std::vector<std::string> args, CliOptions options = {}) {
    args.insert(args.begin(), {"run", "--workspace", workspace_.path()});
    return RunCli(args, options);
  }
  TempDir workspace_;
};

TEST_F(CliTest, EchoPassesStdoutThrough) {
  CliRun run = Run({"--", "echo", "hello", "world"});
  EXPECT_EQ(run.exit_code, 0) << Describe(run);
  EXPECT_EQ(run.out, "hello world\n");
  EXPECT_EQ(run.err, "");
}

TEST_F(CliTest, StreamsAreSeparateAndBinarySafe) {
  CliRun run = Run({"--", "sh", "-c", "printf 'a\\000\\377b'; printf 'to stderr' >&2"});
  EXPECT_EQ(run.exit_code, 0) << Describe(run);
  EXPECT_EQ(run.out, std::string("a\0\377b", 4));
  EXPECT_EQ(run.err, "to stderr");
}

TEST_F(CliTest, ExitStatusIsTheCommands) {
  EXPECT_EQ(Run({"--", "true"}).exit_code, 0);
  CliRun run = Run({"--", "sh", "-c", "exit 3"});
  EXPECT_EQ(run.exit_code, 3) << Describe(run);
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(run.err, "");
}

TEST_F(CliTest, ProgramStartsAtFirstNonOption) {
  CliRun run = Run({"echo", "--json", "x"});
  EXPECT_EQ(run.exit_code, 0) << Describe(run);
  EXPECT_EQ(run.out, "--json x\n");
}

TEST_F(CliTest, OptionEqualsValueForm) {
  CliRun run = Run({"--timeout=5s", "--env=GREETING=a=b", "--", "sh", "-c", "echo $GREETING"});
  EXPECT_EQ(run.exit_code, 0) << Describe(run);
  EXPECT_EQ(run.out, "a=b\n");
}

// With neither --backend nor --isolation, sandbox run uses namespace.
TEST_F(CliTest, JsonIsOneObjectWithExactKeysAndValues) {
  SANDBOX_SKIP_UNLESS_AVAILABLE("namespace");
  CliRun run = Run({"--json", "--", "sh", "-c", "printf out; printf err >&2; exit 2"});
  ASSERT_EQ(run.exit_code, 2) << Describe(run);
  EXPECT_EQ(run.err, "");
  ASSERT_EQ(run.out.back(), '\n');
  EXPECT_EQ(run.out.find('\n'), run.out.size() - 1) << "exactly one line";
  auto object = nlohmann::ordered_json::parse(run.out);
  std::vector<std::string> keys;
  for (const auto& item : object.items()) keys.push_back(item.key());
  EXPECT_EQ(keys,
            (std::vector<std::string>{"exit_code", "stdout", "stderr", "duration_ms", "timed_out",
                                      "stdout_truncated", "stderr_truncated", "signal", "isolation",
                                      "backend", "stdout_dropped", "stderr_dropped"}));
  EXPECT_EQ(object["exit_code"], 2);
  EXPECT_EQ(object["stdout"], "out");
  EXPECT_EQ(object["stderr"], "err");
  EXPECT_TRUE(object["duration_ms"].is_number_float());
  EXPECT_GT(object["duration_ms"].get<double>(), 0.0);
  EXPECT_EQ(object["timed_out"], false);
  EXPECT_EQ(object["stdout_truncated"], false);
  EXPECT_EQ(object["stderr_truncated"], false);
  EXPECT_TRUE(object["signal"].is_null());
  EXPECT_EQ(object["isolation"], "process");
  EXPECT_EQ(object["backend"], "namespace");
  EXPECT_EQ(object["stdout_dropped"], 0);
  EXPECT_EQ(object["stderr_dropped"], 0);
}

TEST_F(CliTest, JsonReplacesInvalidUtf8WithReplacementCharacter) {
  CliRun run = Run({"--json", "--", "sh", "-c", "printf 'a\\377b'"});
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  auto object = nlohmann::json::parse(run.out);
  EXPECT_EQ(object["stdout"],
            "a\xEF\xBF\xBD"
            "b");
}

TEST_F(CliTest, TimeoutKillsAndExits124) {
  CliRun run = Run({"--timeout", "200ms", "--", "sleep", "5"});
  EXPECT_EQ(run.exit_code, 124) << Describe(run);
  EXPECT_LT(run.elapsed, milliseconds(3000));
}

TEST_F(CliTest, TimeoutWithJsonPrintsTheObjectAndExits124) {
  CliRun run = Run({"--json", "--timeout", "200ms", "--", "sh", "-c", "echo started; sleep 5"});
  ASSERT_EQ(run.exit_code, 124) << Describe(run);
  EXPECT_LT(run.elapsed, milliseconds(3000));
  auto object = nlohmann::json::parse(run.out);
  EXPECT_EQ(object["timed_out"], true);
  EXPECT_EQ(object["stdout"], "started\n");
  EXPECT_EQ(object["signal"], SIGKILL);
  EXPECT_EQ(object["exit_code"], 128 + SIGKILL);
}

TEST_F(CliTest, CommandKilledBySignalReports128PlusSignal) {
  CliRun run = Run({"--", "sh", "-c", "kill -TERM $$"});
  EXPECT_EQ(run.exit_code, 143) << Describe(run);
  CliRun json = Run({"--json", "--", "sh", "-c", "kill -TERM $$"});
  ASSERT_EQ(json.exit_code, 143) << Describe(json);
  auto object = nlohmann::json::parse(json.out);
  EXPECT_EQ(object["signal"], 15);
  EXPECT_EQ(object["exit_code"], 143);
  EXPECT_EQ(object["timed_out"], false);
}

TEST_F(CliTest, MissingProgramExits127WithShellLikeMessage) {
  CliRun run = Run({"--", "sandbox-no-such-program-4711"});
  EXPECT_EQ(run.exit_code, 127) << Describe(run);
  EXPECT_EQ(run.out, "");
  EXPECT_NE(run.err.find("sandbox-no-such-program-4711"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("not found"), std::string::npos) << run.err;
}

TEST_F(CliTest, StdinIsTheCommandsStdin) {
  std::string data = "line one\nline two\n";
  data.push_back('\0');
  data += "\377binary";
  CliOptions options;
  options.stdin_data = data;
  CliRun run = Run({"--", "cat"}, options);
  EXPECT_EQ(run.exit_code, 0) << Describe(run);
  EXPECT_EQ(run.out, data);
}

TEST_F(CliTest, LargeStdinPassesThrough) {
  std::string data(3 << 19, 'x');  // 1.5 MiB, above one pipe buffer
  CliOptions options;
  options.stdin_data = data;
  CliRun run = Run({"--", "wc", "-c"}, options);
  EXPECT_EQ(run.exit_code, 0) << Describe(run);
  EXPECT_EQ(run.out, std::to_string(data.size()) + "\n");
}

TEST_F(CliTest, EnvIsPassedAndHostEnvIsNotInherited) {
  CliOptions options;
  options.extra_env = {"SANDBOX_CLI_TEST_SECRET=hunter2"};
  CliRun run = Run({"--env", "FOO=bar", "--env", "EMPTY=", "--", "env"}, options);
  EXPECT_EQ(run.exit_code, 0) << Describe(run);
  EXPECT_NE(run.out.find("\nFOO=bar\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\nEMPTY=\n"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("SANDBOX_CLI_TEST_SECRET"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("hunter2"), std::string::npos) << run.out;
}

TEST_F(CliTest, DirIsTheWorkingDirectoryInsideTheWorkspace) {
  std::filesystem::create_directories(workspace_.Join("sub/inner"));
  CliRun local = Run({"--backend", "local", "--dir", "sub/inner", "--", "pwd"});
  EXPECT_EQ(local.exit_code, 0) << Describe(local);
  EXPECT_EQ(local.out, workspace_.Join("sub/inner") + "\n");
  SANDBOX_SKIP_UNLESS_AVAILABLE("namespace");
  CliRun run = Run({"--dir", "sub/inner", "--", "pwd"});
  EXPECT_EQ(run.exit_code, 0) << Describe(run);
  EXPECT_EQ(run.out, "/workspace/sub/inner\n");
}

TEST_F(CliTest, DirThatEscapesTheWorkspaceIsRefused) {
  CliRun run = Run({"--dir", "../..", "--", "pwd"});
  EXPECT_EQ(run.exit_code, 125) << Describe(run);
  EXPECT_EQ(run.out, "");
  EXPECT_TRUE(run.err.starts_with("sandbox: ")) << run.err;
}

TEST_F(CliTest, WorkspaceIsTheRoot) {
  WriteHostFile(workspace_.Join("note.txt"), "from the host\n");
  CliRun run = Run({"--", "cat", "note.txt"});
  EXPECT_EQ(run.exit_code, 0) << Describe(run);
  EXPECT_EQ(run.out, "from the host\n");
  CliRun write = Run({"--", "sh", "-c", "echo made inside > made.txt"});
  EXPECT_EQ(write.exit_code, 0) << Describe(write);
  EXPECT_EQ(ReadHostFile(workspace_.Join("made.txt")), "made inside\n");
}

TEST_F(CliTest, WorkspaceDefaultsToTheCurrentDirectory) {
  WriteHostFile(workspace_.Join("here.txt"), "cwd\n");
  CliOptions options;
  options.cwd = workspace_.path();
  CliRun local = RunCli({"run", "--backend", "local", "--", "sh", "-c", "pwd; cat here.txt"}, options);
  EXPECT_EQ(local.exit_code, 0) << Describe(local);
  EXPECT_EQ(local.out, workspace_.path() + "\ncwd\n");
  SANDBOX_SKIP_UNLESS_AVAILABLE("namespace");
  CliRun run = RunCli({"run", "--", "sh", "-c", "pwd; cat here.txt"}, options);
  EXPECT_EQ(run.exit_code, 0) << Describe(run);
  EXPECT_EQ(run.out, "/workspace\ncwd\n");
}

TEST_F(CliTest, MissingWorkspaceIs125) {
  CliRun run = RunCli({"run", "--json", "--workspace", workspace_.Join("missing"), "--", "true"});
  EXPECT_EQ(run.exit_code, 125) << Describe(run);
  EXPECT_EQ(run.out, "") << "an Error leaves stdout empty even with --json";
  EXPECT_TRUE(run.err.starts_with("sandbox: ")) << run.err;
}

TEST_F(CliTest, TruncatedStdoutIsReportedOnStderr) {
  constexpr std::size_t kTotal = 3'000'000;
  CliRun run = Run({"--", "head", "-c", std::to_string(kTotal), "/dev/zero"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  ASSERT_LT(run.out.size(), kTotal);
  EXPECT_EQ(run.err, "sandbox: stdout truncated: " + std::to_string(kTotal - run.out.size()) +
                         " bytes dropped from the middle\n");
}

TEST_F(CliTest, TruncationIsReportedInJson) {
  constexpr std::size_t kTotal = 3'000'000;
  CliRun run = Run({"--json", "--", "head", "-c", std::to_string(kTotal), "/dev/zero"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto object = nlohmann::json::parse(run.out);
  EXPECT_EQ(object["stdout_truncated"], true);
  EXPECT_EQ(
      object["stdout_dropped"].get<std::size_t>() + object["stdout"].get<std::string>().size(),
      kTotal);
}

struct UsageErrorCase {
  std::vector<std::string> args;
  std::string message;  // the exact stderr line, or "" to check only the prefix
};

void PrintTo(const UsageErrorCase& c, std::ostream* os) {
  *os << "sandbox";
  for (const auto& arg : c.args) *os << " '" << arg << "'";
}

class CliUsageErrorTest : public CliTest, public ::testing::WithParamInterface<UsageErrorCase> {};

TEST_P(CliUsageErrorTest, Exits125WithMessage) {
  CliRun run = RunCli(GetParam().args);
  EXPECT_EQ(run.exit_code, 125) << Describe(run);
  EXPECT_EQ(run.out, "");
  if (GetParam().message.empty()) {
    EXPECT_TRUE(run.err.starts_with("sandbox")) << run.err;
  } else {
    EXPECT_EQ(run.err, GetParam().message + "\n");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CliUsageErrorTest,
    ::testing::Values(
        UsageErrorCase{{"run", "--timeout", "abc", "--", "true"},
                       "sandbox: --timeout: invalid duration 'abc': use e.g. 500ms, 30s, 5m, 1h "
                       "or 1m30s"},
        UsageErrorCase{{"run", "--timeout", "-5s", "--", "true"},
                       "sandbox: --timeout: negative duration '-5s': a timeout must be positive"},
        UsageErrorCase{{"run", "--backend", "nope", "--", "true"},
                       "sandbox: unknown backend 'nope': expected local, namespace, docker, "
                       "gvisor or microvm"},
        UsageErrorCase{{"run", "--bogus", "--", "true"},
                       "sandbox: unknown option '--bogus' (see `sandbox run --help`)"},
        UsageErrorCase{{"run", "--"},
                       "sandbox: missing PROGRAM after --: usage: sandbox run [OPTIONS] -- "
                       "PROGRAM [ARGS...]"},
        UsageErrorCase{{"run"},
                       "sandbox: missing PROGRAM: usage: sandbox run [OPTIONS] -- PROGRAM "
                       "[ARGS...]"},
        UsageErrorCase{{"run", "--env", "=x", "--", "true"},
                       "sandbox: --env '=x' has an empty KEY"},
        UsageErrorCase{{"run", "--env", "NOVALUE", "--", "true"},
                       "sandbox: --env 'NOVALUE' is not KEY=VALUE"},
        UsageErrorCase{{"run", "--timeout"},
                       "sandbox: --timeout needs a value, e.g. --timeout 30s"},
        UsageErrorCase{{"run", "--json=yes", "--", "true"}, "sandbox: --json takes no value"},
        UsageErrorCase{{"run", "--backend", "local", "--memory", "1g", "--", "true"},
                       "sandbox: the local backend cannot enforce --memory; it runs commands as "
                       "plain host processes without resource limits (use --backend namespace)"},
        UsageErrorCase{{"run", "--backend", "local", "--pids", "10", "--", "true"}, ""},
        UsageErrorCase{{"run", "--backend", "local", "--cpus", "0.5", "--", "true"}, ""},
        UsageErrorCase{{"run", "--isolation", "none", "--cpus", "0.5", "--", "true"}, ""},
        UsageErrorCase{{"run", "--backend", "local", "--rootfs", "/", "--", "true"},
                       "sandbox: --rootfs needs the namespace backend; the local backend runs "
                       "on the host's root"},
        UsageErrorCase{{"run", "--backend", "docker", "--rootfs", "/", "--", "true"},
                       "sandbox: --rootfs is for the namespace backend; the docker backend runs "
                       "an image (build one from a root filesystem with `sandbox image build "
                       "--rootfs DIR`, then pass --image)"},
        UsageErrorCase{{"run", "--backend", "local", "--image", "x", "--", "true"},
                       "sandbox: --image needs the docker or gvisor backend (--backend docker)"},
        UsageErrorCase{{"run", "--isolation", "vm", "--rootfs", "/", "--", "true"},
                       "sandbox: --rootfs needs the namespace backend; the microvm guest's system "
                       "is the host's /usr shared read-only"},
        UsageErrorCase{{"run", "--backend", "local", "--isolation", "process", "--", "true"}, ""},
        UsageErrorCase{{"run", "--backend", "microvm", "--pids", "10", "--", "true"},
                       "sandbox: the microvm backend cannot enforce --pids (the guest's own "
                       "kernel counts them)"},
        UsageErrorCase{{"mcp", "extra"}, "sandbox: unexpected argument 'extra': this command takes options only"},
        UsageErrorCase{{"doctor", "extra"}, "sandbox: doctor takes only --json (got 'extra')"},
        UsageErrorCase{{"gc", "extra"}, "sandbox: gc takes no arguments (got 'extra')"},
        UsageErrorCase{{"image", "frob"},
                       "sandbox: image: unknown subcommand 'frob' (expected build)"},
        UsageErrorCase{{"image", "build", "--bogus"},
                       "sandbox: image build: unknown argument '--bogus'"},
        UsageErrorCase{{"image", "build", "--tag"}, "sandbox: image build: --tag needs a value"},
        UsageErrorCase{{"frobnicate"}, ""}, UsageErrorCase{{}, ""}));

TEST_F(CliTest, IsolationVmRunsInAMicroVmGuest) {
  SANDBOX_SKIP_UNLESS_AVAILABLE("microvm");
  CliRun run = Run({"--isolation", "vm", "--json", "--", "cat", "/proc/sys/kernel/osrelease"});
  EXPECT_EQ(run.exit_code, 0) << Describe(run);
  auto json = nlohmann::json::parse(run.out, nullptr, false);
  ASSERT_TRUE(json.is_object()) << run.out;
  EXPECT_EQ(json["backend"], "microvm");
  EXPECT_EQ(json["isolation"], "vm");
  EXPECT_EQ(json["stdout"], TestVmImage()->kernel_release + "\n");
}

TEST_F(CliTest, BackendLocalAndIsolationNoneAreAccepted) {
  CliRun run = Run({"--backend", "local", "--isolation", "none", "--network", "--", "echo", "ok"});
  EXPECT_EQ(run.exit_code, 0) << Describe(run);
  EXPECT_EQ(run.out, "ok\n");
}

TEST_F(CliTest, HelpGoesToStdoutAndExits0) {
  CliRun top = RunCli({"--help"});
  EXPECT_EQ(top.exit_code, 0);
  EXPECT_TRUE(top.out.starts_with("usage: sandbox COMMAND")) << top.out;
  EXPECT_EQ(top.err, "");
  CliRun short_help = RunCli({"-h"});
  EXPECT_EQ(short_help.exit_code, 0);
  EXPECT_EQ(short_help.out, top.out);
  CliRun run_help = RunCli({"run", "--help"});
  EXPECT_EQ(run_help.exit_code, 0);
  EXPECT_TRUE(run_help.out.starts_with("usage: sandbox run [OPTIONS] -- PROGRAM [ARGS...]\n"))
      << run_help.out;
  EXPECT_EQ(run_help.err, "");
}

TEST_F(CliTest, UnknownCommandPrintsUsageOnStderr) {
  CliRun run = RunCli({"frobnicate"});
  EXPECT_EQ(run.exit_code, 125);
  EXPECT_EQ(run.out, "");
  EXPECT_TRUE(run.err.starts_with("sandbox: unknown command 'frobnicate'\n")) << run.err;
  EXPECT_NE(run.err.find("usage: sandbox COMMAND"), std::string::npos);
}

TEST_F(CliTest, VersionPrintsTheVersion) {
  CliRun run = RunCli({"version"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_TRUE(run.out.starts_with("sandbox ")) << run.out;
  EXPECT_EQ(run.out.back(), '\n');
}

// Sends `signal_number` to the CLI once the command's processes carrying
// `marker` are running, and checks the whole tree is gone afterwards.
void ExpectSignalKillsTree(const std::string& backend, int signal_number, int expected_exit) {
  const std::string marker = UniqueMarker();
  std::atomic<int> seen{0};
  TempDir workspace;
  CliOptions options;
  options.while_running = [&](pid_t pid) {
    const auto deadline = steady_clock::now() + std::chrono::seconds(10);
    while (steady_clock::now() < deadline) {
      seen = CountProcessesWithArg(marker);
      if (seen >= 2) break;
      std::this_thread::sleep_for(milliseconds(10));
    }
    kill(pid, signal_number);
  };
  CliRun run = RunCli({"run", "--backend", backend, "--workspace", workspace.path(), "--", "sh", "-c",
                       "sleep " + marker + " & sleep " + marker + "; wait"},
                      options);
  EXPECT_EQ(seen.load(), 2) << "the command's processes never appeared";
  if (expected_exit >= 0) {
    EXPECT_EQ(run.exit_code, expected_exit) << Describe(run);
  } else {
    EXPECT_EQ(run.term_signal, -expected_exit) << Describe(run);
  }
  EXPECT_LT(run.elapsed, milliseconds(8000));
  EXPECT_EQ(WaitForNoProcessesWithArg(marker, 5000), 0) << "a process of the tree survived";
}

TEST(CliSignalTest, SigintCancelsTheCommandTreeAndExits130) {
  if (std::string(kCliPath).empty()) GTEST_SKIP() << "the sandbox CLI is not built";
  ExpectSignalKillsTree("local", SIGINT, 130);
}

TEST(CliSignalTest, SigtermCancelsTheCommandTreeAndExits143) {
  if (std::string(kCliPath).empty()) GTEST_SKIP() << "the sandbox CLI is not built";
  ExpectSignalKillsTree("local", SIGTERM, 143);
}

TEST(CliSignalTest, NamespaceSigtermCancelsTheCommandTreeAndExits143) {
  if (std::string(kCliPath).empty()) GTEST_SKIP() << "the sandbox CLI is not built";
  SANDBOX_SKIP_UNLESS_AVAILABLE("namespace");
  ExpectSignalKillsTree("namespace", SIGTERM, 143);
}

// SIGKILL gives the CLI no chance to clean up: the boundary must die with it
// (the kernel's parent-death signal, then the PID namespace).
TEST(CliSignalTest, NamespaceBoundaryDiesWhenTheCliIsKilled) {
  if (std::string(kCliPath).empty()) GTEST_SKIP() << "the sandbox CLI is not built";
  SANDBOX_SKIP_UNLESS_AVAILABLE("namespace");
  ExpectSignalKillsTree("namespace", SIGKILL, -SIGKILL);
}

TEST_F(CliTest, NamespaceMemoryLimitKillsAMemoryBomb) {
  SANDBOX_SKIP_UNLESS_AVAILABLE("namespace");
  CliRun run = Run({"--backend", "namespace", "--memory", "64m", "--json", "--", "sh", "-c",
                    "x=0123456789abcdef; while :; do x=$x$x; done"});
  EXPECT_EQ(run.exit_code, 137) << Describe(run);
  auto object = nlohmann::json::parse(run.out);
  EXPECT_EQ(object["signal"], 9);
  EXPECT_EQ(object["backend"], "namespace");
  EXPECT_EQ(object["stderr"],
            "sandbox: killed: the sandbox exceeded its memory limit (67108864 bytes)\n");
}

TEST_F(CliTest, IsolationNoneChoosesLocalAndProcessChoosesNamespace) {
  CliRun none = Run({"--isolation", "none", "--json", "--", "true"});
  EXPECT_EQ(none.exit_code, 0) << Describe(none);
  EXPECT_EQ(nlohmann::json::parse(none.out)["backend"], "local");
  SANDBOX_SKIP_UNLESS_AVAILABLE("namespace");
  CliRun process = Run({"--isolation", "process", "--json", "--", "true"});
  EXPECT_EQ(process.exit_code, 0) << Describe(process);
  EXPECT_EQ(nlohmann::json::parse(process.out)["backend"], "namespace");
}

TEST_F(CliTest, BackendDockerRunsAndIsolationKernelChoosesGvisor) {
  SANDBOX_SKIP_UNLESS_AVAILABLE("docker");
  // The default image exists once the backend's factory has run.
  ASSERT_TRUE(::sandbox::testing::FindBackend("docker").make(workspace_.path()));
  CliRun docker = Run({"--backend", "docker", "--json", "--", "sh", "-c", "echo hi; exit 3"});
  EXPECT_EQ(docker.exit_code, 3) << Describe(docker);
  auto object = nlohmann::json::parse(docker.out);
  EXPECT_EQ(object["backend"], "docker");
  EXPECT_EQ(object["isolation"], "process");
  EXPECT_EQ(object["stdout"], "hi\n");
  SANDBOX_SKIP_UNLESS_AVAILABLE("gvisor");
  CliRun kernel = Run({"--isolation", "kernel", "--json", "--", "true"});
  EXPECT_EQ(kernel.exit_code, 0) << Describe(kernel);
  auto gvisor = nlohmann::json::parse(kernel.out);
  EXPECT_EQ(gvisor["backend"], "gvisor");
  EXPECT_EQ(gvisor["isolation"], "kernel");
}

TEST_F(CliTest, DoctorSaysWhichBackendsRunHere) {
  CliRun run = RunCli({"doctor"});
  EXPECT_TRUE(run.out.starts_with("local (isolation none): available\n")) << run.out;
  EXPECT_NE(run.out.find("\nnamespace (isolation process): "), std::string::npos) << run.out;
  // Each backend says whether it runs here, in the words of its own probe.
  for (const char* backend : {"docker", "gvisor", "microvm"}) {
    bool ok = ::sandbox::testing::FindBackend(backend).unavailable_reason().empty();
    std::string heading = std::string("\n") + backend + " (isolation " +
                          (std::string(backend) == "docker"   ? "process"
                           : std::string(backend) == "gvisor" ? "kernel"
                                                              : "vm") +
                          "): " + (ok ? "available" : "unavailable") + "\n";
    EXPECT_NE(run.out.find(heading), std::string::npos) << heading << run.out;
  }
  // At least one backend (local) runs here.
  EXPECT_EQ(run.exit_code, 0) << Describe(run);
  CliRun gc = RunCli({"gc"});
  EXPECT_EQ(gc.exit_code, 0) << Describe(gc);
  EXPECT_TRUE(gc.out.starts_with("removed ")) << gc.out;
}

}  // namespace
}  // namespace sandbox::testing

namespace sandbox::testing {
namespace {

// A pid means something only in its own PID namespace: a sandbox started
// inside another PID namespace must not take this process's cgroup pool for
// the pool of a dead process and remove it.
TEST_F(CliTest, ARunInsideAnotherPidNamespaceLeavesThisProcesssPoolAlone) {
  LocalOptions options;
  options.root = workspace_.path();
  options.containment = LocalOptions::Containment::kCgroup;
  auto sb = NewLocalSandbox(options);
  if (!sb) GTEST_SKIP() << "no cgroup containment here: " << sb.error().ToString();
  ASSERT_EQ((*sb)->Exec({}, Command{.path = "/bin/true"})->exit_code, 0);
  CliRun inner = Run({"--backend", "local", "--", "unshare", "--pid", "--fork", kCliPath, "run",
                      "--backend", "local", "--", "true"});
  ASSERT_EQ(inner.exit_code, 0) << Describe(inner);
  auto after = (*sb)->Exec({}, Command{.path = "/bin/true"});
  ASSERT_TRUE(after) << after.error().ToString();
  EXPECT_EQ(after->exit_code, 0);
}

// ---- review gate and isolation policy: --review, --audit, --isolation ----

class CliGateTest : public CliTest {
 protected:
  // Writes a policy file outside the workspace and returns its path.
  std::string Policy(std::string_view text) {
    std::string path = config_.Join("policy.json");
    WriteHostFile(path, text);
    return path;
  }
  std::string Marker() const { return workspace_.Join("marker"); }
  TempDir config_;
};

constexpr std::string_view kCliPolicy = R"({
  "version": 1,
  "default": "deny",
  "rules": [
    {"action": "deny", "program": "touch", "reason": "no touching"},
    {"action": "allow", "program": ["echo", "sh"]}
  ]
})";

TEST_F(CliGateTest, ReviewPolicyDeniesWith125AndTheCommandNeverRuns) {
  const std::string policy = Policy(kCliPolicy);
  CliRun run = Run({"--backend", "local", "--review", policy, "--", "touch", "marker"});
  EXPECT_EQ(run.exit_code, 125) << Describe(run);
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(run.err, "sandbox: denied by the rules reviewer: no touching [rule 1 of " + policy +
                         ", line 5]\n");
  CliRun by_default = Run({"--backend", "local", "--review", policy, "--", "ls"});
  EXPECT_EQ(by_default.exit_code, 125) << Describe(by_default);
  EXPECT_EQ(by_default.err,
            "sandbox: denied by the rules reviewer: denied by the default of " + policy + "\n");
  EXPECT_FALSE(HostPathExists(Marker()));
}

TEST_F(CliGateTest, ReviewPolicyAllowsAndTheCommandRuns) {
  CliRun run = Run({"--backend", "local", "--review", Policy(kCliPolicy), "--", "sh", "-c",
                    "echo ran; exit 4"});
  EXPECT_EQ(run.exit_code, 4) << Describe(run);
  EXPECT_EQ(run.out, "ran\n");
  EXPECT_EQ(run.err, "");
}

TEST_F(CliGateTest, MalformedPolicyIsRefusedAtStartUpWithTheLine) {
  const std::string policy = Policy("{\"version\": 1,\n \"default\": \"deny\",\n \"rules\": [\n"
                                    "  {\"action\": \"allow\", \"program\": \"sh\"},\n"
                                    "  {\"action\": \"alow\", \"program\": \"echo\"}]}");
  CliRun run = Run({"--backend", "local", "--review", policy, "--", "sh", "-c", "touch marker"});
  EXPECT_EQ(run.exit_code, 125) << Describe(run);
  EXPECT_EQ(run.err, "sandbox: --review: " + policy +
                         ":5: rule 2: \"action\" must be \"allow\", \"deny\" or \"ask\"\n");
  EXPECT_FALSE(HostPathExists(Marker()));
  CliRun missing = Run({"--backend", "local", "--review", config_.Join("none.json"), "--", "true"});
  EXPECT_EQ(missing.exit_code, 125);
  EXPECT_EQ(missing.err, "sandbox: --review: cannot read the review policy: open '" +
                             config_.Join("none.json") + "': No such file or directory\n");
}

TEST_F(CliGateTest, AuditWritesTheDecisionAndTheOperation) {
  const std::string log = config_.Join("audit.jsonl");
  CliRun run = Run({"--backend", "local", "--review", Policy(kCliPolicy), "--audit", log, "--",
                    "echo", "\x1b[2Jhi"});
  EXPECT_EQ(run.exit_code, 0) << Describe(run);
  std::string text = ReadHostFile(log);
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  std::vector<nlohmann::json> lines;
  for (std::size_t start = 0, end; (end = text.find('\n', start)) != std::string::npos; start = end + 1)
    lines.push_back(nlohmann::json::parse(text.substr(start, end - start)));
  ASSERT_EQ(lines.size(), 2u) << text;
  EXPECT_EQ(lines[0]["event"], "decision");
  EXPECT_EQ(lines[0]["decision"], "allow");
  EXPECT_EQ(lines[0]["reviewer"], "rules");
  EXPECT_EQ(lines[0]["argv"], nlohmann::json({"echo", "\x1b[2Jhi"}));
  EXPECT_EQ(lines[1]["event"], "operation");
  EXPECT_EQ(lines[1]["backend"], "local");
  EXPECT_EQ(lines[1]["exit_code"], 0);
  // A denied run appends its decision and nothing else.
  CliRun denied = Run({"--backend", "local", "--review", Policy(kCliPolicy), "--audit", log, "--",
                       "touch", "marker"});
  EXPECT_EQ(denied.exit_code, 125);
  text = ReadHostFile(log);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3);
  EXPECT_NE(text.find("\"decision\":\"deny\""), std::string::npos);
  EXPECT_FALSE(HostPathExists(Marker()));
}

TEST_F(CliGateTest, AuditAloneRecordsWithoutReview) {
  const std::string log = config_.Join("audit.jsonl");
  CliRun run = Run({"--backend", "local", "--audit", log, "--", "sh", "-c", "exit 2"});
  EXPECT_EQ(run.exit_code, 2) << Describe(run);
  auto line = nlohmann::json::parse(ReadHostFile(log));
  EXPECT_EQ(line["event"], "operation");
  EXPECT_EQ(line["exit_code"], 2);
  EXPECT_EQ(line["argv"], nlohmann::json({"sh", "-c", "exit 2"}));
}

TEST_F(CliGateTest, UnwritableAuditLogIsRefusedBeforeAnythingRuns) {
  CliRun run = Run({"--backend", "local", "--audit", config_.Join("no/such/dir/a.jsonl"), "--",
                    "touch", "marker"});
  EXPECT_EQ(run.exit_code, 125) << Describe(run);
  EXPECT_EQ(run.err, "sandbox: --audit: cannot open the audit log: open '" +
                         config_.Join("no/such/dir/a.jsonl") + "': No such file or directory\n");
  EXPECT_FALSE(HostPathExists(Marker()));
}

TEST_F(CliGateTest, ReviewTimeoutMustBePositive) {
  CliRun run = Run({"--review-timeout", "0", "--", "true"});
  EXPECT_EQ(run.exit_code, 125);
  EXPECT_EQ(run.err, "sandbox: --review-timeout must be more than 0\n");
}

// A machine without gVisor or QEMU (a Docker socket that is not there, a
// QEMU that is not installed): --isolation kernel must fail, never fall back
// to namespace, and say what to install.
TEST_F(CliGateTest, IsolationKernelWithoutGvisorExits125SayingWhatToInstall) {
  CliOptions hidden;
  hidden.extra_env = {"DOCKER_HOST=unix://" + config_.Join("no-docker.sock"),
                      "SANDBOX_QEMU=" + config_.Join("no-qemu")};
  CliRun run = Run({"--isolation", "kernel", "--", "touch", "marker"}, hidden);
  EXPECT_EQ(run.exit_code, 125) << Describe(run);
  EXPECT_EQ(run.out, "");
  EXPECT_TRUE(run.err.starts_with(
      "sandbox: --isolation kernel: no backend on this machine gives isolation kernel or "
      "stronger, and a weaker one is never used instead:\n"
      "  gvisor (isolation kernel): "))
      << run.err;
  EXPECT_NE(run.err.find("the gvisor backend needs Docker with gVisor's runsc registered as the "
                         "runtime \"runsc\": apt-get install docker.io runsc"),
            std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("\n  microvm (isolation vm): '" + config_.Join("no-qemu") +
                         "' is not installed (apt-get install qemu-system-x86); the microvm "
                         "backend needs qemu-system-x86_64"),
            std::string::npos)
      << run.err;
  EXPECT_EQ(run.err.find("namespace"), std::string::npos) << run.err;
  EXPECT_FALSE(HostPathExists(Marker()));
}

TEST_F(CliGateTest, NamedBackendWeakerThanIsolationIsRefused) {
  CliRun run = Run({"--backend", "local", "--isolation", "process", "--", "touch", "marker"});
  EXPECT_EQ(run.exit_code, 125) << Describe(run);
  EXPECT_EQ(run.err,
            "sandbox: --backend local gives isolation none but --isolation process was asked "
            "for; drop --backend to pick one that gives it\n");
  EXPECT_FALSE(HostPathExists(Marker()));
}

// --review ask on a real terminal: the CLI runs with a pseudo-terminal as its
// controlling terminal (/dev/tty), as a person's shell would give it.
TEST_F(CliGateTest, ReviewAskAsksOnTheTerminalShowingTheCommandEscaped) {
  const std::vector<std::string> args = {
      kCliPath, "run", "--workspace", workspace_.path(), "--backend", "local", "--review", "ask",
      "--", "touch", "marker", "\x1b[2J\x1b[Hls"};
  int controller = -1;
  pid_t pid = forkpty(&controller, nullptr, nullptr, nullptr);
  ASSERT_GE(pid, 0) << std::strerror(errno);
  if (pid == 0) {
    std::vector<char*> argv;
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  std::string seen;
  auto read_until = [&](std::string_view text) {
    const auto deadline = steady_clock::now() + std::chrono::seconds(10);
    while (seen.find(text) == std::string::npos && steady_clock::now() < deadline) {
      pollfd waiter{.fd = controller, .events = POLLIN, .revents = 0};
      if (poll(&waiter, 1, 100) <= 0) continue;
      char buffer[4096];
      ssize_t got = read(controller, buffer, sizeof buffer);
      if (got <= 0) return;  // EIO: the CLI exited and closed the terminal
      seen.append(buffer, static_cast<std::size_t>(got));
    }
  };
  read_until("or n REASON: ");
  EXPECT_NE(seen.find("wants to run:\r\n  touch marker $'\\e[2J\\e[Hls'\r\n"), std::string::npos)
      << seen;
  EXPECT_EQ(seen.find('\x1b'), std::string::npos) << seen;
  ASSERT_EQ(write(controller, "n not now\n", 10), 10);
  read_until("\x01never\x01");  // to the end
  close(controller);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 125) << seen;
  EXPECT_NE(seen.find("sandbox: denied by the interactive reviewer: denied by the person "
                      "reviewing: not now\r\n"),
            std::string::npos)
      << seen;
  EXPECT_FALSE(HostPathExists(Marker()));
}

}  // namespace
}  // namespace sandbox::testing
