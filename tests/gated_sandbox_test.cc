// The review gate's decorators: a denied operation never reaches the base
// (proved with marker files), ProcessHost is not reachable through the gate
// while every other capability is, remembered decisions, the review timeout.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <stop_token>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "conformance.h"
#include "sandbox/audit.h"
#include "sandbox/gated.h"
#include "sandbox/local.h"
#include "test_util.h"

namespace sandbox::testing {
namespace {

using std::chrono::milliseconds;

std::shared_ptr<Sandbox> LocalAt(const TempDir& dir) {
  auto sb = NewLocalSandbox({.root = dir.path()});
  EXPECT_TRUE(sb) << sb.error().ToString();
  return sb ? std::shared_ptr<Sandbox>(std::move(*sb)) : nullptr;
}

std::unique_ptr<Sandbox> Gate(std::shared_ptr<Sandbox> base, std::shared_ptr<Reviewer> reviewer,
                              std::shared_ptr<AuditLog> audit = nullptr) {
  auto gated = NewGatedSandbox(
      std::move(base),
      {.reviewer = std::move(reviewer), .audit = std::move(audit), .sandbox_id = "sb-test"});
  EXPECT_TRUE(gated) << gated.error().ToString();
  return gated ? std::move(*gated) : nullptr;
}

std::shared_ptr<Reviewer> DenyAll(std::atomic<int>* calls = nullptr) {
  return NewCallbackReviewer(
      [calls](const Context&, const ReviewRequest&) {
        if (calls) ++*calls;
        return Decision::Deny("not today");
      },
      "test");
}

std::shared_ptr<Reviewer> AllowAll(std::atomic<int>* calls = nullptr) {
  return NewCallbackReviewer(
      [calls](const Context&, const ReviewRequest&) {
        if (calls) ++*calls;
        return Decision::Allow();
      },
      "test");
}

void ExpectDenied(const Status& status) {
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error().code(), Error::Code::Denied);
  EXPECT_EQ(status.error().message(), "denied by the test reviewer: not today");
}

TEST(GatedSandbox, DeniedCommandNeverRuns) {
  TempDir dir;
  std::atomic<int> calls = 0;
  auto gated = Gate(LocalAt(dir), DenyAll(&calls));
  ASSERT_TRUE(gated);
  auto result = gated->Exec({}, {.path = "/bin/sh", .args = {"-c", "touch marker"}});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code(), Error::Code::Denied);
  EXPECT_EQ(result.error().message(), "denied by the test reviewer: not today");
  EXPECT_EQ(calls, 1);
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(HostPathExists(dir.Join("marker")));
}

TEST(GatedSandbox, DeniedFileOperationsNeverReachTheBase) {
  TempDir dir;
  WriteHostFile(dir.Join("keep"), "original");
  auto gated = Gate(LocalAt(dir), DenyAll());
  ASSERT_TRUE(gated);
  ExpectDenied(gated->WriteFile({}, "written", "x", 0644));
  ExpectDenied(gated->WriteFile({}, "keep", "replaced", 0644));
  ExpectDenied(gated->Remove({}, "keep"));
  ASSERT_NE(As<Appender>(*gated), nullptr);
  ExpectDenied(As<Appender>(*gated)->AppendFile({}, "keep", "more", 0644));
  ASSERT_NE(As<DirectoryMaker>(*gated), nullptr);
  ExpectDenied(As<DirectoryMaker>(*gated)->MakeDirAll({}, "made/deep", 0755));
  EXPECT_FALSE(HostPathExists(dir.Join("written")));
  EXPECT_FALSE(HostPathExists(dir.Join("made")));
  EXPECT_EQ(ReadHostFile(dir.Join("keep")), "original");
  // Reads are never reviewed.
  auto read = gated->ReadFile({}, "keep");
  ASSERT_TRUE(read) << read.error().ToString();
  EXPECT_EQ(*read, "original");
  auto listed = gated->ListDir({}, ".");
  ASSERT_TRUE(listed);
  EXPECT_EQ(*listed, (std::vector<DirEntry>{{"keep", false}}));
}

