#include "microvm/host_tools.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "os/spawn.h"
#include "os/syscalls.h"

namespace sandbox::vm {
namespace {

constexpr const char* kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

std::string SearchPath() {
  const char* path = std::getenv("PATH");
  return path && *path ? std::string(path) + ":" + kDefaultPath : std::string(kDefaultPath);
}

}  // namespace

Expected<std::string> FindTool(const std::string& name, const std::string& package) {
  if (name.find('/') != std::string::npos) {
    if (::access(name.c_str(), X_OK) == 0) return name;
  } else if (auto found = os::FindExecutable(name, SearchPath(), AT_FDCWD)) {
    return *found;
  }
  return Fail(Error::Code::NotFound,
              "'" + name + "' is not installed (apt-get install " + package + ")");
}

std::string QemuBinary() {
  const char* env = std::getenv("SANDBOX_QEMU");
  return env && *env ? std::string(env) : std::string("qemu-system-x86_64");
}

Expected<std::string> RunTool(const std::vector<std::string>& argv, const std::string& cwd) {
  auto path = FindTool(argv.at(0), argv.at(0));
  if (!path) return Fail(path.error());
  os::UniqueFd null_fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  os::UniqueFd cwd_fd(::open(cwd.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!null_fd || !cwd_fd) return Fail(os::ErrnoError(errno, "open", cwd));
  auto pipe = os::MakePipe();
  if (!pipe) return Fail(pipe.error());
  os::SpawnSpec spec;
  spec.exec_path = *path;
  spec.argv = argv;
  spec.env = {"PATH=" + SearchPath(), "LC_ALL=C"};
  spec.cwd_fd = cwd_fd.get();
  spec.stdin_fd = null_fd.get();
  spec.stdout_fd = pipe->write.get();
  spec.stderr_fd = STDERR_FILENO;
  auto child = os::Spawn(spec);
  if (!child) return Fail(child.error());
  pipe->write.reset();
  auto out = os::ReadAll(pipe->read.get(), std::size_t{1} << 20);
  auto status = child->Wait();
  if (!status) return Fail(status.error());
  if (!out) return Fail(out.error());
  if (!status->ok()) {
    std::string command;
    for (const auto& arg : argv) command += (command.empty() ? "" : " ") + arg;
    return Fail(Error::Code::Unavailable,
                "'" + command + "' failed with exit status " + std::to_string(status->exit_code));
  }
  return out;
}

Expected<std::string> ReadWholeFile(const std::string& path, std::size_t max) {
  os::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return Fail(os::ErrnoError(errno, "open", path));
  return os::ReadAll(fd.get(), max);
}

void MarkImageUsed(const std::string& path) { (void)::utimensat(AT_FDCWD, path.c_str(), nullptr, 0); }

Status WriteFileAtomically(const std::string& path, std::string_view data, unsigned mode) {
  std::string temporary = path + ".tmp" + std::to_string(::getpid());
  os::UniqueFd fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
  if (!fd) return Fail(os::ErrnoError(errno, "open", temporary));
  if (auto written = os::WriteAllNoSigpipe(fd.get(), data); !written) {
    ::unlink(temporary.c_str());
    return written;
  }
  fd.reset();
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(temporary.c_str());
    return Fail(os::ErrnoError(err, "rename", path));
  }
  return {};
}

}  // namespace sandbox::vm
