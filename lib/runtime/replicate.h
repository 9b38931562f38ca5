// tf.tpu.replicate and tf.tpu.shard over a System: the argument rules, maximum_shapes
// padding, and shard's split and concatenation (spec §4). Both throw tpurt::Error
// and write outputs only on success.
#pragma once

#include "runtime/system.h"

namespace tpurt {

void replicate(System& system, tpu_computation_fn computation, void* user_data,
               int num_replicas, int num_inputs, tpu_tensor* const* inputs,
               const tpu_device_assignment* device_assignment, const tpu_shape* maximum_shapes,
               int num_outputs, tpu_tensor** outputs);

void shard(System& system, tpu_computation_fn computation, void* user_data, int num_inputs,
           tpu_tensor* const* inputs, int num_shards, const int* input_shard_axes,
           const int* outputs_from_all_shards, const int* output_shard_axes,
           const tpu_device_assignment* device_assignment, int num_outputs,
           tpu_tensor** outputs);

}  // namespace tpurt