TEST(GatedSandbox, FileOperationsOutsideThePolicyAreNotReviewed) {
  TempDir dir;
  std::atomic<int> calls = 0;
  auto gated = NewGatedSandbox(
      LocalAt(dir),
      {.reviewer = DenyAll(&calls), .review_write_file = false, .review_make_dir_all = false});
  ASSERT_TRUE(gated);
  ASSERT_TRUE((*gated)->WriteFile({}, "f", "data", 0644));
  ASSERT_TRUE(As<DirectoryMaker>(**gated)->MakeDirAll({}, "d/e", 0755));
  EXPECT_EQ(calls, 0);
  ExpectDenied(As<Appender>(**gated)->AppendFile({}, "f", "more", 0644));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(ReadHostFile(dir.Join("f")), "data");
}

TEST(GatedSandbox, AllowedOperationsRunAndTheReviewerSeesThem) {
  TempDir dir;
  std::vector<std::string> seen;
  std::mutex mutex;
  auto reviewer = NewCallbackReviewer([&](const Context& ctx, const ReviewRequest& request) {
    std::lock_guard lock(mutex);
    EXPECT_TRUE(ctx.deadline().has_value());
    EXPECT_EQ(request.sandbox_id, "sb-test");
    EXPECT_EQ(request.backend, "local");
    std::string entry(ToString(request.operation));
    if (request.command) entry += " " + request.command->path + " dir=" + request.command->dir;
    if (!request.path.empty()) entry += " " + std::string(request.path);
    if (!request.data.empty()) entry += " data=" + std::string(request.data);
    seen.push_back(entry);
    return Decision::Allow();
  });
  auto gated = Gate(LocalAt(dir), reviewer);
  ASSERT_TRUE(gated);
  ASSERT_TRUE(As<DirectoryMaker>(*gated)->MakeDirAll({}, "sub", 0755));
  ASSERT_TRUE(gated->WriteFile({}, "sub/f", "one", 0644));
  ASSERT_TRUE(As<Appender>(*gated)->AppendFile({}, "sub/f", "two", 0644));
  auto result = gated->Exec({}, {.path = "cat", .args = {"f"}, .dir = "sub"});
  ASSERT_TRUE(result) << result.error().ToString();
  EXPECT_EQ(result->stdout_data, "onetwo");
  ASSERT_TRUE(gated->Remove({}, "sub/f"));
  EXPECT_EQ(seen, (std::vector<std::string>{"make_dir_all sub", "write_file sub/f data=one",
                                            "append_file sub/f data=two", "exec cat dir=sub",
                                            "remove sub/f"}));
}

TEST(GatedSandbox, ProcessHostIsNotReachableThroughTheGateButEveryOtherCapabilityIs) {
  TempDir dir;
  auto base = LocalAt(dir);
  ASSERT_TRUE(base);
  ASSERT_NE(As<ProcessHost>(*base), nullptr);  // the local backend has it
  auto gated = Gate(base, AllowAll());
  ASSERT_TRUE(gated);
  EXPECT_EQ(As<ProcessHost>(*gated), nullptr);
  EXPECT_EQ(dynamic_cast<ProcessHost*>(gated.get()), nullptr);
  ASSERT_NE(As<Appender>(*gated), nullptr);
  ASSERT_NE(As<DirectoryMaker>(*gated), nullptr);
  ASSERT_NE(As<LimitedReader>(*gated), nullptr);
  ASSERT_NE(As<Sessioner>(*gated), nullptr);
  ASSERT_NE(As<WorkdirReporter>(*gated), nullptr);
  EXPECT_EQ(As<WorkdirReporter>(*gated)->Workdir(), As<WorkdirReporter>(*base)->Workdir());
  ASSERT_TRUE(gated->WriteFile({}, "big", std::string(100, 'x'), 0644));
  auto limited = As<LimitedReader>(*gated)->ReadFileLimit({}, "big", 10);
  ASSERT_TRUE(limited);
  EXPECT_EQ(limited->data, std::string(10, 'x'));
  EXPECT_TRUE(limited->truncated);
  // The capabilities pass through unchanged, so Require works on the gate.
  EXPECT_EQ(gated->GetCapabilities().isolation, Isolation::None);
  EXPECT_EQ(gated->GetCapabilities().backend, "local");
  EXPECT_TRUE(Require(*gated, Isolation::None));
  auto required = Require(*gated, Isolation::Process);
  ASSERT_FALSE(required);
  EXPECT_EQ(required.error().code(), Error::Code::InsufficientIsolation);
  // The trusted caller keeps the base for ProcessHost.
  auto process = As<ProcessHost>(*base)->StartProcess({}, {.path = "cat"});
  ASSERT_TRUE(process) << process.error().ToString();
  ASSERT_TRUE((*process)->Kill());
}

