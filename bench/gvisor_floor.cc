// The floor under an Exec inside gVisor: what creating processes and making
// syscalls cost in a runsc container (ptrace platform) with no sandbox code
// at all. Static, so it runs in any image. Prints the median of each:
//   vfork + execve PROGRAM + waitpid    (one command, the least an Exec does)
//   fork + _exit + waitpid              (a process with a new address space)
//   getppid                             (one syscall)
// Run inside a gVisor container with the build directory mounted:
//   docker run --rm --network=none --runtime=runsc -v /tmp/b/bench:/b:ro
//     sandbox-default:latest /b/gvisor_floor /bin/true 100
// (one command line).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

extern char** environ;

namespace {

double Millis(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

template <typename F>
double Median(int runs, F once) {
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    auto start = std::chrono::steady_clock::now();
    once();
    times.push_back(Millis(std::chrono::steady_clock::now() - start));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: gvisor_floor PROGRAM [RUNS]\n");
    return 2;
  }
  const char* program = argv[1];
  const int runs = argc > 2 ? std::max(1, std::atoi(argv[2])) : 100;
  char* const child_argv[] = {const_cast<char*>(program), nullptr};
  int failures = 0;
  double exec = Median(runs, [&] {
    pid_t pid = vfork();
    if (pid == 0) {
      execve(program, child_argv, environ);
      _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || status != 0) ++failures;
  });
  double fork_exit = Median(runs, [&] {
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) ++failures;
  });
  double syscall = Median(runs, [] { (void)getppid(); });
  std::printf("vfork+execve %s+waitpid: %.3f ms (median of %d)\n", program, exec, runs);
  std::printf("fork+_exit+waitpid: %.3f ms\n", fork_exit);
  std::printf("getppid: %.4f ms\n", syscall);
  if (failures != 0) std::printf("%d runs failed\n", failures);
  return failures == 0 ? 0 : 1;
}
