// The microvm backend with real QEMU guests: the guest's own kernel, no
// network device, the VMM's lifetime, and hostile guests (a console flood,
// a panic or power-off during an Exec, an agent sending an oversized frame).
// The conformance suite runs against it too (backends.cc).
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "backends.h"
#include "microvm/vmm.h"
#include "os/syscalls.h"
#include "os/unique_fd.h"
#include "sandbox/microvm.h"
#include "test_util.h"

namespace sandbox::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

Command Sh(const std::string& script) { return Command{.path = "/bin/sh", .args = {"-c", script}}; }

// Live QEMU processes whose parent is `parent`. Test-only /proc scan.
std::vector<pid_t> QemuChildrenOf(pid_t parent) {
  std::vector<pid_t> found;
  DIR* proc = opendir("/proc");
  if (!proc) return found;
  while (dirent* entry = readdir(proc)) {
    pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::string(entry->d_name) + "/stat");
    std::string line;
    std::getline(stat, line);
    auto close_paren = line.rfind(')');
    if (close_paren == std::string::npos) continue;
    std::string comm = line.substr(line.find('(') + 1, close_paren - line.find('(') - 1);
    char state = line[close_paren + 2];
    pid_t ppid = static_cast<pid_t>(std::atoi(line.c_str() + close_paren + 4));
    if (ppid == parent && comm.starts_with("qemu-system") && state != 'Z') found.push_back(pid);
  }
  closedir(proc);
  return found;
}

bool ProcessGone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  auto close_paren = line.rfind(')');
  return close_paren != std::string::npos && line[close_paren + 2] == 'Z';
}

class MicroVmTest : public ::testing::Test {
 protected:
  void SetUp() override { SANDBOX_SKIP_UNLESS_AVAILABLE("microvm"); }

  std::unique_ptr<Sandbox> Boot(MicroVmOptions options = {}) {
    auto image = TestVmImage();
    EXPECT_TRUE(image) << image.error().ToString();
    if (!image) return nullptr;
    options.workspace = workspace_.path();
    options.image = *image;
    auto made = NewMicroVmSandbox(options);
    EXPECT_TRUE(made) << made.error().ToString();
    return made ? std::move(*made) : nullptr;
  }

  TempDir workspace_;
};

TEST_F(MicroVmTest, CommandsRunOnTheGuestsKernelNotTheHosts) {
  auto sb = Boot();
  ASSERT_NE(sb, nullptr);
  utsname host{};
  ASSERT_EQ(uname(&host), 0);
  std::string release = TestVmImage()->kernel_release;
  ASSERT_NE(release, host.release) << "the guest kernel must differ from the host's for this test";
  auto result = sb->Exec(Context(), Sh("uname -r; cat /proc/version"));
  ASSERT_TRUE(result) << result.error().ToString();
  EXPECT_EQ(result->exit_code, 0) << result->stderr_data;
  EXPECT_TRUE(result->stdout_data.starts_with(release + "\nLinux version " + release + " "))
      << result->stdout_data;
  EXPECT_EQ(result->stdout_data.find(host.release), std::string::npos);
}

// Under emulation the guest's CPU offers no ERMS, so neither its kernel nor
// glibc copies with `rep movsb`, which TCG runs a byte at a time.
TEST_F(MicroVmTest, UnderEmulationTheGuestCpuHasNoFastRepMovsb) {
  if (vm::KvmUsable()) GTEST_SKIP() << "under KVM the guest has the host's CPU";
  auto sb = Boot();
  ASSERT_NE(sb, nullptr);
  auto result = sb->Exec(Context(), Sh("grep -m1 '^flags' /proc/cpuinfo"));
  ASSERT_TRUE(result) << result.error().ToString();
  ASSERT_EQ(result->exit_code, 0) << result->stderr_data;
  std::string flags = result->stdout_data;
  EXPECT_NE(flags.find(" sse2 "), std::string::npos) << flags;  // the line read is the flags
  EXPECT_EQ(flags.find(" erms"), std::string::npos) << flags;
}

