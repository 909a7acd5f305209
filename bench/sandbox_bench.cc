// sandbox_bench: what the local backend costs over the plain host operation
// it wraps.
//
// Every sandbox benchmark has a baseline benchmark doing the same work
// directly on the host. Both run in the same process, repeated and randomly
// interleaved, and the verdict is the RATIO of their median wall-clock times,
// printed in a table after Google Benchmark's normal output. Shared, noisy
// machines move absolute numbers by tens of percent; a ratio measured side by
// side moves much less. Nothing here asserts on time: a missed goal is
// reported, never turned into a failure. A benchmark whose result is wrong
// (non-zero exit, wrong bytes) is skipped with an error, so a broken sandbox
// cannot look fast, and the binary then exits 1.
//
// Run as root: the local backend puts every command tree in a cgroup v2.
// Defaults when not given on the command line: --benchmark_repetitions=9,
// --benchmark_enable_random_interleaving=true and
// --benchmark_display_aggregates_only=true.
#include <benchmark/benchmark.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/local.h"
#include "sandbox/namespace.h"
#include "sandbox/sandbox.h"

extern char** environ;

namespace {

constexpr std::size_t kFileBytes = std::size_t{64} << 20;
constexpr std::uint64_t kFloodBytes = std::uint64_t{1} << 30;
constexpr std::size_t kMiB = std::size_t{1} << 20;
// The page size used to spot-check file contents inside the timed loops.
constexpr std::size_t kCheckStride = 4096;

// ---------------------------------------------------------------------------
// Host helpers used by the baselines and by the checks.

std::string ErrnoText(int err) {
  char buffer[128];
  return strerror_r(err, buffer, sizeof buffer);
}

// posix_spawnp with this process's environment: 0, or the errno value.
int SpawnProgram(const char* path, char* const argv[], const posix_spawn_file_actions_t* actions,
                 pid_t* pid) {
  return posix_spawnp(pid, path, actions, nullptr, argv, environ);
}

// waitpid, retried on EINTR: the wait status, or -errno.
int WaitFor(pid_t pid) {
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -errno;
  return status;
}

// posix_spawn + waitpid: the plain host way to run a program. Returns the
// wait status, or -errno when the program could not be started.
int SpawnAndWait(const char* path, char* const argv[]) {
  pid_t pid;
  if (int err = SpawnProgram(path, argv, nullptr, &pid); err != 0) return -err;
  return WaitFor(pid);
}

std::string DescribeWaitStatus(int status) {
  if (status < 0) return "spawn failed: " + ErrnoText(-status);
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "wait status " + std::to_string(status);
}

// True when `got` holds `want`'s bytes at every kCheckStride-th offset and at
// the end: a cheap check that both sides run inside the timed loop. The
// complete comparison runs after the loop.
bool SpotCheck(std::string_view got, std::string_view want) {
  if (got.size() != want.size()) return false;
  for (std::size_t i = 0; i < want.size(); i += kCheckStride)
    if (got[i] != want[i]) return false;
  return want.empty() || got.back() == want.back();
}

// Reads a whole host file, or nullopt.
std::optional<std::string> ReadHostFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A field of /proc/self/status in bytes ("VmRSS", "VmHWM"), or -1.
long long ProcStatusBytes(std::string_view field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > field.size() && line.compare(0, field.size(), field) == 0 &&
        line[field.size()] == ':')
      return std::stoll(line.substr(field.size() + 1)) * 1024;  // reported in kB
  }
  return -1;
}

// Resets this process's peak RSS (VmHWM) to its current RSS (Linux >= 4.0).
bool ResetPeakRss() {
  int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = write(fd, "5", 1) == 1;
  close(fd);
  return ok;
}

// ---------------------------------------------------------------------------
// The shared environment: one local sandbox over a fresh directory under /tmp
// (a disk file system: the file benchmarks measure the page cache, as every
// repeated read of a hot file does), one session, and the file contents.

struct BenchEnv {
  std::string root;
  std::string setup_error;  // non-empty: every sandbox benchmark skips with it
  std::unique_ptr<sandbox::Sandbox> box;
  // The same backend containing each command in a PID namespace (as the
  // agent does inside the isolated backends); null where that cannot work.
  std::unique_ptr<sandbox::Sandbox> pidns_box;
  // A live namespace sandbox over the same root; null (with the reason in
  // namespace_error) where that backend cannot run.
  std::unique_ptr<sandbox::Sandbox> namespace_box;
  std::string namespace_error;
  std::unique_ptr<sandbox::Session> session;
  std::size_t output_cap = 0;  // the default per-stream capture cap
  std::string file_data;       // contents of read.bin and of every write

  std::string HostPath(std::string_view name) const { return root + "/" + std::string(name); }
};

BenchEnv* g_env = nullptr;

std::string MakeFileData() {
  std::string data(kFileBytes, '\0');
  std::mt19937_64 rng(20240601);
  for (std::size_t i = 0; i + 8 <= data.size(); i += 8) {
    std::uint64_t v = rng();
    std::memcpy(&data[i], &v, 8);
  }
  return data;
}

bool WriteHostFile(const std::string& path, std::string_view data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  return static_cast<bool>(out);
}

