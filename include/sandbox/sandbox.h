// The core of sandbox: one isolation boundary an AI agent acts through.
//
// Every effect model-written code causes -- running a command, reading or
// writing a file, starting a long-lived process -- goes through a Sandbox.
// Backends (local, namespace, docker, gvisor, microvm) sit behind this one
// interface along an isolation spectrum. This header depends on nothing but
// the C++ standard library.
#ifndef SANDBOX_SANDBOX_H_
#define SANDBOX_SANDBOX_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/context.h"
#include "sandbox/error.h"

namespace sandbox {

// How strongly a backend separates the executed code from the host, ordered
// weakest to strongest so policy can compare levels.
enum class Isolation {
  None = 0,     // a host child process behind a path fence; trusted code only
  Process = 1,  // namespaces/cgroups on the shared host kernel (container)
  Kernel = 2,   // syscalls served by a userspace kernel (gVisor)
  VM = 3,       // hardware-virtualized or emulated guest with its own kernel
};

// "none", "process", "kernel" or "vm".
std::string_view ToString(Isolation isolation);

// Parses the names ToString produces.
Expected<Isolation> ParseIsolation(std::string_view name);

// Permission bits of a file, e.g. 0644 (the counterpart of Go's fs.FileMode).
using FileMode = std::uint32_t;

// One execution request. Serializable, so remote backends can ship it across
// the boundary.
struct Command {
  std::string path;               // program; searched in PATH when it has no '/'
  std::vector<std::string> args;  // arguments, NOT including path
  std::string dir;                // working directory, sandbox-relative; "" is the root
  std::vector<std::string> env;   // extra "KEY=VALUE", merged over the base environment
  std::string stdin_data;         // bytes fed to the process's standard input
  // If > 0, bounds the run independently of the Context; whichever fires
  // first wins and the whole process tree is killed.
  std::chrono::nanoseconds timeout{0};
  // Per-stream capture cap for this command; 0 uses the sandbox's default.
  std::size_t output_limit = 0;
};

// The outcome of a command that ran. A non-zero exit code is a normal Result.
struct Result {
  int exit_code = 0;                   // exit status; 128+N when killed by signal N
  std::string stdout_data;             // captured stdout (head and tail when truncated)
  std::string stderr_data;             // captured stderr (head and tail when truncated)
  std::chrono::nanoseconds duration{0};  // wall-clock time the command ran
  bool timed_out = false;              // killed by Command::timeout or the Context
  bool stdout_truncated = false;       // bytes were dropped from the middle of stdout
  bool stderr_truncated = false;
  std::uint64_t stdout_dropped = 0;    // how many stdout bytes were dropped
  std::uint64_t stderr_dropped = 0;
  std::optional<int> signal;           // the signal that killed the process, if any
};

// One entry of ListDir: a flat value that crosses any boundary cheaply.
struct DirEntry {
  std::string name;
  bool is_dir = false;

  friend bool operator==(const DirEntry&, const DirEntry&) = default;
};

// What a Sandbox guarantees about itself, as achieved, not as requested.
struct Capabilities {
  Isolation isolation = Isolation::None;  // the strength of the boundary
  bool network = false;                   // whether code inside can reach a network
  std::string backend;                    // "local", "namespace", ...
  std::string detail;                     // e.g. the container runtime really used
};

// A single isolated environment. Lifecycle: create with a backend factory,
// Exec and file operations any number of times, Close (the destructor also
// closes). Implementations are thread-safe: many threads may call Exec and
// the file operations at once.
//
// Paths are sandbox-relative ("." is the root). An absolute path is accepted
// only under the directory WorkdirReporter reports. A path that resolves
// outside the root fails with Error::Code::EscapesRoot.
class Sandbox {
 public:
  Sandbox() = default;
  virtual ~Sandbox() = default;
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  // What this sandbox actually guarantees. Never assume; ask.
  virtual Capabilities GetCapabilities() const = 0;

  // Runs a command to completion and returns its Result. Errors are reserved
  // for the machinery: the process could not be started, the sandbox is dead.
  // A program that does not exist yields exit code 127, as in a shell.
  virtual Expected<Result> Exec(const Context& ctx, const Command& cmd) = 0;

  // Reads a whole regular file (refused with TooLarge above the sandbox's
  // read bound, before anything is allocated).
  virtual Expected<std::string> ReadFile(const Context& ctx, std::string_view path) = 0;

  // Replaces a file atomically (temporary file, then rename) with `data`.
  virtual Status WriteFile(const Context& ctx, std::string_view path, std::string_view data,
                           FileMode mode) = 0;

  // Removes one file or one empty directory; never recursive.
  virtual Status Remove(const Context& ctx, std::string_view path) = 0;

  // Lists a directory, sorted by name, without "." and "..".
  virtual Expected<std::vector<DirEntry>> ListDir(const Context& ctx,
                                                  std::string_view path) = 0;

