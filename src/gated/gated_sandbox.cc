// The review gate's decorators over Sandbox and Session. One GateCore holds
// the base sandbox, the reviewer, the audit log and the remembered
// decisions; the decorator classes are thin and only decide which optional
// capabilities are visible (all the base has, minus ProcessHost).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <stop_token>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>

#include "sandbox/gated.h"

namespace sandbox {
namespace {

using Clock = std::chrono::steady_clock;

// The most bytes one remembered request may take, and all of them together.
constexpr std::size_t kMaxRememberedKeyBytes = 16 << 10;
constexpr std::size_t kMaxRememberedBytes = 4 << 20;

std::string RandomSandboxId() {
  std::random_device random;
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "gate-%08x%08x", random(), random());
  return buffer;
}

std::string DescribeDuration(std::chrono::nanoseconds duration) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  if (duration % seconds(1) == duration.zero())
    return std::to_string(duration_cast<seconds>(duration).count()) + "s";
  return std::to_string(duration_cast<milliseconds>(duration).count()) + "ms";
}

// Appends `field` so that no two different field lists give the same key.
void AppendKeyField(std::string& key, std::string_view field) {
  key += std::to_string(field.size());
  key += ':';
  key += field;
}

std::string RememberKey(const ReviewRequest& request) {
  std::string key;
  AppendKeyField(key, ToString(request.operation));
  // In a session, the same words may mean something else (a shell function
  // of that name), so a session's requests are remembered apart.
  key += request.in_session ? 's' : 'p';
  if (const Command* command = request.command) {
    AppendKeyField(key, command->path);
    key += std::to_string(command->args.size()) + "a";
    for (const std::string& arg : command->args) AppendKeyField(key, arg);
    AppendKeyField(key, command->dir);
    key += std::to_string(command->env.size()) + "e";
    for (const std::string& entry : command->env) AppendKeyField(key, entry);
    AppendKeyField(key, command->stdin_data);
  } else {
    AppendKeyField(key, request.path);
    key += std::to_string(request.mode);
  }
  return key;
}

AuditRecord RecordFor(const ReviewRequest& request) {
  AuditRecord record;
  record.sandbox_id = std::string(request.sandbox_id);
  record.backend = std::string(request.backend);
  record.operation = std::string(ToString(request.operation));
  record.in_session = request.in_session;
  if (const Command* command = request.command) {
    record.argv.push_back(command->path);
    record.argv.insert(record.argv.end(), command->args.begin(), command->args.end());
    record.dir = command->dir;
  } else {
    record.path = std::string(request.path);
  }
  return record;
}

void AddResult(AuditRecord& record, const Result& result) {
  record.exit_code = result.exit_code;
  record.signal = result.signal;
  record.duration = result.duration;
  record.timed_out = result.timed_out;
  record.stdout_truncated = result.stdout_truncated;
  record.stderr_truncated = result.stderr_truncated;
}

void AddError(AuditRecord& record, const Error& error) { record.error = error.ToString(); }

// The reviewers' view of a request, owned: a review may outlive the call
// that asked for it (the gate stops waiting at the timeout), so its thread
// must not read the caller's arguments.
class OwnedRequest {
 public:
  explicit OwnedRequest(const ReviewRequest& request)
      : operation_(request.operation),
        sandbox_id_(request.sandbox_id),
        backend_(request.backend),
        in_session_(request.in_session),
        path_(request.path),
        workdir_(request.workdir),
        data_(request.data),
        mode_(request.mode) {
    if (request.command) command_ = *request.command;
  }

  ReviewRequest View() const {
    ReviewRequest request;
    request.operation = operation_;
    request.sandbox_id = sandbox_id_;
    request.backend = backend_;
    request.in_session = in_session_;
    request.command = command_ ? &*command_ : nullptr;
    request.path = path_;
    request.workdir = workdir_;
    request.data = data_;
    request.mode = mode_;
    return request;
  }

 private:
  Operation operation_;
  std::string sandbox_id_;
  std::string backend_;
  bool in_session_;
  std::optional<Command> command_;
  std::string path_;
  std::string workdir_;
  std::string data_;
  FileMode mode_;
};

// One review in flight, shared by the waiting call and the review's thread.
struct PendingReview {
  explicit PendingReview(const ReviewRequest& asked) : request(asked) {}

