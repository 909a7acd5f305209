#include "agent/vm_guest.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/vm_sockets.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "microvm/guest_layout.h"
#include "os/syscalls.h"

namespace sandbox::agent {
namespace {

Expected<std::string> ReadSmallFile(const char* path) {
  os::UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
  if (!fd) return Fail(os::ErrnoError(errno, "open", path));
  return os::ReadAll(fd.get(), 1 << 16);
}

std::vector<std::string> CommandLineWords() {
  std::vector<std::string> words;
  auto text = ReadSmallFile("/proc/cmdline");
  if (!text) return words;
  std::string_view rest = *text;
  while (!rest.empty()) {
    std::size_t start = rest.find_first_not_of(" \n\t");
    if (start == std::string_view::npos) break;
    rest.remove_prefix(start);
    std::size_t end = rest.find_first_of(" \n\t");
    words.emplace_back(rest.substr(0, end));
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end);
  }
  return words;
}

Status Mount(const char* source, const char* target, const char* type, unsigned long flags,
             const char* data) {
  ::mkdir(target, 0755);
  if (::mount(source, target, type, flags, data) != 0)
    return Fail(os::ErrnoError(errno, std::string("mount ") + type, target));
  return {};
}

// finit_module for each module in the initramfs's order, with the
// parameters the kernel command line gives it as `NAME.PARAM=VALUE` (what
// modprobe would pass; the kernel keeps those for modules it cannot load).
Status LoadModules(const std::vector<std::string>& words, bool vsock) {
  auto order = ReadSmallFile(std::string(vm::kModuleOrderFile).c_str());
  if (!order) return Fail(order.error());
  std::string_view names = *order;
  while (!names.empty()) {
    std::string name(names.substr(0, names.find('\n')));
    names.remove_prefix(std::min(names.size(), name.size() + 1));
    if (name.empty()) continue;
    bool is_vsock = name.find("vsock") != std::string::npos;
    if (is_vsock && !vsock) continue;
    std::string params;
    for (const auto& word : words)
      if (word.starts_with(name + ".") && word.find('=') != std::string::npos)
        params += (params.empty() ? "" : " ") + word.substr(name.size() + 1);
    std::string path = std::string(vm::kModuleDir) + "/" + name + ".ko";
    os::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return Fail(os::ErrnoError(errno, "open", path));
    if (::syscall(SYS_finit_module, fd.get(), params.c_str(), 0) != 0 && errno != EEXIST)
      return Fail(os::ErrnoError(errno, "finit_module", name));
  }
  return {};
}

// sandbox.mount=TAG:PATH:ro|rw; appends the read-only ones' paths to
// `read_only_paths`.
Status MountShares(const std::vector<std::string>& words, std::vector<std::string>& read_only_paths) {
  for (const auto& word : words) {
    if (!word.starts_with(vm::kMountKey)) continue;
    std::string_view spec = std::string_view(word).substr(vm::kMountKey.size());
    std::size_t first = spec.find(':'), last = spec.rfind(':');
    if (first == std::string_view::npos || first == last)
      return Fail(Error::Code::InvalidArgument, "bad " + word);
    std::string tag(spec.substr(0, first));
    std::string path(spec.substr(first + 1, last - first - 1));
    bool read_only = spec.substr(last + 1) == "ro";
    // A read-only share (the host's /usr) may be cached freely; the
    // workspace is shared with the host and must not be.
    std::string data = "trans=virtio,version=9p2000.L,msize=512000,";
    data += read_only ? "cache=loose" : "cache=none";
    // nosuid everywhere: commands hold no capability and cannot gain one
    // from a set-user-ID bit or file capabilities, and on a nosuid mount the
    // kernel does not ask 9p for security.capability at every exec (a round
    // trip to the VMM each).
    unsigned long flags = MS_NODEV | MS_NOSUID | (read_only ? MS_RDONLY : 0);
    SANDBOX_RETURN_IF_ERROR(Mount(tag.c_str(), path.c_str(), "9p", flags, data.c_str()));
    if (read_only) read_only_paths.push_back(path);
  }
  return {};
}

// A directory of a private cgroup v2 mount in which each command's tree
// gets a cgroup: one vfork per command, where a PID namespace per command
// costs a second process (a clone of the whole agent), dear under
// emulation. The mount is detached at once, so no path leads to the
// hierarchy: commands run as uid 0 (without capabilities) and would
// otherwise own its files, free to move themselves out of their cgroup.
// -1 where the kernel has no cgroup2 with cgroup.kill (Linux < 5.14; the
// agent then says so on stderr).
int OpenCommandCgroup() {
  constexpr const char* kMountPoint = "/sys/fs/cgroup";
  if (Status mounted = Mount("cgroup2", kMountPoint, "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                             nullptr);
      !mounted)
    return -1;
  int fd = -1;
  std::string dir = std::string(kMountPoint) + "/commands";
  if (::mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST)
    fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0 && ::faccessat(fd, "cgroup.kill", F_OK, 0) != 0) {
    ::close(fd);
    fd = -1;
  }
  if (::umount2(kMountPoint, MNT_DETACH) != 0) {
    // Still reachable by path: commands must not get it.
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

// The virtio-serial port named kAgentPortName; waits for it to appear.
Expected<int> OpenAgentPort() {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    if (DIR* dir = ::opendir("/sys/class/virtio-ports")) {
      while (dirent* entry = ::readdir(dir)) {
        std::string port = entry->d_name;
        if (port.starts_with(".")) continue;
        auto name = ReadSmallFile(("/sys/class/virtio-ports/" + port + "/name").c_str());
        if (!name || std::string_view(*name).substr(0, name->find('\n')) != vm::kAgentPortName)
          continue;
        ::closedir(dir);
        std::string path = "/dev/" + port;
        int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
        if (fd < 0) return Fail(os::ErrnoError(errno, "open", path));
        return fd;
      }
      ::closedir(dir);
    }
    if (std::chrono::steady_clock::now() > deadline)
      return Fail(Error::Code::NotFound,
                  "no virtio-serial port named " + std::string(vm::kAgentPortName));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Expected<int> AcceptVsock(unsigned port) {
  os::UniqueFd listener(::socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listener) return Fail(os::ErrnoError(errno, "socket(AF_VSOCK)"));
  sockaddr_vm address{};
  address.svm_family = AF_VSOCK;
  address.svm_cid = VMADDR_CID_ANY;
  address.svm_port = port;
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listener.get(), 1) != 0)
    return Fail(os::ErrnoError(errno, "bind vsock port", std::to_string(port)));
  int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return Fail(os::ErrnoError(errno, "accept vsock"));
  return fd;
}

}  // namespace

Expected<VmGuest> PrepareVmGuest() {
  SANDBOX_RETURN_IF_ERROR(Mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755"));
  SANDBOX_RETURN_IF_ERROR(Mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr));
  SANDBOX_RETURN_IF_ERROR(Mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr));
  SANDBOX_RETURN_IF_ERROR(Mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"));
  SANDBOX_RETURN_IF_ERROR(Mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"));
  (void)!::symlink("/proc/self/fd", "/dev/fd");
  ::sethostname("sandbox", 7);
  std::vector<std::string> words = CommandLineWords();
  unsigned vsock_port = 0;
  for (const auto& word : words)
    if (word.starts_with(vm::kVsockKey))
      vsock_port = static_cast<unsigned>(std::strtoul(word.c_str() + vm::kVsockKey.size(), nullptr, 10));
  SANDBOX_RETURN_IF_ERROR(LoadModules(words, vsock_port != 0));
  VmGuest guest;
  SANDBOX_RETURN_IF_ERROR(MountShares(words, guest.read_only_mounts));
  guest.cgroup_fd = OpenCommandCgroup();
  auto stream = vsock_port != 0 ? AcceptVsock(vsock_port) : OpenAgentPort();
  if (!stream) {
    if (guest.cgroup_fd >= 0) ::close(guest.cgroup_fd);
    return Fail(stream.error());
  }
  guest.stream_fd = *stream;
  return guest;
}

void PowerOffVm() {
  ::sync();
  ::reboot(RB_POWER_OFF);
  ::_exit(1);  // reboot failed: PID 1 exiting panics the kernel, which -no-reboot also ends
}

}  // namespace sandbox::agent
