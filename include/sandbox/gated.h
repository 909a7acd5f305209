// The review gate: decorators over Sandbox and Session that send every
// model-issued command (and, by policy, file writes, appends, removals and
// directory creation) to a Reviewer before it runs, and write every decision
// and every operation to an audit log.
//
// The gate forwards every optional capability of the sandbox it wraps --
// Appender, DirectoryMaker, LimitedReader, Sessioner, WorkdirReporter --
// EXCEPT ProcessHost: a long-lived server is trusted infrastructure the
// harness starts, not a model-issued command, so a caller that needs one asks
// the base sandbox (the gate shares it; see NewGatedSandbox).
#ifndef SANDBOX_GATED_H_
#define SANDBOX_GATED_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/audit.h"
#include "sandbox/context.h"
#include "sandbox/error.h"
#include "sandbox/sandbox.h"

namespace sandbox {

// An operation the gate sees. The names ToString gives are the ones policy
// files and the audit log use.
enum class Operation {
  Exec,           // Sandbox::Exec and Session::Exec: "exec"
  WriteFile,      // "write_file"
  AppendFile,     // "append_file"
  Remove,         // "remove"
  MakeDirAll,     // "make_dir_all"
  ReadFile,       // "read_file" (never reviewed, audited)
  ReadFileLimit,  // "read_file_limit" (never reviewed, audited)
  ListDir,        // "list_dir" (never reviewed, audited)
  NewSession,     // "new_session" (never reviewed, audited)
};

// "exec", "write_file", ...
std::string_view ToString(Operation operation);

// Parses the names ToString produces; InvalidArgument when unknown.
Expected<Operation> ParseOperation(std::string_view name);

// What a Reviewer is asked about. The views point into a copy the gate owns
// for the whole of Review, also when Review outlives its deadline.
struct ReviewRequest {
  Operation operation = Operation::Exec;
  std::string_view sandbox_id;  // the gate's id, as in the audit log
  std::string_view backend;     // Capabilities::backend of the base sandbox
  bool in_session = false;      // an Exec inside a stateful Session
  // Exec: the command (program, args, dir, env, stdin). nullptr otherwise.
  const Command* command = nullptr;
  // File operations: the path as the caller gave it.
  std::string_view path;
  // What WorkdirReporter of the base says ("" when it has none), so that an
  // absolute path under it can be made relative.
  std::string_view workdir;
  // WriteFile/AppendFile: the bytes to be written.
  std::string_view data;
  FileMode mode = 0;
};

// A reviewer's answer.
struct Decision {
  enum class Verdict {
    Allow,          // run it
    AllowRemember,  // run it, and the same request again on this sandbox without asking
    Deny,           // refuse with `reason`; the operation never runs
  };
  Verdict verdict = Verdict::Deny;
  std::string reason;  // why; shown to the model on Deny
  // Who decided, for the audit log, when not the reviewer asked (a rules
  // reviewer that handed the question to a person says "interactive").
  std::string decided_by;

  static Decision Allow(std::string reason = "") { return {Verdict::Allow, std::move(reason)}; }
  static Decision AllowRemember(std::string reason = "") {
    return {Verdict::AllowRemember, std::move(reason)};
  }
  static Decision Deny(std::string reason) { return {Verdict::Deny, std::move(reason)}; }
};

// "allow", "allow_remember" or "deny".
std::string_view ToString(Decision::Verdict verdict);

// Decides whether one operation may run. Implementations must be
// thread-safe: a gate may review several operations at once, each on a
// thread of its own. The gate passes a Context whose deadline is the review
// timeout (or the caller's deadline, when earlier) and stops waiting then:
// the operation is denied at once, the Context is cancelled, and whatever
// Review returns later is discarded, as is an Error. So a reviewer that
// never returns cannot hold a call; it should still return when its Context
// ends, since a gate denies without asking while 16 of its reviews are
// still running past their deadline.
class Reviewer {
 public:
  Reviewer() = default;
  virtual ~Reviewer() = default;
  Reviewer(const Reviewer&) = delete;
  Reviewer& operator=(const Reviewer&) = delete;

  // A short name for the audit log: "rules", "interactive", "callback", ...
  virtual std::string Name() const = 0;

