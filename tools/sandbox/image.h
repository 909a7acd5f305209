// `sandbox image`: builds the images the docker and gvisor backends run.
#ifndef SANDBOX_TOOLS_SANDBOX_IMAGE_H_
#define SANDBOX_TOOLS_SANDBOX_IMAGE_H_

#include <span>
#include <string>

namespace sandbox::cli {

// Runs `sandbox image ARGS...` and returns the exit status.
int ImageCommand(std::span<const std::string> args);

}  // namespace sandbox::cli

#endif  // SANDBOX_TOOLS_SANDBOX_IMAGE_H_
