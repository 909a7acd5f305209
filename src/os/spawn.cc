#include "os/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

#include "os/capabilities.h"
#include "os/syscalls.h"

namespace sandbox::os {

// Filled in by a PID-namespace init in a MAP_SHARED page; read by the parent
// after the ready pipe hangs up (failure) or after the init was reaped.
struct InitReport {
  int started;  // 1 once the command runs and the init holds no fd
  int failed_errno;
  const char* failed_step;  // a string literal: same address in the init's copy
  int reported;             // 1 once wait_code/wait_status hold the command's status
  int wait_code;            // siginfo_t::si_code of the command's exit
  int wait_status;          // siginfo_t::si_status
};

namespace {

// Everything the vfork child touches, prepared by the parent: the child may
// only make raw syscalls, never allocate.
struct ChildPlan {
  const char* exec_path;
  char* const* argv;
  char* const* envp;
  int cwd_fd, stdin_fd, stdout_fd, stderr_fd, extra_fd, cgroup_procs_fd;
  bool new_session;
  int drop_capabilities_up_to;  // -1: keep them; else the last capability number
  std::uint64_t bounding_set;   // the capabilities the bounding set may still hold
  bool reset_signals;           // false once ClaimProcessForSpawn made them all SIG_DFL
  int parent_death_signal;      // 0: none
  pid_t parent_pid;
  // Written by the child before _exit on failure; read by the parent after
  // vfork returns (the parent is suspended until the child execs or exits).
  int failed_errno;
  const char* failed_step;
  // TSan builds only (see kVforkIsFork): the child's end of a close-on-exec
  // pipe that carries a failure to the parent; -1 otherwise.
  int report_fd;
};

// ThreadSanitizer's runtime turns vfork into fork: the parent runs on at
// once, before the child has joined its cgroup or exec'd (a Kill right after
// Spawn would miss it), and the child's failure lands in its own copy of the
// plan. TSan builds therefore wait on a close-on-exec pipe that carries the
// failure; every other build has the real vfork and no pipe.
#if defined(__SANITIZE_THREAD__)
constexpr bool kVforkIsFork = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kVforkIsFork = true;
#else
constexpr bool kVforkIsFork = false;
#endif
#else
constexpr bool kVforkIsFork = false;
#endif

struct ChildFailure {
  int failed_errno;
  const char* failed_step;  // a string literal: the same address in a fork child
};

// Sets every signal's disposition to SIG_DFL. Raw calls only: it runs in
// vfork children too.
void ResetSignalDispositions() {
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    sigaction(sig, &dfl, nullptr);
  }
}

// Makes `from` appear as `to` in the child, without close-on-exec.
bool MoveFd(int from, int to) {
  if (from < 0) return true;
  if (from == to) return fcntl(to, F_SETFD, 0) == 0;
  return dup2(from, to) == to;
}

// Closes every fd >= `lowest` but `keep` (-1: none), with raw calls only (it
// runs in vfork and clone children). close_range(2) where the kernel has it;
// else (gVisor's kernel fails it with EINVAL) the fds listed in
// /proc/self/fd, batch by batch, until none is left.
void CloseFdsFrom(int lowest, int keep = -1) {
  if (keep < lowest) {
    if (syscall(SYS_close_range, lowest, ~0U, 0) == 0) return;
  } else if ((keep == lowest || syscall(SYS_close_range, lowest, keep - 1, 0) == 0) &&
             syscall(SYS_close_range, keep + 1, ~0U, 0) == 0) {
    return;
  }
  int dir = static_cast<int>(syscall(SYS_openat, AT_FDCWD, "/proc/self/fd",
                                     O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0));
  if (dir < 0) return;
  alignas(8) char buffer[4096];
  for (int rounds = 0; rounds < 1024; ++rounds) {
    if (lseek(dir, 0, SEEK_SET) < 0) break;
    bool closed_any = false;
    for (;;) {
      long got = syscall(SYS_getdents64, dir, buffer, sizeof buffer);
      if (got <= 0) break;
      for (long at = 0; at < got;) {
        const char* name = buffer + at + 19;  // struct linux_dirent64: d_name
        unsigned short record = *reinterpret_cast<unsigned short*>(buffer + at + 16);
        at += record;
        int fd = 0;
        bool number = *name != '\0';
        for (const char* c = name; *c; ++c) {
          if (*c < '0' || *c > '9') number = false;
          else fd = fd * 10 + (*c - '0');
        }
        if (number && fd >= lowest && fd != dir && fd != keep) {
          close(fd);
          closed_any = true;
        }
      }
    }
    if (!closed_any) break;
  }
  close(dir);
}

[[noreturn]] void ChildFail(ChildPlan* plan, const char* step) {
  plan->failed_errno = errno;
  plan->failed_step = step;
  if (plan->report_fd >= 0) {
    ChildFailure report{plan->failed_errno, step};
    (void)!write(plan->report_fd, &report, sizeof report);
  }
  _exit(127);
}

// Runs in the vfork child. Only async-signal-safe raw calls.
[[noreturn]] void RunChild(ChildPlan* plan) {
  // Signal dispositions: a handler of the parent must never run in the child
  // (it shares the parent's memory), and ignored signals (a host that
  // ignores SIGPIPE) must not leak into the command.
  // (In a process that ClaimProcessForSpawn made so, all are SIG_DFL.)
  if (plan->reset_signals) ResetSignalDispositions();
  if (plan->cgroup_procs_fd >= 0 && write(plan->cgroup_procs_fd, "0", 1) != 1)
    ChildFail(plan, "cgroup");
  if (plan->new_session) setsid();
  if (plan->parent_death_signal != 0) {
    if (prctl(PR_SET_PDEATHSIG, plan->parent_death_signal) != 0) ChildFail(plan, "prctl");
    if (getppid() != plan->parent_pid) _exit(127);  // the parent died before prctl took effect
  }
  // Before the stdio moves: a cwd fd numbered 0..3 (the caller's fds 0..3
  // may be closed) would be replaced by a dup2 below.
  if (plan->cwd_fd >= 0 && fchdir(plan->cwd_fd) < 0) ChildFail(plan, "chdir");
  // Move the stdio sources above 3 first so a source numbered 0..3 is not
  // clobbered by an earlier dup2.
  int sources[4] = {plan->stdin_fd, plan->stdout_fd, plan->stderr_fd, plan->extra_fd};
  for (int& fd : sources) {
    if (fd >= 0 && fd <= 3) {
      fd = fcntl(fd, F_DUPFD_CLOEXEC, 4);
      if (fd < 0) ChildFail(plan, "dup");
    }
  }
  for (int target = 0; target < 4; ++target)
    if (!MoveFd(sources[target], target)) ChildFail(plan, "dup2");
  // Nothing but stdio (and fd 3 when asked) crosses into the command, even
  // fds the embedding program opened without O_CLOEXEC.
  CloseFdsFrom(plan->extra_fd >= 0 ? 4 : 3, plan->report_fd);
  if (plan->drop_capabilities_up_to >= 0) {
    int err = DropAllCapabilities(plan->drop_capabilities_up_to, plan->bounding_set);
    if (err != 0) {
      errno = err;
      ChildFail(plan, "capabilities");
    }
  }
  sigset_t empty;
  sigemptyset(&empty);
  sigprocmask(SIG_SETMASK, &empty, nullptr);
  execve(plan->exec_path, plan->argv, plan->envp);
  ChildFail(plan, "execve");
}

// Runs in the init of a new PID namespace: a fork-style copy of the parent
// (only the calling thread exists), so again raw calls only, and every signal
// stays blocked. Starts the command with vfork, tells the parent that the
// exec happened (or failed) by closing every fd, its copy of the ready pipe
// among them, then reaps every process of the namespace until the command
// exits and records its status. Its exit makes the kernel kill whatever is
// left in the namespace.
[[noreturn]] void RunInit(ChildPlan* plan, InitReport* report) {
  pid_t command = vfork();
  if (command == 0) RunChild(plan);
  if (command < 0) {
    plan->failed_errno = errno;
    plan->failed_step = "vfork";
  }
  if (plan->failed_step != nullptr) {
    report->failed_errno = plan->failed_errno;
    report->failed_step = plan->failed_step;
    _exit(127);  // the parent reads the failure once the pipe hangs up
  }
  // Nothing of the parent's stays open in the init: a pipe end held here
  // would keep a reader of the command's output from ever seeing EOF. The
  // parent reads the ready pipe to its end, so Spawn returns only once the
  // init holds no fd at all.
  report->started = 1;
  CloseFdsFrom(0);
  for (;;) {
    siginfo_t info;
    std::memset(&info, 0, sizeof info);
    if (waitid(P_ALL, 0, &info, WEXITED) < 0) {
      if (errno == EINTR) continue;
      _exit(0);  // ECHILD: cannot happen while the command lives
    }
    if (info.si_pid == command) {
      report->wait_code = info.si_code;
      report->wait_status = info.si_status;
      report->reported = 1;
      _exit(0);
    }
  }
}

// Runs in the init of a PidNamespaceReaper (a fork-style copy; raw calls
// only). Holds no fd and blocks every signal: SIGCHLD is taken with
// sigwaitinfo, and signals from inside the namespace cannot reach PID 1
// without a handler.
[[noreturn]] void RunReaper(int parent_pidfd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The parent may have died before prctl took effect: its pidfd is readable.
  pollfd parent{parent_pidfd, POLLIN, 0};
  if (poll(&parent, 1, 0) != 0) _exit(0);
  CloseFdsFrom(0);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  for (;;) {
    siginfo_t info;
    for (;;) {
      std::memset(&info, 0, sizeof info);
      if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG) != 0 || info.si_pid == 0) break;
    }
    // A child that exits after the loop leaves SIGCHLD pending: no wakeup is lost.
    sigwaitinfo(&chld, nullptr);
  }
}

