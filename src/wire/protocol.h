// The wire protocol between RemoteSandbox (host) and Serve (agent): framing,
// message types, payload structs and their msgpack mapping, and the checked
// decoder. docs/wire.md is the schema in prose; keep the two in step.
//
// A frame is a 4-byte big-endian body length followed by the body, one
// msgpack array [type, id, body]. Every length is checked against a hard
// maximum before a byte of the body is buffered.
#ifndef SANDBOX_WIRE_PROTOCOL_H_
#define SANDBOX_WIRE_PROTOCOL_H_

// msgpack-cxx without its optional Boost parts, API v3 (what Debian's
// CMake package also sets).
#ifndef MSGPACK_NO_BOOST
#define MSGPACK_NO_BOOST 1
#endif
#ifndef MSGPACK_DEFAULT_API_VERSION
#define MSGPACK_DEFAULT_API_VERSION 3
#endif
#include <msgpack.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/error.h"
#include "sandbox/sandbox.h"

namespace sandbox::wire {

inline constexpr std::string_view kMagic = "sandbox-wire";
inline constexpr std::uint32_t kProtocolVersion = 1;
inline constexpr std::size_t kHeaderBytes = 4;
// The hard cap on a frame body, whatever a peer advertises.
inline constexpr std::uint32_t kMaxFrameBytes = (1u << 20) + (16u << 10);
// The smallest max_frame a peer may advertise.
inline constexpr std::uint32_t kMinFrameBytes = 64u << 10;
// Payload bytes per DATA frame (file contents, Exec output, process streams).
inline constexpr std::uint32_t kChunkBytes = 256u << 10;
// Credit window of each process stream, in bytes.
inline constexpr std::uint32_t kWindowBytes = 512u << 10;
// Bytes a frame adds around a chunk: header, envelope, DATA fields.
inline constexpr std::uint32_t kFrameOverhead = 64;

enum class MsgType : std::uint8_t {
  kHello = 1,
  // Requests, host to agent; each is answered by exactly one kReply.
  kExec = 10,
  kReadFile = 11,
  kWriteFile = 12,
  kAppendFile = 13,
  kRemove = 14,
  kListDir = 15,
  kMakeDirAll = 16,
  kSessionOpen = 17,
  kSessionClose = 18,
  kProcessStart = 19,
  kProcessKill = 20,
  kProcessStderr = 21,
  kProcessRelease = 22,
  kClose = 23,
  // Unanswered messages, host to agent.
  kCancel = 30,
  kStdinClose = 31,
  // Both directions.
  kData = 40,
  kCredit = 41,
  // Agent to host.
  kReply = 50,
  kEntries = 51,
  kExit = 52,
};

// "exec", "read_file", ... for diagnostics; "unknown" otherwise.
std::string_view ToString(MsgType type);
// True for the request types (10..23).
bool IsRequest(MsgType type);

// Streams a DATA frame belongs to.
enum class StreamId : std::uint8_t {
  kStdin = 0,   // Exec stdin, WriteFile/AppendFile data, process stdin
  kStdout = 1,  // Exec result stdout, process stdout
  kStderr = 2,  // Exec result stderr
  kFile = 3,    // ReadFile contents
};

// Body of kHello, sent by both peers first.
struct Hello {
  std::string magic;
  std::uint32_t version = 0;
  std::uint32_t max_frame = 0;     // largest frame body the sender accepts
  std::uint32_t chunk = 0;         // largest DATA payload the sender sends
  std::uint32_t window = 0;        // process stream credit window
  std::uint32_t max_inflight = 0;  // agent: requests it executes at once
  std::uint64_t max_stdin = 0;     // agent: largest Exec stdin
  std::uint64_t max_upload = 0;    // agent: largest WriteFile/AppendFile data
  std::string workdir;             // agent: what WorkdirReporter reports
  MSGPACK_DEFINE(magic, version, max_frame, chunk, window, max_inflight, max_stdin, max_upload,
                 workdir)
};

// Body of kExec and kProcessStart.
struct ExecRequest {
  std::uint64_t session = 0;  // the kSessionOpen id to run in; 0: the sandbox
  std::string path;
  std::vector<std::string> args;
  std::string dir;
  std::vector<std::string> env;
  std::int64_t timeout_ns = 0;
  std::uint64_t output_limit = 0;
  std::uint64_t stdin_size = 0;   // Exec: stdin follows in DATA frames
  std::int64_t deadline_ns = -1;  // time left on the host's Context; -1: none
  MSGPACK_DEFINE(session, path, args, dir, env, timeout_ns, output_limit, stdin_size, deadline_ns)
};

// Body of the file requests.
struct FileRequest {
  std::string path;
  std::uint32_t mode = 0;    // WriteFile, AppendFile, MakeDirAll
  bool limited = false;      // ReadFile: ReadFileLimit semantics with `max`
  std::int64_t max = 0;
  std::uint64_t size = 0;    // WriteFile/AppendFile: data follows in DATA frames
  std::int64_t deadline_ns = -1;
  MSGPACK_DEFINE(path, mode, limited, max, size, deadline_ns)
};

// Body of the requests naming a session or process (and of kCancel, whose
// handle is the id of the request to cancel).
struct HandleRequest {
  std::uint64_t handle = 0;
  MSGPACK_DEFINE(handle)
};

// Reply payload of kExec.
struct ExecReply {
  std::int32_t exit_code = 0;
  std::int64_t duration_ns = 0;
  bool timed_out = false;
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  std::uint64_t stdout_dropped = 0;
  std::uint64_t stderr_dropped = 0;
  std::int32_t signal = 0;  // 0: none
  std::uint64_t stdout_size = 0;
  std::uint64_t stderr_size = 0;
  MSGPACK_DEFINE(exit_code, duration_ns, timed_out, stdout_truncated, stderr_truncated,
                 stdout_dropped, stderr_dropped, signal, stdout_size, stderr_size)
};

// Reply payload of kReadFile.
struct ReadReply {
  bool truncated = false;
  std::uint64_t size = 0;
  MSGPACK_DEFINE(truncated, size)
};

// Reply payload of kProcessStderr.
struct StderrReply {
  std::string snapshot;
  MSGPACK_DEFINE(snapshot)
};

// One element of a kEntries body.
struct WireEntry {
  std::string name;
  bool is_dir = false;
  MSGPACK_DEFINE(name, is_dir)
};

// Body of kCredit.
struct CreditBody {
  std::uint64_t bytes = 0;
  MSGPACK_DEFINE(bytes)
};

// Body of kExit.
struct ExitBody {
  std::int32_t exit_code = 0;
  std::int32_t signal = 0;  // 0: none
  std::string error_code;   // "" unless Wait itself failed
  std::string error_message;
  MSGPACK_DEFINE(exit_code, signal, error_code, error_message)
};

// Body of kData, decoded without copying the payload.
struct DataBody {
  StreamId stream = StreamId::kStdin;
  std::string_view bytes;  // points into the frame
  bool eof = false;
};

// Body of kReply.
struct ReplyBody {
  std::optional<Error> error;
  const msgpack::object* payload = nullptr;  // points into the decoded frame
};

// ---- Encoding ----

// One encoded frame (header included), ready to write.
using EncodedFrame = msgpack::sbuffer;

// Encodes [type, id, body] where body has a msgpack adaptor.
template <class Body>
EncodedFrame Encode(MsgType type, std::uint64_t id, const Body& body);
// Encodes [type, id, []].
EncodedFrame EncodeEmpty(MsgType type, std::uint64_t id);
EncodedFrame EncodeData(std::uint64_t id, StreamId stream, std::string_view bytes, bool eof);
// A reply: error (if any) and a payload (ignored when error is set).
template <class Payload>
EncodedFrame EncodeReply(std::uint64_t id, const Error* error, const Payload& payload);
EncodedFrame EncodeErrorReply(std::uint64_t id, const Error& error);
EncodedFrame EncodeEmptyReply(std::uint64_t id);

inline std::string_view View(const EncodedFrame& frame) {
  return std::string_view(frame.data(), frame.size());
}

// ---- Decoding ----

// Cuts a byte stream into frame bodies. Refuses a zero or oversized length
// as soon as the 4 header bytes are in, before buffering the body. Holds at
// most one maximal frame plus one read's worth of bytes.
class FrameAssembler {
 public:
  explicit FrameAssembler(std::uint32_t max_frame);

