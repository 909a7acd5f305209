// Tests of `sandbox doctor`: the JSON report, and the Docker Engine probe
// against a fake Engine on a Unix socket (a real socket, real HTTP bytes).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "backends.h"
#include "sandbox/microvm.h"
#include "test_util.h"

namespace sandbox::testing {
namespace {

using nlohmann::json;

// Answers HTTP requests on a Unix socket until destroyed: /_ping with the
// given API version, /info with the given runtimes.
class FakeEngine {
 public:
  FakeEngine(std::string path, std::string api_version, json runtimes)
      : path_(std::move(path)),
        api_version_(std::move(api_version)),
        runtimes_(std::move(runtimes)) {
    listener_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path_.c_str(), sizeof address.sun_path - 1);
    EXPECT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    EXPECT_EQ(listen(listener_, 8), 0);
    thread_ = std::thread([this] { Loop(); });
  }
  ~FakeEngine() {
    stop_.store(true);
    shutdown(listener_, SHUT_RDWR);
    thread_.join();
    close(listener_);
  }
  std::vector<std::string> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  void Loop() {
    while (!stop_.load()) {
      int client = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) return;
      std::string request;
      char buffer[4096];
      while (request.find("\r\n\r\n") == std::string::npos) {
        ssize_t got = read(client, buffer, sizeof buffer);
        if (got <= 0) break;
        request.append(buffer, static_cast<std::size_t>(got));
      }
      {
        std::lock_guard lock(mu_);
        requests_.push_back(request.substr(0, request.find("\r\n")));
      }
      std::string body = request.starts_with("GET /_ping ")
                             ? "OK"
                             : json({{"Runtimes", runtimes_}, {"ServerVersion", "fake"}}).dump();
      std::string reply = "HTTP/1.1 200 OK\r\nApi-Version: " + api_version_ +
                          "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
      (void)!write(client, reply.data(), reply.size());
      close(client);
    }
  }

  std::string path_;
  std::string api_version_;
  json runtimes_;
  int listener_ = -1;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::vector<std::string> requests_;
  std::thread thread_;
};

class DoctorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(kCliPath).empty()) GTEST_SKIP() << "the sandbox CLI is not built";
  }
  json Doctor(std::vector<std::string> env, int* exit_code) {
    CliOptions options;
    options.extra_env = std::move(env);
    CliRun run = RunCli({"doctor", "--json"}, options);
    *exit_code = run.exit_code;
    json report = json::parse(run.out, nullptr, false);
    EXPECT_FALSE(report.is_discarded()) << run.out << run.err;
    return report;
  }
  static json Backend(const json& report, std::string_view name) {
    for (const json& backend : report["backends"])
      if (backend["backend"] == name) return backend;
    ADD_FAILURE() << "no backend " << name;
    return json::object();
  }
  static json CheckNamed(const json& backend, std::string_view name) {
    for (const json& check : backend["checks"])
      if (check["name"] == name) return check;
    ADD_FAILURE() << "no check " << name << " in " << backend;
    return json::object();
  }
  TempDir dir_;
};

TEST_F(DoctorTest, JsonReportsEveryBackendAndExitsZeroWhenOneWorks) {
  int exit_code = -1;
  json report = Doctor({"DOCKER_HOST=unix://" + dir_.Join("no-such.sock")}, &exit_code);
  EXPECT_EQ(exit_code, 0);
  std::vector<std::string> names, isolations;
  for (const json& backend : report["backends"]) {
    names.push_back(backend["backend"]);
    isolations.push_back(backend["isolation"]);
    EXPECT_EQ(backend["available"], backend["reason"].is_null()) << backend;
    for (const json& check : backend["checks"]) {
      EXPECT_TRUE(check["name"].is_string() && check["ok"].is_boolean() &&
                  check["required"].is_boolean() && check["detail"].is_string())
          << check;
    }
  }
  EXPECT_EQ(names, (std::vector<std::string>{"local", "namespace", "docker", "gvisor", "microvm"}));
  EXPECT_EQ(isolations, (std::vector<std::string>{"none", "process", "process", "kernel", "vm"}));
  EXPECT_EQ(Backend(report, "local")["available"], true);
  const bool namespace_ok = FindBackend("namespace").unavailable_reason().empty();
  EXPECT_EQ(Backend(report, "namespace")["available"], namespace_ok);
  const bool microvm_ok = MicroVmUnavailableReason().empty();
  json expected_available = json::array({"local"});
  if (namespace_ok) expected_available.push_back("namespace");
  if (microvm_ok) expected_available.push_back("microvm");
  EXPECT_EQ(report["available"], expected_available);
  // Without an Engine, docker and gvisor say so in their own words.
  for (std::string_view name : {"docker", "gvisor"}) {
    std::string reason = Backend(report, name)["reason"];
    EXPECT_TRUE(reason.starts_with("the " + std::string(name) +
                                   " backend: cannot reach the Docker daemon at unix://" +
                                   dir_.Join("no-such.sock")))
        << reason;
  }
  EXPECT_EQ(Backend(report, "microvm")["available"], microvm_ok);
  // A PVM /dev/kvm (these CI machines) opens and creates VMs, but QEMU's
  // guests cannot run on it: the doctor must not call it usable.
  if (access("/sys/module/kvm_pvm", F_OK) == 0) {
    json kvm = CheckNamed(Backend(report, "microvm"), "/dev/kvm");
    EXPECT_EQ(kvm["ok"], false);
    EXPECT_TRUE(kvm["detail"].get<std::string>().starts_with(
        "/dev/kvm is PVM (kvm_pvm is loaded), on which QEMU's guests cannot run"))
        << kvm;
  }
  json engine =
      CheckNamed(Backend(report, "docker"), "Docker Engine at unix://" + dir_.Join("no-such.sock"));
  EXPECT_EQ(engine["ok"], false);
  EXPECT_NE(engine["detail"].get<std::string>().find("is dockerd running?"), std::string::npos)
      << engine;
}