// An fd of this process's own (active) PID namespace, opened once: setns to
// it returns a thread's children to it. (A pidfd of ourselves is refused by
// setns(CLONE_NEWPID) here.)
int OwnPidNamespace() {
  static const int fd = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);  // kept for good
  return fd;
}

// Reaps `pid` whatever its state, ignoring its status.
void ReapQuietly(pid_t pid) {
  int status;
  while (waitpid(pid, &status, __WALL) < 0 && errno == EINTR) {
  }
}

// Set once by ClaimProcessForSpawn, before any thread exists.
bool g_process_claimed = false;
std::uint64_t g_claimed_bounding_set = ~std::uint64_t{0};

std::vector<char*> CStrings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

Child::Child(Child&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      pidfd_(std::move(other.pidfd_)),
      report_(std::exchange(other.report_, nullptr)),
      status_(std::move(other.status_)),
      pid_only_(other.pid_only_) {}

Child& Child::operator=(Child&& other) noexcept {
  if (this != &other) {
    this->~Child();
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::move(other.pidfd_);
    report_ = std::exchange(other.report_, nullptr);
    status_ = std::move(other.status_);
    pid_only_ = other.pid_only_;
  }
  return *this;
}

Child::~Child() {
  if (pid_ > 0 && !status_) {
    (void)Kill();
    (void)Wait();
  }
  Unmap();
}

void Child::Unmap() {
  if (report_ != nullptr) munmap(report_, sizeof(InitReport));
  report_ = nullptr;
}

// The status of the child, or for a PID-namespace init the status of its
// command when the init recorded one (otherwise the init was killed, and so
// was the command: its own status).
ExitStatus Child::Decode(const siginfo_t& info) const {
  if (report_ != nullptr && report_->reported)
    return DecodeWaitStatus(report_->wait_code, report_->wait_status);
  return DecodeWaitStatus(info.si_code, info.si_status);
}

ExitStatus DecodeWaitStatus(int code, int status) {
  if (code == CLD_EXITED) return ExitStatus{status, std::nullopt};
  return ExitStatus{128 + status, status};
}

Expected<ExitStatus> Child::Wait() {
  if (status_) return *status_;
  if (pid_ <= 0) return Fail(Error::Code::Internal, "wait on an empty child handle");
  siginfo_t info;
  for (;;) {
    std::memset(&info, 0, sizeof info);
    int waited = pid_only_ ? waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED)
                           : waitid(P_PIDFD, static_cast<id_t>(pidfd_.get()), &info, WEXITED);
    if (waited == 0) break;
    if (errno != EINTR) return Fail(ErrnoError(errno, "waitid", std::to_string(pid_)));
  }
  status_ = Decode(info);
  return *status_;
}

