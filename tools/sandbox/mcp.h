// `sandbox mcp`: serve one sandbox to an MCP client over stdio.
#ifndef SANDBOX_TOOLS_SANDBOX_MCP_H_
#define SANDBOX_TOOLS_SANDBOX_MCP_H_

#include <span>
#include <string>

namespace sandbox::cli {

// Runs `sandbox mcp` with the arguments that follow "mcp": opens the
// sandbox the options of `sandbox run` describe, speaks MCP on stdin/stdout
// until stdin closes, closes the sandbox and returns 0. Bad usage or a
// sandbox that cannot open returns 125; SIGINT/SIGTERM/SIGHUP cancel the
// running call, close the sandbox and return 128+N. Logs go to stderr only.
// Requires BlockTerminationSignals() to have run.
int McpCommand(std::span<const std::string> args);

}  // namespace sandbox::cli

#endif  // SANDBOX_TOOLS_SANDBOX_MCP_H_
