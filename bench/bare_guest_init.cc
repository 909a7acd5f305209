// The bare guest of bench/microvm_bench.cc: a static /init that runs one
// command (itself: it writes "ok" to the console) and powers the VM off.
// The peer a microvm boot is measured against: the same kernel and VMM
// with no modules, shares or agent.
#include <sys/reboot.h>
#include <unistd.h>

int main() {
  (void)!::write(STDOUT_FILENO, "ok\n", 3);
  ::reboot(RB_POWER_OFF);
  return 0;
}