Expected<std::optional<ExitStatus>> Child::TryWait() {
  if (status_) return status_;
  siginfo_t info;
  std::memset(&info, 0, sizeof info);
  int waited =
      pid_only_ ? waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG)
                : waitid(P_PIDFD, static_cast<id_t>(pidfd_.get()), &info, WEXITED | WNOHANG);
  if (waited < 0) {
    if (errno == EINTR) return std::optional<ExitStatus>();
    return Fail(ErrnoError(errno, "waitid", std::to_string(pid_)));
  }
  if (info.si_pid == 0) return std::optional<ExitStatus>();
  status_ = Decode(info);
  return status_;
}

Status Child::Kill() const {
  if (pid_ <= 0 || status_) return {};
  if (pid_only_) {
    // Not reaped yet (status_ is unset), so the pid is still this child's.
    if (::kill(pid_, SIGKILL) != 0 && errno != ESRCH) return Fail(ErrnoError(errno, "kill"));
    return {};
  }
  return PidfdSendSignal(pidfd_.get(), SIGKILL);
}

Expected<UniqueFd> ExitEventFor(pid_t pid) {
  auto event = MakeEventFd();
  if (!event) return Fail(event.error());
  int watcher_fd = ::fcntl(event->get(), F_DUPFD_CLOEXEC, 3);
  if (watcher_fd < 0) return Fail(ErrnoError(errno, "dup eventfd"));
  std::thread([pid, watcher_fd] {
    siginfo_t info;
    while (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
    }
    std::uint64_t one = 1;
    (void)!::write(watcher_fd, &one, sizeof one);
    ::close(watcher_fd);
  }).detach();
  return std::move(*event);
}