TEST(GatedSandbox, SessionCommandsAreReviewedToo) {
  TempDir dir;
  std::atomic<bool> allow = true;
  auto reviewer = NewCallbackReviewer([&](const Context&, const ReviewRequest& request) {
    EXPECT_TRUE(request.in_session);
    return allow ? Decision::Allow() : Decision::Deny("not in a session");
  });
  auto gated = Gate(LocalAt(dir), reviewer);
  ASSERT_TRUE(gated);
  auto session = As<Sessioner>(*gated)->NewSession({});
  ASSERT_TRUE(session) << session.error().ToString();
  ASSERT_TRUE((*session)->Exec({}, {.path = "export", .args = {"X=kept"}}));
  allow = false;
  auto denied = (*session)->Exec({}, {.path = "eval", .args = {"touch marker"}});
  ASSERT_FALSE(denied);
  EXPECT_EQ(denied.error().code(), Error::Code::Denied);
  EXPECT_EQ(denied.error().message(), "denied by the callback reviewer: not in a session");
  allow = true;
  auto echoed = (*session)->Exec({}, {.path = "eval", .args = {"echo $X"}});
  ASSERT_TRUE(echoed) << echoed.error().ToString();
  EXPECT_EQ(echoed->stdout_data, "kept\n");
  EXPECT_FALSE(HostPathExists(dir.Join("marker")));
  ASSERT_TRUE((*session)->Close());
}

// A sandbox with no optional capability at all.
class BareSandbox final : public Sandbox {
 public:
  Capabilities GetCapabilities() const override { return {.backend = "bare"}; }
  Expected<Result> Exec(const Context&, const Command&) override { return Result{.exit_code = 3}; }
  Expected<std::string> ReadFile(const Context&, std::string_view) override { return "r"; }
  Status WriteFile(const Context&, std::string_view, std::string_view, FileMode) override {
    return {};
  }
  Status Remove(const Context&, std::string_view) override { return {}; }
  Expected<std::vector<DirEntry>> ListDir(const Context&, std::string_view) override {
    return std::vector<DirEntry>{};
  }
  Status Close() override { return {}; }
};

TEST(GatedSandbox, CapabilitiesTheBaseLacksAreAbsentFromTheGate) {
  auto gated = Gate(std::make_shared<BareSandbox>(), AllowAll());
  ASSERT_TRUE(gated);
  EXPECT_EQ(As<Appender>(*gated), nullptr);
  EXPECT_EQ(As<DirectoryMaker>(*gated), nullptr);
  EXPECT_EQ(As<LimitedReader>(*gated), nullptr);
  EXPECT_EQ(As<Sessioner>(*gated), nullptr);
  EXPECT_EQ(As<WorkdirReporter>(*gated), nullptr);
  EXPECT_EQ(As<ProcessHost>(*gated), nullptr);
  auto result = gated->Exec({}, {.path = "x"});
  ASSERT_TRUE(result);
  EXPECT_EQ(result->exit_code, 3);
}

