#include "namespace/boundary.h"

#include <linux/sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <tuple>

#include "os/capabilities.h"
#include "os/landlock.h"
#include "os/launcher.h"
#include "os/namespaces.h"
#include "os/seccomp.h"
#include "os/syscalls.h"

namespace sandbox::ns {
namespace {

constexpr const char* kDefaultPath =
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
constexpr std::uint32_t kMappedIds = 65536;

// The id-mapping user namespace of an idmapped workspace, one per mapping,
// kept for the life of the process (creating one costs a clone).
Expected<int> IdmapNamespace(uid_t disk_uid, gid_t disk_gid, std::uint32_t host_id) {
  static std::mutex mu;
  static std::map<std::tuple<uid_t, gid_t, std::uint32_t>, os::UniqueFd> cache;
  std::lock_guard lock(mu);
  auto key = std::make_tuple(disk_uid, disk_gid, host_id);
  if (auto it = cache.find(key); it != cache.end()) return it->second.get();
  // Inside ids of the mount's namespace are ids on disk; outside are the ids
  // the boundary's processes have. Disk owner <-> boundary root.
  auto fd =
      os::MakeUserNamespaceFd(std::to_string(disk_uid) + " " + std::to_string(host_id) + " 1\n",
                              std::to_string(disk_gid) + " " + std::to_string(host_id) + " 1\n");
  if (!fd) return Fail(fd.error());
  int raw = fd->get();
  cache.emplace(key, std::move(*fd));
  return raw;
}

// The fixed part of the root: workspace, /tmp, /proc, /dev.
void AddFixedMounts(std::vector<os::MountStep>& steps, const std::string& workspace,
                    int workspace_fd) {
  using Kind = os::MountStep::Kind;
  steps.push_back({.kind = Kind::kBindWritable,
                   .source = workspace,
                   .target = "/workspace",
                   .fd = workspace_fd});
  steps.push_back({.kind = Kind::kTmpfs, .target = "/tmp", .data = "mode=1777"});
  steps.push_back({.kind = Kind::kProc, .target = "/proc"});
  // As Docker's readonlyPaths: kernel knobs stay readable, never writable.
  for (const char* path :
       {"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"})
    steps.push_back({.kind = Kind::kReadOnlyOver, .target = path});
  steps.push_back({.kind = Kind::kTmpfs, .target = "/dev", .data = "mode=0755"});
  for (const char* node : {"null", "zero", "full", "random", "urandom", "tty"}) {
    std::string path = std::string("/dev/") + node;
    steps.push_back({.kind = Kind::kBindDevice, .source = path, .target = path});
  }
  steps.push_back({.kind = Kind::kSymlink, .source = "/proc/self/fd", .target = "/dev/fd"});
  steps.push_back({.kind = Kind::kSymlink, .source = "/proc/self/fd/0", .target = "/dev/stdin"});
  steps.push_back({.kind = Kind::kSymlink, .source = "/proc/self/fd/1", .target = "/dev/stdout"});
  steps.push_back({.kind = Kind::kSymlink, .source = "/proc/self/fd/2", .target = "/dev/stderr"});
  steps.push_back({.kind = Kind::kTmpfs, .target = "/dev/shm", .data = "mode=1777"});
  steps.push_back({.kind = Kind::kRemountReadOnly, .target = "/dev"});
}

std::vector<os::LandlockPathRule> LandlockRules() {
  std::uint64_t read = os::LandlockReadOnlyFs();
  std::uint64_t all = ~std::uint64_t{0};
  return {
      {"/", read},
      {"/workspace", all},
      {"/tmp", all},
      {"/dev/shm", all},
      // Device nodes: write (to /dev/null, ...) and ioctl (terminals), no creation
      // (the /dev tmpfs is read-only anyway).
      {"/dev", read | os::kLandlockFsWriteFile | os::kLandlockFsTruncate | os::kLandlockFsIoctlDev},
  };
}

}  // namespace

Boundary::~Boundary() { (void)Terminate(); }

Status Boundary::Kill() const {
  if (child_.pid() <= 0 || child_.reaped()) return {};
  return child_.Kill();
}

Expected<ExitStatus> Boundary::Wait() {
  if (child_.pid() <= 0)
    return Fail(Error::Code::Unavailable, "the boundary was moved or never started");
  return child_.Wait();
}

Status Boundary::Terminate() {
  Status result;
  if (child_.pid() > 0 && !child_.reaped()) {
    // PID 1's death makes the kernel SIGKILL and reap everything else in its
    // PID namespace before PID 1 itself can be reaped.
    if (Status killed = child_.Kill(); !killed) result = killed;
    if (auto waited = child_.Wait(); !waited && result) result = Fail(waited.error());
  }
  if (Status removed = limits_.Remove(); !removed && result) result = removed;
  if (Status removed = delegated_.Remove(); !removed && result) result = removed;
  return result;
}

Expected<Boundary> StartBoundary(const BoundaryConfig& config) {
  if (config.workspace.empty())
    return Fail(Error::Code::InvalidArgument, "namespace boundary: no workspace directory");
  struct stat st;
  if (stat(config.workspace.c_str(), &st) != 0)
    return Fail(os::ErrnoError(errno, "stat", config.workspace));
  if (!S_ISDIR(st.st_mode))
    return Fail(Error::Code::NotADirectory,
                "workspace '" + config.workspace + "' is not a directory");
  if (config.program_fd < 0 || config.argv.empty() || config.stream_fd < 0)
    return Fail(Error::Code::InvalidArgument,
                "namespace boundary: program_fd, argv and stream_fd are required");
  if (!os::HasMountSetattr())
    return Fail(Error::Code::Unsupported,
                "the namespace backend needs Linux >= 5.12 (mount_setattr); this kernel lacks it");

  Boundary boundary;
  const bool root = geteuid() == 0;
  boundary.facts_.root_mode = root;
  boundary.facts_.network = config.network;

  // Host-side resources first: a failure here leaves nothing behind.
  auto limits = os::LimitGroup::Create(config.limits);
  if (!limits) return Fail(limits.error());
  boundary.limits_ = std::move(*limits);
  boundary.facts_.cgroups = boundary.limits_.paths();

  if (config.delegate_cgroup && !boundary.limits_.has_v2()) {
    // Best effort: without it the agent falls back to a PID namespace per
    // command (still contained, only slower).
    uid_t owner_uid = root ? config.host_id_base : geteuid();
    gid_t owner_gid = root ? config.host_id_base : getegid();
    if (auto pool = os::CgroupPool::Shared()) {
      if (auto delegated = (*pool)->Delegate(owner_uid, owner_gid)) {
        boundary.delegated_ = std::move(*delegated);
        boundary.facts_.delegated_cgroup = boundary.delegated_.path();
      }
    }
  }

  auto filter = os::BuildBoundarySeccompFilter();
  if (!filter) return Fail(filter.error());

  os::ChildPlan plan;
  plan.clone_flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS;
  if (!config.network) {
    plan.clone_flags |= CLONE_NEWNET;
    plan.bring_up_loopback = true;
  }
  plan.new_cgroup_namespace = true;

  os::UniqueFd workspace_tree;
  if (root) {
    std::string range =
        "0 " + std::to_string(config.host_id_base) + " " + std::to_string(kMappedIds) + "\n";
    plan.uid_map = range;
    plan.gid_map = range;
    plan.clear_supplementary_groups = true;
    auto userns = IdmapNamespace(config.workspace_uid.value_or(geteuid()),
                                 config.workspace_gid.value_or(getegid()), config.host_id_base);
    if (!userns) return Fail(userns.error());
    auto tree = os::MakeIdmappedTree(config.workspace, *userns);
    if (!tree) return Fail(tree.error());
    workspace_tree = std::move(*tree);
    boundary.facts_.idmapped_workspace = true;
  } else {
    plan.child_writes_own_maps = true;
    plan.uid_map = "0 " + std::to_string(geteuid()) + " 1\n";
    plan.gid_map = "0 " + std::to_string(getegid()) + " 1\n";
  }

  auto root_steps = os::RootMountSteps(config.rootfs);
  if (!root_steps) return Fail(root_steps.error());
  plan.mounts = std::move(*root_steps);
  AddFixedMounts(plan.mounts, config.workspace, workspace_tree.get());
  plan.workdir = "/workspace";
  plan.hostname = config.hostname;

  struct rlimit nofile;
  getrlimit(RLIMIT_NOFILE, &nofile);
  rlim_t open_files = std::min<rlim_t>(nofile.rlim_max, config.max_open_files);
  plan.rlimits = {{RLIMIT_CORE, 0, 0}, {RLIMIT_NOFILE, open_files, open_files}};
  plan.keep_capabilities = config.agent_capabilities;
  plan.last_capability = os::LastCapability();

  int abi = os::LandlockAbi();
  boundary.facts_.landlock_abi = abi;
  if (abi > 0) {
    plan.landlock_handled_fs = os::LandlockHandledFs(abi);
    plan.landlock_scoped = os::LandlockScopes(abi);
    plan.landlock_rules = LandlockRules();
  }
  plan.seccomp_filter = std::move(*filter);

  plan.exec_fd = config.program_fd;
  plan.argv = config.argv;
  plan.env = config.env.empty() ? std::vector<std::string>{kDefaultPath} : config.env;
  plan.stdio_fd = config.stream_fd;
  plan.stderr_fd = config.stderr_fd;
  if (boundary.delegated_.valid()) {
    plan.extra_fd = boundary.delegated_.dir_fd();
    // What a cgroup delegatee does: make and remove child cgroups, read and
    // write their files.
    plan.extra_fd_landlock_access = os::kLandlockFsReadFile | os::kLandlockFsWriteFile |
                                    os::kLandlockFsReadDir | os::kLandlockFsMakeDir |
                                    os::kLandlockFsRemoveDir;
  }

  std::optional<Expected<os::StartedChild>> cloned;
  os::RunOnLauncherThread([&] { cloned.emplace(os::CloneIntoNamespaces(plan)); });
  Expected<os::StartedChild>& started = *cloned;
  if (!started) return Fail(started.error());
  // From here the child is owned: any early return kills and reaps it.
  boundary.child_ = os::Child(started->pid, std::move(started->pidfd));

  if (root) {
    SANDBOX_RETURN_IF_ERROR(os::WriteIdMaps(started->pid, plan.uid_map, plan.gid_map, false));
  }
  SANDBOX_RETURN_IF_ERROR(boundary.limits_.AddProcess(started->pid));
  // Before the child unshares its cgroup namespace: that namespace's root is
  // then the delegated cgroup, and nothing above it is visible inside.
  if (boundary.delegated_.valid())
    SANDBOX_RETURN_IF_ERROR(boundary.delegated_.AddProcess(started->pid));
  SANDBOX_RETURN_IF_ERROR(os::ReleaseAndAwaitExec(*started, plan));
  return boundary;
}

}  // namespace sandbox::ns