namespace {

Expected<Child> SpawnInNewPidNamespace(const SpawnSpec& spec, ChildPlan& plan,
                                       ExecFailure* failure) {
  void* page =
      mmap(nullptr, sizeof(InitReport), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return Fail(ErrnoError(errno, "mmap"));
  auto* report = new (page) InitReport{};
  struct ReportGuard {
    InitReport* report;
    ~ReportGuard() {
      if (report) munmap(report, sizeof(InitReport));
    }
  } guard{report};
  auto ready = MakePipe();
  if (!ready) return Fail(ready.error());

  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int pidfd = -1;
  long pid =
      syscall(SYS_clone, CLONE_NEWPID | CLONE_PIDFD | SIGCHLD, nullptr, &pidfd, nullptr, nullptr);
  if (pid == 0) RunInit(&plan, report);
  int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) return Fail(ErrnoError(clone_errno, "clone(CLONE_NEWPID)"));
  UniqueFd owned_pidfd(pidfd);
  // A kernel without pidfds (gVisor's) ignores CLONE_PIDFD.
  const bool pid_only = !owned_pidfd;
  if (pid_only) {
    auto event = ExitEventFor(static_cast<pid_t>(pid));
    if (!event) {
      ::kill(static_cast<pid_t>(pid), SIGKILL);
      ReapQuietly(static_cast<pid_t>(pid));
      return Fail(event.error());
    }
    owned_pidfd = std::move(*event);
  }
  ready->write.reset();

  // The init writes nothing: end of file says it has closed every fd.
  char byte;
  long n;
  while ((n = ::read(ready->read.get(), &byte, 1)) < 0 && errno == EINTR) {
  }
  if (!report->started) {
    // The init exited before the command was running.
    ReapQuietly(static_cast<pid_t>(pid));
    int err = report->failed_step != nullptr ? report->failed_errno : ECHILD;
    const char* step = report->failed_step != nullptr ? report->failed_step : "init";
    if (failure) *failure = ExecFailure{err, step};
    return Fail(ErrnoError(err, step, spec.exec_path));
  }
  guard.report = nullptr;
  if (pid_only) return Child::WithExitEvent(static_cast<pid_t>(pid), std::move(owned_pidfd), report);
  return Child(static_cast<pid_t>(pid), std::move(owned_pidfd), report);
}

}  // namespace

