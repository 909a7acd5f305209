#include "mcp/server.h"

#include <utility>

#include "json/result_json.h"

namespace sandbox::mcp {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

ordered_json ErrorResponse(const json& id, int code, std::string message) {
  ordered_json response = {{"jsonrpc", "2.0"}};
  response["id"] = id;
  response["error"] = {{"code", code}, {"message", std::move(message)}};
  return response;
}

ordered_json Response(const json& id, ordered_json result) {
  ordered_json response = {{"jsonrpc", "2.0"}};
  response["id"] = id;
  response["result"] = std::move(result);
  return response;
}

// False when arrays and objects nest deeper than kMaxNesting. A scan over
// the bytes (skipping strings) before parsing, so a hostile "[[[[..." never
// reaches a parser or destructor that recurses.
bool NestingWithinBound(std::string_view text) {
  std::size_t depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxNesting) return false;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return true;
}

bool SupportedVersion(std::string_view version) {
  for (std::string_view known : kProtocolVersions)
    if (known == version) return true;
  return false;
}

}  // namespace

Server::Server(Sandbox& sandbox, ToolOptions options, ServerInfo info)
    : tools_(sandbox, std::move(options)), info_(std::move(info)), caps_(sandbox.GetCapabilities()) {}

std::string Server::TooLargeResponse(std::size_t limit) {
  return sandbox::json::Dump(ErrorResponse(nullptr, kInvalidRequest,
                                  "message refused: longer than " + std::to_string(limit) +
                                      " bytes (put large data in a file in the workspace)"));
}

std::optional<std::string> Server::Handle(std::string_view message) {
  if (!NestingWithinBound(message))
    return sandbox::json::Dump(ErrorResponse(nullptr, kParseError,
                                    "parse error: arrays and objects nest deeper than " +
                                        std::to_string(kMaxNesting) + " levels"));
  json parsed = json::parse(message, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded())
    return sandbox::json::Dump(ErrorResponse(nullptr, kParseError, "parse error: not valid JSON"));

  ordered_json response;
  try {
    if (parsed.is_array()) {
      // JSON-RPC batches: part of revision 2025-03-26, removed in 2025-06-18.
      if (protocol_version_ != "2025-03-26")
        return sandbox::json::Dump(ErrorResponse(
            nullptr, kInvalidRequest,
            "invalid request: batches are not supported in MCP revision " +
                std::string(protocol_version_.empty() ? kLatestProtocolVersion : protocol_version_)));
      if (parsed.empty())
        return sandbox::json::Dump(ErrorResponse(nullptr, kInvalidRequest, "invalid request: empty batch"));
      response = ordered_json::array();
      for (const json& element : parsed) {
        ordered_json one = HandleOne(element);
        if (!one.is_null()) response.push_back(std::move(one));
      }
      if (response.empty()) return std::nullopt;
    } else {
      response = HandleOne(parsed);
      if (response.is_null()) return std::nullopt;
    }
  } catch (const std::exception& e) {
    // nlohmann throws only on a bug here (every access is type-checked);
    // the server must still answer and go on.
    return sandbox::json::Dump(ErrorResponse(nullptr, kInternalError, std::string("internal error: ") + e.what()));
  }
  return sandbox::json::Dump(response);
}

