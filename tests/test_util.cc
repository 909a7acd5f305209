#include "test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace sandbox::testing {

TempDir::TempDir() {
  const char* base = getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/sandbox-test-XXXXXX";
  if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  path_ = std::filesystem::canonical(pattern).string();
}

TempDir::~TempDir() {
  std::error_code ec;
  // Make everything writable first so a test's chmod does not leak the dir.
  for (auto it = std::filesystem::recursive_directory_iterator(
           path_, std::filesystem::directory_options::skip_permission_denied, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec))
      chmod(it->path().c_str(), 0700);
  }
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::Join(std::string_view name) const {
  return path_ + "/" + std::string(name);
}

void WriteHostFile(const std::string& path, std::string_view data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

std::string ReadHostFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool HostPathExists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

int CountProcessesWithArg(std::string_view marker) {
  int count = 0;
  DIR* proc = opendir("/proc");
  if (!proc) return -1;
  while (dirent* entry = readdir(proc)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    std::string base = std::string("/proc/") + entry->d_name;
    std::string stat = ReadHostFile(base + "/stat");
    auto close_paren = stat.rfind(')');
    if (close_paren == std::string::npos || close_paren + 2 >= stat.size()) continue;
    if (stat[close_paren + 2] == 'Z') continue;
    std::string cmdline = ReadHostFile(base + "/cmdline");
    std::size_t start = 0;
    while (start < cmdline.size()) {
      std::size_t end = cmdline.find('\0', start);
      if (end == std::string::npos) end = cmdline.size();
      if (std::string_view(cmdline).substr(start, end - start) == marker) {
        ++count;
        break;
      }
      start = end + 1;
    }
  }
  closedir(proc);
  return count;
}

int WaitForNoProcessesWithArg(std::string_view marker, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int count = CountProcessesWithArg(marker);
  while (count > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    count = CountProcessesWithArg(marker);
  }
  return count;
}

std::string UniqueMarker() {
  static std::atomic<int> counter{0};
  // A number of seconds large enough that a sleep never ends during a test
  // and unique per process and call.
  return std::to_string(900000 + (getpid() % 50000) * 10 + (counter++ % 10)) +
         std::to_string(counter.load());
}

static std::size_t StatusField(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::stoull(line.substr(std::string(field).size())) * 1024;
  }
  return 0;
}

std::size_t PeakRssBytes() { return StatusField("VmHWM:"); }
std::size_t CurrentRssBytes() { return StatusField("VmRSS:"); }

// Runs the CLI with `args` (argv[1..]) and waits for it.
CliRun RunCli(const std::vector<std::string>& args, const CliOptions& options) {
  CliRun run;
  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0 ||
      pipe2(err_pipe, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return run;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_pipe[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  if (!options.cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, options.cwd.c_str());
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty, defaults;
  sigemptyset(&empty);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<std::string> argv_strings = {kCliPath};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& arg : argv_strings) argv.push_back(arg.data());
  argv.push_back(nullptr);
  // extra_env replaces a variable of the same name.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string_view entry = *e;
    std::string_view name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const std::string& extra : options.extra_env)
      replaced = replaced || std::string_view(extra).substr(0, extra.find('=')) == name;
    if (!replaced) env_strings.emplace_back(entry);
  }
  env_strings.insert(env_strings.end(), options.extra_env.begin(), options.extra_env.end());
  std::vector<char*> envp;
  for (auto& entry : env_strings) envp.push_back(entry.data());
  envp.push_back(nullptr);

  const auto start = std::chrono::steady_clock::now();
  pid_t pid = -1;
  int spawned = posix_spawn(&pid, kCliPath, &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(in_pipe[0]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (spawned != 0) {
    ADD_FAILURE() << "posix_spawn " << kCliPath << ": " << std::strerror(spawned);
    close(in_pipe[1]);
    close(out_pipe[0]);
    close(err_pipe[0]);
    return run;
  }

  std::thread watcher;
  if (options.while_running) watcher = std::thread([&] { options.while_running(pid); });

  // Feed stdin and drain both outputs at once so no pipe ever fills up.
  fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
  std::size_t fed = 0;
  int stdin_fd = in_pipe[1];
  if (options.stdin_data.empty()) {
    close(stdin_fd);
    stdin_fd = -1;
  }
  int out_fd = out_pipe[0], err_fd = err_pipe[0];
  while (out_fd >= 0 || err_fd >= 0) {
    pollfd fds[3] = {{stdin_fd, POLLOUT, 0}, {out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
    if (poll(fds, 3, -1) < 0) {
      if (errno == EINTR) continue;
      ADD_FAILURE() << "poll: " << std::strerror(errno);
      break;
    }
    if (stdin_fd >= 0 && fds[0].revents) {
      ssize_t n = write(stdin_fd, options.stdin_data.data() + fed, options.stdin_data.size() - fed);
      if (n > 0) fed += static_cast<std::size_t>(n);
      if (n < 0 && errno != EAGAIN) fed = options.stdin_data.size();
      if (fed == options.stdin_data.size()) {
        close(stdin_fd);
        stdin_fd = -1;
      }
    }
    char buffer[65536];
    for (int i = 1; i <= 2; ++i) {
      if (!fds[i].revents) continue;
      int& fd = i == 1 ? out_fd : err_fd;
      ssize_t n = read(fd, buffer, sizeof buffer);
      if (n > 0) {
        (i == 1 ? run.out : run.err).append(buffer, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fd);
        fd = -1;
      }
    }
  }
  if (stdin_fd >= 0) close(stdin_fd);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  run.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  if (watcher.joinable()) watcher.join();
  if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) run.term_signal = WTERMSIG(status);
  return run;
}


}  // namespace sandbox::testing