Expected<Child> Spawn(const SpawnSpec& spec, ExecFailure* failure) {
  std::vector<char*> argv = CStrings(spec.argv);
  std::vector<char*> envp = CStrings(spec.env);
  ChildPlan plan{};
  plan.exec_path = spec.exec_path.c_str();
  plan.argv = argv.data();
  plan.envp = envp.data();
  plan.cwd_fd = spec.cwd_fd;
  plan.stdin_fd = spec.stdin_fd;
  plan.stdout_fd = spec.stdout_fd;
  plan.stderr_fd = spec.stderr_fd;
  plan.extra_fd = spec.extra_fd;
  plan.cgroup_procs_fd = spec.cgroup_procs_fd;
  plan.new_session = spec.new_session;
  plan.drop_capabilities_up_to = spec.drop_capabilities ? LastCapability() : -1;
  plan.bounding_set = g_claimed_bounding_set;
  plan.reset_signals = !g_process_claimed;
  plan.parent_death_signal = spec.parent_death_signal;
  plan.parent_pid = getpid();
  plan.failed_errno = 0;
  plan.failed_step = nullptr;
  plan.report_fd = -1;
  if (spec.new_pid_namespace) return SpawnInNewPidNamespace(spec, plan, failure);

  UniqueFd report_read, report_write;
  if constexpr (kVforkIsFork) {
    int ends[2];
    if (pipe2(ends, O_CLOEXEC) != 0) return Fail(ErrnoError(errno, "pipe2"));
    report_read.reset(ends[0]);
    report_write.reset(ends[1]);
    plan.report_fd = ends[1];
  }
  // A thread whose children go to another PID namespace cannot create
  // threads, so the detour lasts just the vfork.
  if (spec.pid_namespace_fd >= 0 && setns(spec.pid_namespace_fd, CLONE_NEWPID) != 0)
    return Fail(ErrnoError(errno, "setns(CLONE_NEWPID)"));
  // Block every signal in this thread across vfork so no handler runs in the
  // child while it shares our memory; the child resets dispositions and
  // unblocks before exec.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  ChildPlan* volatile shared_plan = &plan;
  pid_t pid = vfork();
  if (pid == 0) RunChild(shared_plan);
  int vfork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (kVforkIsFork && pid > 0) {
    // Until the child execs (EOF) or reports its failure.
    report_write.reset();
    ChildFailure report{};
    long got;
    do {
      got = read(report_read.get(), &report, sizeof report);
    } while (got < 0 && errno == EINTR);
    if (got == static_cast<long>(sizeof report)) {
      plan.failed_errno = report.failed_errno;
      plan.failed_step = report.failed_step;
    }
  }
  if (spec.pid_namespace_fd >= 0) {
    if (setns(OwnPidNamespace(), CLONE_NEWPID) != 0) {
      // Cannot happen (our own namespace, CAP_SYS_ADMIN proven a moment
      // ago); this thread would fail every later thread creation.
      std::abort();
    }
  }
  if (pid < 0) return Fail(ErrnoError(vfork_errno, "vfork"));

  if (plan.failed_step != nullptr) {
    ReapQuietly(pid);
    if (failure) *failure = ExecFailure{plan.failed_errno, plan.failed_step};
    Error error = ErrnoError(plan.failed_errno, plan.failed_step, spec.exec_path);
    return Fail(std::move(error));
  }
  long pidfd = syscall(SYS_pidfd_open, pid, 0);
  if (pidfd >= 0) return Child(pid, UniqueFd(static_cast<int>(pidfd)));
  int err = errno;
  if (err == ENOSYS) {
    // A kernel without pidfds (gVisor's).
    auto event = ExitEventFor(pid);
    if (event) return Child::WithExitEvent(pid, std::move(*event));
  }
  kill(pid, SIGKILL);
  ReapQuietly(pid);
  return Fail(ErrnoError(err, "pidfd_open", std::to_string(pid)));
}

