#include <string>

#include "sandbox/sandbox.h"

namespace sandbox {

std::string_view ToString(Isolation isolation) {
  switch (isolation) {
    case Isolation::None:
      return "none";
    case Isolation::Process:
      return "process";
    case Isolation::Kernel:
      return "kernel";
    case Isolation::VM:
      return "vm";
  }
  return "unknown";
}

Expected<Isolation> ParseIsolation(std::string_view name) {
  for (Isolation level : {Isolation::None, Isolation::Process, Isolation::Kernel, Isolation::VM})
    if (ToString(level) == name) return level;
  return Fail(Error::Code::InvalidArgument,
              "unknown isolation level '" + std::string(name) +
                  "': expected none, process, kernel or vm");
}

Status Require(const Sandbox& sandbox, Isolation minimum) {
  Capabilities caps = sandbox.GetCapabilities();
  if (caps.isolation >= minimum) return {};
  std::string message = "the " + (caps.backend.empty() ? std::string("sandbox") : caps.backend) +
                        " backend gives isolation '" + std::string(ToString(caps.isolation)) +
                        "' but '" + std::string(ToString(minimum)) +
                        "' is required; choose a stronger backend (see `sandbox doctor`)";
  return Fail(Error::Code::InsufficientIsolation, std::move(message));
}

}  // namespace sandbox
