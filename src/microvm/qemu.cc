// The QEMU driver: `qemu-system-x86_64 -M microvm`, the agent on a
// virtio-serial port whose chardev is one end of a socketpair (no socket
// file), the console on QEMU's stdout, shares over virtio-9p.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "microvm/guest_layout.h"
#include "microvm/host_tools.h"
#include "microvm/vmm.h"
#include "microvm/vmm_process.h"
#include "os/syscalls.h"

namespace sandbox::vm {

// The host's TSC rate ("cpu MHz" of /proc/cpuinfo), 2 GHz when unknown.
static unsigned long HostTscKhz() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (!line.starts_with("cpu MHz")) continue;
    double mhz = std::atof(line.c_str() + line.find(':') + 1);
    if (mhz > 100 && mhz < 100000) return static_cast<unsigned long>(mhz * 1000);
    break;
  }
  return 2000000;
}

std::string GuestCommandLine(const VmSpec& spec, std::string_view extra) {
  // quiet: every console byte costs time under emulation. panic=-1 with the
  // VMM's no-reboot makes a panicking guest end the VMM at once.
  std::string line = "console=ttyS0 quiet loglevel=3 panic=-1 reboot=t";
  // Timers: microvm with ACPI (which the Debian kernel needs to find the
  // virtio-mmio devices) routes no PIT interrupt the kernel can use, so
  // nothing would calibrate the TSC or the local APIC timer: state both,
  // and skip the checks that would wait for ticks. Under TCG the guest's
  // TSC is the host's; QEMU's APIC timer counts at 1 GHz, which is 4,000,000
  // per tick of Debian's HZ=250.
  line += " tsc_early_khz=" + std::to_string(HostTscKhz()) +
          " lapic_timer_period=4000000 tsc=reliable no_timer_check";
  // Boot-time work that buys a throwaway guest nothing, and costs seconds
  // under emulation: crypto self-tests, LSMs and audit (the VM is the
  // boundary), speculation mitigations (one tenant per VM), legacy probing.
  line += " cryptomgr.notests apparmor=0 audit=0 mitigations=off nowatchdog i8042.noaux"
          " i8042.nokbd i8042.nopnp 8250.nr_uarts=1 rcupdate.rcu_expedited=1";
  if (!spec.network) line += " ipv6.disable=1";
  for (const auto& share : spec.shares)
    line += " " + std::string(kMountKey) + share.tag + ":" + share.guest_path + ":" +
            (share.read_only ? "ro" : "rw");
  if (!extra.empty()) line += " " + std::string(extra);
  // Not after "--": QEMU appends its own words, which must stay the
  // kernel's. A bare word the kernel does not know is passed on to /init.
  line += " " + std::string(kGuestFlag);
  return line;
}

bool KvmUsable() {
  if (const char* env = std::getenv("SANDBOX_VM_ACCEL"); env && *env)
    return std::string_view(env) == "kvm";
  // PVM (a KVM for guests that are themselves VMs) loads kvm_pvm and cannot
  // run QEMU's guests: QEMU aborts setting MSRs.
  if (::access("/sys/module/kvm_pvm", F_OK) == 0) return false;
  os::UniqueFd kvm(::open("/dev/kvm", O_RDWR | O_CLOEXEC));
  return kvm.valid();
}

// Under TCG, QEMU (7.2, Debian 12's) finds translated code by the guest's virtual
// address as well as its physical one, so a program whose libraries land at
// new random addresses in every process is translated afresh at every exec:
// with address-space randomisation a dynamically linked /bin/true costs
// 25-30 ms of translation in the guest, without it about 9 ms. The guest is
// the boundary and is thrown away; its commands are the untrusted party, so
// randomising their layout protects nothing of the host's. (Under KVM the
// guest keeps it.)
constexpr std::string_view kTcgGuestWords = "norandmaps";

// The CPU QEMU emulates under TCG: everything it can, except ERMS ("fast
// rep movsb/stosb"). With the flag, the guest kernel's memcpy, memset and
// page clearing, and glibc's larger copies, use `rep movsb`/`rep stosb`, which
// TCG runs one byte per iteration; without it they move eight bytes (or a
// vector) a step. Measured on CLI boots in the same slot of an interleaved
// series (medians of 5): QEMU start -> the agent's port open 1414 -> 1292 ms
// and 1553 -> 1429 ms, the kernel at /init about 90 ms sooner, the modules
// loaded in 30 ms less; microvm_bench's boot -> first Exec 1.54 -> 1.44 s.
constexpr std::string_view kTcgCpu = "max,-erms";

