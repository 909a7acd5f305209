#include "microvm/firecracker.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <algorithm>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "microvm/vmm_process.h"
#include "microvm/guest_layout.h"
#include "microvm/host_tools.h"
#include "os/syscalls.h"

namespace sandbox::vm {
namespace {

using Json = nlohmann::json;
constexpr unsigned kGuestCid = 3;  // the lowest CID a guest may have

Expected<os::UniqueFd> ConnectUnix(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path)
    return Fail(Error::Code::InvalidArgument, "socket path too long: " + path);
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  os::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return Fail(os::ErrnoError(errno, "socket"));
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
    return Fail(os::ErrnoError(errno, "connect", path));
  return fd;
}

// Reads until `done` says the bytes so far are complete, at most `max`
// bytes, for at most `timeout`, `chunk` bytes per read (1: nothing past
// what `done` accepts is consumed).
Expected<std::string> ReadUntil(int fd, std::size_t max, std::chrono::milliseconds timeout,
                                const std::function<bool(const std::string&)>& done,
                                std::size_t chunk = 4096) {
  std::string data;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done(data)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Fail(Error::Code::Unavailable, "no answer in time");
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buffer[4096];
    ssize_t n = ::read(fd, buffer, std::min({sizeof buffer, chunk, max + 1 - data.size()}));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return data;  // end of stream: the caller judges what arrived
    data.append(buffer, static_cast<std::size_t>(n));
    if (data.size() > max) return Fail(Error::Code::TooLarge, "answer longer than " + std::to_string(max));
  }
  return data;
}

bool HttpResponseComplete(const std::string& data) {
  std::size_t end = data.find("\r\n\r\n");
  if (end == std::string::npos) return false;
  std::size_t length = 0;
  std::string headers = data.substr(0, end);
  for (char& c : headers) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (auto at = headers.find("content-length:"); at != std::string::npos)
    length = std::strtoul(headers.c_str() + at + 15, nullptr, 10);
  return data.size() >= end + 4 + length;
}

}  // namespace

Expected<std::vector<ApiRequest>> FirecrackerApiRequests(const VmSpec& spec,
                                                         const std::string& vsock_path) {
  if (!spec.shares.empty())
    return Fail(Error::Code::Unsupported,
                "Firecracker has no shared folders: give the guest its root and workspace as "
                "drives");
  if (spec.network)
    return Fail(Error::Code::Unsupported, "the Firecracker driver has no guest networking yet");
  std::vector<ApiRequest> requests;
  requests.push_back({"PUT", "/machine-config",
                      Json{{"vcpu_count", spec.vcpus}, {"mem_size_mib", spec.memory_mib}, {"smt", false}}.dump()});
  std::string boot_args = GuestCommandLine(
      spec, "pci=off reboot=k " + std::string(kVsockKey) + std::to_string(kAgentVsockPort));
  Json boot{{"kernel_image_path", spec.kernel}, {"boot_args", boot_args}};
  if (!spec.initramfs.empty()) boot["initrd_path"] = spec.initramfs;
  requests.push_back({"PUT", "/boot-source", boot.dump()});
  for (const auto& drive : spec.drives)
    requests.push_back({"PUT", "/drives/" + drive.id,
                        Json{{"drive_id", drive.id},
                             {"path_on_host", drive.host_path},
                             {"is_root_device", drive.is_root},
                             {"is_read_only", drive.read_only}}
                            .dump()});
  requests.push_back({"PUT", "/vsock", Json{{"guest_cid", kGuestCid}, {"uds_path", vsock_path}}.dump()});
  requests.push_back({"PUT", "/actions", Json{{"action_type", "InstanceStart"}}.dump()});
  return requests;
}

