// Running a host tool (apt-get, dpkg-deb, the VMM) found on PATH, for the
// microvm backend's image builder and drivers.
#ifndef SANDBOX_MICROVM_HOST_TOOLS_H_
#define SANDBOX_MICROVM_HOST_TOOLS_H_

#include <string>
#include <vector>

#include "sandbox/error.h"

namespace sandbox::vm {

// The absolute path of `name` on $PATH (or the default PATH), or NotFound
// saying which Debian package provides it (`package`).
Expected<std::string> FindTool(const std::string& name, const std::string& package);

// The QEMU binary to run: $SANDBOX_QEMU when set (a path or a name on PATH),
// else qemu-system-x86_64.
std::string QemuBinary();

// Runs `argv` (argv[0] looked up on PATH) in `cwd` with stdin from
// /dev/null, waits, and returns its stdout (at most 1 MiB). stderr goes to
// this process's stderr. An exit status other than 0 is an error naming the
// command.
Expected<std::string> RunTool(const std::vector<std::string>& argv, const std::string& cwd = ".");

// The file contents of `path`, at most `max` bytes (TooLarge beyond).
Expected<std::string> ReadWholeFile(const std::string& path, std::size_t max);

// Writes `data` to `path` atomically (a temporary file beside it, renamed).
Status WriteFileAtomically(const std::string& path, std::string_view data, unsigned mode);

// Sets the modification time of a guest image file to now: the image cache
// removes images unused for a day (BuildVmImage). Best effort.
void MarkImageUsed(const std::string& path);

}  // namespace sandbox::vm

#endif  // SANDBOX_MICROVM_HOST_TOOLS_H_
