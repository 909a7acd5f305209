// libFuzzer target over the wire protocol's decoder: the bytes a hostile
// agent (or host) could put on the stream, cut into frames by the same
// FrameAssembler the reader threads use, then decoded as every message type.
// Nothing may crash, read out of bounds, or allocate beyond the frame limit.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "wire/protocol.h"

namespace {

using namespace sandbox::wire;

void DecodeEverything(const msgpack::object& body) {
  (void)DecodeAs<Hello>(body);
  (void)DecodeHello(body);
  (void)DecodeAs<ExecRequest>(body);
  (void)DecodeAs<FileRequest>(body);
  (void)DecodeAs<HandleRequest>(body);
  (void)DecodeAs<ExecReply>(body);
  (void)DecodeAs<ReadReply>(body);
  (void)DecodeAs<StderrReply>(body);
  (void)DecodeAs<CreditBody>(body);
  (void)DecodeAs<ExitBody>(body);
  (void)DecodeAs<std::vector<WireEntry>>(body);
  if (auto data = DecodeData(body); data) {
    volatile std::size_t sink = 0;
    for (char c : data->bytes) sink = sink + static_cast<unsigned char>(c);
  }
  if (auto reply = DecodeReply(body); reply && reply->payload) {
    (void)DecodeAs<ExecReply>(*reply->payload);
    (void)DecodeAs<ReadReply>(*reply->payload);
    (void)DecodeAs<StderrReply>(*reply->payload);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The first byte picks how the stream is split into reads, so frames that
  // straddle reads are exercised too.
  std::size_t read_size = size > 0 ? 1 + data[0] * 97 : 1;
  std::string_view stream(reinterpret_cast<const char*>(data), size);
  if (!stream.empty()) stream.remove_prefix(1);

  FrameAssembler assembler(kMaxFrameBytes);
  while (!stream.empty()) {
    auto space = assembler.Space();
    std::size_t n = std::min({space.size(), stream.size(), read_size});
    std::memcpy(space.data(), stream.data(), n);
    assembler.Commit(n);
    stream.remove_prefix(n);
    for (;;) {
      auto next = assembler.Next();
      if (!next) return 0;  // a bad length ends the stream, as in the reader
      if (!*next) break;
      auto frame = DecodeFrame(**next);
      if (frame) DecodeEverything(*frame->body);
    }
    assembler.Compact();
  }
  return 0;
}
