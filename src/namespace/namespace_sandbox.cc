// NewNamespaceSandbox: StartBoundary(agent) + NewRemoteSandbox(stream).
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "namespace/boundary.h"
#include "os/syscalls.h"
#include "sandbox/namespace.h"
#include "sandbox/remote.h"

namespace sandbox {
namespace {

}  // namespace

Expected<std::unique_ptr<Sandbox>> NewNamespaceSandbox(const NamespaceOptions& options) {
  std::error_code ec;
  std::string workspace =
      std::filesystem::canonical(options.workspace.empty() ? "." : options.workspace, ec).string();
  if (ec)
    return Fail(Error::Code::NotFound, "workspace '" + options.workspace + "': " + ec.message());
  std::string agent_path = options.agent_path.empty() ? DefaultAgentPath() : options.agent_path;
  os::UniqueFd agent(::open(agent_path.c_str(), O_PATH | O_CLOEXEC));
  if (!agent)
    return Fail(
        Error(Error::Code::Unavailable,
              os::ErrnoError(errno, "open", agent_path).message() +
                  ": the namespace backend needs the static sandbox-agent binary (build it, "
                  "or point SANDBOX_AGENT at it)"));
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
    return Fail(os::ErrnoError(errno, "socketpair"));
  os::UniqueFd host_end(pair[0]), agent_end(pair[1]);

  ns::BoundaryConfig config;
  config.workspace = workspace;
  config.rootfs = options.rootfs;
  config.network = options.network;
  config.limits = {
      .memory_bytes = options.memory_bytes, .pids = options.pids, .cpus = options.cpus};
  config.program_fd = agent.get();
  // Each command's tree is contained in a cgroup of the one the boundary
  // delegates to the agent (fd 3), or, where none can be made, in a PID
  // namespace of its own below the agent. Commands drop every capability the
  // agent keeps (CAP_SYS_ADMIN for those PID namespaces, CAP_SETPCAP to empty
  // their bounding set).
  config.delegate_cgroup = true;
  config.argv = {"sandbox-agent", "--root", "/workspace",    "--workdir", "/workspace",
                 "--cgroup-fd",   "3",      "--containment", "pidns",     "--drop-capabilities"};
  config.stream_fd = agent_end.get();
  config.stderr_fd = options.agent_stderr_fd;
  auto started = ns::StartBoundary(config);
  if (!started) return Fail(started.error());
  agent_end.reset();
  auto boundary = std::make_shared<ns::Boundary>(std::move(*started));

  const ns::BoundaryFacts& facts = boundary->facts();
  std::string detail = facts.landlock_abi > 0 ? "landlock ABI " + std::to_string(facts.landlock_abi)
                                              : std::string("no landlock");
  detail += facts.root_mode ? ", ids mapped to an unprivileged range, idmapped workspace"
                            : ", rootless (one id mapped)";
  if (!facts.cgroups.empty()) detail += ", cgroup limits";
  detail += facts.delegated_cgroup.empty() ? ", a PID namespace per command"
                                           : ", a delegated cgroup per command";
  RemoteOptions remote;
  remote.read_fd = host_end.release();
  remote.write_fd = -1;
  remote.capabilities = Capabilities{.isolation = Isolation::Process,
                                     .network = facts.network,
                                     .backend = "namespace",
                                     .detail = detail};
  remote.on_close = [boundary] { return boundary->Terminate(); };
  if (options.memory_bytes) {
    // A command the kernel killed for the memory limit says so, as a shell
    // says "Killed": compare the boundary's OOM-kill count across results.
    auto seen = std::make_shared<std::atomic<std::uint64_t>>(boundary->OomKills().value_or(0));
    std::uint64_t limit = *options.memory_bytes;
    remote.on_exec_result = [boundary, seen, limit](Result& result) {
      auto kills = boundary->OomKills();
      if (!kills || *kills <= seen->exchange(*kills)) return;
      if (result.signal != SIGKILL) return;
      result.stderr_data += "sandbox: killed: the sandbox exceeded its memory limit (" +
                            std::to_string(limit) + " bytes)\n";
    };
  }
  return NewRemoteSandbox(std::move(remote));
}

}  // namespace sandbox
