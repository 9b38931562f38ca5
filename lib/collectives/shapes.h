// What a collective's arguments must be and the shape of its result: one set of rules
// for the in-process communicator and the one that spans tasks. Each throws
// TPU_INVALID_ARGUMENT naming the offending value.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "core/tensor_ref.h"
#include "core/float16.h"

namespace tpurt {

// all_gather along `axis` over groups of group_size: returns the axis, normalized;
// dims gets the result's shape.
int all_gather_shape(const Tensor* x, int axis, int group_size, int64_t* dims);
// reduce_scatter along `axis`: the same.
int reduce_scatter_shape(const Tensor* x, int axis, int group_size, int64_t* dims);
// all_to_all: the normalized dimensions, the box each member sends each other, the
// result's shape.
void all_to_all_shape(const Tensor* x, int concat_dim, int split_dim, int split_count,
                      int group_size, int* concat, int* split, int64_t* box, int64_t* dims);
// collective_permute's pairs over num_replicas replicas (sources and targets each at
// most once): returns the source whose input `replica` receives, or -1.
int permute_source(const int32_t* pairs, int num_pairs, int num_replicas, int replica);

// The bfloat16 scope: rounds float32 x to bfloat16, reduces that with `reduce`
// (which accumulates in float32 and rounds once), and widens the result to float32.
template <typename Reduce>
Tensor* through_bfloat16(const Tensor* x, Reduce&& reduce) {
  TensorRef wire{new_tensor_uninitialized(TPU_BFLOAT16, x->dims, x->rank)};
  float_to_bf16(static_cast<const float*>(x->data), static_cast<uint16_t*>(wire->data),
                static_cast<size_t>(x->num_elements));
  TensorRef reduced{reduce(wire.get())};
  TensorRef out{new_tensor_uninitialized(TPU_FLOAT, reduced->dims, reduced->rank)};
  bf16_to_float(static_cast<const uint16_t*>(reduced->data), static_cast<float*>(out->data),
                static_cast<size_t>(reduced->num_elements));
  return out.take();
}

}  // namespace tpurt