TEST(GatedSandbox, RememberedDecisionIsNotAskedAgainOnThisSandboxOnly) {
  TempDir dir;
  std::atomic<int> calls = 0;
  auto reviewer = NewCallbackReviewer([&](const Context&, const ReviewRequest& request) {
    ++calls;
    if (request.command->args == std::vector<std::string>{"once"})
      return Decision::AllowRemember("fine forever");
    return Decision::Allow();
  });
  auto base = LocalAt(dir);
  auto gated = Gate(base, reviewer);
  ASSERT_TRUE(gated);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(gated->Exec({}, {.path = "echo", .args = {"once"}}));
  EXPECT_EQ(calls, 1);
  // A different command, directory or environment is a different request.
  ASSERT_TRUE(gated->Exec({}, {.path = "echo", .args = {"once", "more"}}));
  ASSERT_TRUE(gated->Exec({}, {.path = "echo", .args = {"once"}, .env = {"LD_PRELOAD=x.so"}}));
  ASSERT_TRUE(gated->Exec({}, {.path = "echo", .args = {"once"}, .stdin_data = "other"}));
  EXPECT_EQ(calls, 4);
  // In a session the same words may name a shell function: asked again,
  // then remembered for the sessions of this sandbox.
  auto session = As<Sessioner>(*gated)->NewSession({});
  ASSERT_TRUE(session);
  ASSERT_TRUE((*session)->Exec({}, {.path = "echo", .args = {"once"}}));
  EXPECT_EQ(calls, 5);
  auto session2 = As<Sessioner>(*gated)->NewSession({});
  ASSERT_TRUE(session2);
  ASSERT_TRUE((*session2)->Exec({}, {.path = "echo", .args = {"once"}}));
  EXPECT_EQ(calls, 5);
  // Another gate over the same base remembers nothing.
  auto other = Gate(base, reviewer);
  ASSERT_TRUE(other->Exec({}, {.path = "echo", .args = {"once"}}));
  EXPECT_EQ(calls, 6);
}

TEST(GatedSandbox, ReviewTimeoutDenies) {
  TempDir dir;
  // A reviewer that ignores its deadline: its late "allow" counts as a denial.
  auto slow = NewCallbackReviewer([](const Context&, const ReviewRequest&) {
    std::this_thread::sleep_for(milliseconds(300));
    return Decision::Allow();
  });
  auto gated =
      NewGatedSandbox(LocalAt(dir), {.reviewer = slow, .review_timeout = milliseconds(100)});
  ASSERT_TRUE(gated);
  auto result = (*gated)->Exec({}, {.path = "touch", .args = {"marker"}});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code(), Error::Code::Denied);
  EXPECT_EQ(result.error().message(),
            "denied by the callback reviewer: the review did not answer within 100ms, so the "
            "operation was denied");
  // A reviewer that waits for its deadline is denied as soon as it passes.
  auto waiting = NewCallbackReviewer([](const Context& ctx, const ReviewRequest&) {
    while (!ctx.expired()) std::this_thread::sleep_for(milliseconds(5));
    return Decision::Allow();
  });
  auto gated2 = NewGatedSandbox(LocalAt(dir),
                                {.reviewer = waiting, .review_timeout = std::chrono::seconds(1)});
  ASSERT_TRUE(gated2);
  const auto start = std::chrono::steady_clock::now();
  auto result2 = (*gated2)->Exec({}, {.path = "touch", .args = {"marker"}});
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(result2);
  EXPECT_EQ(result2.error().message(),
            "denied by the callback reviewer: the review did not answer within 1s, so the "
            "operation was denied");
  EXPECT_GE(took, milliseconds(1000));
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(HostPathExists(dir.Join("marker")));
}

// A reviewer that does not return until the test lets it (or 60 s pass),
// ignoring its Context: a GUI that hangs, a remote model that never answers.
class StuckReviewer {
 public:
  std::shared_ptr<Reviewer> reviewer() {
    return NewCallbackReviewer([this](const Context&, const ReviewRequest& request) {
      ++asked_;
      {
        std::unique_lock lock(mutex_);
        released_.wait_for(lock, std::chrono::seconds(60), [&] { return release_; });
      }
      // Read the request after the call gave up: it must still be there.
      if (request.command && !request.command->args.empty()) {
        std::lock_guard lock(mutex_);
        seen_.push_back(request.command->args.front());
      }
      ++returned_;
      return Decision::Allow();
    });
  }
  void Release() {
    std::lock_guard lock(mutex_);
    release_ = true;
    released_.notify_all();
  }
  // Waits until `n` reviews have returned.
  bool WaitReturned(int n) {
    for (int i = 0; i < 1000 && returned_ < n; ++i) std::this_thread::sleep_for(milliseconds(10));
    return returned_ >= n;
  }
  int asked() const { return asked_; }
  int returned() const { return returned_; }
  std::vector<std::string> seen() {
    std::lock_guard lock(mutex_);
    return seen_;
  }
  ~StuckReviewer() {
    Release();
    WaitReturned(asked_);
  }

