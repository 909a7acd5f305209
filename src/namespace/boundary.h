// The namespace backend's boundary: a program (the sandbox agent) started as
// PID 1 of fresh user, mount, pid, net, ipc, uts and cgroup namespaces, in a
// read-only root with the workspace at /workspace, under seccomp, Landlock,
// rlimits and cgroup limits, talking to the host over one stream fd.
//
// Identity inside (DESIGN §5):
// - Everything inside runs as uid/gid 0 of the boundary's user namespace: the
//   agent keeps a few capabilities in that namespace (BoundaryConfig::
//   agent_capabilities), commands drop all of them (os::DropAllCapabilities)
//   and, under no_new_privs, can never regain one.
// - As an unprivileged user that id is the only one the kernel lets us map:
//   0 inside is the invoking user outside, so files created in /workspace are
//   the user's and nothing the user cannot read is readable inside.
// - As root, 0..65535 inside map to an unprivileged host range (host_id_base),
//   so nothing inside is host root: root-only host files (/etc/shadow) are
//   unreadable, host-root-owned files appear as nobody. The workspace gets an
//   idmapped mount translating the range's 0 to workspace_uid/gid on disk,
//   so what commands create there belongs to the invoking user.
// - The agent is protected from the commands that share its uid by being
//   PID 1 (the kernel drops every signal from inside the namespace that PID 1
//   has no handler for; SIGKILL/SIGSTOP from inside never arrive), by seccomp
//   (ptrace, process_vm_*, pidfd_getfd, kcmp, prlimit64 on another pid) and by
//   PR_SET_DUMPABLE 0, which the agent must set itself first thing after exec
//   (the kernel resets it at exec): /proc/1/{mem,fd,environ,...} then need
//   CAP_SYS_PTRACE, which commands do not have.
#ifndef SANDBOX_NAMESPACE_BOUNDARY_H_
#define SANDBOX_NAMESPACE_BOUNDARY_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "os/cgroup.h"
#include "os/limits.h"
#include "os/spawn.h"
#include "os/unique_fd.h"
#include "sandbox/error.h"
#include "sandbox/sandbox.h"

namespace sandbox::ns {

// What to start and how. Every fd is borrowed: StartBoundary dups what it
// needs into the child and the caller may close them once it returns.
struct BoundaryConfig {
  // The host directory bound read-write at /workspace (required).
  std::string workspace;
  // An unpacked root filesystem whose top-level entries form the read-only
  // root; "" for the host's system directories (/usr /bin /sbin /lib* /etc).
  std::string rootfs;
  // Share the host's network namespace. Off: a new network namespace with
  // only `lo`, up.
  bool network = false;
  // memory/pids/cpu, enforced through cgroups; an explicit limit that cannot
  // be enforced here fails StartBoundary with Unsupported.
  os::ResourceLimits limits;

  // The program run as PID 1: an fd (O_PATH is enough) of an executable
  // opened on the host, executed with execveat(AT_EMPTY_PATH) after
  // pivot_root, so it need not exist in the root. It must not be a script
  // (the fd is closed at exec). argv[0] first.
  int program_fd = -1;
  std::vector<std::string> argv;
  // PID 1's environment; empty means just a default PATH.
  std::vector<std::string> env;
  // Becomes PID 1's stdin and stdout (one end of a socketpair, normally).
  int stream_fd = -1;
  // Becomes PID 1's stderr; -1 for /dev/null.
  int stderr_fd = -1;

  // Root only: who owns, on the host, what is created in /workspace.
  // Defaults to the caller's effective uid/gid.
  std::optional<uid_t> workspace_uid;
  std::optional<gid_t> workspace_gid;
  // Root only: the first of the 65536 host ids the boundary's ids map to
  // (the last 64 Ki block of systemd's container range by default).
  std::uint32_t host_id_base = 0x6FFF0000;

