// RemoteSandbox against a hostile agent: a fake peer on a socketpair that
// sends oversized lengths, garbage, unknown ids, more output than allowed, or
// nothing at all. Every case must end in Unavailable (or the Context's
// error), never a crash, a hang or unbounded memory.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "os/unique_fd.h"
#include "sandbox/remote.h"
#include "test_util.h"
#include "wire/protocol.h"

namespace sandbox::testing {
namespace {

using namespace std::chrono_literals;
using wire::MsgType;
using Clock = std::chrono::steady_clock;

// One frame the host sent, copied out of the stream.
struct HostFrame {
  MsgType type = MsgType::kHello;
  std::uint64_t id = 0;
  std::string bytes;  // the frame body
};

// The agent's end of a socketpair, driven by the test.
class FakeAgent {
 public:
  FakeAgent() : assembler_(wire::kMaxFrameBytes) {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    host_fd_ = fds[0];
    fd_.reset(fds[1]);
  }
  ~FakeAgent() {
    if (script_.joinable()) script_.join();
    if (host_fd_ >= 0) close(host_fd_);
  }

  // The host's end, to hand to RemoteOptions.
  int TakeHostFd() { return std::exchange(host_fd_, -1); }

  void SendRaw(std::string_view bytes) {
    while (!bytes.empty()) {
      long n = send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
  }
  void Send(const wire::EncodedFrame& frame) { SendRaw(wire::View(frame)); }

  void SendHello(std::uint32_t version = wire::kProtocolVersion) {
    Send(wire::Encode(MsgType::kHello, 0,
                      wire::Hello{.magic = std::string(wire::kMagic),
                                  .version = version,
                                  .max_frame = wire::kMaxFrameBytes,
                                  .chunk = wire::kChunkBytes,
                                  .window = wire::kWindowBytes,
                                  .max_inflight = 8,
                                  .max_stdin = 1 << 20,
                                  .max_upload = 1 << 20,
                                  .workdir = "/workspace"}));
  }

  // The next frame from the host of `type` (others are skipped), or nullopt
  // after 5 s or at end of stream.
  std::optional<HostFrame> Next(MsgType type) {
    auto deadline = Clock::now() + 5s;
    for (;;) {
      auto body = assembler_.Next();
      if (!body) return std::nullopt;
      if (*body) {
        auto frame = wire::DecodeFrame(**body);
        if (!frame) return std::nullopt;
        if (frame->type == type) return HostFrame{frame->type, frame->id, std::string(**body)};
        continue;
      }
      assembler_.Compact();
      pollfd pfd{fd_.get(), POLLIN, 0};
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0 || poll(&pfd, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
      auto space = assembler_.Space();
      long n = read(fd_.get(), space.data(), space.size());
      if (n <= 0) return std::nullopt;
      assembler_.Commit(static_cast<std::size_t>(n));
    }
  }

  // Runs `script` on a thread (joined by the destructor).
  void Run(std::function<void(FakeAgent&)> script) {
    script_ = std::thread([this, script = std::move(script)] { script(*this); });
  }

  void CloseStream() { fd_.reset(); }

 private:
  int host_fd_ = -1;
  os::UniqueFd fd_;
  wire::FrameAssembler assembler_;
  std::thread script_;
};

RemoteOptions OptionsFor(FakeAgent& agent) {
  RemoteOptions options;
  options.read_fd = agent.TakeHostFd();
  options.handshake_timeout = 2s;
  options.cancel_grace = 300ms;
  return options;
}

std::unique_ptr<Sandbox> Connect(FakeAgent& agent, RemoteOptions options) {
  agent.SendHello();
  auto made = NewRemoteSandbox(std::move(options));
  EXPECT_TRUE(made) << made.error().ToString();
  return made ? std::move(*made) : nullptr;
}

// Asserts every kind of later call fails with Unavailable, quickly.
void ExpectBroken(Sandbox& sandbox) {
  auto start = Clock::now();
  auto exec = sandbox.Exec({}, Command{.path = "true"});
  ASSERT_FALSE(exec);
  EXPECT_EQ(exec.error().code(), Error::Code::Unavailable) << exec.error().ToString();
  auto read = sandbox.ReadFile({}, "x");
  ASSERT_FALSE(read);
  EXPECT_EQ(read.error().code(), Error::Code::Unavailable);
  EXPECT_LT(Clock::now() - start, 1s);
  EXPECT_TRUE(sandbox.Close());
}

// Sends a hostile frame in answer to the first Exec and checks the Exec
// fails with Unavailable and the sandbox stays broken.
void ExpectExecBreaksOn(std::function<void(FakeAgent&, std::uint64_t exec_id)> answer,
                        Command cmd = Command{.path = "true"}) {
  FakeAgent agent;
  auto sandbox = Connect(agent, OptionsFor(agent));
  ASSERT_NE(sandbox, nullptr);
  agent.Run([answer](FakeAgent& self) {
    auto exec = self.Next(MsgType::kExec);
    if (exec) answer(self, exec->id);
  });
  const std::size_t rss_before = CurrentRssBytes();
  auto result = sandbox->Exec({}, cmd);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code(), Error::Code::Unavailable) << result.error().ToString();
  EXPECT_NE(result.error().message().find("broken"), std::string::npos) << result.error().message();
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(CurrentRssBytes(), rss_before + (8u << 20)) << "the host buffered what it should refuse";
#endif
  ExpectBroken(*sandbox);
}

TEST(RemoteHostile, OversizedLengthBreaksTheSandbox) {
  ExpectExecBreaksOn([](FakeAgent& agent, std::uint64_t) {
    agent.SendRaw(std::string("\xff\xff\xff\xff", 4));
    agent.SendRaw(std::string(1 << 20, 'A'));  // never buffered
  });
}

TEST(RemoteHostile, GarbageMsgpackBreaksTheSandbox) {
  ExpectExecBreaksOn([](FakeAgent& agent, std::uint64_t) {
    agent.SendRaw(std::string("\x00\x00\x00\x05\xc1\xc1\xc1\xc1\xc1", 9));
  });
}

TEST(RemoteHostile, ArrayBombBreaksTheSandbox) {
  ExpectExecBreaksOn([](FakeAgent& agent, std::uint64_t) {
    // [50, 1, [array of 2^32-1 elements]] in a 12-byte frame.
    agent.SendRaw(std::string("\x00\x00\x00\x08\x93\x32\x01\xdd\xff\xff\xff\xff", 12));
  });
}

TEST(RemoteHostile, ReplyForAnUnknownIdBreaksTheSandbox) {
  ExpectExecBreaksOn([](FakeAgent& agent, std::uint64_t id) {
    agent.Send(wire::EncodeEmptyReply(id + 1000));
  });
}

TEST(RemoteHostile, DataForAnUnknownIdBreaksTheSandbox) {
  ExpectExecBreaksOn([](FakeAgent& agent, std::uint64_t id) {
    agent.Send(wire::EncodeData(id + 7, wire::StreamId::kStdout, "x", false));
  });
}

TEST(RemoteHostile, WrongTypesInAReplyBreakTheSandbox) {
  ExpectExecBreaksOn([](FakeAgent& agent, std::uint64_t id) {
    agent.Send(wire::EncodeReply(id, nullptr, std::vector<std::string>{"not", "an", "exec", "reply"}));
  });
}

TEST(RemoteHostile, StdoutBeyondTheOutputLimitBreaksTheSandbox) {
  ExpectExecBreaksOn(
      [](FakeAgent& agent, std::uint64_t id) {
        for (int i = 0; i < 2; ++i)
          agent.Send(wire::EncodeData(id, wire::StreamId::kStdout, std::string(600, 'o'), false));
      },
      Command{.path = "true", .output_limit = 1000});
}

TEST(RemoteHostile, ChunkLargerThanAgreedBreaksTheSandbox) {
  ExpectExecBreaksOn(
      [](FakeAgent& agent, std::uint64_t id) {
        agent.Send(wire::EncodeData(id, wire::StreamId::kStdout,
                                    std::string(wire::kChunkBytes + 1, 'o'), false));
      },
      Command{.path = "true", .output_limit = 64 << 20});
}

TEST(RemoteHostile, ReplySizesThatDisagreeWithTheDataBreakTheSandbox) {
  ExpectExecBreaksOn([](FakeAgent& agent, std::uint64_t id) {
    agent.Send(wire::EncodeReply(id, nullptr, wire::ExecReply{.stdout_size = 5}));
  });
}

TEST(RemoteHostile, FileDataBeyondTheRequestedLimitBreaksTheSandbox) {
  FakeAgent agent;
  auto sandbox = Connect(agent, OptionsFor(agent));
  ASSERT_NE(sandbox, nullptr);
  agent.Run([](FakeAgent& self) {
    auto read = self.Next(MsgType::kReadFile);
    if (!read) return;
    self.Send(wire::EncodeData(read->id, wire::StreamId::kFile, "0123456789A", false));
    self.Send(wire::EncodeReply(read->id, nullptr, wire::ReadReply{true, 11}));
  });
  auto read = As<LimitedReader>(*sandbox)->ReadFileLimit({}, "f", 10);
  ASSERT_FALSE(read);
  EXPECT_EQ(read.error().code(), Error::Code::Unavailable);
  ExpectBroken(*sandbox);
}

TEST(RemoteHostile, ProcessStdoutBeyondTheCreditBreaksTheSandbox) {
  FakeAgent agent;
  auto sandbox = Connect(agent, OptionsFor(agent));
  ASSERT_NE(sandbox, nullptr);
  agent.Run([](FakeAgent& self) {
    auto start = self.Next(MsgType::kProcessStart);
    if (!start) return;
    self.Send(wire::EncodeEmptyReply(start->id));
    // The window is kWindowBytes; send more without any credit coming back.
    for (std::uint32_t sent = 0; sent <= wire::kWindowBytes; sent += wire::kChunkBytes)
      self.Send(wire::EncodeData(start->id, wire::StreamId::kStdout,
                                 std::string(wire::kChunkBytes, 'p'), false));
  });
  auto process = As<ProcessHost>(*sandbox)->StartProcess({}, Command{.path = "cat"});
  ASSERT_TRUE(process) << process.error().ToString();
  auto status = (*process)->Wait();
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error().code(), Error::Code::Unavailable);
  EXPECT_NE(status.error().message().find("credit"), std::string::npos) << status.error().message();
  ExpectBroken(*sandbox);
}

TEST(RemoteHostile, AnAgentThatNeverAnswersIsBoundedByTheDeadline) {
  FakeAgent agent;
  RemoteOptions options = OptionsFor(agent);
  auto sandbox = Connect(agent, std::move(options));
  ASSERT_NE(sandbox, nullptr);
  std::atomic<bool> saw_cancel{false};
  agent.Run([&saw_cancel](FakeAgent& self) { saw_cancel = self.Next(MsgType::kCancel).has_value(); });
  auto start = Clock::now();
  auto result = sandbox->Exec(Context::WithTimeout(200ms), Command{.path = "sleep", .args = {"100"}});
  auto took = Clock::now() - start;
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code(), Error::Code::DeadlineExceeded) << result.error().ToString();
  EXPECT_GE(took, 200ms);
  EXPECT_LT(took, 2s);
  ExpectBroken(*sandbox);  // an agent that ignores a cancel is broken
  for (int i = 0; i < 200 && !saw_cancel; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(saw_cancel) << "the host must tell the agent to cancel";
}

TEST(RemoteHostile, CancellationWithoutADeadlineIsBoundedToo) {
  FakeAgent agent;
  auto sandbox = Connect(agent, OptionsFor(agent));
  ASSERT_NE(sandbox, nullptr);
  std::stop_source stop;
  std::thread canceller([&] {
    std::this_thread::sleep_for(100ms);
    stop.request_stop();
  });
  auto read = sandbox->ReadFile(Context().StopToken(stop.get_token()), "f");
  canceller.join();
  ASSERT_FALSE(read);
  EXPECT_EQ(read.error().code(), Error::Code::Cancelled);
  ExpectBroken(*sandbox);
}

TEST(RemoteHostile, AgentClosingTheStreamFailsPendingAndLaterCalls) {
  ExpectExecBreaksOn([](FakeAgent& agent, std::uint64_t) { agent.CloseStream(); });
}

TEST(RemoteHostile, HandshakeVersionMismatchIsAClearUnavailable) {
  FakeAgent agent;
  agent.SendHello(wire::kProtocolVersion + 1);
  auto made = NewRemoteSandbox(OptionsFor(agent));
  ASSERT_FALSE(made);
  EXPECT_EQ(made.error().code(), Error::Code::Unavailable);
  EXPECT_NE(made.error().message().find("version " + std::to_string(wire::kProtocolVersion + 1)),
            std::string::npos)
      << made.error().message();
}

TEST(RemoteHostile, APeerThatIsNotAnAgentIsRefused) {
  FakeAgent agent;
  agent.SendRaw("sh: 1: sandbox-agent: not found\n");
  auto made = NewRemoteSandbox(OptionsFor(agent));
  ASSERT_FALSE(made);
  EXPECT_EQ(made.error().code(), Error::Code::Unavailable);
  EXPECT_NE(made.error().message().find("not a sandbox agent"), std::string::npos)
      << made.error().message();
}

TEST(RemoteHostile, ASilentPeerTimesOutTheHandshake) {
  FakeAgent agent;
  RemoteOptions options = OptionsFor(agent);
  options.handshake_timeout = 200ms;
  auto start = Clock::now();
  auto made = NewRemoteSandbox(std::move(options));
  ASSERT_FALSE(made);
  EXPECT_EQ(made.error().code(), Error::Code::Unavailable);
  EXPECT_NE(made.error().message().find("handshake"), std::string::npos) << made.error().message();
  EXPECT_LT(Clock::now() - start, 2s);
}

TEST(RemoteHostile, ImpossibleLimitsInTheHelloAreRefused) {
  FakeAgent agent;
  agent.Send(wire::Encode(MsgType::kHello, 0,
                          wire::Hello{.magic = std::string(wire::kMagic),
                                      .version = wire::kProtocolVersion,
                                      .max_frame = 16,
                                      .chunk = 1 << 30,
                                      .window = 1}));
  auto made = NewRemoteSandbox(OptionsFor(agent));
  ASSERT_FALSE(made);
  EXPECT_EQ(made.error().code(), Error::Code::Unavailable);
}

TEST(RemoteHostile, AgentErrorsKeepTheirCode) {
  FakeAgent agent;
  auto sandbox = Connect(agent, OptionsFor(agent));
  ASSERT_NE(sandbox, nullptr);
  agent.Run([](FakeAgent& self) {
    auto remove = self.Next(MsgType::kRemove);
    if (!remove) return;
    self.Send(wire::EncodeErrorReply(remove->id, Error(Error::Code::NotEmpty, "rmdir 'd': not empty")));
    auto second = self.Next(MsgType::kRemove);
    if (!second) return;
    self.Send(wire::EncodeErrorReply(second->id, Error(Error::Code::Internal, "x")));
  });
  auto removed = sandbox->Remove({}, "d");
  ASSERT_FALSE(removed);
  EXPECT_EQ(removed.error().code(), Error::Code::NotEmpty);
  EXPECT_EQ(removed.error().message(), "rmdir 'd': not empty");
  // An error is a normal answer: the sandbox stays usable.
  auto again = sandbox->Remove({}, "d");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code(), Error::Code::Internal);
}

}  // namespace
}  // namespace sandbox::testing
