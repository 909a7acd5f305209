// The Firecracker driver against recorded expectations of Firecracker's
// documented API (no Firecracker runs here): the exact requests that boot a
// guest, the HTTP exchange over the API socket against a fake server, and
// the vsock proxy's CONNECT handshake against a fake proxy.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "microvm/firecracker.h"
#include "os/unique_fd.h"
#include "test_util.h"

namespace sandbox::vm {
namespace {

using Json = nlohmann::json;
using sandbox::testing::TempDir;

VmSpec DriveSpec() {
  VmSpec spec;
  spec.kernel = "/images/vmlinux";
  spec.initramfs = "/images/initramfs.cpio";
  spec.vcpus = 2;
  spec.memory_mib = 256;
  spec.drives = {{.id = "rootfs", .host_path = "/images/root.ext4", .read_only = true, .is_root = true},
                 {.id = "workspace", .host_path = "/images/ws.ext4", .read_only = false}};
  return spec;
}

TEST(MicroVmFirecracker, RequestsFollowTheDocumentedApi) {
  auto requests = FirecrackerApiRequests(DriveSpec(), "/run/vm/vsock.sock");
  ASSERT_TRUE(requests) << requests.error().ToString();
  ASSERT_EQ(requests->size(), 6u);
  const auto& r = *requests;
  EXPECT_EQ(r[0].method, "PUT");
  EXPECT_EQ(r[0].path, "/machine-config");
  EXPECT_EQ(Json::parse(r[0].body), Json::parse(R"({"vcpu_count":2,"mem_size_mib":256,"smt":false})"));
  EXPECT_EQ(r[1].path, "/boot-source");
  Json boot = Json::parse(r[1].body);
  EXPECT_EQ(boot["kernel_image_path"], "/images/vmlinux");
  EXPECT_EQ(boot["initrd_path"], "/images/initramfs.cpio");
  std::string args = boot["boot_args"];
  EXPECT_NE(args.find("console=ttyS0"), std::string::npos) << args;
  EXPECT_NE(args.find(" pci=off reboot=k sandbox.vsock=1024 "), std::string::npos) << args;
  EXPECT_TRUE(args.ends_with(" --vm-guest")) << args;
  EXPECT_EQ(boot.size(), 3u);
  EXPECT_EQ(r[2].path, "/drives/rootfs");
  EXPECT_EQ(Json::parse(r[2].body), Json::parse(R"({"drive_id":"rootfs","path_on_host":"/images/root.ext4",
                                                    "is_root_device":true,"is_read_only":true})"));
  EXPECT_EQ(r[3].path, "/drives/workspace");
  EXPECT_EQ(Json::parse(r[3].body), Json::parse(R"({"drive_id":"workspace","path_on_host":"/images/ws.ext4",
                                                    "is_root_device":false,"is_read_only":false})"));
  EXPECT_EQ(r[4].path, "/vsock");
  EXPECT_EQ(Json::parse(r[4].body), Json::parse(R"({"guest_cid":3,"uds_path":"/run/vm/vsock.sock"})"));
  EXPECT_EQ(r[5].path, "/actions");
  EXPECT_EQ(Json::parse(r[5].body), Json::parse(R"({"action_type":"InstanceStart"})"));
}

TEST(MicroVmFirecracker, RefusesSharedFoldersAndNetwork) {
  VmSpec spec = DriveSpec();
  spec.shares = {{.tag = "usr", .host_path = "/usr", .guest_path = "/usr"}};
  auto shares = FirecrackerApiRequests(spec, "/v.sock");
  ASSERT_FALSE(shares);
  EXPECT_EQ(shares.error().code(), Error::Code::Unsupported);
  spec = DriveSpec();
  spec.network = true;
  auto network = FirecrackerApiRequests(spec, "/v.sock");
  ASSERT_FALSE(network);
  EXPECT_EQ(network.error().code(), Error::Code::Unsupported);
}

// A Unix socket server that answers each connection with `answer` after
// reading one request, recording what it read.
class FakeServer {
 public:
  FakeServer(std::string path, std::function<std::string(const std::string&)> answer)
      : path_(std::move(path)), answer_(std::move(answer)) {
    listener_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path_.c_str(), sizeof address.sun_path - 1);
    EXPECT_EQ(::bind(listener_.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    EXPECT_EQ(::listen(listener_.get(), 8), 0);
    thread_ = std::thread([this] {
      for (;;) {
        os::UniqueFd client(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (!client) return;
        char buffer[8192];
        ssize_t n = ::read(client.get(), buffer, sizeof buffer);
        if (n <= 0) continue;
        std::string request(buffer, static_cast<std::size_t>(n));
        received_.push_back(request);
        std::string reply = answer_(request);
        (void)!::write(client.get(), reply.data(), reply.size());
        if (keep_open_) kept_.push_back(std::move(client));
      }
    });
  }
  ~FakeServer() {
    ::shutdown(listener_.get(), SHUT_RDWR);
    thread_.join();
  }
  std::vector<std::string> received_;
  std::vector<os::UniqueFd> kept_;
  bool keep_open_ = false;

 private:
  std::string path_;
  std::function<std::string(const std::string&)> answer_;
  os::UniqueFd listener_;
  std::thread thread_;
};

TEST(MicroVmFirecracker, SendsHttpOverTheApiSocketAndReportsFaults) {
  TempDir dir;
  std::string socket = dir.Join("api.sock");
  FakeServer server(socket, [](const std::string& request) -> std::string {
    if (request.find("PUT /boot-source ") == 0)
      return "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n"
             "{\"fault_message\":\"kernel image missing\"}";
    return "HTTP/1.1 204 No Content\r\n\r\n";
  });
  ApiRequest start{"PUT", "/actions", R"({"action_type":"InstanceStart"})"};
  ASSERT_TRUE(SendApiRequest(socket, start));
  auto refused = SendApiRequest(socket, ApiRequest{"PUT", "/boot-source", "{}"});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Error::Code::Unavailable);
  EXPECT_EQ(refused.error().message(),
            "firecracker PUT /boot-source: HTTP 400: kernel image missing");
  ASSERT_GE(server.received_.size(), 1u);
  EXPECT_EQ(server.received_[0],
            "PUT /actions HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n"
            "Content-Type: application/json\r\nContent-Length: 31\r\n\r\n"
            R"({"action_type":"InstanceStart"})");
}

TEST(MicroVmFirecracker, ConnectsThroughTheVsockProxy) {
  TempDir dir;
  std::string socket = dir.Join("vsock.sock");
  FakeServer proxy(socket, [](const std::string& request) -> std::string {
    return request == "CONNECT 1024\n" ? "OK 1073741824\nagent-bytes" : "";
  });
  proxy.keep_open_ = true;
  auto stream = ConnectVsock(socket, 1024, std::chrono::steady_clock::now() + std::chrono::seconds(5));
  ASSERT_TRUE(stream) << stream.error().ToString();
  // What follows the OK line is the agent's, left unread for the wire.
  char buffer[32] = {};
  ssize_t n = ::read(stream->get(), buffer, sizeof buffer);
  EXPECT_EQ(std::string(buffer, n > 0 ? static_cast<std::size_t>(n) : 0), "agent-bytes");
}

TEST(MicroVmFirecracker, VsockProxyRefusalIsUnavailableByTheDeadline) {
  TempDir dir;
  std::string socket = dir.Join("vsock.sock");
  FakeServer proxy(socket, [](const std::string&) -> std::string { return ""; });  // hangs up
  auto started = std::chrono::steady_clock::now();
  auto stream = ConnectVsock(socket, 1024, started + std::chrono::milliseconds(300));
  ASSERT_FALSE(stream);
  EXPECT_EQ(stream.error().code(), Error::Code::Unavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(3));
}

}  // namespace
}  // namespace sandbox::vm
