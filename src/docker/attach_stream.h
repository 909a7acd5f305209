// The agent's stdio through a Docker attach connection, as the plain byte
// stream RemoteSandbox reads: a relay thread takes the daemon's 8-byte-header
// frames apart (Tty=false multiplexes stdout and stderr) and passes the
// stdout bytes to one end of a socketpair; the agent's stderr goes to a
// diagnostics fd. Writes (the agent's stdin) go to the attach socket as they
// are: that direction is raw.
#ifndef SANDBOX_DOCKER_ATTACH_STREAM_H_
#define SANDBOX_DOCKER_ATTACH_STREAM_H_

#include <string>
#include <thread>

#include "os/unique_fd.h"
#include "sandbox/error.h"

namespace sandbox::docker {

// Frame headers: stream type (1 stdout, 2 stderr; nothing else may come from
// the daemon), three zero bytes, then the payload length, big-endian.
inline constexpr std::size_t kFrameHeaderBytes = 8;

// Owns the attach socket and the relay thread. Destruction (or Stop) shuts
// both directions down and joins the thread. Not copyable or movable.
class AttachStream {
 public:
  // Takes the hijacked `attach` socket and any stream bytes that arrived with
  // the attach answer. `stderr_fd` (borrowed, -1 for nowhere) receives the
  // agent's stderr.
  static Expected<std::unique_ptr<AttachStream>> Start(os::UniqueFd attach, std::string leftover,
                                                       int stderr_fd);
  AttachStream(const AttachStream&) = delete;
  AttachStream& operator=(const AttachStream&) = delete;
  ~AttachStream();

  // The descriptors for RemoteOptions (ownership passes to the caller, once):
  // read the agent's stdout from the first, write its stdin to the second.
  os::UniqueFd TakeReadFd() { return std::move(read_fd_); }
  os::UniqueFd TakeWriteFd() { return std::move(write_fd_); }

  // Shuts the connection down and joins the relay. Idempotent.
  void Stop();

  // Why the relay ended early ("" while it runs or after a clean end).
  std::string violation() const;

 private:
  AttachStream() = default;
  void Relay(std::string leftover);

  os::UniqueFd attach_;    // the daemon's socket (the relay reads it)
  os::UniqueFd relay_end_; // the relay writes the agent's stdout here
  os::UniqueFd read_fd_;   // the other end, for RemoteSandbox
  os::UniqueFd write_fd_;  // a dup of attach_, for RemoteSandbox
  int stderr_fd_ = -1;
  std::string violation_;  // written by the relay before it ends
  std::thread thread_;
};

}  // namespace sandbox::docker

#endif  // SANDBOX_DOCKER_ATTACH_STREAM_H_
