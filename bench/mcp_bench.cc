// mcp_bench: what the MCP protocol adds to a command.
//
// 1,000 run_command calls of `true` through a real `sandbox mcp --backend
// local` process (JSON-RPC over its stdin/stdout pipes), against 1,000
// direct library Exec calls of the same command (/bin/sh -c true) on a local
// sandbox in this process, and 1,000 calls through Server::Handle in this
// process (the JSON work alone, no pipes). The three are interleaved in
// rounds of 50 calls so machine noise hits them alike; each call is timed
// on its own and the medians are compared. The goal: the protocol adds at
// most 0.3 ms per call (median over the server, minus median direct).
// Nothing is asserted on time; a wrong result (a non-zero exit code, a
// protocol error) exits 1.
//
//   mcp_bench [CALLS]     (default 1000; run as root, like sandbox_bench)
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mcp/server.h"
#include "sandbox/local.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRound = 50;

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "mcp_bench: %s\n", message.c_str());
  std::exit(1);
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string CallLine(int id) {
  return R"({"jsonrpc":"2.0","id":)" + std::to_string(id) +
         R"(,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"true"}}})" "\n";
}

void CheckResponse(const std::string& line, int id) {
  auto response = nlohmann::json::parse(line, nullptr, false);
  if (response.is_discarded() || response["id"] != id || !response.contains("result") ||
      response["result"]["isError"] != false ||
      response["result"]["structuredContent"]["exit_code"] != 0)
    Die("wrong response to call " + std::to_string(id) + ": " + line);
}

// `sandbox mcp` as a child, spoken to over pipes.
class ServerProcess {
 public:
  explicit ServerProcess(const std::string& workspace) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) Die("pipe2");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);  // its log lines
    std::vector<std::string> args = {SANDBOX_CLI_PATH, "mcp", "--backend", "local", "--workspace", workspace};
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, SANDBOX_CLI_PATH, &actions, nullptr, argv.data(), environ) != 0)
      Die("cannot start " SANDBOX_CLI_PATH);
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = out[0];
    Send(R"({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}})" "\n");
    ReadLine();
    Send(R"({"jsonrpc":"2.0","method":"notifications/initialized"})" "\n");
  }
  ~ServerProcess() {
    close(to_);
    int status = 0;
    waitpid(pid_, &status, 0);
    close(from_);
  }
  void Send(const std::string& line) {
    if (write(to_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) Die("write");
  }
  std::string ReadLine() {
    for (;;) {
      std::size_t newline = buffer_.find('\n');
      if (newline != std::string::npos) {
        std::string line = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        return line;
      }
      char chunk[65536];
      ssize_t got = read(from_, chunk, sizeof chunk);
      if (got <= 0) Die("the server closed its stdout");
      buffer_.append(chunk, static_cast<std::size_t>(got));
    }
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1;
  int from_ = -1;
  std::string buffer_;
};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

}  // namespace

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 1000;
  if (calls < kRound) Die("CALLS must be at least 50");
  const std::string workspace =
      std::filesystem::temp_directory_path() / ("mcp-bench-" + std::to_string(getpid()));
  std::filesystem::create_directories(workspace);

  sandbox::LocalOptions options;
  options.root = workspace;
  auto made = sandbox::NewLocalSandbox(options);
  if (!made) Die(made.error().ToString());
  std::unique_ptr<sandbox::Sandbox> direct = std::move(*made);
  made = sandbox::NewLocalSandbox(options);
  if (!made) Die(made.error().ToString());
  std::unique_ptr<sandbox::Sandbox> in_process_sandbox = std::move(*made);
  sandbox::mcp::Server in_process(*in_process_sandbox, {});
  in_process.Handle(R"({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18"}})");
  ServerProcess server(workspace);

  const sandbox::Command command{.path = "/bin/sh", .args = {"-c", "true"}};
  std::vector<double> via_server, via_handler, via_exec;
  int id = 1;
  for (int done = 0; done < calls; done += kRound) {
    for (int i = 0; i < kRound; ++i, ++id) {
      const std::string line = CallLine(id);
      auto start = Clock::now();
      server.Send(line);
      std::string response = server.ReadLine();
      via_server.push_back(Ms(Clock::now() - start));
      CheckResponse(response, id);
    }
    for (int i = 0; i < kRound; ++i) {
      const std::string line = CallLine(id);
      auto start = Clock::now();
      std::optional<std::string> response = in_process.Handle(line);
      via_handler.push_back(Ms(Clock::now() - start));
      CheckResponse(response.value_or(""), id++);
    }
    for (int i = 0; i < kRound; ++i) {
      auto start = Clock::now();
      auto result = direct->Exec({}, command);
      via_exec.push_back(Ms(Clock::now() - start));
      if (!result || result->exit_code != 0) Die("direct Exec failed");
    }
  }
  (void)direct->Close();
  (void)in_process_sandbox->Close();
  std::filesystem::remove_all(workspace);

  const double exec_ms = Median(via_exec);
  const double server_ms = Median(via_server);
  const double handler_ms = Median(via_handler);
  std::printf("%d calls each, medians per call:\n", calls);
  std::printf("  direct Exec (/bin/sh -c true)          %8.3f ms\n", exec_ms);
  std::printf("  Server::Handle in process (JSON only)  %8.3f ms  (+%.3f ms)\n", handler_ms,
              handler_ms - exec_ms);
  std::printf("  sandbox mcp over pipes                 %8.3f ms  (+%.3f ms, ratio %.2f)\n",
              server_ms, server_ms - exec_ms, server_ms / exec_ms);
  std::printf("goal: the protocol adds <= 0.300 ms per call: %s\n",
              server_ms - exec_ms <= 0.3 ? "met" : "MISSED");
  return 0;
}