  // Tears the sandbox down: kills everything it started and releases its
  // resources. Idempotent. Later calls fail with Unavailable.
  virtual Status Close() = 0;
};

// An optional extension to Sandbox: append to a file without reading it
// (shell `>>`; a missing file is created with `mode`).
class Appender {
 public:
  virtual ~Appender() = default;
  virtual Status AppendFile(const Context& ctx, std::string_view path, std::string_view data,
                            FileMode mode) = 0;
};

// An optional extension to Sandbox: create a directory and its missing
// parents inside the root.
class DirectoryMaker {
 public:
  virtual ~DirectoryMaker() = default;
  virtual Status MakeDirAll(const Context& ctx, std::string_view path, FileMode mode) = 0;
};

// The outcome of a bounded read.
struct LimitedRead {
  std::string data;
  bool truncated = false;  // the file holds more than was returned
};

// An optional extension to Sandbox: a read that never holds more than `max`
// bytes. max <= 0 means no limit beyond the sandbox's read bound.
class LimitedReader {
 public:
  virtual ~LimitedReader() = default;
  virtual Expected<LimitedRead> ReadFileLimit(const Context& ctx, std::string_view path,
                                              std::int64_t max) = 0;
};

// A live byte sink (a process's stdin). Thread-compatible: one writer at a time.
class Writer {
 public:
  virtual ~Writer() = default;
  // Writes all of `data`, blocking while the reader is slow.
  virtual Status Write(std::string_view data) = 0;
  // Closes the stream; the reader sees end of file. Idempotent.
  virtual Status Close() = 0;
};

// A live byte source (a process's stdout). Thread-compatible: one reader at a time.
class Reader {
 public:
  virtual ~Reader() = default;
  // Reads at most buffer.size() bytes, blocking until some arrive; 0 is end of file.
  virtual Expected<std::size_t> Read(std::span<char> buffer) = 0;
};

// How a process ended.
struct ExitStatus {
  int exit_code = 0;          // 128+N when killed by signal N
  std::optional<int> signal;  // the signal that killed it, if any

  bool ok() const { return exit_code == 0; }
  friend bool operator==(const ExitStatus&, const ExitStatus&) = default;
};

// A running long-lived process started by a ProcessHost. The caller drives
// stdin and stdout; stderr is drained into a bounded ring so the process never
// stalls on it. Destroying the handle kills the process tree.
class Process {
 public:
  virtual ~Process() = default;
  virtual Writer& Stdin() = 0;
  virtual Reader& Stdout() = 0;
  // A copy of the most recent stderr bytes (a bounded tail). Thread-safe.
  virtual std::string StderrSnapshot() = 0;
  // Blocks until the process exits. Memoized and safe from many threads: every
  // call returns the same value.
  virtual Expected<ExitStatus> Wait() = 0;
  // Kills the process and everything it started. Idempotent; thread-safe.
  virtual Status Kill() = 0;
};

// An optional extension to Sandbox: start a long-lived process with live
// streams. path/args/dir/env are honoured exactly as Exec honours them;
// stdin_data and timeout are ignored. Deliberately not forwarded through the
// review gate: a long-lived server is trusted infrastructure.
class ProcessHost {
 public:
  virtual ~ProcessHost() = default;
  virtual Expected<std::unique_ptr<Process>> StartProcess(const Context& ctx,
                                                          const Command& cmd) = 0;
};

// A stateful execution context: a long-lived shell in which successive Exec
// calls share working directory, environment, shell functions and background
// jobs. Each call runs `path args...` (each word quoted) as one simple command
// of that shell, so builtins such as cd and export work; use
// {.path = "eval", .args = {"shell text"}} for arbitrary shell text.
// Thread-safe: concurrent calls are serialized.
class Session {
 public:
  virtual ~Session() = default;
  virtual Expected<Result> Exec(const Context& ctx, const Command& cmd) = 0;
  // Kills the shell and everything it started. Idempotent.
  virtual Status Close() = 0;
};

// An optional extension to Sandbox: open stateful Sessions.
class Sessioner {
 public:
  virtual ~Sessioner() = default;
  virtual Expected<std::unique_ptr<Session>> NewSession(const Context& ctx) = 0;
};

// An optional extension to Sandbox: the absolute directory, as seen from
// inside the sandbox, that commands start in and paths are relative to.
class WorkdirReporter {
 public:
  virtual ~WorkdirReporter() = default;
  virtual std::string Workdir() const = 0;
};

// Discovers an optional capability: nullptr when the sandbox lacks it.
template <class Cap>
Cap* As(Sandbox& sandbox) {
  return dynamic_cast<Cap*>(&sandbox);
}

// The isolation policy check: InsufficientIsolation unless the sandbox gives
// at least `minimum`. Never downgrades silently.
Status Require(const Sandbox& sandbox, Isolation minimum);

}  // namespace sandbox

#endif  // SANDBOX_SANDBOX_H_
