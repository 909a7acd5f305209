// The conformance suite: Exec, sessions, long-lived processes, capabilities
// and lifecycle, with exact values, against every backend. The file
// operations are in conformance_files_test.cc.
#include "conformance.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <thread>

namespace sandbox::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

Command ShCmd(const std::string& script) {
  return Command{.path = "/bin/sh", .args = {"-c", script}};
}

TEST(BackendPolicy, EveryRequiredBackendExists) {
  const char* env = std::getenv("SANDBOX_REQUIRE_BACKENDS");
  if (!env) {
    GTEST_SKIP() << "SANDBOX_REQUIRE_BACKENDS is not set";
  }
  std::stringstream list(env);
  std::string name;
  auto names = AllBackendNames();
  while (std::getline(list, name, ',')) {
    if (name.empty() || name == "all") continue;
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end())
        << "SANDBOX_REQUIRE_BACKENDS names '" << name << "', which this build does not have";
  }
}

TEST_P(ConformanceTest, EchoCapturesStdoutExactly) {
  auto result = sb().Exec({}, Command{.path = "echo", .args = {"hello", "world"}});
  ASSERT_TRUE(result) << result.error().ToString();
  EXPECT_EQ(result->exit_code, 0);
  EXPECT_EQ(result->stdout_data, "hello world\n");
  EXPECT_EQ(result->stderr_data, "");
  EXPECT_FALSE(result->timed_out);
  EXPECT_FALSE(result->stdout_truncated);
  EXPECT_EQ(result->signal, std::nullopt);
  EXPECT_GT(result->duration.count(), 0);
}

TEST_P(ConformanceTest, NonZeroExitIsAResultNotAnError) {
  Result result = Sh("echo out; echo err >&2; exit 3");
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_EQ(result.stdout_data, "out\n");
  EXPECT_EQ(result.stderr_data, "err\n");
}

TEST_P(ConformanceTest, StdinIsFedBinarySafe) {
  std::string data("abc\0def\n\xff", 9);
  auto result = sb().Exec({}, Command{.path = "cat", .stdin_data = data});
  ASSERT_TRUE(result);
  EXPECT_EQ(result->stdout_data, data);
}

TEST_P(ConformanceTest, LargeStdinAndLargeOutputDoNotDeadlock) {
  std::string data(8 << 20, 'x');
  for (std::size_t i = 0; i < data.size(); i += 4096) data[i] = static_cast<char>('a' + i % 26);
  auto result = sb().Exec({}, Command{.path = "cat", .stdin_data = data, .output_limit = 16 << 20});
  ASSERT_TRUE(result);
  EXPECT_EQ(result->exit_code, 0);
  EXPECT_EQ(result->stdout_data.size(), data.size());
  EXPECT_TRUE(result->stdout_data == data);
}

TEST_P(ConformanceTest, HundredMiBOfStdinIntoHeadReturnsTheFirstByte) {
  std::string data(100 << 20, 'q');
  data[0] = 'Z';
  auto result = sb().Exec({}, Command{.path = "head", .args = {"-c1"}, .stdin_data = data});
  ASSERT_TRUE(result) << result.error().ToString();
  EXPECT_EQ(result->exit_code, 0);
  EXPECT_EQ(result->stdout_data, "Z");
  EXPECT_FALSE(result->timed_out);
}

TEST_P(ConformanceTest, MissingProgramIs127WithAShellLikeMessage) {
  auto result = sb().Exec({}, Command{.path = "no-such-program-7f3a"});
  ASSERT_TRUE(result) << result.error().ToString();
  EXPECT_EQ(result->exit_code, 127);
  EXPECT_NE(result->stderr_data.find("no-such-program-7f3a"), std::string::npos);
  EXPECT_NE(result->stderr_data.find("not found"), std::string::npos);

  auto absolute = sb().Exec({}, Command{.path = "/no/such/dir/prog"});
  ASSERT_TRUE(absolute);
  EXPECT_EQ(absolute->exit_code, 127);
}

