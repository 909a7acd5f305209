// Serve: the agent side of the wire. A thin adapter: each request maps onto
// one call of the wrapped Sandbox (or one of its optional capabilities),
// executed on a bounded pool of worker threads; the reading thread never
// blocks on anything but the stream.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "os/byte_stream.h"
#include "sandbox/remote.h"
#include "wire/protocol.h"

namespace sandbox {
namespace {

using wire::MsgType;
using wire::StreamId;
using Clock = std::chrono::steady_clock;

// How long a write to the host may stall before the agent gives up.
constexpr std::chrono::milliseconds kAgentWriteStall{10 * 60 * 1000};
// Entries per kEntries frame: far below the frame limit even for long names.
constexpr std::size_t kEntriesPerFrame = 256;

// A pool of at most `max_threads` workers, started on demand.
class WorkerPool {
 public:
  explicit WorkerPool(std::size_t max_threads) : max_threads_(max_threads) {}
  ~WorkerPool() { Join(); }

  void Submit(std::function<void()> task) {
    std::lock_guard lock(mu_);
    tasks_.push_back(std::move(task));
    if (idle_ == 0 && threads_.size() < max_threads_) {
      threads_.emplace_back([this] { Loop(); });
    } else {
      cv_.notify_one();
    }
  }

  // Runs the queued tasks to the end and stops every worker.
  void Join() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& thread : threads_)
      if (thread.joinable()) thread.join();
    threads_.clear();
  }

 private:
  void Loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      ++idle_;
      cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      --idle_;
      if (tasks_.empty()) return;
      auto task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  }

  std::size_t max_threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  std::size_t idle_ = 0;
  bool stopping_ = false;
};

class Server;

// One request from receipt to reply.
struct Request {
  MsgType type = MsgType::kExec;
  std::uint64_t id = 0;
  std::stop_source stop;
  wire::ExecRequest exec;
  wire::FileRequest file;
  wire::HandleRequest handle;
  std::string upload;            // Exec stdin or file data being assembled
  std::uint64_t expected = 0;    // upload bytes announced
  bool dispatched = false;

  Context MakeContext(std::int64_t deadline_ns) const {
    Context ctx = Context().StopToken(stop.get_token());
    if (deadline_ns >= 0) ctx = ctx.Deadline(Clock::now() + std::chrono::nanoseconds(deadline_ns));
    return ctx;
  }
};

// A long-lived process served over the stream: stdout pumped to the host
// within the credit the host grants, stdin fed from a queue bounded by the
// window, the exit reported once.
class ServedProcess {
 public:
  ServedProcess(Server& server, std::uint64_t id, std::unique_ptr<Process> process,
                std::uint32_t window, std::uint32_t chunk)
      : server_(server), id_(id), process_(std::move(process)), window_(window), chunk_(chunk),
        stdout_credit_(window), stdin_room_(window) {}
  ~ServedProcess() { Stop(); }

  void Start();
  // Kills the process tree and joins the pumps. Idempotent.
  void Stop();

  // From the reading thread; false is a protocol violation.
  bool OnStdin(std::string_view bytes);
  bool OnStdinClose();
  bool OnCredit(std::uint64_t bytes);

  Process& process() { return *process_; }
  // Waits (bounded) until the exit was sent to the host.
  void WaitExitReported(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return exit_reported_; });
  }

 private:
  void PumpStdout();
  void FeedStdin();
  void ReportExit();

  Server& server_;
  std::uint64_t id_;
  std::unique_ptr<Process> process_;
  std::uint32_t window_;
  std::uint32_t chunk_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::uint64_t stdout_credit_;
  std::uint64_t stdin_room_;
  std::deque<std::string> stdin_queue_;
  bool stdin_closed_ = false;
  bool stopping_ = false;
  bool exit_reported_ = false;
  std::thread stdout_thread_, stdin_thread_, exit_thread_;
};