  // Where the next read may put bytes (never empty).
  std::span<char> Space();
  void Commit(std::size_t n);

  // The next complete frame body (valid until Compact), nullopt when more
  // bytes are needed, or an Error for a bad length.
  Expected<std::optional<std::string_view>> Next();

  // Drops the frames returned so far; call before the next Space().
  void Compact();

 private:
  std::uint32_t max_frame_;
  std::size_t capacity_;
  std::unique_ptr<char[]> buffer_;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
};

// A decoded frame: the envelope checked, the body still a msgpack object
// (its strings and binaries point into the frame bytes, which must outlive it).
struct DecodedFrame {
  MsgType type = MsgType::kHello;
  std::uint64_t id = 0;
  const msgpack::object* body = nullptr;  // always an array
  msgpack::object_handle handle;
};

// Decodes one frame body: one msgpack array [type, id, body-array] and
// nothing after it, within the unpacker's count and depth limits. Errors are
// InvalidArgument with a description of what was wrong.
Expected<DecodedFrame> DecodeFrame(std::string_view frame);

// Converts a body to a payload struct, refusing wrong types, out-of-range
// integers and negative sizes.
template <class T>
Expected<T> DecodeAs(const msgpack::object& body);

Expected<DataBody> DecodeData(const msgpack::object& body);
Expected<ReplyBody> DecodeReply(const msgpack::object& body);
// Checks magic and version first, then the rest: a peer speaking another
// version gets a clear Unavailable error naming both versions.
Expected<Hello> DecodeHello(const msgpack::object& body);

// The Error an error reply carries, with the code validated by name.
Error ErrorFromWire(std::string_view code, std::string_view message);

// ---- Template definitions ----

namespace internal {
EncodedFrame BeginFrame();
void FinishFrame(EncodedFrame& frame);
}  // namespace internal

template <class Body>
EncodedFrame Encode(MsgType type, std::uint64_t id, const Body& body) {
  EncodedFrame frame = internal::BeginFrame();
  msgpack::packer<msgpack::sbuffer> packer(frame);
  packer.pack_array(3);
  packer.pack(static_cast<std::uint8_t>(type));
  packer.pack(id);
  packer.pack(body);
  internal::FinishFrame(frame);
  return frame;
}

template <class Payload>
EncodedFrame EncodeReply(std::uint64_t id, const Error* error, const Payload& payload) {
  EncodedFrame frame = internal::BeginFrame();
  msgpack::packer<msgpack::sbuffer> packer(frame);
  packer.pack_array(3);
  packer.pack(static_cast<std::uint8_t>(MsgType::kReply));
  packer.pack(id);
  packer.pack_array(3);
  if (error) {
    packer.pack(std::string(sandbox::ToString(error->code())));
    packer.pack(error->message());
    packer.pack_array(0);
  } else {
    packer.pack(std::string());
    packer.pack(std::string());
    packer.pack(payload);
  }
  internal::FinishFrame(frame);
  return frame;
}

template <class T>
Expected<T> DecodeAs(const msgpack::object& body) {
  if (body.type != msgpack::type::ARRAY)
    return Fail(Error::Code::InvalidArgument, "message body is not an array");
  try {
    T value;
    body.convert(value);
    return value;
  } catch (const std::exception& e) {
    return Fail(Error::Code::InvalidArgument, std::string("message body has a wrong type: ") + e.what());
  }
}

}  // namespace sandbox::wire

#endif  // SANDBOX_WIRE_PROTOCOL_H_
