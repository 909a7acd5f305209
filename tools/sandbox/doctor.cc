#include "doctor.h"

#include <unistd.h>

#include <string>
#include <string_view>
#include <vector>

#include "os/tree.h"
#include "run.h"
#include "sandbox/docker.h"
#include "sandbox/namespace.h"

namespace sandbox::cli {
namespace {

void Print(std::string_view text) { WriteAll(STDOUT_FILENO, text); }

void Line(bool ok, std::string_view what, std::string_view detail) {
  Print(std::string("  ") + (ok ? "ok  " : "no  ") + std::string(what) + ": " +
        std::string(detail) + "\n");
}

bool RejectArguments(std::string_view command, std::span<const std::string> args) {
  if (args.empty()) return false;
  if (args.front() == "-h" || args.front() == "--help") return false;
  PrintError(std::string(command) + " takes no arguments (got '" + args.front() + "')");
  return true;
}

}  // namespace

int DoctorCommand(std::span<const std::string> args) {
  if (RejectArguments("doctor", args)) return kExitSandboxFailed;
  if (!args.empty()) {
    Print("usage: sandbox doctor\n\nSays which backends can run on this machine and, for "
          "each, what it needs and what was found.\n");
    return 0;
  }

  // local: the path fence needs openat2; process trees need a cgroup or a
  // PID namespace.
  auto tree = os::ChooseTreeSource();
  Print(std::string("local (isolation none): ") + (tree ? "available" : "unavailable") + "\n");
  if (tree) {
    Line(true, "process-tree containment",
         tree->containment == os::Containment::kCgroup
             ? "a cgroup v2 per command under " + tree->cgroups->path()
             : "a PID namespace per command (no writable cgroup v2 here)");
  } else {
    Line(false, "process-tree containment", tree.error().message());
  }
  Line(false, "--memory/--pids/--cpus limits (optional)",
       "host subprocesses get no resource limits; asking for one is an error");

  std::vector<NamespaceCheck> checks = ProbeNamespaceBackend();
  bool namespace_ok = true;
  for (const NamespaceCheck& check : checks)
    if (check.required && !check.ok) namespace_ok = false;
  Print(std::string("namespace (isolation process): ") +
        (namespace_ok ? "available (the default backend)" : "unavailable") + "\n");
  for (const NamespaceCheck& check : checks)
    Line(check.ok, check.name + (check.required ? "" : " (optional)"), check.detail);

  std::string docker_reason = DockerUnavailableReason();
  Print(std::string("docker (isolation process): ") +
        (docker_reason.empty() ? "available" : "unavailable") + "\n");
  Line(docker_reason.empty(), "Docker Engine (API >= 1.41) at DOCKER_HOST or /var/run/docker.sock",
       docker_reason.empty() ? "answers; run `sandbox image build` once for the default image"
                             : docker_reason);
  std::string gvisor_reason = docker_reason.empty() ? DockerUnavailableReason("runsc") : docker_reason;
  Print(std::string("gvisor (isolation kernel): ") +
        (gvisor_reason.empty() ? "available" : "unavailable") + "\n");
  Line(gvisor_reason.empty(), "runsc registered as a Docker runtime",
       gvisor_reason.empty() ? "runtime runsc (the kernel inside is checked on every start)"
                             : gvisor_reason);
  Print("microvm (isolation vm): not in this build yet\n");
  return namespace_ok ? 0 : 1;
}

int GcCommand(std::span<const std::string> args) {
  if (RejectArguments("gc", args)) return kExitSandboxFailed;
  if (!args.empty()) {
    Print("usage: sandbox gc\n\nRemoves what sandboxes of crashed processes left behind "
          "(their cgroups).\n");
    return 0;
  }
  int removed = RemoveNamespaceLeftovers();
  // Creating the local backend's cgroup pool sweeps the pools of dead
  // processes.
  (void)os::ChooseTreeSource();
  Print("removed " + std::to_string(removed) + " leftover cgroup" + (removed == 1 ? "" : "s") +
        " of namespace sandboxes\n");
  // Containers of the docker and gvisor backends whose host process died;
  // no daemon here means none to remove.
  if (DockerUnavailableReason().empty()) {
    auto containers = RemoveDockerLeftovers();
    if (!containers) {
      PrintError("removing leftover containers: " + containers.error().message());
      return kExitSandboxFailed;
    }
    Print("removed " + std::to_string(*containers) + " leftover container" +
          (*containers == 1 ? "" : "s") + " of docker and gvisor sandboxes\n");
  }
  return 0;
}

}  // namespace sandbox::cli
