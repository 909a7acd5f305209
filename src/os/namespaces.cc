#include "os/namespaces.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "os/landlock.h"
#include "os/syscalls.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

namespace sandbox::os {
namespace {

// The steps of the child, in order; indices into kStepNames.
enum Step : int {
  kStepRelease,
  kStepIdMaps,
  kStepSetGroups,
  kStepSetIds,
  kStepDeathSignal,
  kStepParentGone,
  kStepCgroupNamespace,
  kStepMakePrivate,
  kStepOpenTree,
  kStepMountSetattr,
  kStepStagingRoot,
  kStepMkdir,
  kStepSymlink,
  kStepMoveMount,
  kStepTmpfs,
  kStepProc,
  kStepReadOnlyOver,
  kStepRemountReadOnly,
  kStepPivotRoot,
  kStepDetachOldRoot,
  kStepChdir,
  kStepHostname,
  kStepLoopback,
  kStepRlimit,
  kStepCapabilities,
  kStepNoNewPrivs,
  kStepLandlock,
  kStepStdio,
  kStepCloseFds,
  kStepSeccomp,
  kStepExec,
  kStepCount,
};

constexpr const char* kStepNames[kStepCount] = {
    "wait for release",
    "write id maps",
    "setgroups",
    "setresuid/setresgid",
    "prctl PR_SET_PDEATHSIG",
    "parent exited during setup",
    "unshare CLONE_NEWCGROUP",
    "make mounts private",
    "open_tree (bind source)",
    "mount_setattr (bind flags)",
    "mount staging tmpfs",
    "mkdir",
    "symlink",
    "move_mount",
    "mount tmpfs",
    "mount proc",
    "bind read-only over itself",
    "remount read-only",
    "pivot_root",
    "detach old root",
    "chdir",
    "sethostname",
    "bring up lo",
    "setrlimit",
    "drop capabilities from the bounding set",
    "prctl PR_SET_NO_NEW_PRIVS",
    "landlock",
    "set up stdin/stdout/stderr",
    "close inherited fds",
    "seccomp",
    "execveat",
};

struct CloneArgs {
  std::uint64_t flags;
  std::uint64_t pidfd;
  std::uint64_t child_tid;
  std::uint64_t parent_tid;
  std::uint64_t exit_signal;
  std::uint64_t stack;
  std::uint64_t stack_size;
  std::uint64_t tls;
  std::uint64_t set_tid;
  std::uint64_t set_tid_size;
  std::uint64_t cgroup;
};

// mount_setattr(2)'s argument, declared here so old headers do not matter.
struct MountAttr {
  std::uint64_t attr_set;
  std::uint64_t attr_clr;
  std::uint64_t propagation;
  std::uint64_t userns_fd;
};

constexpr unsigned kOpenTreeClone = 1;           // OPEN_TREE_CLONE
constexpr unsigned kAtRecursive = 0x8000;        // AT_RECURSIVE
constexpr unsigned kMoveMountFEmptyPath = 0x04;  // MOVE_MOUNT_F_EMPTY_PATH
constexpr std::uint64_t kAttrRdonly = 0x1;       // MOUNT_ATTR_RDONLY
constexpr std::uint64_t kAttrNosuid = 0x2;       // MOUNT_ATTR_NOSUID
constexpr std::uint64_t kAttrNodev = 0x4;        // MOUNT_ATTR_NODEV
constexpr std::uint64_t kAttrNoexec = 0x8;       // MOUNT_ATTR_NOEXEC
constexpr std::uint64_t kAttrIdmap = 0x100000;   // MOUNT_ATTR_IDMAP

int RawOpenTree(int dirfd, const char* path, unsigned flags) {
  return static_cast<int>(syscall(SYS_open_tree, dirfd, path, flags));
}
int RawMountSetattr(int dirfd, const char* path, unsigned flags, MountAttr* attr) {
  return static_cast<int>(syscall(SYS_mount_setattr, dirfd, path, flags, attr, sizeof(*attr)));
}
int RawMoveMount(int from_dirfd, const char* from, int to_dirfd, const char* to, unsigned flags) {
  return static_cast<int>(syscall(SYS_move_mount, from_dirfd, from, to_dirfd, to, flags));
}

// The async-signal-safe side. Every function below runs in the child between
// clone and exec: raw syscalls only, no allocation, no locks.

[[noreturn]] void Die(int failure_fd, int step, int err, int detail = -1) {
  ChildFailure failure{step, err, detail};
  // Best effort: the parent reads this or sees EOF.
  ssize_t ignored = write(failure_fd, &failure, sizeof(failure));
  (void)ignored;
  _exit(127);
}

bool WriteWholeFile(const char* path, const char* data, std::size_t size) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t written = write(fd, data, size);
  int saved = errno;
  close(fd);
  errno = saved;
  return written == static_cast<ssize_t>(size);
}

// Concatenates `a` and `b` into `out` (capacity `cap`); false if too long.
bool JoinPath(char* out, std::size_t cap, const char* a, const char* b) {
  std::size_t la = strlen(a), lb = strlen(b);
  if (la + lb + 1 > cap) return false;
  memcpy(out, a, la);
  memcpy(out + la, b, lb + 1);
  return true;
}

void RunMountSteps(ChildPlan& plan, int failure_fd) {
  // Everything below the old root stays in this namespace only.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    Die(failure_fd, kStepMakePrivate, errno);

  // Phase 1: clone every bind source while the host tree is still visible.
  for (std::size_t i = 0; i < plan.mounts.size(); ++i) {
    MountStep& step = plan.mounts[i];
    int detail = static_cast<int>(i);
    bool bind = step.kind == MountStep::Kind::kBindReadOnly ||
                step.kind == MountStep::Kind::kBindWritable ||
                step.kind == MountStep::Kind::kBindDevice;
    if (!bind || step.fd >= 0) continue;
    unsigned flags = kOpenTreeClone | O_CLOEXEC;
    if (step.kind != MountStep::Kind::kBindDevice) flags |= kAtRecursive;
    int fd = RawOpenTree(AT_FDCWD, step.source.c_str(), flags);
    if (fd < 0) Die(failure_fd, kStepOpenTree, errno, detail);
    MountAttr attr{};
    switch (step.kind) {
      case MountStep::Kind::kBindReadOnly:
        attr.attr_set = kAttrRdonly | kAttrNosuid | kAttrNodev;
        break;
      case MountStep::Kind::kBindWritable:
        attr.attr_set = kAttrNosuid | kAttrNodev;
        break;
      default:
        attr.attr_set = kAttrNosuid | kAttrNoexec;
        break;
    }
    unsigned setattr_flags = AT_EMPTY_PATH;
    if (step.kind != MountStep::Kind::kBindDevice) setattr_flags |= kAtRecursive;
    if (RawMountSetattr(fd, "", setattr_flags, &attr) != 0)
      Die(failure_fd, kStepMountSetattr, errno, detail);
    step.child_fd = fd;
  }

  // Phase 2: a tmpfs at the staging directory becomes the new root.
  const char* staging = plan.staging_dir.c_str();
  if (mount("sandbox-root", staging, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") != 0)
    Die(failure_fd, kStepStagingRoot, errno);

  char path[4096];
  for (std::size_t i = 0; i < plan.mounts.size(); ++i) {
    MountStep& step = plan.mounts[i];
    int detail = static_cast<int>(i);
    if (!JoinPath(path, sizeof(path), staging, step.target.c_str()))
      Die(failure_fd, kStepMkdir, ENAMETOOLONG, detail);
    switch (step.kind) {
      case MountStep::Kind::kBindReadOnly:
      case MountStep::Kind::kBindWritable:
      case MountStep::Kind::kBindDevice: {
        int fd = step.fd >= 0 ? step.fd : step.child_fd;
        struct stat st;
        if (fstat(fd, &st) != 0) Die(failure_fd, kStepMoveMount, errno, detail);
        if (S_ISDIR(st.st_mode)) {
          if (mkdir(path, 0755) != 0 && errno != EEXIST) Die(failure_fd, kStepMkdir, errno, detail);
        } else {
          int file = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
          if (file < 0) Die(failure_fd, kStepMkdir, errno, detail);
          close(file);
        }
        if (RawMoveMount(fd, "", AT_FDCWD, path, kMoveMountFEmptyPath) != 0)
          Die(failure_fd, kStepMoveMount, errno, detail);
        break;
      }
      case MountStep::Kind::kDir:
        if (mkdir(path, 0755) != 0 && errno != EEXIST) Die(failure_fd, kStepMkdir, errno, detail);
        break;
      case MountStep::Kind::kSymlink:
        if (symlink(step.source.c_str(), path) != 0) Die(failure_fd, kStepSymlink, errno, detail);
        break;
      case MountStep::Kind::kTmpfs:
        if (mkdir(path, 0755) != 0 && errno != EEXIST) Die(failure_fd, kStepMkdir, errno, detail);
        if (mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, step.data.c_str()) != 0)
          Die(failure_fd, kStepTmpfs, errno, detail);
        break;
      case MountStep::Kind::kProc:
        if (mkdir(path, 0555) != 0 && errno != EEXIST) Die(failure_fd, kStepMkdir, errno, detail);
        if (mount("proc", path, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
          Die(failure_fd, kStepProc, errno, detail);
        break;
      case MountStep::Kind::kReadOnlyOver: {
        int fd = RawOpenTree(AT_FDCWD, path, kOpenTreeClone | O_CLOEXEC | kAtRecursive);
        if (fd < 0) {
          if (errno == ENOENT) break;
          Die(failure_fd, kStepReadOnlyOver, errno, detail);
        }
        MountAttr attr{};
        attr.attr_set = kAttrRdonly | kAttrNosuid | kAttrNodev | kAttrNoexec;
        if (RawMountSetattr(fd, "", AT_EMPTY_PATH | kAtRecursive, &attr) != 0 ||
            RawMoveMount(fd, "", AT_FDCWD, path, kMoveMountFEmptyPath) != 0)
          Die(failure_fd, kStepReadOnlyOver, errno, detail);
        close(fd);
        break;
      }
      case MountStep::Kind::kRemountReadOnly: {
        MountAttr attr{};
        attr.attr_set = kAttrRdonly;
        if (RawMountSetattr(AT_FDCWD, path, 0, &attr) != 0)
          Die(failure_fd, kStepRemountReadOnly, errno, detail);
        break;
      }
    }
  }
  for (MountStep& step : plan.mounts) {
    if (step.child_fd >= 0) close(step.child_fd);
  }

  // The staging root itself becomes read-only, then the root.
  MountAttr attr{};
  attr.attr_set = kAttrRdonly;
  if (RawMountSetattr(AT_FDCWD, staging, 0, &attr) != 0)
    Die(failure_fd, kStepRemountReadOnly, errno);
  if (chdir(staging) != 0) Die(failure_fd, kStepChdir, errno);
  // pivot_root(".", "."): the old root ends up stacked on "." and is detached.
  if (syscall(SYS_pivot_root, ".", ".") != 0) Die(failure_fd, kStepPivotRoot, errno);
  if (umount2(".", MNT_DETACH) != 0) Die(failure_fd, kStepDetachOldRoot, errno);
  if (chdir("/") != 0) Die(failure_fd, kStepChdir, errno);
}

void BringUpLoopback(int failure_fd) {
  int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sock < 0) Die(failure_fd, kStepLoopback, errno);
  struct ifreq ifr;
  memset(&ifr, 0, sizeof(ifr));
  memcpy(ifr.ifr_name, "lo", 3);
  if (ioctl(sock, SIOCGIFFLAGS, &ifr) != 0) Die(failure_fd, kStepLoopback, errno);
  ifr.ifr_flags |= IFF_UP;
  if (ioctl(sock, SIOCSIFFLAGS, &ifr) != 0) Die(failure_fd, kStepLoopback, errno);
  close(sock);
}

void ApplyLandlock(const ChildPlan& plan, int failure_fd) {
  LandlockRulesetAttr attr{};
  attr.handled_access_fs = plan.landlock_handled_fs;
  attr.scoped = plan.landlock_scoped;
  std::size_t size = plan.landlock_scoped ? sizeof(attr) : sizeof(attr.handled_access_fs);
  int ruleset = LandlockCreateRuleset(&attr, size, 0);
  if (ruleset < 0) Die(failure_fd, kStepLandlock, errno);
  for (std::size_t i = 0; i < plan.landlock_rules.size(); ++i) {
    const LandlockPathRule& rule = plan.landlock_rules[i];
    int fd = open(rule.path.c_str(), O_PATH | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) continue;
      Die(failure_fd, kStepLandlock, errno, static_cast<int>(i));
    }
    LandlockPathBeneathAttr beneath{};
    beneath.allowed_access = rule.access & plan.landlock_handled_fs;
    beneath.parent_fd = fd;
    if (LandlockAddPathRule(ruleset, &beneath) != 0)
      Die(failure_fd, kStepLandlock, errno, static_cast<int>(i));
    close(fd);
  }
  // The program itself lives outside the new root (it was opened on the
  // host): allow reading and executing that one file.
  LandlockPathBeneathAttr program{};
  program.allowed_access = (kLandlockFsExecute | kLandlockFsReadFile) & plan.landlock_handled_fs;
  program.parent_fd = plan.exec_fd;
  if (LandlockAddPathRule(ruleset, &program) != 0) Die(failure_fd, kStepLandlock, errno);
  if (plan.extra_fd >= 0 && plan.extra_fd_landlock_access != 0) {
    LandlockPathBeneathAttr extra{};
    extra.allowed_access = plan.extra_fd_landlock_access & plan.landlock_handled_fs;
    extra.parent_fd = plan.extra_fd;
    if (LandlockAddPathRule(ruleset, &extra) != 0) Die(failure_fd, kStepLandlock, errno);
  }
  if (LandlockRestrictSelf(ruleset) != 0) Die(failure_fd, kStepLandlock, errno);
  close(ruleset);
}

struct ChildArgs {
  ChildPlan* plan;
  int release_fd;
  int failure_fd;
  char* const* argv;
  char* const* envp;
};

[[noreturn]] void ChildMain(const ChildArgs& args) {
  ChildPlan& plan = *args.plan;
  int failure_fd = args.failure_fd;  // moved off fd 3 when extra_fd takes it

  // Die with the parent. The credential change below clears this again; it is
  // set once more after it, and the release pipe tells whether the parent
  // died in between.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) Die(failure_fd, kStepDeathSignal, errno);
  char byte;
  ssize_t got;
  do {
    got = read(args.release_fd, &byte, 1);
  } while (got < 0 && errno == EINTR);
  if (got != 1) _exit(127);  // the parent gave up (or died): nothing to report

  if (plan.child_writes_own_maps) {
    if (!WriteWholeFile("/proc/self/setgroups", "deny", 4) ||
        !WriteWholeFile("/proc/self/gid_map", plan.gid_map.data(), plan.gid_map.size()) ||
        !WriteWholeFile("/proc/self/uid_map", plan.uid_map.data(), plan.uid_map.size()))
      Die(failure_fd, kStepIdMaps, errno);
  }
  // Become root of the new user namespace before touching any host file: until
  // now a root-started child still had host uid 0 as its filesystem identity.
  if (syscall(SYS_setresgid, 0, 0, 0) != 0) Die(failure_fd, kStepSetIds, errno);
  if (plan.clear_supplementary_groups && syscall(SYS_setgroups, 0, nullptr) != 0)
    Die(failure_fd, kStepSetGroups, errno);
  if (syscall(SYS_setresuid, 0, 0, 0) != 0) Die(failure_fd, kStepSetIds, errno);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) Die(failure_fd, kStepDeathSignal, errno);
  struct pollfd lifeline = {args.release_fd, 0, 0};
  if (poll(&lifeline, 1, 0) > 0 && (lifeline.revents & (POLLHUP | POLLERR)) != 0) {
    // The parent already released us and closed its end only if it died.
    Die(failure_fd, kStepParentGone, ESRCH);
  }

  // The parent has placed us in our cgroups; make that the cgroup root.
  if (plan.new_cgroup_namespace && unshare(CLONE_NEWCGROUP) != 0)
    Die(failure_fd, kStepCgroupNamespace, errno);

  RunMountSteps(plan, failure_fd);
  if (chdir(plan.workdir.c_str()) != 0) Die(failure_fd, kStepChdir, errno);

  if (!plan.hostname.empty() && sethostname(plan.hostname.data(), plan.hostname.size()) != 0)
    Die(failure_fd, kStepHostname, errno);
  if (plan.bring_up_loopback) BringUpLoopback(failure_fd);

  for (const RlimitSetting& limit : plan.rlimits) {
    struct rlimit value = {limit.soft, limit.hard};
    if (setrlimit(static_cast<__rlimit_resource>(limit.resource), &value) != 0)
      Die(failure_fd, kStepRlimit, errno, limit.resource);
  }

  // The bounding set decides what PID 1 keeps across exec (uid 0 in its user
  // namespace gets exactly the bounding set; no_new_privs caps it at what it
  // had). Ambient and inheritable sets are emptied.
  for (int cap = 0; cap <= plan.last_capability; ++cap) {
    if ((plan.keep_capabilities >> cap) & 1) continue;
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
      Die(failure_fd, kStepCapabilities, errno, cap);
  }
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
    Die(failure_fd, kStepCapabilities, errno);

  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) Die(failure_fd, kStepNoNewPrivs, errno);
  if (plan.landlock_handled_fs != 0) ApplyLandlock(plan, failure_fd);

