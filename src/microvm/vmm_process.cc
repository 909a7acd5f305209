#include "microvm/vmm_process.h"

#include <fcntl.h>
#include <sys/socket.h>

#include <csignal>
#include <optional>

#include "os/launcher.h"
#include "os/syscalls.h"

namespace sandbox::vm {

Expected<std::unique_ptr<VmmProcess>> VmmProcess::Launch(const std::string& binary,
                                                         const std::vector<std::string>& args,
                                                         int extra_fd, const VmSpec& spec) {
  int console_pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, console_pair) != 0)
    return Fail(os::ErrnoError(errno, "socketpair"));
  os::UniqueFd console_host(console_pair[0]), console_vmm(console_pair[1]);
  // The console is only read: the guest gets nothing from the host there.
  ::shutdown(console_host.get(), SHUT_WR);
  os::UniqueFd null_fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!null_fd) return Fail(os::ErrnoError(errno, "open", "/dev/null"));

  os::SpawnSpec process;
  process.exec_path = binary;
  process.argv = {binary};
  process.argv.insert(process.argv.end(), args.begin(), args.end());
  process.env = {"PATH=/usr/bin:/bin"};
  process.stdin_fd = null_fd.get();
  process.stdout_fd = console_vmm.get();
  process.stderr_fd = console_vmm.get();
  process.extra_fd = extra_fd;
  // The VMM dies with this process: spawned from the launcher thread, which
  // lives as long as the process, with SIGKILL as parent-death signal.
  process.parent_death_signal = SIGKILL;
  std::optional<Expected<os::Child>> spawned;
  os::RunOnLauncherThread([&] { spawned.emplace(os::Spawn(process)); });
  if (!*spawned) return Fail(spawned->error());
  auto console =
      std::make_unique<ConsoleLog>(std::move(console_host), spec.console_tail_bytes, spec.console_fd);
  return std::unique_ptr<VmmProcess>(new VmmProcess(std::move(**spawned), std::move(console)));
}

Status VmmProcess::PowerOff() {
  std::lock_guard lock(mu_);
  Status status;
  if (child_.pid() > 0 && !child_.reaped()) {
    (void)child_.Kill();
    if (auto waited = child_.Wait(); !waited) status = Fail(waited.error());
  }
  console_->Stop();
  return status;
}

}  // namespace sandbox::vm
