// The interactive reviewer driven through a pseudo-terminal, as a person
// would see and answer it: hostile escape sequences arrive escaped, answers
// are parsed, silence and hang-ups deny.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "sandbox/gated.h"
#include "sandbox/local.h"
#include "test_util.h"

namespace sandbox::testing {
namespace {

using std::chrono::milliseconds;
using Verdict = Decision::Verdict;

// A pseudo-terminal pair; the reviewer gets the terminal side, the test
// plays the person on the controller side.
class Pty {
 public:
  Pty() {
    if (openpty(&controller_, &terminal_, nullptr, nullptr, nullptr) != 0) {
      ADD_FAILURE() << "openpty failed";
      return;
    }
    fcntl(controller_, F_SETFD, FD_CLOEXEC);
    fcntl(terminal_, F_SETFD, FD_CLOEXEC);
  }
  ~Pty() {
    if (controller_ >= 0) close(controller_);
    CloseTerminal();
  }
  int terminal() const { return terminal_; }
  void CloseTerminal() {
    if (terminal_ >= 0) close(terminal_);
    terminal_ = -1;
  }
  void CloseController() {
    if (controller_ >= 0) close(controller_);
    controller_ = -1;
  }

  // Reads what the terminal showed until `text` appears (or 5 s pass).
  std::string ReadUntil(std::string_view text) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (seen_.find(text) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd waiter{.fd = controller_, .events = POLLIN, .revents = 0};
      if (poll(&waiter, 1, 50) <= 0) continue;
      char buffer[4096];
      ssize_t got = read(controller_, buffer, sizeof buffer);
      if (got <= 0) break;
      seen_.append(buffer, static_cast<std::size_t>(got));
    }
    return seen_;
  }

