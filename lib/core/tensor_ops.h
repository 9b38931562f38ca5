// Moving data between tensors for maximum_shapes padding and for shard's split and
// concatenation. Each returns a new tensor (one reference) and throws tpurt::Error.
#pragma once

#include "core/tensor.h"

namespace tpurt {

// t zero-padded at the end of every dimension to dims[0..t->rank) (each >= t's).
Tensor* pad_tensor(const Tensor* t, const int64_t* dims);

// Piece `index` of `count` equal pieces of t along `axis` (its size divisible by
// count). Shares t's buffer when the piece is one aligned contiguous run.
Tensor* split_piece(Tensor* t, int axis, int count, int index);

// Concatenates parts[0..n) along `axis`: same dtype and rank >= 1, equal dimensions
// except `axis`. Scalars (rank 0) are stacked into a [n] vector instead.
Tensor* concat_tensors(Tensor* const* parts, int n, int axis);

}  // namespace tpurt
