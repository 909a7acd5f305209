// The launcher thread: one thread per process, living as long as the
// process, on which children that must die with the process are started.
//
// PR_SET_PDEATHSIG fires when the *thread* that created the child exits, not
// the process. A child started from a short-lived thread (a test's, a
// request's) would be killed when that thread ends, and one started with
// no parent-death signal would outlive a killed host. Starting every such
// child on this thread ties it to the process's lifetime exactly.
#ifndef SANDBOX_OS_LAUNCHER_H_
#define SANDBOX_OS_LAUNCHER_H_

#include <functional>

namespace sandbox::os {

// Runs `task` on this process's launcher thread and waits for it to return.
// The first call starts the thread (after fork(), the child gets a fresh
// one: threads do not survive fork). Thread-safe; tasks run one at a time.
void RunOnLauncherThread(const std::function<void()>& task);

}  // namespace sandbox::os

#endif  // SANDBOX_OS_LAUNCHER_H_
