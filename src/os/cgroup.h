// Process-tree containment through cgroup v2: every tree the local backend
// starts lives in a cgroup of its own, so it can be killed whole
// (cgroup.kill) however its processes fork, double-fork or setsid.
#ifndef SANDBOX_OS_CGROUP_H_
#define SANDBOX_OS_CGROUP_H_

#include <sys/types.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "os/unique_fd.h"
#include "sandbox/error.h"

namespace sandbox::os {

class CgroupPool;

// One empty cgroup leased from a CgroupPool. Move-only; the destructor kills
// whatever is still inside and returns the cgroup to its pool.
class CgroupLease {
 public:
  CgroupLease() = default;
  CgroupLease(CgroupLease&&) noexcept = default;
  CgroupLease& operator=(CgroupLease&& other) noexcept;
  CgroupLease(const CgroupLease&) = delete;
  CgroupLease& operator=(const CgroupLease&) = delete;
  ~CgroupLease();

  bool valid() const { return dir_.valid(); }

  // An O_WRONLY fd of cgroup.procs: a child writes "0" to it to enter the
  // cgroup before it execs.
  int procs_fd() const { return procs_.get(); }

  // SIGKILLs every process in the cgroup at once (cgroup.kill). Safe to call
  // from any thread, repeatedly.
  Status Kill() const;

  // True while any process is in the cgroup (cgroup.events "populated 1").
  bool Populated() const;

  // Kills and waits up to `timeout_ms` for the cgroup to empty. True if empty.
  bool KillAndWait(int timeout_ms) const;

 private:
  friend class CgroupPool;
  CgroupLease(std::shared_ptr<CgroupPool> pool, std::string name, UniqueFd dir, UniqueFd procs,
              UniqueFd kill, UniqueFd events)
      : pool_(std::move(pool)),
        name_(std::move(name)),
        dir_(std::move(dir)),
        procs_(std::move(procs)),
        kill_(std::move(kill)),
        events_(std::move(events)) {}
  void Release();

  std::shared_ptr<CgroupPool> pool_;
  std::string name_;
  UniqueFd dir_;
  UniqueFd procs_;
  UniqueFd kill_;
  UniqueFd events_;
};

class DelegatedCgroup;

// A pool of cgroups under this process's own cgroup v2 directory
// (".../sandbox.<pid>/t<N>"). Reuses empty cgroups so a spawn costs no mkdir.
// Thread-safe.
class CgroupPool : public std::enable_shared_from_this<CgroupPool> {
 public:
  // The process-wide pool, or Unsupported with the reason when no writable
  // cgroup v2 directory with cgroup.kill (Linux >= 5.14) exists here.
  static Expected<std::shared_ptr<CgroupPool>> Shared();

  // A pool in the cgroup v2 directory `dir` (taken): for a process that
  // cannot see the hierarchy by path, such as a boundary's agent given a
  // DelegatedCgroup. Unsupported unless `dir` is a cgroup v2 directory with
  // cgroup.kill.
  static Expected<std::shared_ptr<CgroupPool>> InDirectory(UniqueFd dir);

  // Leases an empty cgroup.
  Expected<CgroupLease> Acquire();

  // A new cgroup ("d<N>") whose directory and cgroup.procs, cgroup.threads
  // and cgroup.subtree_control belong to `uid`/`gid`, so that a process of
  // those ids may make child cgroups in it and move its own children there
  // (cgroup v2 delegation).
  Expected<DelegatedCgroup> Delegate(uid_t uid, gid_t gid);

  // The host path of the pool's directory.
  const std::string& path() const { return path_; }

  ~CgroupPool();
  CgroupPool(std::string path, UniqueFd dir) : path_(std::move(path)), dir_(std::move(dir)) {}

 private:
  friend class CgroupLease;
  friend class DelegatedCgroup;
  struct Idle {
    std::string name;
    UniqueFd dir, procs, kill, events;
  };
  void Return(Idle idle);

  std::string path_;  // "" for a pool InDirectory: nothing to remove at the end
  UniqueFd dir_;
  std::mutex mu_;
  std::vector<Idle> idle_;
  unsigned long next_id_ = 0;
  unsigned long next_delegated_id_ = 0;
};

// A cgroup handed to a boundary (CgroupPool::Delegate): the boundary's agent
// gets an fd of it and contains every command's tree in a child cgroup it
// makes there, which costs a command far less than a PID namespace of its
// own. The agent cannot reach anything above it: it holds only this fd, and
// no cgroup file system is mounted inside. Move-only; destroying it kills
// everything inside and removes it with its children.
class DelegatedCgroup {
 public:
  DelegatedCgroup() = default;
  DelegatedCgroup(DelegatedCgroup&&) noexcept = default;
  DelegatedCgroup& operator=(DelegatedCgroup&& other) noexcept;
  DelegatedCgroup(const DelegatedCgroup&) = delete;
  DelegatedCgroup& operator=(const DelegatedCgroup&) = delete;
  ~DelegatedCgroup() { (void)Remove(); }

  bool valid() const { return dir_.valid(); }
  // The directory (O_RDONLY | O_DIRECTORY), to hand to the boundary.
  int dir_fd() const { return dir_.get(); }
  const std::string& path() const { return path_; }

  // Moves process `pid` into the cgroup.
  Status AddProcess(pid_t pid) const;

  // Kills everything inside, then removes the cgroup and every cgroup made
  // below it. Idempotent.
  Status Remove();

 private:
  friend class CgroupPool;
  DelegatedCgroup(std::shared_ptr<CgroupPool> pool, std::string name, std::string path,
                  UniqueFd dir)
      : pool_(std::move(pool)),
        name_(std::move(name)),
        path_(std::move(path)),
        dir_(std::move(dir)) {}

  std::shared_ptr<CgroupPool> pool_;  // keeps the parent directory open
  std::string name_;
  std::string path_;
  UniqueFd dir_;
};

// Removes the pool directories left by processes that no longer exist
// (killing anything still inside). Called once when the pool is created.
void RemoveStalePools(int parent_fd);

}  // namespace sandbox::os

#endif  // SANDBOX_OS_CGROUP_H_
