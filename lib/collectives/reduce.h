// Elementwise reduction kernels: dst[i] = op over sources of src[j][i], in source
// order (so every replica computing the same elements gets identical bits).
// bfloat16 and half accumulate in float32 and round once.
#pragma once

#include <cstdint>
#include <vector>

#include "tpurt/collectives.h"

namespace tpurt {

// A reduction's source pointers: on the stack for up to 64 sources, so small
// collectives allocate nothing but their output.
class SourceList {
 public:
  explicit SourceList(int n) {
    if (n > kOnStack) heap_.resize(n);
  }
  const void** data() { return heap_.empty() ? stack_ : heap_.data(); }

 private:
  static constexpr int kOnStack = 64;
  const void* stack_[kOnStack];
  std::vector<const void*> heap_;
};

// Throws TPU_INVALID_ARGUMENT if `op` is not defined for `dtype` (bool allows only
// MIN/MAX; complex64 has no MIN/MAX).
void check_reduction(tpu_dtype dtype, tpu_reduce_op op);

// Reduces elements [offset, offset + count) of the n sources into dst[0, count).
// MEAN divides by n. dst may alias none of the sources.
void reduce(tpu_dtype dtype, tpu_reduce_op op, const void* const* srcs, int n, int64_t offset,
            int64_t count, void* dst);

}  // namespace tpurt
