// RemoteSandbox: the host side of the wire. Implements Sandbox and every
// optional capability by sending requests to a sandbox agent over one byte
// stream. A reader thread demultiplexes the agent's frames to the waiting
// callers; every byte from the agent is checked against the bounds the host
// chose, and any violation breaks the sandbox (Unavailable) for everyone.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "os/byte_stream.h"
#include "sandbox/remote.h"
#include "wire/protocol.h"

namespace sandbox {
namespace {

using wire::MsgType;
using wire::StreamId;
using Clock = std::chrono::steady_clock;

std::int64_t DeadlineNanos(const Context& ctx) {
  if (!ctx.deadline()) return -1;
  auto left = *ctx.deadline() - Clock::now();
  return std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(left).count());
}

// One request waiting for its reply. Guarded by Client::mu_.
struct Call {
  MsgType type = MsgType::kExec;
  bool done = false;
  bool detached = false;  // nobody waits: erased (and its slot freed) on reply
  std::optional<Error> error;
  // Bounds on what the agent may send for this call.
  std::uint64_t output_limit = 0;  // Exec: per stream
  std::uint64_t read_limit = 0;    // ReadFile
  // What arrived.
  std::string out, err;            // Exec stdout/stderr, ReadFile data in `out`
  wire::ExecReply exec;
  wire::ReadReply read;
  std::vector<DirEntry> entries;
  std::string snapshot;
  std::uint64_t handle = 0;        // kProcessRelease: the process released
};

// The host's view of one long-lived process. Guarded by Client::mu_.
struct ProcState {
  std::uint64_t stdin_credit = 0;     // bytes we may still send
  bool stdin_failed = false;          // the agent reported the pipe closed
  std::string stdout_buffer;          // received, not yet read
  std::size_t stdout_offset = 0;
  std::uint64_t stdout_granted = 0;   // credit the agent holds
  std::uint64_t consumed_unreported = 0;
  bool stdout_eof = false;
  std::optional<ExitStatus> exit;
  std::optional<Error> exit_error;
  bool released = false;
};

class Client : public std::enable_shared_from_this<Client> {
 public:
  Client(os::ByteStream stream, RemoteOptions options)
      : stream_(std::move(stream)), options_(std::move(options)), assembler_(wire::kMaxFrameBytes) {}
  ~Client() { Shutdown(); }

  Status Handshake();
  void StartReader() { reader_ = std::thread([this] { ReadLoop(); }); }

  const wire::Hello& hello() const { return hello_; }
  const RemoteOptions& options() const { return options_; }

  // Why calls fail now, or nullopt when they may proceed.
  std::optional<Error> Unusable() {
    std::lock_guard lock(mu_);
    return UnusableLocked();
  }

  // Sends one request (and `upload` as DATA frames) and waits for the
  // reply, honouring `ctx`: on cancellation or deadline the agent is told
  // to cancel and gets cancel_grace to answer.
  Expected<std::shared_ptr<Call>> Roundtrip(const Context& ctx, MsgType type,
                                            const std::function<wire::EncodedFrame(std::uint64_t)>& encode,
                                            std::string_view upload, std::shared_ptr<Call> call,
                                            std::uint64_t* id_out = nullptr,
                                            const std::function<void(std::uint64_t)>& before_send = {});

  // Forgets a process: the agent kills it, and the host drops its state
  // once the agent confirms (frames already on the way stay legal).
  void ReleaseProcess(std::uint64_t handle);

  // Process streams. AddProcess runs under mu_ (from Roundtrip's
  // before_send), so the state exists before the agent can send for it.
  void AddProcess(std::uint64_t id);
  void DropProcess(std::uint64_t id);
  Status WriteStdin(std::uint64_t id, std::string_view data);
  Status CloseStdin(std::uint64_t id, bool& closed_flag);
  Expected<std::size_t> ReadStdout(std::uint64_t id, std::span<char> buffer);
  Expected<ExitStatus> WaitExit(std::uint64_t id);

  // Marks the connection unusable for everyone with `reason`.
  void Break(const std::string& reason);
  // Marks the sandbox closed: later calls fail with Unavailable.
  void MarkClosed() {
    std::lock_guard lock(mu_);
    closed_ = true;
    cv_.notify_all();
  }
  // Shuts the stream down and stops the reader. Idempotent.
  void Shutdown();

 private:
  std::optional<Error> UnusableLocked() const {
    if (broken_) return broken_;
    if (closed_) return Error(Error::Code::Unavailable, "the sandbox is closed");
    return std::nullopt;
  }
  Status Send(const wire::EncodedFrame& frame);
  void ReadLoop();
  Status HandleFrame(std::string_view bytes);
  Status HandleReply(std::uint64_t id, const msgpack::object& body);
  Status HandleData(std::uint64_t id, const msgpack::object& body);
  Status HandleEntries(std::uint64_t id, const msgpack::object& body);
  Status HandleCredit(std::uint64_t id, const msgpack::object& body);
  Status HandleExit(std::uint64_t id, const msgpack::object& body);
  void ReleaseSlotLocked() {
    --inflight_;
    cv_.notify_all();
  }

