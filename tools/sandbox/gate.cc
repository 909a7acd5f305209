#include "gate.h"

#include <utility>

namespace sandbox::cli {

Expected<GateSetup> PrepareGate(const RunFlags& flags) {
  GateSetup setup;
  setup.review_timeout = flags.review_timeout;
  if (flags.review) {
    if (*flags.review == "ask") {
      auto person = NewInteractiveReviewer();
      if (!person) return Fail(person.error().code(), "--review ask: " + person.error().message());
      setup.reviewer = std::move(*person);
    } else {
      // A policy's "ask" rules go to the terminal when there is one; without
      // one they deny, saying so.
      std::shared_ptr<Reviewer> person;
      if (auto terminal = NewInteractiveReviewer()) person = std::move(*terminal);
      auto rules = LoadRulesReviewer(*flags.review, std::move(person));
      if (!rules) return Fail(rules.error().code(), "--review: " + rules.error().message());
      setup.reviewer = std::move(*rules);
    }
  }
  if (flags.audit) {
    auto log = AuditLog::Open({.path = *flags.audit});
    if (!log) return Fail(log.error().code(), "--audit: " + log.error().message());
    setup.audit = std::move(*log);
  }
  return setup;
}

Expected<std::unique_ptr<Sandbox>> ApplyGate(const GateSetup& setup,
                                             std::unique_ptr<Sandbox> sandbox) {
  if (setup.empty()) return sandbox;
  GateOptions options{.reviewer = setup.reviewer, .audit = setup.audit};
  if (setup.review_timeout.count() > 0) options.review_timeout = setup.review_timeout;
  return NewGatedSandbox(std::move(sandbox), std::move(options));
}

}  // namespace sandbox::cli
