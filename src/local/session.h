// Stateful sessions of the local backend: one long-lived POSIX shell.
#ifndef SANDBOX_LOCAL_SESSION_H_
#define SANDBOX_LOCAL_SESSION_H_

#include <memory>
#include <string>

#include "local/exec.h"
#include "sandbox/sandbox.h"

namespace sandbox::local {

// Starts `shell`. The session keeps `config` (and so its sandbox's state)
// alive. Starts (POSIX, reading commands from stdin with -s) as a session.
// Each Exec sends one line to the shell; the command's stdout and stderr go
// to FIFOs made for that call, and its exit status comes back, tagged with a
// per-call random nonce, on a pipe no command can see (fd 3 is closed for
// the command), so output imitating a marker cannot forge a boundary or a
// status. A timed-out or cancelled call kills the whole session, which then
// reports itself dead (Unavailable) rather than silently losing state.
Expected<std::unique_ptr<Session>> StartLocalSession(std::shared_ptr<const ExecConfig> config,
                                                     const Context& ctx,
                                                     const std::string& shell);

// Quotes `word` for a POSIX shell: 'it'\''s'.
std::string ShellQuote(std::string_view word);

}  // namespace sandbox::local

#endif  // SANDBOX_LOCAL_SESSION_H_
