// Command-line parsing of the sandbox CLI: pure functions, no I/O, so the
// contract of DESIGN.md section 7 is unit-tested exactly (tests/flags_test.cc).
#ifndef SANDBOX_TOOLS_SANDBOX_FLAGS_H_
#define SANDBOX_TOOLS_SANDBOX_FLAGS_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/error.h"
#include "sandbox/sandbox.h"

namespace sandbox::cli {

// The backend names `--backend` accepts, weakest isolation first.
inline constexpr std::string_view kBackendNames[] = {"local", "namespace", "docker", "gvisor",
                                                     "microvm"};

// Parses a Go-style duration: a sequence of decimal numbers, each with an
// optional fraction and a unit (ns, us, µs, ms, s, m, h), such as "500ms",
// "30s", "1m30s" or "1.5s". "0" alone is zero. A sign, a missing unit, an
// unknown unit or a value beyond ~292 years fails with InvalidArgument.
Expected<std::chrono::nanoseconds> ParseDuration(std::string_view text);

// Parses a byte size: a decimal number with an optional fraction and an
// optional binary unit, case-insensitive: b, k/kb/kib, m/mb/mib, g/gb/gib,
// t/tb/tib (all powers of 1024), such as "512m", "1g", "1.5G" or "1048576".
// Zero, a sign, a fraction of a byte or an overflow fails with InvalidArgument.
Expected<std::uint64_t> ParseSize(std::string_view text);

// Everything `sandbox run` was asked to do.
struct RunFlags {
  std::optional<std::string> backend;    // --backend, validated against kBackendNames
  std::optional<Isolation> isolation;    // --isolation, the minimum required
  std::optional<std::string> workspace;  // --workspace; unset means the current directory
  std::chrono::nanoseconds timeout{0};   // --timeout; 0 means none
  std::vector<std::string> env;          // --env KEY=VALUE, in order
  std::string dir;                       // --dir, sandbox-relative; "" is the root
  std::optional<std::string> rootfs;     // --rootfs, a host directory (namespace backend)
  std::optional<std::string> image;      // --image (docker and gvisor backends)
  bool network = false;                  // --network
  std::optional<std::uint64_t> memory;   // --memory, bytes
  std::optional<std::uint64_t> pids;     // --pids
  std::optional<double> cpus;            // --cpus
  bool json = false;                     // --json
  // The review gate (tools/sandbox/gate.h): --review POLICY.json | ask,
  // --review-timeout DURATION (0: the gate's default), --audit FILE.
  std::optional<std::string> review;
  std::chrono::nanoseconds review_timeout{0};
  std::optional<std::string> audit;
  bool help = false;                     // --help / -h: print usage, run nothing
  std::string program;                   // PROGRAM
  std::vector<std::string> args;         // ARGS..., not including PROGRAM
};

// Parses the arguments that follow `sandbox run`. Options come first, as
// `--opt value` or `--opt=value`; the program starts after `--` or at the
// first argument that is not an option. Fails with InvalidArgument, and a
// message a person can act on, for an unknown option, a missing or malformed
// value, or a missing program (unless --help was given).
Expected<RunFlags> ParseRunFlags(std::span<const std::string> args);

// Parses the options of a command that serves a sandbox rather than running
// one program (`sandbox mcp`): the same options as ParseRunFlags, so every
// option `sandbox run` learns reaches it too, but no PROGRAM; an argument
// that is not an option fails with InvalidArgument. `program` stays empty.
Expected<RunFlags> ParseServeFlags(std::span<const std::string> args);

// The usage text of `sandbox run`, ending with a newline.
std::string_view RunUsage();

}  // namespace sandbox::cli

#endif  // SANDBOX_TOOLS_SANDBOX_FLAGS_H_
