#include "os/init_reaper.h"

#include <errno.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace sandbox::os {
namespace {

volatile sig_atomic_t g_worker = 0;

// Forwards only what comes from outside the namespace (si_pid 0: the sender
// has no pid here). Having a handler makes the kernel deliver these signals
// to PID 1 from inside too, and nothing inside may stop the agent.
void ForwardSignal(int signal, siginfo_t* info, void*) {
  if (info != nullptr && info->si_pid != 0) return;
  if (g_worker > 0) ::kill(static_cast<pid_t>(g_worker), signal);
}

}  // namespace

std::optional<int> SplitOffInitIfPid1() {
  if (::getpid() != 1) return std::nullopt;
  pid_t worker = ::fork();
  if (worker < 0) return std::nullopt;  // cannot split: serve as PID 1 (orphans stay zombies)
  if (worker == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != 1) ::_exit(125);  // the init died before prctl took effect
    return std::nullopt;
  }
  g_worker = worker;
  // The init only reaps: nothing inside may read its memory, fds or
  // environment through /proc (non-dumpable needs CAP_SYS_PTRACE to inspect).
  ::prctl(PR_SET_DUMPABLE, 0);
  struct sigaction action {};
  action.sa_sigaction = ForwardSignal;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  for (int signal : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) ::sigaction(signal, &action, nullptr);
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      return 125;  // ECHILD without having seen the worker: cannot happen
    }
    if (pid != worker) continue;  // an orphan, now reaped
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  }
}

}  // namespace sandbox::os