 private:
  std::mutex mutex_;
  std::condition_variable released_;
  bool release_ = false;
  std::vector<std::string> seen_;
  std::atomic<int> asked_ = 0;
  std::atomic<int> returned_ = 0;
};

TEST(GatedSandbox, AReviewerThatNeverReturnsIsDeniedAtTheTimeoutAndItsLateAnswerIgnored) {
  TempDir dir;
  StuckReviewer stuck;
  auto gated = NewGatedSandbox(LocalAt(dir),
                               {.reviewer = stuck.reviewer(), .review_timeout = milliseconds(200)});
  ASSERT_TRUE(gated);
  {
    // The command lives only as long as the call; the review outlives both.
    Command touch{.path = "touch", .args = {"marker"}};
    auto result = (*gated)->Exec({}, touch);
    ASSERT_FALSE(result);
    EXPECT_EQ(result.error().code(), Error::Code::Denied);
    EXPECT_EQ(result.error().message(),
              "denied by the callback reviewer: the review did not answer within 200ms, so the "
              "operation was denied");
  }
  // The call returned while the reviewer was still deciding.
  EXPECT_EQ(stuck.asked(), 1);
  EXPECT_EQ(stuck.returned(), 0);
  // Its "allow", given now, reaches nothing.
  stuck.Release();
  ASSERT_TRUE(stuck.WaitReturned(1));
  EXPECT_EQ(stuck.seen(), std::vector<std::string>{"marker"});
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(HostPathExists(dir.Join("marker")));
  // The gate still works: the next review is asked and answered in time.
  auto after = (*gated)->Exec({}, {.path = "touch", .args = {"marker"}});
  ASSERT_TRUE(after) << after.error().ToString();
  EXPECT_TRUE(HostPathExists(dir.Join("marker")));
  EXPECT_EQ(stuck.asked(), 2);
}

TEST(GatedSandbox, StuckReviewsAreBoundedAndTheGateDeniesWithoutAskingBeyondThem) {
  TempDir dir;
  StuckReviewer stuck;
  auto gated = NewGatedSandbox(LocalAt(dir),
                               {.reviewer = stuck.reviewer(), .review_timeout = milliseconds(20)});
  ASSERT_TRUE(gated);
  for (int i = 0; i < 16; ++i) {
    auto result = (*gated)->Exec({}, {.path = "touch", .args = {"marker"}});
    ASSERT_FALSE(result);
    EXPECT_EQ(result.error().message(),
              "denied by the callback reviewer: the review did not answer within 20ms, so the "
              "operation was denied");
  }
  EXPECT_EQ(stuck.asked(), 16);
  auto refused = (*gated)->Exec({}, {.path = "touch", .args = {"marker"}});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Error::Code::Denied);
  EXPECT_EQ(refused.error().message(),
            "denied by the callback reviewer: 16 reviews are still running past their timeout; "
            "denied without asking");
  EXPECT_EQ(stuck.asked(), 16);
  // Once they return, the gate asks again.
  stuck.Release();
  ASSERT_TRUE(stuck.WaitReturned(16));
  auto asked = (*gated)->Exec({}, {.path = "touch", .args = {"marker"}});
  ASSERT_TRUE(asked) << asked.error().ToString();
  EXPECT_EQ(stuck.asked(), 17);
  EXPECT_TRUE(HostPathExists(dir.Join("marker")));
}

TEST(GatedSandbox, CancellingACallDuringReviewCancelsTheReviewersContext) {
  TempDir dir;
  std::atomic<bool> reviewer_saw_cancel = false;
  auto waiting = NewCallbackReviewer([&](const Context& ctx, const ReviewRequest&) {
    while (!ctx.cancelled() && !ctx.expired()) std::this_thread::sleep_for(milliseconds(5));
    reviewer_saw_cancel = ctx.cancelled();
    return Decision::Allow();
  });
  auto gated = Gate(LocalAt(dir), waiting);
  std::stop_source stop;
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(100));
    stop.request_stop();
  });
  auto result = gated->Exec(Context().StopToken(stop.get_token()),
                            {.path = "touch", .args = {"marker"}});
  canceller.join();
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code(), Error::Code::Cancelled);
  for (int i = 0; i < 500 && !reviewer_saw_cancel; ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_TRUE(reviewer_saw_cancel);
  EXPECT_FALSE(HostPathExists(dir.Join("marker")));
}

