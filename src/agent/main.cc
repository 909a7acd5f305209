// sandbox-agent: the local backend served over one byte stream, to run
// inside a boundary (namespace, container, VM). Statically linked so it runs
// in any root filesystem. The protocol is in docs/wire.md.
//
//   sandbox-agent [--root DIR] [--workdir PATH] [--fd N] [--max-inflight N]
//                 [--containment auto|cgroup|pidns] [--cgroup-fd N]
//                 [--drop-capabilities] [--fence-without-openat2]
//   sandbox-agent --vm-guest      (as /init of a microvm guest; see vm_guest.h)
//
// The stream is stdin (requests) and stdout (answers), or the socket `--fd N`
// in both directions. stderr carries diagnostics only. The agent exits 0
// when the host closes the stream, 2 on bad usage, 1 when it cannot start or
// the host broke the protocol.
#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "agent/vm_guest.h"
#include "os/init_reaper.h"
#include "os/spawn.h"
#include "sandbox/local.h"
#include "sandbox/remote.h"

namespace {

void Say(std::string_view line) {
  std::string text = "sandbox-agent: ";
  text.append(line);
  text.push_back('\n');
  (void)!::write(STDERR_FILENO, text.data(), text.size());
}

constexpr std::string_view kUsage =
    "usage: sandbox-agent [--root DIR] [--workdir PATH] [--fd N] [--max-inflight N]\n"
    "                     [--containment auto|cgroup|pidns] [--cgroup-fd N]\n"
    "                     [--drop-capabilities] [--fence-without-openat2]\n"
    "  --root DIR          directory that becomes the sandbox root (default: .)\n"
    "  --workdir PATH      absolute directory reported as the workdir (default: the root)\n"
    "  --fd N              serve over the socket N instead of stdin/stdout\n"
    "  --max-inflight N    requests executed at once (default 64)\n"
    "  --containment M     how each command's process tree is contained: a cgroup,\n"
    "                      a PID namespace, or auto (the local backend's choice)\n"
    "  --cgroup-fd N       if descriptor N is open: a cgroup v2 directory delegated\n"
    "                      by the host, in which each command's tree gets a cgroup\n"
    "                      (overrides --containment, which is the fallback)\n"
    "  --drop-capabilities commands start with no capability at all (the agent is\n"
    "                      root of a boundary's user namespace and keeps its own)\n"
    "  --fence-without-openat2  where the kernel has no openat2 (gVisor), fence paths\n"
    "                      by an O_NOFOLLOW walk from pinned directory fds\n";

bool ParseNumber(std::string_view text, int& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && out >= 0;
}

// Moves `fd` above 2 with O_CLOEXEC so no command inherits the stream, and
// points the standard descriptor at /dev/null so nothing the agent links
// can write into the protocol by accident.
int TakeStdFd(int fd, int flags) {
  int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (moved < 0) return -1;
  int null_fd = ::open("/dev/null", flags | O_CLOEXEC);
  if (null_fd >= 0) {
    ::dup2(null_fd, fd);  // dup2 clears O_CLOEXEC on `fd`: a plain stdio slot
    ::close(null_fd);
  }
  return moved;
}

}  // namespace

