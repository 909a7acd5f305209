// Resource limits of a namespace boundary: memory, pids and cpu through
// cgroups (v2 where the controller is enabled for our subtree, v1 otherwise,
// each nested under the cgroup this process already belongs to), and a probe
// that says which limits work on this machine and why not.
#ifndef SANDBOX_OS_LIMITS_H_
#define SANDBOX_OS_LIMITS_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sandbox/error.h"

namespace sandbox::os {

// The limits of one boundary; an unset field is not limited.
struct ResourceLimits {
  std::optional<std::uint64_t> memory_bytes;  // RAM, swap excluded (swap is not allowed)
  std::optional<std::uint64_t> pids;          // live tasks (processes and threads)
  std::optional<double> cpus;                 // CPU time, in cores (1.5 = 150% of one core)

  bool any() const { return memory_bytes || pids || cpus; }
};

// Whether one controller can enforce a limit here.
struct ControllerSupport {
  std::string controller;  // "memory", "pids" or "cpu"
  bool usable = false;
  int version = 0;     // 1 or 2 when usable
  std::string parent;  // the cgroup directory boundaries' groups are made in
  std::string reason;  // when not usable: why, and what would fix it
};

// Probes memory, pids and cpu (creating and removing a scratch cgroup each).
// Never fails; for `sandbox doctor`.
std::vector<ControllerSupport> ProbeLimitSupport();

// The cgroups holding one boundary, one per hierarchy that enforces one of
// its limits. Move-only; the destructor removes them (killing anything left
// inside). Not thread-safe.
class LimitGroup {
 public:
  // Creates the cgroups for `limits` and writes the limits. A limit that
  // cannot be enforced here is an Unsupported error naming the reason; no
  // limit at all yields an empty group. First call per process also removes
  // the groups left behind by dead processes (RemoveStaleLimitGroups).
  static Expected<LimitGroup> Create(const ResourceLimits& limits);

  LimitGroup() = default;
  LimitGroup(LimitGroup&& other) noexcept = default;
  LimitGroup& operator=(LimitGroup&& other) noexcept;
  LimitGroup(const LimitGroup&) = delete;
  LimitGroup& operator=(const LimitGroup&) = delete;
  ~LimitGroup();

  bool empty() const { return dirs_.empty(); }
  // True when one of the groups is in the cgroup v2 hierarchy.
  bool has_v2() const {
    for (const Dir& dir : dirs_)
      if (dir.version == 2) return true;
    return false;
  }

  // Moves process `pid` (and so, later, its descendants) into every group.
  Status AddProcess(pid_t pid) const;

  // How many processes the kernel's OOM killer has killed in this group
  // because of the memory limit (v2 memory.events oom_kill, v1
  // memory.oom_control oom_kill). Unsupported without a memory limit.
  Expected<std::uint64_t> OomKills() const;

  // Kills whatever is left inside and removes the cgroups. Idempotent.
  Status Remove();

  // The host paths of the groups, for tests and diagnostics.
  std::vector<std::string> paths() const;

 private:
  struct Dir {
    std::string path;
    int version;
    bool memory = false;
  };
  std::vector<Dir> dirs_;
};

// Removes the boundary cgroups ("sandbox-ns.<pid>.<n>") whose creating
// process no longer exists, killing anything still in them; for `sandbox gc`
// and called once by the first LimitGroup::Create. Returns how many were
// removed.
int RemoveStaleLimitGroups();

}  // namespace sandbox::os

#endif  // SANDBOX_OS_LIMITS_H_