Status SendApiRequest(const std::string& api_socket, const ApiRequest& request) {
  auto fd = ConnectUnix(api_socket);
  if (!fd) return Fail(fd.error());
  std::string message = request.method + " " + request.path +
                        " HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n"
                        "Content-Type: application/json\r\nContent-Length: " +
                        std::to_string(request.body.size()) + "\r\n\r\n" + request.body;
  SANDBOX_RETURN_IF_ERROR(os::WriteAllNoSigpipe(fd->get(), message));
  auto answer = ReadUntil(fd->get(), 64 * 1024, std::chrono::seconds(10), HttpResponseComplete);
  if (!answer) return Fail(answer.error());
  // "HTTP/1.1 204 No Content"
  int status = 0;
  if (answer->starts_with("HTTP/1.") && answer->size() > 12) status = std::atoi(answer->c_str() + 9);
  if (status >= 200 && status < 300) return {};
  std::string fault = "no answer";
  if (auto body = answer->find("\r\n\r\n"); body != std::string::npos) {
    Json parsed = Json::parse(answer->substr(body + 4), nullptr, false);
    if (parsed.is_object() && parsed.contains("fault_message") && parsed["fault_message"].is_string())
      fault = parsed["fault_message"].get<std::string>();
  }
  return Fail(Error::Code::Unavailable, "firecracker " + request.method + " " + request.path +
                                            ": HTTP " + std::to_string(status) + ": " + fault);
}

Expected<os::UniqueFd> ConnectVsock(const std::string& uds_path, unsigned port,
                                    std::chrono::steady_clock::time_point deadline) {
  std::string last_error = "not tried";
  while (std::chrono::steady_clock::now() < deadline) {
    auto fd = ConnectUnix(uds_path);
    if (fd) {
      std::string request = "CONNECT " + std::to_string(port) + "\n";
      if (auto sent = os::WriteAllNoSigpipe(fd->get(), request); sent) {
        // Read the answer line byte by byte: what follows belongs to the agent.
        auto line = ReadUntil(
            fd->get(), 64, std::chrono::seconds(2),
            [](const std::string& data) { return !data.empty() && data.back() == '\n'; }, 1);
        if (line && line->starts_with("OK ")) return std::move(*fd);
        last_error = line ? "the proxy answered '" + *line + "'" : line.error().message();
      } else {
        last_error = sent.error().message();
      }
    } else {
      last_error = fd.error().message();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return Fail(Error::Code::Unavailable,
              "cannot reach the guest's vsock port " + std::to_string(port) + ": " + last_error);
}

namespace {

class FirecrackerDriver final : public VmmDriver {
 public:
  explicit FirecrackerDriver(std::string binary) : binary_(std::move(binary)) {}
  std::string_view name() const override { return "firecracker"; }

  Expected<std::unique_ptr<RunningVm>> Boot(const VmSpec& spec) override {
    std::string api_socket = spec.run_dir + "/api.sock";
    std::string vsock_path = spec.run_dir + "/vsock.sock";
    auto requests = FirecrackerApiRequests(spec, vsock_path);
    if (!requests) return Fail(requests.error());
    if (spec.run_dir.empty())
      return Fail(Error::Code::InvalidArgument, "the Firecracker driver needs a run directory");
    auto binary = FindTool(binary_.empty() ? "firecracker" : binary_,
                           "firecracker (not in Debian: a release from "
                           "github.com/firecracker-microvm/firecracker)");
    if (!binary) return Fail(binary.error());
    auto launched = VmmProcess::Launch(*binary, {"--api-sock", api_socket}, -1, spec);
    if (!launched) return Fail(launched.error());
    std::unique_ptr<VmmProcess> vm = std::move(*launched);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (::access(api_socket.c_str(), F_OK) != 0) {
      if (std::chrono::steady_clock::now() > deadline)
        return Fail(Error::Code::Unavailable, "firecracker did not open its API socket; console:\n" +
                                                  vm->ConsoleTail());
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    for (const auto& request : *requests) SANDBOX_RETURN_IF_ERROR(SendApiRequest(api_socket, request));
    auto agent = ConnectVsock(vsock_path, kAgentVsockPort,
                              std::chrono::steady_clock::now() + std::chrono::seconds(30));
    if (!agent) return Fail(agent.error());
    vm->SetAgentStream(std::move(*agent));
    return std::unique_ptr<RunningVm>(std::move(vm));
  }

 private:
  std::string binary_;
};

}  // namespace

std::unique_ptr<VmmDriver> NewFirecrackerDriver(std::string binary) {
  return std::make_unique<FirecrackerDriver>(std::move(binary));
}

}  // namespace sandbox::vm
