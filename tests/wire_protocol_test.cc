// The wire protocol's framing and checked decoder, without any stream.
#include "wire/protocol.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace sandbox::wire {
namespace {

std::string Header(std::uint32_t length) {
  std::string out(4, '\0');
  out[0] = static_cast<char>(length >> 24);
  out[1] = static_cast<char>(length >> 16);
  out[2] = static_cast<char>(length >> 8);
  out[3] = static_cast<char>(length);
  return out;
}

void Feed(FrameAssembler& assembler, std::string_view bytes) {
  while (!bytes.empty()) {
    auto space = assembler.Space();
    std::size_t n = std::min(space.size(), bytes.size());
    std::memcpy(space.data(), bytes.data(), n);
    assembler.Commit(n);
    bytes.remove_prefix(n);
  }
}

TEST(WireFraming, OversizedLengthIsRefusedBeforeTheBodyArrives) {
  FrameAssembler assembler(kMaxFrameBytes);
  Feed(assembler, Header(0xffffffffu));
  auto next = assembler.Next();
  ASSERT_FALSE(next);
  EXPECT_EQ(next.error().code(), Error::Code::InvalidArgument);
  EXPECT_NE(next.error().message().find("4294967295"), std::string::npos) << next.error().message();

  FrameAssembler just_over(kMaxFrameBytes);
  Feed(just_over, Header(kMaxFrameBytes + 1));
  EXPECT_FALSE(just_over.Next());
  FrameAssembler zero(kMaxFrameBytes);
  Feed(zero, Header(0));
  EXPECT_FALSE(zero.Next());
}

TEST(WireFraming, FramesSplitAcrossReadsAndPackedTogetherAreCut) {
  auto a = EncodeData(7, StreamId::kStdout, "hello", false);
  auto b = EncodeEmpty(MsgType::kClose, 8);
  std::string stream = std::string(View(a)) + std::string(View(b));
  FrameAssembler assembler(kMaxFrameBytes);
  // One byte at a time: nothing until a frame is complete.
  std::vector<std::string> frames;
  for (char c : stream) {
    Feed(assembler, std::string_view(&c, 1));
    for (;;) {
      auto next = assembler.Next();
      ASSERT_TRUE(next);
      if (!*next) break;
      frames.emplace_back(**next);
    }
    assembler.Compact();
  }
  ASSERT_EQ(frames.size(), 2u);
  auto first = DecodeFrame(frames[0]);
  ASSERT_TRUE(first) << first.error().ToString();
  EXPECT_EQ(first->type, MsgType::kData);
  EXPECT_EQ(first->id, 7u);
  auto data = DecodeData(*first->body);
  ASSERT_TRUE(data);
  EXPECT_EQ(data->bytes, "hello");
  EXPECT_EQ(data->stream, StreamId::kStdout);
  EXPECT_FALSE(data->eof);
  auto second = DecodeFrame(frames[1]);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->type, MsgType::kClose);
  EXPECT_EQ(second->id, 8u);
}

TEST(WireDecode, GarbageTrailingBytesAndWrongShapesAreRefused) {
  EXPECT_FALSE(DecodeFrame("\xc1"));                 // never-used msgpack byte
  EXPECT_FALSE(DecodeFrame("\x93\x01"));             // truncated array
  EXPECT_FALSE(DecodeFrame(std::string("\x93\x01\x01\x90\x00", 5)));  // trailing byte
  EXPECT_FALSE(DecodeFrame("\x92\x01\x01"));         // two elements
  EXPECT_FALSE(DecodeFrame("\x93\x63\x01\x90"));     // unknown type 99
  EXPECT_FALSE(DecodeFrame("\x93\x0a\xff\x90"));     // negative id
  EXPECT_FALSE(DecodeFrame("\x93\x0a\x01\x01"));     // body not an array
  // A deeply nested body exceeds the depth limit instead of recursing.
  std::string deep = "\x93\x0a\x01";
  for (int i = 0; i < 100; ++i) deep += '\x91';
  deep += '\x90';
  EXPECT_FALSE(DecodeFrame(deep));
  // An array announcing 2^32-1 elements in 9 bytes allocates nothing.
  EXPECT_FALSE(DecodeFrame("\x93\x0a\x01\xdd\xff\xff\xff\xff"));
}