  // stdio: move the borrowed fds above 2 first so dup2 cannot clobber them.
  int stdio = fcntl(plan.stdio_fd, F_DUPFD_CLOEXEC, 3);
  if (stdio < 0) Die(failure_fd, kStepStdio, errno);
  int err_fd = plan.stderr_fd >= 0 ? fcntl(plan.stderr_fd, F_DUPFD_CLOEXEC, 3)
                                   : open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (err_fd < 0) Die(failure_fd, kStepStdio, errno);
  int extra = plan.extra_fd >= 0 ? fcntl(plan.extra_fd, F_DUPFD_CLOEXEC, 4) : -1;
  if (plan.extra_fd >= 0 && extra < 0) Die(failure_fd, kStepStdio, errno);
  if (dup2(stdio, 0) < 0 || dup2(stdio, 1) < 0 || dup2(err_fd, 2) < 0)
    Die(failure_fd, kStepStdio, errno);
  // Every other inherited fd (the host's, from any thread) closes at exec.
  if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
    Die(failure_fd, kStepCloseFds, errno);
  if (extra >= 0) {
    // fd 3 may be the program's fd or the failure pipe: move them first.
    if (plan.exec_fd == 3 && (plan.exec_fd = fcntl(3, F_DUPFD_CLOEXEC, 4)) < 0)
      Die(failure_fd, kStepStdio, errno);
    if (failure_fd == 3) {
      int moved = fcntl(3, F_DUPFD_CLOEXEC, 4);
      if (moved < 0) Die(failure_fd, kStepStdio, errno);
      failure_fd = moved;
    }
    // dup2 leaves fd 3 without O_CLOEXEC: the one fd the program inherits.
    if (dup2(extra, 3) < 0) Die(failure_fd, kStepStdio, errno);
  }

