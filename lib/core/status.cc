#include "core/status.h"

namespace tpurt {
namespace {
thread_local std::string t_last_error;
}

tpu_status set_last_error(tpu_status code, const std::string& message) {
  t_last_error = message;
  return code;
}

const char* last_error() { return t_last_error.c_str(); }

void clear_last_error() { t_last_error.clear(); }

const char* status_name(tpu_status code) {
  switch (code) {
    case TPU_OK: return "OK";
    case TPU_CANCELLED: return "CANCELLED";
    case TPU_UNKNOWN: return "UNKNOWN";
    case TPU_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case TPU_DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case TPU_NOT_FOUND: return "NOT_FOUND";
    case TPU_ALREADY_EXISTS: return "ALREADY_EXISTS";
    case TPU_PERMISSION_DENIED: return "PERMISSION_DENIED";
    case TPU_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case TPU_FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case TPU_ABORTED: return "ABORTED";
    case TPU_OUT_OF_RANGE: return "OUT_OF_RANGE";
    case TPU_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case TPU_INTERNAL: return "INTERNAL";
    case TPU_UNAVAILABLE: return "UNAVAILABLE";
    case TPU_DATA_LOSS: return "DATA_LOSS";
    case TPU_UNAUTHENTICATED: return "UNAUTHENTICATED";
  }
  return "UNKNOWN_STATUS";
}

}  // namespace tpurt
