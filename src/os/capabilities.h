// Linux capabilities: what the namespace boundary's PID 1 keeps, and the
// drop every command must make before it execs.
#ifndef SANDBOX_OS_CAPABILITIES_H_
#define SANDBOX_OS_CAPABILITIES_H_

#include <cstdint>

namespace sandbox::os {

// The highest capability number the running kernel knows
// (/proc/sys/kernel/cap_last_cap; 40 if unreadable). Thread-safe; read once.
int LastCapability();

// A capability set as a bit mask: bit N is CAP_N.
constexpr std::uint64_t CapabilityBit(int cap) { return std::uint64_t{1} << cap; }

// Drops every capability from the calling process for good: empties the
// effective, permitted, inheritable and ambient sets, and, when the caller
// still has CAP_SETPCAP, the bounding set, and locks the securebits so that
// uid 0 gains nothing at exec (SECBIT_NOROOT). Async-signal-safe: meant for
// the child side of a spawn, between fork/clone and exec. With no_new_privs
// set (the boundary sets it) emptying the permitted set alone already
// guarantees the exec'd program gets no capability. Returns 0 or an errno.
// Only the capabilities in `bounding_set` are dropped from the bounding set,
// one call each: it must hold every capability still in the caller's
// bounding set (the others are gone already); all of them by default.
int DropAllCapabilities(int last_capability, std::uint64_t bounding_set = ~std::uint64_t{0});

// The calling thread's capability bounding set (PR_CAPBSET_READ of each
// capability up to `last_capability`).
std::uint64_t ReadBoundingSet(int last_capability);

}  // namespace sandbox::os

#endif  // SANDBOX_OS_CAPABILITIES_H_
