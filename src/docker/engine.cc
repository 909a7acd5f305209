#include "docker/engine.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <memory>

#include "os/syscalls.h"

namespace sandbox::docker {
namespace {

constexpr std::string_view kDefaultHost = "unix:///var/run/docker.sock";
constexpr std::size_t kMaxAttachHeaderBytes = 16 << 10;

void GlobalInit() {
  static const bool done = [] { return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; }();
  (void)done;
}

struct CurlDeleter {
  void operator()(CURL* curl) const { curl_easy_cleanup(curl); }
};
using CurlHandle = std::unique_ptr<CURL, CurlDeleter>;
struct HeaderListDeleter {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};
using HeaderList = std::unique_ptr<curl_slist, HeaderListDeleter>;

// Collects a body up to a bound; beyond it the transfer is aborted.
struct BodySink {
  std::string data;
  std::size_t max = 0;
  bool overflow = false;
};

size_t WriteBody(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<BodySink*>(user);
  std::size_t n = size * count;
  if (sink->data.size() + n > sink->max) {
    sink->overflow = true;
    return 0;  // aborts the transfer
  }
  sink->data.append(data, n);
  return n;
}

// Captures the API-Version header of /_ping.
size_t ReadHeader(char* data, size_t size, size_t count, void* user) {
  std::string_view line(data, size * count);
  constexpr std::string_view kName = "api-version:";
  if (line.size() > kName.size()) {
    std::string lower(line.substr(0, kName.size()));
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == kName) {
      std::string_view value = line.substr(kName.size());
      while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
      while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' '))
        value.remove_suffix(1);
      *static_cast<std::string*>(user) = std::string(value.substr(0, 16));
    }
  }
  return size * count;
}

// The common options of one request.
Expected<CurlHandle> NewHandle(const std::string& url, const std::string& socket_path,
                               std::string_view method, std::chrono::milliseconds timeout) {
  CurlHandle curl(curl_easy_init());
  if (!curl) return Fail(Error::Code::Internal, "curl_easy_init failed");
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  if (!socket_path.empty()) curl_easy_setopt(curl.get(), CURLOPT_UNIX_SOCKET_PATH, socket_path.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_CONNECTTIMEOUT_MS, 10000L);
  curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(curl.get(), CURLOPT_CUSTOMREQUEST, std::string(method).c_str());
  return curl;
}

}  // namespace

int CompareApiVersions(std::string_view a, std::string_view b) {
  auto parse = [](std::string_view text, int& major, int& minor) {
    auto dot = text.find('.');
    if (dot == std::string_view::npos) return false;
    auto r1 = std::from_chars(text.data(), text.data() + dot, major);
    auto r2 = std::from_chars(text.data() + dot + 1, text.data() + text.size(), minor);
    return r1.ec == std::errc() && r2.ec == std::errc() && r2.ptr == text.data() + text.size();
  };
  int a_major = 0, a_minor = 0, b_major = 0, b_minor = 0;
  if (!parse(a, a_major, a_minor)) return -1;
  if (!parse(b, b_major, b_minor)) return 1;
  if (a_major != b_major) return a_major < b_major ? -1 : 1;
  return a_minor == b_minor ? 0 : (a_minor < b_minor ? -1 : 1);
}

std::string Engine::Url(std::string_view path, bool versioned) const {
  std::string url = base_url_;
  if (versioned && !api_version_.empty()) url += "/v" + api_version_;
  url += path;
  return url;
}

Expected<Engine> Engine::Locate(std::string host) {
  GlobalInit();
  if (host.empty()) {
    const char* env = std::getenv("DOCKER_HOST");
    host = env && *env ? env : std::string(kDefaultHost);
  }
  Engine engine;
  engine.host_ = host;
  if (host.starts_with("unix://")) {
    engine.socket_path_ = host.substr(7);
    engine.base_url_ = "http://docker";
    if (engine.socket_path_.empty() || engine.socket_path_.front() != '/')
      return Fail(Error::Code::InvalidArgument,
                  "DOCKER_HOST '" + host + "': a unix:// address needs an absolute socket path");
  } else if (host.starts_with("tcp://")) {
    engine.base_url_ = "http://" + host.substr(6);
  } else {
    return Fail(Error::Code::InvalidArgument,
                "DOCKER_HOST '" + host +
                    "': only unix:///path/to/docker.sock and tcp://host:port are supported");
  }
  return engine;
}

