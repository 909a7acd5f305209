// The interactive reviewer: asks a person on a terminal. What is shown is
// escaped (gated/text.h) so that a hostile command cannot rewrite the
// question with terminal escape sequences.
#include <fcntl.h>
#include <poll.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <string>
#include <utility>

#include "gated/text.h"
#include "os/syscalls.h"
#include "sandbox/gated.h"

namespace sandbox {
namespace {

// The longest answer line read; the rest of a longer line is discarded.
constexpr std::size_t kMaxAnswerBytes = 4096;
constexpr int kMaxAttempts = 3;

std::string Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r'))
    text.remove_suffix(1);
  return std::string(text);
}

class InteractiveReviewer final : public Reviewer {
 public:
  InteractiveReviewer(os::UniqueFd owned_tty, int in_fd, int out_fd, std::size_t max_shown)
      : owned_tty_(std::move(owned_tty)), in_fd_(in_fd), out_fd_(out_fd), max_shown_(max_shown) {}

  std::string Name() const override { return "interactive"; }

  Expected<Decision> Review(const Context& ctx, const ReviewRequest& request) override {
    std::lock_guard lock(mutex_);  // one question at a time
    // Keystrokes typed before the question was shown must not answer it.
    if (isatty(in_fd_)) tcflush(in_fd_, TCIFLUSH);
    SANDBOX_RETURN_IF_ERROR(Say(Question(request)));
    for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
      SANDBOX_RETURN_IF_ERROR(Say("allow? [y]es, [a]lways on this sandbox, [n]o, or n REASON: "));
      auto line = ReadLine(ctx);
      if (!line) {
        (void)Say("\n");
        return Fail(line.error());
      }
      if (!*line) {
        (void)Say("\n");
        return Decision::Deny("the person reviewing closed the terminal without answering");
      }
      std::string answer = Trim(**line);
      if (answer == "y" || answer == "yes")
        return Decision::Allow("allowed by the person reviewing");
      if (answer == "a" || answer == "always")
        return Decision::AllowRemember("allowed by the person reviewing, for this sandbox");
      if (answer == "n" || answer == "no") return Decision::Deny("denied by the person reviewing");
      for (std::string_view prefix : {"no ", "n "}) {
        if (answer.starts_with(prefix))
          return Decision::Deny("denied by the person reviewing: " +
                                Trim(std::string_view(answer).substr(prefix.size())));
      }
      SANDBOX_RETURN_IF_ERROR(Say("please answer y, a, n or n REASON\n"));
    }
    return Decision::Deny("the person reviewing gave no answer that could be understood");
  }

 private:
  std::string Question(const ReviewRequest& request) const {
    std::string text = "\nsandbox " + gated::QuoteForTerminal(request.sandbox_id, 64) + " (" +
                       gated::QuoteForTerminal(request.backend, 64) + ") wants to ";
    if (const Command* command = request.command) {
      text += request.in_session ? "run in a shell session:\n  " : "run:\n  ";
      text += gated::QuoteForTerminal(command->path, max_shown_);
      constexpr std::size_t kMaxArgsShown = 64;
      for (std::size_t i = 0; i < command->args.size() && i < kMaxArgsShown; ++i)
        text += " " + gated::QuoteForTerminal(command->args[i], max_shown_);
      if (command->args.size() > kMaxArgsShown)
        text += " [... " + std::to_string(command->args.size() - kMaxArgsShown) +
                " more arguments not shown]";
      text += "\n";
      if (!command->dir.empty())
        text += "  in directory " + gated::QuoteForTerminal(command->dir, max_shown_) + "\n";
      for (const std::string& entry : command->env)
        text += "  with environment " + gated::QuoteForTerminal(entry, max_shown_) + "\n";
      if (!command->stdin_data.empty())
        text += "  with standard input (" + std::to_string(command->stdin_data.size()) +
                " bytes): " + gated::QuoteForTerminal(command->stdin_data, max_shown_) + "\n";
      return text;
    }
    text += std::string(ToString(request.operation)) + " " +
            gated::QuoteForTerminal(request.path, max_shown_) + "\n";
    if (request.operation == Operation::WriteFile || request.operation == Operation::AppendFile)
      text += "  data (" + std::to_string(request.data.size()) +
              " bytes): " + gated::QuoteForTerminal(request.data, max_shown_) + "\n";
    return text;
  }

  Status Say(std::string_view text) {
    auto written = os::WriteAllNoSigpipe(out_fd_, text);
    if (!written)
      return Fail(Error::Code::Unavailable,
                  "cannot write to the terminal: " + written.error().message());
    return {};
  }

  // One line of input, without its newline; nullopt at end of input.
  // DeadlineExceeded or Cancelled when ctx ends first.
  Expected<std::optional<std::string>> ReadLine(const Context& ctx) {
    std::string line;
    bool overlong = false;
    while (true) {
      if (std::size_t newline = pending_.find('\n'); newline != std::string::npos) {
        line += pending_.substr(0, newline);
        pending_.erase(0, newline + 1);
        if (line.size() > kMaxAnswerBytes) line.resize(kMaxAnswerBytes);
        return std::optional<std::string>(overlong ? std::string("?") : line);
      }
      line += pending_;
      pending_.clear();
      if (line.size() > kMaxAnswerBytes) {
        overlong = true;
        line.clear();
      }
      SANDBOX_RETURN_IF_ERROR(ctx.Check());
      int wait_ms = 100;  // wakes to notice a stop request
      if (ctx.deadline()) {
        auto left =
            std::chrono::ceil<std::chrono::milliseconds>(*ctx.deadline() - Context::Clock::now());
        wait_ms = static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 100));
      }
      pollfd waiter{.fd = in_fd_, .events = POLLIN, .revents = 0};
      int ready = poll(&waiter, 1, wait_ms);
      if (ready < 0 && errno != EINTR) return Fail(os::ErrnoError(errno, "poll", "terminal"));
      if (ready <= 0) continue;
      char buffer[512];
      ssize_t got = read(in_fd_, buffer, sizeof buffer);
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      // EIO: the terminal hung up.
      if (got <= 0) return std::optional<std::string>();
      pending_.append(buffer, static_cast<std::size_t>(got));
    }
  }

  const os::UniqueFd owned_tty_;  // /dev/tty when opened here
  const int in_fd_;
  const int out_fd_;
  const std::size_t max_shown_;
  std::mutex mutex_;
  std::string pending_;  // read but not yet consumed; guarded by mutex_
};

}  // namespace

Expected<std::shared_ptr<Reviewer>> NewInteractiveReviewer(
    const InteractiveReviewerOptions& options) {
  if ((options.in_fd < 0) != (options.out_fd < 0))
    return Fail(Error::Code::InvalidArgument,
                "give both in_fd and out_fd to the interactive reviewer, or neither for /dev/tty");
  if (options.max_shown_bytes == 0)
    return Fail(Error::Code::InvalidArgument, "max_shown_bytes must be at least 1");
  if (options.in_fd >= 0)
    return std::shared_ptr<Reviewer>(std::make_shared<InteractiveReviewer>(
        os::UniqueFd(), options.in_fd, options.out_fd, options.max_shown_bytes));
  int tty = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY);
  if (tty < 0)
    return Fail(Error::Code::Unavailable,
                "cannot ask a person: no terminal (" +
                    os::ErrnoError(errno, "open", "/dev/tty").message() +
                    "); use a policy file (--review POLICY.json) instead");
  return std::shared_ptr<Reviewer>(
      std::make_shared<InteractiveReviewer>(os::UniqueFd(tty), tty, tty, options.max_shown_bytes));
}

}  // namespace sandbox