sandbox::NamespaceOptions NamespaceOptionsFor(const std::string& root) {
  sandbox::NamespaceOptions options;
  options.workspace = root;
  options.agent_path = SANDBOX_AGENT_PATH;
  return options;
}

void SetUpEnv(BenchEnv& env) {
  env.file_data = MakeFileData();
  char dir_template[] = "/tmp/sandbox-bench-XXXXXX";
  if (!mkdtemp(dir_template)) {
    env.setup_error = "mkdtemp /tmp/sandbox-bench-XXXXXX: " + ErrnoText(errno);
    return;
  }
  env.root = dir_template;
  if (!WriteHostFile(env.HostPath("read.bin"), env.file_data)) {
    env.setup_error = "cannot write " + env.HostPath("read.bin");
    return;
  }
  sandbox::LocalOptions options;
  options.root = env.root;
  env.output_cap = options.output_limit;
  auto box = sandbox::NewLocalSandbox(options);
  if (!box) {
    env.setup_error = "NewLocalSandbox: " + box.error().ToString();
    if (box.error().code() == sandbox::Error::Code::Unsupported)
      env.setup_error += " (run sandbox_bench as root)";
    return;
  }
  env.box = std::move(*box);
  options.containment = sandbox::LocalOptions::Containment::kPidNamespace;
  if (auto pidns = sandbox::NewLocalSandbox(options)) env.pidns_box = std::move(*pidns);
  if (auto ns = sandbox::NewNamespaceSandbox(NamespaceOptionsFor(env.root))) {
    env.namespace_box = std::move(*ns);
  } else {
    env.namespace_error = "NewNamespaceSandbox: " + ns.error().ToString();
  }
  auto* sessioner = sandbox::As<sandbox::Sessioner>(*env.box);
  if (!sessioner) {
    env.setup_error = "the local sandbox does not implement Sessioner";
    return;
  }
  auto session = sessioner->NewSession(sandbox::Context());
  if (!session) {
    env.setup_error = "NewSession: " + session.error().ToString();
    return;
  }
  env.session = std::move(*session);
}

void TearDownEnv(BenchEnv& env) {
  if (env.session) (void)env.session->Close();
  env.session.reset();
  if (env.box) (void)env.box->Close();
  env.box.reset();
  if (env.pidns_box) (void)env.pidns_box->Close();
  env.pidns_box.reset();
  if (env.namespace_box) (void)env.namespace_box->Close();
  env.namespace_box.reset();
  if (!env.root.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(env.root, ignored);
  }
}

// Skips the benchmark when the environment could not be set up.
bool EnvReady(benchmark::State& state) {
  if (g_env->setup_error.empty()) return true;
  state.SkipWithError(g_env->setup_error.c_str());
  return false;
}

// Why an Exec-style Result is not the clean exit of a silent command, or "".
std::string CheckSilentSuccess(const sandbox::Expected<sandbox::Result>& result) {
  if (!result) return "Exec failed: " + result.error().ToString();
  if (result->exit_code != 0 || result->timed_out)
    return "exit code " + std::to_string(result->exit_code) +
           (result->timed_out ? " (timed out)" : "") + ", stderr: " + result->stderr_data;
  if (!result->stdout_data.empty() || !result->stderr_data.empty())
    return "unexpected output: '" + result->stdout_data + result->stderr_data + "'";
  return "";
}

// ---------------------------------------------------------------------------
// Pair 1: Exec of /bin/true through the sandbox vs posix_spawn + waitpid.

void BM_RawSpawnTrue(benchmark::State& state) {
  char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
  for (auto _ : state) {
    int status = SpawnAndWait("/bin/true", argv);
    if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      state.SkipWithError(("/bin/true: " + DescribeWaitStatus(status)).c_str());
      break;
    }
  }
}

void ExecTrueLoop(benchmark::State& state, sandbox::Sandbox& box) {
  const sandbox::Command cmd{.path = "/bin/true"};
  const sandbox::Context ctx;
  for (auto _ : state) {
    auto result = box.Exec(ctx, cmd);
    if (std::string why = CheckSilentSuccess(result); !why.empty()) {
      state.SkipWithError((cmd.path + ": " + why).c_str());
      break;
    }
  }
}

void BM_SandboxExecTrue(benchmark::State& state) {
  if (!EnvReady(state)) return;
  ExecTrueLoop(state, *g_env->box);
}

// Exec with PID-namespace containment: a fork-style clone of an init, which
// then vforks the command.
void BM_SandboxExecTruePidns(benchmark::State& state) {
  if (!EnvReady(state)) return;
  if (!g_env->pidns_box) {
    state.SkipWithError("cannot create PID namespaces here");
    return;
  }
  ExecTrueLoop(state, *g_env->pidns_box);
}

// The same pair measured so that load swings cannot tilt it: every iteration
// runs both sides back to back (alternating which goes first), and the
// counters are the two sides' medians within the repetition and their ratio.
// Random interleaving alternates whole repetitions (~0.5 s each); a shared
// machine's load changes faster than that, this alternates every ~1 ms. It
// is a cross-check for information, biased low: kernel work the sandbox
// defers (cgroup notifications, RCU callbacks) lands partly on the raw side
// that runs next. The goal is judged on the separate benchmarks above.
double Median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