  os::ByteStream stream_;
  RemoteOptions options_;
  wire::FrameAssembler assembler_;
  wire::Hello hello_;
  std::thread reader_;
  std::mutex write_mu_;
  std::atomic<bool> shut_down_{false};

  std::mutex mu_;
  std::condition_variable_any cv_;
  std::optional<Error> broken_;
  bool closed_ = false;
  bool closing_ = false;
  std::uint64_t next_id_ = 0;
  std::uint32_t inflight_ = 0;
  std::map<std::uint64_t, std::shared_ptr<Call>> calls_;
  std::map<std::uint64_t, std::shared_ptr<ProcState>> procs_;
};

Status Client::Send(const wire::EncodedFrame& frame) {
  Status sent;
  {
    std::lock_guard lock(write_mu_);
    if (shut_down_) return Fail(Error::Code::Unavailable, "the sandbox is closed");
    sent = stream_.WriteAll(wire::View(frame), options_.write_stall_timeout);
  }
  if (!sent) {
    Break("cannot write to the sandbox agent: " + sent.error().message());
    return Fail(*Unusable());
  }
  return {};
}

void Client::Break(const std::string& reason) {
  std::lock_guard lock(mu_);
  if (!broken_ && !closing_)
    broken_ = Error(Error::Code::Unavailable,
                    "the sandbox is broken: " + reason + "; create a new sandbox");
  if (!broken_) broken_ = Error(Error::Code::Unavailable, "the sandbox is closed");
  stream_.Interrupt();
  cv_.notify_all();
}

void Client::Shutdown() {
  {
    std::lock_guard lock(mu_);
    closing_ = true;
    closed_ = true;
  }
  {
    std::lock_guard lock(write_mu_);
    if (!shut_down_.exchange(true)) stream_.ShutdownWrite();
  }
  stream_.Interrupt();
  if (reader_.joinable()) reader_.join();
  std::lock_guard lock(mu_);
  if (!broken_) broken_ = Error(Error::Code::Unavailable, "the sandbox is closed");
  cv_.notify_all();
}

Status Client::Handshake() {
  wire::Hello mine{.magic = std::string(wire::kMagic),
                   .version = wire::kProtocolVersion,
                   .max_frame = wire::kMaxFrameBytes,
                   .chunk = wire::kChunkBytes,
                   .window = wire::kWindowBytes};
  auto sent = stream_.WriteAll(wire::View(wire::Encode(MsgType::kHello, 0, mine)),
                               options_.handshake_timeout);
  if (!sent) return Fail(Error::Code::Unavailable, "cannot greet the sandbox agent: " + sent.error().message());

  // The reader thread is not running yet: read the first frame here, with
  // a deadline, through a watchdog that interrupts the stream.
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  bool timed_out = false;
  std::thread watchdog([&] {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, options_.handshake_timeout, [&] { return finished; })) {
      timed_out = true;
      stream_.Interrupt();
    }
  });
  auto read_first = [&]() -> Expected<wire::Hello> {
    for (;;) {
      auto next = assembler_.Next();
      if (!next)
        return Fail(Error::Code::Unavailable,
                    "the peer is not a sandbox agent speaking this protocol (" + next.error().message() + ")");
      if (*next) {
        auto frame = wire::DecodeFrame(**next);
        if (!frame) return Fail(Error::Code::Unavailable, "the sandbox agent's hello is " + frame.error().message());
        if (frame->type != MsgType::kHello)
          return Fail(Error::Code::Unavailable, "the sandbox agent did not start with a hello");
        return wire::DecodeHello(*frame->body);
      }
      auto got = stream_.Read(assembler_.Space());
      if (!got) return Fail(got.error());
      if (*got == 0)
        return Fail(Error::Code::Unavailable,
                    "the sandbox agent closed the stream before its hello (did it fail to start? see its stderr)");
      assembler_.Commit(*got);
    }
  };
  auto hello = read_first();
  {
    std::lock_guard lock(mu);
    finished = true;
  }
  cv.notify_all();
  watchdog.join();
  if (timed_out)
    return Fail(Error::Code::Unavailable,
                "the sandbox agent did not answer the handshake within " +
                    std::to_string(options_.handshake_timeout.count()) + " ms");
  if (!hello) return Fail(hello.error());
  hello_ = std::move(*hello);
  hello_.max_frame = std::min(hello_.max_frame, wire::kMaxFrameBytes);
  hello_.chunk = std::min(hello_.chunk, wire::kChunkBytes);
  hello_.window = std::min(hello_.window, wire::kWindowBytes);
  if (hello_.chunk > hello_.window) hello_.chunk = hello_.window;
  hello_.max_inflight = std::clamp<std::uint32_t>(hello_.max_inflight, 1, 4096);
  return {};
}

