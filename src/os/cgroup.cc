#include "os/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

#include "os/syscalls.h"

namespace sandbox::os {
namespace {

constexpr std::string_view kPoolPrefix = "sandbox.";

// The mount point of the first cgroup2 file system, or "".
std::string FindCgroup2Mount() {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // Fields: id parent major:minor root mount-point options ... - fstype source super
    auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string fstype;
    tail >> fstype;
    if (fstype != "cgroup2") continue;
    std::istringstream head(line.substr(0, dash));
    std::string id, parent, dev, root, mount_point;
    head >> id >> parent >> dev >> root >> mount_point;
    return mount_point;
  }
  return "";
}

// This process's cgroup v2 path ("0::/path"), or "".
std::string OwnCgroup2Path() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return "";
}

bool ReadPopulated(int events_fd) {
  char buffer[256];
  long n = pread(events_fd, buffer, sizeof buffer - 1, 0);
  if (n <= 0) return false;
  buffer[n] = '\0';
  return std::strstr(buffer, "populated 1") != nullptr;
}

Status WriteKill(int kill_fd) {
  long n;
  do {
    n = pwrite(kill_fd, "1", 1, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Fail(ErrnoError(errno, "write cgroup.kill"));
  return {};
}

bool WaitEmpty(int events_fd, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (ReadPopulated(events_fd)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) return false;
    pollfd pfd{events_fd, POLLPRI, 0};
    // cgroup.events signals a change with POLLPRI; cap each wait so a missed
    // notification costs at most 10 ms.
    poll(&pfd, 1, static_cast<int>(std::min<long>(left, 10)));
  }
  return true;
}

// "<pid namespace inode>.<pid>": a pid means something only in its own PID
// namespace, so a pool is judged stale only by a process of that namespace
// (a process inside a sandbox's PID namespace must never take a live host
// process's pool for dead).
std::string PidNamespaceTag() {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) return "0";
  return std::to_string(st.st_ino);
}

std::string OwnPoolTag() { return PidNamespaceTag() + "." + std::to_string(getpid()); }

// Kills everything in the cgroup `name` under `parent_fd`, then removes it
// after its child cgroups (depth first; a delegated cgroup holds the trees
// its agent made). Best effort: returns false if it could not be removed.
bool RemoveCgroupTree(int parent_fd, const char* name, int depth = 0) {
  int raw = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (raw < 0) return errno == ENOENT;
  UniqueFd dir_fd(raw);
  if (depth == 0) {
    // cgroup.kill kills the whole subtree at once.
    UniqueFd kill_fd(openat(raw, "cgroup.kill", O_WRONLY | O_CLOEXEC));
    UniqueFd events(openat(raw, "cgroup.events", O_RDONLY | O_CLOEXEC));
    if (kill_fd && events && ReadPopulated(events.get())) {
      (void)WriteKill(kill_fd.get());
      WaitEmpty(events.get(), 500);
    }
  }
  // Bounded: cgroup nesting is bounded by the kernel, and ours is 2 deep.
  if (depth < 8) {
    int listing = fcntl(raw, F_DUPFD_CLOEXEC, 0);
    if (DIR* children = listing >= 0 ? fdopendir(listing) : nullptr) {
      while (dirent* child = readdir(children)) {
        if (child->d_type != DT_DIR || child->d_name[0] == '.') continue;
        RemoveCgroupTree(raw, child->d_name, depth + 1);
      }
      closedir(children);
    } else if (listing >= 0) {
      close(listing);
    }
  }
  return unlinkat(parent_fd, name, AT_REMOVEDIR) == 0 || errno == ENOENT;
}

// Unsupported unless `dir` is a cgroup v2 directory with cgroup.kill.
Status CheckCgroupKill(int dir, const std::string& where) {
  if (faccessat(dir, "cgroup.kill", F_OK, 0) < 0)
    return Fail(Error::Code::Unsupported,
                "the cgroup v2 directory " + where + " has no cgroup.kill (needs Linux >= 5.14)");
  return {};
}

}  // namespace

CgroupLease& CgroupLease::operator=(CgroupLease&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = std::move(other.pool_);
    name_ = std::move(other.name_);
    dir_ = std::move(other.dir_);
    procs_ = std::move(other.procs_);
    kill_ = std::move(other.kill_);
    events_ = std::move(other.events_);
  }
  return *this;
}

CgroupLease::~CgroupLease() { Release(); }