class FailingReviewer final : public Reviewer {
 public:
  std::string Name() const override { return "broken"; }
  Expected<Decision> Review(const Context&, const ReviewRequest&) override {
    return Fail(Error::Code::Internal, "lost its mind");
  }
};

TEST(GatedSandbox, AReviewerErrorDenies) {
  TempDir dir;
  auto gated = Gate(LocalAt(dir), std::make_shared<FailingReviewer>());
  auto result = gated->Exec({}, {.path = "touch", .args = {"marker"}});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code(), Error::Code::Denied);
  EXPECT_EQ(result.error().message(),
            "denied by the broken reviewer: the reviewer failed: lost its mind");
  EXPECT_FALSE(HostPathExists(dir.Join("marker")));
}

TEST(GatedSandbox, AThrowingReviewerDenies) {
  TempDir dir;
  auto gated =
      Gate(LocalAt(dir), NewCallbackReviewer([](const Context&, const ReviewRequest&) -> Decision {
             throw std::runtime_error("bad callback");
           }));
  auto result = gated->Exec({}, {.path = "touch", .args = {"marker"}});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().message(),
            "denied by the callback reviewer: the reviewer threw: bad callback");
  EXPECT_FALSE(HostPathExists(dir.Join("marker")));
}

TEST(GatedSandbox, TheCallersDeadlinePassingDuringReviewIsDeadlineExceeded) {
  TempDir dir;
  auto waiting = NewCallbackReviewer([](const Context& ctx, const ReviewRequest&) {
    while (!ctx.expired()) std::this_thread::sleep_for(milliseconds(5));
    return Decision::Allow();
  });
  auto gated = Gate(LocalAt(dir), waiting);
  auto result =
      gated->Exec(Context::WithTimeout(milliseconds(100)), {.path = "touch", .args = {"marker"}});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code(), Error::Code::DeadlineExceeded);
  EXPECT_FALSE(HostPathExists(dir.Join("marker")));
}

TEST(GatedSandbox, ACancelledCallIsCancelledNotReviewed) {
  TempDir dir;
  std::atomic<int> calls = 0;
  auto gated = Gate(LocalAt(dir), AllowAll(&calls));
  std::stop_source stop;
  stop.request_stop();
  auto result = gated->Exec(Context().StopToken(stop.get_token()), {.path = "true"});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code(), Error::Code::Cancelled);
  EXPECT_EQ(calls, 0);
}

TEST(GatedSandbox, RefusesToBuildWithoutABaseOrWithoutReviewerAndAudit) {
  auto no_base = NewGatedSandbox(nullptr, {.reviewer = AllowAll()});
  ASSERT_FALSE(no_base);
  EXPECT_EQ(no_base.error().message(), "a review gate needs a sandbox to wrap");
  auto nothing = NewGatedSandbox(std::make_shared<BareSandbox>(), {});
  ASSERT_FALSE(nothing);
  EXPECT_EQ(nothing.error().message(), "a review gate needs a reviewer or an audit log");
}

std::vector<nlohmann::json> ReadAuditLines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::string text = ReadHostFile(path);
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    EXPECT_NE(end, std::string::npos) << "the last line has no newline";
    if (end == std::string::npos) break;
    lines.push_back(nlohmann::json::parse(text.substr(start, end - start)));
    start = end + 1;
  }
  return lines;
}