void Client::ReadLoop() {
  for (;;) {
    // Handle whatever complete frames are buffered (the handshake may have
    // read ahead), then read more.
    for (;;) {
      auto next = assembler_.Next();
      if (!next) return Break("the sandbox agent sent a " + next.error().message());
      if (!*next) break;
      if (auto handled = HandleFrame(**next); !handled)
        return Break("the sandbox agent broke the protocol: " + handled.error().message());
    }
    assembler_.Compact();
    auto got = stream_.Read(assembler_.Space());
    if (!got) return Break(got.error().message());
    if (*got == 0) return Break("the sandbox agent closed the stream (did it crash? see its stderr)");
    assembler_.Commit(*got);
  }
}

Status Client::HandleFrame(std::string_view bytes) {
  auto frame = wire::DecodeFrame(bytes);
  if (!frame) return Fail(frame.error());
  switch (frame->type) {
    case MsgType::kReply: return HandleReply(frame->id, *frame->body);
    case MsgType::kData: return HandleData(frame->id, *frame->body);
    case MsgType::kEntries: return HandleEntries(frame->id, *frame->body);
    case MsgType::kCredit: return HandleCredit(frame->id, *frame->body);
    case MsgType::kExit: return HandleExit(frame->id, *frame->body);
    default:
      return Fail(Error::Code::InvalidArgument,
                  "unexpected message '" + std::string(wire::ToString(frame->type)) + "' from the agent");
  }
}

Status Client::HandleReply(std::uint64_t id, const msgpack::object& body) {
  auto reply = wire::DecodeReply(body);
  if (!reply) return Fail(reply.error());
  std::lock_guard lock(mu_);
  auto it = calls_.find(id);
  if (it == calls_.end() || it->second->done)
    return Fail(Error::Code::InvalidArgument, "a reply for unknown request id " + std::to_string(id));
  Call& call = *it->second;
  if (reply->error) {
    call.error = std::move(reply->error);
  } else {
    switch (call.type) {
      case MsgType::kExec: {
        auto exec = wire::DecodeAs<wire::ExecReply>(*reply->payload);
        if (!exec) return Fail(exec.error());
        if (exec->stdout_size != call.out.size() || exec->stderr_size != call.err.size())
          return Fail(Error::Code::InvalidArgument, "an exec reply whose sizes disagree with its data");
        if (exec->signal < 0 || exec->signal > 64 || exec->exit_code < 0 || exec->exit_code > 255)
          return Fail(Error::Code::InvalidArgument, "an exec reply with an impossible exit status");
        call.exec = *exec;
        break;
      }
      case MsgType::kReadFile: {
        auto read = wire::DecodeAs<wire::ReadReply>(*reply->payload);
        if (!read) return Fail(read.error());
        if (read->size != call.out.size())
          return Fail(Error::Code::InvalidArgument, "a read reply whose size disagrees with its data");
        call.read = *read;
        break;
      }
      case MsgType::kProcessStderr: {
        auto snapshot = wire::DecodeAs<wire::StderrReply>(*reply->payload);
        if (!snapshot) return Fail(snapshot.error());
        call.snapshot = std::move(snapshot->snapshot);
        break;
      }
      default:
        break;
    }
  }
  call.done = true;
  if (call.detached) {
    // The agent sends nothing more for a released process once it replies.
    if (call.type == MsgType::kProcessRelease) procs_.erase(call.handle);
    calls_.erase(it);
    ReleaseSlotLocked();
  }
  cv_.notify_all();
  return {};
}

Status Client::HandleData(std::uint64_t id, const msgpack::object& body) {
  auto data = wire::DecodeData(body);
  if (!data) return Fail(data.error());
  if (data->bytes.size() > hello_.chunk)
    return Fail(Error::Code::InvalidArgument, "a data chunk larger than the agreed chunk size");
  std::lock_guard lock(mu_);
  if (auto it = calls_.find(id); it != calls_.end() && !it->second->done) {
    Call& call = *it->second;
    std::string* target = nullptr;
    std::uint64_t limit = 0;
    if (call.type == MsgType::kExec && data->stream == StreamId::kStdout) {
      target = &call.out, limit = call.output_limit;
    } else if (call.type == MsgType::kExec && data->stream == StreamId::kStderr) {
      target = &call.err, limit = call.output_limit;
    } else if (call.type == MsgType::kReadFile && data->stream == StreamId::kFile) {
      target = &call.out, limit = call.read_limit;
    } else {
      return Fail(Error::Code::InvalidArgument, "data on a stream the request does not have");
    }
    if (data->bytes.size() > limit - target->size())
      return Fail(Error::Code::InvalidArgument,
                  "more data than the limit of " + std::to_string(limit) + " bytes for request " +
                      std::to_string(id));
    target->append(data->bytes);
    return {};
  }
  auto it = procs_.find(id);
  if (it == procs_.end())
    return Fail(Error::Code::InvalidArgument, "data for unknown id " + std::to_string(id));
  ProcState& proc = *it->second;
  if (data->stream == StreamId::kStdin) {
    // The agent could not write to the process's stdin any more.
    proc.stdin_failed = true;
  } else if (data->stream == StreamId::kStdout) {
    if (proc.stdout_eof) return Fail(Error::Code::InvalidArgument, "process stdout after its end");
    if (data->bytes.size() > proc.stdout_granted)
      return Fail(Error::Code::InvalidArgument, "process stdout beyond the granted credit");
    proc.stdout_granted -= data->bytes.size();
    if (!proc.released) proc.stdout_buffer.append(data->bytes);
    proc.stdout_eof = data->eof;
  } else {
    return Fail(Error::Code::InvalidArgument, "data on a stream a process does not have");
  }
  cv_.notify_all();
  return {};
}

