// Tests of the namespace backend's boundary (src/namespace/boundary.h): what
// code running as PID 1 inside can and cannot see and do. PID 1 is /bin/sh
// (a script) or this test binary in probe mode (raw syscalls); its stdout is
// a socketpair read here. The test process itself never unshares anything:
// the boundary is a child, and the unprivileged and parent-death cases run
// from forked helper processes.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <linux/sched.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backends.h"
#include "namespace/boundary.h"
#include "os/landlock.h"
#include "os/limits.h"
#include "os/namespaces.h"
#include "sandbox/namespace.h"
#include "test_util.h"

namespace sandbox::testing {
namespace {

constexpr const char* kProbeFlag = "--sandbox-namespace-probe";

// ---- Probe mode: this binary as PID 1 inside the boundary -----------------

int Errno(long rc) { return rc < 0 ? errno : 0; }

// Each probe makes one call with arguments chosen so that an allowed call
// fails with something other than EPERM (a bad pointer gives EFAULT, a bad fd
// EBADF, bad flags EINVAL): EPERM then means the filter refused it.
void ProbeSyscalls() {
  std::vector<std::pair<const char*, int>> results;
  auto bad = reinterpret_cast<void*>(1);
  results.push_back({"bpf", Errno(syscall(SYS_bpf, BPF_PROG_LOAD, bad, 8))});
  results.push_back({"keyctl", Errno(syscall(SYS_keyctl, 1 /*JOIN_SESSION*/, bad))});
  results.push_back({"add_key", Errno(syscall(SYS_add_key, bad, bad, nullptr, 0, 0))});
  results.push_back({"request_key", Errno(syscall(SYS_request_key, bad, bad, nullptr, 0))});
  results.push_back({"userfaultfd", Errno(syscall(SYS_userfaultfd, 1 | 0x40000000))});
  results.push_back({"io_uring_setup", Errno(syscall(SYS_io_uring_setup, 1, bad))});
  results.push_back({"perf_event_open", Errno(syscall(SYS_perf_event_open, bad, 0, -1, -1, 0))});
  results.push_back({"open_by_handle_at", Errno(syscall(SYS_open_by_handle_at, -1, bad, 0))});
  results.push_back(
      {"name_to_handle_at", Errno(syscall(SYS_name_to_handle_at, AT_FDCWD, bad, bad, bad, 0))});
  results.push_back({"mount", Errno(syscall(SYS_mount, bad, bad, bad, 0, nullptr))});
  results.push_back({"umount2", Errno(syscall(SYS_umount2, bad, 0))});
  results.push_back({"pivot_root", Errno(syscall(SYS_pivot_root, bad, bad))});
  results.push_back({"open_tree", Errno(syscall(SYS_open_tree, -1, bad, 0))});
  results.push_back({"move_mount", Errno(syscall(SYS_move_mount, -1, bad, -1, bad, 0))});
  results.push_back({"fsopen", Errno(syscall(SYS_fsopen, bad, 0))});
  results.push_back({"setns", Errno(syscall(SYS_setns, -1, 0))});
  // Allowed through the filter (the agent enters its commands' PID
  // namespace this way); the bad fd fails it.
  results.push_back({"setns_newpid", Errno(syscall(SYS_setns, -1, CLONE_NEWPID))});
  results.push_back({"unshare_newuser", Errno(syscall(SYS_unshare, CLONE_NEWUSER | 0x1))});
  results.push_back(
      {"clone_newuser", Errno(syscall(SYS_clone, CLONE_NEWUSER | CLONE_THREAD, 0, 0, 0, 0))});
  results.push_back({"clone3", Errno(syscall(SYS_clone3, bad, 88))});
  results.push_back({"ptrace", Errno(syscall(SYS_ptrace, PTRACE_PEEKDATA, 999999, 0, 0))});
  results.push_back(
      {"process_vm_readv", Errno(syscall(SYS_process_vm_readv, getpid(), bad, 1, bad, 1, 0))});
  results.push_back({"pidfd_getfd", Errno(syscall(SYS_pidfd_getfd, -1, 0, 0))});
  results.push_back({"kcmp", Errno(syscall(SYS_kcmp, getpid(), getpid(), 99, 0, 0))});
  results.push_back({"ioctl_tiocsti", Errno(syscall(SYS_ioctl, 0, TIOCSTI, bad))});
  results.push_back({"personality_no_aslr", Errno(syscall(SYS_personality, ADDR_NO_RANDOMIZE))});
  results.push_back(
      {"prlimit_other", Errno(syscall(SYS_prlimit64, 1, RLIMIT_NOFILE, bad, nullptr))});
  // Allowed (controls): a query, own limits, and a PID namespace.
  results.push_back({"personality_query", Errno(syscall(SYS_personality, 0xffffffff))});
  results.push_back({"unshare_newpid_badflag", Errno(syscall(SYS_unshare, CLONE_NEWPID | 0x1))});
  results.push_back(
      {"prlimit_self_read", Errno(syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, nullptr, bad))});
  results.push_back({"unshare_newpid", Errno(syscall(SYS_unshare, CLONE_NEWPID))});
  for (auto& [name, err] : results) printf("%s=%d\n", name, err);
}

int ConnectErrno(int family, const std::string& where) {
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  int rc;
  if (family == AF_INET) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(std::stoi(where)));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  } else if (family == AF_INET6) {
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_port = htons(static_cast<uint16_t>(std::stoi(where)));
    addr.sin6_addr = in6addr_loopback;
    rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  } else {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path + 1, where.data(), where.size());
    rc = connect(fd, reinterpret_cast<sockaddr*>(&addr),
                 static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + where.size()));
  }
  int err = rc == 0 ? 0 : errno;
  close(fd);
  return err;
}