Expected<std::string> Engine::Ping(std::chrono::milliseconds timeout) const {
  auto handle = NewHandle(Url("/_ping", false), socket_path_, "GET", timeout);
  if (!handle) return Fail(handle.error());
  CURL* curl = handle->get();
  BodySink sink{.max = 4096};
  std::string version;
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, WriteBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, ReadHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &version);
  CURLcode code = curl_easy_perform(curl);
  if (code != CURLE_OK)
    return Fail(Error::Code::Unavailable,
                "cannot reach the Docker daemon at " + host_ + " (" + curl_easy_strerror(code) +
                    "): is dockerd running? Start it (scripts/dockerd-ci start) or point "
                    "DOCKER_HOST at it; run `sandbox doctor`");
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  if (status != 200)
    return Fail(Error::Code::Unavailable, "the Docker daemon at " + host_ +
                                              " answered /_ping with " + std::to_string(status) +
                                              ": " + sink.data.substr(0, 200));
  if (version.empty())
    return Fail(Error::Code::Unavailable,
                "the Docker daemon at " + host_ + " sent no API-Version header; it is too old "
                "(Engine API >= " + std::string(kMinApiVersion) + " is needed)");
  return version;
}

Expected<Engine> Engine::Connect(std::string host) {
  auto engine = Locate(std::move(host));
  if (!engine) return engine;
  auto version = engine->Ping(std::chrono::seconds(10));
  if (!version) return Fail(version.error());
  if (CompareApiVersions(*version, kMinApiVersion) < 0)
    return Fail(Error::Code::Unsupported,
                "the Docker daemon at " + engine->host_ + " speaks Engine API " + *version + "; " +
                    std::string(kMinApiVersion) + " or newer is needed (upgrade Docker)");
  engine->api_version_ =
      CompareApiVersions(*version, kMaxApiVersion) > 0 ? std::string(kMaxApiVersion) : *version;
  return engine;
}

namespace {

Expected<Response> Perform(CURL* curl, BodySink& sink, const std::string& host,
                           std::string_view what) {
  CURLcode code = curl_easy_perform(curl);
  if (sink.overflow)
    return Fail(Error::Code::TooLarge, "the Docker daemon's answer to " + std::string(what) +
                                           " is larger than " + std::to_string(sink.max) + " bytes");
  if (code == CURLE_OPERATION_TIMEDOUT)
    return Fail(Error::Code::Unavailable, "the Docker daemon at " + host + " did not answer " +
                                              std::string(what) + " in time");
  if (code != CURLE_OK)
    return Fail(Error::Code::Unavailable,
                "cannot reach the Docker daemon at " + host + " for " + std::string(what) + " (" +
                    curl_easy_strerror(code) + "): is dockerd running? run `sandbox doctor`");
  Response response;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  response.body = std::move(sink.data);
  return response;
}

}  // namespace