Status Client::HandleEntries(std::uint64_t id, const msgpack::object& body) {
  auto entries = wire::DecodeAs<std::vector<wire::WireEntry>>(body);
  if (!entries) return Fail(entries.error());
  std::lock_guard lock(mu_);
  auto it = calls_.find(id);
  if (it == calls_.end() || it->second->done || it->second->type != MsgType::kListDir)
    return Fail(Error::Code::InvalidArgument, "entries for unknown request id " + std::to_string(id));
  Call& call = *it->second;
  if (entries->size() > options_.max_dir_entries - call.entries.size())
    return Fail(Error::Code::InvalidArgument,
                "more than " + std::to_string(options_.max_dir_entries) + " directory entries");
  for (auto& entry : *entries) call.entries.push_back({std::move(entry.name), entry.is_dir});
  return {};
}

Status Client::HandleCredit(std::uint64_t id, const msgpack::object& body) {
  auto credit = wire::DecodeAs<wire::CreditBody>(body);
  if (!credit) return Fail(credit.error());
  std::lock_guard lock(mu_);
  auto it = procs_.find(id);
  if (it == procs_.end())
    return Fail(Error::Code::InvalidArgument, "credit for unknown id " + std::to_string(id));
  ProcState& proc = *it->second;
  if (credit->bytes > hello_.window - proc.stdin_credit)
    return Fail(Error::Code::InvalidArgument, "stdin credit beyond the window");
  proc.stdin_credit += credit->bytes;
  cv_.notify_all();
  return {};
}

Status Client::HandleExit(std::uint64_t id, const msgpack::object& body) {
  auto exit = wire::DecodeAs<wire::ExitBody>(body);
  if (!exit) return Fail(exit.error());
  std::lock_guard lock(mu_);
  auto it = procs_.find(id);
  if (it == procs_.end() || it->second->exit || it->second->exit_error)
    return Fail(Error::Code::InvalidArgument, "an exit for unknown or exited id " + std::to_string(id));
  if (!exit->error_code.empty()) {
    it->second->exit_error = wire::ErrorFromWire(exit->error_code, exit->error_message);
  } else {
    if (exit->signal < 0 || exit->signal > 64 || exit->exit_code < 0 || exit->exit_code > 255)
      return Fail(Error::Code::InvalidArgument, "an exit with an impossible status");
    it->second->exit = ExitStatus{exit->exit_code, exit->signal ? std::optional<int>(exit->signal)
                                                                : std::nullopt};
  }
  cv_.notify_all();
  return {};
}

Expected<std::shared_ptr<Call>> Client::Roundtrip(
    const Context& ctx, MsgType type, const std::function<wire::EncodedFrame(std::uint64_t)>& encode,
    std::string_view upload, std::shared_ptr<Call> call, std::uint64_t* id_out,
    const std::function<void(std::uint64_t)>& before_send) {
  call->type = type;
  std::uint64_t id;
  {
    std::unique_lock lock(mu_);
    if (auto why = UnusableLocked()) return Fail(*why);
    SANDBOX_RETURN_IF_ERROR(ctx.Check());
    // Never more requests in flight than the agent executes at once.
    auto slot_free = [&] { return inflight_ < hello_.max_inflight || UnusableLocked(); };
    bool got_slot = ctx.deadline() ? cv_.wait_until(lock, ctx.stop_token(), *ctx.deadline(), slot_free)
                                   : cv_.wait(lock, ctx.stop_token(), slot_free);
    if (auto why = UnusableLocked()) return Fail(*why);
    if (!got_slot) {
      auto why = ctx.Check();
      return Fail(why ? Error(Error::Code::DeadlineExceeded, "the context's deadline passed")
                      : why.error());
    }
    ++inflight_;
    id = ++next_id_;
    calls_[id] = call;
    if (before_send) before_send(id);
  }
  if (id_out) *id_out = id;
  auto finish = [&] {
    std::lock_guard lock(mu_);
    calls_.erase(id);
    ReleaseSlotLocked();
  };

  bool cancelled = false;
  auto send_cancel = [&] {
    cancelled = true;
    return Send(wire::Encode(MsgType::kCancel, 0, wire::HandleRequest{id}));
  };
  if (auto sent = Send(encode(id)); !sent) {
    finish();
    return Fail(sent.error());
  }
  while (!upload.empty()) {
    if (!ctx.Check()) {
      (void)send_cancel();
      break;
    }
    std::string_view chunk = upload.substr(0, hello_.chunk);
    upload.remove_prefix(chunk.size());
    if (auto sent = Send(wire::EncodeData(id, StreamId::kStdin, chunk, false)); !sent) {
      finish();
      return Fail(sent.error());
    }
  }

  std::unique_lock lock(mu_);
  auto answered = [&] { return call->done || broken_.has_value(); };
  if (!cancelled) {
    bool done = ctx.deadline() ? cv_.wait_until(lock, ctx.stop_token(), *ctx.deadline(), answered)
                               : cv_.wait(lock, ctx.stop_token(), answered);
    if (!done) {
      lock.unlock();
      (void)send_cancel();
      lock.lock();
    }
  }
  std::optional<Error> context_error;
  if (cancelled) {
    context_error = ctx.cancelled() ? Error(Error::Code::Cancelled, "the call was cancelled")
                                    : Error(Error::Code::DeadlineExceeded, "the context's deadline passed");
    if (!cv_.wait_for(lock, options_.cancel_grace, answered)) {
      lock.unlock();
      Break("the sandbox agent did not answer a cancelled " + std::string(wire::ToString(type)) +
            " request within " + std::to_string(options_.cancel_grace.count()) + " ms");
      lock.lock();
    }
  }
  bool done = call->done;
  std::optional<Error> broken = broken_;
  lock.unlock();
  finish();
  if (!done) return Fail(context_error ? *context_error : *broken);
  if (call->error) return Fail(*call->error);
  return call;
}