TEST_F(MicroVmTest, ReportsVmIsolationAndHasNoNetworkDevice) {
  auto sb = Boot();
  ASSERT_NE(sb, nullptr);
  Capabilities caps = sb->GetCapabilities();
  EXPECT_EQ(caps.isolation, Isolation::VM);
  EXPECT_FALSE(caps.network);
  EXPECT_EQ(caps.backend, "microvm");
  auto result = sb->Exec(Context(), Sh("ls /sys/class/net"));
  ASSERT_TRUE(result) << result.error().ToString();
  EXPECT_EQ(result->stdout_data, "lo\n");
}

TEST_F(MicroVmTest, NetworkIsRefusedNotIgnored) {
  MicroVmOptions options;
  options.workspace = workspace_.path();
  options.image = *TestVmImage();
  options.network = true;
  auto made = NewMicroVmSandbox(options);
  ASSERT_FALSE(made);
  EXPECT_EQ(made.error().code(), Error::Code::Unsupported);
}

TEST_F(MicroVmTest, WorkspaceIsSharedBothWays) {
  WriteHostFile(workspace_.Join("from-host.txt"), "host bytes");
  auto sb = Boot();
  ASSERT_NE(sb, nullptr);
  auto result = sb->Exec(
      Context(), Sh("cat /workspace/from-host.txt; printf guest > /workspace/from-guest.txt; pwd"));
  ASSERT_TRUE(result) << result.error().ToString();
  EXPECT_EQ(result->stdout_data, "host bytes/workspace\n");
  EXPECT_EQ(ReadHostFile(workspace_.Join("from-guest.txt")), "guest");
}

// Each command's tree lives in a cgroup of its own (killed whole with
// cgroup.kill), made by the agent in a cgroup2 mount that is detached before
// any command runs: commands, uid 0 without capabilities, would own its
// files and could move themselves out; they cannot mount it again.
TEST_F(MicroVmTest, CommandsGetACgroupEachAndCannotReachTheHierarchy) {
  auto sb = Boot();
  ASSERT_NE(sb, nullptr);
  auto result = sb->Exec(Context(), Sh("cat /proc/self/cgroup; grep -c cgroup /proc/mounts;"
                                       " mkdir -p /tmp/cg; mount -t cgroup2 cgroup2 /tmp/cg"
                                       " 2>/dev/null || echo refused"));
  ASSERT_TRUE(result) << result.error().ToString();
  EXPECT_TRUE(result->stdout_data.starts_with("0::/commands/t")) << result->stdout_data;
  EXPECT_TRUE(result->stdout_data.ends_with("\n0\nrefused\n")) << result->stdout_data;
}

// Commands share the agent's uid 0 (without capabilities) but run in a PID
// namespace below it: no pid they can name is the agent's or its init's, so
// signalling every pid they can leaves it serving; and both are
// non-dumpable, so /proc (the guest's, which lists them) opens none of
// their fds (the cgroup's among them) nor their environment.
TEST_F(MicroVmTest, CommandsCannotSignalOrInspectTheAgent) {
  auto sb = Boot();
  ASSERT_NE(sb, nullptr);
  auto attack = sb->Exec(
      Context(), Sh("kill -KILL -1; i=1; while [ $i -le 400 ]; do "
                    "[ $i -ne $$ ] && kill -KILL $i 2>/dev/null; i=$((i+1)); done; echo sent"));
  ASSERT_TRUE(attack) << attack.error().ToString();
  EXPECT_EQ(attack->stdout_data, "sent\n");
  auto peek = sb->Exec(
      Context(),
      Sh("for p in /proc/[0-9]*; do [ \"$(head -c6 $p/cmdline 2>/dev/null | tr '\\0' ' ')\" ="
         " '/init ' ] || continue; n=0; for f in $p/fd/*; do readlink $f >/dev/null 2>&1 && n=$((n+1));"
         " ( : < $f ) 2>/dev/null && n=$((n+1)); done; echo -n fd=$n;"
         " head -c1 $p/environ >/dev/null 2>&1 && echo ' env=open' || echo ' env=denied'; done"));
  ASSERT_TRUE(peek) << peek.error().ToString();
  // The init (PID 1), the agent (its worker) and the reaper of the
  // commands' PID namespace (a clone of the agent).
  EXPECT_EQ(peek->stdout_data, "fd=0 env=denied\nfd=0 env=denied\nfd=0 env=denied\n");
}