void BM_ExecTruePaired(benchmark::State& state) {
  if (!EnvReady(state)) return;
  const sandbox::Command cmd{.path = "/bin/true"};
  const sandbox::Context ctx;
  char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
  std::vector<double> sandbox_us, raw_us;
  bool sandbox_first = true;
  for (auto _ : state) {
    for (int side = 0; side < 2 && !state.error_occurred(); ++side) {
      bool run_sandbox = (side == 0) == sandbox_first;
      std::string why;
      auto begin = std::chrono::steady_clock::now();
      if (run_sandbox) {
        why = CheckSilentSuccess(g_env->box->Exec(ctx, cmd));
      } else {
        int status = SpawnAndWait("/bin/true", argv);
        if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
          why = DescribeWaitStatus(status);
      }
      std::chrono::duration<double, std::micro> elapsed = std::chrono::steady_clock::now() - begin;
      (run_sandbox ? sandbox_us : raw_us).push_back(elapsed.count());
      if (!why.empty())
        state.SkipWithError(((run_sandbox ? "sandbox /bin/true: " : "/bin/true: ") + why).c_str());
    }
    if (state.error_occurred()) break;
    sandbox_first = !sandbox_first;
  }
  if (state.error_occurred() || sandbox_us.empty() || raw_us.empty()) return;
  double sandbox_median = Median(sandbox_us), raw_median = Median(raw_us);
  state.counters["sandbox_us"] = sandbox_median;
  state.counters["raw_us"] = raw_median;
  state.counters["ratio"] = sandbox_median / raw_median;
}

// ---------------------------------------------------------------------------
// Pair 2: a Session round trip (the builtin `true`) vs the Exec above; the
// session running the external /bin/true is reported for information.

void RunInSession(benchmark::State& state, const sandbox::Command& cmd) {
  if (!EnvReady(state)) return;
  const sandbox::Context ctx;
  for (auto _ : state) {
    auto result = g_env->session->Exec(ctx, cmd);
    if (std::string why = CheckSilentSuccess(result); !why.empty()) {
      state.SkipWithError(("session " + cmd.path + ": " + why).c_str());
      break;
    }
  }
}

void BM_SessionBuiltinTrue(benchmark::State& state) {
  RunInSession(state, sandbox::Command{.path = "true"});
}

void BM_SessionExternalTrue(benchmark::State& state) {
  RunInSession(state, sandbox::Command{.path = "/bin/true"});
}

// ---------------------------------------------------------------------------
// Pair 3: 64 MiB ReadFile / WriteFile vs plain read(2) / write(2).

void BM_PlainRead64M(benchmark::State& state) {
  if (!EnvReady(state)) return;
  const std::string path = g_env->HostPath("read.bin");
  std::string data;
  for (auto _ : state) {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      state.SkipWithError(("open " + path + ": " + ErrnoText(errno)).c_str());
      break;
    }
    // The same shape as the sandbox's read: a fresh string of the file's
    // size (as a caller of ReadFile gets), not zero-filled first, read into
    // directly. Reusing `data`'s buffer instead would skip the page faults
    // of 64 MiB of new memory and measure a different operation.
    std::string fresh;
    std::size_t got = 0;
    fresh.resize_and_overwrite(kFileBytes, [&](char* buffer, std::size_t size) {
      while (got < size) {
        long n = read(fd, buffer + got, size - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += static_cast<std::size_t>(n);
      }
      return got;
    });
    close(fd);
    data = std::move(fresh);
    if (!SpotCheck(data, g_env->file_data)) {
      state.SkipWithError(
          ("plain read returned " + std::to_string(data.size()) + " bytes, or the wrong bytes")
              .c_str());
      break;
    }
    benchmark::DoNotOptimize(data.data());
  }
  if (!state.error_occurred() && data != g_env->file_data)
    state.SkipWithError("plain read returned the wrong bytes");
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kFileBytes));
}

void BM_SandboxReadFile64M(benchmark::State& state) {
  if (!EnvReady(state)) return;
  const sandbox::Context ctx;
  std::string data;
  for (auto _ : state) {
    auto result = g_env->box->ReadFile(ctx, "read.bin");
    if (!result) {
      state.SkipWithError(("ReadFile: " + result.error().ToString()).c_str());
      break;
    }
    data = std::move(*result);
    if (!SpotCheck(data, g_env->file_data)) {
      state.SkipWithError(
          ("ReadFile returned " + std::to_string(data.size()) + " bytes, or the wrong bytes")
              .c_str());
      break;
    }
    benchmark::DoNotOptimize(data.data());
  }
  if (!state.error_occurred() && data != g_env->file_data)
    state.SkipWithError("ReadFile returned the wrong bytes");
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kFileBytes));
}

// Fails the benchmark unless the host file holds exactly the file data.
void VerifyWritten(benchmark::State& state, const std::string& path) {
  if (state.error_occurred()) return;
  auto written = ReadHostFile(path);
  if (!written || *written != g_env->file_data)
    state.SkipWithError(("the file written to " + path + " does not hold the data").c_str());
}

// The size of a host file, or -1.
long long HostFileSize(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<long long>(st.st_size) : -1;
}

