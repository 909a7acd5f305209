// What a process does when it finds itself PID 1 of a PID namespace: become
// a minimal init that reaps every orphan, while the real work continues in a
// child whose own children are never waited for by anyone else.
#ifndef SANDBOX_OS_INIT_REAPER_H_
#define SANDBOX_OS_INIT_REAPER_H_

#include <optional>

namespace sandbox::os {

// If the calling process is PID 1, forks. The parent stays PID 1 and runs a
// reaping loop (waitpid(-1) on every child: the orphans the kernel hands to
// PID 1, and the worker child itself), forwards SIGTERM, SIGINT, SIGHUP and
// SIGQUIT to the worker, and returns the worker's exit code (128+N when
// killed by signal N) once it is gone: the caller exits with it. In the
// worker (and when not PID 1) returns nullopt and the caller goes on. The
// worker gets SIGKILL if the init dies. The init makes itself non-dumpable.
// Call before any thread is created.
//
// Why a separate init: the worker (the agent) waits for its own commands
// through pidfds. Were the worker PID 1 itself, reaping orphans with
// waitpid(-1) would steal those exit statuses; with the init split off the
// orphans go to the init and the worker's children stay the worker's.
std::optional<int> SplitOffInitIfPid1();

}  // namespace sandbox::os

#endif  // SANDBOX_OS_INIT_REAPER_H_
