#include "os/landlock.h"

#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace sandbox::os {
namespace {
constexpr std::uint32_t kCreateRulesetVersion = 1U << 0;  // LANDLOCK_CREATE_RULESET_VERSION
constexpr int kRulePathBeneath = 1;                       // LANDLOCK_RULE_PATH_BENEATH
}  // namespace

int LandlockCreateRuleset(const LandlockRulesetAttr* attr, std::size_t size, std::uint32_t flags) {
  return static_cast<int>(syscall(SYS_landlock_create_ruleset, attr, size, flags));
}

int LandlockAddPathRule(int ruleset_fd, const LandlockPathBeneathAttr* rule) {
  return static_cast<int>(syscall(SYS_landlock_add_rule, ruleset_fd, kRulePathBeneath, rule, 0));
}

int LandlockRestrictSelf(int ruleset_fd) {
  return static_cast<int>(syscall(SYS_landlock_restrict_self, ruleset_fd, 0));
}

int LandlockAbi() {
  int abi = LandlockCreateRuleset(nullptr, 0, kCreateRulesetVersion);
  return abi < 0 ? 0 : abi;
}

std::uint64_t LandlockHandledFs(int abi) {
  if (abi < 1) return 0;
  std::uint64_t rights = (kLandlockFsMakeSym << 1) - 1;  // ABI 1: bits 0..12
  if (abi >= 2) rights |= kLandlockFsRefer;
  if (abi >= 3) rights |= kLandlockFsTruncate;
  if (abi >= 5) rights |= kLandlockFsIoctlDev;
  return rights;
}

std::uint64_t LandlockReadOnlyFs() {
  return kLandlockFsExecute | kLandlockFsReadFile | kLandlockFsReadDir;
}

std::uint64_t LandlockScopes(int abi) {
  return abi >= 6 ? (kLandlockScopeAbstractUnixSocket | kLandlockScopeSignal) : 0;
}

}  // namespace sandbox::os