Expected<Response> Engine::Request(std::string_view method, std::string_view path,
                                   const nlohmann::json& body, std::chrono::milliseconds timeout,
                                   std::size_t max_body) const {
  std::string url = Url(path);
  auto curl = NewHandle(url, socket_path_, method, timeout);
  if (!curl) return Fail(curl.error());
  BodySink sink{.max = max_body};
  curl_easy_setopt(curl->get(), CURLOPT_WRITEFUNCTION, WriteBody);
  curl_easy_setopt(curl->get(), CURLOPT_WRITEDATA, &sink);
  std::string payload;
  HeaderList headers;
  if (!body.is_null()) {
    payload = body.dump();
    headers.reset(curl_slist_append(nullptr, "Content-Type: application/json"));
    curl_easy_setopt(curl->get(), CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(curl->get(), CURLOPT_POSTFIELDS, payload.c_str());
    curl_easy_setopt(curl->get(), CURLOPT_POSTFIELDSIZE, static_cast<long>(payload.size()));
  }
  return Perform(curl->get(), sink, host_, std::string(method) + " " + std::string(path));
}

namespace {
size_t ReadUpload(char* buffer, size_t size, size_t count, void* user) {
  auto* read = static_cast<const std::function<long(char*, std::size_t)>*>(user);
  long n = (*read)(buffer, size * count);
  if (n < 0) return CURL_READFUNC_ABORT;
  return static_cast<size_t>(n);
}
}  // namespace

Expected<Response> Engine::Upload(std::string_view path, std::string_view content_type,
                                  const std::function<long(char*, std::size_t)>& read,
                                  std::chrono::milliseconds timeout) const {
  std::string url = Url(path);
  auto curl = NewHandle(url, socket_path_, "POST", timeout);
  if (!curl) return Fail(curl.error());
  BodySink sink{.max = std::size_t{16} << 20};
  curl_easy_setopt(curl->get(), CURLOPT_WRITEFUNCTION, WriteBody);
  curl_easy_setopt(curl->get(), CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(curl->get(), CURLOPT_POST, 1L);
  curl_easy_setopt(curl->get(), CURLOPT_READFUNCTION, ReadUpload);
  curl_easy_setopt(curl->get(), CURLOPT_READDATA, &read);
  std::string type = "Content-Type: " + std::string(content_type);
  HeaderList headers(curl_slist_append(nullptr, type.c_str()));
  headers.reset(curl_slist_append(headers.release(), "Transfer-Encoding: chunked"));
  curl_easy_setopt(curl->get(), CURLOPT_HTTPHEADER, headers.get());
  return Perform(curl->get(), sink, host_, "POST " + std::string(path));
}

Expected<os::UniqueFd> Engine::Attach(std::string_view container_id, std::string& leftover) const {
  for (char c : container_id)
    if (!std::isxdigit(static_cast<unsigned char>(c)))
      return Fail(Error::Code::InvalidArgument, "not a container id: '" + std::string(container_id) + "'");
  // libcurl connects (unix socket or tcp, with its timeouts); the upgrade
  // itself is ours, as libcurl has no API for Docker's "Upgrade: tcp".
  auto curl = NewHandle(Url("/_ping", false), socket_path_, "GET", std::chrono::seconds(10));
  if (!curl) return Fail(curl.error());
  curl_easy_setopt(curl->get(), CURLOPT_CONNECT_ONLY, 1L);
  if (CURLcode code = curl_easy_perform(curl->get()); code != CURLE_OK)
    return Fail(Error::Code::Unavailable, "cannot reach the Docker daemon at " + host_ +
                                              " to attach (" + curl_easy_strerror(code) + ")");
  curl_socket_t socket = CURL_SOCKET_BAD;
  if (curl_easy_getinfo(curl->get(), CURLINFO_ACTIVESOCKET, &socket) != CURLE_OK ||
      socket == CURL_SOCKET_BAD)
    return Fail(Error::Code::Internal, "libcurl gave no socket for the attach connection");
  os::UniqueFd fd(::fcntl(socket, F_DUPFD_CLOEXEC, 3));
  if (!fd) return Fail(os::ErrnoError(errno, "dup the attach socket"));
  curl.value().reset();  // closes libcurl's descriptor; ours stays connected
  SANDBOX_RETURN_IF_ERROR(os::SetNonBlocking(fd.get(), true));

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  auto wait_for = [&](short events) -> Status {
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0)
        return Fail(Error::Code::Unavailable, "the Docker daemon did not answer the attach in time");
      pollfd waiter{.fd = fd.get(), .events = events, .revents = 0};
      int ready = ::poll(&waiter, 1, static_cast<int>(left.count()));
      if (ready > 0) return {};
      if (ready < 0 && errno != EINTR) return Fail(os::ErrnoError(errno, "poll the attach socket"));
    }
  };
  std::string request = "POST /v" + api_version_ + "/containers/" + std::string(container_id) +
                        "/attach?stream=1&stdin=1&stdout=1&stderr=1 HTTP/1.1\r\n"
                        "Host: docker\r\nContent-Type: text/plain\r\nContent-Length: 0\r\n"
                        "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n";
  std::string_view pending = request;
  while (!pending.empty()) {
    long n = ::send(fd.get(), pending.data(), pending.size(), MSG_NOSIGNAL);
    if (n > 0) {
      pending.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      SANDBOX_RETURN_IF_ERROR(wait_for(POLLOUT));
    } else {
      return Fail(Error::Code::Unavailable, os::ErrnoError(errno, "send the attach request").message());
    }
  }
  // The answer's headers, bounded; bytes after them belong to the stream.
  std::string answer;
  std::size_t end = std::string::npos;
  while ((end = answer.find("\r\n\r\n")) == std::string::npos) {
    if (answer.size() > kMaxAttachHeaderBytes)
      return Fail(Error::Code::Unavailable, "the Docker daemon's attach answer has oversized headers");
    char buffer[4096];
    long n = ::recv(fd.get(), buffer, sizeof buffer, 0);
    if (n > 0) {
      answer.append(buffer, static_cast<std::size_t>(n));
    } else if (n == 0) {
      return Fail(Error::Code::Unavailable, "the Docker daemon closed the attach connection");
    } else if (errno == EAGAIN || errno == EINTR) {
      SANDBOX_RETURN_IF_ERROR(wait_for(POLLIN));
    } else {
      return Fail(Error::Code::Unavailable, os::ErrnoError(errno, "receive the attach answer").message());
    }
  }
  std::string_view status_line = std::string_view(answer).substr(0, answer.find("\r\n"));
  if (!(status_line.starts_with("HTTP/1.1 101") || status_line.starts_with("HTTP/1.1 200") ||
        status_line.starts_with("HTTP/1.0 200")))
    return Fail(Error::Code::Unavailable,
                "the Docker daemon refused the attach: " + std::string(status_line.substr(0, 200)) +
                    " " + answer.substr(end + 4, 300));
  leftover = answer.substr(end + 4);
  return fd;
}

std::string Engine::ErrorMessage(const Response& response) {
  auto parsed = nlohmann::json::parse(response.body, nullptr, false);
  if (parsed.is_object() && parsed.contains("message") && parsed["message"].is_string())
    return parsed["message"].get<std::string>().substr(0, 2000);
  return response.body.substr(0, 2000);
}

}  // namespace sandbox::docker
