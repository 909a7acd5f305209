// Starting a process as PID 1 of a fresh set of Linux namespaces (user, mount,
// pid, net, ipc, uts, cgroup) inside a read-only root made of bind mounts:
// the OS half of the namespace backend's boundary.
//
// Everything the child does between clone and exec is described up front by
// a ChildPlan, built (and all its memory allocated) by the caller before the
// clone: the child only reads it and makes raw syscalls, so it is
// async-signal-safe even when the host process has other threads.
#ifndef SANDBOX_OS_NAMESPACES_H_
#define SANDBOX_OS_NAMESPACES_H_

#include <linux/filter.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "os/unique_fd.h"
#include "sandbox/error.h"

namespace sandbox::os {

// One step of building the new root. Paths in `target` are absolute paths
// inside the new root ("/usr"); `source` is a host path (resolved before any
// mount is made, so sources under the host's /tmp work).
struct MountStep {
  enum class Kind {
    kBindReadOnly,     // recursive bind of `source`, read-only, nosuid, nodev
    kBindWritable,     // recursive bind of `source` (or of `fd`), nosuid, nodev
    kBindDevice,       // bind of one device node `source` (keeps dev; nosuid, noexec)
    kDir,              // mkdir `target` (mode 0755)
    kSymlink,          // symlink `target` -> `source`
    kTmpfs,            // tmpfs at `target` with mount `data` ("mode=1777")
    kProc,             // a fresh proc at `target` (nosuid, nodev, noexec)
    kReadOnlyOver,     // bind `target` read-only over itself (skipped if missing)
    kRemountReadOnly,  // make the mount at `target` read-only (not recursive)
  };
  Kind kind;
  std::string source;
  std::string target;
  std::string data;
  // For kBindWritable: a detached mount (open_tree) prepared by the caller,
  // e.g. an idmapped workspace; used instead of `source` when >= 0.
  int fd = -1;
  // Filled in by the child: the detached tree cloned from `source`.
  int child_fd = -1;
};

// A Landlock rule: `access` (LANDLOCK_ACCESS_FS_* bits) beneath `path`,
// a path inside the new root.
struct LandlockPathRule {
  std::string path;
  std::uint64_t access;
};

struct RlimitSetting {
  int resource;
  rlim_t soft;
  rlim_t hard;
};

// Everything the boundary's first process does between clone and exec, in
// order. Owns no fds: every fd here is borrowed from the caller and must stay
// open until ReleaseAndAwaitExec returns.
struct ChildPlan {
  // CLONE_NEW* flags for clone3 (CLONE_NEWCGROUP is applied later, by
  // unshare in the child once the caller has moved it into its cgroups).
  std::uint64_t clone_flags = 0;
  bool new_cgroup_namespace = true;

  // Identity. When `child_writes_own_maps`, the child writes `uid_map`,
  // `gid_map` (and "deny" to setgroups) for itself: the only mapping an
  // unprivileged creator may make (one id, its own). Otherwise the caller
  // writes the maps (WriteIdMaps) while the child waits.
  bool child_writes_own_maps = false;
  std::string uid_map;
  std::string gid_map;
  bool clear_supplementary_groups =
      false;  // setgroups(0, NULL) (needs maps written by a privileged parent)

  std::vector<MountStep> mounts;
  std::string staging_dir = "/tmp";  // where the new root is assembled before pivot_root
  std::string workdir = "/";         // chdir here after pivot_root
  std::string hostname;              // "" keeps the (new, copied) UTS name
  bool bring_up_loopback = false;    // in a new network namespace

  std::vector<RlimitSetting> rlimits;
  std::uint64_t keep_capabilities = 0;  // 1 << CAP_*: the bounding set after exec
  int last_capability = 40;             // /proc/sys/kernel/cap_last_cap

  // Landlock (skipped when handled_fs is 0): the handled rights, the rules,
  // and the ABI >= 6 scopes (LANDLOCK_SCOPE_*).
  std::uint64_t landlock_handled_fs = 0;
  std::uint64_t landlock_scoped = 0;
  std::vector<LandlockPathRule> landlock_rules;

