// Taking a guest kernel apart: the uncompressed vmlinux inside a bzImage,
// and the load order of kernel modules from their own .modinfo.
#ifndef SANDBOX_MICROVM_KERNEL_H_
#define SANDBOX_MICROVM_KERNEL_H_

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/error.h"

namespace sandbox::vm {

// The vmlinux (an ELF image) compressed with xz inside a bzImage `vmlinuz`,
// as the kernel tree's scripts/extract-vmlinux finds it: the first xz stream
// whose decompressed bytes start with the ELF magic. At most `max_bytes` are
// decompressed. InvalidArgument when there is none.
Expected<std::string> ExtractVmlinux(std::string_view vmlinuz, std::size_t max_bytes = 512u << 20);

// The modules a module needs loaded first: the "depends=" entry of its
// .modinfo section, names normalised to underscores. Empty when none.
std::vector<std::string> ModuleDepends(std::string_view module_file);

// `module_file` without its appended signature ("~Module signature
// appended~"), or unchanged when it has none. Checking an RSA signature
// under software emulation costs tens of milliseconds per module; the
// guest kernel does not enforce signatures and the modules come from the
// Debian package the host verified with apt.
std::string StripModuleSignature(std::string module_file);

// Module names normalised as the kernel does ('-' becomes '_').
std::string NormaliseModuleName(std::string_view name);

// `wanted` and everything they depend on, each after its dependencies.
// `depends` maps every available module to its dependencies. NotFound
// names a missing module.
Expected<std::vector<std::string>> ModuleLoadOrder(
    const std::vector<std::string>& wanted,
    const std::map<std::string, std::vector<std::string>>& depends);

}  // namespace sandbox::vm

#endif  // SANDBOX_MICROVM_KERNEL_H_
