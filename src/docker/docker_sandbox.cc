// NewDockerSandbox / NewGvisorSandbox: create a container whose entrypoint is
// the agent, attach to its stdio, start it, and hand the stream to
// RemoteSandbox. Also the image build and gc of the two backends.
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "docker/attach_stream.h"
#include "docker/engine.h"
#include "os/spawn.h"
#include "os/syscalls.h"
#include "sandbox/docker.h"
#include "sandbox/remote.h"

namespace sandbox {
namespace {

using docker::Engine;
using docker::Response;
using nlohmann::json;

constexpr const char* kAgentTarget = "/.sandbox/sandbox-agent";
constexpr const char* kPidLabel = "dev.sandbox.pid";
constexpr const char* kStartLabel = "dev.sandbox.start";
constexpr const char* kDefaultGvisorRuntime = "runsc";

// The start time of process `pid` in clock ticks since boot (field 22 of
// /proc/PID/stat), or "" when there is no such process. With the pid it
// names one process for good: a reused pid has another start time.
std::string ProcessStartTime(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return "";
  auto paren = text.rfind(')');
  if (paren == std::string::npos) return "";
  std::istringstream fields(text.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 22) return field;
  }
  return "";
}

// `text` as a URL query value: everything but [A-Za-z0-9._-] %-escaped.
std::string QueryEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') {
      out += c;
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", static_cast<unsigned char>(c));
      out += hex;
    }
  }
  return out;
}

// Removes a container (and its anonymous volumes), killing it if it runs.
// Gone already counts as removed.
Status RemoveContainer(const Engine& engine, const std::string& id) {
  auto response = engine.Request("DELETE", "/containers/" + id + "?force=1&v=1", nullptr,
                                 std::chrono::seconds(30));
  if (!response) return Fail(response.error());
  if (response->status == 204 || response->status == 404) return {};
  // 409: a removal is already in progress.
  if (response->status == 409) return {};
  return Fail(Error::Code::Unavailable, "removing container " + id.substr(0, 12) + ": " +
                                            Engine::ErrorMessage(*response));
}

// Removes the container unless Release()d: the rollback of a failed start.
class ContainerGuard {
 public:
  ContainerGuard(const Engine& engine, std::string id) : engine_(engine), id_(std::move(id)) {}
  ContainerGuard(const ContainerGuard&) = delete;
  ContainerGuard& operator=(const ContainerGuard&) = delete;
  ~ContainerGuard() {
    if (!id_.empty()) (void)RemoveContainer(engine_, id_);
  }
  void Release() { id_.clear(); }

 private:
  const Engine& engine_;
  std::string id_;
};

// A daemon error on create or start, as a message a person can act on.
Error DaemonError(const Response& response, const std::string& image, const std::string& runtime,
                  std::string_view step) {
  std::string message = Engine::ErrorMessage(response);
  if (response.status == 404 && message.find("image") != std::string::npos)
    return Error(Error::Code::NotFound,
                 "image '" + image + "' not found in the Docker daemon: build it with `sandbox "
                 "image build` (or pass --image NAME of an image the daemon has)");
  if (message.find("runtime") != std::string::npos && !runtime.empty())
    return Error(Error::Code::Unavailable,
                 "the Docker daemon does not know the runtime '" + runtime + "' (" + message +
                     "): register it in the daemon's config (see README: runsc runtime)");
  return Error(response.status >= 500 ? Error::Code::Unavailable : Error::Code::InvalidArgument,
               std::string(step) + ": the Docker daemon answered " +
                   std::to_string(response.status) + ": " + message);
}

struct Made {
  std::unique_ptr<Sandbox> sandbox;
  std::string runtime;  // the runtime the daemon really used
};

