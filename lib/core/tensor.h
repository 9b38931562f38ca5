// The tensor behind the tpu_tensor handle: shape, dtype and a buffer that is either
// allocated inline with the header (create), borrowed (wrap), or shared with a base
// tensor (reshape). Reference counted; the count is atomic.
#pragma once

#include <atomic>
#include <cstdint>
#include <ostream>
#include <string>

#include "tpurt/tensor.h"

struct tpu_tensor {
  std::atomic<int32_t> refs;
  tpu_dtype dtype;
  int rank;
  int64_t dims[TPU_MAX_RANK];
  int64_t num_elements;
  size_t byte_size;
  void* data;
  tpu_tensor* base;  // owner of data for reshaped views, else nullptr
  tpu_release_fn release;
  void* release_user_data;
  size_t block_bytes;  // size of the block holding header and data (block_cache.h)
};

namespace tpurt {

using Tensor = tpu_tensor;

// The largest byte size of one tensor (2^48).
constexpr size_t kMaxTensorBytes = size_t{1} << 48;

// Checks dtype, rank and dims; returns the element count and byte size. Throws
// TPU_INVALID_ARGUMENT naming the problem (negative dims, overflow, ...).
void check_shape(tpu_dtype dtype, const int64_t* dims, int rank, int64_t* num_elements,
                 size_t* byte_size);

// A new zero-filled tensor (refs = 1). Throws on bad shape or out of memory.
Tensor* new_tensor(tpu_dtype dtype, const int64_t* dims, int rank);
// Same, without zero-filling (the caller writes every byte).
Tensor* new_tensor_uninitialized(tpu_dtype dtype, const int64_t* dims, int rank);

// A tensor header without a buffer (data == nullptr): for wrap and reshape.
Tensor* new_tensor_header(tpu_dtype dtype, const int64_t* dims, int rank);

void retain(Tensor* t);
void release(Tensor* t);

// "float32[2,3]"
std::string describe(const Tensor* t);
std::string shape_string(const int64_t* dims, int rank);
// Streams as "[2,3]": for messages that are built only when they are needed.
struct ShapeText {
  const int64_t* dims;
  int rank;
};
std::ostream& operator<<(std::ostream& os, ShapeText s);

}  // namespace tpurt
