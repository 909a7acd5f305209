#include "mcp/tools.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <utility>

#include "json/result_json.h"
#include "mcp/server.h"

namespace sandbox::mcp {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using Outcome = std::expected<ordered_json, ProtocolError>;

std::unexpected<ProtocolError> InvalidParams(std::string message) {
  return std::unexpected(ProtocolError{kInvalidParams, std::move(message)});
}

// ---- schemas -------------------------------------------------------------

ordered_json StringProperty(std::string_view description) {
  return {{"type", "string"}, {"description", description}};
}

ordered_json IntegerProperty(std::string_view description, std::int64_t minimum,
                             std::int64_t maximum) {
  return {{"type", "integer"},
          {"minimum", minimum},
          {"maximum", maximum},
          {"description", description}};
}

ordered_json ObjectSchema(ordered_json properties, std::vector<std::string> required) {
  ordered_json schema = {{"type", "object"}, {"properties", std::move(properties)}};
  schema["required"] = std::move(required);
  schema["additionalProperties"] = false;
  return schema;
}

// The section 7 object's schema (json::ResultObject).
ordered_json ResultSchema() {
  ordered_json properties = {
      {"exit_code", {{"type", "integer"}}},
      {"stdout", {{"type", "string"}}},
      {"stderr", {{"type", "string"}}},
      {"duration_ms", {{"type", "number"}}},
      {"timed_out", {{"type", "boolean"}}},
      {"stdout_truncated", {{"type", "boolean"}}},
      {"stderr_truncated", {{"type", "boolean"}}},
      {"signal", {{"type", {"integer", "null"}}}},
      {"isolation", {{"type", "string"}}},
      {"backend", {{"type", "string"}}},
      {"stdout_dropped", {{"type", "integer"}}},
      {"stderr_dropped", {{"type", "integer"}}},
  };
  std::vector<std::string> required;
  for (const auto& [key, value] : properties.items()) required.push_back(key);
  ordered_json schema = {{"type", "object"}, {"properties", std::move(properties)}};
  schema["required"] = std::move(required);
  return schema;
}

ordered_json PathResultSchema(ordered_json extra = ordered_json::object()) {
  ordered_json properties = {{"path", {{"type", "string"}}}};
  std::vector<std::string> required = {"path"};
  for (auto& [key, value] : extra.items()) {
    properties[key] = value;
    required.push_back(key);
  }
  ordered_json schema = {{"type", "object"}, {"properties", std::move(properties)}};
  schema["required"] = std::move(required);
  return schema;
}

constexpr std::string_view kPathHelp =
    "Path relative to the sandbox root ('.' is the root); a path that leaves the root is "
    "refused.";

// ---- arguments -----------------------------------------------------------

// The arguments of one call, checked against the tool's input schema:
// unknown keys, missing required keys and wrong types are InvalidParams.
class Arguments {
 public:
  Arguments(std::string_view tool, const json& args) : tool_(tool), args_(args) {}

  // Fails unless every key is one of `known`.
  std::optional<ProtocolError> OnlyKeys(std::initializer_list<std::string_view> known) const {
    for (const auto& [key, value] : args_.items()) {
      bool found = false;
      for (std::string_view name : known) found = found || key == name;
      if (!found)
        return ProtocolError{kInvalidParams, "unknown argument '" + key + "' for tool " + tool_};
    }
    return std::nullopt;
  }

  std::expected<std::optional<std::string>, ProtocolError> String(std::string_view key,
                                                                  bool required) const {
    auto it = args_.find(key);
    if (it == args_.end()) {
      if (required) return InvalidParams(tool_ + ": missing required argument '" + std::string(key) + "'");
      return std::nullopt;
    }
    if (!it->is_string())
      return InvalidParams(tool_ + ": argument '" + std::string(key) + "' must be a string, not " +
                           it->type_name());
    return it->get<std::string>();
  }

