#include "core/tensor_ops.h"

#include <cstring>

#include "core/box_copy.h"
#include "core/dtype.h"
#include "core/status.h"

namespace tpurt {
namespace {

// Matches the alignment tpu_tensor_create promises, so views are as usable as copies.
constexpr uintptr_t kViewAlign = 64;

}  // namespace

int normalize_axis(int axis, int rank, const char* what, tpu_status code) {
  const int a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    fail(code, what, " ", axis, " is out of range for a rank-", rank, " tensor");
  return a;
}

Tensor* reshape(const Tensor* t, const int64_t* dims, int rank) {
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
    if (known == 0 || t->num_elements % known != 0)
      invalid_argument("cannot reshape ", describe(t), " to ", shape_string(dims, rank));
    resolved[inferred] = t->num_elements / known;
  }
  int64_t n;
  size_t bytes;
  check_shape(t->dtype, resolved, rank, &n, &bytes);
  if (n != t->num_elements)
    invalid_argument("cannot reshape ", describe(t), " (", t->num_elements, " elements) to ",
                     shape_string(resolved, rank), " (", n, " elements)");
  return share(t, resolved, rank, 0);
}

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