TEST(GatedSandbox, AuditLogRecordsEveryDecisionAndEveryOperationOnce) {
  TempDir dir, logs;
  auto audit = AuditLog::Open({.path = logs.Join("audit.jsonl")});
  ASSERT_TRUE(audit) << audit.error().ToString();
  auto reviewer = NewCallbackReviewer(
      [](const Context&, const ReviewRequest& request) {
        if (request.command && request.command->path == "rm") return Decision::Deny("no rm");
        return Decision::Allow();
      },
      "cb");
  auto gated = Gate(LocalAt(dir), reviewer, *audit);
  ASSERT_TRUE(gated);
  ASSERT_TRUE(gated->Exec({}, {.path = "sh", .args = {"-c", "exit 7"}}));
  ASSERT_FALSE(gated->Exec({}, {.path = "rm", .args = {"-rf", "."}}));
  ASSERT_TRUE(gated->WriteFile({}, "f", "hello", 0644));
  ASSERT_TRUE(gated->ReadFile({}, "f"));
  ASSERT_FALSE(gated->ReadFile({}, "missing"));
  ASSERT_TRUE(gated->ListDir({}, "."));
  ASSERT_TRUE(gated->Remove({}, "f"));
  std::vector<nlohmann::json> lines = ReadAuditLines(logs.Join("audit.jsonl"));
  ASSERT_EQ(lines.size(), 10u);
  std::vector<std::string> summary;
  for (const auto& line : lines) {
    EXPECT_EQ(line["sandbox"], "sb-test");
    EXPECT_EQ(line["backend"], "local");
    EXPECT_TRUE(line["time"].is_string());
    summary.push_back(line["event"].get<std::string>() + " " +
                      line["operation"].get<std::string>() +
                      (line.contains("decision") ? " " + line["decision"].get<std::string>() : ""));
  }
  EXPECT_EQ(summary, (std::vector<std::string>{"decision exec allow", "operation exec",
                                               "decision exec deny", "decision write_file allow",
                                               "operation write_file", "operation read_file",
                                               "operation read_file", "operation list_dir",
                                               "decision remove allow", "operation remove"}));
  EXPECT_EQ(lines[0]["argv"], nlohmann::json({"sh", "-c", "exit 7"}));
  EXPECT_EQ(lines[0]["reviewer"], "cb");
  EXPECT_EQ(lines[1]["exit_code"], 7);
  EXPECT_TRUE(lines[1]["duration_ms"].is_number());
  EXPECT_EQ(lines[1]["timed_out"], false);
  EXPECT_EQ(lines[1]["stdout_truncated"], false);
  EXPECT_EQ(lines[2]["reason"], "no rm");
  EXPECT_EQ(lines[4]["path"], "f");
  EXPECT_EQ(lines[4]["bytes"], 5);
  EXPECT_EQ(lines[5]["bytes"], 5);
  EXPECT_EQ(lines[6]["error"].get<std::string>().rfind("not_found: ", 0), 0u) << lines[6];
}

TEST(GatedSandbox, RememberedDecisionsAreAuditedAsRemembered) {
  TempDir dir, logs;
  auto audit = AuditLog::Open({.path = logs.Join("a.jsonl")});
  ASSERT_TRUE(audit);
  auto reviewer = NewCallbackReviewer(
      [](const Context&, const ReviewRequest&) { return Decision::AllowRemember("ok"); }, "cb");
  auto gated = Gate(LocalAt(dir), reviewer, *audit);
  ASSERT_TRUE(gated->Exec({}, {.path = "true"}));
  ASSERT_TRUE(gated->Exec({}, {.path = "true"}));
  auto lines = ReadAuditLines(logs.Join("a.jsonl"));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0]["decision"], "allow_remember");
  EXPECT_EQ(lines[2]["decision"], "remembered");
}

TEST(GatedSandbox, AuditOnlyGateRecordsOperationsWithoutDecisions) {
  TempDir dir, logs;
  auto audit = AuditLog::Open({.path = logs.Join("a.jsonl")});
  ASSERT_TRUE(audit);
  auto gated = NewGatedSandbox(LocalAt(dir), {.audit = *audit});
  ASSERT_TRUE(gated);
  ASSERT_TRUE((*gated)->Exec({}, {.path = "true"}));
  auto lines = ReadAuditLines(logs.Join("a.jsonl"));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["event"], "operation");
  EXPECT_EQ(lines[0]["exit_code"], 0);
}