  std::expected<std::optional<std::int64_t>, ProtocolError> Integer(std::string_view key,
                                                                   std::int64_t minimum,
                                                                   std::int64_t maximum) const {
    auto it = args_.find(key);
    if (it == args_.end()) return std::nullopt;
    std::optional<std::int64_t> value;
    if (it->is_number_unsigned()) {
      auto raw = it->get<std::uint64_t>();
      value = raw > static_cast<std::uint64_t>(maximum) ? maximum + 1
                                                        : static_cast<std::int64_t>(raw);
    } else if (it->is_number_integer()) {
      value = it->get<std::int64_t>();
    } else if (it->is_number_float()) {
      // JSON has one number type; 5000.0 is the integer 5000.
      double raw = it->get<double>();
      if (std::isfinite(raw) && std::trunc(raw) == raw && std::fabs(raw) < 9e15)
        value = static_cast<std::int64_t>(raw);
    }
    if (!value)
      return InvalidParams(tool_ + ": argument '" + std::string(key) +
                           "' must be an integer, not " +
                           (it->is_number() ? "a fraction" : it->type_name()));
    if (*value < minimum || *value > maximum)
      return InvalidParams(tool_ + ": argument '" + std::string(key) + "' must be between " +
                           std::to_string(minimum) + " and " + std::to_string(maximum));
    return value;
  }

 private:
  std::string tool_;
  const json& args_;
};

// Unwraps an argument or returns its ProtocolError from the calling tool.
#define MCP_ASSIGN_ARG(var, expr)                      \
  auto var##_or = (expr);                              \
  if (!var##_or) return std::unexpected(var##_or.error()); \
  auto var = std::move(*var##_or)

// ---- results -------------------------------------------------------------

ordered_json TextContent(std::string text) {
  return ordered_json::array({{{"type", "text"}, {"text", std::move(text)}}});
}

ordered_json ToolResult(std::string text, ordered_json structured, bool with_structured) {
  ordered_json result = {{"content", TextContent(std::move(text))}};
  if (with_structured) result["structuredContent"] = std::move(structured);
  result["isError"] = false;
  return result;
}

// A sandbox Error becomes a tool result the model reads, not a protocol error.
ordered_json ErrorResult(const Error& error, std::string_view extra = {}) {
  ordered_json result = {{"content", TextContent("error: " + error.ToString() + std::string(extra))}};
  result["isError"] = true;
  return result;
}

std::string Section(std::string_view name, const std::string& data) {
  if (data.empty()) return std::string(name) + ": (empty)\n";
  std::string text = std::string(name) + ":\n" + data;
  if (text.back() != '\n') text += "\n";
  return text;
}

// The text a model reads for a command's Result. `cancelled`: the server
// is stopping, which killed the command (Result::timed_out says so too).
std::string ResultText(const Result& result, std::chrono::nanoseconds timeout, bool cancelled) {
  std::string text = "exit code: " + std::to_string(result.exit_code) + "\n";
  text += Section("stdout", result.stdout_data);
  text += Section("stderr", result.stderr_data);
  if (result.timed_out && cancelled)
    text += "note: cancelled because the server is stopping; the command and everything it "
            "started were killed\n";
  else if (result.timed_out)
    text += "note: timed out after " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()) +
            " ms; the command and everything it started were killed\n";
  else if (result.signal)
    text += "note: killed by signal " + std::to_string(*result.signal) + "\n";
  if (result.stdout_truncated)
    text += "note: stdout truncated: " + std::to_string(result.stdout_dropped) +
            " bytes dropped from the middle\n";
  if (result.stderr_truncated)
    text += "note: stderr truncated: " + std::to_string(result.stderr_dropped) +
            " bytes dropped from the middle\n";
  if (!IsValidUtf8(result.stdout_data) || !IsValidUtf8(result.stderr_data))
    text += "note: bytes that are not valid UTF-8 were replaced with U+FFFD\n";
  return text;
}

bool ValidSessionName(std::string_view name) {
  if (name.empty() || name.size() > kMaxSessionName) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

bool IsValidUtf8(std::string_view text) {
  std::size_t i = 0;
  const std::size_t n = text.size();
  while (i < n) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t length;
    std::uint32_t code;
    if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
      code = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      code = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      code = c & 0x07;
    } else {
      return false;
    }
    if (n - i < length) return false;
    for (std::size_t k = 1; k < length; ++k) {
      auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) return false;
      code = (code << 6) | (next & 0x3F);
    }
    if ((length == 3 && code < 0x800) || (length == 4 && code < 0x10000) || code > 0x10FFFF ||
        (code >= 0xD800 && code <= 0xDFFF))
      return false;
    i += length;
  }
  return true;
}

Toolbox::Toolbox(Sandbox& sandbox, ToolOptions options)
    : sandbox_(sandbox), options_(std::move(options)), caps_(sandbox.GetCapabilities()) {}

Toolbox::~Toolbox() {
  for (auto& [name, session] : sessions_) (void)session->Close();
}

Context Toolbox::CallContext() const { return Context().StopToken(options_.stop); }

