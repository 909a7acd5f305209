// MissingNames: what a PATH search did not find, remembered for a while.
#ifndef SANDBOX_OS_MISSING_NAMES_H_
#define SANDBOX_OS_MISSING_NAMES_H_

#include <sys/stat.h>

#include <chrono>
#include <compare>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace sandbox::os {

// Names found missing from directories on file systems the caller declared
// stable (a VM guest's read-only shares of the host's system), kept for
// `lifetime` so that a search for the same program does not ask again. On
// such a share every lookup that misses is a round trip to the VMM, and the
// guest kernel remembers none of them (Linux's 9p drops negative dentries),
// while a program in /usr/bin is looked for in /usr/local/sbin,
// /usr/local/bin and /usr/sbin first. Bounded: at most kMaxNames entries.
// Thread-safe.
class MissingNames {
 public:
  static constexpr std::size_t kMaxNames = 4096;
  using Clock = std::chrono::steady_clock;

  MissingNames(std::vector<dev_t> stable_devices, Clock::duration lifetime)
      : devices_(std::move(stable_devices)), lifetime_(lifetime) {}

  // Whether directories on `device` are remembered at all.
  bool Covers(dev_t device) const;
  // Whether `name` was found missing from the directory `dir` (its stat)
  // less than `lifetime` ago.
  bool Remembered(const struct stat& dir, std::string_view name);
  void Remember(const struct stat& dir, std::string_view name);
  std::size_t size() const;

 private:
  struct Key {
    dev_t device;
    ino_t directory;
    std::string name;
    auto operator<=>(const Key&) const = default;
  };

  const std::vector<dev_t> devices_;
  const Clock::duration lifetime_;
  mutable std::mutex mu_;
  std::map<Key, Clock::time_point> expiry_;
};

}  // namespace sandbox::os

#endif  // SANDBOX_OS_MISSING_NAMES_H_