Expected<PidNamespaceReaper> StartPidNamespaceReaper() {
  auto parent = PidfdOpen(getpid());
  if (!parent) return Fail(parent.error());
  if (OwnPidNamespace() < 0) return Fail(ErrnoError(errno, "open", "/proc/self/ns/pid"));
  // unshare(CLONE_NEWPID) sends this thread's next child to a new namespace,
  // as its PID 1; the namespace's fd is then this thread's
  // pid_for_children. (A pidfd of the init would do for setns too, but needs
  // ptrace access to it, which a non-dumpable agent without CAP_SYS_PTRACE
  // lacks for its own children.)
  if (unshare(CLONE_NEWPID) != 0) return Fail(ErrnoError(errno, "unshare(CLONE_NEWPID)"));
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int pidfd = -1;
  long pid = syscall(SYS_clone, CLONE_PIDFD | SIGCHLD, nullptr, &pidfd, nullptr, nullptr);
  if (pid == 0) RunReaper(parent->get());
  int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  UniqueFd ns(open("/proc/thread-self/ns/pid_for_children", O_RDONLY | O_CLOEXEC));
  int ns_errno = errno;
  // Back to our own namespace for children, or this thread could never
  // create a thread again.
  if (setns(OwnPidNamespace(), CLONE_NEWPID) != 0) std::abort();
  if (pid < 0) return Fail(ErrnoError(clone_errno, "clone into a new PID namespace"));
  PidNamespaceReaper reaper{Child(static_cast<pid_t>(pid), UniqueFd(pidfd)), std::move(ns)};
  if (!reaper.ns)
    return Fail(ErrnoError(ns_errno, "open", "/proc/thread-self/ns/pid_for_children"));
  return reaper;
}

void ClaimProcessForSpawn() {
  ResetSignalDispositions();
  g_claimed_bounding_set = ReadBoundingSet(LastCapability());
  g_process_claimed = true;
}

std::optional<std::string> FindExecutable(const std::string& name, const std::string& path_list,
                                          int cwd_fd, MissingNames* missing) {
  std::size_t start = 0;
  while (start <= path_list.size()) {
    std::size_t end = path_list.find(':', start);
    if (end == std::string::npos) end = path_list.size();
    // An empty entry means the current directory, as in execvp.
    std::string dir = end > start ? path_list.substr(start, end - start) : std::string(".");
    start = end + 1;
    std::string candidate = dir + "/" + name;
    int base = cwd_fd >= 0 ? cwd_fd : AT_FDCWD;
    struct stat dir_st;
    bool remembering = missing != nullptr && fstatat(base, dir.c_str(), &dir_st, 0) == 0 &&
                       missing->Covers(dir_st.st_dev);
    if (remembering && missing->Remembered(dir_st, name)) continue;
    struct stat st;
    if (fstatat(base, candidate.c_str(), &st, 0) != 0) {
      if (remembering && errno == ENOENT) missing->Remember(dir_st, name);
      continue;
    }
    if (S_ISREG(st.st_mode) && faccessat(base, candidate.c_str(), X_OK, AT_EACCESS) == 0)
      return candidate;
  }
  return std::nullopt;
}

}  // namespace sandbox::os
