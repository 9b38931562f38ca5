// tf.tpu.shard's outputs (spec §4.3), checked inside the step and, on a system of
// several tasks, gathered inside it too, so that every task returns the whole output
// and a shard's bad output fails the step (on every task, before the embedding
// engine keeps its updates) instead of failing the call after it.
//
// On one task every shard's output is local: the stage only checks. Each participant
// records the shapes its outputs have; the last to leave checks them all (no
// collective, no wait) and fails the step on behalf of the shard at fault. The caller
// then concatenates the local outputs as before.
//
// Across tasks, after the computation (and after the tiles of a partitioned output are
// assembled on logical core 0) every participant of the step all-gathers the dtype,
// rank and dims of every output (one collective); each finds the same verdict, and
// only the participant of the shard at fault fails, so that every task reports the
// same error. Then one all-gather moves the bytes of the outputs gathered from all
// shards (each shard's output padded to the largest one's bytes), and one broadcast
// shard 0's outputs that are not gathered; the caller builds the whole outputs from
// them.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/tensor_ref.h"
#include "runtime/executor.h"

namespace tpurt {

// What tpu_shard says about its outputs.
struct ShardOutputSpec {
  int num_shards = 0;
  int num_outputs = 0;
  std::vector<char> from_all;  // [output]: concatenated over the shards, or shard 0's
  std::vector<int> axes;       // [output]: output_shard_axes as given
};

// One output as a shard left it.
struct ShardOutputMeta {
  bool present = false;
  tpu_dtype dtype = TPU_FLOAT;
  int rank = 0;
  int64_t dims[TPU_MAX_RANK] = {0};
};

// The checks tpu_shard makes on its outputs, in its order (output by output, shard by
// shard): metas[shard * num_outputs + output]. OK: axes[o] is output o's
// concatenation axis, normalized. Otherwise the shard at fault (0 for an
// output_shard_axes out of range), and the error.
struct ShardVerdict {
  int shard = -1;
  tpu_status code = TPU_OK;
  std::string message;
  std::vector<int> axes;
};
ShardVerdict check_shard_outputs(const ShardOutputSpec& spec, const ShardOutputMeta* metas);

// Runs `second` after `first` (either may be NULL): second's before() after first's,
// second's after() after first's, on the status first's gives.
std::shared_ptr<const StepStage> chain_stages(std::shared_ptr<const StepStage> first,
                                              std::shared_ptr<const StepStage> second);

class ShardGatherStage : public StepStage {
 public:
  // cores_per_replica: the shard of participant p is p / cores, its output logical
  // core 0's. across_tasks: gather (the system has several tasks); otherwise check only.
  ShardGatherStage(ShardOutputSpec spec, int cores_per_replica, bool across_tasks);

  tpu_status before(tpu_replica_context*, std::vector<tpu_tensor*>*) const override { return TPU_OK; }
  tpu_status after(tpu_replica_context* ctx, tpu_status status, std::vector<tpu_tensor*>* inputs,
                   size_t num_given, tpu_tensor** outputs, int num_outputs) const override;

  // After the step succeeded: outputs[0..num_outputs) as tpu_shard returns them (new
  // references). local[shard * num_outputs + output] are the shards' outputs this task
  // holds (every shard's on one task; unused across tasks).
  void finish(Tensor* const* local, tpu_tensor** outputs) const;

 private:
  tpu_status check_here(tpu_replica_context* ctx, tpu_status status, tpu_tensor** outputs) const;
  tpu_status gather(tpu_replica_context* ctx, tpu_tensor** outputs) const;

  const ShardOutputSpec spec_;
  const int cores_;
  const bool across_tasks_;
  // Written by the step's participants (a late one may still come: it only sees the
  // step it belongs to, and the caller reads these only after the step succeeded).
  mutable std::mutex mu_;
  mutable std::vector<ShardOutputMeta> metas_;  // [shard][output]
  mutable int arrived_ = 0;                     // one task: participants that left
  mutable bool failed_ = false;                 // one task: one of them failed
  mutable TensorRef gathered_;   // across tasks: every participant's bytes
  mutable TensorRef broadcast_;  // across tasks: shard 0's outputs not gathered
  mutable bool have_ = false;    // across tasks: metas_ and the two above are set
};

}  // namespace tpurt
