#include "runtime/tensor_ops.h"

#include <cstring>

#include "collectives/box_copy.h"
#include "core/dtype.h"

namespace tpurt {
namespace {

// Matches the alignment tpu_tensor_create promises, so views are as usable as copies.
constexpr uintptr_t kViewAlign = 64;

}  // namespace

Tensor* pad_tensor(const Tensor* t, const int64_t* dims) {
  Tensor* out = new_tensor(t->dtype, dims, t->rank);
  const int64_t zero[TPU_MAX_RANK] = {0};
  copy_box(dtype_size(t->dtype), t->rank, t->dims, t->data, t->dims, zero, out->data, out->dims,
           zero);
  return out;
}

Tensor* split_piece(Tensor* t, int axis, int count, int index) {
  int64_t dims[TPU_MAX_RANK];
  std::memcpy(dims, t->dims, sizeof(int64_t) * t->rank);
  dims[axis] /= count;
  int64_t outer = 1;
  for (int d = 0; d < axis; ++d) outer *= t->dims[d];
  const size_t piece_bytes = t->byte_size / count;
  char* start = static_cast<char*>(t->data) + piece_bytes * index;
  if (outer == 1 && reinterpret_cast<uintptr_t>(start) % kViewAlign == 0)
    return share(t, dims, t->rank, piece_bytes * index);
  Tensor* out = new_tensor_uninitialized(t->dtype, dims, t->rank);
  int64_t from[TPU_MAX_RANK] = {0};
  const int64_t zero[TPU_MAX_RANK] = {0};
  from[axis] = dims[axis] * index;
  copy_box(dtype_size(t->dtype), t->rank, dims, t->data, t->dims, from, out->data, out->dims, zero);
  return out;
}

Tensor* concat_tensors(Tensor* const* parts, int n, int axis) {
  const Tensor* first = parts[0];
  const size_t elem = dtype_size(first->dtype);
  if (first->rank == 0) {
    const int64_t dims[1] = {n};
    Tensor* out = new_tensor_uninitialized(first->dtype, dims, 1);
    for (int i = 0; i < n; ++i) std::memcpy(static_cast<char*>(out->data) + i * elem, parts[i]->data, elem);
    return out;
  }
  int64_t dims[TPU_MAX_RANK];
  std::memcpy(dims, first->dims, sizeof(int64_t) * first->rank);
  dims[axis] = 0;
  for (int i = 0; i < n; ++i) dims[axis] += parts[i]->dims[axis];
  Tensor* out = new_tensor_uninitialized(first->dtype, dims, first->rank);
  int64_t at[TPU_MAX_RANK] = {0};
  const int64_t zero[TPU_MAX_RANK] = {0};
  for (int i = 0; i < n; ++i) {
    copy_box(elem, first->rank, parts[i]->dims, parts[i]->data, parts[i]->dims, zero, out->data,
             out->dims, at);
    at[axis] += parts[i]->dims[axis];
  }
  return out;
}

}  // namespace tpurt
