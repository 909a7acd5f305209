// Context: the deadline and cancellation every sandbox call takes.
#ifndef SANDBOX_CONTEXT_H_
#define SANDBOX_CONTEXT_H_

#include <chrono>
#include <optional>
#include <stop_token>

#include "sandbox/error.h"

namespace sandbox {

// Context bounds one call: an optional deadline and a stop token. It is the
// counterpart of Go's context.Context. A default Context never expires and
// is never cancelled. Contexts are cheap values; copies share the stop state.
// Thread-safe: a Context may be read from many threads while another thread
// requests a stop through the std::stop_source that made its token.
class Context {
 public:
  using Clock = std::chrono::steady_clock;

  Context() = default;

  // A Context that expires `timeout` from now.
  static Context WithTimeout(std::chrono::nanoseconds timeout) {
    return Context().Deadline(Clock::now() + timeout);
  }

  // A copy whose deadline is the earlier of this one's and `deadline`.
  Context Deadline(Clock::time_point deadline) const {
    Context copy = *this;
    if (!copy.deadline_ || deadline < *copy.deadline_) copy.deadline_ = deadline;
    return copy;
  }

  // A copy cancelled when `token` is stopped (replacing any earlier token).
  Context StopToken(std::stop_token token) const {
    Context copy = *this;
    copy.stop_token_ = std::move(token);
    return copy;
  }

  const std::optional<Clock::time_point>& deadline() const { return deadline_; }
  const std::stop_token& stop_token() const { return stop_token_; }

  bool cancelled() const { return stop_token_.stop_requested(); }
  bool expired() const { return deadline_ && Clock::now() >= *deadline_; }

  // Cancelled or DeadlineExceeded when the call must not proceed, else ok.
  Status Check() const {
    if (cancelled()) return Fail(Error::Code::Cancelled, "the call was cancelled");
    if (expired())
      return Fail(Error::Code::DeadlineExceeded, "the context's deadline passed");
    return {};
  }

 private:
  std::optional<Clock::time_point> deadline_;
  std::stop_token stop_token_;
};

}  // namespace sandbox

#endif  // SANDBOX_CONTEXT_H_
