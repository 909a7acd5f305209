#include "doctor.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "json/result_json.h"
#include "docker/engine.h"
#include "os/host_probe.h"
#include "os/syscalls.h"
#include "os/tree.h"
#include "run.h"
#include "sandbox/docker.h"
#include "sandbox/microvm.h"
#include "sandbox/namespace.h"

namespace sandbox::cli {
namespace {

// One piece a backend needs, as found on this machine.
struct Check {
  std::string name;
  bool ok = false;
  bool required = false;  // the backend cannot run without it
  std::string detail;     // what was found, or why not and what to do
};

// Whether one backend works here, and why (not).
struct BackendReport {
  std::string name;
  Isolation isolation = Isolation::None;
  std::vector<Check> checks;

  bool available() const {
    for (const Check& check : checks)
      if (check.required && !check.ok) return false;
    return true;
  }
  // The first failed required check, as "name: detail"; "" when available.
  std::string reason() const {
    for (const Check& check : checks)
      if (check.required && !check.ok) return check.name + ": " + check.detail;
    return "";
  }
};

void Print(std::string_view text) { WriteAll(STDOUT_FILENO, text); }

std::optional<std::string> FindInPath(std::string_view program) {
  const char* path = getenv("PATH");
  std::string dirs = path && *path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  std::istringstream parts(dirs);
  for (std::string dir; std::getline(parts, dir, ':');) {
    if (dir.empty()) continue;
    std::string candidate = dir + "/" + std::string(program);
    struct stat info;
    if (stat(candidate.c_str(), &info) == 0 && S_ISREG(info.st_mode) && access(candidate.c_str(), X_OK) == 0)
      return candidate;
  }
  return std::nullopt;
}

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// ---- the Docker Engine, through the docker backend's client ---------------

struct EngineProbe {
  std::string where;               // "unix:///var/run/docker.sock"
  bool reachable = false;          // /_ping answered 200
  std::string api_version;         // the Api-Version header of /_ping
  bool api_ok = false;             // >= 1.41
  std::string error;               // why not reachable
  std::optional<nlohmann::json> info;  // GET /info, when reachable
};

EngineProbe ProbeEngine() {
  EngineProbe probe;
  constexpr auto kTimeout = std::chrono::milliseconds(2000);
  auto engine = docker::Engine::Locate();
  if (!engine) {
    const char* host = getenv("DOCKER_HOST");
    probe.where = host ? host : "";
    probe.error = engine.error().message();
    return probe;
  }
  probe.where = engine->host();
  auto version = engine->Ping(kTimeout);
  if (!version) {
    probe.error = version.error().message();
    return probe;
  }
  probe.reachable = true;
  probe.api_version = *version;
  probe.api_ok = docker::CompareApiVersions(*version, docker::kMinApiVersion) >= 0;
  // Unversioned, so an Engine too old for the backends still says what it has.
  auto info = engine->Request("GET", "/info", nullptr, kTimeout, 4 << 20);
  if (info && info->status == 200) {
    auto parsed = nlohmann::json::parse(info->body, nullptr, false);
    if (!parsed.is_discarded() && parsed.is_object()) probe.info = std::move(parsed);
  }
  return probe;
}

// The backend's own verdict (its constructor's probe), first among its checks.
Check BackendVerdict(std::string_view backend, const std::string& reason, std::string ok_detail) {
  return {"the " + std::string(backend) + " backend", reason.empty(), true,
          reason.empty() ? std::move(ok_detail) : reason};
}

void AddEngineChecks(const EngineProbe& engine, std::vector<Check>& checks) {
  checks.push_back({"Docker Engine at " + engine.where, engine.reachable, true,
                    engine.reachable ? "answers /_ping" : engine.error});
  if (!engine.reachable) return;
  checks.push_back({"Engine API >= 1.41", engine.api_ok, true,
                    engine.api_version.empty()
                        ? "the Engine did not say its API version"
                        : "API " + engine.api_version +
                              (engine.api_ok ? "" : ": upgrade Docker Engine to 20.10 or later")});
}

// ---- the reports -----------------------------------------------------------

BackendReport LocalReport() {
  BackendReport report{.name = "local", .isolation = Isolation::None, .checks = {}};
  const bool openat2 = os::HasOpenat2();
  report.checks.push_back({"openat2 (Linux >= 5.6)", openat2, true,
                           openat2 ? "the path fence resolves in the kernel"
                                   : "this kernel has no openat2: upgrade to Linux 5.6 or later"});
  auto tree = os::ChooseTreeSource();
  report.checks.push_back(
      {"process-tree containment", static_cast<bool>(tree), true,
       !tree ? tree.error().message()
       : tree->containment == os::Containment::kCgroup
           ? "a cgroup v2 per command under " + tree->cgroups->path()
           : std::string("a PID namespace per command (no writable cgroup v2 here)")});
  report.checks.push_back({"--memory/--pids/--cpus limits", false, false,
                           "host subprocesses get no resource limits; asking for one is an error"});
  return report;
}

std::string CgroupLayout() {
  std::string v2 = ReadSmallFile("/sys/fs/cgroup/cgroup.controllers");
  struct stat info;
  if (stat("/sys/fs/cgroup/cgroup.controllers", &info) == 0)
    return "v2 (unified) at /sys/fs/cgroup, controllers: " + (v2.empty() ? "none" : v2);
  if (stat("/sys/fs/cgroup/unified/cgroup.controllers", &info) == 0) {
    std::string hybrid = ReadSmallFile("/sys/fs/cgroup/unified/cgroup.controllers");
    return "hybrid: v1 controllers under /sys/fs/cgroup/<controller>, v2 at "
           "/sys/fs/cgroup/unified with controllers: " +
           (hybrid.empty() ? "none" : hybrid);
  }
  return "v1 only (controllers under /sys/fs/cgroup/<controller>)";
}

BackendReport NamespaceReport() {
  BackendReport report{.name = "namespace", .isolation = Isolation::Process, .checks = {}};
  utsname kernel{};
  uname(&kernel);
  report.checks.push_back({"kernel", true, true,
                           std::string("Linux ") + kernel.release +
                               " (user namespaces, mount_setattr and Landlock are probed below)"});
  for (const NamespaceCheck& check : ProbeNamespaceBackend())
    report.checks.push_back({check.name, check.ok, check.required, check.detail});
  report.checks.push_back({"cgroup hierarchy", true, false, CgroupLayout()});
  return report;
}

BackendReport DockerReport(const EngineProbe& engine) {
  BackendReport report{.name = "docker", .isolation = Isolation::Process, .checks = {}};
  report.checks.push_back(BackendVerdict("docker", DockerUnavailableReason(),
                                         "the Engine answers; run `sandbox image build` once "
                                         "for the default image"));
  AddEngineChecks(engine, report.checks);
  return report;
}

BackendReport GvisorReport(const EngineProbe& engine) {
  BackendReport report{.name = "gvisor", .isolation = Isolation::Kernel, .checks = {}};
  report.checks.push_back(BackendVerdict(
      "gvisor", DockerUnavailableReason("runsc"),
      "the Engine has the runsc runtime (the kernel inside is checked on every start)"));
  AddEngineChecks(engine, report.checks);
  auto runsc = FindInPath("runsc");
  report.checks.push_back({"runsc", runsc.has_value(), true,
                           runsc ? *runsc
                                 : "not found in PATH: install gVisor "
                                   "(https://gvisor.dev/docs/user_guide/install/)"});
  bool registered = false;
  std::string detail;
  if (!engine.reachable) {
    detail = "cannot ask: the Docker Engine is not reachable";
  } else if (!engine.info) {
    detail = "cannot ask: GET /info gave no JSON";
  } else {
    auto runtimes = engine.info->find("Runtimes");
    registered = runtimes != engine.info->end() && runtimes->is_object() && runtimes->contains("runsc");
    detail = registered ? "Docker lists the runsc runtime"
                        : "Docker has no runsc runtime: run `runsc install` (or add "
                          "\"runtimes\": {\"runsc\": {\"path\": \"" +
                              runsc.value_or("/usr/bin/runsc") +
                              "\"}} to /etc/docker/daemon.json) and restart dockerd";
  }
  report.checks.push_back({"runsc registered as a Docker runtime", registered, true, detail});
  return report;
}

BackendReport MicrovmReport() {
  BackendReport report{.name = "microvm", .isolation = Isolation::VM, .checks = {}};
  report.checks.push_back(BackendVerdict(
      "microvm", MicroVmUnavailableReason(),
      "QEMU is here; the guest image is built on first use (or `sandbox image build --vm`)"));
  os::KvmProbe kvm = os::ProbeKvm();
  auto firecracker = FindInPath("firecracker");
  auto qemu = FindInPath("qemu-system-x86_64");
  report.checks.push_back({"/dev/kvm", kvm.usable, false,
                           kvm.detail + (kvm.usable ? "" : "; without KVM only qemu's much slower software emulation can run")});
  report.checks.push_back({"firecracker (needs /dev/kvm)", firecracker.has_value() && kvm.usable, false,
                           firecracker ? *firecracker + (kvm.usable ? "" : ", but /dev/kvm is not usable")
                                       : "not found in PATH: install it from "
                                         "https://github.com/firecracker-microvm/firecracker/releases"});
  report.checks.push_back({"qemu-system-x86_64", qemu.has_value(), false,
                           qemu ? *qemu + (kvm.usable ? " (with KVM)" : " (software emulation)")
                                : "not found in PATH: apt-get install qemu-system-x86"});
  const bool vmm = (firecracker && kvm.usable) || qemu;
  report.checks.push_back({"a VMM", vmm, true,
                           vmm ? (firecracker && kvm.usable ? "firecracker" : "qemu")
                               : "neither firecracker with /dev/kvm nor qemu-system-x86_64 is here"});
  struct stat info;
  const bool vsock = stat("/dev/vhost-vsock", &info) == 0;
  report.checks.push_back({"/dev/vhost-vsock", vsock, false,
                           vsock ? "present (the agent can listen on vsock)"
                                 : "missing (modprobe vhost_vsock); the agent can use a "
                                   "virtio-serial port instead"});
  return report;
}

nlohmann::ordered_json ReportJson(const std::vector<BackendReport>& reports) {
  nlohmann::ordered_json backends = nlohmann::ordered_json::array();
  nlohmann::ordered_json available = nlohmann::ordered_json::array();
  for (const BackendReport& report : reports) {
    nlohmann::ordered_json checks = nlohmann::ordered_json::array();
    for (const Check& check : report.checks)
      checks.push_back({{"name", check.name},
                        {"ok", check.ok},
                        {"required", check.required},
                        {"detail", check.detail}});
    nlohmann::ordered_json entry = {{"backend", report.name},
                                    {"isolation", ToString(report.isolation)},
                                    {"available", report.available()}};
    entry["reason"] = report.available() ? nlohmann::ordered_json(nullptr)
                                         : nlohmann::ordered_json(report.reason());
    entry["checks"] = std::move(checks);
    backends.push_back(std::move(entry));
    if (report.available()) available.push_back(report.name);
  }
  return {{"backends", std::move(backends)}, {"available", std::move(available)}};
}

void PrintText(const std::vector<BackendReport>& reports) {
  for (const BackendReport& report : reports) {
    std::string head = report.name + " (isolation " + std::string(ToString(report.isolation)) + "): ";
    if (report.available())
      head += report.name == "namespace" ? "available (the default backend)" : "available";
    else
      head += "unavailable";
    Print(head + "\n");
    for (const Check& check : report.checks)
      Print(std::string("  ") + (check.ok ? "ok  " : "no  ") + check.name +
            (check.required ? "" : " (optional)") + ": " + check.detail + "\n");
  }
}

constexpr std::string_view kDoctorUsage = R"(usage: sandbox doctor [--json]

Says, for every backend, whether it can run on this machine, the isolation it
gives, and for each piece it needs what was found or why not and what to
install or change. Exits 0 when at least one backend can run here, 1 when
none can.

