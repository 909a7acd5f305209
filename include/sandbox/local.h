// The local backend: host subprocesses behind a kernel-enforced path fence.
#ifndef SANDBOX_LOCAL_H_
#define SANDBOX_LOCAL_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sandbox/sandbox.h"

namespace sandbox {

// Options of the local backend. Defaults are the bounds DESIGN.md names.
struct LocalOptions {
  // Host directory that becomes the sandbox root. Required.
  std::string root;
  // The absolute directory Workdir() reports and absolute paths are accepted
  // under; "" means the root's canonical host path.
  std::string workdir;
  // Per-stream capture cap of Exec (head and tail kept).
  std::size_t output_limit = std::size_t{1} << 20;
  // ReadFile refuses files larger than this with TooLarge.
  std::uint64_t max_read_bytes = std::uint64_t{1} << 30;
  // Size of a Process's stderr ring.
  std::size_t stderr_ring_bytes = std::size_t{64} << 10;
  // How long Exec keeps draining pipes held open by a process outside the
  // command's tree after the command has exited and its tree was killed.
  std::chrono::milliseconds drain_grace{1000};
  // Names of host environment variables passed through to commands; every
  // other host variable is withheld.
  std::vector<std::string> env_allow = {"PATH", "HOME", "LANG", "LC_ALL", "TERM", "TZ", "USER"};
  // "KEY=VALUE" entries applied over the allowed host variables (and under
  // Command::env). PATH defaults to a standard value when the host has none.
  std::vector<std::string> base_env;
  // Shell used by sessions (must accept `-s` and POSIX syntax).
  std::string session_shell = "/bin/sh";

  // How the process tree of each command is contained, so that everything
  // it starts (setsid'd and double-forked descendants too) dies at once.
  enum class Containment {
    kAuto,          // a cgroup v2 where one is writable here, else a PID namespace
    kCgroup,        // a cgroup v2 per command (a writable cgroup v2 with cgroup.kill)
    kPidNamespace,  // a PID namespace per command under a reaping init
                    // (CAP_SYS_ADMIN in this process's user namespace)
  };
  Containment containment = Containment::kAuto;
  // A cgroup v2 directory (an fd, borrowed: NewLocalSandbox dups it) in which
  // each command's tree gets a cgroup of its own, for a process that cannot
  // reach the cgroup hierarchy by path (the agent of a boundary, handed one
  // by its host). -1: none. With kAuto or kCgroup only.
  int cgroup_dir_fd = -1;
  // With cgroup containment: start every command in one PID namespace made
  // for this sandbox below this process, so that commands can neither see
  // nor signal this process, which they may share a uid with (the agent).
  // Needs CAP_SYS_ADMIN in this process's user namespace. The namespace dies
  // with the sandbox, and with the thread that created the sandbox
  // (PR_SET_PDEATHSIG): create it on a thread that lives as long as the
  // sandbox. Ignored when each command gets a PID namespace of its own.
  bool shared_pid_namespace = false;

  // Mount points of file systems whose directories do not change while the
  // sandbox lives, such as a VM guest's read-only shares of the host's
  // system. A program the PATH search did not find in a directory on one
  // of them is not looked for there again for 5 s. For the agent in a VM,
  // where each lookup that misses is a round trip to the VMM. Empty: every
  // search asks the file system.
  std::vector<std::string> stable_mounts;

  // Start every command with no capability at all: empty sets, an empty
  // bounding set and locked securebits, so that even uid 0 gains nothing at
  // exec. For the agent, which is root of a boundary's user namespace.
  bool drop_capabilities = false;

  // Where the kernel lacks openat2 (gVisor's), enforce the path fence by
  // walking each path one component at a time with O_NOFOLLOW from pinned
  // directory fds (os::WalkOpen) instead of refusing to start. Same rules
  // (every symlink refused, `..` never above the root); for the agent in
  // the gvisor backend. A host kernel without openat2 is still refused
  // unless this is set.
  bool fence_without_openat2 = false;
};

// Creates a local sandbox (Isolation::None). It implements every optional
// capability: Appender, DirectoryMaker, LimitedReader, ProcessHost,
// Sessioner and WorkdirReporter. Fails with Unsupported on a kernel without
// openat2 (Linux < 5.6), or when no containment for process trees works here
// (the message says why).
Expected<std::unique_ptr<Sandbox>> NewLocalSandbox(const LocalOptions& options);

}  // namespace sandbox

#endif  // SANDBOX_LOCAL_H_