TEST_F(MicroVmTest, CloseStopsTheVmm) {
  ASSERT_TRUE(QemuChildrenOf(getpid()).empty());
  auto sb = Boot();
  ASSERT_NE(sb, nullptr);
  auto vmms = QemuChildrenOf(getpid());
  ASSERT_EQ(vmms.size(), 1u);
  ASSERT_TRUE(sb->Close());
  EXPECT_TRUE(ProcessGone(vmms[0]));
  EXPECT_TRUE(QemuChildrenOf(getpid()).empty());
  auto after = sb->Exec(Context(), Sh("true"));
  ASSERT_FALSE(after);
  EXPECT_EQ(after.error().code(), Error::Code::Unavailable);
}

TEST_F(MicroVmTest, VmmDiesWithTheHostProcess) {
  // The CLI boots a VM and is then SIGKILLed: nothing of it may stay.
  std::string cli = SANDBOX_CLI_PATH;
  if (cli.empty()) GTEST_SKIP() << "built without the CLI";
  std::vector<std::string> args = {
      cli, "run", "--backend", "microvm", "--workspace", workspace_.path(), "--", "sleep", "600"};
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, cli.c_str(), nullptr, nullptr, argv.data(), environ), 0);
  std::vector<pid_t> vmms;
  for (auto deadline = Clock::now() + 60s; vmms.empty() && Clock::now() < deadline;) {
    std::this_thread::sleep_for(20ms);
    vmms = QemuChildrenOf(pid);
  }
  ASSERT_EQ(vmms.size(), 1u);
  std::this_thread::sleep_for(1s);  // let it get going
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_EQ(waitpid(pid, nullptr, 0), pid);
  auto deadline = Clock::now() + 5s;
  while (!ProcessGone(vmms[0]) && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(ProcessGone(vmms[0])) << "QEMU " << vmms[0] << " outlived its killed parent";
}

TEST_F(MicroVmTest, ConsoleFloodKeepsHostMemoryBounded) {
  // Everything the guest writes to its console is copied to this pipe and
  // counted, so the test sees the flood arrive while the host keeps only a
  // bounded tail.
  auto pipe = os::MakePipe();
  ASSERT_TRUE(pipe);
  std::atomic<std::uint64_t> seen{0};
  std::thread counter([fd = pipe->read.get(), &seen] {
    char buffer[65536];
    for (;;) {
      ssize_t n = read(fd, buffer, sizeof buffer);
      if (n <= 0) return;
      seen += static_cast<std::uint64_t>(n);
    }
  });
  MicroVmOptions options;
  options.console_fd = pipe->write.get();
  auto sb = Boot(options);
  ASSERT_NE(sb, nullptr);
  std::size_t rss_before = CurrentRssBytes();
  std::uint64_t seen_before = seen.load();
  auto flood = sb->Exec(Context(),
                        Sh("end=$(($(date +%s) + 6)); while [ $(date +%s) -lt $end ]; do "
                           "cat /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/GPL-3 "
                           "> /dev/console; done; echo done"));
  ASSERT_TRUE(flood) << flood.error().ToString();
  EXPECT_EQ(flood->stdout_data, "done\n") << flood->stderr_data;
  std::uint64_t flooded = seen.load() - seen_before;
  // The emulated UART takes one exit per byte, so a guest cannot push its
  // console much faster than this; twice the host's 64 KiB ring is enough
  // to have wrapped it.
  EXPECT_GT(flooded, 128u * 1024) << "the guest did not flood its console";
  std::size_t rss_after = CurrentRssBytes();
  EXPECT_LT(rss_after, rss_before + 8 * 1024 * 1024)
      << flooded << " console bytes grew the host from " << rss_before << " to " << rss_after;
  auto still = sb->Exec(Context(), Sh("echo alive"));
  ASSERT_TRUE(still) << still.error().ToString();
  EXPECT_EQ(still->stdout_data, "alive\n");
  ASSERT_TRUE(sb->Close());
  pipe->write.reset();
  counter.join();
}