void BM_PlainWrite64M(benchmark::State& state) {
  if (!EnvReady(state)) return;
  const std::string path = g_env->HostPath("write_plain.bin");
  const std::string_view data = g_env->file_data;
  for (auto _ : state) {
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      state.SkipWithError(("open " + path + ": " + ErrnoText(errno)).c_str());
      break;
    }
    std::size_t done = 0;
    while (done < data.size()) {
      long n = write(fd, data.data() + done, data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    bool closed = close(fd) == 0;
    if (done != data.size() || !closed ||
        HostFileSize(path) != static_cast<long long>(kFileBytes)) {
      state.SkipWithError(("plain write of " + path + " failed: " + ErrnoText(errno)).c_str());
      break;
    }
  }
  VerifyWritten(state, path);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kFileBytes));
}

void BM_SandboxWriteFile64M(benchmark::State& state) {
  if (!EnvReady(state)) return;
  const sandbox::Context ctx;
  const std::string path = g_env->HostPath("write_sandbox.bin");
  for (auto _ : state) {
    auto status = g_env->box->WriteFile(ctx, "write_sandbox.bin", g_env->file_data, 0644);
    if (!status) {
      state.SkipWithError(("WriteFile: " + status.error().ToString()).c_str());
      break;
    }
    if (HostFileSize(path) != static_cast<long long>(kFileBytes)) {
      state.SkipWithError(("WriteFile left " + path + " with the wrong size").c_str());
      break;
    }
  }
  VerifyWritten(state, path);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kFileBytes));
}

// ---------------------------------------------------------------------------
// Pair 4: 1 GiB of output under the default capture cap. The figure of merit
// is this process's peak RSS growth during the call; the raw pipe drain is
// the throughput baseline, for information.

std::vector<std::string> FloodArgs() { return {"-c", std::to_string(kFloodBytes), "/dev/zero"}; }

// The largest value of a repetition set: the memory goal is judged on the
// worst repetition, not the median one.
double MaxOf(const std::vector<double>& values) {
  return values.empty() ? 0.0 : *std::max_element(values.begin(), values.end());
}

void BM_RawPipeFlood1G(benchmark::State& state) {
  std::vector<std::string> args = FloodArgs();
  char* argv[] = {const_cast<char*>("head"), args[0].data(), args[1].data(), args[2].data(),
                  nullptr};
  static char buffer[1 << 16];
  for (auto _ : state) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0) {
      state.SkipWithError(("pipe2: " + ErrnoText(errno)).c_str());
      break;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    pid_t pid = -1;
    int err = SpawnProgram("head", argv, &actions, &pid);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    std::uint64_t total = 0;
    bool zeros = true;
    if (err == 0) {
      for (;;) {
        long n = read(fds[0], buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        total += static_cast<std::uint64_t>(n);
        zeros = zeros && buffer[0] == '\0' && buffer[n - 1] == '\0';
      }
    }
    close(fds[0]);
    int status = err == 0 ? WaitFor(pid) : -err;
    if (status != 0 || total != kFloodBytes || !zeros) {
      state.SkipWithError(
          ("head: " + DescribeWaitStatus(status) + ", read " + std::to_string(total) + " bytes")
              .c_str());
      break;
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kFloodBytes));
}

void BM_SandboxExecFlood1G(benchmark::State& state) {
  if (!EnvReady(state)) return;
  const sandbox::Context ctx;
  const sandbox::Command cmd{.path = "head", .args = FloodArgs()};
  long long max_growth = 0;
  for (auto _ : state) {
    state.PauseTiming();
    long long rss_before = ProcStatusBytes("VmRSS");
    bool reset = ResetPeakRss();
    state.ResumeTiming();
    auto result = g_env->box->Exec(ctx, cmd);
    state.PauseTiming();
    long long peak = ProcStatusBytes("VmHWM");
    if (!reset || rss_before < 0 || peak < 0) {
      state.SkipWithError("cannot read VmRSS/VmHWM or reset them via /proc/self/clear_refs");
      break;
    }
    max_growth = std::max(max_growth, peak - rss_before);
    std::string why;
    if (!result) {
      why = "Exec failed: " + result.error().ToString();
    } else if (result->exit_code != 0 || result->timed_out) {
      why = "exit code " + std::to_string(result->exit_code) + ", stderr: " + result->stderr_data;
    } else if (result->stdout_data.size() > g_env->output_cap ||
               result->stdout_data.size() + result->stdout_dropped != kFloodBytes ||
               !result->stdout_truncated) {
      why = "kept " + std::to_string(result->stdout_data.size()) + " and dropped " +
            std::to_string(result->stdout_dropped) + " of " + std::to_string(kFloodBytes) +
            " bytes under a cap of " + std::to_string(g_env->output_cap);
    } else if (result->stdout_data.find_first_not_of('\0') != std::string::npos) {
      why = "the kept output is not the zeros head wrote";
    }
    if (!why.empty()) {
      state.SkipWithError(("head -c 1GiB: " + why).c_str());
      break;
    }
    state.ResumeTiming();
  }
  state.counters["peak_rss_growth"] = benchmark::Counter(
      static_cast<double>(max_growth), benchmark::Counter::kDefaults, benchmark::Counter::kIs1024);
  state.counters["output_cap"] =
      benchmark::Counter(static_cast<double>(g_env->output_cap), benchmark::Counter::kDefaults,
                         benchmark::Counter::kIs1024);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kFloodBytes));
}

