// microvm_bench: the microvm backend's costs, each beside a peer measured in
// the same run, reported as medians and their ratio.
//   boot -> first Exec result   vs  a bare QEMU boot of the same kernel whose
//                                   /init runs one command and powers off
//   Exec round trip in a live VM vs  the same Exec on the local backend
//   the wire round trip alone     (Process::StderrSnapshot: no process, no 9p)
// Run as root after `sandbox image build --vm` (or with SANDBOX_VM_CACHE set
// to a cache holding a kernel package):
//   /tmp/benchbuild/bench/microvm_bench [runs]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "microvm/cpio.h"
#include "microvm/host_tools.h"
#include "microvm/vmm.h"
#include "sandbox/local.h"
#include "sandbox/microvm.h"

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

void Report(const char* what, const std::vector<double>& ours, const char* peer_name,
            const std::vector<double>& peer) {
  double a = Median(ours), b = Median(peer);
  std::printf("%-34s median %9.2f ms   %-30s median %9.2f ms   ratio %.2fx\n", what, a, peer_name,
              b, a / b);
}

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "microvm_bench: %s\n", message.c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  int runs = argc > 1 ? std::atoi(argv[1]) : 5;
  sandbox::VmImageOptions image_options;
  // SANDBOX_AGENT, as for the CLI, puts another agent into the guest image.
  const char* agent_override = std::getenv("SANDBOX_AGENT");
  image_options.agent_path =
      agent_override && *agent_override ? agent_override : SANDBOX_AGENT_PATH;
  auto image = sandbox::BuildVmImage(image_options);
  if (!image) Die(image.error().ToString());
  std::string workspace = std::filesystem::temp_directory_path() / "microvm_bench_ws";
  std::filesystem::create_directories(workspace);

  // The bare peer: same kernel and VMM, an initramfs of one static /init.
  auto bare_init = sandbox::vm::ReadWholeFile(BARE_GUEST_INIT_PATH, 64 << 20);
  if (!bare_init) Die(bare_init.error().ToString());
  sandbox::vm::CpioWriter cpio;
  cpio.AddDirectory("dev", 0755);
  cpio.AddCharDevice("dev/console", 0600, 5, 1);
  cpio.AddFile("init", 0755, *bare_init);
  std::string bare_initramfs = workspace + "/../microvm_bench_bare.cpio";
  if (auto written = sandbox::vm::WriteFileAtomically(bare_initramfs, cpio.Finish(), 0644); !written)
    Die(written.error().ToString());

  auto driver = sandbox::vm::NewQemuDriver();
  std::vector<double> bare, boot_exec;
  for (int i = 0; i < runs; ++i) {
    sandbox::vm::VmSpec spec;
    spec.kernel = image->kernel;
    spec.initramfs = bare_initramfs;
    auto start = Clock::now();
    auto vm = driver->Boot(spec);
    if (!vm) Die(vm.error().ToString());
    sandbox::os::UniqueFd agent = (*vm)->TakeAgentStream();
    char byte;
    while (::read(agent.get(), &byte, 1) > 0) {
    }  // end of stream: QEMU has exited
    bare.push_back(Ms(Clock::now() - start));
    if ((*vm)->ConsoleTail().find("ok") == std::string::npos) Die("the bare guest did not run");

    start = Clock::now();
    sandbox::MicroVmOptions options;
    options.workspace = workspace;
    options.image = *image;
    auto sb = sandbox::NewMicroVmSandbox(options);
    if (!sb) Die(sb.error().ToString());
    auto result = (*sb)->Exec({}, sandbox::Command{.path = "true"});
    if (!result || result->exit_code != 0) Die("Exec true failed in the guest");
    boot_exec.push_back(Ms(Clock::now() - start));
    (void)(*sb)->Close();
  }
  Report("boot -> first Exec(true) result", boot_exec, "bare QEMU boot, one command", bare);

  sandbox::MicroVmOptions options;
  options.workspace = workspace;
  options.image = *image;
  auto vm_box = sandbox::NewMicroVmSandbox(options);
  if (!vm_box) Die(vm_box.error().ToString());
  sandbox::LocalOptions local_options;
  local_options.root = workspace;
  auto local_box = sandbox::NewLocalSandbox(local_options);
  if (!local_box) Die(local_box.error().ToString());
  auto round_trips = [&](sandbox::Sandbox& box, const sandbox::Command& command) {
    std::vector<double> times;
    for (int i = 0; i < std::max(20, runs * 10); ++i) {
      auto start = Clock::now();
      auto result = box.Exec({}, command);
      if (!result || result->exit_code != 0) Die("Exec failed");
      times.push_back(Ms(Clock::now() - start));
    }
    return times;
  };
  sandbox::Command true_command{.path = "true"};
  Report("Exec(true) in a live VM", round_trips(**vm_box, true_command), "Exec(true), local backend",
         round_trips(**local_box, true_command));
  // The wire round trip without a process: a 16-byte file read.
  (void)(*vm_box)->WriteFile({}, "small", "0123456789abcdef", 0644);
  std::vector<double> vm_reads, local_reads;
  for (int i = 0; i < std::max(20, runs * 10); ++i) {
    auto start = Clock::now();
    if (!(*vm_box)->ReadFile({}, "small")) Die("ReadFile failed");
    vm_reads.push_back(Ms(Clock::now() - start));
    start = Clock::now();
    if (!(*local_box)->ReadFile({}, "small")) Die("ReadFile failed");
    local_reads.push_back(Ms(Clock::now() - start));
  }
  Report("ReadFile(16 B) in a live VM", vm_reads, "ReadFile(16 B), local backend", local_reads);
  // The wire alone, no process started and no file system touched: the
  // stderr snapshot of a running process is one request answered from the
  // agent's memory.
  auto* vm_host = dynamic_cast<sandbox::ProcessHost*>(vm_box->get());
  auto* local_host = dynamic_cast<sandbox::ProcessHost*>(local_box->get());
  if (!vm_host || !local_host) Die("no ProcessHost");
  sandbox::Command sleeper{.path = "sleep", .args = {"600"}};
  auto vm_sleeper = vm_host->StartProcess({}, sleeper);
  auto local_sleeper = local_host->StartProcess({}, sleeper);
  if (!vm_sleeper || !local_sleeper) Die("StartProcess failed");
  std::vector<double> vm_wire, local_wire;
  for (int i = 0; i < std::max(20, runs * 10); ++i) {
    auto start = Clock::now();
    (void)(*vm_sleeper)->StderrSnapshot();
    vm_wire.push_back(Ms(Clock::now() - start));
    start = Clock::now();
    (void)(*local_sleeper)->StderrSnapshot();
    local_wire.push_back(Ms(Clock::now() - start));
  }
  Report("wire round trip in a live VM", vm_wire, "the same call, local backend", local_wire);
  (void)(*vm_sleeper)->Kill();
  (void)(*local_sleeper)->Kill();
  (void)(*vm_box)->Close();

  // A warm pool: acquire -> first Exec result, against that Exec alone on a
  // guest already in hand (the round trip above).
  sandbox::MicroVmPoolOptions pool_options;
  pool_options.vm.image = *image;
  pool_options.workspaces_dir = workspace;
  pool_options.size = 1;
  auto pool = sandbox::MicroVmPool::Create(pool_options);
  if (!pool) Die(pool.error().ToString());
  std::vector<double> acquire_exec, exec_only;
  for (int i = 0; i < runs; ++i) {
    // Wait out the background boot (seconds under emulation), so that what
    // is timed is the hand-out of a guest the pool has ready.
    std::this_thread::sleep_for(std::chrono::seconds(12));
    auto start = Clock::now();
    auto lease = (*pool)->Acquire();
    if (!lease) Die(lease.error().ToString());
    auto result = lease->sandbox->Exec({}, true_command);
    if (!result || result->exit_code != 0) Die("Exec failed in a pooled guest");
    acquire_exec.push_back(Ms(Clock::now() - start));
    start = Clock::now();
    (void)lease->sandbox->Exec({}, true_command);
    exec_only.push_back(Ms(Clock::now() - start));
    (void)lease->sandbox->Close();
  }
  Report("pool acquire -> first Exec(true)", acquire_exec, "Exec(true) on a guest in hand", exec_only);
  pool->reset();
  std::filesystem::remove_all(workspace);
  std::filesystem::remove(bare_initramfs);
  return 0;
}