  // seccomp-bpf program installed (with no_new_privs) right before exec; empty
  // for none.
  std::vector<sock_filter> seccomp_filter;

  // The program: an fd opened on the host, executed with execveat(AT_EMPTY_PATH)
  // so it need not exist in the new root.
  int exec_fd = -1;
  std::vector<std::string> argv;
  std::vector<std::string> env;
  int stdio_fd = -1;   // becomes fds 0 and 1
  int stderr_fd = -1;  // becomes fd 2; -1 for /dev/null inside
  int extra_fd = -1;   // becomes fd 3, inherited by the program; -1 for none
  // Landlock rights beneath `extra_fd` (a directory), where the root's rules
  // cannot name it: a delegated cgroup's directory outside the new root.
  std::uint64_t extra_fd_landlock_access = 0;
};

// What the child reports through the error pipe when a step fails.
struct ChildFailure {
  int step;    // index into ChildStepName
  int err;     // errno
  int detail;  // for mount steps: the index of the MountStep; else -1
};

// A human name for a ChildFailure step ("pivot_root", "mount proc", ...).
const char* ChildStepName(int step);

// A started boundary's first process (PID 1 inside), before it is released.
struct StartedChild {
  pid_t pid = -1;  // in the caller's pid namespace
  UniqueFd pidfd;
  UniqueFd release;   // write end: one byte releases the child; closing it kills it
  UniqueFd failures;  // read end: EOF once the child execs; a ChildFailure if a step failed
};

// clone3()s the child into the namespaces of `plan.clone_flags` with
// PR_SET_PDEATHSIG(SIGKILL). The child waits for a byte on `release` before
// anything else (so the caller can write id maps and cgroup membership);
// then runs the plan on its own copy of this process's memory (clone without
// CLONE_VM), so `plan` may change or go away once this returns.
Expected<StartedChild> CloneIntoNamespaces(ChildPlan& plan);

// Releases the child and waits until it has executed the program (returns
// ok) or reported a failed step (returns the error, naming the step). The
// child is left running on success; the caller owns `child.pidfd`.
Status ReleaseAndAwaitExec(StartedChild& child, const ChildPlan& plan);

// Writes /proc/<pid>/{setgroups,uid_map,gid_map}. `deny_setgroups` writes
// "deny" to setgroups first (required for an unprivileged writer).
Status WriteIdMaps(pid_t pid, const std::string& uid_map, const std::string& gid_map,
                   bool deny_setgroups);

// A user namespace fd whose id maps are `uid_map` / `gid_map`, for an
// idmapped mount (MOUNT_ATTR_IDMAP). Needs CAP_SETUID/CAP_SETGID on the host
// for maps other than one's own id.
Expected<UniqueFd> MakeUserNamespaceFd(const std::string& uid_map, const std::string& gid_map);

// The steps that fill the new root before the fixed mounts (/workspace, /tmp,
// /proc, /dev) are added. With `rootfs` empty: the host's system directories
// (/usr /bin /sbin /lib /lib32 /lib64 /libx32 /etc), bound read-only, or
// recreated as symlinks where they are symlinks on the host (merged /usr).
// Otherwise every top-level entry of the directory `rootfs` the same way,
// except proc, dev, sys, tmp and workspace, which the boundary provides.
Expected<std::vector<MountStep>> RootMountSteps(const std::string& rootfs);

// open_tree(OPEN_TREE_CLONE|AT_RECURSIVE) of `path` with an id mapping from
// `userns_fd` applied (mount_setattr MOUNT_ATTR_IDMAP), nosuid and nodev:
// a detached mount to attach elsewhere. Linux >= 5.12 and a filesystem that
// supports idmapped mounts.
Expected<UniqueFd> MakeIdmappedTree(const std::string& path, int userns_fd);

// True when unprivileged processes may create user namespaces here (or the
// caller is root): the kernel knobs and a real clone attempt.
Status ProbeUserNamespaces();

// True when the kernel has mount_setattr (Linux >= 5.12).
bool HasMountSetattr();

}  // namespace sandbox::os

#endif  // SANDBOX_OS_NAMESPACES_H_
