// The remote backend plumbing: a Sandbox served over one byte stream.
//
// Every isolated backend is the same three steps: start a boundary, run the
// sandbox agent inside it, and talk to the agent over one byte stream (a pipe
// pair, a socketpair, a Unix socket, a Docker attach stream, a VM serial or
// vsock port). Serve() is the agent's half: it exposes a Sandbox (normally
// the local backend) over the stream. NewRemoteSandbox() is the host's half:
// a Sandbox implementing every optional capability by sending requests over
// the stream. The protocol is described in docs/wire.md.
#ifndef SANDBOX_REMOTE_H_
#define SANDBOX_REMOTE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "sandbox/sandbox.h"

namespace sandbox {

// Options of the host side of the wire. The stream is untrusted: everything
// the agent sends is length-checked against these bounds before it is
// buffered, and any violation marks the sandbox Unavailable.
struct RemoteOptions {
  // The stream to the agent: bytes from the agent are read from `read_fd`,
  // bytes to it are written to `write_fd`. Pass the same descriptor for a
  // socket, or -1 as `write_fd` to mean "the same as read_fd". Ownership of
  // both is transferred to the RemoteSandbox (also when creation fails).
  int read_fd = -1;
  int write_fd = -1;
  // What GetCapabilities() reports. The boundary is decided by whoever
  // launched the agent, never by the agent: nothing it sends changes this.
  Capabilities capabilities{.isolation = Isolation::None, .network = true, .backend = "remote"};
  // Per-stream capture cap of Exec when the Command sets none; the agent is
  // told this cap and any result longer than it marks the sandbox broken.
  std::size_t output_limit = std::size_t{1} << 20;
  // ReadFile refuses (marks broken) a file longer than this as it arrives.
  std::uint64_t max_read_bytes = std::uint64_t{1} << 30;
  // The most directory entries ListDir accepts.
  std::size_t max_dir_entries = std::size_t{1} << 20;
  // How long to wait for the agent's handshake.
  std::chrono::milliseconds handshake_timeout{10000};
  // After a Context is cancelled or expires, how long the agent has to
  // answer the cancelled request before the sandbox is declared broken.
  std::chrono::milliseconds cancel_grace{10000};
  // A write to the stream that makes no progress for this long marks the
  // sandbox broken (the agent stopped reading).
  std::chrono::milliseconds write_stall_timeout{60000};
  // Called once, after the stream has been shut down by Close() (or the
  // destructor): the launcher's hook to reap or tear down the boundary. Its
  // error is returned by that Close().
  std::function<Status()> on_close;
  // Called with every Exec result (of the sandbox and of its sessions) before
  // it is returned: the launcher's hook to add what only the host knows, such
  // as a kill by the boundary's memory limit. Must be thread-safe.
  std::function<void(Result&)> on_exec_result;
};

// Connects to an agent over the stream in `options`, performs the versioned
// handshake, and returns a Sandbox implementing Sandbox and every optional
// capability (Appender, DirectoryMaker, LimitedReader, ProcessHost, Sessioner,
// WorkdirReporter; the workdir comes from the handshake). Fails with
// Unavailable when the peer does not answer, is not a sandbox agent, or
// speaks another protocol version. The returned sandbox is thread-safe; a
// reader thread demultiplexes the agent's answers to the waiting callers.
Expected<std::unique_ptr<Sandbox>> NewRemoteSandbox(RemoteOptions options);

// The static sandbox-agent executable a launcher runs inside its boundary:
// $SANDBOX_AGENT when set, else "sandbox-agent" beside the running
// executable. Thread-safe.
std::string DefaultAgentPath();

// Options of the agent side.
struct ServeOptions {
  // Requests executing at once; further requests are a protocol violation
  // (the host never sends more, it learns this number in the handshake).
  std::uint32_t max_inflight = 64;
  // Long-lived processes at once; StartProcess beyond this is refused.
  std::uint32_t max_processes = 256;
  // Exec stdin and WriteFile/AppendFile data are assembled in memory up to
  // these sizes before the wrapped Sandbox is called.
  std::uint64_t max_stdin_bytes = std::uint64_t{256} << 20;
  std::uint64_t max_upload_bytes = std::uint64_t{1} << 30;
  // Where diagnostics go (the agent's stderr); nullptr for none.
  std::function<void(const std::string&)> log;
};

// Serves `sandbox` (and the optional capabilities it offers) over the stream
// read from `read_fd` and written to `write_fd` (-1: the same as read_fd),
// taking ownership of both. Blocks until the host closes the stream or
// breaks the protocol, then closes every session and process it opened and
// returns. Ok on a clean end of stream. `sandbox` is borrowed and must
// outlive the call.
Status Serve(Sandbox& sandbox, int read_fd, int write_fd, const ServeOptions& options = {});

}  // namespace sandbox

#endif  // SANDBOX_REMOTE_H_