class Server {
 public:
  Server(Sandbox& sandbox, os::ByteStream stream, const ServeOptions& options)
      : sandbox_(sandbox), stream_(std::move(stream)), options_(options),
        assembler_(wire::kMaxFrameBytes), pool_(std::max<std::uint32_t>(options.max_inflight, 1)) {
    options_.max_inflight = std::max<std::uint32_t>(options_.max_inflight, 1);
  }

  Status Run();

  // Sends one frame; false once the host is gone.
  bool Send(const wire::EncodedFrame& frame) {
    std::lock_guard lock(write_mu_);
    if (dead_) return false;
    if (auto sent = stream_.WriteAll(wire::View(frame), kAgentWriteStall); !sent) {
      dead_ = true;
      Log("cannot write to the host: " + sent.error().message());
      return false;
    }
    return true;
  }

  void Log(const std::string& line) {
    if (options_.log) options_.log(line);
  }

 private:
  Status Handshake();
  Status HandleFrame(std::string_view bytes);
  Status OnRequest(MsgType type, std::uint64_t id, const msgpack::object& body);
  Status OnData(std::uint64_t id, const msgpack::object& body);
  void Dispatch(const std::shared_ptr<Request>& request);
  void Execute(Request& request);
  void Reply(Request& request, const wire::EncodedFrame& frame) {
    {
      // Forget the request before answering: the host may reuse the slot
      // the moment the reply arrives.
      std::lock_guard lock(mu_);
      requests_.erase(request.id);
    }
    Send(frame);
  }
  void ReplyStatus(Request& request, const Status& status) {
    Reply(request, status ? wire::EncodeEmptyReply(request.id) : wire::EncodeErrorReply(request.id, status.error()));
  }
  void SendChunks(std::uint64_t id, StreamId stream, std::string_view data, const std::stop_source* stop);
  void Shutdown();

  std::shared_ptr<ServedProcess> FindProcess(std::uint64_t id) {
    std::lock_guard lock(mu_);
    auto it = processes_.find(id);
    return it == processes_.end() ? nullptr : it->second;
  }

  Sandbox& sandbox_;
  os::ByteStream stream_;
  ServeOptions options_;
  wire::FrameAssembler assembler_;
  wire::Hello peer_;
  std::uint32_t chunk_ = wire::kChunkBytes;
  std::uint32_t window_ = wire::kWindowBytes;

  std::mutex write_mu_;
  bool dead_ = false;

  std::mutex mu_;
  std::map<std::uint64_t, std::shared_ptr<Request>> requests_;
  std::map<std::uint64_t, std::shared_ptr<Session>> sessions_;
  std::map<std::uint64_t, std::shared_ptr<ServedProcess>> processes_;
  WorkerPool pool_;
};

// ---- ServedProcess ----

void ServedProcess::Start() {
  stdout_thread_ = std::thread([this] { PumpStdout(); });
  stdin_thread_ = std::thread([this] { FeedStdin(); });
  exit_thread_ = std::thread([this] { ReportExit(); });
}

void ServedProcess::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  (void)process_->Kill();
  (void)process_->Stdin().Close();
  for (auto* thread : {&stdout_thread_, &stdin_thread_, &exit_thread_})
    if (thread->joinable()) thread->join();
}

bool ServedProcess::OnStdin(std::string_view bytes) {
  std::lock_guard lock(mu_);
  if (stdin_closed_ || bytes.size() > stdin_room_) return false;
  stdin_room_ -= bytes.size();
  stdin_queue_.emplace_back(bytes);
  cv_.notify_all();
  return true;
}

bool ServedProcess::OnStdinClose() {
  std::lock_guard lock(mu_);
  stdin_closed_ = true;
  cv_.notify_all();
  return true;
}

bool ServedProcess::OnCredit(std::uint64_t bytes) {
  std::lock_guard lock(mu_);
  if (bytes > window_ - stdout_credit_) return false;
  stdout_credit_ += bytes;
  cv_.notify_all();
  return true;
}

