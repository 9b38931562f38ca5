// Facts about dtypes: sizes, names, classes.
#pragma once

#include <cstddef>

#include "tpurt/common.h"

namespace tpurt {

// Bytes per element, or 0 for a value that is not a tpu_dtype.
size_t dtype_size(tpu_dtype dtype);
// "float32", ...; "invalid" for a value that is not a tpu_dtype.
const char* dtype_name(tpu_dtype dtype);
// dtype_size and dtype_name, or TPU_INVALID_ARGUMENT naming the value.
size_t checked_dtype_size(tpu_dtype dtype);
const char* checked_dtype_name(tpu_dtype dtype);

inline bool is_valid_dtype(tpu_dtype d) { return dtype_size(d) != 0; }

}  // namespace tpurt
