// MicroVmPool: guests booted ahead of demand by one background thread.
#include <stdlib.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "sandbox/microvm.h"

namespace sandbox {
namespace {

namespace fs = std::filesystem;

class Pool final : public MicroVmPool {
 public:
  explicit Pool(MicroVmPoolOptions options) : options_(std::move(options)) {
    booter_ = std::thread([this] { BootLoop(); });
  }

  ~Pool() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    booter_.join();
    for (Lease& lease : idle_) {
      (void)lease.sandbox->Close();
      std::error_code ignored;
      fs::remove_all(lease.workspace, ignored);
    }
  }

  Expected<Lease> Acquire() override {
    std::unique_lock lock(mu_);
    ++waiting_;
    cv_.notify_all();  // a refill held back for an earlier hand-out starts now
    cv_.wait(lock, [this] { return !idle_.empty() || last_error_.has_value(); });
    --waiting_;
    if (idle_.empty()) {
      Error error = *last_error_;
      last_error_.reset();  // the next Acquire waits for a new attempt
      return Fail(std::move(error));
    }
    Lease lease = std::move(idle_.front());
    idle_.pop_front();
    refill_after_ = std::chrono::steady_clock::now() + options_.refill_delay;
    cv_.notify_all();  // the booter refills
    return lease;
  }

 private:
  Expected<Lease> BootOne() {
    std::string pattern = options_.workspaces_dir + "/microvm-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr)
      return Fail(Error::Code::PermissionDenied,
                  "mkdtemp in '" + options_.workspaces_dir + "' failed: " + std::strerror(errno));
    MicroVmOptions vm = options_.vm;
    vm.workspace = pattern;
    auto sandbox = NewMicroVmSandbox(vm);
    if (!sandbox) {
      std::error_code ignored;
      fs::remove_all(pattern, ignored);
      return Fail(sandbox.error());
    }
    return Lease{std::move(*sandbox), pattern};
  }

  void BootLoop() {
    for (;;) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || (idle_.size() < options_.size && !last_error_); });
        // The guest just handed out runs its first commands undisturbed,
        // unless a caller is waiting for the next one.
        cv_.wait_until(lock, refill_after_, [this] { return stopping_ || waiting_ > 0; });
        if (stopping_) return;
      }
      auto lease = BootOne();
      std::lock_guard lock(mu_);
      if (lease) {
        idle_.push_back(std::move(*lease));
      } else {
        last_error_ = lease.error();
      }
      cv_.notify_all();
    }
  }

  const MicroVmPoolOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Lease> idle_;
  std::optional<Error> last_error_;
  std::size_t waiting_ = 0;  // callers blocked in Acquire
  std::chrono::steady_clock::time_point refill_after_{};
  bool stopping_ = false;
  std::thread booter_;
};

}  // namespace

Expected<std::unique_ptr<MicroVmPool>> MicroVmPool::Create(const MicroVmPoolOptions& options) {
  if (options.size == 0) return Fail(Error::Code::InvalidArgument, "a pool of zero guests");
  if (options.refill_delay.count() < 0)
    return Fail(Error::Code::InvalidArgument, "a negative refill_delay");
  std::error_code ec;
  if (!fs::is_directory(options.workspaces_dir, ec))
    return Fail(Error::Code::NotADirectory,
                "workspaces_dir '" + options.workspaces_dir + "' is not a directory");
  MicroVmPoolOptions resolved = options;
  if (resolved.vm.image.kernel.empty()) {  // build the image once, not per guest
    auto image = BuildVmImage(resolved.vm.image_options);
    if (!image) return Fail(image.error());
    resolved.vm.image = *image;
  }
  return std::unique_ptr<MicroVmPool>(new Pool(std::move(resolved)));
}

}  // namespace sandbox