  const OwnedRequest request;
  std::stop_source abandon;  // stopped when the call stops waiting
  std::mutex mutex;
  std::condition_variable answered;
  std::optional<Expected<Decision>> answer;  // guarded by mutex
  Clock::time_point answered_at;             // guarded by mutex
  bool finished = false;                     // the reviewer returned; guarded by mutex
  bool abandoned = false;                    // the call stopped waiting first; guarded by mutex
};

// Reviews past their timeout whose reviewer still runs, per gate; beyond
// this the gate denies without asking, so a stuck reviewer cannot pile up
// threads.
constexpr int kMaxLateReviews = 16;

// Everything a gated sandbox and its sessions share.
class GateCore {
 public:
  GateCore(std::shared_ptr<Sandbox> base, GateOptions options, std::string backend,
           std::string workdir)
      : base_(std::move(base)),
        options_(std::move(options)),
        backend_(std::move(backend)),
        workdir_(std::move(workdir)) {
    if (options_.sandbox_id.empty()) options_.sandbox_id = RandomSandboxId();
  }

  Sandbox& base() { return *base_; }
  const GateOptions& options() const { return options_; }

  ReviewRequest NewRequest(Operation operation) const {
    ReviewRequest request;
    request.operation = operation;
    request.sandbox_id = options_.sandbox_id;
    request.backend = backend_;
    request.workdir = workdir_;
    return request;
  }

  // Reviews `request` and records the decision; ok means run it.
  Status Admit(const Context& ctx, const ReviewRequest& request) {
    SANDBOX_RETURN_IF_ERROR(CheckUsable());
    SANDBOX_RETURN_IF_ERROR(ctx.Check());
    if (!options_.reviewer) return {};
    AuditRecord record = RecordFor(request);
    record.event = "decision";
    record.reviewer = options_.reviewer->Name();
    const std::string key = RememberKey(request);
    bool remembered = false;
    {
      std::lock_guard lock(mutex_);
      remembered = remembered_.contains(key);
    }
    Decision decision;
    if (remembered) {
      decision = Decision::Allow("allowed earlier on this sandbox with \"remember\"");
      record.decision = "remembered";
    } else {
      decision = Ask(ctx, request);
      if (!decision.decided_by.empty()) record.reviewer = decision.decided_by;
      record.decision = std::string(ToString(decision.verdict));
      if (decision.verdict == Decision::Verdict::AllowRemember) Remember(key);
    }
    record.reason = decision.reason;
    SANDBOX_RETURN_IF_ERROR(Audit(record));
    if (decision.verdict == Decision::Verdict::Deny) {
      if (ctx.cancelled())
        return Fail(Error::Code::Cancelled, "the call was cancelled during review");
      if (ctx.expired())
        return Fail(Error::Code::DeadlineExceeded, "the call's deadline passed during review");
      return Fail(Error::Code::Denied,
                  "denied by the " + record.reviewer + " reviewer: " + decision.reason);
    }
    return {};
  }

  // Writes the line of an operation that ran (or failed in the base).
  void RecordOperation(AuditRecord record) {
    record.event = "operation";
    (void)Audit(record);
  }

  // Writes one line; a failure breaks the gate so nothing runs unaudited.
  Status Audit(const AuditRecord& record) {
    if (!options_.audit) return {};
    auto written = options_.audit->Write(record);
    if (written) return {};
    std::lock_guard lock(mutex_);
    if (!broken_)
      broken_ =
          Error(Error::Code::Unavailable, "the review gate stopped: " + written.error().message() +
                                              "; nothing runs without its audit line");
    return Fail(*broken_);
  }

  Status CheckUsable() {
    std::lock_guard lock(mutex_);
    if (broken_) return Fail(*broken_);
    return {};
  }

