// The docker backend when its daemon restarts mid-run: the Exec in flight
// and every later call fail with Unavailable instead of hanging, and what
// the restart left behind is removed (by Close once the daemon is back, or
// by `sandbox gc` once the host process is gone).
//
// Each test starts a dockerd of its own (own config file, data root, exec
// root, pid file, socket, and the containerd it manages under its exec
// root), so restarting it never disturbs the shared daemon other tests use
// at the same time. It is stopped by its pid on every path.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "backends.h"
#include "docker/engine.h"
#include "os/spawn.h"
#include "sandbox/docker.h"
#include "test_util.h"

extern char** environ;

namespace sandbox::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

// How long anything here may take before it counts as a hang. Not a speed
// assertion: a working backend reports the broken connection at once (about
// 0.1 s here), a hang never does.
constexpr seconds kHangBound{60};

// Polls `done` every 50 ms until it holds or `bound` passes; its last value.
template <typename F>
bool WaitFor(F done, Clock::duration bound = kHangBound) {
  const auto deadline = Clock::now() + bound;
  while (!done()) {
    if (Clock::now() >= deadline) return done();
    std::this_thread::sleep_for(milliseconds(50));
  }
  return true;
}

// Why this machine cannot run a private dockerd, or "".
std::string PrivateDockerdUnavailableReason() {
  if (::geteuid() != 0) return "a private dockerd needs root";
  const char* path = std::getenv("PATH");
  for (const char* daemon : {"dockerd", "containerd"})
    if (!os::FindExecutable(daemon, path ? path : "/usr/sbin:/usr/bin:/sbin:/bin", -1))
      return std::string(daemon) + " not found on PATH (apt-get install docker.io)";
  if (!HostPathExists("/bin/busybox")) return "no /bin/busybox to build the image from";
  return "";
}

// Starts `argv` (argv[0] searched on PATH) as a child with stdin from
// /dev/null and stdout and stderr appended to `log_path`, in a session of
// its own, SIGKILLed should this test process die first. -1 on failure.
pid_t SpawnLogged(const std::vector<std::string>& args, const std::string& log_path,
                  const std::vector<std::string>& extra_env = {}) {
  // Everything is prepared before fork: the child only makes raw calls.
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view text = *entry;
    bool replaced = false;
    for (const std::string& extra : extra_env)
      replaced = replaced || text.substr(0, text.find('=')) == extra.substr(0, extra.find('='));
    if (!replaced) env.emplace_back(text);
  }
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> envp;
  for (std::string& entry : env) envp.push_back(entry.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) _exit(127);
  ::setsid();
  int null_fd = ::open("/dev/null", O_RDONLY);
  int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (null_fd < 0 || log_fd < 0) _exit(127);
  ::dup2(null_fd, 0);
  ::dup2(log_fd, 1);
  ::dup2(log_fd, 2);
  ::execvpe(argv[0], argv.data(), envp.data());
  _exit(127);
}

// Sends `sig` to our child `pid` and reaps it, SIGKILLing it after
// kHangBound. False when it had to be killed. Sets `pid` to -1.
bool StopChild(pid_t& pid, int sig) {
  if (pid <= 0) return true;
  ::kill(pid, sig);
  int status = 0;
  bool reaped = WaitFor([&] { return ::waitpid(pid, &status, WNOHANG) == pid; });
  if (!reaped) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  pid = -1;
  return reaped;
}

// A dockerd of this test's own under `dir`, with a containerd of its own
// beside it (as on a host where containerd is a service of its own: a
// dockerd that crashes leaves containerd and the containers' shims running,
// and the next dockerd finds them there). Both are stopped by their pids
// when it is destroyed.
class PrivateDockerd {
 public:
  explicit PrivateDockerd(std::string dir) : dir_(std::move(dir)) {
    WriteHostFile(dir_ + "/containerd.toml",
                  "version = 2\n"
                  "root = \"" + dir_ + "/containerd/root\"\n"
                  "state = \"" + dir_ + "/containerd/state\"\n"
                  "disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n"
                  "[grpc]\n"
                  "  address = \"" + containerd_socket() + "\"\n");
    nlohmann::json config = {
        {"data-root", dir_ + "/data"},
        {"exec-root", dir_ + "/exec"},
        {"pidfile", dir_ + "/dockerd.pid"},
        {"hosts", nlohmann::json::array({host()})},
        {"containerd", containerd_socket()},
        {"iptables", false},
        {"ip6tables", false},
        {"bridge", "none"},
        {"live-restore", false},
        {"log-level", "warn"},
    };
    WriteHostFile(dir_ + "/daemon.json", config.dump(2));
  }
  PrivateDockerd(const PrivateDockerd&) = delete;
  PrivateDockerd& operator=(const PrivateDockerd&) = delete;