BENCHMARK(BM_RawSpawnTrue)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SandboxExecTrue)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SandboxExecTruePidns)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ExecTruePaired)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SessionBuiltinTrue)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SessionExternalTrue)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PlainRead64M)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SandboxReadFile64M)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PlainWrite64M)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SandboxWriteFile64M)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RawPipeFlood1G)->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(2);
BENCHMARK(BM_SandboxExecFlood1G)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2)
    ->ComputeStatistics("max", MaxOf);

// ---------------------------------------------------------------------------
// The namespace backend, against the same local Exec and against peers that
// build a comparable boundary per command: bwrap and unshare(1).

bool NamespaceReady(benchmark::State& state) {
  if (!EnvReady(state)) return false;
  if (g_env->namespace_box) return true;
  state.SkipWithError(g_env->namespace_error.c_str());
  return false;
}

void BM_NamespaceExecTrue(benchmark::State& state) {
  if (!NamespaceReady(state)) return;
  ExecTrueLoop(state, *g_env->namespace_box);
}

// Create a sandbox, get the result of one Exec, close it.
void BM_NamespaceCreateFirstExec(benchmark::State& state) {
  if (!NamespaceReady(state)) return;
  const sandbox::Command cmd{.path = "/bin/true"};
  for (auto _ : state) {
    auto box = sandbox::NewNamespaceSandbox(NamespaceOptionsFor(g_env->root));
    if (!box) {
      state.SkipWithError(box.error().ToString().c_str());
      break;
    }
    auto result = (*box)->Exec({}, cmd);
    if (std::string why = CheckSilentSuccess(result); !why.empty()) {
      state.SkipWithError(why.c_str());
      break;
    }
    (void)(*box)->Close();
  }
}

// Runs a peer's command line once per iteration.
void RunPeer(benchmark::State& state, std::vector<std::string> args) {
  if (access(args[0].c_str(), X_OK) != 0) {
    state.SkipWithError((args[0] + " is not installed (apt-get install bubblewrap)").c_str());
    return;
  }
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  for (auto _ : state) {
    int status = SpawnAndWait(argv[0], argv.data());
    if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      state.SkipWithError((args[0] + ": " + DescribeWaitStatus(status)).c_str());
      break;
    }
  }
}

// bwrap with every namespace, a read-only /usr, fresh /proc, /dev and /tmp,
// and the workspace: about what the namespace backend builds.
void BM_BwrapTrue(benchmark::State& state) {
  if (!EnvReady(state)) return;
  RunPeer(state, {"/usr/bin/bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/usr",
                  "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
                  "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin", "--proc",
                  "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--bind", g_env->root,
                  "/workspace", "--chdir", "/workspace", "/bin/true"});
}

// unshare(1) with every namespace and a fresh /proc, nothing else.
void BM_UnshareTrue(benchmark::State& state) {
  if (!EnvReady(state)) return;
  RunPeer(state, {"/usr/bin/unshare", "--user", "--map-root-user", "--fork", "--pid", "--net",
                  "--ipc", "--uts", "--mount", "--cgroup", "--mount-proc", "/bin/true"});
}

// Resident memory of the agents of the sandboxes this process runs: every
// process named sandbox-agent whose parent is this process or another agent.
double AgentRssBytes() {
  std::map<std::string, std::pair<std::string, double>> agents;  // pid -> (ppid, rss)
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::string pid = entry.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "status");
    std::string line, name, ppid;
    double rss = 0;
    while (std::getline(in, line)) {
      if (line.rfind("Name:", 0) == 0) name = line.substr(line.find_first_not_of(" \t", 5));
      if (line.rfind("PPid:", 0) == 0) ppid = line.substr(line.find_first_not_of(" \t", 5));
      if (line.rfind("VmRSS:", 0) == 0) rss = std::atof(line.c_str() + 6) * 1024;
    }
    if (name == "sandbox-agent") agents[pid] = {ppid, rss};
  }
  std::string self = std::to_string(getpid());
  double total = 0;
  for (const auto& [pid, info] : agents)
    if (info.first == self || agents.count(info.first)) total += info.second;
  return total;
}

// 100 live namespace sandboxes at once, each having run one command: the
// time to start them all and the agents' resident memory.
void BM_Namespace100Live(benchmark::State& state) {
  if (!NamespaceReady(state)) return;
  constexpr int kSandboxes = 100;
  double rss_per_agent = 0;
  for (auto _ : state) {
    double before = AgentRssBytes();
    std::vector<std::unique_ptr<sandbox::Sandbox>> boxes;
    for (int i = 0; i < kSandboxes; ++i) {
      auto box = sandbox::NewNamespaceSandbox(NamespaceOptionsFor(g_env->root));
      if (!box) {
        state.SkipWithError(box.error().ToString().c_str());
        return;
      }
      auto result = (*box)->Exec({}, sandbox::Command{.path = "/bin/true"});
      if (std::string why = CheckSilentSuccess(result); !why.empty()) {
        state.SkipWithError(why.c_str());
        return;
      }
      boxes.push_back(std::move(*box));
    }
    rss_per_agent = (AgentRssBytes() - before) / kSandboxes;
    state.PauseTiming();
    for (auto& box : boxes) (void)box->Close();
    state.ResumeTiming();
  }
  state.counters["agent_rss_bytes"] = rss_per_agent;
  state.counters["sandboxes"] = kSandboxes;
}