ordered_json Toolbox::List(bool structured) const {
  const std::string where = " The sandbox's backend is " + caps_.backend + " (isolation " +
                            std::string(ToString(caps_.isolation)) + ").";
  struct Spec {
    std::string_view name;
    std::string description;
    ordered_json input;
    ordered_json output;
  };
  std::vector<Spec> specs;
  specs.push_back(
      {"run_command",
       "Runs a shell command (by /bin/sh -c) inside the sandbox and returns its exit code, "
       "stdout and stderr. A non-zero exit code is a normal result. Commands with the same "
       "`session` name share one long-lived shell, so cd, export and shell variables persist "
       "between them; without `session` every command starts fresh in the sandbox root." +
           where,
       ObjectSchema(
           {{"command", StringProperty("The shell command line, run by /bin/sh -c.")},
            {"timeout_ms",
             IntegerProperty("Kill the command and everything it started after this many "
                             "milliseconds (default " +
                                 std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                    options_.default_timeout)
                                                    .count()) +
                                 ").",
                             1, kMaxTimeoutMs)},
            {"dir", StringProperty("Working directory, relative to the sandbox root. In a "
                                   "session the command then runs in a subshell there.")},
            {"session",
             StringProperty("Name of a stateful shell session ([A-Za-z0-9_.-], at most 64 "
                            "characters); created on first use. A timed-out command ends its "
                            "session.")}},
           {"command"}),
       ResultSchema()});
  specs.push_back(
      {"read_file",
       "Reads a file inside the sandbox and returns its content as text (bytes that are not "
       "valid UTF-8 become U+FFFD).",
       ObjectSchema({{"path", StringProperty(kPathHelp)},
                     {"max_bytes",
                      IntegerProperty("Return at most this many bytes (default " +
                                          std::to_string(options_.default_read_bytes) + ").",
                                      1, static_cast<std::int64_t>(options_.max_read_bytes))}},
                    {"path"}),
       PathResultSchema({{"content", {{"type", "string"}}},
                         {"bytes", {{"type", "integer"}}},
                         {"truncated", {{"type", "boolean"}}},
                         {"valid_utf8", {{"type", "boolean"}}}})});
  specs.push_back({"write_file",
                   "Creates or replaces a file inside the sandbox with the given text "
                   "(atomically). The parent directory must exist.",
                   ObjectSchema({{"path", StringProperty(kPathHelp)},
                                 {"content", StringProperty("The new content of the file.")}},
                                {"path", "content"}),
                   PathResultSchema({{"bytes", {{"type", "integer"}}}})});
  specs.push_back({"append_file",
                   "Appends text to a file inside the sandbox, creating it when missing.",
                   ObjectSchema({{"path", StringProperty(kPathHelp)},
                                 {"content", StringProperty("The text to append.")}},
                                {"path", "content"}),
                   PathResultSchema({{"bytes", {{"type", "integer"}}}})});
  specs.push_back(
      {"list_dir", "Lists a directory inside the sandbox, sorted by name.",
       ObjectSchema({{"path", StringProperty(kPathHelp)}}, {"path"}),
       PathResultSchema(
           {{"entries",
             {{"type", "array"},
              {"items",
               {{"type", "object"},
                {"properties", {{"name", {{"type", "string"}}}, {"is_dir", {{"type", "boolean"}}}}},
                {"required", {"name", "is_dir"}}}}}}})});
  specs.push_back({"make_dir",
                   "Creates a directory inside the sandbox, with any missing parents.",
                   ObjectSchema({{"path", StringProperty(kPathHelp)}}, {"path"}),
                   PathResultSchema()});
  specs.push_back({"remove",
                   "Removes one file or one empty directory inside the sandbox (never "
                   "recursive).",
                   ObjectSchema({{"path", StringProperty(kPathHelp)}}, {"path"}),
                   PathResultSchema()});

  ordered_json tools = ordered_json::array();
  for (Spec& spec : specs) {
    ordered_json tool = {{"name", spec.name},
                         {"description", std::move(spec.description)},
                         {"inputSchema", std::move(spec.input)}};
    if (structured) tool["outputSchema"] = std::move(spec.output);
    tools.push_back(std::move(tool));
  }
  return tools;
}