void ServedProcess::PumpStdout() {
  std::string buffer;
  for (;;) {
    std::size_t want;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stdout_credit_ > 0 || stopping_; });
      if (stdout_credit_ == 0) return;  // stopping with no credit: the host is gone or released us
      want = static_cast<std::size_t>(std::min<std::uint64_t>({stdout_credit_, chunk_, 64u << 10}));
    }
    buffer.resize(want);
    auto got = process_->Stdout().Read(std::span<char>(buffer.data(), want));
    if (!got || *got == 0) {
      server_.Send(wire::EncodeData(id_, StreamId::kStdout, {}, true));
      return;
    }
    {
      std::lock_guard lock(mu_);
      stdout_credit_ -= *got;
    }
    if (!server_.Send(wire::EncodeData(id_, StreamId::kStdout, std::string_view(buffer.data(), *got), false)))
      return;
  }
}

void ServedProcess::FeedStdin() {
  bool failed = false;
  for (;;) {
    std::string piece;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !stdin_queue_.empty() || stdin_closed_ || stopping_; });
      if (stopping_) return;
      if (stdin_queue_.empty()) {
        lock.unlock();
        (void)process_->Stdin().Close();
        return;
      }
      piece = std::move(stdin_queue_.front());
      stdin_queue_.pop_front();
    }
    if (!failed) {
      if (auto wrote = process_->Stdin().Write(piece); !wrote) {
        // Tell the host once; keep returning credit so it never blocks.
        failed = true;
        server_.Send(wire::EncodeData(id_, StreamId::kStdin, {}, true));
      }
    }
    {
      std::lock_guard lock(mu_);
      stdin_room_ += piece.size();
    }
    server_.Send(wire::Encode(MsgType::kCredit, id_, wire::CreditBody{piece.size()}));
  }
}

void ServedProcess::ReportExit() {
  auto status = process_->Wait();
  wire::ExitBody body;
  if (status) {
    body.exit_code = status->exit_code;
    body.signal = status->signal.value_or(0);
  } else {
    body.error_code = std::string(ToString(status.error().code()));
    body.error_message = status.error().message();
  }
  server_.Send(wire::Encode(MsgType::kExit, id_, body));
  std::lock_guard lock(mu_);
  exit_reported_ = true;
  cv_.notify_all();
}

// ---- Server ----

Status Server::Handshake() {
  wire::Hello mine{.magic = std::string(wire::kMagic),
                   .version = wire::kProtocolVersion,
                   .max_frame = wire::kMaxFrameBytes,
                   .chunk = wire::kChunkBytes,
                   .window = wire::kWindowBytes,
                   .max_inflight = options_.max_inflight,
                   .max_stdin = options_.max_stdin_bytes,
                   .max_upload = options_.max_upload_bytes};
  if (auto* reporter = As<WorkdirReporter>(sandbox_)) mine.workdir = reporter->Workdir();
  if (!Send(wire::Encode(MsgType::kHello, 0, mine)))
    return Fail(Error::Code::Unavailable, "cannot send the hello to the host");
  return {};
}

Status Server::Run() {
  SANDBOX_RETURN_IF_ERROR(Handshake());
  bool greeted = false;
  Status outcome;
  for (;;) {
    bool stop = false;
    for (;;) {
      auto next = assembler_.Next();
      if (!next) {
        outcome = Fail(Error::Code::InvalidArgument, "the host sent a " + next.error().message());
        stop = true;
        break;
      }
      if (!*next) break;
      if (!greeted) {
        auto frame = wire::DecodeFrame(**next);
        if (!frame || frame->type != MsgType::kHello) {
          outcome = Fail(Error::Code::Unavailable, "the host did not start with a hello");
          stop = true;
          break;
        }
        auto hello = wire::DecodeHello(*frame->body);
        if (!hello) {
          outcome = Fail(hello.error());
          stop = true;
          break;
        }
        peer_ = *hello;
        chunk_ = std::min({chunk_, peer_.chunk, peer_.max_frame - wire::kFrameOverhead});
        window_ = std::min(window_, peer_.window);
        greeted = true;
        continue;
      }
      if (auto handled = HandleFrame(**next); !handled) {
        outcome = Fail(Error::Code::InvalidArgument, "the host broke the protocol: " + handled.error().message());
        stop = true;
        break;
      }
    }
    if (stop) break;
    assembler_.Compact();
    auto got = stream_.Read(assembler_.Space());
    if (!got) {
      outcome = Fail(got.error());
      break;
    }
    if (*got == 0) break;  // the host closed the stream: a clean end
    assembler_.Commit(*got);
  }
  if (!outcome) Log(outcome.error().ToString());
  Shutdown();
  return outcome;
}