  --json   print one JSON object:
           {"backends":[{"backend":"local","isolation":"none","available":true,
             "reason":null,"checks":[{"name":...,"ok":true,"required":true,
             "detail":...}]},...],"available":["local",...]}
)";

}  // namespace

int DoctorCommand(std::span<const std::string> args) {
  bool json = false;
  for (const std::string& arg : args) {
    if (arg == "-h" || arg == "--help") {
      Print(kDoctorUsage);
      return 0;
    }
    if (arg != "--json") {
      PrintError("doctor takes only --json (got '" + arg + "')");
      return kExitSandboxFailed;
    }
    json = true;
  }
  const EngineProbe engine = ProbeEngine();
  const std::vector<BackendReport> reports = {LocalReport(), NamespaceReport(), DockerReport(engine),
                                              GvisorReport(engine), MicrovmReport()};
  if (json)
    Print(sandbox::json::Dump(ReportJson(reports)) + "\n");
  else
    PrintText(reports);
  for (const BackendReport& report : reports)
    if (report.available()) return 0;
  return 1;
}

int GcCommand(std::span<const std::string> args) {
  if (!args.empty() && args.front() != "-h" && args.front() != "--help") {
    PrintError("gc takes no arguments (got '" + args.front() + "')");
    return kExitSandboxFailed;
  }
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
