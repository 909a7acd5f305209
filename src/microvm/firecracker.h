// The Firecracker driver's pieces, exposed for tests: the API requests that
// configure and start a guest, one HTTP/1.1 exchange over the API's Unix
// socket, and the vsock proxy's `CONNECT` handshake.
//
// Written against Firecracker's documented API (docs/api_requests,
// src/firecracker/swagger/firecracker.yaml, docs/vsock.md); it has NOT been
// run against a real Firecracker (none can run on the project's machines).
#ifndef SANDBOX_MICROVM_FIRECRACKER_H_
#define SANDBOX_MICROVM_FIRECRACKER_H_

#include <chrono>
#include <string>
#include <vector>

#include "microvm/vmm.h"
#include "os/unique_fd.h"
#include "sandbox/error.h"

namespace sandbox::vm {

// One request to the Firecracker API.
struct ApiRequest {
  std::string method;  // "PUT"
  std::string path;    // "/boot-source"
  std::string body;    // JSON
  friend bool operator==(const ApiRequest&, const ApiRequest&) = default;
};

// The requests that boot `spec` with its agent reachable through the vsock
// proxy at `vsock_path`, in order: machine config, boot source, drives,
// vsock, InstanceStart. Unsupported when `spec` has shares (Firecracker has
// no shared folders) or asks for a network.
Expected<std::vector<ApiRequest>> FirecrackerApiRequests(const VmSpec& spec,
                                                         const std::string& vsock_path);

// Sends `request` over a new connection to the API socket and reads the
// answer (at most 64 KiB). Ok on a 2xx status; otherwise Unavailable with
// Firecracker's fault_message.
Status SendApiRequest(const std::string& api_socket, const ApiRequest& request);

// Connects to guest vsock `port` through Firecracker's Unix-socket proxy:
// "CONNECT <port>\n", answered "OK <host port>\n". Retries (the guest's
// listener may not be up yet) until `deadline`. The returned socket is the
// byte stream to the guest.
Expected<os::UniqueFd> ConnectVsock(const std::string& uds_path, unsigned port,
                                    std::chrono::steady_clock::time_point deadline);

}  // namespace sandbox::vm

#endif  // SANDBOX_MICROVM_FIRECRACKER_H_
