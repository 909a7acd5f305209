#include "os/capabilities.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace sandbox::os {

int LastCapability() {
  static const int last = [] {
    int fd = open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 40;
    char text[16] = {};
    ssize_t got = read(fd, text, sizeof(text) - 1);
    close(fd);
    int value = 0;
    for (ssize_t i = 0; i < got && text[i] >= '0' && text[i] <= '9'; ++i)
      value = value * 10 + (text[i] - '0');
    return value > 0 && value < 64 ? value : 40;
  }();
  return last;
}

std::uint64_t ReadBoundingSet(int last_capability) {
  std::uint64_t set = 0;
  for (int cap = 0; cap <= last_capability && cap < 64; ++cap)
    if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1) set |= CapabilityBit(cap);
  return set;
}

int DropAllCapabilities(int last_capability, std::uint64_t bounding_set) {
  // While CAP_SETPCAP is still held: lock root out of capabilities at exec,
  // then empty the bounding set. Both are best effort without CAP_SETPCAP.
  prctl(PR_SET_SECUREBITS,
        SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
            SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
            SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
        0, 0, 0);
  for (int cap = 0; cap <= last_capability; ++cap)
    if (cap >= 64 || (bounding_set & CapabilityBit(cap)) != 0) prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
    return errno;
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capset, &header, data) != 0) return errno;
  return 0;
}

}  // namespace sandbox::os
