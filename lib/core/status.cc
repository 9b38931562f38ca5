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

void not_a_live_handle(const char* name, const char* type) {
  invalid_argument("argument '", name, "' is not a live ", type,
                   " (released, or a handle of another type)");
}

const char* status_name(tpu_status code) {
  switch (code) {
#define XX(name, value, str) case TPU_##name: return str;
    TPU_STATUS_MAP(XX)
#undef XX
  }
  return "UNKNOWN_STATUS";
}

bool is_status(tpu_status code) {
  switch (code) {
#define XX(name, value, str) case TPU_##name:
    TPU_STATUS_MAP(XX)
#undef XX
    return true;
  }
  return false;
}

}  // namespace tpurt
