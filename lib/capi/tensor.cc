// C API: tensors and float conversions.
#include <cmath>
#include <cstring>

#include "capi/api.h"
#include "core/dtype.h"
#include "core/float16.h"
#include "core/tensor.h"

using namespace tpurt;

namespace {

void require_tensor(const tpu_tensor* t, const char* name) { require_not_null(t, name); }

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

void check_conversion_args(const void* in, const void* out, size_t count, size_t in_size,
                           size_t out_size) {
  if (count == 0) return;
  require_not_null(in, "in");
  require_not_null(out, "out");
  auto a = reinterpret_cast<uintptr_t>(in), b = reinterpret_cast<uintptr_t>(out);
  if (a < b + count * out_size && b < a + count * in_size)
    invalid_argument("buffers 'in' and 'out' overlap");
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
  return guarded([&] { release(tensor); });
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

TPU_EXPORT tpu_status tpu_tensor_dims(const tpu_tensor* tensor, int64_t* dims, int capacity) {
  return guarded([&] {
    require_tensor(tensor, "tensor");
    if (capacity < tensor->rank)
      fail(TPU_OUT_OF_RANGE, "capacity ", capacity, " is smaller than the rank ", tensor->rank);
    if (tensor->rank > 0) require_not_null(dims, "dims");
    for (int i = 0; i < tensor->rank; ++i) dims[i] = tensor->dims[i];
  });
}

TPU_EXPORT tpu_status tpu_tensor_dim(const tpu_tensor* tensor, int axis, int64_t* out) {
  return guarded([&] {
    require_tensor(tensor, "tensor");
    require_not_null(out, "out");
    int a = axis < 0 ? axis + tensor->rank : axis;
    if (a < 0 || a >= tensor->rank)
      fail(TPU_OUT_OF_RANGE, "axis ", axis, " is out of range for rank ", tensor->rank);
    *out = tensor->dims[a];
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
    if (rank < 0 || rank > TPU_MAX_RANK) invalid_argument("rank ", rank, " is outside [0, ", TPU_MAX_RANK, "]");
    if (rank > 0) require_not_null(dims, "dims");
    int64_t resolved[TPU_MAX_RANK];
    int inferred = -1;
    int64_t known = 1;
    for (int i = 0; i < rank; ++i) {
      resolved[i] = dims[i];
      if (dims[i] == -1) {
        if (inferred >= 0) invalid_argument("dims ", inferred, " and ", i, " are both -1; only one may be inferred");
        inferred = i;
        continue;
      }
      if (dims[i] < 0) invalid_argument("dimension ", i, " is negative (", dims[i], ")");
      if (dims[i] != 0 && known > INT64_MAX / dims[i]) invalid_argument("element count of shape ", shape_string(dims, rank), " overflows");
      known *= dims[i];
    }
    if (inferred >= 0) {
      if (known == 0 || tensor->num_elements % known != 0)
        invalid_argument("cannot reshape ", describe(tensor), " to ", shape_string(dims, rank));
      resolved[inferred] = tensor->num_elements / known;
    }
    int64_t n;
    size_t bytes;
    check_shape(tensor->dtype, resolved, rank, &n, &bytes);
    if (n != tensor->num_elements)
      invalid_argument("cannot reshape ", describe(tensor), " (", tensor->num_elements, " elements) to ",
                       shape_string(resolved, rank), " (", n, " elements)");
    *out = share(tensor, resolved, rank, 0);
  });
}

TPU_EXPORT tpu_status tpu_tensor_cast(const tpu_tensor* tensor, tpu_dtype dtype, tpu_tensor** out) {
  return guarded([&] {
    require_tensor(tensor, "tensor");
    require_not_null(out, "out");
    checked_dtype_size(dtype);
    tpu_dtype from = tensor->dtype;
    bool special_from = from == TPU_BOOL || from == TPU_COMPLEX64;
    bool special_to = dtype == TPU_BOOL || dtype == TPU_COMPLEX64;
    if ((special_from || special_to) && from != dtype)
      invalid_argument("cannot cast ", dtype_name(from), " to ", dtype_name(dtype));
    Tensor* t = new_tensor_uninitialized(dtype, tensor->dims, tensor->rank);
    if (from == dtype) {
      if (t->byte_size) std::memcpy(t->data, tensor->data, t->byte_size);
    } else if (is_float_type(from)) {
      for (int64_t i = 0; i < tensor->num_elements; ++i) {
        double v = load_double(from, tensor->data, i);
        if (is_float_type(dtype)) store_as(t->data, i, v, dtype);
        else store_as(t->data, i, std::isfinite(v) ? static_cast<int64_t>(v) : 0, dtype);
      }
    } else {
      for (int64_t i = 0; i < tensor->num_elements; ++i) {
        int64_t v = load_int(from, tensor->data, i);
        if (from == TPU_UINT64) store_as(t->data, i, static_cast<uint64_t>(v), dtype);
        else store_as(t->data, i, v, dtype);
      }
    }
    *out = t;
  });
}

TPU_EXPORT tpu_status tpu_float_to_bfloat16(const float* in, uint16_t* out, size_t count) {
  return guarded([&] {
    check_conversion_args(in, out, count, 4, 2);
    for (size_t i = 0; i < count; ++i) out[i] = float_to_bf16(in[i]);
  });
}

TPU_EXPORT tpu_status tpu_bfloat16_to_float(const uint16_t* in, float* out, size_t count) {
  return guarded([&] {
    check_conversion_args(in, out, count, 2, 4);
    for (size_t i = 0; i < count; ++i) out[i] = bf16_to_float(in[i]);
  });
}

TPU_EXPORT tpu_status tpu_float_to_half(const float* in, uint16_t* out, size_t count) {
  return guarded([&] {
    check_conversion_args(in, out, count, 4, 2);
    for (size_t i = 0; i < count; ++i) out[i] = float_to_half(in[i]);
  });
}

TPU_EXPORT tpu_status tpu_half_to_float(const uint16_t* in, float* out, size_t count) {
  return guarded([&] {
    check_conversion_args(in, out, count, 2, 4);
    for (size_t i = 0; i < count; ++i) out[i] = half_to_float(in[i]);
  });
}
