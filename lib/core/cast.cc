#include "core/cast.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "core/dtype.h"
#include "core/float16.h"
#include "core/status.h"

namespace tpurt {
namespace {

double load_double(tpu_dtype d, const void* p, int64_t i) {
  switch (d) {
    case TPU_FLOAT: return static_cast<const float*>(p)[i];
    case TPU_DOUBLE: return static_cast<const double*>(p)[i];
    case TPU_BFLOAT16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case TPU_HALF: return half_to_float(static_cast<const uint16_t*>(p)[i]);
    default: return 0;
  }
}

bool is_float_type(tpu_dtype d) {
  return d == TPU_FLOAT || d == TPU_DOUBLE || d == TPU_BFLOAT16 || d == TPU_HALF;
}

int64_t load_int(tpu_dtype d, const void* p, int64_t i) {
  switch (d) {
    case TPU_INT8: return static_cast<const int8_t*>(p)[i];
    case TPU_UINT8: return static_cast<const uint8_t*>(p)[i];
    case TPU_INT16: return static_cast<const int16_t*>(p)[i];
    case TPU_INT32: return static_cast<const int32_t*>(p)[i];
    case TPU_UINT32: return static_cast<const uint32_t*>(p)[i];
    case TPU_INT64: return static_cast<const int64_t*>(p)[i];
    case TPU_UINT64: return static_cast<int64_t>(static_cast<const uint64_t*>(p)[i]);
    default: return 0;
  }
}

template <typename T>
void store_as(void* p, int64_t i, T v, tpu_dtype d) {
  switch (d) {
    case TPU_FLOAT: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case TPU_DOUBLE: static_cast<double*>(p)[i] = static_cast<double>(v); break;
    case TPU_BFLOAT16: static_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(v)); break;
    case TPU_HALF: static_cast<uint16_t*>(p)[i] = float_to_half(static_cast<float>(v)); break;
    case TPU_INT8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case TPU_UINT8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case TPU_INT16: static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v); break;
    case TPU_INT32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case TPU_UINT32: static_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(v); break;
    case TPU_INT64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case TPU_UINT64: static_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(v); break;
    default: break;
  }
}

// A float as integer type I: truncated toward zero, saturated at I's bounds, NaN
// as 0. A plain conversion of a value out of range is undefined behaviour in C++.
template <typename I>
I saturate(double v) {
  if (std::isnan(v)) return 0;
  // min is 0 or -2^digits and max + 1 is 2^digits: both exact as doubles.
  if (v <= static_cast<double>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (v >= std::ldexp(1.0, std::numeric_limits<I>::digits)) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

void store_float_as_int(void* p, int64_t i, double v, tpu_dtype d) {
  switch (d) {
    case TPU_INT8: static_cast<int8_t*>(p)[i] = saturate<int8_t>(v); break;
    case TPU_UINT8: static_cast<uint8_t*>(p)[i] = saturate<uint8_t>(v); break;
    case TPU_INT16: static_cast<int16_t*>(p)[i] = saturate<int16_t>(v); break;
    case TPU_INT32: static_cast<int32_t*>(p)[i] = saturate<int32_t>(v); break;
    case TPU_UINT32: static_cast<uint32_t*>(p)[i] = saturate<uint32_t>(v); break;
    case TPU_INT64: static_cast<int64_t*>(p)[i] = saturate<int64_t>(v); break;
    case TPU_UINT64: static_cast<uint64_t*>(p)[i] = saturate<uint64_t>(v); break;
    default: break;
  }
}

}  // namespace

Tensor* cast(const Tensor* t, tpu_dtype dtype) {
  checked_dtype_size(dtype);
  const tpu_dtype from = t->dtype;
  const bool special_from = from == TPU_BOOL || from == TPU_COMPLEX64;
  const bool special_to = dtype == TPU_BOOL || dtype == TPU_COMPLEX64;
  if ((special_from || special_to) && from != dtype)
    invalid_argument("cannot cast ", dtype_name(from), " to ", dtype_name(dtype));
  Tensor* out = new_tensor_uninitialized(dtype, t->dims, t->rank);
  if (from == dtype) {
    if (out->byte_size) std::memcpy(out->data, t->data, out->byte_size);
  } else if (is_float_type(from)) {
    for (int64_t i = 0; i < t->num_elements; ++i) {
      const double v = load_double(from, t->data, i);
      if (is_float_type(dtype)) store_as(out->data, i, v, dtype);
      else store_float_as_int(out->data, i, v, dtype);
    }
  } else {
    for (int64_t i = 0; i < t->num_elements; ++i) {
      const int64_t v = load_int(from, t->data, i);
      if (from == TPU_UINT64) store_as(out->data, i, static_cast<uint64_t>(v), dtype);
      else store_as(out->data, i, v, dtype);
    }
  }
  return out;
}

}  // namespace tpurt