Toolbox::Outcome Toolbox::Call(std::string_view name, const json& arguments, bool structured) {
  if (!arguments.is_object())
    return InvalidParams("tools/call: 'arguments' must be an object, not " +
                         std::string(arguments.type_name()));
  if (name == "run_command") return RunCommand(arguments, structured);
  if (name == "read_file") return ReadFile(arguments, structured);
  if (name == "write_file") return WriteFile(arguments, structured, /*append=*/false);
  if (name == "append_file") return WriteFile(arguments, structured, /*append=*/true);
  if (name == "list_dir") return ListDir(arguments, structured);
  if (name == "make_dir") return MakeDir(arguments, structured);
  if (name == "remove") return Remove(arguments, structured);
  return InvalidParams("unknown tool '" + std::string(name) +
                       "': the tools are run_command, read_file, write_file, append_file, "
                       "list_dir, make_dir and remove");
}

Toolbox::Outcome Toolbox::RunCommand(const json& args, bool structured) {
  Arguments in("run_command", args);
  if (auto bad = in.OnlyKeys({"command", "timeout_ms", "dir", "session"})) return std::unexpected(*bad);
  MCP_ASSIGN_ARG(command, in.String("command", true));
  MCP_ASSIGN_ARG(timeout_ms, in.Integer("timeout_ms", 1, kMaxTimeoutMs));
  MCP_ASSIGN_ARG(dir, in.String("dir", false));
  MCP_ASSIGN_ARG(session_name, in.String("session", false));
  if (session_name && !ValidSessionName(*session_name))
    return InvalidParams("run_command: argument 'session' must be 1 to 64 characters of "
                         "A-Z a-z 0-9 _ . -");

  const std::chrono::nanoseconds timeout =
      timeout_ms ? std::chrono::milliseconds(*timeout_ms) : options_.default_timeout;
  Command cmd{
      .path = "/bin/sh",
      .args = {"-c", *command},
      .dir = dir.value_or(options_.default_dir),
      .env = options_.env,
      .timeout = timeout,
      .output_limit = options_.output_limit,
  };
  Expected<Result> result = Fail(Error::Code::Internal, "unreachable");
  std::string note;
  if (!session_name) {
    result = sandbox_.Exec(CallContext(), cmd);
  } else {
    auto it = sessions_.find(*session_name);
    if (it == sessions_.end()) {
      auto* sessioner = As<Sessioner>(sandbox_);
      if (!sessioner)
        return ErrorResult(Error(Error::Code::Unsupported,
                                 "the " + caps_.backend + " backend has no shell sessions"));
      if (sessions_.size() >= options_.max_sessions)
        return ErrorResult(Error(Error::Code::TooLarge,
                                 "at most " + std::to_string(options_.max_sessions) +
                                     " sessions may be open at once; reuse a session name"));
      auto opened = sessioner->NewSession(CallContext());
      if (!opened) return ErrorResult(opened.error());
      if (!options_.default_dir.empty()) {
        // A session starts in the default directory; its later cds are its own.
        auto moved = (*opened)->Exec(CallContext(), {.path = "cd", .args = {"--", options_.default_dir}});
        if (!moved || moved->exit_code != 0) {
          (void)(*opened)->Close();
          return ErrorResult(!moved ? moved.error()
                                    : Error(Error::Code::NotFound,
                                            "cannot start a session in --dir " + options_.default_dir +
                                                ": " + moved->stderr_data));
        }
      }
      it = sessions_.emplace(*session_name, std::move(*opened)).first;
    }
    // `eval` runs the text in the session's own shell, so cd and export last;
    // only an explicit dir runs it in a subshell elsewhere.
    cmd.path = "eval";
    cmd.args = {*command};
    cmd.dir = dir.value_or("");
    result = it->second->Exec(CallContext(), cmd);
    const bool dead = (!result && result.error().code() == Error::Code::Unavailable) ||
                      (result && result->timed_out);
    if (dead) {
      (void)it->second->Close();
      sessions_.erase(it);
      note = "note: session '" + *session_name +
             "' ended; the next call with this name starts a new shell\n";
    }
  }
  if (!result) return ErrorResult(result.error(), note.empty() ? "" : "\n" + note);
  return ToolResult(ResultText(*result, timeout, options_.stop.stop_requested()) + note, sandbox::json::ResultObject(*result, caps_),
                    structured);
}

