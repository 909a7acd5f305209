#include "os/limits.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "os/syscalls.h"
#include "os/unique_fd.h"

namespace sandbox::os {
namespace {

constexpr const char* kGroupPrefix = "sandbox-ns.";
constexpr std::uint64_t kCpuPeriodUs = 100000;

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Status WriteCgroupFile(const std::string& path, const std::string& value) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return Fail(ErrnoError(errno, "open", path));
  if (write(fd.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size()))
    return Fail(ErrnoError(errno, "write", path + " <- " + value));
  return {};
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

bool HasWord(const std::string& text, const std::string& word) {
  std::istringstream in(text);
  std::string token;
  while (in >> token)
    if (token == word) return true;
  return false;
}

// Where this process sits in each cgroup hierarchy: the v2 directory and,
// per v1 controller, the v1 directory.
struct CgroupLayout {
  std::string v2_dir;                          // "" when cgroup2 is not mounted
  std::map<std::string, std::string> v1_dirs;  // controller -> directory
};

CgroupLayout DiscoverLayout() {
  // mount root + mount point of each hierarchy, from mountinfo.
  std::string v2_root, v2_mount;
  std::map<std::string, std::pair<std::string, std::string>>
      v1_mounts;  // controller -> root, mount
  std::ifstream mountinfo("/proc/self/mountinfo");
  for (std::string line; std::getline(mountinfo, line);) {
    std::istringstream in(line);
    std::string id, parent, dev, root, mount_point, options, field;
    in >> id >> parent >> dev >> root >> mount_point >> options;
    while (in >> field && field != "-") {
    }
    std::string fstype, source, super_options;
    in >> fstype >> source >> super_options;
    if (fstype == "cgroup2") {
      if (v2_mount.empty()) {
        v2_root = root;
        v2_mount = mount_point;
      }
    } else if (fstype == "cgroup") {
      std::istringstream opts(super_options);
      for (std::string opt; std::getline(opts, opt, ',');) {
        if (!v1_mounts.contains(opt)) v1_mounts[opt] = {root, mount_point};
      }
    }
  }
  auto join = [](const std::string& root, const std::string& mount, const std::string& path) {
    std::string relative = path;
    if (root != "/" && relative.starts_with(root)) relative = relative.substr(root.size());
    if (relative == "/") relative.clear();
    return mount + relative;
  };
  CgroupLayout layout;
  std::ifstream cgroups("/proc/self/cgroup");
  for (std::string line; std::getline(cgroups, line);) {
    auto first = line.find(':');
    auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (controllers.empty()) {
      if (!v2_mount.empty()) layout.v2_dir = join(v2_root, v2_mount, path);
      continue;
    }
    std::istringstream list(controllers);
    for (std::string controller; std::getline(list, controller, ',');) {
      auto mount = v1_mounts.find(controller);
      if (mount != v1_mounts.end())
        layout.v1_dirs[controller] = join(mount->second.first, mount->second.second, path);
    }
  }
  return layout;
}

// Chooses where `controller` works: v2 when our v2 cgroup enables it for its
// children, else v1.
ControllerSupport Locate(const CgroupLayout& layout, const std::string& controller) {
  ControllerSupport support{.controller = controller};
  std::string why_not_v2;
  if (layout.v2_dir.empty()) {
    why_not_v2 = "cgroup v2 is not mounted";
  } else if (HasWord(ReadSmallFile(layout.v2_dir + "/cgroup.subtree_control"), controller)) {
    support.usable = true;
    support.version = 2;
    support.parent = layout.v2_dir;
    return support;
  } else {
    why_not_v2 = "cgroup v2 (" + layout.v2_dir + ") does not enable '" + controller +
                 "' in cgroup.subtree_control";
  }
  auto v1 = layout.v1_dirs.find(controller);
  if (v1 == layout.v1_dirs.end()) {
    support.reason = why_not_v2 + ", and no cgroup v1 '" + controller + "' hierarchy is mounted";
    return support;
  }
  support.version = 1;
  support.parent = v1->second;
  support.usable = true;
  (void)why_not_v2;
  return support;
}

std::string GroupName() {
  static std::atomic<unsigned long> next{0};
  return std::string(kGroupPrefix) + std::to_string(getpid()) + "." + std::to_string(next++);
}

// SIGKILLs every process listed in `dir`/cgroup.procs (cgroup.kill on v2).
void KillAllIn(const std::string& dir) {
  if (Exists(dir + "/cgroup.kill")) {
    (void)WriteCgroupFile(dir + "/cgroup.kill", "1");
    return;
  }
  std::istringstream procs(ReadSmallFile(dir + "/cgroup.procs"));
  for (pid_t pid; procs >> pid;) kill(pid, SIGKILL);
}

// rmdir with retries: a cgroup stays busy for a moment after its last task
// is reaped.
Status RemoveDir(const std::string& dir) {
  for (int attempt = 0;; ++attempt) {
    if (rmdir(dir.c_str()) == 0 || errno == ENOENT) return {};
    if (errno != EBUSY || attempt >= 200) return Fail(ErrnoError(errno, "rmdir", dir));
    if (attempt % 20 == 0) KillAllIn(dir);
    struct timespec pause = {0, 5 * 1000 * 1000};
    nanosleep(&pause, nullptr);
  }
}

std::uint64_t ReadCounter(const std::string& path, const std::string& key) {
  std::istringstream in(ReadSmallFile(path));
  std::string name;
  std::uint64_t value;
  while (in >> name >> value)
    if (name == key) return value;
  return 0;
}

}  // namespace

std::vector<ControllerSupport> ProbeLimitSupport() {
  CgroupLayout layout = DiscoverLayout();
  std::vector<ControllerSupport> result;
  for (const char* controller : {"memory", "pids", "cpu"}) {
    ControllerSupport support = Locate(layout, controller);
    if (support.usable) {
      std::string scratch = support.parent + "/" + GroupName();
      if (mkdir(scratch.c_str(), 0755) != 0) {
        support.usable = false;
        support.reason = ErrnoError(errno, "mkdir", scratch).message() +
                         ": the cgroup this process is in is not writable (run as root, or "
                         "from a cgroup delegated to this user)";
      } else {
        rmdir(scratch.c_str());
      }
    }
    result.push_back(std::move(support));
  }
  return result;
}

Expected<LimitGroup> LimitGroup::Create(const ResourceLimits& limits) {
  if (!limits.any()) return LimitGroup();
  static std::once_flag swept;
  std::call_once(swept, [] { RemoveStaleLimitGroups(); });

  if (limits.memory_bytes && *limits.memory_bytes < (1u << 20))
    return Fail(Error::Code::InvalidArgument, "memory limit below 1 MiB cannot run anything");
  if (limits.pids && *limits.pids < 1)
    return Fail(Error::Code::InvalidArgument, "pids limit must be at least 1");
  if (limits.cpus && !(*limits.cpus > 0.0))
    return Fail(Error::Code::InvalidArgument, "cpus limit must be positive");

  CgroupLayout layout = DiscoverLayout();
  std::string name = GroupName();
  LimitGroup group;
  // parent directory -> index into group.dirs_
  auto dir_for = [&](const std::string& controller) -> Expected<std::size_t> {
    ControllerSupport support = Locate(layout, controller);
    if (!support.usable)
      return Fail(Error::Code::Unsupported, "cannot enforce a " + controller + " limit here: " +
                                                support.reason + " (see `sandbox doctor`)");
    std::string path = support.parent + "/" + name;
    for (std::size_t i = 0; i < group.dirs_.size(); ++i)
      if (group.dirs_[i].path == path) return i;
    if (mkdir(path.c_str(), 0755) != 0) {
      return Fail(Error(Error::Code::Unsupported,
                        "cannot enforce a " + controller +
                            " limit here: " + ErrnoError(errno, "mkdir", path).message() +
                            " (the cgroup this process is in is not writable: run as root or from "
                            "a delegated cgroup; see `sandbox doctor`)"));
    }
    group.dirs_.push_back({path, support.version});
    return group.dirs_.size() - 1;
  };

  if (limits.memory_bytes) {
    auto index = dir_for("memory");
    if (!index) return Fail(index.error());
    Dir& dir = group.dirs_[*index];
    dir.memory = true;
    std::string bytes = std::to_string(*limits.memory_bytes);
    if (dir.version == 2) {
      SANDBOX_RETURN_IF_ERROR(WriteCgroupFile(dir.path + "/memory.max", bytes));
      if (Exists(dir.path + "/memory.swap.max"))
        SANDBOX_RETURN_IF_ERROR(WriteCgroupFile(dir.path + "/memory.swap.max", "0"));
    } else {
      SANDBOX_RETURN_IF_ERROR(WriteCgroupFile(dir.path + "/memory.limit_in_bytes", bytes));
      // memsw = memory + swap: equal to the memory limit means no swap.
      if (Exists(dir.path + "/memory.memsw.limit_in_bytes"))
        SANDBOX_RETURN_IF_ERROR(WriteCgroupFile(dir.path + "/memory.memsw.limit_in_bytes", bytes));
      if (!Exists(dir.path + "/memory.oom_control"))
        return Fail(Error::Code::Unsupported,
                    "cgroup v1 memory.oom_control is missing in " + dir.path);
    }
  }
  if (limits.pids) {
    auto index = dir_for("pids");
    if (!index) return Fail(index.error());
    SANDBOX_RETURN_IF_ERROR(
        WriteCgroupFile(group.dirs_[*index].path + "/pids.max", std::to_string(*limits.pids)));
  }
  if (limits.cpus) {
    auto index = dir_for("cpu");
    if (!index) return Fail(index.error());
    const Dir& dir = group.dirs_[*index];
    auto quota = static_cast<std::uint64_t>(std::llround(*limits.cpus * kCpuPeriodUs));
    quota = std::max<std::uint64_t>(quota, 1000);
    if (dir.version == 2) {
      SANDBOX_RETURN_IF_ERROR(WriteCgroupFile(
          dir.path + "/cpu.max", std::to_string(quota) + " " + std::to_string(kCpuPeriodUs)));
    } else {
      SANDBOX_RETURN_IF_ERROR(
          WriteCgroupFile(dir.path + "/cpu.cfs_period_us", std::to_string(kCpuPeriodUs)));
      SANDBOX_RETURN_IF_ERROR(
          WriteCgroupFile(dir.path + "/cpu.cfs_quota_us", std::to_string(quota)));
    }
  }
  return group;
}

LimitGroup& LimitGroup::operator=(LimitGroup&& other) noexcept {
  if (this != &other) {
    (void)Remove();
    dirs_ = std::move(other.dirs_);
    other.dirs_.clear();
  }
  return *this;
}

LimitGroup::~LimitGroup() { (void)Remove(); }

Status LimitGroup::AddProcess(pid_t pid) const {
  for (const Dir& dir : dirs_)
    SANDBOX_RETURN_IF_ERROR(WriteCgroupFile(dir.path + "/cgroup.procs", std::to_string(pid)));
  return {};
}

Expected<std::uint64_t> LimitGroup::OomKills() const {
  for (const Dir& dir : dirs_) {
    if (!dir.memory) continue;
    if (dir.version == 2) return ReadCounter(dir.path + "/memory.events", "oom_kill");
    return ReadCounter(dir.path + "/memory.oom_control", "oom_kill");
  }
  return Fail(Error::Code::Unsupported, "no memory limit: OOM kills are not counted");
}

Status LimitGroup::Remove() {
  Status first;
  for (const Dir& dir : dirs_) {
    KillAllIn(dir.path);
    if (Status removed = RemoveDir(dir.path); !removed && first) first = removed;
  }
  dirs_.clear();
  return first;
}

std::vector<std::string> LimitGroup::paths() const {
  std::vector<std::string> out;
  for (const Dir& dir : dirs_) out.push_back(dir.path);
  return out;
}

int RemoveStaleLimitGroups() {
  CgroupLayout layout = DiscoverLayout();
  std::vector<std::string> parents;
  if (!layout.v2_dir.empty()) parents.push_back(layout.v2_dir);
  for (const auto& [controller, dir] : layout.v1_dirs) parents.push_back(dir);
  std::sort(parents.begin(), parents.end());
  parents.erase(std::unique(parents.begin(), parents.end()), parents.end());
  int removed = 0;
  for (const std::string& parent : parents) {
    DIR* listing = opendir(parent.c_str());
    if (!listing) continue;
    std::vector<std::string> stale;
    while (struct dirent* entry = readdir(listing)) {
      std::string_view name = entry->d_name;
      if (!name.starts_with(kGroupPrefix)) continue;
      name.remove_prefix(std::string_view(kGroupPrefix).size());
      pid_t owner = 0;
      for (char c : name.substr(0, name.find('.'))) {
        if (c < '0' || c > '9') {
          owner = -1;
          break;
        }
        owner = owner * 10 + (c - '0');
      }
      if (owner <= 0) continue;
      if (kill(owner, 0) == 0 || errno == EPERM) continue;  // the creator still runs
      stale.push_back(parent + "/" + entry->d_name);
    }
    closedir(listing);
    for (const std::string& dir : stale) {
      KillAllIn(dir);
      if (RemoveDir(dir)) ++removed;
    }
  }
  return removed;
}

}  // namespace sandbox::os