  // dockerd first: its shutdown stops the containers (and so their shims).
  ~PrivateDockerd() {
    (void)StopChild(dockerd_, SIGTERM);
    (void)StopChild(containerd_, SIGTERM);
    // dockerd bind-mounts its data root onto itself (a private mount) and
    // undoes that on shutdown only if it made it: not when an instance
    // before it was SIGKILLed.
    ::umount2((dir_ + "/data").c_str(), MNT_DETACH);
  }

  std::string host() const { return "unix://" + dir_ + "/docker.sock"; }
  std::string containerd_socket() const { return dir_ + "/containerd/containerd.sock"; }
  std::string log() const { return ReadHostFile(dir_ + "/daemon.log"); }

  // Starts containerd (once) and dockerd, and waits until dockerd answers.
  Status Start() {
    if (dockerd_ > 0) return Fail(Error::Code::Internal, "dockerd is already running");
    const std::string log_path = dir_ + "/daemon.log";
    if (containerd_ <= 0) {
      containerd_ = SpawnLogged({"containerd", "--config", dir_ + "/containerd.toml"}, log_path);
      if (containerd_ < 0) return Fail(Error::Code::Internal, "cannot start containerd");
      if (!WaitFor([&] { return HostPathExists(containerd_socket()); }))
        return Fail(Error::Code::Unavailable, "containerd did not start; the log:\n" + log());
    }
    dockerd_ = SpawnLogged({"dockerd", "--config-file", dir_ + "/daemon.json"}, log_path);
    if (dockerd_ < 0) return Fail(Error::Code::Internal, "cannot start dockerd");
    bool exited = false;
    bool up = WaitFor([&] {
      int status;
      if (::waitpid(dockerd_, &status, WNOHANG) == dockerd_) {
        exited = true;
        dockerd_ = -1;
        return true;
      }
      return static_cast<bool>(docker::Engine::Connect(host()));
    });
    if (exited) return Fail(Error::Code::Unavailable, "dockerd exited; the log:\n" + log());
    if (!up) {
      (void)StopChild(dockerd_, SIGKILL);
      return Fail(Error::Code::Unavailable, "dockerd did not answer in time; the log:\n" + log());
    }
    return {};
  }

  // Sends `sig` to dockerd and reaps it (SIGKILL after kHangBound).
  Status Stop(int sig) {
    if (!StopChild(dockerd_, sig))
      return Fail(Error::Code::Internal, "dockerd ignored the signal; killed it");
    return {};
  }

 private:
  std::string dir_;
  pid_t containerd_ = -1;
  pid_t dockerd_ = -1;
};

class DockerRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string reason = PrivateDockerdUnavailableReason(); !reason.empty()) {
      if (BackendRequired("docker"))
        FAIL() << "backend docker is required by SANDBOX_REQUIRE_BACKENDS, but a daemon restart "
                  "cannot be tested: "
               << reason;
      GTEST_SKIP() << "a private dockerd cannot run: " << reason;
    }
    daemon_ = std::make_unique<PrivateDockerd>(daemon_dir_.path());
    Status started = daemon_->Start();
    ASSERT_TRUE(started) << started.error().ToString();
    Status built = BuildDockerImage("", "", nullptr, daemon_->host());
    ASSERT_TRUE(built) << built.error().ToString();
  }

  // How many containers carrying the label dev.sandbox.pid=`owner` the
  // private daemon has (running or not); -1 when it cannot be asked.
  long Containers(pid_t owner) const {
    auto engine = docker::Engine::Connect(daemon_->host());
    if (!engine) return -1;
    std::string filter = "%7B%22label%22%3A%5B%22dev.sandbox.pid%3D" + std::to_string(owner) +
                         "%22%5D%7D";  // {"label":["dev.sandbox.pid=PID"]}
    auto listed = engine->Request("GET", "/containers/json?all=1&filters=" + filter);
    if (!listed || listed->status != 200) return -1;
    auto parsed = nlohmann::json::parse(listed->body, nullptr, false);
    return parsed.is_array() ? static_cast<long>(parsed.size()) : -1;
  }

  TempDir daemon_dir_;
  TempDir workspace_;
  std::unique_ptr<PrivateDockerd> daemon_;
};

