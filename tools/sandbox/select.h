// Which backend `sandbox run --isolation LEVEL` (and `sandbox mcp`) picks:
// a table of backend name -> isolation level -> availability probe, fastest
// first. A new backend is one row in select.cc.
#ifndef SANDBOX_TOOLS_SANDBOX_SELECT_H_
#define SANDBOX_TOOLS_SANDBOX_SELECT_H_

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "sandbox/error.h"
#include "sandbox/sandbox.h"

namespace sandbox::cli {

// One backend the CLI can start.
struct BackendOption {
  std::string_view name;  // as --backend spells it
  Isolation isolation;    // what it gives when it runs
  // "" when the backend can run on this machine, else why not and what to
  // install or enable to make it run.
  std::string (*unavailable_reason)();
};

// Every backend, fastest first: the order --isolation picks in.
std::span<const BackendOption> BackendTable();

// The row for `name`, or nullptr.
const BackendOption* FindBackendOption(std::string_view name);

// The fastest backend available here that gives at least `minimum`. Never a
// weaker one: when none can run, fails with InsufficientIsolation and a
// message naming, for every backend that would give `minimum`, what is
// missing on this machine.
Expected<std::string> PickBackend(Isolation minimum);

}  // namespace sandbox::cli

#endif  // SANDBOX_TOOLS_SANDBOX_SELECT_H_
