// The JSON form of a command's Result: the object of DESIGN.md section 7,
// shared by `sandbox run --json` and the MCP server's run_command tool so the
// contract is written once.
#ifndef SANDBOX_JSON_RESULT_JSON_H_
#define SANDBOX_JSON_RESULT_JSON_H_

#include <nlohmann/json.hpp>
#include <string>

#include "sandbox/sandbox.h"

namespace sandbox::json {

// The section 7 object, keys in contract order: exit_code, stdout, stderr,
// duration_ms, timed_out, stdout_truncated, stderr_truncated, signal,
// isolation, backend, then the additions stdout_dropped, stderr_dropped.
// stdout/stderr hold the raw bytes; Dump makes them valid UTF-8.
nlohmann::ordered_json ResultObject(const Result& result, const Capabilities& caps);

// Serializes compactly with no newline. Bytes of strings that are not valid
// UTF-8 become U+FFFD instead of throwing, so hostile output can never make
// serialization fail.
std::string Dump(const nlohmann::ordered_json& value);

}  // namespace sandbox::json

#endif  // SANDBOX_JSON_RESULT_JSON_H_
