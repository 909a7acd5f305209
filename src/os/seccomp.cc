#include "os/seccomp.h"

#include <errno.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <memory>
#include <mutex>
#include <optional>

#include "os/syscalls.h"
#include "os/unique_fd.h"

namespace sandbox::os {
namespace {

constexpr std::uint64_t kNewUser = CLONE_NEWUSER;
// personality(2) flags that weaken the address space (Docker allows only
// PER_LINUX, PER_LINUX32, UNAME26 and the query 0xffffffff). Each is denied
// with bit 31 clear in the same mask, so the query (all bits set) still works.
constexpr std::uint64_t kPersonalityBit31 = 0x80000000;
constexpr std::uint64_t kDangerousPersonality[] = {
    0x0040000,  // ADDR_NO_RANDOMIZE
    0x0100000,  // MMAP_PAGE_ZERO
    0x0200000,  // ADDR_COMPAT_LAYOUT
    0x0400000,  // READ_IMPLIES_EXEC
};

struct Rule {
  const char* name;
  int action_errno;
  std::vector<scmp_arg_cmp> args;
  const char* when;
};

std::vector<Rule> Rules() {
  std::vector<Rule> rules;
  auto always = [&](const char* name) { rules.push_back({name, EPERM, {}, ""}); };
  // Kernel keyring: not namespaced.
  for (const char* name : {"add_key", "keyctl", "request_key"}) always(name);
  // Large attack surface, a history of exploits.
  for (const char* name : {"userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
                           "bpf", "perf_event_open", "fanotify_init"})
    always(name);
  // File handles bypass path-based confinement.
  for (const char* name : {"open_by_handle_at", "name_to_handle_at"}) always(name);
  // Mount table changes: the boundary's mounts are final.
  for (const char* name : {"mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen",
                           "fsconfig", "fsmount", "fspick", "mount_setattr", "chroot"})
    always(name);
  // Kernel and machine state.
  for (const char* name : {"kexec_load",    "kexec_file_load",
                           "init_module",   "finit_module",
                           "delete_module", "acct",
                           "swapon",        "swapoff",
                           "reboot",        "settimeofday",
                           "clock_settime", "clock_adjtime",
                           "syslog",        "lookup_dcookie",
                           "quotactl",      "quotactl_fd",
                           "iopl",          "ioperm",
                           "uselib",        "vhangup",
                           "nfsservctl",    "get_kernel_syms",
                           "query_module",  "create_module",
                           "afs_syscall",   "_sysctl"})
    always(name);
  // Other processes: no ptrace, no peeking at memory or fds (protects PID 1,
  // the agent, which shares its uid with the commands).
  for (const char* name : {"ptrace", "process_vm_readv", "process_vm_writev", "process_madvise",
                           "pidfd_getfd", "kcmp"})
    always(name);
  // Entering other namespaces; new user namespaces (the unprivileged door to
  // every CAP_SYS_ADMIN-gated kernel path). CLONE_NEWPID and the other
  // namespaces stay allowed: the agent runs commands in PID namespaces below
  // its own, and enters such a namespace for its children with
  // setns(CLONE_NEWPID), which needs CAP_SYS_ADMIN (commands have none) and
  // can only go down the PID namespace tree.
  rules.push_back({"setns", EPERM, {SCMP_A1(SCMP_CMP_NE, CLONE_NEWPID)}, "nstype != CLONE_NEWPID"});
  rules.push_back(
      {"clone", EPERM, {SCMP_A0(SCMP_CMP_MASKED_EQ, kNewUser, kNewUser)}, "flags & CLONE_NEWUSER"});
  rules.push_back({"unshare",
                   EPERM,
                   {SCMP_A0(SCMP_CMP_MASKED_EQ, kNewUser, kNewUser)},
                   "flags & CLONE_NEWUSER"});
  rules.push_back({"clone3", ENOSYS, {}, "always (ENOSYS: libc falls back to clone)"});
  // Faking terminal input.
  rules.push_back({"ioctl",
                   EPERM,
                   {SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffULL, TIOCSTI)},
                   "request == TIOCSTI"});
  rules.push_back({"ioctl",
                   EPERM,
                   {SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffULL, TIOCLINUX)},
                   "request == TIOCLINUX"});
  for (std::uint64_t bit : kDangerousPersonality) {
    rules.push_back({"personality",
                     EPERM,
                     {SCMP_A0(SCMP_CMP_MASKED_EQ, kPersonalityBit31 | bit, bit)},
                     "ADDR_NO_RANDOMIZE, MMAP_PAGE_ZERO, ADDR_COMPAT_LAYOUT or READ_IMPLIES_EXEC"});
  }
  // Changing another process's limits (the agent's, say); reading is fine.
  rules.push_back({"prlimit64",
                   EPERM,
                   {SCMP_A0(SCMP_CMP_NE, 0), SCMP_A2(SCMP_CMP_NE, 0)},
                   "pid != 0 && new_limit != NULL"});
  return rules;
}