Toolbox::Outcome Toolbox::ReadFile(const json& args, bool structured) {
  Arguments in("read_file", args);
  if (auto bad = in.OnlyKeys({"path", "max_bytes"})) return std::unexpected(*bad);
  MCP_ASSIGN_ARG(path, in.String("path", true));
  MCP_ASSIGN_ARG(max_bytes,
                 in.Integer("max_bytes", 1, static_cast<std::int64_t>(options_.max_read_bytes)));
  const auto limit = static_cast<std::int64_t>(max_bytes.value_or(
      static_cast<std::int64_t>(options_.default_read_bytes)));
  LimitedRead read;
  if (auto* reader = As<LimitedReader>(sandbox_)) {
    auto got = reader->ReadFileLimit(CallContext(), *path, limit);
    if (!got) return ErrorResult(got.error());
    read = std::move(*got);
  } else {
    auto got = sandbox_.ReadFile(CallContext(), *path);
    if (!got) return ErrorResult(got.error());
    read.data = std::move(*got);
    if (read.data.size() > static_cast<std::size_t>(limit)) {
      read.data.resize(static_cast<std::size_t>(limit));
      read.truncated = true;
    }
  }
  const bool valid = IsValidUtf8(read.data);
  std::string text = read.data;
  if (read.truncated)
    text += "\n[truncated: the file is longer than " + std::to_string(limit) +
            " bytes; pass a larger max_bytes (at most " +
            std::to_string(options_.max_read_bytes) + ")]";
  if (!valid) text += "\n[bytes that are not valid UTF-8 were replaced with U+FFFD]";
  ordered_json structured_content = {{"path", *path},
                                     {"content", std::move(read.data)},
                                     {"bytes", 0},
                                     {"truncated", read.truncated},
                                     {"valid_utf8", valid}};
  structured_content["bytes"] = structured_content["content"].get_ref<const std::string&>().size();
  return ToolResult(std::move(text), std::move(structured_content), structured);
}

Toolbox::Outcome Toolbox::WriteFile(const json& args, bool structured, bool append) {
  const std::string tool = append ? "append_file" : "write_file";
  Arguments in(tool, args);
  if (auto bad = in.OnlyKeys({"path", "content"})) return std::unexpected(*bad);
  MCP_ASSIGN_ARG(path, in.String("path", true));
  MCP_ASSIGN_ARG(content, in.String("content", true));
  Status written;
  if (append) {
    auto* appender = As<Appender>(sandbox_);
    if (!appender)
      return ErrorResult(Error(Error::Code::Unsupported,
                               "the " + caps_.backend + " backend cannot append to files"));
    written = appender->AppendFile(CallContext(), *path, *content, 0644);
  } else {
    written = sandbox_.WriteFile(CallContext(), *path, *content, 0644);
  }
  if (!written) return ErrorResult(written.error());
  const std::size_t bytes = content->size();
  return ToolResult((append ? "appended " : "wrote ") + std::to_string(bytes) + " bytes " +
                        (append ? "to " : "to ") + *path,
                    {{"path", *path}, {"bytes", bytes}}, structured);
}

Toolbox::Outcome Toolbox::ListDir(const json& args, bool structured) {
  Arguments in("list_dir", args);
  if (auto bad = in.OnlyKeys({"path"})) return std::unexpected(*bad);
  MCP_ASSIGN_ARG(path, in.String("path", true));
  auto entries = sandbox_.ListDir(CallContext(), *path);
  if (!entries) return ErrorResult(entries.error());
  std::string text;
  ordered_json list = ordered_json::array();
  for (const DirEntry& entry : *entries) {
    text += entry.name + (entry.is_dir ? "/\n" : "\n");
    list.push_back({{"name", entry.name}, {"is_dir", entry.is_dir}});
  }
  if (text.empty()) text = "(empty directory)\n";
  return ToolResult(std::move(text), {{"path", *path}, {"entries", std::move(list)}}, structured);
}

Toolbox::Outcome Toolbox::MakeDir(const json& args, bool structured) {
  Arguments in("make_dir", args);
  if (auto bad = in.OnlyKeys({"path"})) return std::unexpected(*bad);
  MCP_ASSIGN_ARG(path, in.String("path", true));
  auto* maker = As<DirectoryMaker>(sandbox_);
  if (!maker)
    return ErrorResult(Error(Error::Code::Unsupported,
                             "the " + caps_.backend + " backend cannot make directories"));
  if (auto made = maker->MakeDirAll(CallContext(), *path, 0755); !made)
    return ErrorResult(made.error());
  return ToolResult("created directory " + *path, {{"path", *path}}, structured);
}

Toolbox::Outcome Toolbox::Remove(const json& args, bool structured) {
  Arguments in("remove", args);
  if (auto bad = in.OnlyKeys({"path"})) return std::unexpected(*bad);
  MCP_ASSIGN_ARG(path, in.String("path", true));
  if (auto removed = sandbox_.Remove(CallContext(), *path); !removed)
    return ErrorResult(removed.error());
  return ToolResult("removed " + *path, {{"path", *path}}, structured);
}

}  // namespace sandbox::mcp
