// ProcessTree: everything one command starts, contained so that it can be
// killed at once — setsid'd and double-forked descendants included — with no
// scan of /proc. Two kernel mechanisms back it:
//   - a cgroup v2 leased from a CgroupPool (killed with cgroup.kill), used
//     where a writable cgroup v2 exists (the host, as root);
//   - a new PID namespace per command under a small reaping init (killed by
//     SIGKILL to the init), used where no cgroup is writable but this process
//     may create PID namespaces (inside a sandbox's user namespace: the agent).
#ifndef SANDBOX_OS_TREE_H_
#define SANDBOX_OS_TREE_H_

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "os/cgroup.h"
#include "os/spawn.h"
#include "os/unique_fd.h"
#include "sandbox/error.h"

namespace sandbox::os {

enum class Containment { kCgroup, kPidNamespace };

// How this process contains command trees: a cgroup pool when `containment`
// is kCgroup, nothing more for kPidNamespace.
struct TreeSource {
  Containment containment = Containment::kCgroup;
  std::shared_ptr<CgroupPool> cgroups;
  // kCgroup only, optional: every tree is born in this one PID namespace
  // below this process (StartPidNamespaceReaper), so that commands can
  // neither see nor signal this process. Killing it kills them all.
  std::shared_ptr<PidNamespaceReaper> pid_namespace;
};

// Picks the containment that works here: a cgroup v2 pool when one is
// writable, otherwise a PID namespace when this process may create one.
// `prefer` forces one of them (failing with its reason when it cannot work).
Expected<TreeSource> ChooseTreeSource(std::optional<Containment> prefer = std::nullopt);

// True when this process may create a PID namespace (probed once).
Expected<void> CanCreatePidNamespace();

class ProcessTree {
 public:
  static Expected<std::unique_ptr<ProcessTree>> Create(const TreeSource& source);
  ProcessTree(const ProcessTree&) = delete;
  ProcessTree& operator=(const ProcessTree&) = delete;
  ~ProcessTree() = default;

  // Spawns the root process of the tree (once).
  Expected<Child> Spawn(SpawnSpec spec, ExecFailure* failure = nullptr);

  // SIGKILLs everything in the tree at once. Idempotent, thread-safe, and a
  // no-op before Spawn.
  Status Kill() const;

  // Kills and waits up to `timeout_ms` for the tree to be gone.
  bool KillAndWait(int timeout_ms) const;

 private:
  explicit ProcessTree(Containment containment) : containment_(containment) {}

  Containment containment_;
  std::shared_ptr<PidNamespaceReaper> pid_namespace_;  // kCgroup: where children are born, or null
  std::optional<CgroupLease> lease_;                   // kCgroup
  mutable std::mutex mu_;
  UniqueFd init_pidfd_;  // kPidNamespace: a dup of the init's pidfd; guarded by mu_
  // Where the kernel has no pidfds (gVisor's), init_pidfd_ is the init's
  // exit event and the init is killed by this pid; guarded by mu_.
  pid_t init_pid_ = -1;
  bool init_pid_only_ = false;
};

}  // namespace sandbox::os

#endif  // SANDBOX_OS_TREE_H_