TEST_P(ConformanceTest, NonExecutableFileIs126) {
  ASSERT_TRUE(sb().WriteFile({}, "script.sh", "#!/bin/sh\necho hi\n", 0644));
  auto result = sb().Exec({}, Command{.path = "./script.sh"});
  ASSERT_TRUE(result);
  EXPECT_EQ(result->exit_code, 126);
  ASSERT_TRUE(sb().WriteFile({}, "script.sh", "#!/bin/sh\necho hi\n", 0755));
  auto runs = sb().Exec({}, Command{.path = "./script.sh"});
  ASSERT_TRUE(runs);
  EXPECT_EQ(runs->exit_code, 0);
  EXPECT_EQ(runs->stdout_data, "hi\n");
}

TEST_P(ConformanceTest, KilledBySignalReports128PlusSignal) {
  Result term = Sh("echo before; kill -TERM $$");
  EXPECT_EQ(term.exit_code, 128 + SIGTERM);
  EXPECT_EQ(term.signal, SIGTERM);
  EXPECT_EQ(term.stdout_data, "before\n");
  EXPECT_FALSE(term.timed_out);
  Result kill9 = Sh("kill -KILL $$");
  EXPECT_EQ(kill9.exit_code, 128 + SIGKILL);
  EXPECT_EQ(kill9.signal, SIGKILL);
}

TEST_P(ConformanceTest, TimeoutKillsAndKeepsOutputSoFar) {
  std::string marker = UniqueMarker();
  Command cmd = ShCmd("echo before; sleep " + marker + "; echo after");
  cmd.args.push_back("sh");
  cmd.timeout = milliseconds(300);
  auto start = Clock::now();
  auto result = sb().Exec({}, cmd);
  auto took = Clock::now() - start;
  ASSERT_TRUE(result) << result.error().ToString();
  EXPECT_TRUE(result->timed_out);
  EXPECT_EQ(result->stdout_data, "before\n");
  EXPECT_EQ(result->exit_code, 128 + SIGKILL);
  EXPECT_EQ(result->signal, SIGKILL);
  EXPECT_LT(took, seconds(3));
  EXPECT_EQ(WaitForNoProcessesWithArg(marker, 2000), 0);
}

TEST_P(ConformanceTest, ContextCancellationKillsTheTree) {
  std::string marker = UniqueMarker();
  std::stop_source stop;
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(300));
    stop.request_stop();
  });
  auto result = sb().Exec(Context().StopToken(stop.get_token()),
                          ShCmd("echo started; sleep " + marker + " & sleep " + marker + "; wait"));
  canceller.join();
  ASSERT_TRUE(result) << result.error().ToString();
  EXPECT_TRUE(result->timed_out);
  EXPECT_EQ(result->stdout_data, "started\n");
  EXPECT_EQ(WaitForNoProcessesWithArg(marker, 2000), 0);
}

TEST_P(ConformanceTest, ContextDeadlineBoundsTheRun) {
  auto start = Clock::now();
  auto result =
      sb().Exec(Context::WithTimeout(milliseconds(300)), Command{.path = "sleep", .args = {"20"}});
  ASSERT_TRUE(result);
  EXPECT_TRUE(result->timed_out);
  EXPECT_LT(Clock::now() - start, seconds(5));
}

TEST_P(ConformanceTest, AlreadyCancelledContextIsAnError) {
  std::stop_source stop;
  stop.request_stop();
  auto result = sb().Exec(Context().StopToken(stop.get_token()), Command{.path = "true"});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code(), Error::Code::Cancelled);
}

TEST_P(ConformanceTest, OutputIsCappedKeepingHeadAndTail) {
  Command cmd{.path = "seq", .args = {"1", "200000"}, .output_limit = 1000};
  auto result = sb().Exec({}, cmd);
  ASSERT_TRUE(result);
  std::uint64_t total = 0;
  for (int i = 1; i <= 200000; ++i) total += std::to_string(i).size() + 1;
  EXPECT_EQ(result->stdout_data.size(), 1000u);
  EXPECT_TRUE(result->stdout_truncated);
  EXPECT_EQ(result->stdout_dropped, total - 1000);
  EXPECT_EQ(result->stdout_data.substr(0, 8), "1\n2\n3\n4\n");
  EXPECT_EQ(result->stdout_data.substr(1000 - 14), "199999\n200000\n");
  EXPECT_FALSE(result->stderr_truncated);
}

