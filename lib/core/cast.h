// tf.cast between tpurt's dtypes: element by element, as TensorFlow does on CPU.
#pragma once

#include "core/tensor.h"

namespace tpurt {

// A new tensor (one reference) holding t's elements as `dtype`. Floats to integers
// truncate toward zero and saturate at the integer type's bounds (infinities too);
// NaN gives 0. Integers wrap. bool and
// complex64 cast only to themselves: anything else is TPU_INVALID_ARGUMENT, as is
// an unknown dtype.
Tensor* cast(const Tensor* t, tpu_dtype dtype);

}  // namespace tpurt
