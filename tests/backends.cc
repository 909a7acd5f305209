#include "backends.h"

#include <sys/socket.h>

#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "os/tree.h"
#include "sandbox/docker.h"
#include "sandbox/local.h"
#include "sandbox/microvm.h"
#include "sandbox/namespace.h"
#include "sandbox/remote.h"

namespace sandbox::testing {
namespace {

// The wire protocol under the conformance suite: a RemoteSandbox over a
// socketpair to Serve(LocalSandbox) on a thread of this process.
Expected<std::unique_ptr<Sandbox>> NewLoopbackRemote(const std::string& workspace) {
  LocalOptions local;
  local.root = workspace;
  auto inner = NewLocalSandbox(local);
  if (!inner) return Fail(inner.error());
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    return Fail(Error::Code::Internal, "socketpair failed");
  struct Agent {
    std::unique_ptr<Sandbox> sandbox;
    std::thread thread;
    ~Agent() {
      if (thread.joinable()) thread.join();  // Serve returns when the host's end closes
    }
  };
  auto agent = std::make_shared<Agent>();
  agent->sandbox = std::move(*inner);
  agent->thread =
      std::thread([raw = agent.get(), fd = fds[1]] { (void)Serve(*raw->sandbox, fd, -1); });
  RemoteOptions options;
  options.read_fd = fds[0];
  options.on_close = [agent]() -> Status {
    if (agent->thread.joinable()) agent->thread.join();
    return {};
  };
  return NewRemoteSandbox(std::move(options));
}

// A docker or gvisor sandbox on the default image, which is built (from the
// host's busybox) the first time a test finds it missing.
Expected<std::unique_ptr<Sandbox>> NewContainerSandbox(const std::string& workspace, bool gvisor) {
  DockerOptions options;
  options.workspace = workspace;
  options.agent_path = ContainerAgentPath();
  auto make = [&] { return gvisor ? NewGvisorSandbox(options) : NewDockerSandbox(options); };
  auto made = make();
  if (made || made.error().code() != Error::Code::NotFound) return made;
  SANDBOX_RETURN_IF_ERROR(BuildDockerImage("", ""));
  return make();
}

}  // namespace

Expected<VmImage> TestVmImage() {
  // Built once per test process from the static agent (ContainerAgentPath:
  // a sanitizer build's agent is dynamic, and the guest has no such
  // libraries before /usr is mounted); the kernel comes
  // from the cache ($SANDBOX_VM_CACHE, else ~/.cache/sandbox/vm), which
  // .ci/run fills.
  static const Expected<VmImage> image = [] {
    VmImageOptions options;
    options.agent_path = ContainerAgentPath();
    return BuildVmImage(options);
  }();
  return image;
}

const std::vector<BackendUnderTest>& AllBackends() {
  static const std::vector<BackendUnderTest> backends = {
      {
          "local",
          [] { return std::string(); },
          [](const std::string& workspace) {
            LocalOptions options;
            options.root = workspace;
            return NewLocalSandbox(options);
          },
      },
      {
          // The local backend containing each command in its own PID
          // namespace, as the agent does inside every isolated backend.
          "local_pidns",
          [] {
            auto can = os::CanCreatePidNamespace();
            return can ? std::string() : can.error().message();
          },
          [](const std::string& workspace) {
            LocalOptions options;
            options.root = workspace;
            options.containment = LocalOptions::Containment::kPidNamespace;
            return NewLocalSandbox(options);
          },
          "local",
      },
      {
          "remote",
          [] { return std::string(); },
          [](const std::string& workspace) { return NewLoopbackRemote(workspace); },
      },
      {
          // The agent as PID 1 of a namespace boundary, behind RemoteSandbox.
          "namespace",
          [] { return NamespaceUnavailableReason(); },
          [](const std::string& workspace) {
            NamespaceOptions options;
            options.workspace = workspace;
            options.agent_path = SANDBOX_AGENT_PATH;
            return NewNamespaceSandbox(options);
          },
      },
      {
          // The agent as the entrypoint of a runc container (Docker Engine API).
          "docker",
          [] { return DockerUnavailableReason(); },
          [](const std::string& workspace) { return NewContainerSandbox(workspace, false); },
      },
      {
          // The same under gVisor's runsc runtime.
          "gvisor",
          [] { return DockerUnavailableReason("runsc"); },
          [](const std::string& workspace) { return NewContainerSandbox(workspace, true); },
      },
      {
          // The agent as /init of a QEMU microvm guest, behind RemoteSandbox.
          "microvm",
          []() -> std::string {
            if (std::string reason = MicroVmUnavailableReason(); !reason.empty()) return reason;
            auto image = TestVmImage();
            return image ? std::string() : "no guest image: " + image.error().message();
          },
          [](const std::string& workspace) -> Expected<std::unique_ptr<Sandbox>> {
            auto image = TestVmImage();
            if (!image) return Fail(image.error());
            MicroVmOptions options;
            options.workspace = workspace;
            options.image = *image;
            return NewMicroVmSandbox(options);
          },
      },
  };
  return backends;
}

const BackendUnderTest& FindBackend(const std::string& name) {
  for (const auto& backend : AllBackends())
    if (backend.name == name) return backend;
  throw std::invalid_argument("unknown backend " + name);
}

std::vector<std::string> AllBackendNames() {
  std::vector<std::string> names;
  for (const auto& backend : AllBackends()) names.push_back(backend.name);
  return names;
}

std::string ContainerAgentPath() {
  const char* env = std::getenv("SANDBOX_CONTAINER_AGENT");
  return env && *env ? env : SANDBOX_AGENT_PATH;
}

bool BackendRequired(const std::string& backend) {
  const char* env = std::getenv("SANDBOX_REQUIRE_BACKENDS");
  if (!env) return false;
  std::stringstream list(env);
  std::string item;
  while (std::getline(list, item, ','))
    if (item == backend || item == "all") return true;
  return false;
}

}  // namespace sandbox::testing