 private:
  // Runs the review on a thread of its own, with a copy of the request, and
  // waits until it answers, the review deadline or the caller's deadline
  // passes, or the caller cancels. A reviewer that never returns cannot hold
  // the call: the gate stops waiting, cancels the review's Context and
  // denies; the answer that comes later is discarded.
  Decision Ask(const Context& ctx, const ReviewRequest& request) {
    if (late_reviews_->load() >= kMaxLateReviews)
      return Decision::Deny(std::to_string(kMaxLateReviews) +
                            " reviews are still running past their timeout; denied without "
                            "asking");
    const Clock::time_point review_deadline = Clock::now() + options_.review_timeout;
    const Context review_ctx = ctx.Deadline(review_deadline);
    auto pending = std::make_shared<PendingReview>(request);
    const Context reviewer_ctx = review_ctx.StopToken(pending->abandon.get_token());
    try {
      std::thread(RunReview, options_.reviewer, pending, reviewer_ctx, late_reviews_).detach();
    } catch (const std::system_error& error) {
      return Decision::Deny(std::string("the review could not start: ") + error.what());
    }
    {
      // Registered before the lock is taken: it runs at once when the call
      // is already cancelled, and it takes the lock itself.
      std::stop_callback wake(ctx.stop_token(), [&pending] {
        std::lock_guard lock(pending->mutex);
        pending->answered.notify_all();
      });
      std::unique_lock lock(pending->mutex);
      const Clock::time_point wait_until = *review_ctx.deadline();
      pending->answered.wait_until(lock, wait_until,
                                   [&] { return pending->answer || ctx.cancelled(); });
      // An answer given at or after the deadline is as good as none.
      if (pending->answer && pending->answered_at >= wait_until) pending->answer.reset();
      if (!pending->answer) {
        pending->abandoned = !pending->finished;
        if (pending->abandoned) late_reviews_->fetch_add(1);
      }
    }
    if (!pending->answer) pending->abandon.request_stop();
    if (ctx.cancelled()) return Decision::Deny("the call was cancelled during review");
    if (!pending->answer) {
      if (Clock::now() >= review_deadline)
        return Decision::Deny("the review did not answer within " +
                              DescribeDuration(options_.review_timeout) +
                              ", so the operation was denied");
      return Decision::Deny("the call's deadline passed during review");
    }
    Expected<Decision>& answer = *pending->answer;
    if (!answer) return Decision::Deny("the reviewer failed: " + answer.error().message());
    return *answer;
  }

  // The body of a review's thread. It owns what it reads: the request copy
  // in `pending` and a reference to the reviewer.
  static void RunReview(std::shared_ptr<Reviewer> reviewer, std::shared_ptr<PendingReview> pending,
                        Context ctx, std::shared_ptr<std::atomic<int>> late_reviews) {
    Expected<Decision> answer = Fail(Error::Code::Internal, "no answer");
    try {
      answer = reviewer->Review(ctx, pending->request.View());
    } catch (const std::exception& error) {
      answer = Decision::Deny(std::string("the reviewer threw: ") + error.what());
    } catch (...) {
      answer = Decision::Deny("the reviewer threw");
    }
    std::lock_guard lock(pending->mutex);
    pending->finished = true;
    if (pending->abandoned) {
      late_reviews->fetch_sub(1);
      return;
    }
    pending->answer = std::move(answer);
    pending->answered_at = Clock::now();
    pending->answered.notify_all();
  }

  void Remember(const std::string& key) {
    if (key.size() > kMaxRememberedKeyBytes) return;
    std::lock_guard lock(mutex_);
    if (remembered_.size() >= options_.max_remembered ||
        remembered_bytes_ + key.size() > kMaxRememberedBytes)
      return;
    if (remembered_.insert(key).second) remembered_bytes_ += key.size();
  }

  const std::shared_ptr<Sandbox> base_;  // null for a lone gated session
  GateOptions options_;
  const std::string backend_;
  const std::string workdir_;
  std::mutex mutex_;
  std::set<std::string> remembered_;  // guarded by mutex_
  std::size_t remembered_bytes_ = 0;  // guarded by mutex_
  std::optional<Error> broken_;       // guarded by mutex_
  // Reviews the gate stopped waiting for whose reviewer has not returned
  // yet; shared with their threads, which may outlive the gate.
  const std::shared_ptr<std::atomic<int>> late_reviews_ = std::make_shared<std::atomic<int>>(0);
};

