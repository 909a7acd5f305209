// libFuzzer target over the MCP server's request handler: every line of
// the input is one message from a hostile client, handled in order by one
// Server (so initialize followed by tools/call is reachable). The sandbox
// is an in-memory fake: the fuzzer exercises the protocol and argument
// handling, never runs a command. Nothing may crash, leak or throw, and
// every response must be one line of valid JSON.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "mcp/server.h"

namespace {

using namespace sandbox;

// Echoes its inputs back as outputs, hostile bytes included.
class FakeSandbox final : public Sandbox, public Appender, public DirectoryMaker, public LimitedReader {
 public:
  Capabilities GetCapabilities() const override {
    return {.isolation = Isolation::None, .network = false, .backend = "fake", .detail = ""};
  }
  Expected<Result> Exec(const Context&, const Command& cmd) override {
    if (cmd.args.size() == 2 && cmd.args[1].starts_with("fail"))
      return Fail(Error::Code::Unavailable, "fake failure " + cmd.args[1]);
    Result result;
    result.exit_code = static_cast<int>(cmd.args.back().size() % 256);
    result.stdout_data = cmd.args.back();
    result.stderr_data = cmd.dir;
    result.timed_out = cmd.timeout.count() % 2 == 1;
    return result;
  }
  Expected<std::string> ReadFile(const Context&, std::string_view path) override {
    return std::string(path);
  }
  Expected<LimitedRead> ReadFileLimit(const Context&, std::string_view path,
                                      std::int64_t max) override {
    LimitedRead read{.data = std::string(path), .truncated = false};
    if (static_cast<std::int64_t>(read.data.size()) > max) {
      read.data.resize(static_cast<std::size_t>(max));
      read.truncated = true;
    }
    return read;
  }
  Status WriteFile(const Context&, std::string_view path, std::string_view, FileMode) override {
    if (path.starts_with("..")) return Fail(Error::Code::EscapesRoot, std::string(path));
    return {};
  }
  Status AppendFile(const Context&, std::string_view path, std::string_view, FileMode) override {
    return WriteFile({}, path, {}, 0);
  }
  Status MakeDirAll(const Context&, std::string_view path, FileMode) override {
    return WriteFile({}, path, {}, 0);
  }
  Status Remove(const Context&, std::string_view path) override { return WriteFile({}, path, {}, 0); }
  Expected<std::vector<DirEntry>> ListDir(const Context&, std::string_view path) override {
    return std::vector<DirEntry>{{.name = std::string(path), .is_dir = path.size() % 2 == 0}};
  }
  Status Close() override { return {}; }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FakeSandbox sandbox;
  mcp::Server server(sandbox, mcp::ToolOptions{});
  std::string_view input(reinterpret_cast<const char*>(data), size);
  while (!input.empty()) {
    std::size_t newline = input.find('\n');
    std::string_view line = input.substr(0, newline);
    input.remove_prefix(newline == std::string_view::npos ? input.size() : newline + 1);
    std::optional<std::string> reply = server.Handle(line);
    if (!reply) continue;
    if (reply->find('\n') != std::string::npos) std::abort();
    if (nlohmann::json::parse(*reply, nullptr, false).is_discarded()) std::abort();
  }
  return 0;
}