void Server::Shutdown() {
  std::map<std::uint64_t, std::shared_ptr<Session>> sessions;
  std::map<std::uint64_t, std::shared_ptr<ServedProcess>> processes;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, request] : requests_) request->stop.request_stop();
    sessions = sessions_;
    processes = processes_;
  }
  for (auto& [id, session] : sessions) (void)session->Close();
  for (auto& [id, process] : processes) (void)process->process().Kill();
  pool_.Join();
  {
    std::lock_guard lock(mu_);
    requests_.clear();
    sessions_.clear();
    processes_.clear();
  }
  sessions.clear();
  processes.clear();  // joins every pump
}

Status Server::HandleFrame(std::string_view bytes) {
  auto frame = wire::DecodeFrame(bytes);
  if (!frame) return Fail(frame.error());
  const std::uint64_t id = frame->id;
  const msgpack::object& body = *frame->body;
  if (wire::IsRequest(frame->type)) return OnRequest(frame->type, id, body);
  switch (frame->type) {
    case MsgType::kData:
      return OnData(id, body);
    case MsgType::kCancel: {
      auto cancel = wire::DecodeAs<wire::HandleRequest>(body);
      if (!cancel) return Fail(cancel.error());
      std::shared_ptr<Request> request;
      {
        std::lock_guard lock(mu_);
        auto it = requests_.find(cancel->handle);
        if (it == requests_.end()) return {};  // already answered
        request = it->second;
        if (!request->dispatched) {
          // Still receiving its data: the host sends no more of it.
          requests_.erase(it);
        }
      }
      if (request->dispatched) {
        request->stop.request_stop();
      } else {
        Send(wire::EncodeErrorReply(request->id, Error(Error::Code::Cancelled, "the call was cancelled")));
      }
      return {};
    }
    case MsgType::kStdinClose: {
      auto process = FindProcess(id);
      if (!process) return Fail(Error::Code::InvalidArgument, "stdin_close for unknown process " + std::to_string(id));
      process->OnStdinClose();
      return {};
    }
    case MsgType::kCredit: {
      auto credit = wire::DecodeAs<wire::CreditBody>(body);
      if (!credit) return Fail(credit.error());
      auto process = FindProcess(id);
      if (!process || !process->OnCredit(credit->bytes))
        return Fail(Error::Code::InvalidArgument, "bad credit for process " + std::to_string(id));
      return {};
    }
    default:
      return Fail(Error::Code::InvalidArgument,
                  "unexpected message '" + std::string(wire::ToString(frame->type)) + "' from the host");
  }
}

