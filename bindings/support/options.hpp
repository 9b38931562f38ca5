// Binding-support layer (../tpurt_binding.hpp): SystemOptions, StepOptions and
// CollectiveOptions.
#ifndef TPURT_BINDING_SUPPORT_OPTIONS_HPP
#define TPURT_BINDING_SUPPORT_OPTIONS_HPP

#include "tensor.hpp"
#include "topology.hpp"
#include "feed.hpp"

namespace tpurt {

// ---- Options ---------------------------------------------------------------------

class SystemOptions {
 public:
  SystemOptions() { detail::check(tpu_system_options_init(&o_, sizeof o_)); }
  int numCores = 0;
  std::vector<int32_t> meshShape;  // empty: [numCores, 1, 1, 1]
  std::string jobName;             // empty: "localhost"
  std::string deviceType;          // empty: "TPU"
  ThreadPinning pinThreads = ThreadPinning::Auto;
  int64_t collectiveTimeoutMs = 0;
  bool closeOnFailure = false;
  std::vector<uint8_t> embeddingConfig;
  bool privateCollectiveResults = false;
  // (1.4) The file of a Chrome trace-event trace of every step (docs/TRACING.md);
  // empty: the environment's TPURT_TRACE, else none.
  std::string tracePath;
  // A C view valid while this object is unchanged.
  const tpu_system_options* toC() const {
    if (meshShape.size() > 4)
      throw Error(TPU_INVALID_ARGUMENT, "meshShape has " + std::to_string(meshShape.size()) +
                                            " entries; at most 4");
    tpu_system_options& o = o_;
    o.num_cores = numCores;
    for (size_t i = 0; i < 4; ++i) o.mesh_shape[i] = i < meshShape.size() ? meshShape[i] : 0;
    o.job_name = jobName.empty() ? nullptr : jobName.c_str();
    o.device_type = deviceType.empty() ? nullptr : deviceType.c_str();
    o.pin_threads = static_cast<int>(pinThreads);
    o.collective_timeout_ms = collectiveTimeoutMs;
    o.close_on_failure = closeOnFailure ? 1 : 0;
    o.embedding_config = embeddingConfig.empty() ? nullptr : embeddingConfig.data();
    o.embedding_config_len = embeddingConfig.size();
    o.private_collective_results = privateCollectiveResults ? 1 : 0;
    o.trace_path = tracePath.empty() ? nullptr : tracePath.c_str();
    return &o;
  }

 private:
  mutable tpu_system_options o_;
};

class InfeedQueue;

class StepOptions {
 public:
  StepOptions() { detail::check(tpu_step_options_init(&o_, sizeof o_)); }
  const DeviceAssignment* deviceAssignment = nullptr;  // not owned
  std::vector<Shape> maximumShapes;                    // empty: no padding
  PaddingSpec paddingSpec = PaddingSpec::Auto;
  int64_t collectiveTimeoutMs = 0;
  InfeedQueue* infeedQueue = nullptr;  // not owned
  // (1.3) One entry per input / output: partitionDims over the cores of a replica
  // (tpu_partition_spec); an empty entry is not partitioned. Empty lists: none.
  std::vector<std::vector<int32_t>> inputPartitions;
  std::vector<std::vector<int32_t>> outputPartitions;
  // (1.4) Run on the threads that joined the cores (tpu_step_join), not the workers.
  bool callerThreads = false;
  const tpu_step_options* toC(std::vector<tpu_shape>* shapes) const;

 private:
  static void partition_specs(const std::vector<std::vector<int32_t>>& dims, const char* what,
                              std::vector<tpu_partition_spec>* out) {
    out->clear();
    for (size_t i = 0; i < dims.size(); ++i) {
      if (dims[i].size() > TPU_MAX_RANK)
        throw Error(TPU_INVALID_ARGUMENT, std::string(what) + "[" + std::to_string(i) + "] has " +
                                              std::to_string(dims[i].size()) + " dimensions; at most " +
                                              std::to_string(TPU_MAX_RANK));
      tpu_partition_spec p{};
      p.num_dims = static_cast<int>(dims[i].size());
      for (size_t d = 0; d < dims[i].size(); ++d) p.partition_dims[d] = dims[i][d];
      out->push_back(p);
    }
  }
  mutable tpu_step_options o_;
  mutable std::vector<tpu_partition_spec> input_parts_, output_parts_;
};

class CollectiveOptions {
 public:
  CollectiveOptions() { detail::check(tpu_collective_options_init(&o_, sizeof o_)); }
  int64_t timeoutMs = 0;  // 0: the step's deadline
  GroupMode groupMode = GroupMode::CrossReplica;  // (1.3) what the groups hold
  const tpu_collective_options* toC() const {
    o_.timeout_ms = timeoutMs;
    o_.group_mode = static_cast<int>(groupMode);
    return &o_;
  }

 private:
  mutable tpu_collective_options o_;
};

inline const tpu_step_options* StepOptions::toC(std::vector<tpu_shape>* shapes) const {
  shapes->clear();
  for (const Shape& s : maximumShapes) shapes->push_back(s.toC());
  o_.device_assignment = deviceAssignment ? deviceAssignment->handle() : nullptr;
  o_.maximum_shapes = shapes->empty() ? nullptr : shapes->data();
  o_.num_maximum_shapes = shapes->size();
  o_.padding_spec = static_cast<int>(paddingSpec);
  o_.collective_timeout_ms = collectiveTimeoutMs;
  o_.infeed_queue = infeedQueue ? infeedQueue->handle() : nullptr;
  partition_specs(inputPartitions, "inputPartitions", &input_parts_);
  partition_specs(outputPartitions, "outputPartitions", &output_parts_);
  o_.input_partitions = input_parts_.empty() ? nullptr : input_parts_.data();
  o_.num_input_partitions = input_parts_.size();
  o_.output_partitions = output_parts_.empty() ? nullptr : output_parts_.data();
  o_.num_output_partitions = output_parts_.size();
  o_.caller_threads = callerThreads ? 1 : 0;
  return &o_;
}

}  // namespace tpurt

#endif  // TPURT_BINDING_SUPPORT_OPTIONS_HPP