int main(int argc, char** argv) {
  // As PID 1 of a namespace, split off a reaping init first (before any
  // thread exists); see os/init_reaper.h.
  // The kernel hands /init the words of its command line it does not know
  // (QEMU may append more), so look for the flag anywhere.
  bool vm_guest = false;
  for (int i = 1; i < argc; ++i) vm_guest = vm_guest || std::string_view(argv[i]) == "--vm-guest";
  if (auto init_exit = sandbox::os::SplitOffInitIfPid1()) {
    if (vm_guest) sandbox::agent::PowerOffVm();  // the agent is done: so is the VM
    return *init_exit;
  }
  // Commands may share the agent's uid: keep its memory, fds and environment
  // out of their reach through /proc (and ptrace) by making it non-dumpable.
  // execve resets the flag, so the commands themselves are unaffected.
  ::prctl(PR_SET_DUMPABLE, 0);
  // The agent owns its process: every signal disposition SIG_DFL for good
  // (nothing here installs a handler or ignores a signal), which spares each
  // command's spawn a reset of every disposition and of every capability.
  // (The VM guest's setup is left as it was.)
  if (!vm_guest) sandbox::os::ClaimProcessForSpawn();

  sandbox::LocalOptions local;
  local.root = ".";
  sandbox::ServeOptions serve;
  int fd = -1;
  int cgroup_fd = -1;
  if (vm_guest) {
    // The guest's whole root is ours; commands get no capabilities, as in
    // the namespace backend, and a cgroup each in one PID namespace below
    // the agent (below), or where the guest kernel has no cgroup v2, a PID
    // namespace each.
    auto guest = sandbox::agent::PrepareVmGuest();
    if (!guest) {
      Say("cannot start the guest: " + guest.error().ToString());
      return 1;
    }
    fd = guest->stream_fd;
    cgroup_fd = guest->cgroup_fd;
    if (cgroup_fd < 0) Say("no cgroup v2 in the guest: a PID namespace per command");
    local.root = "/workspace";
    local.workdir = "/workspace";
    local.containment = sandbox::LocalOptions::Containment::kPidNamespace;
    local.drop_capabilities = true;
    // The host's system directories, shared read-only and cached by the
    // guest (9p cache=loose): a program's PATH search need not ask the VMM
    // again for the names it just missed there.
    local.stable_mounts = guest->read_only_mounts;
  }
  for (int i = vm_guest ? argc : 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string_view value;
    std::string_view name = arg;
    bool has_inline = false;
    if (auto eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_inline = true;
    }
    auto take = [&]() -> bool {
      if (has_inline) return true;
      if (i + 1 >= argc) return false;
      value = argv[++i];
      return true;
    };
    if (name == "--help" || name == "-h") {
      (void)!::write(STDOUT_FILENO, kUsage.data(), kUsage.size());
      return 0;
    }
    int number = 0;
    if (name == "--root" && take()) {
      local.root = value;
    } else if (name == "--workdir" && take()) {
      local.workdir = value;
    } else if (name == "--fd" && take() && ParseNumber(value, number)) {
      fd = number;
    } else if (name == "--containment" && take() &&
               (value == "auto" || value == "cgroup" || value == "pidns")) {
      using Containment = sandbox::LocalOptions::Containment;
      local.containment = value == "cgroup"  ? Containment::kCgroup
                          : value == "pidns" ? Containment::kPidNamespace
                                             : Containment::kAuto;
    } else if (name == "--cgroup-fd" && take() && ParseNumber(value, number)) {
      cgroup_fd = number;
    } else if (name == "--drop-capabilities" && !has_inline) {
      local.drop_capabilities = true;
    } else if (name == "--fence-without-openat2" && !has_inline) {
      local.fence_without_openat2 = true;
    } else if (name == "--max-inflight" && take() && ParseNumber(value, number) && number > 0) {
      serve.max_inflight = static_cast<std::uint32_t>(number);
    } else {
      Say("bad argument '" + std::string(arg) + "'");
      (void)!::write(STDERR_FILENO, kUsage.data(), kUsage.size());
      return 2;
    }
  }

  // The host passes a delegated cgroup only where it could make one; where
  // the descriptor is not open, --containment stands. Checked before this
  // process opens any descriptor of its own; no command may inherit it.
  if (cgroup_fd >= 0 && ::fcntl(cgroup_fd, F_SETFD, FD_CLOEXEC) == 0) {
    local.cgroup_dir_fd = cgroup_fd;
    local.containment = sandbox::LocalOptions::Containment::kAuto;
    // Commands share the agent's uid: in a PID namespace below the agent they
    // cannot name it to signal it (this thread lives as long as the agent).
    local.shared_pid_namespace = true;
  }

  int read_fd, write_fd;
  if (fd >= 0) {
    read_fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (read_fd < 0) {
      Say("--fd " + std::to_string(fd) + " is not an open descriptor");
      return 2;
    }
    if (fd > 2) ::close(fd);
    write_fd = -1;
  } else {
    read_fd = TakeStdFd(STDIN_FILENO, O_RDONLY);
    write_fd = TakeStdFd(STDOUT_FILENO, O_WRONLY);
    if (read_fd < 0 || write_fd < 0) {
      Say("stdin and stdout must be open");
      return 2;
    }
  }

  auto sandbox = sandbox::NewLocalSandbox(local);
  if (local.cgroup_dir_fd >= 0) ::close(local.cgroup_dir_fd);  // NewLocalSandbox keeps a copy
  if (!sandbox) {
    Say("cannot serve '" + local.root + "': " + sandbox.error().ToString());
    ::close(read_fd);
    if (write_fd >= 0) ::close(write_fd);
    return 1;
  }
  serve.log = [](const std::string& line) { Say(line); };
  auto served = sandbox::Serve(**sandbox, read_fd, write_fd, serve);
  (void)(*sandbox)->Close();
  return served ? 0 : 1;
}
