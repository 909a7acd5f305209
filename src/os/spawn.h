// Spawning a child process fast (vfork semantics: no copy of the parent's
// address space) straight into a cgroup, and owning it until it is reaped.
#ifndef SANDBOX_OS_SPAWN_H_
#define SANDBOX_OS_SPAWN_H_

#include <signal.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "os/missing_names.h"
#include "os/unique_fd.h"
#include "sandbox/error.h"
#include "sandbox/sandbox.h"

namespace sandbox::os {

// What to run and how. Every fd is borrowed; the child gets copies.
struct SpawnSpec {
  std::string exec_path;          // passed to execve (relative to cwd_fd if relative)
  std::vector<std::string> argv;  // argv[0] first
  std::vector<std::string> env;   // the complete environment, "KEY=VALUE"
  int cwd_fd = -1;                // directory to fchdir into, or -1
  int stdin_fd = -1;              // become fds 0, 1, 2 of the child
  int stdout_fd = -1;
  int stderr_fd = -1;
  int extra_fd = -1;         // if >= 0, becomes fd 3 of the child
  int cgroup_procs_fd = -1;  // the child writes "0" here before exec
  bool new_session = true;   // setsid(): no controlling terminal
  // Start the command as PID 2 of a new PID namespace under a small init
  // (PID 1) that reaps every orphan and reports the command's wait status.
  // When the command exits, the init exits and the kernel kills everything
  // left in the namespace; SIGKILL to the returned Child (the init) kills
  // the whole tree at once. Needs CAP_SYS_ADMIN in the caller's user
  // namespace.
  bool new_pid_namespace = false;
  // If >= 0: a PID namespace fd (PidNamespaceReaper::ns) the child is born
  // in, as an ordinary member. The calling thread enters that namespace for
  // its children just for the spawn, then returns to its own. Needs
  // CAP_SYS_ADMIN in the namespace's user namespace.
  int pid_namespace_fd = -1;
  // Drop every capability (and, with CAP_SETPCAP, the bounding set, and lock
  // the securebits) right before exec: for an agent that is root of a user
  // namespace starting commands that must be nothing there.
  bool drop_capabilities = false;
  // If non-zero, the child gets this signal when the thread that spawned it
  // exits (PR_SET_PDEATHSIG): spawn from os::RunOnLauncherThread to tie the
  // child to the whole process (a VMM that must die with its host).
  int parent_death_signal = 0;
};

// Where a PID-namespace init leaves the command's wait status: one shared
// anonymous page, mapped before clone and unmapped by its owner.
struct InitReport;

// A spawned child: owns its pid (reaped exactly once) and a pidfd. If
// destroyed before Wait, it is SIGKILLed and reaped.
class Child {
 public:
  Child() = default;
  Child(pid_t pid, UniqueFd pidfd) : pid_(pid), pidfd_(std::move(pidfd)) {}
  // A PID-namespace init whose command's status arrives through `report`
  // (owned: unmapped on destruction).
  Child(pid_t pid, UniqueFd pidfd, InitReport* report)
      : pid_(pid), pidfd_(std::move(pidfd)), report_(report) {}
  // Where the kernel has no pidfds (gVisor's): `exit_event` is an eventfd a
  // watcher thread makes readable once the child has exited (see
  // ExitEventFor); waits and kills go by pid, which stays the child's until
  // it is reaped here.
  static Child WithExitEvent(pid_t pid, UniqueFd exit_event, InitReport* report = nullptr) {
    Child child(pid, std::move(exit_event), report);
    child.pid_only_ = true;
    return child;
  }
  Child(Child&& other) noexcept;
  Child& operator=(Child&& other) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child();

  pid_t pid() const { return pid_; }
  // Readable (POLLIN) once the child has exited: a pidfd, or the exit
  // event where the kernel has none (then not usable as a pidfd).
  int pidfd() const { return pidfd_.get(); }
  // False where pidfd() is an exit event rather than a pidfd.
  bool has_pidfd() const { return !pid_only_; }
  bool reaped() const { return status_.has_value(); }

  // Blocks until the child exits and reaps it; memoized.
  Expected<ExitStatus> Wait();
  // Reaps if the child has exited; nullopt while it runs.
  Expected<std::optional<ExitStatus>> TryWait();
  // SIGKILLs the child itself (for a PID-namespace init: the whole tree).
  Status Kill() const;

 private:
  ExitStatus Decode(const siginfo_t& info) const;
  void Unmap();

  pid_t pid_ = -1;
  UniqueFd pidfd_;
  InitReport* report_ = nullptr;
  std::optional<ExitStatus> status_;
  bool pid_only_ = false;
};

// An eventfd that turns readable once the child `pid` of this process has
// exited, for kernels without pidfds: a detached thread waits with
// waitid(WEXITED | WNOWAIT), leaving the zombie for Child::Wait to reap.
Expected<UniqueFd> ExitEventFor(pid_t pid);

// The errno with which execve (or a step before it) failed in the child.
struct ExecFailure {
  int err;
  const char* step;  // "execve", "chdir", "dup2", "cgroup"
};

// Spawns per `spec`. Returns the Child, or an Error whose code is NotFound
// (ENOENT), PermissionDenied (EACCES) or InvalidArgument (ENOEXEC) when the
// program could not be executed, with `failure` filled in.
Expected<Child> Spawn(const SpawnSpec& spec, ExecFailure* failure = nullptr);

// A new PID namespace whose init only reaps: orphans of the processes later
// born there (SpawnSpec::pid_namespace_fd = ns) are reaped, and killing the
// init kills everything in the namespace (as destroying `init` does). The
// init dies with the thread that started it (PR_SET_PDEATHSIG).
struct PidNamespaceReaper {
  Child init;
  UniqueFd ns;  // the namespace (setns(CLONE_NEWPID) needs no ptrace access to it)
};

// Starts a PidNamespaceReaper. Needs CAP_SYS_ADMIN in the caller's user
// namespace and /proc mounted.
Expected<PidNamespaceReaper> StartPidNamespaceReaper();

// Searches `name` (no '/') in the colon-separated `path_list` for an
// executable regular file, relative entries resolved from `cwd_fd`. Returns
// the path to exec, or nullopt. With `missing`, a directory on a device it
// covers is skipped while it remembers `name` missing there, and a new miss
// there is remembered.
std::optional<std::string> FindExecutable(const std::string& name, const std::string& path_list,
                                          int cwd_fd, MissingNames* missing = nullptr);

// For a program that owns its whole process, such as the agent: resets
// every signal disposition to SIG_DFL and records the calling thread's
// capability bounding set, so that from then on Spawn's children skip
// resetting each of the 64 dispositions and drop from the bounding set only
// the capabilities still in it (instead of some 100 syscalls per command,
// which cost milliseconds under gVisor's ptrace platform). What a command
// starts with is unchanged. Call once, first in main, before any thread
// exists; afterwards the program must never install a signal handler or
// ignore a signal (a handler could run in a vfork child sharing its memory,
// an ignored signal would stay ignored in the commands). Bounding sets only
// ever shrink, so the recorded one covers every later thread's.
void ClaimProcessForSpawn();

// Converts a wait status to the Result convention: 128+N for signal N.
ExitStatus DecodeWaitStatus(int code, int status);

}  // namespace sandbox::os

#endif  // SANDBOX_OS_SPAWN_H_