void Client::ReleaseProcess(std::uint64_t handle) {
  std::uint64_t id;
  {
    std::unique_lock lock(mu_);
    auto it = procs_.find(handle);
    if (it == procs_.end()) return;
    it->second->released = true;
    it->second->stdout_buffer.clear();
    it->second->stdout_buffer.shrink_to_fit();
    cv_.wait(lock, [&] { return inflight_ < hello_.max_inflight || UnusableLocked(); });
    if (UnusableLocked()) {
      procs_.erase(handle);
      return;
    }
    ++inflight_;
    id = ++next_id_;
    auto call = std::make_shared<Call>();
    call->type = MsgType::kProcessRelease;
    call->detached = true;
    call->handle = handle;
    calls_[id] = std::move(call);
  }
  (void)Send(wire::Encode(MsgType::kProcessRelease, id, wire::HandleRequest{handle}));
}

void Client::AddProcess(std::uint64_t id) {
  auto proc = std::make_shared<ProcState>();
  proc->stdin_credit = hello_.window;
  proc->stdout_granted = hello_.window;
  procs_[id] = std::move(proc);  // called under mu_ from Roundtrip's before_send
}

void Client::DropProcess(std::uint64_t id) {
  std::lock_guard lock(mu_);
  procs_.erase(id);
}

Status Client::WriteStdin(std::uint64_t id, std::string_view data) {
  while (!data.empty()) {
    std::size_t n;
    {
      std::unique_lock lock(mu_);
      auto it = procs_.find(id);
      if (it == procs_.end()) return Fail(Error::Code::Unavailable, "the process is gone");
      auto proc = it->second;
      cv_.wait(lock, [&] { return proc->stdin_credit > 0 || proc->stdin_failed || broken_; });
      if (broken_) return Fail(*broken_);
      if (proc->stdin_failed)
        return Fail(Error::Code::Unavailable, "write stdin: the process has closed its standard input");
      n = static_cast<std::size_t>(std::min<std::uint64_t>({proc->stdin_credit, hello_.chunk, data.size()}));
      proc->stdin_credit -= n;
    }
    SANDBOX_RETURN_IF_ERROR(Send(wire::EncodeData(id, StreamId::kStdin, data.substr(0, n), false)));
    data.remove_prefix(n);
  }
  return {};
}

Status Client::CloseStdin(std::uint64_t id, bool& closed_flag) {
  if (closed_flag) return {};
  closed_flag = true;
  if (Unusable()) return {};
  return Send(wire::Encode(MsgType::kStdinClose, id, wire::HandleRequest{id}));
}

Expected<std::size_t> Client::ReadStdout(std::uint64_t id, std::span<char> buffer) {
  if (buffer.empty()) return 0;
  std::uint64_t credit = 0;
  std::size_t n = 0;
  {
    std::unique_lock lock(mu_);
    auto it = procs_.find(id);
    if (it == procs_.end()) return Fail(Error::Code::Unavailable, "the process is gone");
    auto proc = it->second;
    cv_.wait(lock, [&] {
      return proc->stdout_offset < proc->stdout_buffer.size() || proc->stdout_eof || broken_;
    });
    const std::size_t available = proc->stdout_buffer.size() - proc->stdout_offset;
    if (available == 0) {
      if (proc->stdout_eof) return 0;
      return Fail(*broken_);
    }
    n = std::min(available, buffer.size());
    std::copy_n(proc->stdout_buffer.data() + proc->stdout_offset, n, buffer.data());
    proc->stdout_offset += n;
    if (proc->stdout_offset == proc->stdout_buffer.size()) {
      proc->stdout_buffer.clear();
      proc->stdout_offset = 0;
    }
    proc->consumed_unreported += n;
    // Return credit when the buffer runs dry or half the window was read.
    if (!proc->stdout_eof &&
        (proc->stdout_buffer.empty() || proc->consumed_unreported >= hello_.window / 2)) {
      credit = proc->consumed_unreported;
      proc->consumed_unreported = 0;
      proc->stdout_granted += credit;
    }
  }
  if (credit > 0) (void)Send(wire::Encode(MsgType::kCredit, id, wire::CreditBody{credit}));
  return n;
}