TEST_P(ConformanceTest, DirIsSandboxRelativeAndFenced) {
  auto* maker = As<DirectoryMaker>(sb());
  ASSERT_NE(maker, nullptr);
  ASSERT_TRUE(maker->MakeDirAll({}, "sub/deeper", 0755));
  auto result = sb().Exec({}, Command{.path = "pwd", .dir = "sub/deeper"});
  ASSERT_TRUE(result);
  std::string pwd = result->stdout_data;
  EXPECT_TRUE(pwd.ends_with("/sub/deeper\n")) << pwd;
  if (auto* reporter = As<WorkdirReporter>(sb())) {
    EXPECT_EQ(pwd, reporter->Workdir() + "/sub/deeper\n");
  }

  auto escape = sb().Exec({}, Command{.path = "pwd", .dir = ".."});
  ASSERT_FALSE(escape);
  EXPECT_EQ(escape.error().code(), Error::Code::EscapesRoot);
  auto missing = sb().Exec({}, Command{.path = "pwd", .dir = "nope"});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), Error::Code::NotFound);
  auto outside = sb().Exec({}, Command{.path = "pwd", .dir = "/etc"});
  ASSERT_FALSE(outside);
  EXPECT_EQ(outside.error().code(), Error::Code::EscapesRoot);
}

TEST_P(ConformanceTest, RootIsTheDefaultWorkingDirectory) {
  auto* reporter = As<WorkdirReporter>(sb());
  ASSERT_NE(reporter, nullptr);
  auto result = sb().Exec({}, Command{.path = "pwd"});
  ASSERT_TRUE(result);
  EXPECT_EQ(result->stdout_data, reporter->Workdir() + "\n");
}

TEST_P(ConformanceTest, EnvironmentIsAnAllowListPlusTheCallersEntries) {
  setenv("SANDBOX_TEST_HOST_SECRET", "hunter2-secret", 1);
  auto made = FindBackend(GetParam()).make(workspace_->path());
  unsetenv("SANDBOX_TEST_HOST_SECRET");
  ASSERT_TRUE(made);
  auto result = (*made)->Exec({}, Command{.path = "env", .env = {"FOO=bar", "EMPTY="}});
  ASSERT_TRUE(result);
  EXPECT_EQ(result->stdout_data.find("hunter2-secret"), std::string::npos);
  EXPECT_EQ(result->stdout_data.find("SANDBOX_TEST_HOST_SECRET"), std::string::npos);
  EXPECT_NE(result->stdout_data.find("\nFOO=bar\n"), std::string::npos) << result->stdout_data;
  EXPECT_NE(result->stdout_data.find("EMPTY=\n"), std::string::npos);
  EXPECT_NE(result->stdout_data.find("PATH="), std::string::npos);
  auto override_path = (*made)->Exec(
      {}, Command{.path = "/bin/sh", .args = {"-c", "echo $PATH"}, .env = {"PATH=/bin:/usr/bin"}});
  ASSERT_TRUE(override_path);
  EXPECT_EQ(override_path->stdout_data, "/bin:/usr/bin\n");
  (void)(*made)->Close();
}

TEST_P(ConformanceTest, MalformedCommandsAreInvalidArguments) {
  auto empty = sb().Exec({}, Command{});
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code(), Error::Code::InvalidArgument);
  auto bad_env = sb().Exec({}, Command{.path = "true", .env = {"NOEQUALS"}});
  ASSERT_FALSE(bad_env);
  EXPECT_EQ(bad_env.error().code(), Error::Code::InvalidArgument);
  auto nul = sb().Exec({}, Command{.path = "echo", .args = {std::string("a\0b", 3)}});
  ASSERT_FALSE(nul);
  EXPECT_EQ(nul.error().code(), Error::Code::InvalidArgument);
}

TEST_P(ConformanceTest, BackgroundChildHoldingStdoutDoesNotDelayTheReturn) {
  std::string marker = UniqueMarker();
  auto start = Clock::now();
  Result result = Sh("sleep " + marker + " & echo hi");
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.stdout_data, "hi\n");
  EXPECT_LT(Clock::now() - start, milliseconds(1500));
  EXPECT_EQ(WaitForNoProcessesWithArg(marker, 2000), 0);
}

