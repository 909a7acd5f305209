#include "sandbox/error.h"

#include <array>
#include <utility>

namespace sandbox {
namespace {

constexpr std::array<std::pair<Error::Code, std::string_view>, 17> kCodeNames = {{
    {Error::Code::InvalidArgument, "invalid_argument"},
    {Error::Code::EscapesRoot, "escapes_root"},
    {Error::Code::NotFound, "not_found"},
    {Error::Code::AlreadyExists, "already_exists"},
    {Error::Code::NotADirectory, "not_a_directory"},
    {Error::Code::IsADirectory, "is_a_directory"},
    {Error::Code::NotARegularFile, "not_a_regular_file"},
    {Error::Code::NotEmpty, "not_empty"},
    {Error::Code::PermissionDenied, "permission_denied"},
    {Error::Code::TooLarge, "too_large"},
    {Error::Code::Cancelled, "cancelled"},
    {Error::Code::DeadlineExceeded, "deadline_exceeded"},
    {Error::Code::Denied, "denied"},
    {Error::Code::InsufficientIsolation, "insufficient_isolation"},
    {Error::Code::Unsupported, "unsupported"},
    {Error::Code::Unavailable, "unavailable"},
    {Error::Code::Internal, "internal"},
}};

}  // namespace

std::string_view ToString(Error::Code code) {
  for (const auto& [c, name] : kCodeNames)
    if (c == code) return name;
  return "internal";
}

Error::Code ErrorCodeFromString(std::string_view name) {
  for (const auto& [c, n] : kCodeNames)
    if (n == name) return c;
  return Error::Code::Internal;
}

std::string Error::ToString() const {
  std::string_view name = sandbox::ToString(code_);
  std::string out;
  out.reserve(name.size() + 2 + message_.size());
  out.append(name).append(": ").append(message_);
  return out;
}

}  // namespace sandbox