// A guest that dies (the kernel panics, or powers off) while an Exec waits.
void ExpectGuestDeathEndsExec(Sandbox& sb, const std::string& sysrq) {
  auto waiting =
      std::async(std::launch::async, [&sb] { return sb.Exec(Context(), Sh("sleep 600")); });
  std::this_thread::sleep_for(500ms);  // the sleep is running
  auto killed_at = Clock::now();
  auto trigger = sb.Exec(Context(), Sh("echo " + sysrq + " > /proc/sysrq-trigger"));
  ASSERT_EQ(waiting.wait_for(5s), std::future_status::ready) << "an Exec outlived its guest by 5 s";
  EXPECT_LT(Clock::now() - killed_at, 5s);
  auto result = waiting.get();
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code(), Error::Code::Unavailable) << result.error().ToString();
  ASSERT_FALSE(trigger);
  EXPECT_EQ(trigger.error().code(), Error::Code::Unavailable);
  auto later = sb.Exec(Context(), Sh("true"));
  ASSERT_FALSE(later);
  EXPECT_EQ(later.error().code(), Error::Code::Unavailable);
}

TEST_F(MicroVmTest, GuestPanicDuringExecIsUnavailableWithinFiveSeconds) {
  auto sb = Boot();
  ASSERT_NE(sb, nullptr);
  ExpectGuestDeathEndsExec(*sb, "c");
}

TEST_F(MicroVmTest, GuestPowerOffDuringExecIsUnavailableWithinFiveSeconds) {
  auto sb = Boot();
  ASSERT_NE(sb, nullptr);
  ExpectGuestDeathEndsExec(*sb, "o");
}

TEST_F(MicroVmTest, OversizedFrameFromAHostileGuestIsRefused) {
  // The guest's /init sends a frame header announcing 4 GiB, then junk
  // without end: the host must refuse at the header, without buffering.
  VmImageOptions image_options;
  // A guest's /init must be static and a sanitizer build's is not: where
  // $SANDBOX_CONTAINER_AGENT names the static agent the tests put into
  // guests and containers, the hostile guest built beside it is taken.
  image_options.agent_path = SANDBOX_HOSTILE_GUEST_PATH;
  if (const char* agent = std::getenv("SANDBOX_CONTAINER_AGENT"); agent && *agent)
    image_options.agent_path =
        (std::filesystem::path(agent).parent_path() / "sandbox-hostile-guest").string();
  auto image = BuildVmImage(image_options);
  ASSERT_TRUE(image) << image.error().ToString();
  MicroVmOptions options;
  options.workspace = workspace_.path();
  options.image = *image;
  std::size_t rss_before = CurrentRssBytes();
  auto made = NewMicroVmSandbox(options);
  ASSERT_FALSE(made);
  EXPECT_EQ(made.error().code(), Error::Code::Unavailable);
  EXPECT_NE(made.error().message().find("frame"), std::string::npos) << made.error().message();
  EXPECT_LT(CurrentRssBytes(), rss_before + 16 * 1024 * 1024);
  EXPECT_TRUE(QemuChildrenOf(getpid()).empty());
}

TEST_F(MicroVmTest, PoolHandsOutBootedGuestsWithFreshWorkspaces) {
  MicroVmPoolOptions options;
  options.vm.image = *TestVmImage();
  options.workspaces_dir = workspace_.path();
  options.size = 1;
  // The second Acquire waits, so its guest boots at once, this long
  // refill delay notwithstanding.
  options.refill_delay = std::chrono::hours(1);
  auto pool = MicroVmPool::Create(options);
  ASSERT_TRUE(pool) << pool.error().ToString();
  auto first = (*pool)->Acquire();
  ASSERT_TRUE(first) << first.error().ToString();
  auto second = (*pool)->Acquire();
  ASSERT_TRUE(second) << second.error().ToString();
  EXPECT_NE(first->workspace, second->workspace);
  auto written = first->sandbox->Exec({}, Sh("echo one > /workspace/mark; ls /workspace"));
  ASSERT_TRUE(written) << written.error().ToString();
  EXPECT_EQ(written->stdout_data, "mark\n");
  EXPECT_EQ(ReadHostFile(first->workspace + "/mark"), "one\n");
  auto other = second->sandbox->Exec({}, Sh("ls -A /workspace | wc -l"));
  ASSERT_TRUE(other) << other.error().ToString();
  EXPECT_EQ(other->stdout_data, "0\n");
  ASSERT_TRUE(first->sandbox->Close());
  ASSERT_TRUE(second->sandbox->Close());
  pool->reset();  // closes the idle guest it booted meanwhile
  EXPECT_TRUE(QemuChildrenOf(getpid()).empty());
}