TEST_P(ConformanceTest, SetsidAndDoubleForkedDescendantsAreKilled) {
  std::string marker = UniqueMarker();
  auto start = Clock::now();
  Result result =
      Sh("setsid sleep " + marker + " & (sleep " + marker +
         " >/dev/null 2>&1 </dev/null &) ; nohup sleep " + marker + " >/dev/null 2>&1 & echo hi");
  EXPECT_EQ(result.stdout_data, "hi\n");
  EXPECT_LT(Clock::now() - start, milliseconds(1500));
  EXPECT_EQ(WaitForNoProcessesWithArg(marker, 2000), 0);
}

TEST_P(ConformanceTest, ProcessIgnoringSigtermIsKilledAtTimeout) {
  std::string marker = UniqueMarker();
  Command cmd = ShCmd("trap '' TERM INT HUP; sleep " + marker + "; sleep " + marker);
  cmd.timeout = milliseconds(300);
  auto result = sb().Exec({}, cmd);
  ASSERT_TRUE(result);
  EXPECT_TRUE(result->timed_out);
  EXPECT_EQ(WaitForNoProcessesWithArg(marker, 2000), 0);
}

TEST_P(ConformanceTest, ForkBombUnderATimeoutLeavesNothingBehind) {
  std::string marker = UniqueMarker();
  // Every process of the bomb carries the marker in its argv (forks of sh
  // keep their command line), so the scan below sees any survivor. A binary
  // tree of subshells 9 levels deep whose 512 leaves fork without end: still
  // forking hard when the timeout fires, but bounded to ~1500 live processes,
  // so that it cannot exhaust the host's pid space under the tests that run
  // beside it (the local backend has no pids limit to stop an unbounded one).
  Command cmd{.path = "/bin/sh",
              .args = {"-c",
                       "b() { if [ $1 -lt 9 ]; then b $(($1+1)) & b $(($1+1)) & wait; "
                       "else while :; do sleep 1 & setsid sleep 1 & wait; done; fi; }; b 0",
                       "bomb", marker},
              .timeout = milliseconds(1000)};
  auto result = sb().Exec({}, cmd);
  if (GetParam() == "gvisor" && !result) {
    // On gVisor's ptrace platform the container's pids limit also bounds the
    // sentry's own tasks: a bomb that reaches it ends the whole sandbox
    // (documented in the README). Bounded, and nothing is left behind.
    EXPECT_EQ(result.error().code(), Error::Code::Unavailable) << result.error().ToString();
  } else {
    ASSERT_TRUE(result) << result.error().ToString();
    EXPECT_TRUE(result->timed_out);
    EXPECT_EQ(WaitForNoneInside(marker, 5000), 0);
  }
  EXPECT_EQ(WaitForNoProcessesWithArg(marker, 5000), 0);
}

TEST_P(ConformanceTest, ManyThreadsExecAtOnce) {
  constexpr int kThreads = 8, kPerThread = 15;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        std::string word = std::to_string(t) + "-" + std::to_string(i);
        auto result = sb().Exec({}, Command{.path = "echo", .args = {word}});
        if (result && result->exit_code == 0 && result->stdout_data == word + "\n") ++ok;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(ok.load(), kThreads * kPerThread);
}

TEST_P(ConformanceTest, CapabilitiesAndRequire) {
  Capabilities caps = sb().GetCapabilities();
  EXPECT_EQ(caps.backend, FindBackend(GetParam()).reported_name());
  EXPECT_TRUE(Require(sb(), Isolation::None));
  EXPECT_TRUE(Require(sb(), caps.isolation));
  if (caps.isolation < Isolation::VM) {
    auto stronger = Require(sb(), static_cast<Isolation>(static_cast<int>(caps.isolation) + 1));
    ASSERT_FALSE(stronger);
    EXPECT_EQ(stronger.error().code(), Error::Code::InsufficientIsolation);
  }
}

TEST_P(ConformanceTest, EveryOptionalCapabilityIsOffered) {
  EXPECT_NE(As<Appender>(sb()), nullptr);
  EXPECT_NE(As<DirectoryMaker>(sb()), nullptr);
  EXPECT_NE(As<LimitedReader>(sb()), nullptr);
  EXPECT_NE(As<ProcessHost>(sb()), nullptr);
  EXPECT_NE(As<Sessioner>(sb()), nullptr);
  EXPECT_NE(As<WorkdirReporter>(sb()), nullptr);
}