TEST_F(DockerRestartTest, AnExecDuringADaemonRestartIsUnavailableAndSoIsEveryLaterCall) {
  DockerOptions options;
  options.workspace = workspace_.path();
  options.agent_path = ContainerAgentPath();
  options.docker_host = daemon_->host();
  auto made = NewDockerSandbox(options);
  ASSERT_TRUE(made) << made.error().ToString();
  std::shared_ptr<Sandbox> box = std::move(*made);
  auto hello = box->Exec({}, Command{.path = "echo", .args = {"up"}});
  ASSERT_TRUE(hello) << hello.error().ToString();
  EXPECT_EQ(hello->stdout_data, "up\n");
  ASSERT_EQ(Containers(::getpid()), 1);

  const std::string marker = UniqueMarker();
  auto running = std::async(std::launch::async, [box, marker] {
    return box->Exec({}, Command{.path = "sleep", .args = {marker}});
  });
  // On an early return, close the sandbox before `running` is destroyed
  // (which waits for the Exec): Close ends the Exec. Closing twice is fine.
  struct CloseOnExit {
    std::shared_ptr<Sandbox> box;
    ~CloseOnExit() { (void)box->Close(); }
  } close_on_exit{box};
  // Under runc the command is a host process.
  ASSERT_TRUE(WaitFor([&] { return CountProcessesWithArg(marker) == 1; }));

  // The crash-and-restart of the daemon: SIGKILL, then a new dockerd on the
  // same data root (which finds the container, stopped without live-restore).
  Status stopped = daemon_->Stop(SIGKILL);
  ASSERT_TRUE(stopped) << stopped.error().ToString();
  Status restarted = daemon_->Start();
  ASSERT_TRUE(restarted) << restarted.error().ToString();

  if (running.wait_for(kHangBound) != std::future_status::ready) {
    ADD_FAILURE() << "the Exec in flight still hangs " << kHangBound.count()
                  << " s after the daemon restart";
    (void)box->Close();  // ends it, so the test can go on
  }
  auto result = running.get();
  ASSERT_FALSE(result) << "exit " << result->exit_code;
  EXPECT_EQ(result.error().code(), Error::Code::Unavailable) << result.error().ToString();
  EXPECT_NE(result.error().message().find("create a new sandbox"), std::string::npos)
      << result.error().message();

  // Every later call fails the same way, at once.
  auto later = box->Exec({}, Command{.path = "true"});
  ASSERT_FALSE(later);
  EXPECT_EQ(later.error().code(), Error::Code::Unavailable) << later.error().ToString();
  auto read = box->ReadFile({}, "anything");
  ASSERT_FALSE(read);
  EXPECT_EQ(read.error().code(), Error::Code::Unavailable) << read.error().ToString();
  auto write = box->WriteFile({}, "anything", "x", 0644);
  ASSERT_FALSE(write);
  EXPECT_EQ(write.error().code(), Error::Code::Unavailable) << write.error().ToString();

  // The container outlived the restart (stopped); Close, with the daemon
  // back, removes it, and nothing of the command is left on the host.
  EXPECT_EQ(Containers(::getpid()), 1);
  EXPECT_TRUE(box->Close());
  EXPECT_EQ(Containers(::getpid()), 0);
  EXPECT_EQ(WaitForNoProcessesWithArg(marker, 10000), 0);
}

TEST_F(DockerRestartTest, GcRemovesTheContainerOfARunCutShortByADaemonRestart) {
  // `sandbox run` of a long command while the daemon restarts (SIGTERM, as a
  // service manager does): the run fails instead of hanging, and as the
  // daemon was still down when the CLI tried to remove its container, the
  // container is left to `sandbox gc`. (The marker is an argument of the
  // command inside only, not of the CLI.)
  const std::string marker = UniqueMarker();
  const std::string cli_log = daemon_dir_.Join("cli.log");
  pid_t cli = SpawnLogged({kCliPath, "run", "--backend", "docker", "--workspace",
                           workspace_.path(), "--", "sh", "-c", "exec sleep " + marker},
                          cli_log,
                          {"DOCKER_HOST=" + daemon_->host(), "SANDBOX_AGENT=" + ContainerAgentPath()});
  ASSERT_GT(cli, 0);
  const pid_t owner = cli;
  struct KillOnExit {
    pid_t& pid;
    ~KillOnExit() { (void)StopChild(pid, SIGKILL); }
  } kill_on_exit{cli};
  ASSERT_TRUE(WaitFor([&] { return Containers(owner) == 1; })) << ReadHostFile(cli_log);
  ASSERT_TRUE(WaitFor([&] { return CountProcessesWithArg(marker) == 1; })) << ReadHostFile(cli_log);

  Status stopped = daemon_->Stop(SIGTERM);
  ASSERT_TRUE(stopped) << stopped.error().ToString();
  int status = 0;
  bool exited = WaitFor([&] { return ::waitpid(cli, &status, WNOHANG) == cli; });
  ASSERT_TRUE(exited) << "sandbox run still hangs " << kHangBound.count()
                      << " s after the daemon stopped";
  cli = -1;
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 125);  // the sandbox failed (Unavailable)
  const std::string said = ReadHostFile(cli_log);
  EXPECT_NE(said.find("create a new sandbox"), std::string::npos) << said;

  Status restarted = daemon_->Start();
  ASSERT_TRUE(restarted) << restarted.error().ToString();
  EXPECT_EQ(Containers(owner), 1);  // left behind
  CliRun gc = RunCli({"gc"}, CliOptions{.extra_env = {"DOCKER_HOST=" + daemon_->host()}});
  EXPECT_EQ(gc.exit_code, 0) << gc.err;
  EXPECT_NE(gc.out.find("removed 1 leftover container of docker and gvisor sandboxes"),
            std::string::npos)
      << gc.out;
  EXPECT_EQ(Containers(owner), 0);
  EXPECT_EQ(WaitForNoProcessesWithArg(marker, 10000), 0);
}

}  // namespace
}  // namespace sandbox::testing
