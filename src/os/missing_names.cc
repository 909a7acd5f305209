#include "os/missing_names.h"

#include <algorithm>

namespace sandbox::os {

bool MissingNames::Covers(dev_t device) const {
  return std::find(devices_.begin(), devices_.end(), device) != devices_.end();
}

bool MissingNames::Remembered(const struct stat& dir, std::string_view name) {
  std::lock_guard lock(mu_);
  auto it = expiry_.find(Key{dir.st_dev, dir.st_ino, std::string(name)});
  if (it == expiry_.end()) return false;
  if (Clock::now() < it->second) return true;
  expiry_.erase(it);
  return false;
}

void MissingNames::Remember(const struct stat& dir, std::string_view name) {
  std::lock_guard lock(mu_);
  auto now = Clock::now();
  if (expiry_.size() >= kMaxNames) {
    std::erase_if(expiry_, [now](const auto& entry) { return entry.second <= now; });
    if (expiry_.size() >= kMaxNames) expiry_.clear();
  }
  expiry_[Key{dir.st_dev, dir.st_ino, std::string(name)}] = now + lifetime_;
}

std::size_t MissingNames::size() const {
  std::lock_guard lock(mu_);
  return expiry_.size();
}

}  // namespace sandbox::os