// Runs an Exec through the gate: review, run, record.
template <class Run>
Expected<Result> GatedExec(GateCore& core, const Context& ctx, const Command& cmd, bool in_session,
                           Run run) {
  ReviewRequest request = core.NewRequest(Operation::Exec);
  request.command = &cmd;
  request.in_session = in_session;
  SANDBOX_RETURN_IF_ERROR(core.Admit(ctx, request));
  AuditRecord record = RecordFor(request);
  Expected<Result> result = run();
  if (result) {
    AddResult(record, *result);
  } else {
    AddError(record, result.error());
  }
  core.RecordOperation(std::move(record));
  return result;
}

class GatedSession final : public Session {
 public:
  GatedSession(std::shared_ptr<GateCore> core, std::unique_ptr<Session> base)
      : core_(std::move(core)), base_(std::move(base)) {}

  Expected<Result> Exec(const Context& ctx, const Command& cmd) override {
    return GatedExec(*core_, ctx, cmd, /*in_session=*/true, [&] { return base_->Exec(ctx, cmd); });
  }
  Status Close() override { return base_->Close(); }

 private:
  const std::shared_ptr<GateCore> core_;
  const std::unique_ptr<Session> base_;
};

// A file operation that may be reviewed: review when `reviewed`, run, record.
template <class Run>
auto GatedFileOperation(GateCore& core, const Context& ctx, Operation operation,
                        std::string_view path, std::string_view data, FileMode mode, bool reviewed,
                        Run run) -> decltype(run()) {
  ReviewRequest request = core.NewRequest(operation);
  request.path = path;
  request.data = data;
  request.mode = mode;
  if (reviewed) {
    SANDBOX_RETURN_IF_ERROR(core.Admit(ctx, request));
  } else {
    SANDBOX_RETURN_IF_ERROR(core.CheckUsable());
  }
  AuditRecord record = RecordFor(request);
  auto outcome = run();
  if (!outcome) AddError(record, outcome.error());
  if (operation == Operation::WriteFile || operation == Operation::AppendFile)
    record.bytes = data.size();
  if constexpr (std::is_same_v<decltype(outcome), Expected<std::string>>) {
    if (outcome) record.bytes = outcome->size();
  } else if constexpr (std::is_same_v<decltype(outcome), Expected<LimitedRead>>) {
    if (outcome) {
      record.bytes = outcome->data.size();
      record.truncated = outcome->truncated;
    }
  }
  core.RecordOperation(std::move(record));
  return outcome;
}

class GatedSandboxBase : public Sandbox {
 public:
  explicit GatedSandboxBase(std::shared_ptr<GateCore> core) : core_(std::move(core)) {}

  Capabilities GetCapabilities() const override { return core_->base().GetCapabilities(); }

  Expected<Result> Exec(const Context& ctx, const Command& cmd) override {
    return GatedExec(*core_, ctx, cmd, /*in_session=*/false,
                     [&] { return core_->base().Exec(ctx, cmd); });
  }

  Expected<std::string> ReadFile(const Context& ctx, std::string_view path) override {
    return GatedFileOperation(*core_, ctx, Operation::ReadFile, path, {}, 0, false,
                              [&] { return core_->base().ReadFile(ctx, path); });
  }

  Status WriteFile(const Context& ctx, std::string_view path, std::string_view data,
                   FileMode mode) override {
    return GatedFileOperation(*core_, ctx, Operation::WriteFile, path, data, mode,
                              core_->options().review_write_file,
                              [&] { return core_->base().WriteFile(ctx, path, data, mode); });
  }

  Status Remove(const Context& ctx, std::string_view path) override {
    return GatedFileOperation(*core_, ctx, Operation::Remove, path, {}, 0,
                              core_->options().review_remove,
                              [&] { return core_->base().Remove(ctx, path); });
  }

  Expected<std::vector<DirEntry>> ListDir(const Context& ctx, std::string_view path) override {
    return GatedFileOperation(*core_, ctx, Operation::ListDir, path, {}, 0, false,
                              [&] { return core_->base().ListDir(ctx, path); });
  }

  Status Close() override { return core_->base().Close(); }

 protected:
  const std::shared_ptr<GateCore> core_;
};

// The optional capabilities the gate forwards, each a thin adapter.
class GatedAppender : public Appender {
 public:
  explicit GatedAppender(GateCore* core) : core_(core) {}
  Status AppendFile(const Context& ctx, std::string_view path, std::string_view data,
                    FileMode mode) override {
    return GatedFileOperation(
        *core_, ctx, Operation::AppendFile, path, data, mode, core_->options().review_append_file,
        [&] { return As<Appender>(core_->base())->AppendFile(ctx, path, data, mode); });
  }

