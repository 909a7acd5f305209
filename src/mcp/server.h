// The MCP server: a Sandbox served to any Model Context Protocol client as
// tools (DESIGN.md section 6). This file is the protocol (JSON-RPC 2.0 and
// the MCP lifecycle); tools.h maps each tool onto one core call; stdio.h is
// the newline-delimited transport. Revision 2025-06-18, and 2025-03-26 for
// clients that ask for it.
#ifndef SANDBOX_MCP_SERVER_H_
#define SANDBOX_MCP_SERVER_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "mcp/tools.h"
#include "sandbox/sandbox.h"

namespace sandbox::mcp {

// The protocol revisions this server speaks, newest first.
inline constexpr std::string_view kLatestProtocolVersion = "2025-06-18";
inline constexpr std::string_view kProtocolVersions[] = {"2025-06-18", "2025-03-26"};

// JSON-RPC 2.0 error codes, and the one this server adds.
inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;
inline constexpr int kNotInitialized = -32002;  // a request other than ping before initialize

// The deepest nesting of arrays and objects a message may have; deeper ones
// are refused before they are parsed, so no recursion is driven by a client.
inline constexpr std::size_t kMaxNesting = 64;

// What the server says about itself in `initialize`.
struct ServerInfo {
  std::string name = "sandbox";
  std::string version = "0";
};

// One MCP session over one Sandbox. Handle() takes one message and returns
// the one line to send back, so the protocol runs without any I/O (the tests
// and the fuzzer drive it directly). Not thread-safe: one caller at a time.
// The sandbox must outlive the server; the server never closes it, but its
// destructor closes the shell sessions it opened.
class Server {
 public:
  Server(Sandbox& sandbox, ToolOptions options, ServerInfo info = {});
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Handles one JSON-RPC message (a line without its newline). Returns the
  // response (compact JSON, no newline), or nullopt when nothing is to be
  // sent (a notification, or a response from the client). Never throws and
  // never fails: malformed input gets a JSON-RPC error response.
  std::optional<std::string> Handle(std::string_view message);

  // The error response for a message longer than `limit` bytes that was
  // refused unread (its id is unknown, so it is null).
  static std::string TooLargeResponse(std::size_t limit);

  // The revision agreed in `initialize`, or "" before it.
  const std::string& protocol_version() const { return protocol_version_; }

 private:
  nlohmann::ordered_json HandleOne(const nlohmann::json& message);
  nlohmann::ordered_json Dispatch(const nlohmann::json& id, const std::string& method,
                                  const nlohmann::json* params);
  nlohmann::ordered_json Initialize(const nlohmann::json& id, const nlohmann::json* params);

  Toolbox tools_;
  ServerInfo info_;
  Capabilities caps_;
  std::string protocol_version_;  // "" until initialize succeeded
};

}  // namespace sandbox::mcp

#endif  // SANDBOX_MCP_SERVER_H_