// argv: probe connect <tcp port> <abstract name>
void ProbeConnect(const std::string& port, const std::string& abstract) {
  printf("tcp4=%d\n", ConnectErrno(AF_INET, port));
  printf("tcp6=%d\n", ConnectErrno(AF_INET6, port));
  printf("abstract=%d\n", ConnectErrno(AF_UNIX, abstract));
}

// Forks children that sleep until the pids limit stops it.
void ProbeForkBomb() {
  int forked = 0, err = 0;
  for (int i = 0; i < 1000; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      pause();
      _exit(0);
    }
    if (pid < 0) {
      err = errno;
      break;
    }
    ++forked;
  }
  printf("forked=%d\nerr=%d\n", forked, err);
}

__attribute__((constructor)) void MaybeRunProbe(int argc, char** argv, char**) {
  if (argc < 3 || strcmp(argv[1], kProbeFlag) != 0) return;
  std::string mode = argv[2];
  if (mode == "syscalls") ProbeSyscalls();
  if (mode == "forkbomb") ProbeForkBomb();
  if (mode == "connect" && argc >= 5) ProbeConnect(argv[3], argv[4]);
  fflush(stdout);
  _exit(0);
}

// ---- Host side ------------------------------------------------------------

std::string UnavailableReason() {
  static const std::string reason = NamespaceUnavailableReason();
  return reason;
}

#define SKIP_UNLESS_NAMESPACES()                                                 \
  do {                                                                           \
    if (!UnavailableReason().empty()) {                                          \
      if (BackendRequired("namespace")) FAIL() << UnavailableReason();           \
      GTEST_SKIP() << "namespace boundary unavailable: " << UnavailableReason(); \
    }                                                                            \
  } while (0)

struct Run {
  std::string output;  // PID 1's stdout and stderr
  ExitStatus status;
  std::uint64_t oom_kills = 0;
  std::vector<std::string> cgroups;
};

// Reads `fd` until EOF or `timeout_ms`.
std::string ReadUntilEof(int fd, int timeout_ms) {
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char buffer[4096];
  for (;;) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now())
                                    .count());
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, left) <= 0) continue;
    ssize_t got = read(fd, buffer, sizeof(buffer));
    if (got <= 0) break;
    out.append(buffer, static_cast<std::size_t>(got));
  }
  return out;
}

// Starts `argv` (with the program at `program`) as PID 1 and collects its
// output and exit status.
Expected<Run> RunInBoundary(ns::BoundaryConfig config, const std::string& program,
                            std::vector<std::string> argv, int timeout_ms = 20000) {
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0)
    return Fail(Error::Code::Internal, "socketpair");
  os::UniqueFd host(sp[0]), inside(sp[1]);
  os::UniqueFd exe(open(program.c_str(), O_PATH | O_CLOEXEC));
  if (!exe) return Fail(Error::Code::NotFound, "open " + program);
  config.program_fd = exe.get();
  config.argv = std::move(argv);
  config.stream_fd = inside.get();
  config.stderr_fd = inside.get();
  auto boundary = ns::StartBoundary(config);
  if (!boundary) return Fail(boundary.error());
  inside.reset();
  Run run;
  run.cgroups = boundary->facts().cgroups;
  run.output = ReadUntilEof(host.get(), timeout_ms);
  (void)boundary->Kill();
  auto status = boundary->Wait();
  if (!status) return Fail(status.error());
  run.status = *status;
  if (auto kills = boundary->OomKills()) run.oom_kills = *kills;
  if (Status done = boundary->Terminate(); !done) return Fail(done.error());
  return run;
}

Expected<Run> RunShell(ns::BoundaryConfig config, const std::string& script,
                       int timeout_ms = 20000) {
  return RunInBoundary(std::move(config), "/bin/sh", {"sh", "-c", script}, timeout_ms);
}

Expected<Run> RunProbe(ns::BoundaryConfig config, std::vector<std::string> args) {
  std::vector<std::string> argv = {"sandbox_tests", kProbeFlag};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunInBoundary(std::move(config), "/proc/self/exe", std::move(argv));
}