Expected<std::vector<sock_filter>> Build() {
  std::unique_ptr<void, void (*)(scmp_filter_ctx)> ctx(seccomp_init(SCMP_ACT_ALLOW),
                                                       seccomp_release);
  if (!ctx) return Fail(Error::Code::Internal, "seccomp_init failed");
  // Syscalls of a foreign architecture (int 0x80 on x86_64) are killed.
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS); rc != 0)
    return Fail(ErrnoError(-rc, "seccomp_attr_set", "SCMP_FLTATR_ACT_BADARCH"));
  for (const Rule& rule : Rules()) {
    int nr = seccomp_syscall_resolve_name(rule.name);
    if (nr == __NR_SCMP_ERROR) continue;  // unknown to this libseccomp/arch
    int rc = seccomp_rule_add_array(ctx.get(), SCMP_ACT_ERRNO(rule.action_errno), nr,
                                    static_cast<unsigned>(rule.args.size()), rule.args.data());
    if (rc != 0 && rc != -EDOM) return Fail(ErrnoError(-rc, "seccomp_rule_add", rule.name));
  }
  UniqueFd mem(memfd_create("sandbox-seccomp", MFD_CLOEXEC));
  if (!mem) return Fail(ErrnoError(errno, "memfd_create", "sandbox-seccomp"));
  if (int rc = seccomp_export_bpf(ctx.get(), mem.get()); rc != 0)
    return Fail(ErrnoError(-rc, "seccomp_export_bpf"));
  off_t size = lseek(mem.get(), 0, SEEK_END);
  if (size <= 0 || size % static_cast<off_t>(sizeof(sock_filter)) != 0)
    return Fail(Error::Code::Internal, "seccomp_export_bpf produced a malformed program");
  std::vector<sock_filter> program(static_cast<std::size_t>(size) / sizeof(sock_filter));
  if (pread(mem.get(), program.data(), static_cast<std::size_t>(size), 0) != size)
    return Fail(ErrnoError(errno, "pread", "sandbox-seccomp"));
  if (program.size() > BPF_MAXINSNS)
    return Fail(Error::Code::Internal, "seccomp program longer than BPF_MAXINSNS");
  return program;
}

}  // namespace

const std::vector<DeniedSyscall>& BoundaryDeniedSyscalls() {
  static const std::vector<DeniedSyscall> list = [] {
    std::vector<DeniedSyscall> out;
    for (const Rule& rule : Rules()) out.push_back({rule.name, rule.when});
    return out;
  }();
  return list;
}

Expected<std::vector<sock_filter>> BuildBoundarySeccompFilter() {
  static std::once_flag once;
  static std::optional<Expected<std::vector<sock_filter>>> built;
  std::call_once(once, [] { built.emplace(Build()); });
  return *built;
}

}  // namespace sandbox::os