TEST_F(DoctorTest, ProbesTheEngineApiVersionAndRunscRuntime) {
  const std::string socket = dir_.Join("docker.sock");
  {
    FakeEngine engine(socket, "1.40", {{"runc", json::object()}});
    int exit_code = -1;
    json report = Doctor({"DOCKER_HOST=unix://" + socket}, &exit_code);
    json docker = Backend(report, "docker");
    EXPECT_EQ(CheckNamed(docker, "Docker Engine at unix://" + socket),
              json({{"name", "Docker Engine at unix://" + socket},
                    {"ok", true},
                    {"required", true},
                    {"detail", "answers /_ping"}}));
    EXPECT_EQ(CheckNamed(docker, "Engine API >= 1.41")["detail"],
              "API 1.40: upgrade Docker Engine to 20.10 or later");
    EXPECT_EQ(CheckNamed(docker, "Engine API >= 1.41")["ok"], false);
    json runtime = CheckNamed(Backend(report, "gvisor"), "runsc registered as a Docker runtime");
    EXPECT_EQ(runtime["ok"], false);
    EXPECT_TRUE(runtime["detail"].get<std::string>().starts_with(
        "Docker has no runsc runtime: run `runsc install`"))
        << runtime;
    // The doctor's probe first (through the backends' Engine client; /info
    // unversioned, as the Engine is too old to negotiate); then the
    // backends' own probes.
    std::vector<std::string> requests = engine.requests();
    ASSERT_GE(requests.size(), 2u);
    EXPECT_EQ(std::vector<std::string>(requests.begin(), requests.begin() + 2),
              (std::vector<std::string>{"GET /_ping HTTP/1.1", "GET /info HTTP/1.1"}));
  }
  unlink(socket.c_str());
  FakeEngine engine(socket, "1.45",
                    {{"runc", json::object()}, {"runsc", {{"path", "/usr/bin/runsc"}}}});
  int exit_code = -1;
  json report = Doctor({"DOCKER_HOST=unix://" + socket}, &exit_code);
  EXPECT_EQ(CheckNamed(Backend(report, "docker"), "Engine API >= 1.41"),
            json({{"name", "Engine API >= 1.41"},
                  {"ok", true},
                  {"required", true},
                  {"detail", "API 1.45"}}));
  EXPECT_EQ(CheckNamed(Backend(report, "gvisor"), "runsc registered as a Docker runtime")["detail"],
            "Docker lists the runsc runtime");
}

TEST_F(DoctorTest, TcpAndUnsupportedDockerHostsAreExplained) {
  int exit_code = -1;
  // tcp:// is spoken (plain HTTP); nothing listens on port 1.
  json report = Doctor({"DOCKER_HOST=tcp://127.0.0.1:1"}, &exit_code);
  std::string detail =
      CheckNamed(Backend(report, "docker"), "Docker Engine at tcp://127.0.0.1:1")["detail"];
  EXPECT_TRUE(detail.starts_with("cannot reach the Docker daemon at tcp://127.0.0.1:1 ("))
      << detail;
  report = Doctor({"DOCKER_HOST=ssh://build@host"}, &exit_code);
  EXPECT_EQ(CheckNamed(Backend(report, "docker"), "Docker Engine at ssh://build@host")["detail"],
            "DOCKER_HOST 'ssh://build@host': only unix:///path/to/docker.sock and "
            "tcp://host:port are supported");
}

TEST_F(DoctorTest, UsageErrorsExit125) {
  CliRun run = RunCli({"doctor", "--jsn"});
  EXPECT_EQ(run.exit_code, 125);
  EXPECT_EQ(run.err, "sandbox: doctor takes only --json (got '--jsn')\n");
  CliRun help = RunCli({"doctor", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(help.out.starts_with("usage: sandbox doctor [--json]\n"));
}

}  // namespace
}  // namespace sandbox::testing