Expected<ExitStatus> Client::WaitExit(std::uint64_t id) {
  std::unique_lock lock(mu_);
  auto it = procs_.find(id);
  if (it == procs_.end()) return Fail(Error::Code::Unavailable, "the process is gone");
  auto proc = it->second;
  cv_.wait(lock, [&] { return proc->exit || proc->exit_error || broken_; });
  if (proc->exit) return *proc->exit;
  if (proc->exit_error) return Fail(*proc->exit_error);
  return Fail(*broken_);
}

// ---- The public objects ----

class RemoteProcess final : public Process {
 public:
  RemoteProcess(std::shared_ptr<Client> client, std::uint64_t id)
      : client_(std::move(client)), id_(id), stdin_(*this), stdout_(*this) {}
  ~RemoteProcess() override { client_->ReleaseProcess(id_); }

  Writer& Stdin() override { return stdin_; }
  Reader& Stdout() override { return stdout_; }

  std::string StderrSnapshot() override {
    auto call = client_->Roundtrip(
        Context::WithTimeout(client_->options().cancel_grace), MsgType::kProcessStderr,
        [&](std::uint64_t id) { return wire::Encode(MsgType::kProcessStderr, id, wire::HandleRequest{id_}); },
        {}, std::make_shared<Call>());
    return call ? std::move((*call)->snapshot) : std::string();
  }

  Expected<ExitStatus> Wait() override { return client_->WaitExit(id_); }

  Status Kill() override {
    // Once the sandbox is closed, killing a process that has exited is a
    // no-op, as it is locally.
    if (client_->Unusable() && client_->WaitExit(id_)) return {};
    auto call = client_->Roundtrip(
        {}, MsgType::kProcessKill,
        [&](std::uint64_t id) { return wire::Encode(MsgType::kProcessKill, id, wire::HandleRequest{id_}); },
        {}, std::make_shared<Call>());
    if (!call) return Fail(call.error());
    return {};
  }

 private:
  class StdinWriter final : public Writer {
   public:
    explicit StdinWriter(RemoteProcess& process) : process_(process) {}
    Status Write(std::string_view data) override {
      std::lock_guard lock(mu_);
      if (closed_) return Fail(Error::Code::Unavailable, "stdin is closed");
      return process_.client_->WriteStdin(process_.id_, data);
    }
    Status Close() override {
      std::lock_guard lock(mu_);
      return process_.client_->CloseStdin(process_.id_, closed_);
    }

   private:
    RemoteProcess& process_;
    std::mutex mu_;
    bool closed_ = false;
  };
  class StdoutReader final : public Reader {
   public:
    explicit StdoutReader(RemoteProcess& process) : process_(process) {}
    Expected<std::size_t> Read(std::span<char> buffer) override {
      return process_.client_->ReadStdout(process_.id_, buffer);
    }

   private:
    RemoteProcess& process_;
  };

  std::shared_ptr<Client> client_;
  std::uint64_t id_;
  StdinWriter stdin_;
  StdoutReader stdout_;
};

wire::ExecRequest ToWire(const Command& cmd, std::uint64_t session, std::size_t default_limit,
                         const Context& ctx) {
  return wire::ExecRequest{
      .session = session,
      .path = cmd.path,
      .args = cmd.args,
      .dir = cmd.dir,
      .env = cmd.env,
      .timeout_ns = cmd.timeout.count(),
      .output_limit = cmd.output_limit ? cmd.output_limit : default_limit,
      .stdin_size = cmd.stdin_data.size(),
      .deadline_ns = DeadlineNanos(ctx),
  };
}

