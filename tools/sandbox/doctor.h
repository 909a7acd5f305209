// `sandbox doctor` (which backends work on this machine, and why not) and
// `sandbox gc` (remove what crashed runs left behind).
#ifndef SANDBOX_TOOLS_SANDBOX_DOCTOR_H_
#define SANDBOX_TOOLS_SANDBOX_DOCTOR_H_

#include <span>
#include <string>

namespace sandbox::cli {

// Prints one block per backend: whether it can run here and, for each piece
// it needs (kernel features, limits), what was found or why not. Exits 0 when
// the default backend (namespace) can run, 1 when not, 125 on bad usage.
int DoctorCommand(std::span<const std::string> args);

// Removes leftovers of boundaries whose host process died (their cgroups),
// prints how many, and exits 0 (125 on bad usage).
int GcCommand(std::span<const std::string> args);

}  // namespace sandbox::cli

#endif  // SANDBOX_TOOLS_SANDBOX_DOCTOR_H_
