// The tools `sandbox mcp` offers. Each maps onto one call of the Sandbox
// interface (or an optional capability of it); none holds sandbox logic.
#ifndef SANDBOX_MCP_TOOLS_H_
#define SANDBOX_MCP_TOOLS_H_

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/sandbox.h"

namespace sandbox::mcp {

// Bounds and defaults of the tools.
struct ToolOptions {
  // run_command's timeout when the call gives no timeout_ms.
  std::chrono::nanoseconds default_timeout = std::chrono::minutes(10);
  // run_command's working directory when the call gives no dir ("" = root).
  std::string default_dir;
  // "KEY=VALUE" entries every command gets (`sandbox mcp --env`).
  std::vector<std::string> env;
  // How many named shell sessions may live at once.
  std::size_t max_sessions = 8;
  // Bounds that keep every response line well under 10 MiB, the default
  // message limit of the official TypeScript SDK's stdio transport, even when
  // every byte needs a 6-byte JSON escape and appears twice (text content
  // and structuredContent): run_command's capture per stream (head and tail
  // kept), read_file's limit without max_bytes, and the largest max_bytes.
  std::size_t output_limit = std::size_t{128} << 10;
  std::size_t default_read_bytes = std::size_t{256} << 10;
  std::size_t max_read_bytes = std::size_t{512} << 10;
  // Cancels every running call (the CLI stops it on SIGINT/SIGTERM).
  std::stop_token stop;
};

// The largest timeout_ms run_command accepts (one day).
inline constexpr std::int64_t kMaxTimeoutMs = 24LL * 60 * 60 * 1000;
// The longest session name, and the characters it may use: [A-Za-z0-9_.-].
inline constexpr std::size_t kMaxSessionName = 64;

// A JSON-RPC error a tool call ends in: unknown tool or invalid arguments.
struct ProtocolError {
  int code;
  std::string message;
};

// The tools over one sandbox, with the named shell sessions run_command has
// opened. Not thread-safe (the Server calls it from one thread).
class Toolbox {
 public:
  Toolbox(Sandbox& sandbox, ToolOptions options);
  Toolbox(const Toolbox&) = delete;
  Toolbox& operator=(const Toolbox&) = delete;
  // Closes the sessions; the sandbox is the caller's.
  ~Toolbox();

  // The `tools` array of tools/list. With `structured` (revision 2025-06-18)
  // each tool also has an outputSchema.
  nlohmann::ordered_json List(bool structured) const;

  // Runs tool `name` with `arguments` and returns the CallToolResult: text
  // content for a model, structuredContent (when `structured`), and isError
  // true with the message when the sandbox returned an Error. Unknown tools
  // and invalid arguments are a ProtocolError instead.
  std::expected<nlohmann::ordered_json, ProtocolError> Call(std::string_view name,
                                                            const nlohmann::json& arguments,
                                                            bool structured);

  // How many named sessions are open.
  std::size_t session_count() const { return sessions_.size(); }

 private:
  using Outcome = std::expected<nlohmann::ordered_json, ProtocolError>;
  Outcome RunCommand(const nlohmann::json& args, bool structured);
  Outcome ReadFile(const nlohmann::json& args, bool structured);
  Outcome WriteFile(const nlohmann::json& args, bool structured, bool append);
  Outcome ListDir(const nlohmann::json& args, bool structured);
  Outcome MakeDir(const nlohmann::json& args, bool structured);
  Outcome Remove(const nlohmann::json& args, bool structured);
  Context CallContext() const;

  Sandbox& sandbox_;
  ToolOptions options_;
  Capabilities caps_;
  std::map<std::string, std::unique_ptr<Session>, std::less<>> sessions_;
};

// True when `text` is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool IsValidUtf8(std::string_view text);

}  // namespace sandbox::mcp

#endif  // SANDBOX_MCP_TOOLS_H_