Expected<Result> RemoteExec(Client& client, const Context& ctx, const Command& cmd,
                            std::uint64_t session) {
  if (auto why = client.Unusable()) return Fail(*why);
  if (cmd.stdin_data.size() > client.hello().max_stdin)
    return Fail(Error::Code::TooLarge, "stdin of " + std::to_string(cmd.stdin_data.size()) +
                                           " bytes exceeds the sandbox agent's limit of " +
                                           std::to_string(client.hello().max_stdin));
  wire::ExecRequest request = ToWire(cmd, session, client.options().output_limit, ctx);
  auto call = std::make_shared<Call>();
  call->output_limit = request.output_limit;
  auto done = client.Roundtrip(
      ctx, MsgType::kExec,
      [&](std::uint64_t id) {
        request.deadline_ns = DeadlineNanos(ctx);
        return wire::Encode(MsgType::kExec, id, request);
      },
      cmd.stdin_data, call);
  if (!done) return Fail(done.error());
  const wire::ExecReply& reply = call->exec;
  Result result{
      .exit_code = reply.exit_code,
      .stdout_data = std::move(call->out),
      .stderr_data = std::move(call->err),
      .duration = std::chrono::nanoseconds(reply.duration_ns),
      .timed_out = reply.timed_out,
      .stdout_truncated = reply.stdout_truncated,
      .stderr_truncated = reply.stderr_truncated,
      .stdout_dropped = reply.stdout_dropped,
      .stderr_dropped = reply.stderr_dropped,
      .signal = reply.signal ? std::optional<int>(reply.signal) : std::nullopt,
  };
  if (client.options().on_exec_result) client.options().on_exec_result(result);
  return result;
}

class RemoteSession final : public Session {
 public:
  RemoteSession(std::shared_ptr<Client> client, std::uint64_t id) : client_(std::move(client)), id_(id) {}
  ~RemoteSession() override { (void)Close(); }

  Expected<Result> Exec(const Context& ctx, const Command& cmd) override {
    if (closed_) return Fail(Error::Code::Unavailable, "the session is closed");
    return RemoteExec(*client_, ctx, cmd, id_);
  }

  Status Close() override {
    if (closed_.exchange(true)) return {};
    if (client_->Unusable()) return {};
    auto call = client_->Roundtrip(
        Context::WithTimeout(client_->options().cancel_grace), MsgType::kSessionClose,
        [&](std::uint64_t id) { return wire::Encode(MsgType::kSessionClose, id, wire::HandleRequest{id_}); },
        {}, std::make_shared<Call>());
    if (!call) return Fail(call.error());
    return {};
  }

 private:
  std::shared_ptr<Client> client_;
  std::uint64_t id_;
  std::atomic<bool> closed_{false};
};

