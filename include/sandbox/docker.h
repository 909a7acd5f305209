// The `docker` (Isolation::Process, runc) and `gvisor` (Isolation::Kernel,
// runsc) backends: the sandbox agent as the entrypoint of a container
// created through the Docker Engine API, driven over the container's
// attached stdio. What front ends (the CLI's run, image, doctor and gc) need.
#ifndef SANDBOX_DOCKER_H_
#define SANDBOX_DOCKER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sandbox/error.h"
#include "sandbox/sandbox.h"

namespace sandbox {

// The image `sandbox image build` makes and the backends use by default.
inline constexpr const char* kDefaultDockerImage = "sandbox-default:latest";
// The label every container and image the backends create carries; gc
// removes the containers carrying it whose host process is gone.
inline constexpr const char* kDockerLabel = "dev.sandbox.owner";

// Options of a docker or gvisor sandbox.
struct DockerOptions {
  std::string workspace;  // host directory seen read-write at /workspace
  std::string image;      // "" for kDefaultDockerImage
  bool network = false;   // NetworkMode "none" unless true (then the default network)
  // Limits, enforced by the daemon; pids defaults to a bound so a fork bomb
  // stays inside.
  std::optional<std::uint64_t> memory_bytes;
  std::optional<std::uint64_t> pids = 1024;
  std::optional<double> cpus;
  // "" for the daemon's default (runc). A gvisor sandbox uses `runsc`.
  std::string runtime;
  // The static sandbox-agent executable bind-mounted read-only as the
  // entrypoint; "" for $SANDBOX_AGENT, else "sandbox-agent" beside the
  // running executable.
  std::string agent_path;
  // Where the agent's diagnostics (its stderr) go (borrowed fd); -1: nowhere.
  int agent_stderr_fd = -1;
  // The daemon: "" for $DOCKER_HOST, else unix:///var/run/docker.sock.
  std::string docker_host;
};

// Creates a container running the agent and returns the Sandbox talking to
// it: Isolation::Process, backend "docker". Close() (or the destructor)
// removes the container. Unavailable when the daemon cannot be reached,
// NotFound when the image is missing (build it with `sandbox image build`).
// Thread-safe.
Expected<std::unique_ptr<Sandbox>> NewDockerSandbox(const DockerOptions& options);

// The same under gVisor: `options.runtime` ("" for "runsc") must be a runsc
// runtime registered with the daemon; the kernel seen inside is checked to
// be gVisor's (never the host's), else the sandbox is refused with
// InsufficientIsolation. Isolation::Kernel, backend "gvisor".
Expected<std::unique_ptr<Sandbox>> NewGvisorSandbox(DockerOptions options);

// "" when the daemon answers (and, for a non-empty `runtime`, has that
// runtime registered), else why not. Cheap: one or two requests.
std::string DockerUnavailableReason(const std::string& runtime = "",
                                    const std::string& docker_host = "");

// Builds an image named `tag` ("" for kDefaultDockerImage) from the root
// filesystem directory `rootfs` through the Engine's import, labelled with
// kDockerLabel. With `rootfs` empty the root filesystem is made from the
// host's static busybox (/bin/busybox: Debian's busybox-static): /bin with
// every applet, /tmp, /workspace. `progress` (may be null) hears each step.
Status BuildDockerImage(const std::string& rootfs, const std::string& tag,
                        const std::function<void(const std::string&)>& progress = nullptr,
                        const std::string& docker_host = "");

// Removes the containers kDockerLabel marks whose host process is gone (the
// leftovers of a crashed or killed process). Returns how many were removed.
Expected<int> RemoveDockerLeftovers(const std::string& docker_host = "");

}  // namespace sandbox

#endif  // SANDBOX_DOCKER_H_