  virtual Expected<Decision> Review(const Context& ctx, const ReviewRequest& request) = 0;
};

// A reviewer that calls `decide` (for library users: a GUI, a second model,
// a test). `decide` runs on a thread of the gate's; see Reviewer for what
// happens when it does not return in time.
using ReviewCallback = std::function<Decision(const Context& ctx, const ReviewRequest& request)>;
std::shared_ptr<Reviewer> NewCallbackReviewer(ReviewCallback decide, std::string name = "callback");

// A reviewer that asks a person on a terminal. It shows the sandbox, the
// operation and the command or path with every control character, invalid
// UTF-8 byte and bidirectional-formatting character escaped ($'...' quoting,
// as bash prints it), so a command holding terminal escape sequences cannot
// change what the person sees; long arguments and data are cut with a note
// saying how much is not shown. Answers: y (allow), a (allow and remember
// for this sandbox), n (deny) or "n REASON" (deny, the reason given to the
// model). Pending type-ahead is discarded before each question. No answer by
// the review deadline, end of input or three unreadable answers deny.
// Questions are serialized: one at a time.
struct InteractiveReviewerOptions {
  // Where questions are read from and written to. -1 for both opens
  // /dev/tty. The descriptors are borrowed and must outlive the reviewer.
  int in_fd = -1;
  int out_fd = -1;
  // The most bytes of one argument, path or data preview shown.
  std::size_t max_shown_bytes = 1024;
};
// Fails with Unavailable when no terminal can be opened.
Expected<std::shared_ptr<Reviewer>> NewInteractiveReviewer(
    const InteractiveReviewerOptions& options = {});

// A reviewer that applies a policy file (docs/review-policy.md): rules by
// operation, program, argument pattern and path pattern; the first rule that
// matches decides; a default decides when none does. "ask" hands the
// request to `ask` (nullptr: "ask" denies, saying that no one can be asked).
// A malformed file is refused whole, with "FILE:LINE: reason" (and the column for a
// JSON syntax error).
Expected<std::shared_ptr<Reviewer>> LoadRulesReviewer(const std::string& policy_path,
                                                      std::shared_ptr<Reviewer> ask = nullptr);
// The same from the text of a policy; `source_name` names it in errors.
Expected<std::shared_ptr<Reviewer>> ParseRulesReviewer(std::string_view policy_text,
                                                       std::string_view source_name,
                                                       std::shared_ptr<Reviewer> ask = nullptr);

// How a gate behaves.
struct GateOptions {
  // Decides every reviewed operation. Without one nothing is reviewed and
  // the gate only writes the audit log.
  std::shared_ptr<Reviewer> reviewer;
  // Written one JSON line per decision and per operation. Optional, but a
  // gate needs a reviewer or an audit log. When a line cannot be written the
  // gate refuses every later operation (Unavailable): nothing runs unaudited.
  std::shared_ptr<AuditLog> audit;
  // The id in the audit log and review requests; "" makes a random one.
  std::string sandbox_id;
  // A review that has not answered by then is a denial, at that moment,
  // whether or not the reviewer ever returns.
  std::chrono::nanoseconds review_timeout = std::chrono::minutes(5);
  // Which file operations are reviewed (Exec always is). ReadFile,
  // ReadFileLimit and ListDir are never reviewed, only audited.
  bool review_write_file = true;
  bool review_append_file = true;
  bool review_remove = true;
  bool review_make_dir_all = true;
  // The most distinct "allow and remember" decisions one sandbox keeps;
  // beyond that the reviewer is asked again.
  std::size_t max_remembered = 4096;
};

// Wraps `base` in the review gate. The gated sandbox has the base's
// capabilities and every optional capability of the base except
// ProcessHost; its sessions are gated too and share its remembered
// decisions. A denied operation fails with Error::Code::Denied and a message
// holding the reviewer's reason, and never reaches the base. Closing the gate
// closes the base; the caller may keep its own reference to `base` for
// trusted work (ProcessHost). Fails with InvalidArgument without a base, or
// with neither a reviewer nor an audit log. Thread-safe as the base is.
Expected<std::unique_ptr<Sandbox>> NewGatedSandbox(std::shared_ptr<Sandbox> base,
                                                   GateOptions options);

// Wraps one Session in the gate the same way; used by gated sandboxes'
// NewSession and by callers that get sessions elsewhere.
Expected<std::unique_ptr<Session>> NewGatedSession(std::unique_ptr<Session> base,
                                                   GateOptions options, std::string backend);

}  // namespace sandbox

#endif  // SANDBOX_GATED_H_
