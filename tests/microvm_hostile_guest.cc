// sandbox-hostile-guest: a test's /init for a microvm guest that plays a
// hostile agent. It prepares the guest as the real agent does, then sends
// the host a frame header announcing a 4 GiB body followed by junk, for as
// long as the host keeps reading.
#include <unistd.h>

#include <string>

#include "agent/vm_guest.h"

int main() {
  auto guest = sandbox::agent::PrepareVmGuest();
  if (!guest) return 1;
  int port = guest->stream_fd;
  (void)!::write(port, "\xff\xff\xff\xff", 4);
  std::string junk(64 * 1024, '\x5a');
  for (;;) {
    if (::write(port, junk.data(), junk.size()) < 0) ::usleep(10000);
  }
}