  if (!plan.seccomp_filter.empty()) {
    struct sock_fprog prog;
    prog.len = static_cast<unsigned short>(plan.seccomp_filter.size());
    prog.filter = plan.seccomp_filter.data();
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0)
      Die(failure_fd, kStepSeccomp, errno);
  }
  syscall(SYS_execveat, plan.exec_fd, "", args.argv, args.envp, AT_EMPTY_PATH);
  Die(failure_fd, kStepExec, errno);
}

std::string Trim(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

Status WriteProcFile(pid_t pid, const char* name, const std::string& data) {
  std::string path = "/proc/" + std::to_string(pid) + "/" + name;
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return Fail(ErrnoError(errno, "open", path));
  if (write(fd.get(), data.data(), data.size()) != static_cast<ssize_t>(data.size()))
    return Fail(ErrnoError(errno, "write", path + " <- " + Trim(data)));
  return {};
}

}  // namespace

const char* ChildStepName(int step) {
  if (step < 0 || step >= kStepCount) return "unknown step";
  return kStepNames[step];
}

Expected<StartedChild> CloneIntoNamespaces(ChildPlan& plan) {
  if (plan.exec_fd < 0 || plan.stdio_fd < 0 || plan.argv.empty())
    return Fail(Error::Code::InvalidArgument, "boundary: no program, argv or stream fd");
  auto release = MakePipe();
  if (!release) return Fail(release.error());
  auto failures = MakePipe();
  if (!failures) return Fail(failures.error());

  // argv/envp arrays: built here, the child only reads them. They live in
  // this frame, which the child's copy of the stack keeps until exec.
  std::vector<char*> argv, envp;
  argv.reserve(plan.argv.size() + 1);
  for (std::string& arg : plan.argv) argv.push_back(arg.data());
  argv.push_back(nullptr);
  envp.reserve(plan.env.size() + 1);
  for (std::string& var : plan.env) envp.push_back(var.data());
  envp.push_back(nullptr);
  ChildArgs args{&plan, release->read.get(), failures->write.get(), argv.data(), envp.data()};

  int pidfd = -1;
  CloneArgs clone_args{};
  clone_args.flags = plan.clone_flags | CLONE_PIDFD;
  clone_args.pidfd = reinterpret_cast<std::uintptr_t>(&pidfd);
  clone_args.exit_signal = SIGCHLD;
  long pid = syscall(SYS_clone3, &clone_args, sizeof(clone_args));
  if (pid < 0) {
    int err = errno;
    std::string hint;
    if (err == EPERM || err == ENOSPC || err == EUSERS)
      hint =
          ": user namespaces may be disabled (sysctl user.max_user_namespaces, "
          "kernel.unprivileged_userns_clone, or an AppArmor userns restriction); run `sandbox "
          "doctor`";
    return Fail(
        Error(Error::Code::Unsupported,
              ErrnoError(err, "clone3", "new user/mount/pid/... namespaces").message() + hint));
  }
  if (pid == 0) {
    // The child's copy of the write end of the release pipe must go, or it
    // could never see the parent's end close.
    close(release->write.get());
    close(failures->read.get());
    ChildMain(args);
  }
  StartedChild child;
  child.pid = static_cast<pid_t>(pid);
  child.pidfd.reset(pidfd);
  child.release = std::move(release->write);
  child.failures = std::move(failures->read);
  return child;
}

