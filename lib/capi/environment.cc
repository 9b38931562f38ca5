// C API: the environment variables the library reads (core/env.h).
#include "capi/api.h"
#include "capi/handles.h"
#include "core/env.h"

using namespace tpurt;

TPU_EXPORT tpu_status tpu_environment_variable(int index, const char** name, int64_t* value) {
  return guarded([&] {
    require_not_null(name, "name");
    require_not_null(value, "value");
    const int count = static_cast<int>(EnvVar::kCount);
    if (index < 0 || index >= count)
      fail(TPU_OUT_OF_RANGE, "index ", index, " is outside [0, ", count,
           "): the library reads ", count, " environment variables");
    const EnvVar var = static_cast<EnvVar>(index);
    *value = env_effective(var);
    *name = env_info(var).name;
  });
}
