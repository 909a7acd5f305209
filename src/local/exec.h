// Running commands on the host for the local backend: preparation shared by
// Exec, sessions and long-lived processes, and Exec's run-to-completion.
#ifndef SANDBOX_LOCAL_EXEC_H_
#define SANDBOX_LOCAL_EXEC_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <vector>

#include "local/files.h"
#include "os/capture.h"
#include "os/spawn.h"
#include "os/tree.h"
#include "os/unique_fd.h"
#include "sandbox/sandbox.h"

namespace sandbox::local {

// Every process tree a sandbox has running, so Close can kill them all.
// Thread-safe.
class LiveTrees {
 public:
  // Registers a tree; Unavailable once the sandbox is closed.
  Status Add(const os::ProcessTree* tree);
  void Remove(const os::ProcessTree* tree);
  // Kills every registered tree and refuses new ones.
  void CloseAll();
  bool closed() const;

 private:
  mutable std::mutex mu_;
  bool closed_ = false;
  std::set<const os::ProcessTree*> trees_;
};

// Registers a tree for its lifetime.
class LiveTreeGuard {
 public:
  LiveTreeGuard(LiveTrees& trees, const os::ProcessTree* tree) : trees_(&trees), tree_(tree) {}
  LiveTreeGuard(const LiveTreeGuard&) = delete;
  LiveTreeGuard& operator=(const LiveTreeGuard&) = delete;
  ~LiveTreeGuard() { trees_->Remove(tree_); }

 private:
  LiveTrees* trees_;
  const os::ProcessTree* tree_;
};

// What every command of one sandbox shares.
struct ExecConfig {
  const FileSystem* files = nullptr;
  std::vector<std::string> base_env;  // the complete base environment
  std::size_t output_limit = 1 << 20;
  std::chrono::milliseconds drain_grace{1000};
  os::TreeSource tree_source;  // how each command's process tree is contained
  bool drop_capabilities = false;  // commands start with no capability
  LiveTrees* trees = nullptr;
  // Programs missing from PATH directories on stable mounts; null: none.
  std::shared_ptr<os::MissingNames> missing_names;
};

// A command made ready to spawn: its working directory, resolved program
// and environment. When the program cannot be found, `not_found` holds the
// shell-like Result to return instead (exit 127).
struct PreparedCommand {
  os::UniqueFd cwd;
  std::string exec_path;
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::optional<Result> not_found;
};

// Validates `cmd` (no NUL bytes, env entries KEY=VALUE) and resolves its
// directory through the fence and its program through PATH.
Expected<PreparedCommand> PrepareCommand(const ExecConfig& config, const Command& cmd);

// The spawn of a prepared command (its program, arguments, environment and
// working directory; `prepared` gives up the first three) on the given
// standard descriptors.
os::SpawnSpec CommandSpawnSpec(const ExecConfig& config, PreparedCommand& prepared, int stdin_fd,
                               int stdout_fd, int stderr_fd);

// Moves what was captured of stdout and stderr, with its truncation flags,
// into `result`.
void TakeOutput(os::BoundedCapture& stdout_capture, os::BoundedCapture& stderr_capture,
                Result& result);

// Merges "KEY=VALUE" entries of `extra` over `base` (later keys win).
std::vector<std::string> MergeEnv(const std::vector<std::string>& base,
                                  const std::vector<std::string>& extra);

// The base environment of a sandbox: the allowed host variables, then
// `overrides`, with a default PATH when none is set.
std::vector<std::string> BuildBaseEnv(const std::vector<std::string>& allow,
                                      const std::vector<std::string>& overrides);

// The shell-like Result of a program that could not be executed: 127 when it
// does not exist, 126 when it exists but cannot be executed.
Result ExecFailureResult(const std::string& program, int err);

// Runs `cmd` to completion (the body of Sandbox::Exec).
Expected<Result> RunToCompletion(const ExecConfig& config, const Context& ctx, const Command& cmd);

// A stop_callback target: makes an eventfd readable when the Context is
// cancelled, so a poll loop wakes up.
class CancelEvent {
 public:
  static Expected<std::unique_ptr<CancelEvent>> ForContext(const Context& ctx);
  int fd() const { return fd_.get(); }

 private:
  CancelEvent() = default;
  void Fire();
  os::UniqueFd fd_;
  std::optional<std::stop_callback<std::function<void()>>> callback_;
};

}  // namespace sandbox::local

#endif  // SANDBOX_LOCAL_EXEC_H_
