#include "core/dtype.h"

#include "core/status.h"

namespace tpurt {

size_t dtype_size(tpu_dtype dtype) {
  switch (dtype) {
#define XX(name, value, str, size) case TPU_##name: return size;
    TPU_DTYPE_MAP(XX)
#undef XX
  }
  return 0;
}

const char* dtype_name(tpu_dtype dtype) {
  switch (dtype) {
#define XX(name, value, str, size) case TPU_##name: return str;
    TPU_DTYPE_MAP(XX)
#undef XX
  }
  return "invalid";
}

size_t checked_dtype_size(tpu_dtype dtype) {
  size_t size = dtype_size(dtype);
  if (size == 0) invalid_argument("unknown dtype ", static_cast<int>(dtype));
  return size;
}

const char* checked_dtype_name(tpu_dtype dtype) {
  checked_dtype_size(dtype);
  return dtype_name(dtype);
}

}  // namespace tpurt