BENCHMARK(BM_NamespaceExecTrue)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_NamespaceCreateFirstExec)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BwrapTrue)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_UnshareTrue)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Namespace100Live)->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(1);

// ---------------------------------------------------------------------------
// The ratio table.

// One line of the table: a sandbox benchmark against its baseline. A time
// goal is met when median(benchmark) / median(baseline) <= max_ratio;
// max_ratio 0 means the line is for information.
struct TimeRow {
  const char* label;
  const char* benchmark;
  const char* baseline_label;
  const char* baseline;
  double max_ratio;
};

constexpr TimeRow kTimeRows[] = {
    {"Exec /bin/true", "BM_SandboxExecTrue", "posix_spawn+waitpid", "BM_RawSpawnTrue", 1.3},
    {"Exec /bin/true, PID-ns containment", "BM_SandboxExecTruePidns", "Exec /bin/true (cgroup)",
     "BM_SandboxExecTrue", 0},
    {"namespace Exec /bin/true", "BM_NamespaceExecTrue", "local Exec /bin/true",
     "BM_SandboxExecTrue", 1.5},
    {"namespace Exec /bin/true", "BM_NamespaceExecTrue", "bwrap per command", "BM_BwrapTrue",
     1.0 / 3},
    {"namespace create+1st Exec", "BM_NamespaceCreateFirstExec", "bwrap --unshare-all true",
     "BM_BwrapTrue", 0},
    {"namespace create+1st Exec", "BM_NamespaceCreateFirstExec", "unshare (all ns) true",
     "BM_UnshareTrue", 0},
    {"Session `true` (builtin)", "BM_SessionBuiltinTrue", "Exec /bin/true", "BM_SandboxExecTrue",
     2.0},
    {"Session /bin/true", "BM_SessionExternalTrue", "Exec /bin/true", "BM_SandboxExecTrue", 0},
    {"ReadFile 64 MiB", "BM_SandboxReadFile64M", "open+read", "BM_PlainRead64M", 1.25},
    {"WriteFile 64 MiB", "BM_SandboxWriteFile64M", "open+write+close", "BM_PlainWrite64M", 1.25},
    {"Exec 1 GiB flood", "BM_SandboxExecFlood1G", "posix_spawn+pipe", "BM_RawPipeFlood1G", 0},
};

// The memory goal: peak RSS growth <= 2 * cap + kMemorySlack.
constexpr double kMemorySlack = 16.0 * kMiB;

std::string FormatSeconds(double seconds) {
  char buffer[32];
  if (seconds >= 1.0) {
    std::snprintf(buffer, sizeof buffer, "%.3f s", seconds);
  } else if (seconds >= 1e-3) {
    std::snprintf(buffer, sizeof buffer, "%.2f ms", seconds * 1e3);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.1f us", seconds * 1e6);
  }
  return buffer;
}

std::string FormatBytes(double bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f MiB", bytes / kMiB);
  return buffer;
}

std::string FormatRate(double bytes_per_second) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f GiB/s", bytes_per_second / (1024.0 * kMiB));
  return buffer;
}