 private:
  GateCore* core_;
};

class GatedDirectoryMaker : public DirectoryMaker {
 public:
  explicit GatedDirectoryMaker(GateCore* core) : core_(core) {}
  Status MakeDirAll(const Context& ctx, std::string_view path, FileMode mode) override {
    return GatedFileOperation(
        *core_, ctx, Operation::MakeDirAll, path, {}, mode, core_->options().review_make_dir_all,
        [&] { return As<DirectoryMaker>(core_->base())->MakeDirAll(ctx, path, mode); });
  }

 private:
  GateCore* core_;
};

class GatedLimitedReader : public LimitedReader {
 public:
  explicit GatedLimitedReader(GateCore* core) : core_(core) {}
  Expected<LimitedRead> ReadFileLimit(const Context& ctx, std::string_view path,
                                      std::int64_t max) override {
    return GatedFileOperation(*core_, ctx, Operation::ReadFileLimit, path, {}, 0, false, [&] {
      return As<LimitedReader>(core_->base())->ReadFileLimit(ctx, path, max);
    });
  }

 private:
  GateCore* core_;
};

class GatedSessioner : public Sessioner {
 public:
  explicit GatedSessioner(GateCore* core, std::shared_ptr<GateCore> owner)
      : core_(core), owner_(std::move(owner)) {}
  Expected<std::unique_ptr<Session>> NewSession(const Context& ctx) override {
    return GatedFileOperation(*core_, ctx, Operation::NewSession, {}, {}, 0, false,
                              [&]() -> Expected<std::unique_ptr<Session>> {
                                auto session = As<Sessioner>(core_->base())->NewSession(ctx);
                                if (!session) return Fail(session.error());
                                return std::unique_ptr<Session>(
                                    std::make_unique<GatedSession>(owner_, std::move(*session)));
                              });
  }

 private:
  GateCore* core_;
  std::shared_ptr<GateCore> owner_;
};

class GatedWorkdirReporter : public WorkdirReporter {
 public:
  explicit GatedWorkdirReporter(GateCore* core) : core_(core) {}
  std::string Workdir() const override { return As<WorkdirReporter>(core_->base())->Workdir(); }

 private:
  GateCore* core_;
};

// Stands in for a capability the base does not have.
template <int kSlot>
struct Absent {
  explicit Absent(GateCore*) {}
};

template <bool kOn, class Capability, int kSlot>
using Maybe = std::conditional_t<kOn, Capability, Absent<kSlot>>;

template <bool kAppend, bool kMakeDir, bool kLimitedRead, bool kSessions, bool kWorkdir>
class GatedSandbox final : public GatedSandboxBase,
                           public Maybe<kAppend, GatedAppender, 0>,
                           public Maybe<kMakeDir, GatedDirectoryMaker, 1>,
                           public Maybe<kLimitedRead, GatedLimitedReader, 2>,
                           public Maybe<kSessions, GatedSessioner, 3>,
                           public Maybe<kWorkdir, GatedWorkdirReporter, 4> {
 public:
  explicit GatedSandbox(const std::shared_ptr<GateCore>& core)
      : GatedSandboxBase(core),
        Maybe<kAppend, GatedAppender, 0>(core.get()),
        Maybe<kMakeDir, GatedDirectoryMaker, 1>(core.get()),
        Maybe<kLimitedRead, GatedLimitedReader, 2>(core.get()),
        Maybe<kSessions, GatedSessioner, 3>(MakeSessioner(core)),
        Maybe<kWorkdir, GatedWorkdirReporter, 4>(core.get()) {}

 private:
  static Maybe<kSessions, GatedSessioner, 3> MakeSessioner(const std::shared_ptr<GateCore>& core) {
    if constexpr (kSessions) {
      return GatedSessioner(core.get(), core);
    } else {
      return Absent<3>(core.get());
    }
  }
};