TEST_P(ConformanceTest, CloseIsIdempotentAndLaterCallsAreUnavailable) {
  ASSERT_TRUE(sb().Close());
  ASSERT_TRUE(sb().Close());
  auto result = sb().Exec({}, Command{.path = "true"});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code(), Error::Code::Unavailable);
  auto read = sb().ReadFile({}, "x");
  ASSERT_FALSE(read);
  EXPECT_EQ(read.error().code(), Error::Code::Unavailable);
}

// ---- Sessions ----

class SessionTest : public ConformanceTest {
 protected:
  void SetUp() override {
    ConformanceTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto* sessioner = As<Sessioner>(sb());
    ASSERT_NE(sessioner, nullptr);
    auto session = sessioner->NewSession({});
    ASSERT_TRUE(session) << session.error().ToString();
    session_ = std::move(*session);
  }
  void TearDown() override {
    if (session_) {
      EXPECT_TRUE(session_->Close());
    }
    ConformanceTest::TearDown();
  }
  Result Run(Command cmd) {
    auto result = session_->Exec({}, cmd);
    EXPECT_TRUE(result) << result.error().ToString();
    return result ? *result : Result{.exit_code = -1};
  }
  Result Eval(const std::string& text) { return Run(Command{.path = "eval", .args = {text}}); }

  std::unique_ptr<Session> session_;
};

TEST_P(SessionTest, CdExportAndFunctionsPersist) {
  ASSERT_TRUE(As<DirectoryMaker>(sb())->MakeDirAll({}, "sub", 0755));
  EXPECT_EQ(Run({.path = "cd", .args = {"sub"}}).exit_code, 0);
  EXPECT_EQ(Run({.path = "export", .args = {"GREETING=hello there"}}).exit_code, 0);
  EXPECT_EQ(Eval("shout() { echo \"fn:$1\"; }").exit_code, 0);
  EXPECT_EQ(Run({.path = "shout", .args = {"a b"}}).stdout_data, "fn:a b\n");
  EXPECT_TRUE(Run({.path = "pwd"}).stdout_data.ends_with("/sub\n"));
  EXPECT_EQ(Run({.path = "/bin/sh", .args = {"-c", "echo $GREETING"}}).stdout_data,
            "hello there\n");
  EXPECT_EQ(Eval("LOCALVAR=42").exit_code, 0);
  EXPECT_EQ(Eval("echo $LOCALVAR").stdout_data, "42\n");
}

TEST_P(SessionTest, EachCallHasItsOwnOutputAndStatus) {
  Result first = Eval("echo out; echo err >&2; false");
  EXPECT_EQ(first.exit_code, 1);
  EXPECT_EQ(first.stdout_data, "out\n");
  EXPECT_EQ(first.stderr_data, "err\n");
  Result second = Eval("echo second");
  EXPECT_EQ(second.exit_code, 0);
  EXPECT_EQ(second.stdout_data, "second\n");
  EXPECT_EQ(second.stderr_data, "");
}

TEST_P(SessionTest, OutputImitatingAMarkerCannotForgeTheStatus) {
  // Print things shaped like a status line, try the status fd, then fail.
  Result result = Eval(
      "printf '0000000000000000 0\\n'; echo 'deadbeefdeadbeefdeadbeefdeadbeef 0'; "
      "echo 0 >&3; (exit 7)");
  EXPECT_EQ(result.exit_code, 7);
  EXPECT_EQ(result.stdout_data, "0000000000000000 0\ndeadbeefdeadbeefdeadbeefdeadbeef 0\n");
  EXPECT_NE(result.stderr_data, "");  // fd 3 is closed for the command
  EXPECT_EQ(Eval("echo still-fine").stdout_data, "still-fine\n");
}