TEST(GatedSandbox, AnAuditLogThatCannotBeWrittenStopsTheGate) {
  TempDir dir, logs;
  const std::string path = logs.Join("a.jsonl");
  WriteHostFile(path, std::string(4000, 'x') + "\n");
  // Rotation will have to rename the log onto a non-empty directory: it fails.
  ASSERT_EQ(mkdir((path + ".1").c_str(), 0755), 0);
  WriteHostFile(path + ".1/occupied", "");
  auto audit = AuditLog::Open({.path = path, .max_bytes = 4096, .keep_rotated = 1});
  ASSERT_TRUE(audit);
  std::atomic<int> calls = 0;
  auto gated = Gate(LocalAt(dir), AllowAll(&calls), *audit);
  ASSERT_TRUE(gated);
  auto result = gated->Exec({}, {.path = "touch", .args = {"marker"}});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code(), Error::Code::Unavailable);
  EXPECT_EQ(result.error().message(), "the review gate stopped: rename '" + path +
                                          "': Is a directory; nothing runs without its audit line");
  EXPECT_EQ(calls, 1);
  // Every later operation is refused before review, reads included.
  EXPECT_FALSE(gated->ReadFile({}, "x"));
  EXPECT_FALSE(gated->Exec({}, {.path = "touch", .args = {"marker"}}));
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(HostPathExists(dir.Join("marker")));
}

TEST(GatedSandbox, ALoneSessionCanBeGated) {
  TempDir dir;
  auto base = LocalAt(dir);
  ASSERT_TRUE(base);
  auto session = As<Sessioner>(*base)->NewSession({});
  ASSERT_TRUE(session);
  auto gated = NewGatedSession(std::move(*session), {.reviewer = DenyAll()}, "local");
  ASSERT_TRUE(gated) << gated.error().ToString();
  auto result = (*gated)->Exec({}, {.path = "touch", .args = {"marker"}});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().message(), "denied by the test reviewer: not today");
  EXPECT_FALSE(HostPathExists(dir.Join("marker")));
  EXPECT_TRUE((*gated)->Close());
}

// The gate over every backend: the capabilities seen through it are exactly
// the base's minus ProcessHost, and a denied command never runs there.
class GatedBackendTest : public ConformanceTest {};

TEST_P(GatedBackendTest, ForwardsEveryCapabilityButProcessHostAndDeniedNeverRuns) {
  std::shared_ptr<Sandbox> base = std::move(sandbox_);
  auto reviewer = NewCallbackReviewer([](const Context&, const ReviewRequest& request) {
    if (request.command && request.command->path == "touch") return Decision::Deny("no touch");
    if (request.operation == Operation::WriteFile) return Decision::Deny("no writes");
    return Decision::Allow();
  });
  auto gated = Gate(base, reviewer);
  ASSERT_TRUE(gated);
  EXPECT_EQ(As<ProcessHost>(*gated), nullptr);
  EXPECT_EQ(As<Appender>(*gated) != nullptr, As<Appender>(*base) != nullptr);
  EXPECT_EQ(As<DirectoryMaker>(*gated) != nullptr, As<DirectoryMaker>(*base) != nullptr);
  EXPECT_EQ(As<LimitedReader>(*gated) != nullptr, As<LimitedReader>(*base) != nullptr);
  EXPECT_EQ(As<Sessioner>(*gated) != nullptr, As<Sessioner>(*base) != nullptr);
  EXPECT_EQ(As<WorkdirReporter>(*gated) != nullptr, As<WorkdirReporter>(*base) != nullptr);
  EXPECT_EQ(gated->GetCapabilities().isolation, base->GetCapabilities().isolation);
  auto denied = gated->Exec({}, {.path = "touch", .args = {"marker"}});
  ASSERT_FALSE(denied);
  EXPECT_EQ(denied.error().message(), "denied by the callback reviewer: no touch");
  auto write = gated->WriteFile({}, "written", "x", 0644);
  ASSERT_FALSE(write);
  EXPECT_EQ(write.error().code(), Error::Code::Denied);
  auto allowed = gated->Exec({}, {.path = "/bin/sh", .args = {"-c", "echo ok; ls"}});
  ASSERT_TRUE(allowed) << allowed.error().ToString();
  EXPECT_EQ(allowed->stdout_data, "ok\n");
  EXPECT_FALSE(HostPathExists(Host("marker")));
  EXPECT_FALSE(HostPathExists(Host("written")));
  EXPECT_TRUE(gated->Close());
}

SANDBOX_INSTANTIATE_CONFORMANCE(GatedBackendTest);

}  // namespace
}  // namespace sandbox::testing
