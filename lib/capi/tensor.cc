// C API: tensors and float conversions.
#include <cstring>

#include "capi/api.h"
#include "capi/handles.h"
#include "core/block_cache.h"
#include "core/cast.h"
#include "core/checked.h"
#include "core/dtype.h"
#include "core/float16.h"
#include "core/tensor.h"
#include "core/tensor_ops.h"

using namespace tpurt;

namespace {

void require_tensor(const tpu_tensor* t, const char* name) { require_not_null(t, name); }

void check_conversion_args(const void* in, const void* out, size_t count, size_t in_size,
                           size_t out_size) {
  if (count == 0) return;
  require_not_null(in, "in");
  require_not_null(out, "out");
  const uintptr_t a = reinterpret_cast<uintptr_t>(in), b = reinterpret_cast<uintptr_t>(out);
  const uintptr_t a_end = checked_add(a, checked_mul(count, in_size, "the size of 'in' (count ", count, ")"),
                                      "the end of 'in'");
  const uintptr_t b_end = checked_add(b, checked_mul(count, out_size, "the size of 'out' (count ", count, ")"),
                                      "the end of 'out'");
  if (a < b_end && b < a_end) invalid_argument("buffers 'in' and 'out' overlap");
}

}  // namespace

TPU_EXPORT tpu_status tpu_tensor_create(tpu_dtype dtype, const int64_t* dims, int rank,
                                        const void* data, size_t data_bytes, tpu_tensor** out) {
  return guarded([&] {
    require_not_null(out, "out");
    int64_t n;
    size_t bytes;
    check_shape(dtype, dims, rank, &n, &bytes);
    if (data == nullptr && data_bytes != 0) invalid_argument("argument 'data' is NULL but data_bytes is ", data_bytes);
    if (data != nullptr && data_bytes != bytes)
      invalid_argument("data_bytes is ", data_bytes, " but a ", dtype_name(dtype), shape_string(dims, rank),
                       " tensor has ", bytes, " bytes");
    Tensor* t = data ? new_tensor_uninitialized(dtype, dims, rank) : new_tensor(dtype, dims, rank);
    if (data && bytes) std::memcpy(t->data, data, bytes);
    *out = t;
  });
}

TPU_EXPORT tpu_status tpu_tensor_wrap(tpu_dtype dtype, const int64_t* dims, int rank, void* data,
                                      size_t data_bytes, tpu_release_fn release_fn, void* user_data,
                                      tpu_tensor** out) {
  return guarded([&] {
    require_not_null(out, "out");
    int64_t n;
    size_t bytes;
    check_shape(dtype, dims, rank, &n, &bytes);
    if (data_bytes != bytes)
      invalid_argument("data_bytes is ", data_bytes, " but a ", dtype_name(dtype), shape_string(dims, rank),
                       " tensor has ", bytes, " bytes");
    if (data == nullptr && bytes != 0) invalid_argument("argument 'data' is NULL");
    *out = wrap_tensor(dtype, dims, rank, data, release_fn, user_data);
  });
}

TPU_EXPORT tpu_status tpu_tensor_retain(tpu_tensor* tensor) {
  return guarded([&] {
    require_tensor(tensor, "tensor");
    retain(tensor);
  });
}

TPU_EXPORT tpu_status tpu_tensor_release(tpu_tensor* tensor) {
  return guarded([&] {
    require_live_or_null(tensor, "tensor");
    release(tensor);
  });
}

TPU_EXPORT tpu_status tpu_tensor_dtype(const tpu_tensor* tensor, tpu_dtype* out) {
  return guarded([&] {
    require_tensor(tensor, "tensor");
    require_not_null(out, "out");
    *out = tensor->dtype;
  });
}

TPU_EXPORT tpu_status tpu_tensor_rank(const tpu_tensor* tensor, int* out) {
  return guarded([&] {
    require_tensor(tensor, "tensor");
    require_not_null(out, "out");
    *out = tensor->rank;
  });
}

TPU_EXPORT tpu_status tpu_tensor_dims(const tpu_tensor* tensor, int64_t* out, size_t capacity,
                                      size_t* count) {
  return guarded([&] {
    require_tensor(tensor, "tensor");
    copy_array_out(tensor->dims, static_cast<size_t>(tensor->rank), out, capacity, count,
                   "the dimensions");
  });
}

TPU_EXPORT tpu_status tpu_tensor_dim(const tpu_tensor* tensor, int axis, int64_t* out) {
  return guarded([&] {
    require_tensor(tensor, "tensor");
    require_not_null(out, "out");
    *out = tensor->dims[normalize_axis(axis, tensor->rank, "axis", TPU_OUT_OF_RANGE)];
  });
}

TPU_EXPORT tpu_status tpu_tensor_num_elements(const tpu_tensor* tensor, int64_t* out) {
  return guarded([&] {
    require_tensor(tensor, "tensor");
    require_not_null(out, "out");
    *out = tensor->num_elements;
  });
}

TPU_EXPORT tpu_status tpu_tensor_byte_size(const tpu_tensor* tensor, size_t* out) {
  return guarded([&] {
    require_tensor(tensor, "tensor");
    require_not_null(out, "out");
    *out = tensor->byte_size;
  });
}

TPU_EXPORT tpu_status tpu_tensor_data(const tpu_tensor* tensor, const void** out) {
  return guarded([&] {
    require_tensor(tensor, "tensor");
    require_not_null(out, "out");
    *out = tensor->data;
  });
}

TPU_EXPORT tpu_status tpu_tensor_mutable_data(tpu_tensor* tensor, void** out) {
  return guarded([&] {
    require_tensor(tensor, "tensor");
    require_not_null(out, "out");
    *out = mutable_data(tensor);
  });
}

TPU_EXPORT tpu_status tpu_tensor_reshape(const tpu_tensor* tensor, const int64_t* dims, int rank,
                                         tpu_tensor** out) {
  return guarded([&] {
    require_tensor(tensor, "tensor");
    require_not_null(out, "out");
    *out = reshape(tensor, dims, rank);
  });
}

TPU_EXPORT tpu_status tpu_tensor_cast(const tpu_tensor* tensor, tpu_dtype dtype, tpu_tensor** out) {
  return guarded([&] {
    require_tensor(tensor, "tensor");
    require_not_null(out, "out");
    *out = cast(tensor, dtype);
  });
}

TPU_EXPORT tpu_status tpu_float_to_bfloat16(const float* in, uint16_t* out, size_t count) {
  return guarded([&] {
    check_conversion_args(in, out, count, 4, 2);
    float_to_bf16(in, out, count);
  });
}

TPU_EXPORT tpu_status tpu_bfloat16_to_float(const uint16_t* in, float* out, size_t count) {
  return guarded([&] {
    check_conversion_args(in, out, count, 2, 4);
    bf16_to_float(in, out, count);
  });
}

TPU_EXPORT tpu_status tpu_float_to_half(const float* in, uint16_t* out, size_t count) {
  return guarded([&] {
    check_conversion_args(in, out, count, 4, 2);
    float_to_half(in, out, count);
  });
}

TPU_EXPORT tpu_status tpu_half_to_float(const uint16_t* in, float* out, size_t count) {
  return guarded([&] {
    check_conversion_args(in, out, count, 2, 4);
    half_to_float(in, out, count);
  });
}

TPU_EXPORT tpu_status tpu_tensor_cache_trim(size_t keep_bytes, size_t* released) {
  return guarded([&] {
    require_not_null(released, "released");
    *released = trim_block_cache(keep_bytes);
  });
}
