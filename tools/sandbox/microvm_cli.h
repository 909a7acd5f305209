// The CLI's microvm pieces: `sandbox image build --vm`, and the microvm
// sandbox for `sandbox run --backend microvm` / `--isolation vm`.
#ifndef SANDBOX_TOOLS_SANDBOX_MICROVM_CLI_H_
#define SANDBOX_TOOLS_SANDBOX_MICROVM_CLI_H_

#include <memory>
#include <span>
#include <string>

#include "flags.h"
#include "sandbox/sandbox.h"

namespace sandbox::cli {

// `sandbox image build --vm [--cache DIR] [--kernel-deb FILE]`: builds the
// guest image, progress on stderr, the image's files on stdout. Returns the
// exit status. (ImageCommand hands `image ... --vm` here.)
int VmImageCommand(std::span<const std::string> args);

// The microvm sandbox for `flags` (--memory is the guest's RAM, --cpus its
// vCPUs; --pids and --rootfs are refused), sharing `workspace`.
Expected<std::unique_ptr<Sandbox>> MakeMicroVmSandbox(const RunFlags& flags,
                                                      const std::string& workspace);

}  // namespace sandbox::cli

#endif  // SANDBOX_TOOLS_SANDBOX_MICROVM_CLI_H_