Status Server::OnRequest(MsgType type, std::uint64_t id, const msgpack::object& body) {
  auto request = std::make_shared<Request>();
  request->type = type;
  request->id = id;
  switch (type) {
    case MsgType::kExec:
    case MsgType::kProcessStart: {
      auto exec = wire::DecodeAs<wire::ExecRequest>(body);
      if (!exec) return Fail(exec.error());
      request->exec = std::move(*exec);
      if (type == MsgType::kExec) request->expected = request->exec.stdin_size;
      if (request->expected > options_.max_stdin_bytes)
        return Fail(Error::Code::TooLarge, "exec stdin beyond the advertised limit");
      break;
    }
    case MsgType::kReadFile:
    case MsgType::kWriteFile:
    case MsgType::kAppendFile:
    case MsgType::kRemove:
    case MsgType::kListDir:
    case MsgType::kMakeDirAll: {
      auto file = wire::DecodeAs<wire::FileRequest>(body);
      if (!file) return Fail(file.error());
      request->file = std::move(*file);
      if (type == MsgType::kWriteFile || type == MsgType::kAppendFile)
        request->expected = request->file.size;
      if (request->expected > options_.max_upload_bytes)
        return Fail(Error::Code::TooLarge, "file data beyond the advertised limit");
      break;
    }
    case MsgType::kSessionClose:
    case MsgType::kProcessKill:
    case MsgType::kProcessStderr:
    case MsgType::kProcessRelease: {
      auto handle = wire::DecodeAs<wire::HandleRequest>(body);
      if (!handle) return Fail(handle.error());
      request->handle = *handle;
      break;
    }
    default:
      break;  // kSessionOpen, kClose: no body
  }
  {
    std::lock_guard lock(mu_);
    if (requests_.size() >= options_.max_inflight)
      return Fail(Error::Code::InvalidArgument, "more requests in flight than the advertised limit");
    if (!requests_.emplace(id, request).second)
      return Fail(Error::Code::InvalidArgument, "request id " + std::to_string(id) + " is already in flight");
  }
  if (request->expected == 0) Dispatch(request);
  return {};
}

Status Server::OnData(std::uint64_t id, const msgpack::object& body) {
  auto data = wire::DecodeData(body);
  if (!data) return Fail(data.error());
  if (data->stream != StreamId::kStdin)
    return Fail(Error::Code::InvalidArgument, "the host sent data on an output stream");
  std::shared_ptr<Request> ready;
  {
    std::lock_guard lock(mu_);
    auto it = requests_.find(id);
    if (it != requests_.end() && !it->second->dispatched) {
      Request& request = *it->second;
      if (data->bytes.size() > request.expected - request.upload.size())
        return Fail(Error::Code::InvalidArgument, "more data than announced for request " + std::to_string(id));
      if (request.upload.empty()) request.upload.reserve(request.expected);
      request.upload.append(data->bytes);
      if (request.upload.size() < request.expected) return {};
      ready = it->second;
    }
  }
  if (ready) {
    Dispatch(ready);
    return {};
  }
  {
    std::lock_guard lock(mu_);
    if (requests_.contains(id) && !processes_.contains(id))
      return Fail(Error::Code::InvalidArgument, "data for a request that takes none");
  }
  auto process = FindProcess(id);
  if (!process || !process->OnStdin(data->bytes))
    return Fail(Error::Code::InvalidArgument, "bad stdin data for id " + std::to_string(id));
  return {};
}

void Server::Dispatch(const std::shared_ptr<Request>& request) {
  {
    std::lock_guard lock(mu_);
    request->dispatched = true;
  }
  pool_.Submit([this, request] { Execute(*request); });
}

void Server::SendChunks(std::uint64_t id, StreamId stream, std::string_view data,
                        const std::stop_source* stop) {
  while (!data.empty()) {
    if (stop && stop->stop_requested()) return;
    std::string_view chunk = data.substr(0, chunk_);
    data.remove_prefix(chunk.size());
    if (!Send(wire::EncodeData(id, stream, chunk, false))) return;
  }
}

