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

// Partial folds, for a reduction whose sources are spread over several tasks and must
// still be folded in source order: each task folds its sources onto the fold so far
// and passes it on; the last finishes it. Bits equal reduce()'s over all sources.
// Supported for the floating-point types with SUM, PROD and MEAN (the other
// reductions give the same bits in any order).
bool partial_fold_supported(tpu_dtype dtype, tpu_reduce_op op);
// Whether reducing per task first gives the same bits as reducing in source order:
// wrapping integer arithmetic and min/max are associative and commutative, floating
// point sums and products are not, and MEAN divides once by the source count.
bool partials_exact(tpu_dtype dtype, tpu_reduce_op op);
// The type a partial fold is kept in: float32 for bfloat16 and half, else dtype.
tpu_dtype partial_dtype(tpu_dtype dtype);
// acc = acc_in (the fold so far, in partial_dtype; NULL: none yet) folded with
// elements [offset, offset + count) of the n sources. acc may be acc_in.
void fold_partial(tpu_dtype dtype, tpu_reduce_op op, const void* acc_in, const void* const* srcs,
                  int n, int64_t offset, int64_t count, void* acc);
// dst = the finished fold of `members` sources (MEAN divides; bfloat16 and half round
// once). dst may be acc for the types whose partial is their own; acc is clobbered.
void finish_partial(tpu_dtype dtype, tpu_reduce_op op, void* acc, int members, int64_t count, void* dst);

}  // namespace tpurt
