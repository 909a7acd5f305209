#include "json/result_json.h"

namespace sandbox::json {

nlohmann::ordered_json ResultObject(const Result& result, const Capabilities& caps) {
  nlohmann::ordered_json object;
  object["exit_code"] = result.exit_code;
  object["stdout"] = result.stdout_data;
  object["stderr"] = result.stderr_data;
  object["duration_ms"] = static_cast<double>(result.duration.count()) / 1e6;
  object["timed_out"] = result.timed_out;
  object["stdout_truncated"] = result.stdout_truncated;
  object["stderr_truncated"] = result.stderr_truncated;
  object["signal"] = result.signal ? nlohmann::ordered_json(*result.signal) : nullptr;
  object["isolation"] = ToString(caps.isolation);
  object["backend"] = caps.backend;
  object["stdout_dropped"] = result.stdout_dropped;
  object["stderr_dropped"] = result.stderr_dropped;
  return object;
}

std::string Dump(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace sandbox::json
