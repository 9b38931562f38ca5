// Shape and data operations on tensors: axes, reshape, maximum_shapes padding, and
// shard's split and concatenation. Those returning a tensor return a new one (one
// reference); all throw tpurt::Error.
#pragma once

#include "core/tensor.h"

namespace tpurt {

// The index in [0, rank) of an axis in [-rank, rank): negative axes count from the
// end, as in TensorFlow. Any other axis throws `code` with "<what> <axis> is out of
// range for a rank-<rank> tensor".
int normalize_axis(int axis, int rank, const char* what, tpu_status code = TPU_INVALID_ARGUMENT);

// A view of t's buffer with the shape dims[0..rank), in which one entry may be -1:
// that dimension is inferred from t's element count (tf.reshape). The element count
// must stay the same.
Tensor* reshape(const Tensor* t, const int64_t* dims, int rank);

// t zero-padded at the end of every dimension to dims[0..t->rank) (each >= t's).
Tensor* pad_tensor(const Tensor* t, const int64_t* dims);

// Piece `index` of `count` equal pieces of t along `axis` (its size divisible by
// count). Shares t's buffer when the piece is one aligned contiguous run.
Tensor* split_piece(Tensor* t, int axis, int count, int index);

// Concatenates parts[0..n) along `axis`: same dtype and rank >= 1, equal dimensions
// except `axis`. Scalars (rank 0) are stacked into a [n] vector instead.
Tensor* concat_tensors(Tensor* const* parts, int n, int axis);

}  // namespace tpurt