Expected<Made> StartContainer(const DockerOptions& options, Capabilities caps) {
  auto engine_or = Engine::Connect(options.docker_host);
  if (!engine_or) return Fail(engine_or.error());
  auto engine = std::make_shared<Engine>(std::move(*engine_or));

  std::error_code ec;
  std::string workspace =
      std::filesystem::canonical(options.workspace.empty() ? "." : options.workspace, ec).string();
  if (ec)
    return Fail(Error::Code::NotFound, "workspace '" + options.workspace + "': " + ec.message());
  std::string agent_path = std::filesystem::canonical(
      options.agent_path.empty() ? DefaultAgentPath() : options.agent_path, ec).string();
  if (ec)
    return Fail(Error::Code::Unavailable,
                "the sandbox-agent binary: " + ec.message() +
                    ": the docker backend mounts the static sandbox-agent into the container "
                    "(build it, or point SANDBOX_AGENT at it)");
  if (options.cpus && !(*options.cpus > 0 && std::isfinite(*options.cpus)))
    return Fail(Error::Code::InvalidArgument, "--cpus must be a positive number");
  const std::string image = options.image.empty() ? kDefaultDockerImage : options.image;

  json host_config = {
      {"NetworkMode", options.network ? "default" : "none"},
      {"Mounts",
       json::array({
           {{"Type", "bind"}, {"Source", agent_path}, {"Target", kAgentTarget}, {"ReadOnly", true}},
           {{"Type", "bind"}, {"Source", workspace}, {"Target", "/workspace"}, {"ReadOnly", false}},
       })},
      // The agent contains each command in a PID namespace of its own, which
      // takes CAP_SYS_ADMIN, and empties the commands' bounding set and locks
      // their securebits, which takes CAP_SETPCAP; the commands themselves
      // start with no capability at all (--drop-capabilities), no_new_privs
      // and Docker's default seccomp profile.
      {"CapDrop", json::array({"ALL"})},
      {"CapAdd", json::array({"SYS_ADMIN", "SETPCAP"})},
      {"SecurityOpt", json::array({"no-new-privileges"})},
      {"ReadonlyRootfs", true},
      {"Tmpfs", {{"/tmp", "rw,nosuid,nodev,size=268435456"}}},
      {"IpcMode", "private"},
      // The stream is the agent's protocol: never log it to disk.
      {"LogConfig", {{"Type", "none"}, {"Config", json::object()}}},
  };
  if (options.memory_bytes) {
    host_config["Memory"] = *options.memory_bytes;
    host_config["MemorySwap"] = *options.memory_bytes;  // no swap beyond the limit
  }
  if (options.pids) host_config["PidsLimit"] = *options.pids;
  if (options.cpus) host_config["NanoCpus"] = static_cast<std::int64_t>(*options.cpus * 1e9);
  if (!options.runtime.empty()) host_config["Runtime"] = options.runtime;

  json agent_args = json::array({"--root", "/workspace", "--workdir", "/workspace",
                                 "--containment", "pidns", "--drop-capabilities"});
  // gVisor's kernel has no openat2: the agent fences paths by walking them.
  if (caps.isolation == Isolation::Kernel) agent_args.push_back("--fence-without-openat2");
  const pid_t self = ::getpid();
  json create = {
      {"Image", image},
      {"Entrypoint", json::array({kAgentTarget})},
      {"Cmd", agent_args},
      {"WorkingDir", "/workspace"},
      {"User", "0:0"},
      {"Env", json::array({"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                           "HOME=/workspace"})},
      {"AttachStdin", true},
      {"AttachStdout", true},
      {"AttachStderr", true},
      {"OpenStdin", true},
      {"StdinOnce", true},
      {"Tty", false},
      {"NetworkDisabled", !options.network},
      {"Labels",
       {{kDockerLabel, caps.backend},
        {kPidLabel, std::to_string(self)},
        {kStartLabel, ProcessStartTime(self)}}},
      {"HostConfig", host_config},
  };
  auto created = engine->Request("POST", "/containers/create", create);
  if (!created) return Fail(created.error());
  if (created->status != 201) return Fail(DaemonError(*created, image, options.runtime, "create"));
  auto created_json = json::parse(created->body, nullptr, false);
  if (!created_json.is_object() || !created_json.contains("Id") || !created_json["Id"].is_string())
    return Fail(Error::Code::Unavailable, "the Docker daemon's create answer has no container Id");
  const std::string id = created_json["Id"].get<std::string>();
  ContainerGuard guard(*engine, id);

  // Attach before start, so not a byte of the agent's is missed.
  std::string leftover;
  auto attach = engine->Attach(id, leftover);
  if (!attach) return Fail(attach.error());
  auto stream = docker::AttachStream::Start(std::move(*attach), std::move(leftover),
                                            options.agent_stderr_fd);
  if (!stream) return Fail(stream.error());
  auto started = engine->Request("POST", "/containers/" + id + "/start");
  if (!started) return Fail(started.error());
  if (started->status != 204 && started->status != 304)
    return Fail(DaemonError(*started, image, options.runtime, "start"));

  auto inspected = engine->Request("GET", "/containers/" + id + "/json");
  if (!inspected) return Fail(inspected.error());
  auto info = json::parse(inspected->body, nullptr, false);
  std::string runtime = "runc";
  if (info.is_object() && info.contains("HostConfig") && info["HostConfig"].is_object() &&
      info["HostConfig"].contains("Runtime") && info["HostConfig"]["Runtime"].is_string())
    runtime = info["HostConfig"]["Runtime"].get<std::string>();

  std::shared_ptr<docker::AttachStream> attached = std::move(*stream);
  RemoteOptions remote;
  remote.read_fd = attached->TakeReadFd().release();
  remote.write_fd = attached->TakeWriteFd().release();
  caps.network = options.network;
  caps.detail = "container " + id.substr(0, 12) + ", image " + image + ", runtime " + runtime;
  remote.capabilities = caps;
  remote.on_close = [engine, id, attached]() -> Status {
    Status removed = RemoveContainer(*engine, id);
    attached->Stop();
    return removed;
  };
  auto sandbox = NewRemoteSandbox(std::move(remote));
  if (!sandbox) {
    std::string why = sandbox.error().message();
    attached->Stop();
    if (!attached->violation().empty()) why += " (" + attached->violation() + ")";
    return Fail(Error(sandbox.error().code(), "the agent in container " + id.substr(0, 12) +
                                                  " did not answer: " + why));
  }
  guard.Release();  // Close() removes the container from now on
  return Made{std::move(*sandbox), runtime};
}

std::string ReadHostKernel() {
  std::ifstream version("/proc/version");
  std::string line;
  std::getline(version, line);
  return line;
}

}  // namespace

Expected<std::unique_ptr<Sandbox>> NewDockerSandbox(const DockerOptions& options) {
  auto made = StartContainer(options, Capabilities{.isolation = Isolation::Process,
                                                   .network = false,
                                                   .backend = "docker"});
  if (!made) return Fail(made.error());
  return std::move(made->sandbox);
}

Expected<std::unique_ptr<Sandbox>> NewGvisorSandbox(DockerOptions options) {
  if (options.runtime.empty()) options.runtime = kDefaultGvisorRuntime;
  auto made = StartContainer(options, Capabilities{.isolation = Isolation::Kernel,
                                                   .network = false,
                                                   .backend = "gvisor"});
  if (!made) return Fail(made.error());
  std::unique_ptr<Sandbox> sandbox = std::move(made->sandbox);
  // Isolation::Kernel is a claim about the kernel the commands meet: check
  // it is not the host's (a runtime name that maps to runc would share it).
  auto seen = sandbox->Exec(Context::WithTimeout(std::chrono::seconds(30)),
                            Command{.path = "cat", .args = {"/proc/version"}});
  std::string why;
  if (!seen) {
    why = "cannot read the kernel version inside: " + seen.error().message();
  } else if (seen->exit_code != 0) {
    why = "`cat /proc/version` failed inside (the image needs cat): " + seen->stderr_data;
  } else if (seen->stdout_data.empty() || seen->stdout_data == ReadHostKernel() + "\n") {
    why = "the container runs on the host's kernel";
  }
  if (!why.empty()) {
    (void)sandbox->Close();
    return Fail(Error::Code::InsufficientIsolation,
                "runtime '" + made->runtime + "' does not give a kernel boundary: " + why +
                    "; register runsc as a Docker runtime (see README), never runc, for the "
                    "gvisor backend");
  }
  return sandbox;
}

std::string DockerUnavailableReason(const std::string& runtime, const std::string& docker_host) {
  auto engine = Engine::Connect(docker_host);
  if (!engine) return engine.error().message();
  if (runtime.empty()) return "";
  auto info = engine->Request("GET", "/info");
  if (!info) return info.error().message();
  auto parsed = json::parse(info->body, nullptr, false);
  if (info->status != 200 || !parsed.is_object())
    return "GET /info: the Docker daemon answered " + std::to_string(info->status);
  if (!parsed.contains("Runtimes") || !parsed["Runtimes"].is_object() ||
      !parsed["Runtimes"].contains(runtime))
    return "the Docker daemon at " + engine->host() + " has no runtime '" + runtime +
           "': register runsc in its daemon.json (\"runtimes\": {\"runsc\": {\"path\": "
           "\"/usr/bin/runsc\", \"runtimeArgs\": [\"--network=none\", \"--platform=ptrace\"]}}; "
           "see README)";
  return "";
}

namespace {

// Makes the default root filesystem in `dir`: the host's static busybox
// with a symlink per applet.
Status MakeBusyboxRootfs(const std::filesystem::path& dir) {
  const std::filesystem::path busybox = "/bin/busybox";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(busybox, ec))
    return Fail(Error::Code::NotFound,
                "/bin/busybox not found: install busybox-static (apt-get install busybox-static) "
                "or pass --rootfs DIR");
  for (const char* sub : {"bin", "tmp", "workspace", "etc", "proc", "dev", "sys"})
    std::filesystem::create_directories(dir / sub, ec);
  std::filesystem::copy_file(busybox, dir / "bin/busybox",
                             std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) return Fail(Error::Code::Internal, "copy /bin/busybox: " + ec.message());
  os::UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  auto pipe = os::MakePipe();
  if (!pipe) return Fail(pipe.error());
  auto child = os::Spawn({.exec_path = busybox.string(),
                          .argv = {"busybox", "--list"},
                          .stdin_fd = null.get(),
                          .stdout_fd = pipe->write.get(),
                          .stderr_fd = -1});
  if (!child) return Fail(child.error());
  pipe->write.reset();
  auto list = os::ReadAll(pipe->read.get(), 1 << 20);
  (void)child->Wait();
  if (!list) return Fail(list.error());
  std::istringstream names(*list);
  std::string name;
  while (std::getline(names, name)) {
    if (name.empty() || name == "busybox" || name.find('/') != std::string::npos) continue;
    std::filesystem::create_symlink("busybox", dir / "bin" / name, ec);
  }
  std::ofstream(dir / "etc/passwd") << "root:x:0:0:root:/workspace:/bin/sh\n"
                                       "nobody:x:65534:65534:nobody:/:/bin/false\n";
  std::ofstream(dir / "etc/group") << "root:x:0:\nnogroup:x:65534:\n";
  return {};
}

}  // namespace

Status BuildDockerImage(const std::string& rootfs, const std::string& tag,
                        const std::function<void(const std::string&)>& progress,
                        const std::string& docker_host) {
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  auto engine = Engine::Connect(docker_host);
  if (!engine) return Fail(engine.error());
  const std::string name = tag.empty() ? kDefaultDockerImage : tag;
  std::string repo = name, version = "latest";
  if (auto colon = name.rfind(':'); colon != std::string::npos && name.find('/', colon) == std::string::npos) {
    repo = name.substr(0, colon);
    version = name.substr(colon + 1);
  }
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
          c == '/' || c == ':'))
      return Fail(Error::Code::InvalidArgument, "image name '" + name + "': use [a-z0-9._/-] and one :tag");

  std::filesystem::path source = rootfs;
  std::filesystem::path scratch;
  if (rootfs.empty()) {
    char pattern[] = "/tmp/sandbox-rootfs-XXXXXX";
    if (!::mkdtemp(pattern)) return Fail(os::ErrnoError(errno, "mkdtemp", pattern));
    scratch = source = pattern;
    say("making a root filesystem from /bin/busybox in " + source.string());
    if (auto made = MakeBusyboxRootfs(source); !made) {
      std::error_code ec;
      std::filesystem::remove_all(scratch, ec);
      return made;
    }
  } else if (std::error_code ec; !std::filesystem::is_directory(source, ec)) {
    return Fail(Error::Code::NotADirectory, "--rootfs '" + rootfs + "' is not a directory");
  }
  struct Cleanup {
    std::filesystem::path dir;
    ~Cleanup() {
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
  } cleanup{scratch};

  // tar(1) streams the directory; the daemon imports the stream as one layer.
  say("importing " + source.string() + " as " + name);
  os::UniqueFd null(::open("/dev/null", O_RDWR | O_CLOEXEC));
  auto pipe = os::MakePipe();
  if (!pipe) return Fail(pipe.error());
  auto tar = os::Spawn({.exec_path = "/bin/tar",
                        .argv = {"tar", "--numeric-owner", "-C", source.string(), "-c", "."},
                        .env = {"PATH=/usr/bin:/bin", "LC_ALL=C"},
                        .stdin_fd = null.get(),
                        .stdout_fd = pipe->write.get(),
                        .stderr_fd = STDERR_FILENO});
  if (!tar) return Fail(Error(tar.error().code(), "run tar: " + tar.error().message()));
  pipe->write.reset();
  const int tar_out = pipe->read.get();
  std::string changes = "LABEL " + std::string(kDockerLabel) + "=image";
  auto response = engine->Upload(
      "/images/create?fromSrc=-&repo=" + QueryEscape(repo) + "&tag=" + QueryEscape(version) +
          "&changes=" + QueryEscape(changes),
      "application/x-tar",
      [tar_out](char* buffer, std::size_t size) -> long {
        for (;;) {
          long n = ::read(tar_out, buffer, size);
          if (n >= 0) return n;
          if (errno != EINTR) return -1;
        }
      },
      std::chrono::minutes(10));
  auto tar_status = tar->Wait();
  if (!response) return Fail(response.error());
  if (response->status != 200)
    return Fail(Error::Code::Unavailable, "the Docker daemon refused the import: " +
                                              Engine::ErrorMessage(*response));
  // The import answers 200 and reports failures in its progress stream.
  if (response->body.find("\"error\"") != std::string::npos)
    return Fail(Error::Code::Unavailable, "the image import failed: " + response->body.substr(0, 2000));
  if (!tar_status || !tar_status->ok())
    return Fail(Error::Code::Internal, "tar of " + source.string() + " failed");
  say("built " + name);
  return {};
}