ordered_json Server::HandleOne(const json& message) {
  if (!message.is_object())
    return ErrorResponse(nullptr, kInvalidRequest, "invalid request: a message must be an object");
  json id = nullptr;
  auto id_it = message.find("id");
  const bool has_id = id_it != message.end();
  if (has_id) {
    // MCP: string or integer, never null.
    if (!id_it->is_string() && !id_it->is_number_integer())
      return ErrorResponse(nullptr, kInvalidRequest,
                           "invalid request: 'id' must be a string or an integer");
    id = *id_it;
  }
  auto version = message.find("jsonrpc");
  if (version == message.end() || !version->is_string() || *version != "2.0")
    return ErrorResponse(id, kInvalidRequest, "invalid request: 'jsonrpc' must be \"2.0\"");
  auto method = message.find("method");
  if (method == message.end()) {
    // A response to a request of ours; this server sends none, so drop it.
    if (has_id && (message.contains("result") || message.contains("error"))) return nullptr;
    return ErrorResponse(id, kInvalidRequest, "invalid request: missing 'method'");
  }
  if (!method->is_string())
    return ErrorResponse(id, kInvalidRequest, "invalid request: 'method' must be a string");
  const json* params = nullptr;
  if (auto it = message.find("params"); it != message.end()) {
    if (!it->is_object())
      return has_id ? ErrorResponse(id, kInvalidParams, "invalid params: 'params' must be an object")
                    : nullptr;
    params = &*it;
  }
  const std::string& name = method->get_ref<const std::string&>();
  if (!has_id) {
    // Notifications get no response, whatever they are: initialized,
    // cancelled (calls run one at a time, so nothing is in flight to cancel).
    return nullptr;
  }
  return Dispatch(id, name, params);
}

ordered_json Server::Dispatch(const json& id, const std::string& method, const json* params) {
  if (method == "initialize") return Initialize(id, params);
  if (method == "ping") return Response(id, ordered_json::object());
  const bool known = method == "tools/list" || method == "tools/call";
  if (!known) return ErrorResponse(id, kMethodNotFound, "method not found: " + method);
  if (protocol_version_.empty())
    return ErrorResponse(id, kNotInitialized, "server not initialized: send initialize first");
  const bool structured = protocol_version_ != "2025-03-26";

  if (method == "tools/list") {
    if (params) {
      if (auto cursor = params->find("cursor"); cursor != params->end() && !cursor->is_string())
        return ErrorResponse(id, kInvalidParams, "invalid params: 'cursor' must be a string");
    }
    return Response(id, {{"tools", tools_.List(structured)}});
  }

  // tools/call
  if (!params) return ErrorResponse(id, kInvalidParams, "invalid params: tools/call needs params");
  auto name = params->find("name");
  if (name == params->end() || !name->is_string())
    return ErrorResponse(id, kInvalidParams, "invalid params: 'name' must be a string");
  static const json kNoArguments = json::object();
  const json* arguments = &kNoArguments;
  if (auto it = params->find("arguments"); it != params->end()) arguments = &*it;
  auto result = tools_.Call(name->get_ref<const std::string&>(), *arguments, structured);
  if (!result) return ErrorResponse(id, result.error().code, result.error().message);
  return Response(id, std::move(*result));
}

ordered_json Server::Initialize(const json& id, const json* params) {
  if (!protocol_version_.empty())
    return ErrorResponse(id, kInvalidRequest, "invalid request: already initialized");
  if (!params) return ErrorResponse(id, kInvalidParams, "invalid params: initialize needs params");
  auto requested = params->find("protocolVersion");
  if (requested == params->end() || !requested->is_string())
    return ErrorResponse(id, kInvalidParams, "invalid params: 'protocolVersion' must be a string");
  const std::string& asked = requested->get_ref<const std::string&>();
  // An unknown revision gets ours; the client decides whether to go on.
  protocol_version_ = SupportedVersion(asked) ? asked : std::string(kLatestProtocolVersion);

  ordered_json result = {{"protocolVersion", protocol_version_}};
  result["capabilities"] = {{"tools", {{"listChanged", false}}}};
  result["serverInfo"] = {{"name", info_.name}, {"version", info_.version}};
  result["instructions"] =
      "Every command and file operation runs inside one sandbox (backend " + caps_.backend +
      ", isolation " + std::string(ToString(caps_.isolation)) + ", network " +
      (caps_.network ? "on" : "off") +
      "). Paths are relative to the sandbox root; paths that leave it are refused.";
  return Response(id, std::move(result));
}

}  // namespace sandbox::mcp
