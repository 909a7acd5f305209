#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <memory>

#include "local/exec.h"
#include "local/files.h"
#include "local/process.h"
#include "local/session.h"
#include "os/syscalls.h"
#include "os/tree.h"
#include "sandbox/local.h"

namespace sandbox {
namespace {

// Everything a local sandbox shares with its sessions and processes, which
// may outlive the sandbox object itself.
struct LocalState {
  explicit LocalState(local::FileSystem fs) : files(std::move(fs)) {}
  local::FileSystem files;
  local::LiveTrees trees;
  local::ExecConfig config;
};

class LocalSandbox final : public Sandbox,
                           public Appender,
                           public DirectoryMaker,
                           public LimitedReader,
                           public ProcessHost,
                           public Sessioner,
                           public WorkdirReporter {
 public:
  LocalSandbox(std::shared_ptr<LocalState> state, LocalOptions options)
      : state_(std::move(state)), options_(std::move(options)) {}
  ~LocalSandbox() override { (void)Close(); }

  Capabilities GetCapabilities() const override {
    return Capabilities{.isolation = Isolation::None,
                        .network = true,
                        .backend = "local",
                        .detail = "host subprocesses behind an openat2 path fence"};
  }

  Expected<Result> Exec(const Context& ctx, const Command& cmd) override {
    SANDBOX_RETURN_IF_ERROR(CheckOpen());
    return local::RunToCompletion(state_->config, ctx, cmd);
  }

  Expected<std::string> ReadFile(const Context& ctx, std::string_view path) override {
    SANDBOX_RETURN_IF_ERROR(Ready(ctx));
    return state_->files.ReadFile(path);
  }

  Status WriteFile(const Context& ctx, std::string_view path, std::string_view data,
                   FileMode mode) override {
    SANDBOX_RETURN_IF_ERROR(Ready(ctx));
    return state_->files.WriteFile(path, data, mode);
  }

  Status Remove(const Context& ctx, std::string_view path) override {
    SANDBOX_RETURN_IF_ERROR(Ready(ctx));
    return state_->files.Remove(path);
  }

  Expected<std::vector<DirEntry>> ListDir(const Context& ctx, std::string_view path) override {
    SANDBOX_RETURN_IF_ERROR(Ready(ctx));
    return state_->files.ListDir(path);
  }

  Status AppendFile(const Context& ctx, std::string_view path, std::string_view data,
                    FileMode mode) override {
    SANDBOX_RETURN_IF_ERROR(Ready(ctx));
    return state_->files.AppendFile(path, data, mode);
  }

  Status MakeDirAll(const Context& ctx, std::string_view path, FileMode mode) override {
    SANDBOX_RETURN_IF_ERROR(Ready(ctx));
    return state_->files.MakeDirAll(path, mode);
  }

  Expected<LimitedRead> ReadFileLimit(const Context& ctx, std::string_view path,
                                      std::int64_t max) override {
    SANDBOX_RETURN_IF_ERROR(Ready(ctx));
    return state_->files.ReadFileLimit(path, max);
  }

  Expected<std::unique_ptr<Process>> StartProcess(const Context& ctx, const Command& cmd) override {
    SANDBOX_RETURN_IF_ERROR(CheckOpen());
    return local::StartLocalProcess(Config(), ctx, cmd, options_.stderr_ring_bytes);
  }

  Expected<std::unique_ptr<Session>> NewSession(const Context& ctx) override {
    SANDBOX_RETURN_IF_ERROR(CheckOpen());
    return local::StartLocalSession(Config(), ctx, options_.session_shell);
  }

  std::string Workdir() const override { return state_->files.workdir(); }

  Status Close() override {
    state_->trees.CloseAll();
    return {};
  }

 private:
  std::shared_ptr<const local::ExecConfig> Config() const {
    return std::shared_ptr<const local::ExecConfig>(state_, &state_->config);
  }

  Status CheckOpen() const {
    if (state_->trees.closed()) return Fail(Error::Code::Unavailable, "the sandbox is closed");
    return {};
  }

  Status Ready(const Context& ctx) const {
    SANDBOX_RETURN_IF_ERROR(CheckOpen());
    return ctx.Check();
  }

  std::shared_ptr<LocalState> state_;
  LocalOptions options_;
};

}  // namespace

Expected<std::unique_ptr<Sandbox>> NewLocalSandbox(const LocalOptions& options) {
  if (options.root.empty())
    return Fail(Error::Code::InvalidArgument, "the local backend needs a root directory");
  if (options.output_limit == 0)
    return Fail(Error::Code::InvalidArgument, "output_limit must be positive");
  auto files = local::FileSystem::Open(options.root, options.workdir, options.max_read_bytes,
                                         options.fence_without_openat2);
  if (!files) return Fail(files.error());
  std::optional<os::Containment> prefer;
  if (options.containment == LocalOptions::Containment::kCgroup) prefer = os::Containment::kCgroup;
  if (options.containment == LocalOptions::Containment::kPidNamespace)
    prefer = os::Containment::kPidNamespace;
  if (options.cgroup_dir_fd >= 0 && prefer == os::Containment::kPidNamespace)
    return Fail(Error::Code::InvalidArgument,
                "cgroup_dir_fd needs cgroup containment, not a PID namespace");
  auto tree_source = [&]() -> Expected<os::TreeSource> {
    if (options.cgroup_dir_fd < 0) return os::ChooseTreeSource(prefer);
    os::UniqueFd dir(fcntl(options.cgroup_dir_fd, F_DUPFD_CLOEXEC, 0));
    if (!dir) return Fail(os::ErrnoError(errno, "dup", "cgroup_dir_fd"));
    auto pool = os::CgroupPool::InDirectory(std::move(dir));
    if (!pool) return Fail(pool.error());
    return os::TreeSource{os::Containment::kCgroup, std::move(*pool)};
  }();
  if (!tree_source)
    return Fail(Error::Code::Unsupported,
                "the local backend must be able to kill every command's whole process tree: " +
                    tree_source.error().message());
  if (options.shared_pid_namespace && tree_source->containment == os::Containment::kCgroup) {
    auto reaper = os::StartPidNamespaceReaper();
    if (!reaper) return Fail(reaper.error());
    tree_source->pid_namespace = std::make_shared<os::PidNamespaceReaper>(std::move(*reaper));
  }

  std::vector<dev_t> stable_devices;
  for (const std::string& mount : options.stable_mounts) {
    struct stat st;
    if (mount.empty() || mount[0] != '/')
      return Fail(Error::Code::InvalidArgument,
                  "stable mount '" + mount + "' is not an absolute path");
    if (::stat(mount.c_str(), &st) != 0) return Fail(os::ErrnoError(errno, "stat", mount));
    if (!S_ISDIR(st.st_mode))
      return Fail(Error::Code::NotADirectory, "stable mount '" + mount + "' is not a directory");
    stable_devices.push_back(st.st_dev);
  }

  auto state = std::make_shared<LocalState>(std::move(*files));
  state->config.files = &state->files;
  state->config.trees = &state->trees;
  state->config.base_env = local::BuildBaseEnv(options.env_allow, options.base_env);
  state->config.output_limit = options.output_limit;
  state->config.drain_grace = options.drain_grace;
  state->config.tree_source = std::move(*tree_source);
  state->config.drop_capabilities = options.drop_capabilities;
  if (!stable_devices.empty())
    state->config.missing_names =
        std::make_shared<os::MissingNames>(std::move(stable_devices), std::chrono::seconds(5));
  return std::unique_ptr<Sandbox>(std::make_unique<LocalSandbox>(std::move(state), options));
}

}  // namespace sandbox