Expected<int> RemoveDockerLeftovers(const std::string& docker_host) {
  auto engine = Engine::Connect(docker_host);
  if (!engine) return Fail(engine.error());
  std::string filters = json{{"label", json::array({kDockerLabel})}}.dump();
  auto listed = engine->Request("GET", "/containers/json?all=1&filters=" + QueryEscape(filters));
  if (!listed) return Fail(listed.error());
  auto containers = json::parse(listed->body, nullptr, false);
  if (listed->status != 200 || !containers.is_array())
    return Fail(Error::Code::Unavailable, "listing containers: " + Engine::ErrorMessage(*listed));
  int removed = 0;
  for (const json& container : containers) {
    if (!container.is_object() || !container.contains("Id") || !container["Id"].is_string()) continue;
    std::string pid_text, start;
    if (container.contains("Labels") && container["Labels"].is_object()) {
      const json& labels = container["Labels"];
      if (labels.contains(kPidLabel) && labels[kPidLabel].is_string())
        pid_text = labels[kPidLabel].get<std::string>();
      if (labels.contains(kStartLabel) && labels[kStartLabel].is_string())
        start = labels[kStartLabel].get<std::string>();
    }
    pid_t pid = static_cast<pid_t>(std::atol(pid_text.c_str()));
    if (pid > 0 && !start.empty() && ProcessStartTime(pid) == start) continue;  // owner alive
    if (RemoveContainer(*engine, container["Id"].get<std::string>())) ++removed;
  }
  return removed;
}

}  // namespace sandbox