// The console output, followed (in Finalize) by the table of ratios of the
// medians each benchmark's repetitions produced.
class RatioTableReporter final : public benchmark::ConsoleReporter {
 public:
  explicit RatioTableReporter(OutputOptions options) : ConsoleReporter(options) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) Collect(run);
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    PrintTable(GetOutputStream());
  }

  // True when some benchmark was skipped with an error (a wrong result).
  bool any_error() const {
    return std::any_of(summaries_.begin(), summaries_.end(),
                       [](const auto& entry) { return !entry.second.error.empty(); });
  }

 private:
  struct Summary {
    std::optional<double> median_seconds;  // median wall-clock time per iteration
    benchmark::UserCounters median_counters;
    benchmark::UserCounters max_counters;
    std::optional<double> single_seconds;  // the run itself, without repetitions
    benchmark::UserCounters single_counters;
    std::int64_t repetitions = 1;
    std::string error;
  };

  static double Seconds(const Run& run) {
    return run.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(run.time_unit);
  }

  void Collect(const Run& run) {
    Summary& summary = summaries_[run.run_name.function_name];
    if (run.error_occurred) {
      summary.error = run.error_message;
      return;
    }
    summary.repetitions = run.repetitions;
    if (run.run_type == Run::RT_Aggregate) {
      if (run.aggregate_name == "median") {
        summary.median_seconds = Seconds(run);
        summary.median_counters = run.counters;
      } else if (run.aggregate_name == "max") {
        summary.max_counters = run.counters;
      }
    } else {
      summary.single_seconds = Seconds(run);
      summary.single_counters = run.counters;
    }
  }

  // The median time (or, with one repetition, the only time), or nullopt.
  std::optional<double> MedianSeconds(const Summary& summary) const {
    return summary.median_seconds ? summary.median_seconds : summary.single_seconds;
  }

  const Summary* Find(const char* name) const {
    auto it = summaries_.find(name);
    return it == summaries_.end() ? nullptr : &it->second;
  }

  // "not run" / "ERROR: ..." when a benchmark has no usable time, else "".
  std::string Missing(const Summary* summary) const {
    if (!summary) return "not run";
    if (!summary->error.empty()) return "ERROR: " + summary->error;
    if (!MedianSeconds(*summary)) return "no time";
    return "";
  }

  // The "met?" cell of a line without a usable time: a wrong result misses
  // the goal; a benchmark left out by --benchmark_filter does not judge it.
  static std::string Verdict(bool has_goal, const std::string& missing) {
    if (missing.rfind("ERROR", 0) == 0) return (has_goal ? "NO: " : "") + missing;
    return "n/a: " + missing;
  }

  void PrintTable(std::ostream& out) const {
    std::int64_t repetitions = 1;
    for (const auto& entry : summaries_)
      repetitions = std::max(repetitions, entry.second.repetitions);
    out << "\nRatios of medians (wall-clock time; same run, " << repetitions
        << " repetitions; ratio = sandbox / baseline, lower is better):\n";
    char line[512];
    std::snprintf(line, sizeof line, "%-26s %12s  %-26s %12s  %7s  %-8s %s\n", "name", "median",
                  "baseline", "median", "ratio", "goal", "met?");
    out << line;
    for (const TimeRow& row : kTimeRows) {
      const Summary* subject = Find(row.benchmark);
      const Summary* baseline = Find(row.baseline);
      std::string missing = Missing(subject);
      if (missing.empty()) missing = Missing(baseline);
      std::string goal = row.max_ratio > 0 ? "<= " + FormatRatio(row.max_ratio) : "info";
      if (!missing.empty()) {
        std::snprintf(line, sizeof line, "%-26s %12s  %-26s %12s  %7s  %-8s %s\n", row.label, "-",
                      row.baseline_label, "-", "-", goal.c_str(),
                      Verdict(row.max_ratio > 0, missing).c_str());
        out << line;
        continue;
      }
      double a = *MedianSeconds(*subject), b = *MedianSeconds(*baseline);
      double ratio = a / b;
      const char* met = row.max_ratio > 0 ? (ratio <= row.max_ratio ? "yes" : "NO") : "-";
      std::snprintf(line, sizeof line, "%-26s %12s  %-26s %12s  %7s  %-8s %s\n", row.label,
                    FormatSeconds(a).c_str(), row.baseline_label, FormatSeconds(b).c_str(),
                    FormatRatio(ratio).c_str(), goal.c_str(), met);
      out << line;
    }
    PrintPaired(out);
    PrintThroughput(out);
    PrintMemory(out);
    PrintNamespace(out);
  }

  // The namespace backend's absolute goals: create -> first Exec <= 10 ms,
  // agent resident memory <= 4 MiB, 100 live sandboxes.
  void PrintNamespace(std::ostream& out) const {
    out << "\nNamespace backend (absolute goals):\n";
    char line[512];
    const Summary* create = Find("BM_NamespaceCreateFirstExec");
    if (std::string missing = Missing(create); missing.empty()) {
      double seconds = *MedianSeconds(*create);
      std::snprintf(line, sizeof line, "%-34s %12s  goal <= 10 ms  %s\n",
                    "create -> first Exec result", FormatSeconds(seconds).c_str(),
                    seconds <= 0.010 ? "yes" : "NO");
    } else {
      std::snprintf(line, sizeof line, "%-34s %s\n", "create -> first Exec result",
                    missing.c_str());
    }
    out << line;
    const Summary* live = Find("BM_Namespace100Live");
    if (std::string missing = Missing(live); missing.empty()) {
      const benchmark::UserCounters& counters =
          live->max_counters.empty() ? MedianCounters(*live) : live->max_counters;
      auto rss = Counter(counters, "agent_rss_bytes");
      std::snprintf(line, sizeof line, "%-34s %12s  goal <= 4 MiB  %s\n",
                    "agent resident memory (100 live)", rss ? FormatBytes(*rss).c_str() : "-",
                    rss && *rss <= 4 * kMiB ? "yes" : "NO");
      out << line;
      std::snprintf(line, sizeof line, "%-34s %12s  (100 sandboxes, one Exec each)\n",
                    "start 100 live sandboxes",
                    MedianSeconds(*live) ? FormatSeconds(*MedianSeconds(*live)).c_str() : "-");
    } else {
      std::snprintf(line, sizeof line, "%-34s %s\n", "100 live sandboxes", missing.c_str());
    }
    out << line;
  }

  // The cross-check of the Exec pair, for information: the ratio of the two
  // sides' medians within each repetition of BM_ExecTruePaired (median over
  // repetitions).
  void PrintPaired(std::ostream& out) const {
    const Summary* paired = Find("BM_ExecTruePaired");
    std::string missing = Missing(paired);
    char line[512];
    if (missing.empty()) {
      const benchmark::UserCounters& counters = MedianCounters(*paired);
      auto sandbox_us = Counter(counters, "sandbox_us");
      auto raw_us = Counter(counters, "raw_us");
      auto ratio = Counter(counters, "ratio");
      if (sandbox_us && raw_us && ratio) {
        std::snprintf(line, sizeof line, "%-26s %12s  %-26s %12s  %7s  %-8s %s\n",
                      "Exec /bin/true (paired)", FormatSeconds(*sandbox_us * 1e-6).c_str(),
                      "posix_spawn (paired)", FormatSeconds(*raw_us * 1e-6).c_str(),
                      FormatRatio(*ratio).c_str(), "info", "-");
        out << line;
        return;
      }
      missing = "counters missing";
    }
    std::snprintf(line, sizeof line, "%-26s %12s  %-26s %12s  %7s  %-8s %s\n",
                  "Exec /bin/true (paired)", "-", "posix_spawn (paired)", "-", "-", "info",
                  Verdict(false, missing).c_str());
    out << line;
  }

  static std::string FormatRatio(double ratio) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.2f", ratio);
    return buffer;
  }

  static std::optional<double> Counter(const benchmark::UserCounters& counters, const char* name) {
    auto it = counters.find(name);
    if (it == counters.end()) return std::nullopt;
    return it->second.value;
  }

  const benchmark::UserCounters& MedianCounters(const Summary& summary) const {
    return summary.median_seconds ? summary.median_counters : summary.single_counters;
  }

  // Throughput of the byte-moving pairs (median of the repetitions' rates).
  void PrintThroughput(std::ostream& out) const {
    out << "\nThroughput (median bytes_per_second; goal for files: sandbox >= 0.8x plain):\n";
    for (const TimeRow& row : kTimeRows) {
      const Summary* subject = Find(row.benchmark);
      const Summary* baseline = Find(row.baseline);
      if (!subject || !baseline || !Missing(subject).empty() || !Missing(baseline).empty())
        continue;
      auto a = Counter(MedianCounters(*subject), "bytes_per_second");
      auto b = Counter(MedianCounters(*baseline), "bytes_per_second");
      if (!a || !b) continue;
      char line[256];
      std::snprintf(line, sizeof line, "%-26s %12s  %-26s %12s  %6.2fx\n", row.label,
                    FormatRate(*a).c_str(), row.baseline_label, FormatRate(*b).c_str(), *a / *b);
      out << line;
    }
  }

  // Peak RSS growth during the flood against the output cap, judged on the
  // worst repetition.
  void PrintMemory(std::ostream& out) const {
    out << "\nPeak host memory during Exec of 1 GiB of output (worst repetition):\n";
    const Summary* flood = Find("BM_SandboxExecFlood1G");
    std::string missing = Missing(flood);
    char line[512];
    if (!missing.empty()) {
      std::snprintf(line, sizeof line, "%-26s %s\n", "peak RSS growth / cap",
                    Verdict(true, missing).c_str());
      out << line;
      return;
    }
    const benchmark::UserCounters& counters =
        flood->max_counters.empty() ? MedianCounters(*flood) : flood->max_counters;
    auto growth = Counter(counters, "peak_rss_growth");
    auto cap = Counter(counters, "output_cap");
    if (!growth || !cap || *cap <= 0) {
      out << "peak RSS growth / cap: counters missing\n";
      return;
    }
    double limit = 2 * *cap + kMemorySlack;
    std::snprintf(line, sizeof line, "%-26s %12s  %-26s %12s  %7s  %-8s %s\n", "peak RSS growth",
                  FormatBytes(*growth).c_str(), "output cap", FormatBytes(*cap).c_str(),
                  FormatRatio(*growth / *cap).c_str(), ("<= " + FormatRatio(limit / *cap)).c_str(),
                  *growth <= limit ? "yes" : "NO");
    out << line;
    out << "(goal: growth <= 2 * cap + 16 MiB = " << FormatBytes(limit) << ")\n";
  }

  std::map<std::string, Summary> summaries_;
};

