#include "os/tree.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include "os/syscalls.h"

namespace sandbox::os {

Expected<void> CanCreatePidNamespace() {
  // Probed with a real clone: the only test the kernel gives an honest answer
  // to (capabilities, user namespace ownership, seccomp, sysctls).
  static const int probe_errno = [] {
    long pid = syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, nullptr, nullptr, nullptr, nullptr);
    if (pid == 0) _exit(0);
    if (pid < 0) return errno;
    int status;
    while (waitpid(static_cast<pid_t>(pid), &status, 0) < 0 && errno == EINTR) {
    }
    return 0;
  }();
  if (probe_errno != 0)
    return Fail(Error::Code::Unsupported,
                "cannot create a PID namespace here (" +
                    ErrnoError(probe_errno, "clone(CLONE_NEWPID)").message() + ")");
  return {};
}

Expected<TreeSource> ChooseTreeSource(std::optional<Containment> prefer) {
  if (!prefer || *prefer == Containment::kCgroup) {
    auto pool = CgroupPool::Shared();
    if (pool) return TreeSource{Containment::kCgroup, std::move(*pool)};
    if (prefer) return Fail(pool.error());
    auto pidns = CanCreatePidNamespace();
    if (pidns) return TreeSource{Containment::kPidNamespace, nullptr};
    return Fail(Error::Code::Unsupported,
                "no way to contain a command's process tree here: " + pool.error().message() +
                    "; and " + pidns.error().message());
  }
  SANDBOX_RETURN_IF_ERROR(CanCreatePidNamespace());
  return TreeSource{Containment::kPidNamespace, nullptr};
}

Expected<std::unique_ptr<ProcessTree>> ProcessTree::Create(const TreeSource& source) {
  std::unique_ptr<ProcessTree> tree(new ProcessTree(source.containment));
  if (source.containment == Containment::kCgroup) {
    if (!source.cgroups) return Fail(Error::Code::Internal, "cgroup containment without a pool");
    auto lease = source.cgroups->Acquire();
    if (!lease) return Fail(lease.error());
    tree->lease_.emplace(std::move(*lease));
    tree->pid_namespace_ = source.pid_namespace;
  }
  return tree;
}

Expected<Child> ProcessTree::Spawn(SpawnSpec spec, ExecFailure* failure) {
  if (containment_ == Containment::kCgroup) {
    spec.cgroup_procs_fd = lease_->procs_fd();
    if (pid_namespace_) spec.pid_namespace_fd = pid_namespace_->ns.get();
    return os::Spawn(spec, failure);
  }
  spec.new_pid_namespace = true;
  auto child = os::Spawn(spec, failure);
  if (!child) return child;
  int dup = fcntl(child->pidfd(), F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return Fail(ErrnoError(errno, "dup pidfd"));
  std::lock_guard lock(mu_);
  init_pidfd_.reset(dup);
  init_pid_ = child->pid();
  init_pid_only_ = !child->has_pidfd();
  return child;
}

Status ProcessTree::Kill() const {
  if (containment_ == Containment::kCgroup) return lease_->Kill();
  std::lock_guard lock(mu_);
  if (!init_pidfd_) return {};
  if (init_pid_only_) {
    // Without pidfds: only while the exit event says the init runs, so the
    // pid is still its own (an exited init is not signalled). What remains,
    // a reap by another thread between this check and the kill, could
    // only hit a process of the same sandbox.
    pollfd exited{init_pidfd_.get(), POLLIN, 0};
    if (::poll(&exited, 1, 0) == 0 && ::kill(init_pid_, SIGKILL) != 0 && errno != ESRCH)
      return Fail(ErrnoError(errno, "kill"));
    return {};
  }
  return PidfdSendSignal(init_pidfd_.get(), SIGKILL);
}

bool ProcessTree::KillAndWait(int timeout_ms) const {
  if (containment_ == Containment::kCgroup) return lease_->KillAndWait(timeout_ms);
  (void)Kill();
  std::lock_guard lock(mu_);
  if (!init_pidfd_) return true;
  // The init's pidfd turns readable only after the kernel has killed and
  // reaped everything else in its namespace.
  pollfd fd{init_pidfd_.get(), POLLIN, 0};
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    until - std::chrono::steady_clock::now())
                    .count();
    int ready = ::poll(&fd, 1, static_cast<int>(left < 0 ? 0 : left));
    if (ready > 0) return true;
    if (ready == 0) return false;
    if (errno != EINTR) return false;
  }
}

}  // namespace sandbox::os
