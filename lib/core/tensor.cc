#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

#include "core/block_cache.h"
#include "core/checked.h"
#include "core/dtype.h"
#include "core/status.h"

namespace tpurt {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t kHeader = (sizeof(Tensor) + kAlign - 1) / kAlign * kAlign;

enum class Data { kNone, kUninitialized, kZeroed };

// One block holds the header and, unless kNone, the data right after it.
Tensor* allocate(tpu_dtype dtype, const int64_t* dims, int rank, Data data) {
  int64_t n;
  size_t bytes;
  check_shape(dtype, dims, rank, &n, &bytes);
  const size_t data_bytes = data == Data::kNone ? 0 : bytes;
  if (data_bytes > SIZE_MAX - kHeader - kAlign) fail(TPU_RESOURCE_EXHAUSTED, "tensor of ", bytes, " bytes is too large");
  size_t total = (kHeader + data_bytes + kAlign - 1) / kAlign * kAlign;
  size_t block_bytes = 0;
  void* mem = total >= kLargeBlock ? alloc_block(total, &block_bytes) : alloc_small(total, &block_bytes);
  if (mem == nullptr) fail(TPU_RESOURCE_EXHAUSTED, "out of memory allocating a tensor of ", bytes, " bytes");
  Tensor* t = new (mem) Tensor;
  t->refs.store(1, std::memory_order_relaxed);
  t->dtype = dtype;
  t->rank = rank;
  for (int i = 0; i < rank; ++i) t->dims[i] = dims[i];
  t->num_elements = n;
  t->byte_size = bytes;
  t->data = data == Data::kNone ? nullptr : static_cast<char*>(mem) + kHeader;
  t->base = nullptr;
  t->release = nullptr;
  t->release_user_data = nullptr;
  t->block_bytes = block_bytes;
  if (data == Data::kZeroed && bytes) std::memset(t->data, 0, bytes);
  return t;
}

}  // namespace

void check_shape(tpu_dtype dtype, const int64_t* dims, int rank, int64_t* num_elements,
                 size_t* byte_size) {
  size_t elem = checked_dtype_size(dtype);
  if (rank < 0 || rank > TPU_MAX_RANK) invalid_argument("rank ", rank, " is outside [0, ", TPU_MAX_RANK, "]");
  if (rank > 0 && dims == nullptr) invalid_argument("argument 'dims' is NULL but rank is ", rank);
  // As TensorFlow's TensorShape: the running product must fit, so [0, 2^62, 2^62]
  // (0 elements) is a shape and [2^62, 2^62, 0] is not.
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] < 0) invalid_argument("dimension ", i, " is negative (", dims[i], ")");
    n = checked_mul(n, dims[i], "the element count of shape ", ShapeText{dims, rank});
  }
  const size_t bytes = checked_mul(static_cast<size_t>(n), elem, "the byte size of ",
                                   dtype_name(dtype), ShapeText{dims, rank});
  if (bytes > kMaxTensorBytes)
    invalid_argument("the byte size of ", dtype_name(dtype), ShapeText{dims, rank}, " is ", bytes,
                     ", more than the ", kMaxTensorBytes, " a tensor may have");
  *num_elements = n;
  *byte_size = bytes;
}

Tensor* new_tensor_header(tpu_dtype dtype, const int64_t* dims, int rank) {
  return allocate(dtype, dims, rank, Data::kNone);
}

Tensor* new_tensor(tpu_dtype dtype, const int64_t* dims, int rank) {
  return allocate(dtype, dims, rank, Data::kZeroed);
}

Tensor* new_tensor_uninitialized(tpu_dtype dtype, const int64_t* dims, int rank) {
  return allocate(dtype, dims, rank, Data::kUninitialized);
}

void retain(Tensor* t) { t->refs.fetch_add(1, std::memory_order_relaxed); }

void release(Tensor* t) {
  if (t == nullptr) return;
  if (t->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  tpu_tensor* base = t->base;
  tpu_release_fn fn = t->release;
  void* data = t->data;
  void* ud = t->release_user_data;
  size_t block_bytes = t->block_bytes;
  t->~Tensor();
  if (block_bytes >= kLargeBlock) free_block(t, block_bytes);
  else free_small(t, block_bytes);
  if (base) release(base);
  else if (fn) fn(data, ud);
}

std::ostream& operator<<(std::ostream& os, ShapeText s) {
  os << '[';
  for (int i = 0; i < s.rank; ++i) os << (i ? "," : "") << s.dims[i];
  return os << ']';
}

std::string shape_string(const int64_t* dims, int rank) { return str_cat(ShapeText{dims, rank}); }

std::string describe(const Tensor* t) {
  return str_cat(dtype_name(t->dtype), shape_string(t->dims, t->rank));
}

}  // namespace tpurt