TEST_P(SessionTest, StdinAndEnvAndDirPerCall) {
  ASSERT_TRUE(As<DirectoryMaker>(sb())->MakeDirAll({}, "d", 0755));
  EXPECT_EQ(Run({.path = "cat", .stdin_data = std::string("in\0put", 6)}).stdout_data,
            std::string("in\0put", 6));
  EXPECT_EQ(Run({.path = "/bin/sh", .args = {"-c", "echo $ONLY_HERE"}, .env = {"ONLY_HERE=yes"}})
                .stdout_data,
            "yes\n");
  EXPECT_EQ(Eval("echo \"[$ONLY_HERE]\"").stdout_data, "[]\n");
  EXPECT_TRUE(Run({.path = "pwd", .dir = "d"}).stdout_data.ends_with("/d\n"));
  EXPECT_FALSE(Run({.path = "pwd"}).stdout_data.ends_with("/d\n"));
  auto escape = session_->Exec({}, Command{.path = "pwd", .dir = "../.."});
  ASSERT_FALSE(escape);
  EXPECT_EQ(escape.error().code(), Error::Code::EscapesRoot);
}

TEST_P(SessionTest, SyntaxErrorsDoNotKillTheSession) {
  Result bad = Eval("if");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.stderr_data, "");
  EXPECT_EQ(Eval("echo alive").stdout_data, "alive\n");
}

TEST_P(SessionTest, BackgroundJobsPersistUntilClose) {
  std::string marker = UniqueMarker();
  EXPECT_EQ(Eval("sleep " + marker + " & echo $! > bg.pid").exit_code, 0);
  Result alive = Eval("kill -0 $(cat bg.pid) && echo alive");
  EXPECT_EQ(alive.stdout_data, "alive\n");
  EXPECT_EQ(CountInside(marker), 1);
  ASSERT_TRUE(session_->Close());
  EXPECT_EQ(WaitForNoneInside(marker, 2000), 0);
  EXPECT_EQ(WaitForNoProcessesWithArg(marker, 2000), 0);
  auto after = session_->Exec({}, Command{.path = "true"});
  ASSERT_FALSE(after);
  EXPECT_EQ(after.error().code(), Error::Code::Unavailable);
}

TEST_P(SessionTest, ATimedOutCallKillsTheSessionAndSaysSo) {
  std::string marker = UniqueMarker();
  Command cmd{
      .path = "eval", .args = {"echo partial; sleep " + marker}, .timeout = milliseconds(300)};
  auto result = session_->Exec({}, cmd);
  ASSERT_TRUE(result);
  EXPECT_TRUE(result->timed_out);
  EXPECT_EQ(result->stdout_data, "partial\n");
  EXPECT_EQ(WaitForNoProcessesWithArg(marker, 2000), 0);
  auto next = session_->Exec({}, Command{.path = "true"});
  ASSERT_FALSE(next);
  EXPECT_EQ(next.error().code(), Error::Code::Unavailable);
  EXPECT_NE(next.error().message().find("timed out"), std::string::npos);
}

TEST_P(SessionTest, ExitEndsTheSessionClearly) {
  Result result = Run({.path = "exit", .args = {"4"}});
  EXPECT_EQ(result.exit_code, 4);
  auto next = session_->Exec({}, Command{.path = "true"});
  ASSERT_FALSE(next);
  EXPECT_EQ(next.error().code(), Error::Code::Unavailable);
}

TEST_P(SessionTest, ConcurrentCallsAreSerialized) {
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        std::string word = std::to_string(t * 100 + i);
        auto result = session_->Exec({}, Command{.path = "echo", .args = {word}});
        if (result && result->stdout_data == word + "\n") ++ok;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(ok.load(), 40);
}

// ---- Long-lived processes ----

class ProcessTest : public ConformanceTest {
 protected:
  std::unique_ptr<Process> Start(Command cmd) {
    auto* host = As<ProcessHost>(sb());
    EXPECT_NE(host, nullptr);
    if (!host) return nullptr;
    auto process = host->StartProcess({}, cmd);
    EXPECT_TRUE(process) << process.error().ToString();
    return process ? std::move(*process) : nullptr;
  }
  static std::string ReadExactly(Reader& reader, std::size_t n) {
    std::string out;
    char buffer[4096];
    while (out.size() < n) {
      auto got = reader.Read(std::span<char>(buffer, std::min(sizeof buffer, n - out.size())));
      if (!got || *got == 0) break;
      out.append(buffer, *got);
    }
    return out;
  }
};