std::map<std::string, std::string> ParseLines(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    auto eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

ns::BoundaryConfig ConfigFor(const TempDir& dir) {
  ns::BoundaryConfig config;
  config.workspace = dir.path();
  return config;
}

TEST(NamespaceBoundary, ShellRunsAsPid1WithHostnameSandboxInWorkspace) {
  SKIP_UNLESS_NAMESPACES();
  TempDir dir;
  auto run =
      RunShell(ConfigFor(dir),
               "echo pid=$$; echo host=$(hostname); echo cwd=$(pwd); "
               "echo uid=$(id -u); echo lo=$(cat /sys/class/net/lo/operstate 2>&1 | head -c 0)"
               "$(grep -c . /proc/net/dev)");
  ASSERT_TRUE(run) << run.error().ToString();
  auto kv = ParseLines(run->output);
  EXPECT_EQ(kv["pid"], "1") << run->output;
  EXPECT_EQ(kv["host"], "sandbox");
  EXPECT_EQ(kv["cwd"], "/workspace");
  EXPECT_EQ(kv["uid"], "0");
  // /proc/net/dev: two header lines and lo only (a new network namespace).
  EXPECT_EQ(kv["lo"], "3") << run->output;
  EXPECT_EQ(run->status.exit_code, 0);
}

TEST(NamespaceBoundary, WorkspaceIsWritableAndOwnedByTheInvoker) {
  SKIP_UNLESS_NAMESPACES();
  TempDir dir;
  WriteHostFile(dir.Join("from-host"), "host data");
  auto run = RunShell(ConfigFor(dir),
                      "cat /workspace/from-host; echo; echo made > /workspace/made && "
                      "mkdir /workspace/sub && echo x > /workspace/sub/y && echo wrote");
  ASSERT_TRUE(run) << run.error().ToString();
  EXPECT_EQ(run->output, "host data\nwrote\n");
  EXPECT_EQ(ReadHostFile(dir.Join("made")), "made\n");
  struct stat st;
  ASSERT_EQ(stat(dir.Join("made").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, geteuid());
  EXPECT_EQ(st.st_gid, getegid());
  ASSERT_EQ(stat(dir.Join("sub/y").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, geteuid());
}

TEST(NamespaceBoundary, NothingOutsideWorkspaceTmpAndDevIsWritable) {
  SKIP_UNLESS_NAMESPACES();
  TempDir dir;
  auto run = RunShell(
      ConfigFor(dir),
      "for p in /x /usr/x /etc/x /bin/x /proc/x /dev/x /proc/sys/kernel/hostname "
      "/proc/sysrq-trigger /proc/sys/vm/drop_caches /etc/passwd; do "
      "  if (echo 1 > $p) 2>/dev/null; then echo \"$p=writable\"; else echo \"$p=denied\"; fi; "
      "done; "
      "for p in /tmp/x /workspace/x /dev/null /dev/shm/x; do "
      "  if (echo 1 > $p) 2>/dev/null; then echo \"$p=writable\"; else echo \"$p=denied\"; fi; "
      "done");
  ASSERT_TRUE(run) << run.error().ToString();
  auto kv = ParseLines(run->output);
  for (const char* path :
       {"/x", "/usr/x", "/etc/x", "/bin/x", "/proc/x", "/dev/x", "/proc/sys/kernel/hostname",
        "/proc/sysrq-trigger", "/proc/sys/vm/drop_caches", "/etc/passwd"})
    EXPECT_EQ(kv[path], "denied") << path << "\n" << run->output;
  for (const char* path : {"/tmp/x", "/workspace/x", "/dev/null", "/dev/shm/x"})
    EXPECT_EQ(kv[path], "writable") << path << "\n" << run->output;
}

TEST(NamespaceBoundary, HostFilesOutsideTheBoundDirectoriesAreInvisible) {
  SKIP_UNLESS_NAMESPACES();
  TempDir dir;
  TempDir other;  // a host directory under the host's /tmp
  WriteHostFile(other.Join("secret"), "s");
  std::string marker = other.Join("secret");
  auto run =
      RunShell(ConfigFor(dir),
               "echo root=$(ls -A / | tr '\\n' ' '); "
               "test -e /root && echo root_dir=visible || echo root_dir=absent; "
               "test -e /home && echo home=visible || echo home=absent; "
               "test -e " +
                   marker +
                   " && echo host_tmp=visible || echo host_tmp=absent; "
                   "echo tmp=$(ls -A /tmp | wc -l); "
                   "cat /etc/shadow >/dev/null 2>&1 && echo shadow=readable || echo shadow=denied; "
                   "echo fds=$(ls /proc/self/fd | tr '\\n' ' ')");
  ASSERT_TRUE(run) << run.error().ToString();
  auto kv = ParseLines(run->output);
  EXPECT_EQ(kv["root_dir"], "absent") << run->output;
  EXPECT_EQ(kv["home"], "absent");
  EXPECT_EQ(kv["host_tmp"], "absent");
  EXPECT_EQ(kv["tmp"], "0");
  EXPECT_EQ(kv["shadow"], "denied");
  // ls's own fds: 0-2 and the directory it lists.
  EXPECT_EQ(kv["fds"], "0 1 2 3") << run->output;
  EXPECT_EQ(kv["root"].find("work "), std::string::npos) << kv["root"];
}

// A listener on the host's loopback (TCP on 127.0.0.1 and ::1, and an
// abstract unix socket).
struct HostListeners {
  os::UniqueFd tcp4, tcp6, abstract;
  int port = 0;
  std::string name;
  HostListeners() {
    tcp4.reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a4{};
    a4.sin_family = AF_INET;
    a4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(tcp4.get(), reinterpret_cast<sockaddr*>(&a4), sizeof(a4));
    listen(tcp4.get(), 8);
    socklen_t len = sizeof(a4);
    getsockname(tcp4.get(), reinterpret_cast<sockaddr*>(&a4), &len);
    port = ntohs(a4.sin_port);
    tcp6.reset(socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
    int one = 1;
    setsockopt(tcp6.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    sockaddr_in6 a6{};
    a6.sin6_family = AF_INET6;
    a6.sin6_addr = in6addr_loopback;
    a6.sin6_port = htons(static_cast<uint16_t>(port));
    bind(tcp6.get(), reinterpret_cast<sockaddr*>(&a6), sizeof(a6));
    listen(tcp6.get(), 8);
    name = "sandbox-ns-test-" + UniqueMarker();
    abstract.reset(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un au{};
    au.sun_family = AF_UNIX;
    memcpy(au.sun_path + 1, name.data(), name.size());
    bind(abstract.get(), reinterpret_cast<sockaddr*>(&au),
         static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size()));
    listen(abstract.get(), 8);
  }
};

TEST(NamespaceBoundary, HostLoopbackListenersAreUnreachable) {
  SKIP_UNLESS_NAMESPACES();
  TempDir dir;
  HostListeners host;
  // The listeners work from the host.
  ASSERT_EQ(ConnectErrno(AF_INET, std::to_string(host.port)), 0);
  ASSERT_EQ(ConnectErrno(AF_UNIX, host.name), 0);
  auto run = RunProbe(ConfigFor(dir), {"connect", std::to_string(host.port), host.name});
  ASSERT_TRUE(run) << run.error().ToString();
  auto kv = ParseLines(run->output);
  EXPECT_EQ(kv["tcp4"], std::to_string(ECONNREFUSED)) << run->output;
  EXPECT_EQ(kv["tcp6"], std::to_string(ECONNREFUSED)) << run->output;
  EXPECT_EQ(kv["abstract"], std::to_string(ECONNREFUSED)) << run->output;
}

TEST(NamespaceBoundary, WithNetworkTcpReachesTheHostButAbstractSocketsStayScoped) {
  SKIP_UNLESS_NAMESPACES();
  TempDir dir;
  HostListeners host;
  auto config = ConfigFor(dir);
  config.network = true;
  auto run = RunProbe(config, {"connect", std::to_string(host.port), host.name});
  ASSERT_TRUE(run) << run.error().ToString();
  auto kv = ParseLines(run->output);
  EXPECT_EQ(kv["tcp4"], "0") << run->output;
  EXPECT_EQ(kv["tcp6"], "0") << run->output;
  if (os::LandlockAbi() >= 6) {
    EXPECT_EQ(kv["abstract"], std::to_string(EPERM)) << run->output;
  }
}

TEST(NamespaceBoundary, BlockedSyscallsFailWithEpermAllowedOnesDoNot) {
  SKIP_UNLESS_NAMESPACES();
  TempDir dir;
  auto run = RunProbe(ConfigFor(dir), {"syscalls"});
  ASSERT_TRUE(run) << run.error().ToString();
  auto kv = ParseLines(run->output);
  const std::string eperm = std::to_string(EPERM);
  for (const char* name : {"bpf",
                           "keyctl",
                           "add_key",
                           "request_key",
                           "userfaultfd",
                           "io_uring_setup",
                           "perf_event_open",
                           "open_by_handle_at",
                           "name_to_handle_at",
                           "mount",
                           "umount2",
                           "pivot_root",
                           "open_tree",
                           "move_mount",
                           "fsopen",
                           "setns",
                           "unshare_newuser",
                           "clone_newuser",
                           "ptrace",
                           "process_vm_readv",
                           "pidfd_getfd",
                           "kcmp",
                           "ioctl_tiocsti",
                           "personality_no_aslr",
                           "prlimit_other"})
    EXPECT_EQ(kv[name], eperm) << name << "\n" << run->output;
  EXPECT_EQ(kv["clone3"], std::to_string(ENOSYS));
  EXPECT_EQ(kv["personality_query"], "0");
  EXPECT_EQ(kv["unshare_newpid_badflag"], std::to_string(EINVAL));
  EXPECT_EQ(kv["setns_newpid"], std::to_string(EBADF));
  EXPECT_EQ(kv["prlimit_self_read"], std::to_string(EFAULT));  // allowed: the bad pointer faults
  // PID 1 (the agent) keeps CAP_SYS_ADMIN in its namespace for this.
  EXPECT_EQ(kv["unshare_newpid"], "0");
}

TEST(NamespaceBoundary, ProcSysIsReadOnlyAndNoReleaseAgentIsWritable) {
  SKIP_UNLESS_NAMESPACES();
  TempDir dir;
  auto run = RunShell(ConfigFor(dir),
                      "echo hostname=$(cat /proc/sys/kernel/hostname); "
                      "echo ra=$(find / -name release_agent 2>/dev/null | wc -l); "
                      "test -e /proc/sysrq-trigger && echo sysrq=present || echo sysrq=absent; "
                      "grep -E ' /proc/(sys|sysrq-trigger) ' /proc/self/mounts | cut -d' ' -f2,4 | "
                      "sed 's/^/mount=/'");
  ASSERT_TRUE(run) << run.error().ToString();
  auto kv = ParseLines(run->output);
  EXPECT_EQ(kv["hostname"], "sandbox");
  EXPECT_EQ(kv["ra"], "0") << run->output;
  EXPECT_NE(run->output.find("mount=/proc/sys ro,"), std::string::npos) << run->output;
  // Kernels without CONFIG_MAGIC_SYSRQ have no /proc/sysrq-trigger.
  if (kv["sysrq"] == "present") {
    EXPECT_NE(run->output.find("mount=/proc/sysrq-trigger ro,"), std::string::npos) << run->output;
  }
}

TEST(NamespaceBoundary, CommandsCannotKillPid1) {
  SKIP_UNLESS_NAMESPACES();
  TempDir dir;
  auto run = RunShell(
      ConfigFor(dir),
      "sh -c 'kill -KILL 1; kill -TERM 1; kill -STOP 1; echo sent'; sleep 0.2; echo alive");
  ASSERT_TRUE(run) << run.error().ToString();
  EXPECT_EQ(run->output, "sent\nalive\n");
  EXPECT_EQ(run->status.exit_code, 0);
}

// A command shares PID 1's uid but not its capabilities: once it has dropped
// them (as every command of the agent does) ptrace access checks keep it out
// of PID 1's memory, environment and fds.
TEST(NamespaceBoundary, ACommandWithoutCapabilitiesCannotReachIntoPid1) {
  SKIP_UNLESS_NAMESPACES();
  if (access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "needs setpriv (util-linux)";
  TempDir dir;
  auto run =
      RunShell(ConfigFor(dir),
               "setpriv --inh-caps=-all --bounding-set=-all sh -c '"
               "grep CapPrm /proc/self/status; "
               "head -c1 /proc/1/environ >/dev/null 2>&1 && echo env=open || echo env=denied; "
               "readlink /proc/1/fd/0 >/dev/null 2>&1 && echo fd=open || echo fd=denied; "
               "head -c1 /proc/1/mem >/dev/null 2>&1 && echo mem=open || echo mem=denied'");
  ASSERT_TRUE(run) << run.error().ToString();
  auto kv = ParseLines(run->output);
  EXPECT_NE(run->output.find("CapPrm:\t0000000000000000"), std::string::npos) << run->output;
  EXPECT_EQ(kv["env"], "denied") << run->output;
  EXPECT_EQ(kv["fd"], "denied") << run->output;
  EXPECT_EQ(kv["mem"], "denied") << run->output;
}

TEST(NamespaceBoundary, MissingProgramAndBadWorkspaceAreClearErrors) {
  SKIP_UNLESS_NAMESPACES();
  TempDir dir;
  auto config = ConfigFor(dir);
  config.workspace = dir.Join("missing");
  auto run = RunShell(config, "true");
  ASSERT_FALSE(run);
  EXPECT_EQ(run.error().code(), Error::Code::NotFound) << run.error().ToString();
}

bool LimitUsable(const std::string& controller) {
  for (const auto& support : os::ProbeLimitSupport())
    if (support.controller == controller) return support.usable;
  return false;
}

TEST(NamespaceBoundary, ForkBombStopsAtThePidsLimit) {
  SKIP_UNLESS_NAMESPACES();
  if (!LimitUsable("pids")) {
    if (BackendRequired("namespace")) FAIL() << "no usable pids cgroup here";
    GTEST_SKIP() << "no usable pids cgroup here";
  }
  TempDir dir;
  auto config = ConfigFor(dir);
  config.limits.pids = 16;
  auto run = RunProbe(config, {"forkbomb"});
  ASSERT_TRUE(run) << run.error().ToString();
  auto kv = ParseLines(run->output);
  // PID 1 itself counts: 15 children, then EAGAIN.
  EXPECT_EQ(kv["forked"], "15") << run->output;
  EXPECT_EQ(kv["err"], std::to_string(EAGAIN)) << run->output;
  // Everything is gone with PID 1, and so are the cgroups.
  for (const std::string& path : run->cgroups) EXPECT_FALSE(HostPathExists(path)) << path;
}

TEST(NamespaceBoundary, MemoryBombIsKilledAtTheLimitAndCounted) {
  SKIP_UNLESS_NAMESPACES();
  if (!LimitUsable("memory")) {
    if (BackendRequired("namespace")) FAIL() << "no usable memory cgroup here";
    GTEST_SKIP() << "no usable memory cgroup here";
  }
  TempDir dir;
  auto config = ConfigFor(dir);
  config.limits.memory_bytes = 64u << 20;
  auto run = RunShell(config, "awk 'BEGIN { s = \"x\"; while (1) s = s s }'; echo status=$?");
  ASSERT_TRUE(run) << run.error().ToString();
  EXPECT_EQ(ParseLines(run->output)["status"], "137") << run->output;
  EXPECT_GE(run->oom_kills, 1u);
}

TEST(NamespaceBoundary, CpuLimitIsWrittenToTheCgroup) {
  SKIP_UNLESS_NAMESPACES();
  if (!LimitUsable("cpu")) {
    if (BackendRequired("namespace")) FAIL() << "no usable cpu cgroup here";
    GTEST_SKIP() << "no usable cpu cgroup here";
  }
  TempDir dir;
  auto config = ConfigFor(dir);
  config.limits.cpus = 0.5;
  int sp[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
  os::UniqueFd host(sp[0]), inside(sp[1]);
  os::UniqueFd exe(open("/bin/sh", O_PATH | O_CLOEXEC));
  config.program_fd = exe.get();
  config.argv = {"sh", "-c", "read x"};
  config.stream_fd = inside.get();
  auto boundary = ns::StartBoundary(config);
  ASSERT_TRUE(boundary) << boundary.error().ToString();
  ASSERT_EQ(boundary->facts().cgroups.size(), 1u);
  std::string dir_path = boundary->facts().cgroups[0];
  std::string quota = ReadHostFile(dir_path + "/cpu.cfs_quota_us");
  if (quota.empty()) quota = ReadHostFile(dir_path + "/cpu.max");
  EXPECT_TRUE(quota == "50000\n" || quota == "50000 100000\n") << quota;
  EXPECT_NE(ReadHostFile(dir_path + "/cgroup.procs"), "");
  ASSERT_TRUE(boundary->Terminate());
  EXPECT_FALSE(HostPathExists(dir_path));
}

// Forks a helper that runs `body` and reports through a pipe; returns what it
// wrote. The helper is a separate process so it may change its own ids.
std::string RunInHelper(const std::function<std::string()>& body, int* helper_status = nullptr) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return "pipe failed";
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::string out = body();
    ssize_t ignored = write(fds[1], out.data(), out.size());
    (void)ignored;
    _exit(0);
  }
  close(fds[1]);
  std::string out = ReadUntilEof(fds[0], 60000);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (helper_status) *helper_status = status;
  return out;
}

// Becomes `nobody`, as an unprivileged user would run the backend.
bool BecomeNobody() {
  return setgroups(0, nullptr) == 0 && setresgid(65534, 65534, 65534) == 0 &&
         setresuid(65534, 65534, 65534) == 0 && prctl(PR_SET_DUMPABLE, 1) == 0;
}

TEST(NamespaceBoundary, WorksForAnUnprivilegedUser) {
  SKIP_UNLESS_NAMESPACES();
  if (geteuid() != 0) GTEST_SKIP() << "needs root to switch to nobody (already unprivileged)";
  TempDir dir;
  ASSERT_EQ(chown(dir.path().c_str(), 65534, 65534), 0);
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  std::string out = RunInHelper([&] {
    if (!BecomeNobody()) return std::string("setuid failed");
    ns::BoundaryConfig config;
    config.workspace = dir.path();
    auto run =
        RunShell(config,
                 "echo uid=$(id -u) host=$(hostname); echo made > /workspace/made; "
                 "cat /etc/shadow >/dev/null 2>&1 && echo shadow=readable || echo shadow=denied; "
                 "(echo 1 > /usr/x) 2>/dev/null && echo usr=writable || echo usr=denied");
    if (!run) return "error=" + run.error().ToString();
    // An explicit limit that cannot be enforced is an error, never ignored.
    config.limits.memory_bytes = 64u << 20;
    auto limited = RunShell(config, "true");
    std::string limit_result =
        limited ? "limit=accepted" : "limit=" + std::string(ToString(limited.error().code()));
    return run->output + limit_result + "\n";
  });
  auto kv = ParseLines(out);
  EXPECT_EQ(kv["uid"], "0 host=sandbox") << out;
  EXPECT_EQ(kv["shadow"], "denied") << out;
  EXPECT_EQ(kv["usr"], "denied") << out;
  struct stat st;
  ASSERT_EQ(stat(dir.Join("made").c_str(), &st), 0) << out;
  EXPECT_EQ(st.st_uid, 65534u);
  EXPECT_EQ(st.st_gid, 65534u);
  // nobody cannot create cgroups here (they are root's, not delegated).
  EXPECT_EQ(kv["limit"], "unsupported") << out;
}

TEST(NamespaceBoundary, DiesWhenItsHostProcessIsSigkilled) {
  SKIP_UNLESS_NAMESPACES();
  TempDir dir;
  int report[2];
  ASSERT_EQ(pipe2(report, O_CLOEXEC), 0);
  bool limited = LimitUsable("pids");
  pid_t helper = fork();
  if (helper == 0) {
    close(report[0]);
    ns::BoundaryConfig config;
    config.workspace = dir.path();
    if (limited) config.limits.pids = 64;
    int sp[2];
    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp);
    os::UniqueFd exe(open("/bin/sh", O_PATH | O_CLOEXEC));
    config.program_fd = exe.get();
    config.argv = {"sh", "-c", "sleep 1000 & sleep 1000; wait"};
    config.stream_fd = sp[1];
    auto boundary = ns::StartBoundary(config);
    std::string line;
    if (boundary) {
      line = std::to_string(boundary->pid());
      for (const std::string& path : boundary->facts().cgroups) line += " " + path;
    } else {
      line = "error " + boundary.error().ToString();
    }
    line += "\n";
    ssize_t ignored = write(report[1], line.data(), line.size());
    (void)ignored;
    pause();
    _exit(0);
  }
  close(report[1]);
  std::string line;
  for (char c; line.empty() || line.back() != '\n';) {
    pollfd ready{report[0], POLLIN, 0};
    if (poll(&ready, 1, 10000) != 1 || read(report[0], &c, 1) != 1) break;
    line += c;
  }
  close(report[0]);
  std::istringstream in(line);
  std::string first;
  in >> first;
  ASSERT_NE(first, "error") << line;
  pid_t pid1 = std::stoi(first);
  std::vector<std::string> cgroups;
  for (std::string path; in >> path;) cgroups.push_back(path);
  os::UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid1, 0)));
  ASSERT_TRUE(pidfd) << "PID 1 is not running";
  ASSERT_EQ(kill(helper, SIGKILL), 0);
  int status;
  waitpid(helper, &status, 0);
  pollfd p{pidfd.get(), POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 5000), 1) << "PID 1 survived its host process";
  // The cgroups of the dead host are swept by the next start (or `sandbox gc`).
  EXPECT_EQ(RemoveNamespaceLeftovers(), static_cast<int>(cgroups.size()));
  for (const std::string& path : cgroups) EXPECT_FALSE(HostPathExists(path)) << path;
}

