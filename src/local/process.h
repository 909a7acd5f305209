// Long-lived processes of the local backend (ProcessHost).
#ifndef SANDBOX_LOCAL_PROCESS_H_
#define SANDBOX_LOCAL_PROCESS_H_

#include <memory>

#include "local/exec.h"
#include "sandbox/sandbox.h"

namespace sandbox::local {

// Starts `cmd` with live stdin/stdout; stderr is drained by a thread into a
// ring of `stderr_ring_bytes`. The process keeps `config` alive.
Expected<std::unique_ptr<Process>> StartLocalProcess(std::shared_ptr<const ExecConfig> config,
                                                     const Context& ctx,
                                                     const Command& cmd,
                                                     std::size_t stderr_ring_bytes);

}  // namespace sandbox::local

#endif  // SANDBOX_LOCAL_PROCESS_H_
