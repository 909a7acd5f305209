// `sandbox doctor` (which backends work on this machine, and why not) and
// `sandbox gc` (remove what crashed runs left behind).
#ifndef SANDBOX_TOOLS_SANDBOX_DOCTOR_H_
#define SANDBOX_TOOLS_SANDBOX_DOCTOR_H_

#include <span>
#include <string>

namespace sandbox::cli {

// Prints one block per backend (local, namespace, docker, gvisor, microvm):
// whether it can run here, its isolation and, for each piece it needs
// (kernel features, limits, the Docker Engine, runsc, /dev/kvm, a VMM), what
// was found or why not and what to do. `--json` prints one object instead.
// Exits 0 when at least one backend can run, 1 when none, 125 on bad usage.
int DoctorCommand(std::span<const std::string> args);

// Removes leftovers of boundaries whose host process died (their cgroups),
// prints how many, and exits 0 (125 on bad usage).
int GcCommand(std::span<const std::string> args);

}  // namespace sandbox::cli

#endif  // SANDBOX_TOOLS_SANDBOX_DOCTOR_H_
