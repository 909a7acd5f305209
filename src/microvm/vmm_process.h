// A VMM process as both drivers run it: stdin from /dev/null, stdout and
// stderr (the guest console and the VMM's own messages) drained into a
// bounded ConsoleLog, spawned from the launcher thread so it dies with this
// process, and killed and reaped by PowerOff or destruction.
#ifndef SANDBOX_MICROVM_VMM_PROCESS_H_
#define SANDBOX_MICROVM_VMM_PROCESS_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "microvm/console_log.h"
#include "microvm/vmm.h"
#include "os/spawn.h"

namespace sandbox::vm {

class VmmProcess final : public RunningVm {
 public:
  // Spawns `binary` with `args`; `extra_fd` (borrowed; -1 for none) becomes
  // its fd 3. The console is kept per `spec` (console_fd, tail bytes).
  static Expected<std::unique_ptr<VmmProcess>> Launch(const std::string& binary,
                                                      const std::vector<std::string>& args,
                                                      int extra_fd, const VmSpec& spec);
  ~VmmProcess() override { (void)PowerOff(); }

  // The stream to the agent, once the driver has it.
  void SetAgentStream(os::UniqueFd agent) { agent_ = std::move(agent); }

  os::UniqueFd TakeAgentStream() override { return std::move(agent_); }
  Status PowerOff() override;
  std::string ConsoleTail() const override { return console_->Tail(); }
  int pid() const override { return child_.pid(); }

 private:
  VmmProcess(os::Child child, std::unique_ptr<ConsoleLog> console)
      : child_(std::move(child)), console_(std::move(console)) {}

  std::mutex mu_;
  os::Child child_;
  os::UniqueFd agent_;
  std::unique_ptr<ConsoleLog> console_;
};

}  // namespace sandbox::vm

#endif  // SANDBOX_MICROVM_VMM_PROCESS_H_