// True when some argument sets `flag` ("--benchmark_repetitions").
bool HasFlag(int argc, char** argv, std::string_view flag) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.substr(0, flag.size()) == flag &&
        (arg.size() == flag.size() || arg[flag.size()] == '='))
      return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  // Defaults for the flags that make the ratios trustworthy, unless given.
  std::vector<std::string> defaults;
  if (!HasFlag(argc, argv, "--benchmark_repetitions"))
    defaults.push_back("--benchmark_repetitions=9");
  if (!HasFlag(argc, argv, "--benchmark_enable_random_interleaving"))
    defaults.push_back("--benchmark_enable_random_interleaving=true");
  if (!HasFlag(argc, argv, "--benchmark_display_aggregates_only") &&
      !HasFlag(argc, argv, "--benchmark_report_aggregates_only"))
    defaults.push_back("--benchmark_display_aggregates_only=true");
  std::vector<char*> args(argv, argv + argc);
  for (std::string& flag : defaults) args.push_back(flag.data());
  int args_count = static_cast<int>(args.size());
  args.push_back(nullptr);

  benchmark::Initialize(&args_count, args.data());
  if (benchmark::ReportUnrecognizedArguments(args_count, args.data())) return 1;

  BenchEnv env;
  g_env = &env;
  SetUpEnv(env);
  if (!env.setup_error.empty())
    std::fprintf(stderr, "sandbox_bench: the sandbox benchmarks will be skipped: %s\n",
                 env.setup_error.c_str());
  benchmark::AddCustomContext("sandbox_root", env.root + " (files are served from the page cache)");
  if (utsname host; uname(&host) == 0)
    benchmark::AddCustomContext("kernel", std::string(host.sysname) + " " + host.release);

  RatioTableReporter reporter(isatty(STDOUT_FILENO) ? benchmark::ConsoleReporter::OO_ColorTabular
                                                    : benchmark::ConsoleReporter::OO_Tabular);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  TearDownEnv(env);
  g_env = nullptr;
  return reporter.any_error() ? 1 : 0;
}