  // Capabilities PID 1 keeps in its user namespace (bit N = CAP_N).
  // Default: CAP_SYS_ADMIN (clone(CLONE_NEWPID) for per-command PID
  // namespaces) and CAP_SETPCAP (so commands can empty their bounding set and
  // lock securebits before exec).
  std::uint64_t agent_capabilities = (std::uint64_t{1} << 21) | (std::uint64_t{1} << 8);
  std::string hostname = "sandbox";
  // Hand PID 1 a cgroup v2 of its own as fd 3 where this process can make one
  // (os::CgroupPool::Delegate; not when a limit already holds the boundary in
  // a cgroup v2): the agent then contains each command's tree in a child
  // cgroup, far cheaper than a PID namespace per command. Where none can be
  // made, fd 3 is simply not open. BoundaryFacts::delegated_cgroup says which.
  bool delegate_cgroup = false;
  // RLIMIT_NOFILE of PID 1 (capped at the host's hard limit). RLIMIT_CORE is 0.
  std::uint64_t max_open_files = 65536;
};

// Which hardening took effect (reported, never assumed).
struct BoundaryFacts {
  bool network = false;  // code inside can reach the host's network
  int landlock_abi = 0;  // 0: Landlock absent, filesystem rules not applied
  bool idmapped_workspace = false;
  bool root_mode = false;            // the host process is root (ids mapped to a range)
  std::vector<std::string> cgroups;  // host paths of the boundary's cgroups
  std::string delegated_cgroup;      // host path of the cgroup handed to PID 1, or ""
};

// A running boundary: owns PID 1 (a pidfd) and every host-side resource
// (its cgroups). Destroying it SIGKILLs PID 1 (the kernel then kills every
// process of the PID namespace; mounts die with the mount namespace), reaps
// it and removes the cgroups. If the host process dies, even by SIGKILL, PID 1
// gets SIGKILL (PR_SET_PDEATHSIG): its cgroups are removed by the next
// StartBoundary with limits in any process, or by RemoveNamespaceLeftovers.
//
// PR_SET_PDEATHSIG is tied to the thread that clones, so every boundary of a
// process is cloned by one launcher thread that lives as long as the process:
// a boundary outlives the (worker) thread that asked for it.
// Move-only; not thread-safe (wrap it if several threads call Kill/Wait).
class Boundary {
 public:
  Boundary(Boundary&&) noexcept = default;
  Boundary& operator=(Boundary&&) noexcept = default;
  Boundary(const Boundary&) = delete;
  Boundary& operator=(const Boundary&) = delete;
  ~Boundary();

  // PID 1, as seen from the host.
  pid_t pid() const { return child_.pid(); }
  // Readable (POLLIN) once PID 1 has exited: the boundary is dead.
  int pidfd() const { return child_.pidfd(); }
  const BoundaryFacts& facts() const { return facts_; }

  // Processes killed by the OOM killer for exceeding the memory limit so far.
  // Unsupported without a memory limit. Compare before/after an Exec to tell
  // that a command died of the limit.
  Expected<std::uint64_t> OomKills() const { return limits_.OomKills(); }

  // SIGKILLs PID 1, and with it every process inside. Idempotent.
  Status Kill() const;
  // Blocks until PID 1 exits and reaps it (memoized).
  Expected<ExitStatus> Wait();
  // Kill, Wait, then remove the cgroups. Idempotent; the destructor calls it.
  Status Terminate();

 private:
  friend Expected<Boundary> StartBoundary(const BoundaryConfig& config);
  Boundary() = default;

  os::Child child_;
  os::LimitGroup limits_;
  os::DelegatedCgroup delegated_;
  BoundaryFacts facts_;
};

// Starts `config.argv` as PID 1 of a new boundary and returns once it has
// been exec'd (or with an Error naming the step that failed: InvalidArgument
// for a bad config, Unsupported when this kernel or machine cannot provide a
// piece that was asked for, NotFound/PermissionDenied when the program cannot
// be executed). Thread-safe.
Expected<Boundary> StartBoundary(const BoundaryConfig& config);

}  // namespace sandbox::ns

#endif  // SANDBOX_NAMESPACE_BOUNDARY_H_