// Starts `sh -c 'read x'` (alive until the stream closes).
Expected<ns::Boundary> StartWaitingShell(const TempDir& dir, os::UniqueFd& host) {
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0)
    return Fail(Error::Code::Internal, "socketpair");
  host.reset(sp[0]);
  os::UniqueFd inside(sp[1]);
  os::UniqueFd exe(open("/bin/sh", O_PATH | O_CLOEXEC));
  ns::BoundaryConfig config = ConfigFor(dir);
  config.program_fd = exe.get();
  config.argv = {"sh", "-c", "read x"};
  config.stream_fd = inside.get();
  return ns::StartBoundary(config);
}

std::string StatusLine(pid_t pid, const std::string& key) {
  std::istringstream in(ReadHostFile("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(key + ":")) return line.substr(key.size() + 1);
  return "";
}

TEST(NamespaceBoundary, AsRootNothingInsideIsHostRoot) {
  SKIP_UNLESS_NAMESPACES();
  if (geteuid() != 0) GTEST_SKIP() << "root-only mapping";
  TempDir dir;
  os::UniqueFd host;
  auto boundary = StartWaitingShell(dir, host);
  ASSERT_TRUE(boundary) << boundary.error().ToString();
  EXPECT_TRUE(boundary->facts().root_mode);
  EXPECT_TRUE(boundary->facts().idmapped_workspace);
  // Uid: real, effective, saved, filesystem - all the range's first id.
  std::string base = std::to_string(ns::BoundaryConfig{}.host_id_base);
  EXPECT_EQ(StatusLine(boundary->pid(), "Uid"),
            "\t" + base + "\t" + base + "\t" + base + "\t" + base);
  EXPECT_EQ(StatusLine(boundary->pid(), "Gid"),
            "\t" + base + "\t" + base + "\t" + base + "\t" + base);
  EXPECT_EQ(StatusLine(boundary->pid(), "Groups"), "\t ");  // none
  EXPECT_EQ(StatusLine(boundary->pid(), "NoNewPrivs"), "\t1");
  EXPECT_EQ(StatusLine(boundary->pid(), "Seccomp"), "\t2");
  // CAP_SYS_ADMIN (21) and CAP_SETPCAP (8), in its own namespace only.
  EXPECT_EQ(StatusLine(boundary->pid(), "CapBnd"), "\t0000000000200100");
  EXPECT_EQ(StatusLine(boundary->pid(), "CapEff"), "\t0000000000200100");
  ASSERT_TRUE(boundary->Terminate());
}

TEST(NamespaceBoundary, OutlivesTheThreadThatStartedIt) {
  SKIP_UNLESS_NAMESPACES();
  TempDir dir;
  os::UniqueFd host;
  std::optional<Expected<ns::Boundary>> boundary;
  std::thread([&] { boundary.emplace(StartWaitingShell(dir, host)); }).join();
  ASSERT_TRUE(*boundary) << (*boundary).error().ToString();
  pollfd p{(**boundary).pidfd(), POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 300), 0) << "the boundary died with the thread that started it";
  ASSERT_TRUE((**boundary).Terminate());
}

// Copies `path` (and the directories above it) from the host into `root`.
void CopyIntoRoot(const std::string& root, const std::string& path) {
  namespace fs = std::filesystem;
  fs::path target = fs::path(root) / fs::path(path).relative_path();
  fs::create_directories(target.parent_path());
  fs::copy_file(fs::canonical(path), target, fs::copy_options::overwrite_existing);
  fs::permissions(target, fs::status(fs::canonical(path)).permissions());
}

TEST(NamespaceBoundary, RootfsDirectoryReplacesTheHostSystemDirectories) {
  SKIP_UNLESS_NAMESPACES();
  TempDir dir, rootfs;
  // A minimal image: dash and the libraries it needs, nothing else.
  CopyIntoRoot(rootfs.path(), "/usr/bin/dash");
  CopyIntoRoot(rootfs.path(), "/lib/x86_64-linux-gnu/libc.so.6");
  CopyIntoRoot(rootfs.path(), "/lib64/ld-linux-x86-64.so.2");
  std::filesystem::create_directories(rootfs.Join("etc"));
  WriteHostFile(rootfs.Join("etc/image-marker"), "from the image\n");
  ASSERT_EQ(chmod(rootfs.path().c_str(), 0755), 0);  // traversable by the mapped root
  auto config = ConfigFor(dir);
  config.rootfs = rootfs.path();
  os::UniqueFd sh(open("/bin/sh", O_PATH | O_CLOEXEC));
  auto run = RunInBoundary(config, "/usr/bin/dash",
                           {"sh", "-c",
                            "echo /*; read line < /etc/image-marker; echo $line; "
                            "test -e /etc/shadow && echo shadow || echo no-shadow; "
                            "(: > /usr/x) 2>/dev/null && echo usr-writable || echo usr-ro"});
  ASSERT_TRUE(run) << run.error().ToString();
  EXPECT_EQ(run->output,
            "/dev /etc /lib /lib64 /proc /tmp /usr /workspace\n"
            "from the image\nno-shadow\nusr-ro\n");
}

TEST(NamespaceBoundary, LeavesNoMountOnTheHost) {
  SKIP_UNLESS_NAMESPACES();
  TempDir dir;
  std::string before = ReadHostFile("/proc/self/mountinfo");
  auto run = RunShell(ConfigFor(dir), "echo ok");
  ASSERT_TRUE(run) << run.error().ToString();
  EXPECT_EQ(run->output, "ok\n");
  EXPECT_EQ(ReadHostFile("/proc/self/mountinfo"), before);
}

TEST(NamespaceBoundary, ProbeReportsWhatWorksHere) {
  auto checks = ProbeNamespaceBackend();
  ASSERT_GE(checks.size(), 7u);
  for (const auto& check : checks) {
    std::cout << (check.ok ? "[ok]   " : "[fail] ") << check.name << ": " << check.detail << "\n";
    EXPECT_FALSE(check.detail.empty()) << check.name;
  }
}

// Start-to-first-output latency, printed (a benchmark, not an assertion).
TEST(NamespaceBoundary, ReportsStartToFirstOutputLatency) {
  SKIP_UNLESS_NAMESPACES();
  TempDir dir;
  os::UniqueFd exe(open("/bin/true", O_PATH | O_CLOEXEC));
  os::UniqueFd sh(open("/bin/sh", O_PATH | O_CLOEXEC));
  std::vector<double> to_exec, to_output;
  for (int i = 0; i < 30; ++i) {
    int sp[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    os::UniqueFd host(sp[0]), inside(sp[1]);
    ns::BoundaryConfig config = ConfigFor(dir);
    config.program_fd = sh.get();
    config.argv = {"sh", "-c", "echo x"};
    config.stream_fd = inside.get();
    auto start = std::chrono::steady_clock::now();
    auto boundary = ns::StartBoundary(config);
    ASSERT_TRUE(boundary) << boundary.error().ToString();
    auto execd = std::chrono::steady_clock::now();
    char c;
    ASSERT_EQ(read(host.get(), &c, 1), 1);
    auto first = std::chrono::steady_clock::now();
    to_exec.push_back(std::chrono::duration<double, std::milli>(execd - start).count());
    to_output.push_back(std::chrono::duration<double, std::milli>(first - start).count());
  }
  std::sort(to_exec.begin(), to_exec.end());
  std::sort(to_output.begin(), to_output.end());
  std::cout << "namespace boundary: start->exec median " << to_exec[to_exec.size() / 2]
            << " ms, start->first output of sh median " << to_output[to_output.size() / 2]
            << " ms (p90 " << to_output[to_output.size() * 9 / 10] << " ms)\n";
  RecordProperty("start_to_first_output_ms_median",
                 std::to_string(to_output[to_output.size() / 2]));
}

}  // namespace
}  // namespace sandbox::testing