// QEMU's option parser splits at commas; a literal comma is doubled.
static std::string QemuEscape(std::string_view value) {
  std::string out;
  for (char c : value) {
    out.push_back(c);
    if (c == ',') out.push_back(',');
  }
  return out;
}

std::vector<std::string> QemuArguments(const VmSpec& spec, bool kvm) {
  std::vector<std::string> args = {
      "-M", "microvm,x-option-roms=off,rtc=on",
      "-accel", kvm ? "kvm" : "tcg",
      "-cpu", kvm ? "host" : std::string(kTcgCpu),
      "-smp", std::to_string(spec.vcpus),
      "-m", std::to_string(spec.memory_mib) + "M",
      "-nodefaults", "-no-user-config", "-display", "none", "-monitor", "none",
      "-no-reboot",
      "-kernel", QemuEscape(spec.kernel),
      "-initrd", QemuEscape(spec.initramfs),
      "-append", GuestCommandLine(spec, kvm ? "" : kTcgGuestWords),
      // The console: QEMU's stdout, drained into a bounded log.
      "-chardev", "stdio,id=console,signal=off",
      "-serial", "chardev:console",
      // The agent: a virtio-serial port on fd 3, a connected socket. Two
      // ports (number 0 is kept for a console, the agent's is 1) where the
      // device offers 31 by default: the guest's driver sets up two
      // virtqueues for each as it loads, 64 in all, which cost about
      // 140 ms of a 1.6 s boot under TCG.
      "-chardev", "socket,id=agent,fd=3",
      "-device", "virtio-serial-device,max_ports=2",
      "-device", "virtserialport,chardev=agent,name=" + std::string(kAgentPortName),
  };
  int index = 0;
  for (const auto& share : spec.shares) {
    std::string id = "fs" + std::to_string(index++);
    args.insert(args.end(),
                {"-fsdev",
                 "local,id=" + id + ",path=" + QemuEscape(share.host_path) +
                     ",security_model=none,multidevs=remap" + (share.read_only ? ",readonly=on" : ""),
                 "-device", "virtio-9p-device,fsdev=" + id + ",mount_tag=" + share.tag});
  }
  index = 0;
  for (const auto& drive : spec.drives) {
    std::string id = "drive" + std::to_string(index++);
    args.insert(args.end(), {"-drive",
                             "if=none,id=" + id + ",format=raw,file=" + QemuEscape(drive.host_path) +
                                 (drive.read_only ? ",readonly=on" : ""),
                             "-device", "virtio-blk-device,drive=" + id});
  }
  if (spec.network)
    args.insert(args.end(),
                {"-netdev", "user,id=net0", "-device", "virtio-net-device,netdev=net0"});
  return args;
}

namespace {

class QemuDriver final : public VmmDriver {
 public:
  QemuDriver(std::string binary, Accel accel) : binary_(std::move(binary)), accel_(accel) {}
  std::string_view name() const override { return "qemu"; }

  Expected<std::unique_ptr<RunningVm>> Boot(const VmSpec& spec) override {
    auto binary = FindTool(binary_.empty() ? QemuBinary() : binary_, "qemu-system-x86");
    if (!binary) return Fail(binary.error());
    bool kvm = accel_ == Accel::kKvm || (accel_ == Accel::kAuto && KvmUsable());
    int agent_pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, agent_pair) != 0)
      return Fail(os::ErrnoError(errno, "socketpair"));
    os::UniqueFd agent_host(agent_pair[0]), agent_vmm(agent_pair[1]);
    auto vm = VmmProcess::Launch(*binary, QemuArguments(spec, kvm), agent_vmm.get(), spec);
    if (!vm) return Fail(vm.error());
    (*vm)->SetAgentStream(std::move(agent_host));
    return std::unique_ptr<RunningVm>(std::move(*vm));
  }

 private:
  std::string binary_;
  Accel accel_;
};

}  // namespace

std::unique_ptr<VmmDriver> NewQemuDriver(std::string binary, Accel accel) {
  return std::make_unique<QemuDriver>(std::move(binary), accel);
}

}  // namespace sandbox::vm
