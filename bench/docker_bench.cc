// The docker and gvisor backends against the Docker CLI doing the same work,
// measured side by side in one run (medians of repetitions):
//   create -> first Exec result -> close   vs  docker run --rm --network=none IMAGE true
//   Exec round trip in a live sandbox      vs  docker exec CONTAINER true
// and the same two with the runsc runtime. Needs a daemon at DOCKER_HOST with
// runsc registered (scripts/dockerd-ci start) and the default image (sandbox
// image build). Run:
//   cmake --build /tmp/benchbuild --target docker_bench && /tmp/benchbuild/bench/docker_bench
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "sandbox/docker.h"

extern char** environ;

namespace {

std::string g_workspace;

sandbox::DockerOptions Options(bool gvisor) {
  sandbox::DockerOptions options;
  options.workspace = g_workspace;
  // $SANDBOX_AGENT (another build's agent, to compare two) or this build's.
  const char* agent = std::getenv("SANDBOX_AGENT");
  options.agent_path = agent != nullptr && *agent != '\0' ? agent : SANDBOX_AGENT_PATH;
  if (gvisor) options.runtime = "runsc";
  return options;
}

sandbox::Expected<std::unique_ptr<sandbox::Sandbox>> Make(bool gvisor) {
  return gvisor ? sandbox::NewGvisorSandbox(Options(true)) : sandbox::NewDockerSandbox(Options(false));
}

// Runs the docker CLI with `args`; its exit status, or -1.
int Docker(std::vector<std::string> args) {
  args.insert(args.begin(), "docker");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int rc = posix_spawnp(&pid, "docker", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void CreateFirstExec(benchmark::State& state, bool gvisor) {
  const sandbox::Command cmd{.path = "true"};
  for (auto _ : state) {
    auto box = Make(gvisor);
    if (!box) {
      state.SkipWithError(box.error().ToString().c_str());
      return;
    }
    auto result = (*box)->Exec({}, cmd);
    if (!result || result->exit_code != 0) {
      state.SkipWithError("Exec of true failed");
      return;
    }
    (void)(*box)->Close();
  }
}

void DockerRunTrue(benchmark::State& state, bool gvisor) {
  std::vector<std::string> args = {"run", "--rm", "--network=none"};
  if (gvisor) args.push_back("--runtime=runsc");
  args.push_back(sandbox::kDefaultDockerImage);
  args.push_back("true");
  for (auto _ : state) {
    if (Docker(args) != 0) {
      state.SkipWithError("docker run failed (is the daemon up and the image built?)");
      return;
    }
  }
}

void ExecRoundTrip(benchmark::State& state, bool gvisor) {
  auto box = Make(gvisor);
  if (!box) {
    state.SkipWithError(box.error().ToString().c_str());
    return;
  }
  const sandbox::Command cmd{.path = "true"};
  for (auto _ : state) {
    auto result = (*box)->Exec({}, cmd);
    if (!result || result->exit_code != 0) {
      state.SkipWithError("Exec of true failed");
      return;
    }
  }
  (void)(*box)->Close();
}

// The wire round trip alone (no process): ReadFile of a 16-byte file.
void ReadSmallFile(benchmark::State& state, bool gvisor) {
  auto box = Make(gvisor);
  if (!box) {
    state.SkipWithError(box.error().ToString().c_str());
    return;
  }
  if (!(*box)->WriteFile({}, "small.txt", "0123456789abcdef", 0644)) {
    state.SkipWithError("WriteFile failed");
    return;
  }
  for (auto _ : state) {
    auto data = (*box)->ReadFile({}, "small.txt");
    if (!data || data->size() != 16) {
      state.SkipWithError("ReadFile failed");
      return;
    }
  }
  (void)(*box)->Close();
}

void DockerExecTrue(benchmark::State& state, bool gvisor) {
  std::string name = "sandbox-bench-" + std::to_string(getpid()) + (gvisor ? "-gvisor" : "-runc");
  std::vector<std::string> run = {"run", "-d", "--rm", "--network=none", "--name", name};
  if (gvisor) run.push_back("--runtime=runsc");
  run.insert(run.end(), {sandbox::kDefaultDockerImage, "sleep", "3600"});
  if (Docker(run) != 0) {
    state.SkipWithError("docker run -d failed");
    return;
  }
  for (auto _ : state) {
    if (Docker({"exec", name, "true"}) != 0) {
      state.SkipWithError("docker exec failed");
      break;
    }
  }
  (void)Docker({"rm", "-f", name});
}

void BM_DockerCreateFirstExec(benchmark::State& s) { CreateFirstExec(s, false); }
void BM_DockerCliRunTrue(benchmark::State& s) { DockerRunTrue(s, false); }
void BM_DockerExecTrue(benchmark::State& s) { ExecRoundTrip(s, false); }
void BM_DockerCliExecTrue(benchmark::State& s) { DockerExecTrue(s, false); }
void BM_DockerReadSmallFile(benchmark::State& s) { ReadSmallFile(s, false); }
void BM_GvisorReadSmallFile(benchmark::State& s) { ReadSmallFile(s, true); }
void BM_GvisorCreateFirstExec(benchmark::State& s) { CreateFirstExec(s, true); }
void BM_GvisorCliRunTrue(benchmark::State& s) { DockerRunTrue(s, true); }
void BM_GvisorExecTrue(benchmark::State& s) { ExecRoundTrip(s, true); }
void BM_GvisorCliExecTrue(benchmark::State& s) { DockerExecTrue(s, true); }

#define SLOW(f) BENCHMARK(f)->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(10)->Repetitions(3)->ReportAggregatesOnly(true)
SLOW(BM_DockerCreateFirstExec);
SLOW(BM_DockerCliRunTrue);
BENCHMARK(BM_DockerExecTrue)->UseRealTime()->Unit(benchmark::kMicrosecond)->Repetitions(3)->ReportAggregatesOnly(true);
SLOW(BM_DockerCliExecTrue);
BENCHMARK(BM_DockerReadSmallFile)->UseRealTime()->Unit(benchmark::kMicrosecond)->Repetitions(3)->ReportAggregatesOnly(true);
SLOW(BM_GvisorCreateFirstExec);
SLOW(BM_GvisorCliRunTrue);
BENCHMARK(BM_GvisorExecTrue)->UseRealTime()->Unit(benchmark::kMicrosecond)->Repetitions(3)->ReportAggregatesOnly(true);
SLOW(BM_GvisorCliExecTrue);
BENCHMARK(BM_GvisorReadSmallFile)->UseRealTime()->Unit(benchmark::kMicrosecond)->Repetitions(3)->ReportAggregatesOnly(true);

}  // namespace

int main(int argc, char** argv) {
  char pattern[] = "/tmp/sandbox-docker-bench-XXXXXX";
  if (!mkdtemp(pattern)) return 1;
  g_workspace = pattern;
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::filesystem::remove_all(g_workspace);
  return 0;
}
