#include "core/dtype.h"

#include "core/status.h"

namespace tpurt {

size_t dtype_size(tpu_dtype dtype) {
  switch (dtype) {
    case TPU_FLOAT: return 4;
    case TPU_DOUBLE: return 8;
    case TPU_INT32: return 4;
    case TPU_UINT8: return 1;
    case TPU_INT16: return 2;
    case TPU_INT8: return 1;
    case TPU_COMPLEX64: return 8;
    case TPU_INT64: return 8;
    case TPU_BOOL: return 1;
    case TPU_BFLOAT16: return 2;
    case TPU_HALF: return 2;
    case TPU_UINT32: return 4;
    case TPU_UINT64: return 8;
  }
  return 0;
}

const char* dtype_name(tpu_dtype dtype) {
  switch (dtype) {
    case TPU_FLOAT: return "float32";
    case TPU_DOUBLE: return "float64";
    case TPU_INT32: return "int32";
    case TPU_UINT8: return "uint8";
    case TPU_INT16: return "int16";
    case TPU_INT8: return "int8";
    case TPU_COMPLEX64: return "complex64";
    case TPU_INT64: return "int64";
    case TPU_BOOL: return "bool";
    case TPU_BFLOAT16: return "bfloat16";
    case TPU_HALF: return "float16";
    case TPU_UINT32: return "uint32";
    case TPU_UINT64: return "uint64";
  }
  return "invalid";
}

size_t checked_dtype_size(tpu_dtype dtype) {
  size_t size = dtype_size(dtype);
  if (size == 0) invalid_argument("unknown dtype ", static_cast<int>(dtype));
  return size;
}

}  // namespace tpurt