// Instantiates the GatedSandbox whose capabilities are `present`, one flag
// at a time.
template <bool... kFlags>
std::unique_ptr<Sandbox> MakeGated(const std::shared_ptr<GateCore>& core, const bool* present) {
  if constexpr (sizeof...(kFlags) == 5) {
    return std::make_unique<GatedSandbox<kFlags...>>(core);
  } else {
    return *present ? MakeGated<kFlags..., true>(core, present + 1)
                    : MakeGated<kFlags..., false>(core, present + 1);
  }
}

}  // namespace

std::string_view ToString(Operation operation) {
  switch (operation) {
    case Operation::Exec:
      return "exec";
    case Operation::WriteFile:
      return "write_file";
    case Operation::AppendFile:
      return "append_file";
    case Operation::Remove:
      return "remove";
    case Operation::MakeDirAll:
      return "make_dir_all";
    case Operation::ReadFile:
      return "read_file";
    case Operation::ReadFileLimit:
      return "read_file_limit";
    case Operation::ListDir:
      return "list_dir";
    case Operation::NewSession:
      return "new_session";
  }
  return "unknown";
}

Expected<Operation> ParseOperation(std::string_view name) {
  for (Operation operation : {Operation::Exec, Operation::WriteFile, Operation::AppendFile,
                              Operation::Remove, Operation::MakeDirAll, Operation::ReadFile,
                              Operation::ReadFileLimit, Operation::ListDir, Operation::NewSession})
    if (ToString(operation) == name) return operation;
  return Fail(Error::Code::InvalidArgument, "unknown operation '" + std::string(name) + "'");
}

std::string_view ToString(Decision::Verdict verdict) {
  switch (verdict) {
    case Decision::Verdict::Allow:
      return "allow";
    case Decision::Verdict::AllowRemember:
      return "allow_remember";
    case Decision::Verdict::Deny:
      return "deny";
  }
  return "deny";
}

namespace {

class CallbackReviewer final : public Reviewer {
 public:
  CallbackReviewer(ReviewCallback decide, std::string name)
      : decide_(std::move(decide)), name_(std::move(name)) {}
  std::string Name() const override { return name_; }
  Expected<Decision> Review(const Context& ctx, const ReviewRequest& request) override {
    return decide_(ctx, request);
  }

 private:
  const ReviewCallback decide_;
  const std::string name_;
};

Status ValidateGateOptions(const GateOptions& options) {
  if (!options.reviewer && !options.audit)
    return Fail(Error::Code::InvalidArgument, "a review gate needs a reviewer or an audit log");
  if (options.review_timeout <= std::chrono::nanoseconds::zero())
    return Fail(Error::Code::InvalidArgument, "the review timeout must be positive");
  return {};
}

}  // namespace

std::shared_ptr<Reviewer> NewCallbackReviewer(ReviewCallback decide, std::string name) {
  return std::make_shared<CallbackReviewer>(std::move(decide), std::move(name));
}

Expected<std::unique_ptr<Sandbox>> NewGatedSandbox(std::shared_ptr<Sandbox> base,
                                                   GateOptions options) {
  if (!base) return Fail(Error::Code::InvalidArgument, "a review gate needs a sandbox to wrap");
  SANDBOX_RETURN_IF_ERROR(ValidateGateOptions(options));
  std::string backend = base->GetCapabilities().backend;
  std::string workdir;
  if (auto* reporter = As<WorkdirReporter>(*base)) workdir = reporter->Workdir();
  const bool present[5] = {
      As<Appender>(*base) != nullptr,        As<DirectoryMaker>(*base) != nullptr,
      As<LimitedReader>(*base) != nullptr,   As<Sessioner>(*base) != nullptr,
      As<WorkdirReporter>(*base) != nullptr,
  };
  auto core = std::make_shared<GateCore>(std::move(base), std::move(options), std::move(backend),
                                         std::move(workdir));
  return MakeGated<>(core, present);
}

Expected<std::unique_ptr<Session>> NewGatedSession(std::unique_ptr<Session> base,
                                                   GateOptions options, std::string backend) {
  if (!base) return Fail(Error::Code::InvalidArgument, "a review gate needs a session to wrap");
  SANDBOX_RETURN_IF_ERROR(ValidateGateOptions(options));
  auto core = std::make_shared<GateCore>(nullptr, std::move(options), std::move(backend), "");
  return std::unique_ptr<Session>(std::make_unique<GatedSession>(std::move(core), std::move(base)));
}

}  // namespace sandbox