void CgroupLease::Release() {
  if (!dir_.valid()) return;
  if (Populated()) KillAndWait(200);
  if (pool_) {
    pool_->Return(CgroupPool::Idle{std::move(name_), std::move(dir_), std::move(procs_),
                                   std::move(kill_), std::move(events_)});
  }
  pool_.reset();
}

Status CgroupLease::Kill() const {
  if (!kill_.valid()) return Fail(Error::Code::Internal, "cgroup lease is empty");
  return WriteKill(kill_.get());
}

bool CgroupLease::Populated() const { return events_.valid() && ReadPopulated(events_.get()); }

bool CgroupLease::KillAndWait(int timeout_ms) const {
  if (!Kill()) return false;
  return WaitEmpty(events_.get(), timeout_ms);
}

Expected<std::shared_ptr<CgroupPool>> CgroupPool::Shared() {
  static std::mutex mu;
  static std::shared_ptr<CgroupPool> pool;
  static std::string failure;
  std::lock_guard lock(mu);
  if (pool) return pool;
  if (!failure.empty()) return Fail(Error::Code::Unsupported, failure);

  std::string mount = FindCgroup2Mount();
  std::string own = OwnCgroup2Path();
  if (mount.empty() || own.empty()) {
    failure = "no cgroup v2 hierarchy is mounted here, so process trees cannot be contained";
    return Fail(Error::Code::Unsupported, failure);
  }
  std::string parent_path = mount + (own == "/" ? "" : own);
  int parent = open(parent_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (parent < 0) {
    failure = ErrnoError(errno, "open cgroup", parent_path).message();
    return Fail(Error::Code::Unsupported, failure);
  }
  UniqueFd parent_fd(parent);
  RemoveStalePools(parent_fd.get());

  std::string name = std::string(kPoolPrefix) + OwnPoolTag();
  if (mkdirat(parent_fd.get(), name.c_str(), 0755) < 0 && errno != EEXIST) {
    failure = "cannot create a cgroup under " + parent_path + " (" + std::strerror(errno) +
              "): run as root or inside a delegated cgroup v2 subtree";
    return Fail(Error::Code::Unsupported, failure);
  }
  int dir = openat(parent_fd.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) {
    failure = ErrnoError(errno, "open cgroup", parent_path + "/" + name).message();
    return Fail(Error::Code::Unsupported, failure);
  }
  if (Status has_kill = CheckCgroupKill(dir, "at " + mount); !has_kill) {
    unlinkat(parent_fd.get(), name.c_str(), AT_REMOVEDIR);
    close(dir);
    failure = has_kill.error().message();
    return Fail(Error::Code::Unsupported, failure);
  }
  pool = std::make_shared<CgroupPool>(parent_path + "/" + name, UniqueFd(dir));
  return pool;
}

Expected<std::shared_ptr<CgroupPool>> CgroupPool::InDirectory(UniqueFd dir) {
  struct statfs fs;
  if (!dir || fstatfs(dir.get(), &fs) != 0 || fs.f_type != CGROUP2_SUPER_MAGIC)
    return Fail(Error::Code::Unsupported, "the given directory is not a cgroup v2 directory");
  SANDBOX_RETURN_IF_ERROR(CheckCgroupKill(dir.get(), "given"));
  return std::make_shared<CgroupPool>("", std::move(dir));
}

Expected<DelegatedCgroup> CgroupPool::Delegate(uid_t uid, gid_t gid) {
  std::string name;
  {
    std::lock_guard lock(mu_);
    name = "d" + std::to_string(next_delegated_id_++);
  }
  std::string where = path_ + "/" + name;
  if (mkdirat(dir_.get(), name.c_str(), 0755) < 0)
    return Fail(ErrnoError(errno, "mkdir cgroup", where));
  UniqueFd dir(openat(dir_.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) {
    Status failed = Fail(ErrnoError(errno, "open cgroup", where));
    unlinkat(dir_.get(), name.c_str(), AT_REMOVEDIR);
    return Fail(failed.error());
  }
  DelegatedCgroup delegated(shared_from_this(), name, where, std::move(dir));
  // The delegation the cgroup v2 documentation describes: the directory and
  // the files through which a delegatee manages its subtree.
  for (const char* file : {"", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control"}) {
    if (fchownat(delegated.dir_fd(), file, uid, gid, *file ? 0 : AT_EMPTY_PATH) != 0)
      return Fail(ErrnoError(errno, "chown cgroup", where + "/" + file));
  }
  return delegated;
}

DelegatedCgroup& DelegatedCgroup::operator=(DelegatedCgroup&& other) noexcept {
  if (this != &other) {
    (void)Remove();
    pool_ = std::move(other.pool_);
    name_ = std::move(other.name_);
    path_ = std::move(other.path_);
    dir_ = std::move(other.dir_);
  }
  return *this;
}

Status DelegatedCgroup::AddProcess(pid_t pid) const {
  UniqueFd procs(openat(dir_.get(), "cgroup.procs", O_WRONLY | O_CLOEXEC));
  if (!procs) return Fail(ErrnoError(errno, "open", path_ + "/cgroup.procs"));
  std::string text = std::to_string(pid);
  if (write(procs.get(), text.data(), text.size()) != static_cast<long>(text.size()))
    return Fail(ErrnoError(errno, "write", path_ + "/cgroup.procs"));
  return {};
}

Status DelegatedCgroup::Remove() {
  if (!dir_) return {};
  dir_.reset();
  bool removed = RemoveCgroupTree(pool_->dir_.get(), name_.c_str());
  pool_.reset();
  if (!removed) return Fail(ErrnoError(errno, "remove cgroup", path_));
  return {};
}

Expected<CgroupLease> CgroupPool::Acquire() {
  std::unique_lock lock(mu_);
  for (auto it = idle_.rbegin(); it != idle_.rend(); ++it) {
    if (ReadPopulated(it->events.get())) continue;
    Idle idle = std::move(*it);
    idle_.erase(std::next(it).base());
    return CgroupLease(shared_from_this(), std::move(idle.name), std::move(idle.dir),
                       std::move(idle.procs), std::move(idle.kill), std::move(idle.events));
  }
  std::string name = "t" + std::to_string(next_id_++);
  lock.unlock();

  if (mkdirat(dir_.get(), name.c_str(), 0755) < 0 && errno != EEXIST)
    return Fail(ErrnoError(errno, "mkdir cgroup", path_ + "/" + name));
  int dir = openat(dir_.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return Fail(ErrnoError(errno, "open cgroup", path_ + "/" + name));
  UniqueFd dir_fd(dir);
  UniqueFd procs(openat(dir, "cgroup.procs", O_WRONLY | O_CLOEXEC));
  UniqueFd kill(openat(dir, "cgroup.kill", O_WRONLY | O_CLOEXEC));
  UniqueFd events(openat(dir, "cgroup.events", O_RDONLY | O_CLOEXEC));
  if (!procs || !kill || !events)
    return Fail(ErrnoError(errno, "open cgroup files", path_ + "/" + name));
  return CgroupLease(shared_from_this(), std::move(name), std::move(dir_fd), std::move(procs),
                     std::move(kill), std::move(events));
}

void CgroupPool::Return(Idle idle) {
  std::lock_guard lock(mu_);
  idle_.push_back(std::move(idle));
}

CgroupPool::~CgroupPool() {
  for (Idle& idle : idle_) {
    if (ReadPopulated(idle.events.get())) {
      WriteKill(idle.kill.get());
      WaitEmpty(idle.events.get(), 500);
    }
    unlinkat(dir_.get(), idle.name.c_str(), AT_REMOVEDIR);
  }
  // Fails while a lease is still out; the next process's stale-pool sweep
  // removes the directory then.
  if (!path_.empty()) rmdir(path_.c_str());
}

void RemoveStalePools(int parent_fd) {
  int dup_fd = fcntl(parent_fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return;
  DIR* dir = fdopendir(dup_fd);
  if (!dir) {
    close(dup_fd);
    return;
  }
  while (dirent* entry = readdir(dir)) {
    std::string_view name = entry->d_name;
    if (name.rfind(kPoolPrefix, 0) != 0) continue;
    std::string_view tag = name.substr(kPoolPrefix.size());
    std::string ns_prefix = PidNamespaceTag() + ".";
    if (tag.rfind(ns_prefix, 0) != 0) continue;  // another PID namespace's pool
    std::string pid_text(tag.substr(ns_prefix.size()));
    char* end = nullptr;
    long pid = std::strtol(pid_text.c_str(), &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    if (pid == getpid() || kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    RemoveCgroupTree(parent_fd, entry->d_name);
  }
  closedir(dir);
}

}  // namespace sandbox::os