void Server::Execute(Request& request) {
  const auto unsupported = [&](const char* what) {
    ReplyStatus(request, Fail(Error::Code::Unsupported, std::string("this sandbox cannot ") + what));
  };
  switch (request.type) {
    case MsgType::kExec: {
      const wire::ExecRequest& in = request.exec;
      Command cmd{.path = in.path,
                  .args = in.args,
                  .dir = in.dir,
                  .env = in.env,
                  .stdin_data = std::move(request.upload),
                  .timeout = std::chrono::nanoseconds(in.timeout_ns),
                  .output_limit = static_cast<std::size_t>(in.output_limit)};
      Context ctx = request.MakeContext(in.deadline_ns);
      Expected<Result> result = Fail(Error::Code::Internal, "unreachable");
      if (in.session != 0) {
        std::shared_ptr<Session> session;
        {
          std::lock_guard lock(mu_);
          if (auto it = sessions_.find(in.session); it != sessions_.end()) session = it->second;
        }
        result = session ? session->Exec(ctx, cmd)
                         : Fail(Error::Code::Unavailable, "the session is closed");
      } else {
        result = sandbox_.Exec(ctx, cmd);
      }
      if (!result) return ReplyStatus(request, Fail(result.error()));
      // Output beyond the cap the host asked for would be refused there.
      SendChunks(request.id, StreamId::kStdout, result->stdout_data, nullptr);
      SendChunks(request.id, StreamId::kStderr, result->stderr_data, nullptr);
      wire::ExecReply reply{.exit_code = result->exit_code,
                            .duration_ns = result->duration.count(),
                            .timed_out = result->timed_out,
                            .stdout_truncated = result->stdout_truncated,
                            .stderr_truncated = result->stderr_truncated,
                            .stdout_dropped = result->stdout_dropped,
                            .stderr_dropped = result->stderr_dropped,
                            .signal = result->signal.value_or(0),
                            .stdout_size = result->stdout_data.size(),
                            .stderr_size = result->stderr_data.size()};
      return Reply(request, wire::EncodeReply(request.id, nullptr, reply));
    }
    case MsgType::kReadFile: {
      Context ctx = request.MakeContext(request.file.deadline_ns);
      Expected<LimitedRead> read = Fail(Error::Code::Internal, "unreachable");
      if (request.file.limited) {
        auto* reader = As<LimitedReader>(sandbox_);
        if (!reader) return unsupported("read a file with a limit");
        read = reader->ReadFileLimit(ctx, request.file.path, request.file.max);
      } else {
        auto whole = sandbox_.ReadFile(ctx, request.file.path);
        if (whole) read = LimitedRead{.data = std::move(*whole)};
        else read = Fail(whole.error());
      }
      if (!read) return ReplyStatus(request, Fail(read.error()));
      SendChunks(request.id, StreamId::kFile, read->data, &request.stop);
      if (request.stop.stop_requested())
        return ReplyStatus(request, Fail(Error::Code::Cancelled, "the call was cancelled"));
      return Reply(request, wire::EncodeReply(request.id, nullptr,
                                              wire::ReadReply{read->truncated, read->data.size()}));
    }
    case MsgType::kWriteFile:
    case MsgType::kAppendFile: {
      Context ctx = request.MakeContext(request.file.deadline_ns);
      if (request.type == MsgType::kWriteFile)
        return ReplyStatus(request, sandbox_.WriteFile(ctx, request.file.path, request.upload, request.file.mode));
      auto* appender = As<Appender>(sandbox_);
      if (!appender) return unsupported("append to a file");
      return ReplyStatus(request, appender->AppendFile(ctx, request.file.path, request.upload, request.file.mode));
    }
    case MsgType::kRemove:
      return ReplyStatus(request, sandbox_.Remove(request.MakeContext(request.file.deadline_ns), request.file.path));
    case MsgType::kMakeDirAll: {
      auto* maker = As<DirectoryMaker>(sandbox_);
      if (!maker) return unsupported("make directories");
      return ReplyStatus(request, maker->MakeDirAll(request.MakeContext(request.file.deadline_ns),
                                                    request.file.path, request.file.mode));
    }
    case MsgType::kListDir: {
      auto entries = sandbox_.ListDir(request.MakeContext(request.file.deadline_ns), request.file.path);
      if (!entries) return ReplyStatus(request, Fail(entries.error()));
      std::vector<wire::WireEntry> batch;
      for (std::size_t i = 0; i < entries->size(); ++i) {
        batch.push_back({std::move((*entries)[i].name), (*entries)[i].is_dir});
        if (batch.size() == kEntriesPerFrame || i + 1 == entries->size()) {
          Send(wire::Encode(MsgType::kEntries, request.id, batch));
          batch.clear();
        }
      }
      return ReplyStatus(request, {});
    }
    case MsgType::kSessionOpen: {
      auto* sessioner = As<Sessioner>(sandbox_);
      if (!sessioner) return unsupported("open sessions");
      auto session = sessioner->NewSession(request.MakeContext(-1));
      if (!session) return ReplyStatus(request, Fail(session.error()));
      {
        std::lock_guard lock(mu_);
        sessions_[request.id] = std::shared_ptr<Session>(std::move(*session));
      }
      return ReplyStatus(request, {});
    }
    case MsgType::kSessionClose: {
      std::shared_ptr<Session> session;
      {
        std::lock_guard lock(mu_);
        if (auto it = sessions_.find(request.handle.handle); it != sessions_.end()) {
          session = std::move(it->second);
          sessions_.erase(it);
        }
      }
      return ReplyStatus(request, session ? session->Close() : Status{});
    }
    case MsgType::kProcessStart: {
      auto* host = As<ProcessHost>(sandbox_);
      if (!host) return unsupported("start long-lived processes");
      {
        std::lock_guard lock(mu_);
        if (processes_.size() >= options_.max_processes)
          return ReplyStatus(request, Fail(Error::Code::Unavailable,
                                           "too many live processes (" +
                                               std::to_string(options_.max_processes) +
                                               "); release some first"));
      }
      const wire::ExecRequest& in = request.exec;
      Command cmd{.path = in.path, .args = in.args, .dir = in.dir, .env = in.env};
      auto started = host->StartProcess(request.MakeContext(in.deadline_ns), cmd);
      if (!started) return ReplyStatus(request, Fail(started.error()));
      auto served = std::make_shared<ServedProcess>(*this, request.id, std::move(*started), window_, chunk_);
      {
        std::lock_guard lock(mu_);
        processes_[request.id] = served;
      }
      ReplyStatus(request, {});
      served->Start();
      return;
    }
    case MsgType::kProcessKill:
    case MsgType::kProcessStderr:
    case MsgType::kProcessRelease: {
      std::shared_ptr<ServedProcess> process;
      {
        std::lock_guard lock(mu_);
        auto it = processes_.find(request.handle.handle);
        if (it != processes_.end()) {
          process = it->second;
          if (request.type == MsgType::kProcessRelease) processes_.erase(it);
        }
      }
      if (!process) return ReplyStatus(request, Fail(Error::Code::Unavailable, "the process is gone"));
      if (request.type == MsgType::kProcessKill) return ReplyStatus(request, process->process().Kill());
      if (request.type == MsgType::kProcessRelease) {
        process->Stop();
        process.reset();
        return ReplyStatus(request, {});
      }
      std::string snapshot = process->process().StderrSnapshot();
      const std::size_t room = chunk_;
      if (snapshot.size() > room) snapshot.erase(0, snapshot.size() - room);
      return Reply(request, wire::EncodeReply(request.id, nullptr, wire::StderrReply{std::move(snapshot)}));
    }
    case MsgType::kClose: {
      Status closed = sandbox_.Close();
      std::vector<std::shared_ptr<ServedProcess>> live;
      {
        std::lock_guard lock(mu_);
        for (auto& [id, process] : processes_) live.push_back(process);
      }
      // Every exit reaches the host before the answer, so a host-side
      // Process::Wait after Close still learns how its process ended.
      for (auto& process : live) process->WaitExitReported(std::chrono::seconds(5));
      return ReplyStatus(request, closed);
    }
    default:
      return ReplyStatus(request, Fail(Error::Code::Internal, "unhandled request"));
  }
}

}  // namespace

Status Serve(Sandbox& sandbox, int read_fd, int write_fd, const ServeOptions& options) {
  os::UniqueFd in(read_fd);
  os::UniqueFd out(write_fd == read_fd ? -1 : write_fd);
  auto stream = os::ByteStream::Open(std::move(in), std::move(out));
  if (!stream) return Fail(stream.error());
  Server server(sandbox, std::move(*stream), options);
  return server.Run();
}

}  // namespace sandbox
