#include "os/launcher.h"

#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

namespace sandbox::os {
namespace {

class Launcher {
 public:
  static Launcher& Get() {
    static std::mutex mu;
    static Launcher* current = nullptr;
    std::lock_guard lock(mu);
    if (current == nullptr || current->pid_ != getpid()) current = new Launcher();  // never freed
    return *current;
  }

  void Run(const std::function<void()>& task) {
    std::packaged_task<void()> packaged(task);
    std::future<void> done = packaged.get_future();
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(packaged));
    }
    cv_.notify_one();
    done.wait();
  }

 private:
  Launcher() : pid_(getpid()) {
    std::thread([this] {
      for (;;) {
        std::packaged_task<void()> task;
        {
          std::unique_lock lock(mu_);
          cv_.wait(lock, [this] { return !queue_.empty(); });
          task = std::move(queue_.front());
          queue_.pop_front();
        }
        task();
      }
    }).detach();
  }

  pid_t pid_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> queue_;
};

}  // namespace

void RunOnLauncherThread(const std::function<void()>& task) { Launcher::Get().Run(task); }

}  // namespace sandbox::os
