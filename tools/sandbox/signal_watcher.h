// The CLI's handling of SIGINT, SIGTERM and SIGHUP: blocked in every thread
// and received by one watcher thread with sigwait, so a signal turns into a
// cancellation the backends act on (killing the running command's tree).
#ifndef SANDBOX_TOOLS_SANDBOX_SIGNAL_WATCHER_H_
#define SANDBOX_TOOLS_SANDBOX_SIGNAL_WATCHER_H_

#include <signal.h>

#include <atomic>
#include <functional>
#include <stop_token>
#include <thread>
#include <utility>

namespace sandbox::cli {

// SIGINT, SIGTERM and SIGHUP.
sigset_t TerminationSignals();

// Waits for SIGINT/SIGTERM/SIGHUP on a dedicated thread (the signals are
// blocked in every thread, see BlockTerminationSignals). Until
// CancelFromNowOn() a signal ends the CLI at once (nothing has been started
// yet); after that, the first signal requests a stop on token() and calls
// `on_cancel` (from the watcher thread), so a running command's whole tree is
// killed by the backend, and a second signal ends the CLI at once.
// Destruction stops and joins the thread.
class SignalWatcher {
 public:
  explicit SignalWatcher(std::function<void()> on_cancel = {})
      : on_cancel_(std::move(on_cancel)), thread_([this] { Loop(); }) {}
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;
  ~SignalWatcher();

  std::stop_token token() const { return stop_.get_token(); }

  // From now on a signal cancels through the stop token instead of exiting.
  void CancelFromNowOn() { cancellable_.store(true); }

  // The first signal received, or 0.
  int received() const { return received_.load(); }

 private:
  void Loop();

  std::function<void()> on_cancel_;
  std::stop_source stop_;
  std::atomic<int> received_{0};
  std::atomic<bool> cancellable_{false};
  std::atomic<bool> shutting_down_{false};
  std::thread thread_;  // last: starts after the members it uses exist
};

}  // namespace sandbox::cli

#endif  // SANDBOX_TOOLS_SANDBOX_SIGNAL_WATCHER_H_