TEST(WireDecode, WrongFieldTypesAreErrorsNotCrashes) {
  // exit_code as a string, stdout_size negative.
  msgpack::sbuffer body;
  msgpack::packer<msgpack::sbuffer> packer(body);
  packer.pack_array(3);
  packer.pack(std::string("zero"));
  packer.pack(-1);
  packer.pack(true);
  auto handle = msgpack::unpack(body.data(), body.size());
  EXPECT_FALSE(DecodeAs<ExecReply>(handle.get()));
  EXPECT_FALSE(DecodeAs<CreditBody>(handle.get()));
  EXPECT_FALSE(DecodeData(handle.get()));
  EXPECT_FALSE(DecodeReply(handle.get()));
}

TEST(WireDecode, RequestsRoundTrip) {
  ExecRequest request{.session = 3,
                      .path = "/bin/echo",
                      .args = {"a", std::string("b\0c", 3)},
                      .dir = "sub",
                      .env = {"K=V"},
                      .timeout_ns = 5,
                      .output_limit = 100,
                      .stdin_size = 9,
                      .deadline_ns = -1};
  auto frame = Encode(MsgType::kExec, 42, request);
  FrameAssembler assembler(kMaxFrameBytes);
  Feed(assembler, View(frame));
  auto body = assembler.Next();
  ASSERT_TRUE(body && *body);
  auto decoded = DecodeFrame(**body);
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded->type, MsgType::kExec);
  EXPECT_EQ(decoded->id, 42u);
  auto back = DecodeAs<ExecRequest>(*decoded->body);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->path, "/bin/echo");
  EXPECT_EQ(back->args, request.args);
  EXPECT_EQ(back->session, 3u);
  EXPECT_EQ(back->deadline_ns, -1);
}

TEST(WireDecode, ErrorsCrossTheWireByName) {
  Error error(Error::Code::EscapesRoot, "openat2 '../x': escapes");
  auto frame = EncodeErrorReply(5, error);
  auto decoded = DecodeFrame(View(frame).substr(kHeaderBytes));
  ASSERT_TRUE(decoded);
  auto reply = DecodeReply(*decoded->body);
  ASSERT_TRUE(reply);
  ASSERT_TRUE(reply->error);
  EXPECT_EQ(reply->error->code(), Error::Code::EscapesRoot);
  EXPECT_EQ(reply->error->message(), "openat2 '../x': escapes");

  Error unknown = ErrorFromWire("made_up_code", "boom");
  EXPECT_EQ(unknown.code(), Error::Code::Internal);
  EXPECT_NE(unknown.message().find("made_up_code"), std::string::npos);
}

TEST(WireDecode, HelloVersionMismatchIsAClearUnavailable) {
  Hello hello{.magic = std::string(kMagic), .version = 99, .max_frame = kMaxFrameBytes,
              .chunk = kChunkBytes, .window = kWindowBytes};
  auto frame = Encode(MsgType::kHello, 0, hello);
  auto decoded = DecodeFrame(View(frame).substr(kHeaderBytes));
  ASSERT_TRUE(decoded);
  auto checked = DecodeHello(*decoded->body);
  ASSERT_FALSE(checked);
  EXPECT_EQ(checked.error().code(), Error::Code::Unavailable);
  EXPECT_NE(checked.error().message().find("version 99"), std::string::npos);

  hello.magic = "something-else";
  hello.version = kProtocolVersion;
  auto other = Encode(MsgType::kHello, 0, hello);
  auto not_agent = DecodeHello(*DecodeFrame(View(other).substr(kHeaderBytes))->body);
  ASSERT_FALSE(not_agent);
  EXPECT_NE(not_agent.error().message().find("not a sandbox agent"), std::string::npos);
}

}  // namespace
}  // namespace sandbox::wire
