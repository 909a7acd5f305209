#include "signal_watcher.h"

#include <pthread.h>
#include <unistd.h>

namespace sandbox::cli {

sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}

SignalWatcher::~SignalWatcher() {
  shutting_down_.store(true);
  // A thread-directed signal wakes the sigwait; the flag makes it return.
  pthread_kill(thread_.native_handle(), SIGTERM);
  thread_.join();
}

void SignalWatcher::Loop() {
  const sigset_t set = TerminationSignals();
  while (true) {
    int signal_number = 0;
    if (sigwait(&set, &signal_number) != 0) continue;
    if (shutting_down_.load()) return;
    int expected = 0;
    if (!received_.compare_exchange_strong(expected, signal_number)) _exit(128 + expected);
    if (!cancellable_.load()) _exit(128 + signal_number);
    stop_.request_stop();
    if (on_cancel_) on_cancel_();
  }
}

}  // namespace sandbox::cli
