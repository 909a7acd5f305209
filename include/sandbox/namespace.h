// The `namespace` backend (Isolation::Process): the sandbox agent as PID 1 of
// fresh Linux namespaces. This header holds what front ends (the CLI's run,
// doctor and gc) need without knowing the boundary's internals
// (src/namespace/boundary.h).
#ifndef SANDBOX_NAMESPACE_H_
#define SANDBOX_NAMESPACE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sandbox/error.h"
#include "sandbox/sandbox.h"

namespace sandbox {

// Options of a namespace sandbox.
struct NamespaceOptions {
  std::string workspace;  // host directory seen read-write at /workspace
  std::string rootfs;     // unpacked root filesystem; "" for the host's system directories
  bool network = false;   // share the host's network (off: only `lo`)
  // Limits; an explicit limit that cannot be enforced here is an error.
  std::optional<std::uint64_t> memory_bytes;
  std::optional<std::uint64_t> pids;
  std::optional<double> cpus;
  // The static sandbox-agent executable run as PID 1; "" for $SANDBOX_AGENT,
  // else "sandbox-agent" beside the running executable.
  std::string agent_path;
  // Where the agent's diagnostics go (borrowed fd); -1 for nowhere.
  int agent_stderr_fd = -1;
};

// Starts a namespace boundary running the agent as PID 1 and returns the
// Sandbox talking to it (Isolation::Process; every optional capability of
// the remote backend; WorkdirReporter says /workspace). Close() or the
// destructor kills everything inside and removes the cgroups. Fails with
// Unsupported (saying why) where the backend cannot run or a requested limit
// cannot be enforced. Thread-safe. The boundary dies with this process, even
// when it is killed with SIGKILL.
Expected<std::unique_ptr<Sandbox>> NewNamespaceSandbox(const NamespaceOptions& options);

// One piece of the backend on this machine, for `sandbox doctor`.
struct NamespaceCheck {
  std::string name;  // "user namespaces", "landlock", "--memory limit", ...
  bool ok = false;
  bool required = false;  // the backend cannot run without it
  std::string detail;     // what was found, or why not and what would fix it
};

// What works here: user namespaces, mount_setattr (idmapped mounts), seccomp,
// Landlock (and its ABI), and which of the memory/pids/cpu limits can be
// enforced (cgroup v1 or v2, and where). Never fails; creates and removes a
// throwaway user namespace and scratch cgroups. Thread-safe.
std::vector<NamespaceCheck> ProbeNamespaceBackend();

// "" when the backend can run here, else the first failed required check
// (user namespaces, mount_setattr, seccomp; cheaper than the full probe).
std::string NamespaceUnavailableReason();

// Removes what boundaries of dead processes left behind: their cgroups (their
// processes and mounts died with them). For `sandbox gc`. Returns how many
// cgroups were removed.
int RemoveNamespaceLeftovers();

}  // namespace sandbox

#endif  // SANDBOX_NAMESPACE_H_