Status ReleaseAndAwaitExec(StartedChild& child, const ChildPlan& plan) {
  char byte = 1;
  if (write(child.release.get(), &byte, 1) != 1)
    return Fail(ErrnoError(errno, "write", "boundary release pipe"));
  // The failure pipe's write end is O_CLOEXEC in the child: EOF means exec.
  ChildFailure failure{};
  std::size_t have = 0;
  // Setup is a few milliseconds; a child stuck before exec (a hung mount
  // source, say) is given up on rather than waited for forever.
  constexpr int kSetupTimeoutMs = 30000;
  while (have < sizeof(failure)) {
    struct pollfd ready = {child.failures.get(), POLLIN, 0};
    int polled = poll(&ready, 1, kSetupTimeoutMs);
    if (polled < 0 && errno == EINTR) continue;
    if (polled == 0)
      return Fail(Error::Code::Unavailable,
                  "starting the namespace boundary: the child did not reach exec within 30 s");
    ssize_t got = read(child.failures.get(), reinterpret_cast<char*>(&failure) + have,
                       sizeof(failure) - have);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return Fail(ErrnoError(errno, "read", "boundary failure pipe"));
    if (got == 0) break;
    have += static_cast<std::size_t>(got);
  }
  if (have == 0) return {};
  if (have != sizeof(failure))
    return Fail(Error::Code::Internal, "boundary: truncated failure report from the child");
  std::string message =
      std::string("starting the namespace boundary: ") + ChildStepName(failure.step);
  if (failure.detail >= 0 && failure.step >= kStepOpenTree &&
      failure.step <= kStepRemountReadOnly &&
      static_cast<std::size_t>(failure.detail) < plan.mounts.size()) {
    const MountStep& step = plan.mounts[static_cast<std::size_t>(failure.detail)];
    message +=
        " '" + (step.source.empty() ? step.target : step.source + "' -> '" + step.target) + "'";
  }
  message += ": ";
  message += strerror(failure.err);
  Error::Code code = Error::Code::Internal;
  if (failure.step == kStepExec) code = CodeForErrno(failure.err);
  if (failure.step == kStepLandlock || failure.step == kStepSeccomp || failure.step == kStepProc)
    code = Error::Code::Unsupported;
  return Fail(code, message);
}

