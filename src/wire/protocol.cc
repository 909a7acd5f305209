#include "wire/protocol.h"

#include <array>
#include <cstring>
#include <utility>
#include <vector>

namespace sandbox::wire {
namespace {

// Bounds the decoder's work and memory per frame: a frame of at most
// kMaxFrameBytes can describe at most this many objects.
const msgpack::unpack_limit kUnpackLimit(/*array=*/1u << 16, /*map=*/64, /*str=*/kMaxFrameBytes,
                                         /*bin=*/kMaxFrameBytes, /*ext=*/0, /*depth=*/8);

// Strings and binaries point into the frame instead of being copied.
bool ReferenceStrings(msgpack::type::object_type type, std::size_t, void*) {
  return type == msgpack::type::STR || type == msgpack::type::BIN;
}

Error Malformed(std::string what) {
  return Error(Error::Code::InvalidArgument, "malformed frame: " + std::move(what));
}

bool KnownType(std::uint64_t type) {
  switch (static_cast<MsgType>(type)) {
    case MsgType::kHello:
    case MsgType::kExec:
    case MsgType::kReadFile:
    case MsgType::kWriteFile:
    case MsgType::kAppendFile:
    case MsgType::kRemove:
    case MsgType::kListDir:
    case MsgType::kMakeDirAll:
    case MsgType::kSessionOpen:
    case MsgType::kSessionClose:
    case MsgType::kProcessStart:
    case MsgType::kProcessKill:
    case MsgType::kProcessStderr:
    case MsgType::kProcessRelease:
    case MsgType::kClose:
    case MsgType::kCancel:
    case MsgType::kStdinClose:
    case MsgType::kData:
    case MsgType::kCredit:
    case MsgType::kReply:
    case MsgType::kEntries:
    case MsgType::kExit:
      return type <= 0xff;
  }
  return false;
}

std::string_view AsString(const msgpack::object& object) {
  return std::string_view(object.via.str.ptr, object.via.str.size);
}

}  // namespace

std::string_view ToString(MsgType type) {
  switch (type) {
    case MsgType::kHello: return "hello";
    case MsgType::kExec: return "exec";
    case MsgType::kReadFile: return "read_file";
    case MsgType::kWriteFile: return "write_file";
    case MsgType::kAppendFile: return "append_file";
    case MsgType::kRemove: return "remove";
    case MsgType::kListDir: return "list_dir";
    case MsgType::kMakeDirAll: return "make_dir_all";
    case MsgType::kSessionOpen: return "session_open";
    case MsgType::kSessionClose: return "session_close";
    case MsgType::kProcessStart: return "process_start";
    case MsgType::kProcessKill: return "process_kill";
    case MsgType::kProcessStderr: return "process_stderr";
    case MsgType::kProcessRelease: return "process_release";
    case MsgType::kClose: return "close";
    case MsgType::kCancel: return "cancel";
    case MsgType::kStdinClose: return "stdin_close";
    case MsgType::kData: return "data";
    case MsgType::kCredit: return "credit";
    case MsgType::kReply: return "reply";
    case MsgType::kEntries: return "entries";
    case MsgType::kExit: return "exit";
  }
  return "unknown";
}

bool IsRequest(MsgType type) {
  auto value = static_cast<std::uint8_t>(type);
  return value >= static_cast<std::uint8_t>(MsgType::kExec) &&
         value <= static_cast<std::uint8_t>(MsgType::kClose);
}

namespace internal {

EncodedFrame BeginFrame() {
  EncodedFrame frame(512);
  const char header[kHeaderBytes] = {};
  frame.write(header, kHeaderBytes);
  return frame;
}

void FinishFrame(EncodedFrame& frame) {
  const auto length = static_cast<std::uint32_t>(frame.size() - kHeaderBytes);
  char* header = frame.data();
  header[0] = static_cast<char>((length >> 24) & 0xff);
  header[1] = static_cast<char>((length >> 16) & 0xff);
  header[2] = static_cast<char>((length >> 8) & 0xff);
  header[3] = static_cast<char>(length & 0xff);
}

}  // namespace internal

EncodedFrame EncodeEmpty(MsgType type, std::uint64_t id) {
  EncodedFrame frame = internal::BeginFrame();
  msgpack::packer<msgpack::sbuffer> packer(frame);
  packer.pack_array(3);
  packer.pack(static_cast<std::uint8_t>(type));
  packer.pack(id);
  packer.pack_array(0);
  internal::FinishFrame(frame);
  return frame;
}

EncodedFrame EncodeData(std::uint64_t id, StreamId stream, std::string_view bytes, bool eof) {
  EncodedFrame frame(bytes.size() + kFrameOverhead);
  const char header[kHeaderBytes] = {};
  frame.write(header, kHeaderBytes);
  msgpack::packer<msgpack::sbuffer> packer(frame);
  packer.pack_array(3);
  packer.pack(static_cast<std::uint8_t>(MsgType::kData));
  packer.pack(id);
  packer.pack_array(3);
  packer.pack(static_cast<std::uint8_t>(stream));
  packer.pack_bin(static_cast<std::uint32_t>(bytes.size()));
  packer.pack_bin_body(bytes.data(), static_cast<std::uint32_t>(bytes.size()));
  packer.pack(eof);
  internal::FinishFrame(frame);
  return frame;
}

EncodedFrame EncodeErrorReply(std::uint64_t id, const Error& error) {
  return EncodeReply(id, &error, 0);
}

EncodedFrame EncodeEmptyReply(std::uint64_t id) {
  return EncodeReply(id, nullptr, std::vector<int>{});  // an empty array payload
}

// ---- FrameAssembler ----

FrameAssembler::FrameAssembler(std::uint32_t max_frame)
    : max_frame_(std::min(max_frame, kMaxFrameBytes)),
      capacity_(kHeaderBytes + max_frame_ + (64u << 10)),
      // Not zero-filled: pages are only touched (made resident) when used.
      buffer_(std::make_unique_for_overwrite<char[]>(capacity_)) {}

std::span<char> FrameAssembler::Space() {
  return std::span<char>(buffer_.get() + end_, capacity_ - end_);
}

void FrameAssembler::Commit(std::size_t n) { end_ += std::min(n, capacity_ - end_); }

Expected<std::optional<std::string_view>> FrameAssembler::Next() {
  const std::size_t available = end_ - begin_;
  if (available < kHeaderBytes) return std::nullopt;
  const auto* header = reinterpret_cast<const unsigned char*>(buffer_.get() + begin_);
  const std::uint32_t length = (std::uint32_t{header[0]} << 24) | (std::uint32_t{header[1]} << 16) |
                               (std::uint32_t{header[2]} << 8) | std::uint32_t{header[3]};
  if (length == 0) return Fail(Malformed("a frame of length 0"));
  if (length > max_frame_)
    return Fail(Malformed("a frame of " + std::to_string(length) + " bytes exceeds the limit of " +
                          std::to_string(max_frame_)));
  if (available < kHeaderBytes + length) return std::nullopt;
  std::string_view body(buffer_.get() + begin_ + kHeaderBytes, length);
  begin_ += kHeaderBytes + length;
  return body;
}

void FrameAssembler::Compact() {
  if (begin_ == 0) return;
  const std::size_t left = end_ - begin_;
  if (left > 0) std::memmove(buffer_.get(), buffer_.get() + begin_, left);
  begin_ = 0;
  end_ = left;
}

// ---- Decoding ----

Expected<DecodedFrame> DecodeFrame(std::string_view frame) {
  DecodedFrame decoded;
  try {
    std::size_t offset = 0;
    decoded.handle = msgpack::unpack(frame.data(), frame.size(), offset, ReferenceStrings, nullptr,
                                     kUnpackLimit);
    if (offset != frame.size())
      return Fail(Malformed(std::to_string(frame.size() - offset) + " bytes after the message"));
  } catch (const std::exception& e) {
    return Fail(Malformed(std::string("not msgpack: ") + e.what()));
  }
  const msgpack::object& root = decoded.handle.get();
  if (root.type != msgpack::type::ARRAY || root.via.array.size != 3)
    return Fail(Malformed("the message is not an array [type, id, body]"));
  const msgpack::object& type = root.via.array.ptr[0];
  const msgpack::object& id = root.via.array.ptr[1];
  const msgpack::object& body = root.via.array.ptr[2];
  if (type.type != msgpack::type::POSITIVE_INTEGER || !KnownType(type.via.u64))
    return Fail(Malformed("unknown message type"));
  if (id.type != msgpack::type::POSITIVE_INTEGER) return Fail(Malformed("the id is not an unsigned integer"));
  if (body.type != msgpack::type::ARRAY) return Fail(Malformed("the body is not an array"));
  decoded.type = static_cast<MsgType>(type.via.u64);
  decoded.id = id.via.u64;
  decoded.body = &body;
  return decoded;
}

Expected<DataBody> DecodeData(const msgpack::object& body) {
  if (body.type != msgpack::type::ARRAY || body.via.array.size != 3)
    return Fail(Malformed("data is not [stream, bytes, eof]"));
  const msgpack::object& stream = body.via.array.ptr[0];
  const msgpack::object& bytes = body.via.array.ptr[1];
  const msgpack::object& eof = body.via.array.ptr[2];
  if (stream.type != msgpack::type::POSITIVE_INTEGER || stream.via.u64 > 3)
    return Fail(Malformed("data names an unknown stream"));
  if (bytes.type != msgpack::type::BIN) return Fail(Malformed("data bytes are not binary"));
  if (eof.type != msgpack::type::BOOLEAN) return Fail(Malformed("data eof is not a boolean"));
  return DataBody{.stream = static_cast<StreamId>(stream.via.u64),
                  .bytes = std::string_view(bytes.via.bin.ptr, bytes.via.bin.size),
                  .eof = eof.via.boolean};
}

Expected<ReplyBody> DecodeReply(const msgpack::object& body) {
  if (body.type != msgpack::type::ARRAY || body.via.array.size != 3)
    return Fail(Malformed("reply is not [code, message, payload]"));
  const msgpack::object& code = body.via.array.ptr[0];
  const msgpack::object& message = body.via.array.ptr[1];
  if (code.type != msgpack::type::STR || message.type != msgpack::type::STR)
    return Fail(Malformed("reply code or message is not a string"));
  ReplyBody reply;
  reply.payload = &body.via.array.ptr[2];
  if (code.via.str.size > 0) reply.error = ErrorFromWire(AsString(code), AsString(message));
  return reply;
}

Expected<Hello> DecodeHello(const msgpack::object& body) {
  if (body.type != msgpack::type::ARRAY || body.via.array.size < 2 ||
      body.via.array.ptr[0].type != msgpack::type::STR || AsString(body.via.array.ptr[0]) != kMagic)
    return Fail(Error::Code::Unavailable,
                "the peer is not a sandbox agent (its first message lacks the '" +
                    std::string(kMagic) + "' magic)");
  const msgpack::object& version = body.via.array.ptr[1];
  if (version.type != msgpack::type::POSITIVE_INTEGER || version.via.u64 != kProtocolVersion)
    return Fail(Error::Code::Unavailable,
                "the sandbox agent speaks wire protocol version " +
                    (version.type == msgpack::type::POSITIVE_INTEGER ? std::to_string(version.via.u64)
                                                                     : std::string("(invalid)")) +
                    " but this program speaks version " + std::to_string(kProtocolVersion) +
                    ": use the sandbox-agent built with this version of sandbox");
  auto hello = DecodeAs<Hello>(body);
  if (!hello) return Fail(Error::Code::Unavailable, "the sandbox agent's hello is " + hello.error().message());
  if (hello->max_frame < kMinFrameBytes || hello->chunk == 0 ||
      hello->chunk + kFrameOverhead > std::min(hello->max_frame, kMaxFrameBytes) ||
      hello->window < hello->chunk)
    return Fail(Error::Code::Unavailable, "the sandbox agent's hello advertises impossible limits");
  return hello;
}

Error ErrorFromWire(std::string_view code, std::string_view message) {
  Error::Code parsed = ErrorCodeFromString(code);
  std::string text(message);
  if (parsed == Error::Code::Internal && code != sandbox::ToString(Error::Code::Internal))
    text = "(unknown error code '" + std::string(code.substr(0, 64)) + "') " + text;
  return Error(parsed, std::move(text));
}

}  // namespace sandbox::wire
