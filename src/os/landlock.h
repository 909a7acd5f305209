// Landlock (Linux >= 5.13): unprivileged filesystem access control. Thin
// wrappers, the constants Debian's headers lack (ABI >= 3), and the access
// masks the namespace boundary uses.
#ifndef SANDBOX_OS_LANDLOCK_H_
#define SANDBOX_OS_LANDLOCK_H_

#include <cstddef>
#include <cstdint>

namespace sandbox::os {

// LANDLOCK_ACCESS_FS_* (uapi/linux/landlock.h), by the ABI that added them.
inline constexpr std::uint64_t kLandlockFsExecute = 1ULL << 0;  // ABI 1
inline constexpr std::uint64_t kLandlockFsWriteFile = 1ULL << 1;
inline constexpr std::uint64_t kLandlockFsReadFile = 1ULL << 2;
inline constexpr std::uint64_t kLandlockFsReadDir = 1ULL << 3;
inline constexpr std::uint64_t kLandlockFsRemoveDir = 1ULL << 4;
inline constexpr std::uint64_t kLandlockFsRemoveFile = 1ULL << 5;
inline constexpr std::uint64_t kLandlockFsMakeChar = 1ULL << 6;
inline constexpr std::uint64_t kLandlockFsMakeDir = 1ULL << 7;
inline constexpr std::uint64_t kLandlockFsMakeReg = 1ULL << 8;
inline constexpr std::uint64_t kLandlockFsMakeSock = 1ULL << 9;
inline constexpr std::uint64_t kLandlockFsMakeFifo = 1ULL << 10;
inline constexpr std::uint64_t kLandlockFsMakeBlock = 1ULL << 11;
inline constexpr std::uint64_t kLandlockFsMakeSym = 1ULL << 12;
inline constexpr std::uint64_t kLandlockFsRefer = 1ULL << 13;     // ABI 2
inline constexpr std::uint64_t kLandlockFsTruncate = 1ULL << 14;  // ABI 3
inline constexpr std::uint64_t kLandlockFsIoctlDev = 1ULL << 15;  // ABI 5
// LANDLOCK_SCOPE_* (ABI 6).
inline constexpr std::uint64_t kLandlockScopeAbstractUnixSocket = 1ULL << 0;
inline constexpr std::uint64_t kLandlockScopeSignal = 1ULL << 1;

// struct landlock_ruleset_attr as of ABI 6. Pass a shorter size to older
// kernels (the kernel accepts any prefix it knows).
struct LandlockRulesetAttr {
  std::uint64_t handled_access_fs;
  std::uint64_t handled_access_net;
  std::uint64_t scoped;
};

// struct landlock_path_beneath_attr (packed in the uapi header).
struct __attribute__((packed)) LandlockPathBeneathAttr {
  std::uint64_t allowed_access;
  std::int32_t parent_fd;
};

// The Landlock ABI version of the running kernel; 0 when Landlock is absent or
// disabled (boot parameter lsm=).
int LandlockAbi();

// Every filesystem right the given ABI can restrict.
std::uint64_t LandlockHandledFs(int abi);
// Read-only rights: execute, read files, list directories.
std::uint64_t LandlockReadOnlyFs();
// The scopes the given ABI supports (0 below ABI 6).
std::uint64_t LandlockScopes(int abi);

// Raw syscalls, async-signal-safe. They return -1 and set errno on failure.
int LandlockCreateRuleset(const LandlockRulesetAttr* attr, std::size_t size, std::uint32_t flags);
int LandlockAddPathRule(int ruleset_fd, const LandlockPathBeneathAttr* rule);
int LandlockRestrictSelf(int ruleset_fd);

}  // namespace sandbox::os

#endif  // SANDBOX_OS_LANDLOCK_H_
