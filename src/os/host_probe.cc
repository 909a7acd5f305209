#include "os/host_probe.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <system_error>

#include "os/syscalls.h"
#include "os/unique_fd.h"

namespace sandbox::os {
namespace {

using Clock = std::chrono::steady_clock;

int RemainingMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

// Waits for `events` on `fd` until `deadline`; false on timeout.
Status WaitFor(int fd, short events, Clock::time_point deadline, std::string_view what) {
  for (;;) {
    pollfd waiter{.fd = fd, .events = events, .revents = 0};
    int ready = poll(&waiter, 1, RemainingMs(deadline));
    if (ready > 0) return {};
    if (ready == 0)
      return Fail(Error::Code::DeadlineExceeded, std::string(what) + ": no answer in time");
    if (errno != EINTR) return Fail(ErrnoError(errno, "poll", what));
  }
}

}  // namespace

Expected<std::string> UnixSocketExchange(const std::string& path, const std::string& request,
                                         std::size_t max_reply,
                                         std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path)
    return Fail(Error::Code::InvalidArgument, "socket path '" + path + "' is too long");
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return Fail(ErrnoError(errno, "socket", path));
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    if (errno != EINPROGRESS && errno != EAGAIN) return Fail(ErrnoError(errno, "connect", path));
    SANDBOX_RETURN_IF_ERROR(WaitFor(fd.get(), POLLOUT, deadline, path));
    int error = 0;
    socklen_t length = sizeof error;
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) return Fail(ErrnoError(error, "connect", path));
  }
  std::string_view pending = request;
  while (!pending.empty()) {
    SANDBOX_RETURN_IF_ERROR(WaitFor(fd.get(), POLLOUT, deadline, path));
    ssize_t sent = send(fd.get(), pending.data(), pending.size(), MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Fail(ErrnoError(errno, "send", path));
    }
    pending.remove_prefix(static_cast<std::size_t>(sent));
  }
  std::string reply;
  char buffer[16384];
  for (;;) {
    SANDBOX_RETURN_IF_ERROR(WaitFor(fd.get(), POLLIN, deadline, path));
    ssize_t got = recv(fd.get(), buffer, sizeof buffer, 0);
    if (got == 0) return reply;
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Fail(ErrnoError(errno, "recv", path));
    }
    if (reply.size() + static_cast<std::size_t>(got) > max_reply)
      return Fail(Error::Code::TooLarge,
                  path + ": reply longer than " + std::to_string(max_reply) + " bytes");
    reply.append(buffer, static_cast<std::size_t>(got));
  }
}

KvmProbe ProbeKvm() {
  KvmProbe probe;
  UniqueFd kvm(open("/dev/kvm", O_RDWR | O_CLOEXEC));
  if (!kvm) {
    probe.present = errno != ENOENT;
    probe.detail = probe.present
                       ? "open /dev/kvm: " + std::generic_category().message(errno) +
                             " (add this user to the kvm group, or run as root)"
                       : "/dev/kvm does not exist (load kvm_intel or kvm_amd, enable "
                         "virtualization in the firmware, or nested virtualization in the "
                         "host of this VM)";
    return probe;
  }
  probe.present = true;
  probe.api_version = ioctl(kvm.get(), KVM_GET_API_VERSION, 0);
  if (probe.api_version != KVM_API_VERSION) {
    probe.detail = "KVM_GET_API_VERSION returned " + std::to_string(probe.api_version) +
                   ", expected " + std::to_string(KVM_API_VERSION);
    return probe;
  }
  UniqueFd vm(ioctl(kvm.get(), KVM_CREATE_VM, 0));
  if (!vm) {
    probe.detail = "KVM_CREATE_VM: " + std::generic_category().message(errno) +
                   " (/dev/kvm exists but cannot create a VM here)";
    return probe;
  }
  probe.usable = true;
  probe.detail = "/dev/kvm, API version " + std::to_string(probe.api_version) + ", can create a VM";
  return probe;
}

}  // namespace sandbox::os
