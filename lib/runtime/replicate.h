// tf.tpu.replicate and tf.tpu.shard over a System: the argument rules, maximum_shapes
// padding, shard's split and concatenation (spec §4), and each replica's inputs and
// outputs spread over its cores (runtime/partition.h). Both throw tpurt::Error and
// write outputs only on success.
#pragma once

#include "runtime/system.h"

namespace tpurt {

class DeviceAssignment;
class FeedQueue;

// tpu_step_options after the C shim has read them (NULL handles stay NULL).
struct StepOptions {
  const DeviceAssignment* device_assignment = nullptr;
  const tpu_shape* maximum_shapes = nullptr;
  size_t num_maximum_shapes = 0;
  int padding_spec = TPU_PADDING_AUTO;
  int64_t collective_timeout_ms = 0;  // 0: the system's
  FeedQueue* infeed_queue = nullptr;
  const tpu_partition_spec* input_partitions = nullptr;  // 1.3
  size_t num_input_partitions = 0;
  const tpu_partition_spec* output_partitions = nullptr;
  size_t num_output_partitions = 0;
  bool caller_threads = false;  // 1.4: participants run on threads that joined their cores
};

void replicate(System& system, tpu_computation_fn computation, void* user_data,
               int num_replicas, int num_inputs, tpu_tensor* const* inputs, int num_outputs,
               tpu_tensor** outputs, const StepOptions& options);

void shard(System& system, tpu_computation_fn computation, void* user_data, int num_inputs,
           tpu_tensor* const* inputs, int num_shards, const int* input_shard_axes,
           const int* outputs_from_all_shards, const int* output_shard_axes, int num_outputs,
           tpu_tensor** outputs, const StepOptions& options);

}  // namespace tpurt
