// A client of the Docker Engine API over its Unix socket (or plain tcp://),
// through libcurl: JSON requests with API version negotiation, a streamed
// upload (image import), and the hijacked attach connection. Knows nothing
// of sandboxes; src/docker/docker_sandbox.cc drives it.
#ifndef SANDBOX_DOCKER_ENGINE_H_
#define SANDBOX_DOCKER_ENGINE_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "os/unique_fd.h"
#include "sandbox/error.h"

namespace sandbox::docker {

// The oldest Engine API this client speaks, and the newest it asks for.
inline constexpr std::string_view kMinApiVersion = "1.41";
inline constexpr std::string_view kMaxApiVersion = "1.47";

// One answer of the daemon. `body` is bounded (see Engine::Request).
struct Response {
  long status = 0;
  std::string body;
};

// A connection to one Docker Engine. Every request opens its own connection
// (libcurl easy handle), so an Engine is thread-safe and cheap to copy.
class Engine {
 public:
  // Finds the daemon: `host` if not empty, else $DOCKER_HOST, else
  // unix:///var/run/docker.sock; then pings it and negotiates the API version
  // (the daemon's, capped at kMaxApiVersion; below kMinApiVersion is an
  // error). Unavailable, saying what to do, when the daemon does not answer.
  static Expected<Engine> Connect(std::string host = "");

  // Finds the daemon as Connect does, without asking it anything. Its
  // requests then speak the unversioned API until Connect negotiates.
  static Expected<Engine> Locate(std::string host = "");

  // GET /_ping: the API version the daemon says it speaks, not judged.
  // Unavailable (saying what to do) when it does not answer 200 in time.
  Expected<std::string> Ping(std::chrono::milliseconds timeout) const;

  // "unix:///path" or "tcp://host:port", as given or found.
  const std::string& host() const { return host_; }
  // The negotiated API version, e.g. "1.47".
  const std::string& api_version() const { return api_version_; }

  // Sends `method` to /vX.Y`path` with `body` as JSON (unless null) and
  // returns the answer (any HTTP status). Answers longer than `max_body` are
  // refused with TooLarge. Unavailable when the daemon cannot be reached.
  Expected<Response> Request(std::string_view method, std::string_view path,
                             const nlohmann::json& body = nullptr,
                             std::chrono::milliseconds timeout = std::chrono::seconds(60),
                             std::size_t max_body = std::size_t{16} << 20) const;

  // POSTs the bytes `read` produces (a chunked upload of `content_type`;
  // `read` fills the buffer and returns the count, 0 at the end, -1 to
  // abort) to `path`.
  Expected<Response> Upload(std::string_view path, std::string_view content_type,
                            const std::function<long(char*, std::size_t)>& read,
                            std::chrono::milliseconds timeout) const;

  // The hijacked connection of POST /containers/{id}/attach with stdin,
  // stdout and stderr streaming: after the 101 (or 200) answer the socket
  // carries raw stdin one way and 8-byte-header frames of stdout/stderr the
  // other. `leftover` gets any stream bytes read together with the answer's
  // headers.
  Expected<os::UniqueFd> Attach(std::string_view container_id, std::string& leftover) const;

  // The daemon's error message in an answer: the "message" of its JSON body,
  // else the body itself (bounded).
  static std::string ErrorMessage(const Response& response);

 private:
  Engine() = default;
  std::string Url(std::string_view path, bool versioned = true) const;

  std::string host_;
  std::string socket_path_;  // for unix://
  std::string base_url_;     // "http://docker" or "http://host:port"
  std::string api_version_;
};

// Compares API versions "1.41" < "1.47" numerically. Negative, 0, positive.
int CompareApiVersions(std::string_view a, std::string_view b);

}  // namespace sandbox::docker

#endif  // SANDBOX_DOCKER_ENGINE_H_
