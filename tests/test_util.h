// Helpers shared by the tests: temporary directories and process scans.
#ifndef SANDBOX_TESTS_TEST_UTIL_H_
#define SANDBOX_TESTS_TEST_UTIL_H_

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace sandbox::testing {

// A fresh directory under $TMPDIR (or /tmp), removed recursively on
// destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // path() + "/" + name.
  std::string Join(std::string_view name) const;

 private:
  std::string path_;
};

// Writes `data` to a host file (test setup, not through a sandbox).
void WriteHostFile(const std::string& path, std::string_view data);
// Reads a host file; "" when missing.
std::string ReadHostFile(const std::string& path);
bool HostPathExists(const std::string& path);

// The number of live (non-zombie) processes on the host whose command line
// contains `marker` as one argument. Test-only: production code never scans
// /proc by name.
int CountProcessesWithArg(std::string_view marker);

// Waits up to `timeout_ms` for CountProcessesWithArg(marker) to reach 0 and
// returns the last count.
int WaitForNoProcessesWithArg(std::string_view marker, int timeout_ms);

// A marker unique to this test run, usable as a harmless argument (a number
// of seconds for sleep, say).
std::string UniqueMarker();

// Peak resident set size of this process, in bytes (VmHWM).
std::size_t PeakRssBytes();
// Current resident set size of this process, in bytes (VmRSS).
std::size_t CurrentRssBytes();

// A fork bomb for `sh -c`: a subshell starts up to 200 `sleep 5`s and dies
// at the first failed fork; the sleeps that did start live on and are then
// counted with shell builtins only (no fork is left to spare). Prints the
// count: under a pids limit of N, fewer than N.
inline constexpr const char* kForkBombScript =
    "( i=0; while [ $i -lt 200 ]; do sleep 5 & i=$((i+1)); done ) 2>/dev/null; "
    "n=0; for f in /proc/[0-9]*/comm; do read c < $f; "
    "[ \"$c\" = sleep ] && n=$((n+1)); done 2>/dev/null; echo $n";

// The sandbox CLI built with the tests ("" when it is not built).
inline constexpr const char* kCliPath = SANDBOX_CLI_PATH;

// How RunCli runs the CLI.
struct CliOptions {
  std::string stdin_data;
  std::vector<std::string> extra_env;  // "KEY=VALUE" set over this process's environment
  std::string cwd;                     // "" keeps this process's
  // Called on a separate thread with the CLI's pid once it is running.
  std::function<void(pid_t)> while_running;
};

// What RunCli saw.
struct CliRun {
  int exit_code = -1;   // -1 when killed by a signal
  int term_signal = 0;  // the signal that killed the CLI itself, if any
  std::string out;
  std::string err;
  std::chrono::milliseconds elapsed{0};
};

// Runs the CLI with `args` (argv[1..]), feeds all of options.stdin_data and
// then closes its stdin, collects stdout and stderr, and waits for it.
// Failures to start it are reported with ADD_FAILURE.
CliRun RunCli(const std::vector<std::string>& args, const CliOptions& options = {});

}  // namespace sandbox::testing

#endif  // SANDBOX_TESTS_TEST_UTIL_H_