Status WriteIdMaps(pid_t pid, const std::string& uid_map, const std::string& gid_map,
                   bool deny_setgroups) {
  if (deny_setgroups) SANDBOX_RETURN_IF_ERROR(WriteProcFile(pid, "setgroups", "deny"));
  SANDBOX_RETURN_IF_ERROR(WriteProcFile(pid, "gid_map", gid_map));
  SANDBOX_RETURN_IF_ERROR(WriteProcFile(pid, "uid_map", uid_map));
  return {};
}

Expected<UniqueFd> MakeUserNamespaceFd(const std::string& uid_map, const std::string& gid_map) {
  auto hold = MakePipe();
  if (!hold) return Fail(hold.error());
  int pidfd = -1;
  CloneArgs clone_args{};
  clone_args.flags = CLONE_NEWUSER | CLONE_PIDFD;
  clone_args.pidfd = reinterpret_cast<std::uintptr_t>(&pidfd);
  clone_args.exit_signal = SIGCHLD;
  long pid = syscall(SYS_clone3, &clone_args, sizeof(clone_args));
  if (pid < 0) return Fail(ErrnoError(errno, "clone3", "CLONE_NEWUSER for an id mapping"));
  if (pid == 0) {
    // Holds the namespace alive until the parent has its fd, then exits.
    close(hold->write.get());
    char byte;
    while (read(hold->read.get(), &byte, 1) < 0 && errno == EINTR) {
    }
    _exit(0);
  }
  UniqueFd owned_pidfd(pidfd);
  auto reap = [&] {
    hold->write.reset();
    siginfo_t info;
    while (waitid(P_PIDFD, static_cast<id_t>(owned_pidfd.get()), &info, WEXITED) < 0 &&
           errno == EINTR) {
    }
  };
  Status maps = WriteIdMaps(static_cast<pid_t>(pid), uid_map, gid_map, geteuid() != 0);
  Expected<UniqueFd> ns_fd =
      maps ? Expected<UniqueFd>(UniqueFd(
                 open(("/proc/" + std::to_string(pid) + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC)))
           : Fail(maps.error());
  reap();
  if (ns_fd && !ns_fd->valid()) return Fail(ErrnoError(errno, "open", "/proc/<pid>/ns/user"));
  return ns_fd;
}

Expected<UniqueFd> MakeIdmappedTree(const std::string& path, int userns_fd) {
  UniqueFd tree(RawOpenTree(AT_FDCWD, path.c_str(), kOpenTreeClone | O_CLOEXEC | kAtRecursive));
  if (!tree) return Fail(ErrnoError(errno, "open_tree", path));
  MountAttr attr{};
  attr.attr_set = kAttrIdmap | kAttrNosuid | kAttrNodev;
  attr.userns_fd = static_cast<std::uint64_t>(userns_fd);
  if (RawMountSetattr(tree.get(), "", AT_EMPTY_PATH | kAtRecursive, &attr) != 0) {
    int err = errno;
    Error error = ErrnoError(err, "mount_setattr MOUNT_ATTR_IDMAP", path);
    return Fail(
        Error(Error::Code::Unsupported,
              error.message() +
                  ": the workspace's filesystem must support idmapped mounts (Linux >= "
                  "5.12; ext4, xfs, btrfs, tmpfs >= 6.3) to run the namespace backend as root"));
  }
  return tree;
}

Status ProbeUserNamespaces() {
  auto ns = MakeUserNamespaceFd("0 " + std::to_string(geteuid()) + " 1\n",
                                "0 " + std::to_string(getegid()) + " 1\n");
  if (!ns)
    return Fail(Error(Error::Code::Unsupported,
                      ns.error().message() +
                          ": user namespaces are not available to this user (check sysctl "
                          "user.max_user_namespaces, kernel.unprivileged_userns_clone and "
                          "kernel.apparmor_restrict_unprivileged_userns)"));
  return {};
}

Expected<std::vector<MountStep>> RootMountSteps(const std::string& rootfs) {
  std::vector<std::string> names;
  std::string base = rootfs.empty() ? std::string() : rootfs;
  if (rootfs.empty()) {
    names = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc"};
  } else {
    DIR* dir = opendir(rootfs.c_str());
    if (!dir) return Fail(ErrnoError(errno, "opendir", rootfs));
    while (struct dirent* entry = readdir(dir)) {
      std::string name = entry->d_name;
      if (name == "." || name == ".." || name == "proc" || name == "dev" || name == "sys" ||
          name == "tmp" || name == "workspace")
        continue;
      names.push_back(std::move(name));
    }
    closedir(dir);
    std::sort(names.begin(), names.end());
  }
  std::vector<MountStep> steps;
  for (const std::string& name : names) {
    std::string source = base + "/" + name;
    struct stat st;
    if (lstat(source.c_str(), &st) != 0) {
      if (errno == ENOENT && rootfs.empty()) continue;  // e.g. no /lib32 on this host
      return Fail(ErrnoError(errno, "lstat", source));
    }
    if (S_ISLNK(st.st_mode)) {
      char target[4096];
      ssize_t len = readlink(source.c_str(), target, sizeof(target) - 1);
      if (len < 0) return Fail(ErrnoError(errno, "readlink", source));
      steps.push_back({.kind = MountStep::Kind::kSymlink,
                       .source = std::string(target, static_cast<std::size_t>(len)),
                       .target = "/" + name});
    } else if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) {
      steps.push_back(
          {.kind = MountStep::Kind::kBindReadOnly, .source = source, .target = "/" + name});
    }
    // Sockets, FIFOs and devices at the top of an image are left out.
  }
  return steps;
}

bool HasMountSetattr() {
  errno = 0;
  long rc = syscall(SYS_mount_setattr, -1, nullptr, 0, nullptr, 0);
  return !(rc < 0 && errno == ENOSYS);
}

}  // namespace sandbox::os