TEST_P(ProcessTest, LiveStdinAndStdout) {
  auto process = Start({.path = "cat"});
  ASSERT_NE(process, nullptr);
  ASSERT_TRUE(process->Stdin().Write("hello\n"));
  EXPECT_EQ(ReadExactly(process->Stdout(), 6), "hello\n");
  ASSERT_TRUE(process->Stdin().Write("again\n"));
  EXPECT_EQ(ReadExactly(process->Stdout(), 6), "again\n");
  ASSERT_TRUE(process->Stdin().Close());
  char c;
  auto eof = process->Stdout().Read(std::span<char>(&c, 1));
  ASSERT_TRUE(eof);
  EXPECT_EQ(*eof, 0u);
  auto status = process->Wait();
  ASSERT_TRUE(status);
  EXPECT_EQ(*status, (ExitStatus{0, std::nullopt}));
  EXPECT_TRUE(process->Kill());
}

TEST_P(ProcessTest, StderrIsDrainedIntoABoundedRing) {
  auto process = Start(ShCmd("head -c 300000 /dev/zero | tr '\\0' a >&2; printf b >&2; echo done"));
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(ReadExactly(process->Stdout(), 5), "done\n");
  ASSERT_TRUE(process->Wait());
  // Once Wait returns, the snapshot holds everything written before exit.
  std::string snapshot = process->StderrSnapshot();
  ASSERT_EQ(snapshot.size(), 65536u);
  EXPECT_EQ(snapshot.back(), 'b');
  EXPECT_EQ(snapshot.find_first_not_of('a'), 65535u);
}

TEST_P(ProcessTest, WaitIsMemoizedAcrossThreads) {
  auto process = Start(ShCmd("sleep 0.2; exit 5"));
  ASSERT_NE(process, nullptr);
  std::vector<std::thread> threads;
  std::atomic<int> fives{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      auto status = process->Wait();
      if (status && status->exit_code == 5 && !status->signal) ++fives;
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(fives.load(), 8);
  EXPECT_EQ(process->Wait()->exit_code, 5);
}

TEST_P(ProcessTest, KillIsIdempotentAndKillsTheTree) {
  std::string marker = UniqueMarker();
  auto process = Start(ShCmd("setsid sleep " + marker + " & sleep " + marker));
  ASSERT_NE(process, nullptr);
  for (int i = 0; i < 100 && CountInside(marker) < 2; ++i)
    std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(CountInside(marker), 2);
  EXPECT_TRUE(process->Kill());
  EXPECT_TRUE(process->Kill());
  auto status = process->Wait();
  ASSERT_TRUE(status);
  EXPECT_EQ(status->signal, SIGKILL);
  EXPECT_EQ(status->exit_code, 128 + SIGKILL);
  EXPECT_EQ(WaitForNoneInside(marker, 2000), 0);
  EXPECT_EQ(WaitForNoProcessesWithArg(marker, 2000), 0);
  EXPECT_TRUE(process->Kill());
}

TEST_P(ProcessTest, AMissingProgramFailsToStart) {
  auto* host = As<ProcessHost>(sb());
  ASSERT_NE(host, nullptr);
  auto process = host->StartProcess({}, Command{.path = "no-such-program-7f3a"});
  ASSERT_FALSE(process);
  EXPECT_EQ(process.error().code(), Error::Code::NotFound);
}

TEST_P(ProcessTest, CloseKillsLiveProcesses) {
  std::string marker = UniqueMarker();
  auto process = Start({.path = "sleep", .args = {marker}});
  ASSERT_NE(process, nullptr);
  ASSERT_TRUE(sb().Close());
  auto status = process->Wait();
  ASSERT_TRUE(status);
  EXPECT_EQ(status->signal, SIGKILL);
  EXPECT_EQ(WaitForNoProcessesWithArg(marker, 2000), 0);
}

SANDBOX_INSTANTIATE_CONFORMANCE(ConformanceTest);
SANDBOX_INSTANTIATE_CONFORMANCE(SessionTest);
SANDBOX_INSTANTIATE_CONFORMANCE(ProcessTest);

}  // namespace
}  // namespace sandbox::testing