class RemoteSandbox final : public Sandbox,
                            public Appender,
                            public DirectoryMaker,
                            public LimitedReader,
                            public ProcessHost,
                            public Sessioner,
                            public WorkdirReporter {
 public:
  explicit RemoteSandbox(std::shared_ptr<Client> client) : client_(std::move(client)) {}
  ~RemoteSandbox() override { (void)Close(); }

  Capabilities GetCapabilities() const override { return client_->options().capabilities; }

  Expected<Result> Exec(const Context& ctx, const Command& cmd) override {
    return RemoteExec(*client_, ctx, cmd, 0);
  }

  Expected<std::string> ReadFile(const Context& ctx, std::string_view path) override {
    auto read = Read(ctx, path, false, 0);
    if (!read) return Fail(read.error());
    return std::move(read->data);
  }

  Expected<LimitedRead> ReadFileLimit(const Context& ctx, std::string_view path,
                                      std::int64_t max) override {
    return Read(ctx, path, true, max);
  }

  Status WriteFile(const Context& ctx, std::string_view path, std::string_view data,
                   FileMode mode) override {
    return Upload(ctx, MsgType::kWriteFile, path, data, mode);
  }

  Status AppendFile(const Context& ctx, std::string_view path, std::string_view data,
                    FileMode mode) override {
    return Upload(ctx, MsgType::kAppendFile, path, data, mode);
  }

  Status Remove(const Context& ctx, std::string_view path) override {
    return Simple(ctx, MsgType::kRemove, wire::FileRequest{.path = std::string(path)});
  }

  Status MakeDirAll(const Context& ctx, std::string_view path, FileMode mode) override {
    return Simple(ctx, MsgType::kMakeDirAll, wire::FileRequest{.path = std::string(path), .mode = mode});
  }

  Expected<std::vector<DirEntry>> ListDir(const Context& ctx, std::string_view path) override {
    wire::FileRequest request{.path = std::string(path)};
    auto call = client_->Roundtrip(
        ctx, MsgType::kListDir,
        [&](std::uint64_t id) {
          request.deadline_ns = DeadlineNanos(ctx);
          return wire::Encode(MsgType::kListDir, id, request);
        },
        {}, std::make_shared<Call>());
    if (!call) return Fail(call.error());
    return std::move((*call)->entries);
  }

  Expected<std::unique_ptr<Process>> StartProcess(const Context& ctx, const Command& cmd) override {
    wire::ExecRequest request = ToWire(cmd, 0, client_->options().output_limit, ctx);
    request.stdin_size = 0;
    std::uint64_t id = 0;
    auto call = client_->Roundtrip(
        ctx, MsgType::kProcessStart,
        [&](std::uint64_t request_id) { return wire::Encode(MsgType::kProcessStart, request_id, request); },
        {}, std::make_shared<Call>(), &id, [&](std::uint64_t new_id) { client_->AddProcess(new_id); });
    if (!call) {
      if (id) client_->DropProcess(id);
      return Fail(call.error());
    }
    return std::unique_ptr<Process>(std::make_unique<RemoteProcess>(client_, id));
  }

  Expected<std::unique_ptr<Session>> NewSession(const Context& ctx) override {
    std::uint64_t id = 0;
    auto call = client_->Roundtrip(
        ctx, MsgType::kSessionOpen,
        [&](std::uint64_t request_id) { return wire::EncodeEmpty(MsgType::kSessionOpen, request_id); },
        {}, std::make_shared<Call>(), &id);
    if (!call) return Fail(call.error());
    return std::unique_ptr<Session>(std::make_unique<RemoteSession>(client_, id));
  }

  std::string Workdir() const override { return client_->hello().workdir; }

  Status Close() override {
    std::lock_guard lock(close_mu_);
    if (closed_) return close_status_;
    closed_ = true;
    if (!client_->Unusable()) {
      // The agent closes the wrapped sandbox (killing what it runs) and
      // reports the exits of live processes before it answers.
      auto call = client_->Roundtrip(
          Context::WithTimeout(client_->options().cancel_grace), MsgType::kClose,
          [&](std::uint64_t id) { return wire::EncodeEmpty(MsgType::kClose, id); }, {},
          std::make_shared<Call>());
      if (!call) close_status_ = Fail(call.error());
    }
    client_->MarkClosed();
    client_->Shutdown();
    if (client_->options().on_close) {
      auto hook = client_->options().on_close();
      if (!hook && close_status_) close_status_ = Fail(hook.error());
    }
    // A broken agent cannot be closed more than it is; closing succeeded.
    if (!close_status_ && close_status_.error().code() == Error::Code::Unavailable) close_status_ = {};
    return close_status_;
  }

 private:
  Expected<LimitedRead> Read(const Context& ctx, std::string_view path, bool limited, std::int64_t max) {
    wire::FileRequest request{.path = std::string(path), .limited = limited, .max = max};
    auto call = std::make_shared<Call>();
    std::uint64_t bound = client_->options().max_read_bytes;
    if (limited && max > 0) bound = std::min<std::uint64_t>(bound, static_cast<std::uint64_t>(max));
    call->read_limit = bound;
    auto done = client_->Roundtrip(
        ctx, MsgType::kReadFile,
        [&](std::uint64_t id) {
          request.deadline_ns = DeadlineNanos(ctx);
          return wire::Encode(MsgType::kReadFile, id, request);
        },
        {}, call);
    if (!done) return Fail(done.error());
    return LimitedRead{.data = std::move(call->out), .truncated = call->read.truncated};
  }

  Status Upload(const Context& ctx, MsgType type, std::string_view path, std::string_view data,
                FileMode mode) {
    if (data.size() > client_->hello().max_upload)
      return Fail(Error::Code::TooLarge, "data of " + std::to_string(data.size()) +
                                             " bytes exceeds the sandbox agent's limit of " +
                                             std::to_string(client_->hello().max_upload));
    wire::FileRequest request{.path = std::string(path), .mode = mode, .size = data.size()};
    auto call = client_->Roundtrip(
        ctx, type,
        [&](std::uint64_t id) {
          request.deadline_ns = DeadlineNanos(ctx);
          return wire::Encode(type, id, request);
        },
        data, std::make_shared<Call>());
    if (!call) return Fail(call.error());
    return {};
  }

  Status Simple(const Context& ctx, MsgType type, wire::FileRequest request) {
    auto call = client_->Roundtrip(
        ctx, type,
        [&](std::uint64_t id) {
          request.deadline_ns = DeadlineNanos(ctx);
          return wire::Encode(type, id, request);
        },
        {}, std::make_shared<Call>());
    if (!call) return Fail(call.error());
    return {};
  }

  std::shared_ptr<Client> client_;
  std::mutex close_mu_;
  bool closed_ = false;
  Status close_status_;
};

}  // namespace

Expected<std::unique_ptr<Sandbox>> NewRemoteSandbox(RemoteOptions options) {
  os::UniqueFd read_fd(options.read_fd);
  os::UniqueFd write_fd(options.write_fd == options.read_fd ? -1 : options.write_fd);
  options.read_fd = options.write_fd = -1;
  auto stream = os::ByteStream::Open(std::move(read_fd), std::move(write_fd));
  if (!stream) return Fail(Error::Code::Unavailable, "cannot use the stream to the sandbox agent: " +
                                                         stream.error().message());
  auto on_close = options.on_close;
  auto client = std::make_shared<Client>(std::move(*stream), std::move(options));
  if (auto shook = client->Handshake(); !shook) {
    client->Shutdown();
    if (on_close) (void)on_close();
    return Fail(shook.error());
  }
  client->StartReader();
  return std::unique_ptr<Sandbox>(std::make_unique<RemoteSandbox>(std::move(client)));
}

std::string DefaultAgentPath() {
  if (const char* env = std::getenv("SANDBOX_AGENT"); env && *env) return env;
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "sandbox-agent";
  return (self.parent_path() / "sandbox-agent").string();
}

}  // namespace sandbox
