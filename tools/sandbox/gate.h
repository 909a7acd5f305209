// The review gate and audit log of the CLI (`sandbox run`, and `sandbox mcp`
// with the same flags): built from --review, --review-timeout and --audit.
#ifndef SANDBOX_TOOLS_SANDBOX_GATE_H_
#define SANDBOX_TOOLS_SANDBOX_GATE_H_

#include <memory>

#include "flags.h"
#include "sandbox/audit.h"
#include "sandbox/error.h"
#include "sandbox/gated.h"
#include "sandbox/sandbox.h"

namespace sandbox::cli {

// What PrepareGate made: a reviewer and an audit log, each optional.
struct GateSetup {
  std::shared_ptr<Reviewer> reviewer;
  std::shared_ptr<AuditLog> audit;
  std::chrono::nanoseconds review_timeout{0};  // 0: the gate's default

  bool empty() const { return !reviewer && !audit; }
};

// Loads the policy file (--review FILE; its "ask" rules ask on /dev/tty when
// there is one), opens the terminal (--review ask) and the audit log
// (--audit FILE). Call it before starting a sandbox: a malformed policy, a
// missing terminal or an unwritable log is refused at start-up with a message
// naming the file (and the line). An empty setup when no flag asks for a gate.
Expected<GateSetup> PrepareGate(const RunFlags& flags);

// `sandbox` behind the gate `setup` describes (unchanged when it is empty).
Expected<std::unique_ptr<Sandbox>> ApplyGate(const GateSetup& setup,
                                             std::unique_ptr<Sandbox> sandbox);

}  // namespace sandbox::cli

#endif  // SANDBOX_TOOLS_SANDBOX_GATE_H_