TEST_F(MicroVmTest, PoolHoldsTheRefillBackWhileANewLeaseStarts) {
  MicroVmPoolOptions options;
  options.vm.image = *TestVmImage();
  options.workspaces_dir = workspace_.path();
  options.size = 1;
  options.refill_delay = 3s;
  auto pool = MicroVmPool::Create(options);
  ASSERT_TRUE(pool) << pool.error().ToString();
  auto lease = (*pool)->Acquire();
  ASSERT_TRUE(lease) << lease.error().ToString();
  auto handed_out = Clock::now();
  std::this_thread::sleep_for(1500ms);
  // Only the leased guest's VMM: the replacement has not started booting.
  EXPECT_EQ(QemuChildrenOf(getpid()).size(), 1u);
  auto ran = lease->sandbox->Exec({}, Command{.path = "true"});
  ASSERT_TRUE(ran) << ran.error().ToString();
  while (QemuChildrenOf(getpid()).size() < 2 && Clock::now() < handed_out + 60s)
    std::this_thread::sleep_for(10ms);
  auto refill_seen = Clock::now();
  EXPECT_EQ(QemuChildrenOf(getpid()).size(), 2u);  // then it does, once the delay is over
  EXPECT_GE(refill_seen - handed_out, 2900ms);
  ASSERT_TRUE(lease->sandbox->Close());
  pool->reset();
  EXPECT_TRUE(QemuChildrenOf(getpid()).empty());
}

TEST_F(MicroVmTest, ImagesUnusedForADayAreRemovedByTheNextBuild) {
  namespace fs = std::filesystem;
  auto image = TestVmImage();
  ASSERT_TRUE(image) << image.error().ToString();
  fs::path dir = fs::path(image->initramfs).parent_path();
  // Another agent's image, last used two days ago; one used an hour ago;
  // a file of another name. The image in use is set back two hours only:
  // other test processes build and boot from it meanwhile.
  fs::path stale = dir / "initramfs-00000000000000aa.cpio";
  fs::path recent = dir / "initramfs-00000000000000bb.cpio";
  fs::path other = dir / "initramfs-00000000000000cc.cpio.keep";
  for (const fs::path& path : {stale, recent, other}) std::ofstream(path) << "x";
  auto now = fs::file_time_type::clock::now();
  fs::last_write_time(stale, now - 48h);
  fs::last_write_time(recent, now - 1h);
  fs::last_write_time(other, now - 48h);
  fs::last_write_time(image->initramfs, now - 2h);
  VmImageOptions options;
  options.agent_path = ContainerAgentPath();
  auto rebuilt = BuildVmImage(options);
  ASSERT_TRUE(rebuilt) << rebuilt.error().ToString();
  EXPECT_EQ(rebuilt->initramfs, image->initramfs);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(recent));
  EXPECT_TRUE(fs::exists(other));
  ASSERT_TRUE(fs::exists(image->initramfs));
  EXPECT_LT(now - fs::last_write_time(image->initramfs), 1h);  // marked used again
  fs::last_write_time(image->initramfs, now - 2h);
  auto sb = Boot();  // booting from an image marks it used too
  ASSERT_NE(sb, nullptr);
  EXPECT_LT(now - fs::last_write_time(image->initramfs), 1h);
  (void)sb->Close();
  fs::remove(recent);
  fs::remove(other);
}

TEST(MicroVmPoolOptionsTest, BadOptionsAreRefused) {
  MicroVmPoolOptions options;
  options.workspaces_dir = "/tmp";
  options.size = 0;
  auto empty = MicroVmPool::Create(options);
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code(), Error::Code::InvalidArgument);
  options.size = 1;
  options.refill_delay = -1ms;
  auto negative = MicroVmPool::Create(options);
  ASSERT_FALSE(negative);
  EXPECT_EQ(negative.error().code(), Error::Code::InvalidArgument);
  options.refill_delay = 0ms;
  options.workspaces_dir = "/nonexistent-sandbox-dir";
  auto missing = MicroVmPool::Create(options);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), Error::Code::NotADirectory);
}

}  // namespace
}  // namespace sandbox::testing