  void Type(std::string_view text) {
    ASSERT_EQ(write(controller_, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }

 private:
  int controller_ = -1;
  int terminal_ = -1;
  std::string seen_;
};

std::shared_ptr<Reviewer> Interactive(Pty& pty) {
  auto reviewer = NewInteractiveReviewer({.in_fd = pty.terminal(), .out_fd = pty.terminal()});
  EXPECT_TRUE(reviewer) << reviewer.error().ToString();
  return reviewer ? *reviewer : nullptr;
}

std::future<Expected<Decision>> AskAsync(std::shared_ptr<Reviewer> reviewer, Command command,
                                         milliseconds timeout = milliseconds(5000)) {
  return std::async(std::launch::async, [reviewer, command = std::move(command), timeout] {
    ReviewRequest request;
    request.operation = Operation::Exec;
    request.sandbox_id = "sb-1";
    request.backend = "local";
    request.command = &command;
    return reviewer->Review(Context::WithTimeout(timeout), request);
  });
}

TEST(InteractiveReviewer, ShowsEscapeSequencesEscapedAndParsesYes) {
  Pty pty;
  auto reviewer = Interactive(pty);
  ASSERT_TRUE(reviewer);
  // The argument tries to clear the screen, move the cursor home, print an
  // innocent command over the real one and set the window title.
  auto answer =
      AskAsync(reviewer, {.path = "rm", .args = {"-rf", "/ \x1b[2J\x1b[H\x1b]0;ls\x07ls -l\r"}});
  std::string shown = pty.ReadUntil("or n REASON: ");
  EXPECT_EQ(shown.find('\x1b'), std::string::npos) << shown;
  EXPECT_EQ(shown.find('\x07'), std::string::npos) << shown;
  EXPECT_NE(shown.find("sandbox sb-1 (local) wants to run:\r\n  rm -rf $'/ "
                       "\\e[2J\\e[H\\e]0;ls\\x07ls -l\\r'\r\n"),
            std::string::npos)
      << shown;
  pty.Type("y\n");
  auto decision = answer.get();
  ASSERT_TRUE(decision) << decision.error().ToString();
  EXPECT_EQ(decision->verdict, Verdict::Allow);
  EXPECT_EQ(decision->reason, "allowed by the person reviewing");
}

struct AnswerCase {
  std::string typed;
  Verdict verdict;
  std::string reason;
};

class InteractiveAnswerTest : public ::testing::TestWithParam<AnswerCase> {};

TEST_P(InteractiveAnswerTest, IsParsed) {
  Pty pty;
  auto reviewer = Interactive(pty);
  ASSERT_TRUE(reviewer);
  auto answer = AskAsync(reviewer, {.path = "make"});
  pty.ReadUntil("or n REASON: ");
  pty.Type(GetParam().typed);
  auto decision = answer.get();
  ASSERT_TRUE(decision) << decision.error().ToString();
  EXPECT_EQ(decision->verdict, GetParam().verdict);
  EXPECT_EQ(decision->reason, GetParam().reason);
}

INSTANTIATE_TEST_SUITE_P(
    Answers, InteractiveAnswerTest,
    ::testing::Values(AnswerCase{"yes\n", Verdict::Allow, "allowed by the person reviewing"},
                      AnswerCase{"  a \n", Verdict::AllowRemember,
                                 "allowed by the person reviewing, for this sandbox"},
                      AnswerCase{"always\n", Verdict::AllowRemember,
                                 "allowed by the person reviewing, for this sandbox"},
                      AnswerCase{"n\n", Verdict::Deny, "denied by the person reviewing"},
                      AnswerCase{"no\n", Verdict::Deny, "denied by the person reviewing"},
                      AnswerCase{
                          "n use the Makefile target 'test' instead\n", Verdict::Deny,
                          "denied by the person reviewing: use the Makefile target 'test' instead"},
                      AnswerCase{"what\nhuh\nnope\n", Verdict::Deny,
                                 "the person reviewing gave no answer that could be understood"},
                      AnswerCase{"maybe\ny\n", Verdict::Allow, "allowed by the person reviewing"}));

TEST(InteractiveReviewer, TypeAheadBeforeTheQuestionDoesNotAnswerIt) {
  Pty pty;
  auto reviewer = Interactive(pty);
  ASSERT_TRUE(reviewer);
  pty.Type("y\n");  // typed before anything was asked
  std::this_thread::sleep_for(milliseconds(50));
  auto answer = AskAsync(reviewer, {.path = "make"});
  pty.ReadUntil("or n REASON: ");
  EXPECT_EQ(answer.wait_for(milliseconds(300)), std::future_status::timeout);
  pty.Type("n\n");
  auto decision = answer.get();
  ASSERT_TRUE(decision);
  EXPECT_EQ(decision->verdict, Verdict::Deny);
}

TEST(InteractiveReviewer, SilenceUntilTheDeadlineFailsAndTheGateDenies) {
  Pty pty;
  auto reviewer = Interactive(pty);
  ASSERT_TRUE(reviewer);
  TempDir dir;
  auto base = NewLocalSandbox({.root = dir.path()});
  ASSERT_TRUE(base);
  auto gated = NewGatedSandbox(std::move(*base),
                               {.reviewer = reviewer, .review_timeout = milliseconds(300)});
  ASSERT_TRUE(gated);
  auto result = (*gated)->Exec({}, {.path = "touch", .args = {"marker"}});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code(), Error::Code::Denied);
  EXPECT_EQ(result.error().message(),
            "denied by the interactive reviewer: the review did not answer within 300ms, so the "
            "operation was denied");
  EXPECT_NE(pty.ReadUntil("or n REASON: ").find("touch marker"), std::string::npos);
  EXPECT_FALSE(HostPathExists(dir.Join("marker")));
}

TEST(InteractiveReviewer, HangUpDenies) {
  Pty pty;
  auto reviewer = Interactive(pty);
  ASSERT_TRUE(reviewer);
  auto answer = AskAsync(reviewer, {.path = "make"});
  pty.ReadUntil("or n REASON: ");
  pty.CloseController();
  auto decision = answer.get();
  ASSERT_TRUE(decision) << decision.error().ToString();
  EXPECT_EQ(decision->verdict, Verdict::Deny);
  EXPECT_EQ(decision->reason, "the person reviewing closed the terminal without answering");
}

TEST(InteractiveReviewer, ShowsFileWritesWithTheirData) {
  Pty pty;
  auto reviewer = Interactive(pty);
  ASSERT_TRUE(reviewer);
  auto answer = std::async(std::launch::async, [&] {
    ReviewRequest request;
    request.operation = Operation::WriteFile;
    request.sandbox_id = "sb-1";
    request.backend = "local";
    request.path = "run.sh";
    request.data = "#!/bin/sh\n\x1b[31mrm -rf /\n";
    return reviewer->Review(Context::WithTimeout(std::chrono::seconds(5)), request);
  });
  std::string shown = pty.ReadUntil("or n REASON: ");
  EXPECT_NE(
      shown.find(
          "wants to write_file run.sh\r\n  data (24 bytes): $'#!/bin/sh\\n\\e[31mrm -rf /\\n'\r\n"),
      std::string::npos)
      << shown;
  pty.Type("n\n");
  ASSERT_TRUE(answer.get());
}

TEST(InteractiveReviewer, RefusesHalfGivenDescriptors) {
  auto reviewer = NewInteractiveReviewer({.in_fd = 0});
  ASSERT_FALSE(reviewer);
  EXPECT_EQ(reviewer.error().code(), Error::Code::InvalidArgument);
}

}  // namespace
}  // namespace sandbox::testing
