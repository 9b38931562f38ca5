// Binding-support layer (../tpurt_binding.hpp): what a replica's computation sees
// (ReplicaContext: its inputs and outputs, the collectives, feeds and embeddings) and
// the host functions of outside compilation (HostComputation, HostTensorComputation).
#ifndef TPURT_BINDING_SUPPORT_CONTEXT_HPP
#define TPURT_BINDING_SUPPORT_CONTEXT_HPP

#include "tensor.hpp"
#include "options.hpp"
#include "feed.hpp"
#include "embedding.hpp"

namespace tpurt {

// ---- Computations ------------------------------------------------------------------

class ReplicaContext;

// A host function for outside compilation. Returns a tpu_status; to fail with a
// message, return failHost(code, message).
class HostComputation {
 public:
  virtual ~HostComputation() = default;
  virtual Status run(int replicaId) = 0;
  static Status failHost(Status code, const std::string& message) { return setLastError(code, message); }
  static tpu_status trampoline(int replica, void* user_data) noexcept {
    return guard([&] { return static_cast<HostComputation*>(user_data)->run(replica); });
  }
#ifndef SWIG
  // body() -> Status, with any exception turned into the host function's error.
  template <typename Body>
  static tpu_status guard(Body body) noexcept {
    try {
      return static_cast<tpu_status>(body());
    } catch (const Error& e) {
      return tpu_set_last_error(static_cast<tpu_status>(e.code() ? e.code() : TPU_UNKNOWN), e.what());
    } catch (const std::exception& e) {
      return tpu_set_last_error(TPU_UNKNOWN, e.what());
    } catch (...) {
      return tpu_set_last_error(TPU_UNKNOWN, "the host function threw a non-standard exception");
    }
  }
#endif
};

// A host function for outside compilation with tensors: run() gets the replica's
// tensors (borrowed by the C call) and hands its own back with setOutputs, which
// reach the replica through the C call's outputs.
class HostTensorComputation {
 public:
  virtual ~HostTensorComputation() = default;
  virtual Status run(int replicaId, const std::vector<Tensor>& inputs) = 0;
  void setOutputs(const std::vector<Tensor>& outputs) { outputs_ = outputs; }
  static Status failHost(Status code, const std::string& message) { return setLastError(code, message); }
#ifndef SWIG
  // First call: runs the function (no outputs: their count is known only once it ran).
  static tpu_status trampoline(int replica, tpu_tensor* const* inputs, int numInputs, tpu_tensor** outputs,
                               int numOutputs, void* user_data) noexcept {
    return HostComputation::guard([&] {
      auto* self = static_cast<HostTensorComputation*>(user_data);
      std::vector<Tensor> in;
      for (int i = 0; i < numInputs; ++i) {
        detail::check(tpu_tensor_retain(inputs[i]));
        in.emplace_back(inputs[i]);
      }
      self->outputs_.clear();
      return self->run(replica, in);
    });
  }
  // Second call: hands the function's tensors over as the C call's outputs (an empty
  // one stays NULL, which the call names).
  static tpu_status handOver(int replica, tpu_tensor* const* inputs, int numInputs, tpu_tensor** outputs,
                             int numOutputs, void* user_data) noexcept {
    return HostComputation::guard([&] {
      auto* self = static_cast<HostTensorComputation*>(user_data);
      for (int o = 0; o < numOutputs; ++o) {
        tpu_tensor* t = self->outputs_[static_cast<size_t>(o)].handleOrNull();
        if (t) detail::check(tpu_tensor_retain(t));
        outputs[o] = t;
      }
      self->outputs_.clear();
      return Status::Ok;
    });
  }
  size_t numOutputs() const { return outputs_.size(); }
#endif

 private:
  std::vector<Tensor> outputs_;
};

// What a computation sees: its replica, its inputs and outputs, and the collectives.
// Valid only during the call it was passed to.
class ReplicaContext {
 public:
  ReplicaContext(tpu_replica_context* ctx, tpu_tensor* const* inputs, int numInputs,
                 tpu_tensor** outputs, int numOutputs)
      : ctx_(ctx), inputs_(inputs), num_inputs_(numInputs), outputs_(outputs), num_outputs_(numOutputs) {}

  int replicaId() const { return get_int(tpu_replica_context_replica_id); }
  int numReplicas() const { return get_int(tpu_replica_context_num_replicas); }
  int core() const { return get_int(tpu_replica_context_core); }
  int numCoresPerReplica() const { return get_int(tpu_replica_context_num_cores_per_replica); }
  // (1.3) The logical core within the replica: XLA's partition id, tf.tpu.core(n)'s n.
  int logicalCore() const { return get_int(tpu_replica_context_logical_core); }
  std::string deviceName() const {
    return detail::read_string([&](char* o, size_t c, size_t* n) {
      return tpu_replica_context_device_name(ctx_, o, c, n);
    });
  }
  int numInputs() const { return num_inputs_; }
  int numOutputs() const { return num_outputs_; }
  // A new reference to input i (empty if the caller passed none).
  Tensor input(int i) const {
    check_index(i, num_inputs_, "input");
    tpu_tensor* t = inputs_[i];
    if (t) detail::check(tpu_tensor_retain(t));
    return Tensor(t);
  }
  void setOutput(int i, const Tensor& t) {
    check_index(i, num_outputs_, "output");
    tpu_tensor* h = t.handleOrNull();
    if (h) detail::check(tpu_tensor_retain(h));
    if (outputs_[i]) tpu_tensor_release(outputs_[i]);
    outputs_[i] = h;
  }
  // Records why this replica fails; return the result from the computation.
  Status fail(Status code, const std::string& message) {
    return (Status)tpu_replica_context_fail(ctx_, static_cast<tpu_status>(code), message.c_str());
  }

  Tensor crossReplicaSum(const Tensor& x, const GroupAssignment& groups, const CollectiveOptions& options) {
    tpu_group_assignment g;
    return Tensor::madeBy([&](tpu_tensor** out) {
      return tpu_cross_replica_sum(ctx_, x.handle(), groups.get(&g), out, options.toC());
    });
  }
  Tensor allReduce(const Tensor& x, ReduceOp op, const GroupAssignment& groups, const CollectiveOptions& options) {
    tpu_group_assignment g;
    return Tensor::madeBy([&](tpu_tensor** out) {
      return tpu_all_reduce(ctx_, x.handle(), static_cast<tpu_reduce_op>(op), groups.get(&g), out, options.toC());
    });
  }
  Tensor allGather(const Tensor& x, int axis, const GroupAssignment& groups, const CollectiveOptions& options) {
    tpu_group_assignment g;
    return Tensor::madeBy([&](tpu_tensor** out) {
      return tpu_all_gather(ctx_, x.handle(), axis, groups.get(&g), out, options.toC());
    });
  }
  Tensor reduceScatter(const Tensor& x, ReduceOp op, int scatterAxis, const GroupAssignment& groups,
                       const CollectiveOptions& options) {
    tpu_group_assignment g;
    return Tensor::madeBy([&](tpu_tensor** out) {
      return tpu_reduce_scatter(ctx_, x.handle(), static_cast<tpu_reduce_op>(op), scatterAxis, groups.get(&g), out, options.toC());
    });
  }
  Tensor allToAll(const Tensor& x, int concatDimension, int splitDimension, int splitCount,
                  const GroupAssignment& groups, const CollectiveOptions& options) {
    tpu_group_assignment g;
    return Tensor::madeBy([&](tpu_tensor** out) {
      return tpu_all_to_all(ctx_, x.handle(), concatDimension, splitDimension, splitCount, groups.get(&g), out, options.toC());
    });
  }
  // sourceTargetPairs[numPairs][2], flattened.
  Tensor collectivePermute(const Tensor& x, const std::vector<int32_t>& sourceTargetPairs,
                           const CollectiveOptions& options) {
    if (sourceTargetPairs.size() % 2 != 0)
      throw Error(TPU_INVALID_ARGUMENT, "sourceTargetPairs has an odd number (" +
                                            std::to_string(sourceTargetPairs.size()) + ") of entries");
    int numPairs = detail::int_or_throw(sourceTargetPairs.size() / 2, "pairs");
    return Tensor::madeBy([&](tpu_tensor** out) {
      return tpu_collective_permute(ctx_, x.handle(), sourceTargetPairs.data(), numPairs, out, options.toC());
    });
  }
  Tensor broadcast(const Tensor& x, int root, const GroupAssignment& groups, const CollectiveOptions& options) {
    tpu_group_assignment g;
    return Tensor::madeBy([&](tpu_tensor** out) {
      return tpu_broadcast(ctx_, x.handle(), root, groups.get(&g), out, options.toC());
    });
  }
  void barrier(const CollectiveOptions& options) { detail::check(tpu_barrier(ctx_, options.toC())); }
  void bfloat16ScopeEnter() { detail::check(tpu_bfloat16_scope_enter(ctx_)); }
  void bfloat16ScopeExit() { detail::check(tpu_bfloat16_scope_exit(ctx_)); }
  void outsideCompilation(HostComputation& fn) {
    detail::check(tpu_outside_compilation(ctx_, &HostComputation::trampoline, &fn));
  }
  // tf.tpu.outside_compilation(computation, *args): inputs go to fn.run on the host;
  // returns the tensors it set with setOutputs. Two C calls: the replica sizes the
  // outputs, and their count is known only once fn has run.
  std::vector<Tensor> outsideCompilationTensors(HostTensorComputation& fn, const std::vector<Tensor>& inputs) {
    std::vector<tpu_tensor*> in = Tensor::handles(inputs);
    detail::check(tpu_outside_compilation_tensors(ctx_, &HostTensorComputation::trampoline, &fn, in.data(),
                                                  detail::int_or_throw(in.size(), "inputs"), nullptr, 0));
    std::vector<tpu_tensor*> out(fn.numOutputs(), nullptr);
    if (out.empty()) return {};
    detail::check(tpu_outside_compilation_tensors(ctx_, &HostTensorComputation::handOver, &fn, nullptr, 0,
                                                  out.data(), detail::int_or_throw(out.size(), "outputs")));
    return Tensor::adopt(out);
  }
  std::vector<Tensor> infeedDequeue(InfeedQueue& queue) {
    std::vector<tpu_tensor*> h(static_cast<size_t>(queue.numElements()), nullptr);
    detail::check(tpu_infeed_dequeue(ctx_, queue.handle(), h.data(), queue.numElements()));
    return Tensor::adopt(h);
  }
  void outfeedEnqueue(OutfeedQueue& queue, const std::vector<Tensor>& tuple) {
    std::vector<tpu_tensor*> h = Tensor::handles(tuple);
    detail::check(tpu_outfeed_enqueue(ctx_, queue.handle(), h.data(), detail::int_or_throw(h.size(), "tuple")));
  }

  // ---- Embeddings (embedding.h, 1.4) ----
  void embeddingEnqueue(const std::vector<EmbeddingFeatureBatch>& features) {
    std::vector<tpu_embedding_feature_batch> c(features.size());
    for (size_t i = 0; i < features.size(); ++i) {
      const EmbeddingFeatureBatch& f = features[i];
      if (!f.weights.empty() && f.weights.size() != f.ids.size())
        throw Error(TPU_INVALID_ARGUMENT, "feature " + std::to_string(f.feature) + " has " +
                                              std::to_string(f.weights.size()) + " weights for " +
                                              std::to_string(f.ids.size()) + " ids");
      if (!f.sampleIndices.empty() && f.sampleIndices.size() != f.ids.size())
        throw Error(TPU_INVALID_ARGUMENT, "feature " + std::to_string(f.feature) + " has " +
                                              std::to_string(f.sampleIndices.size()) + " sample indices for " +
                                              std::to_string(f.ids.size()) + " ids");
      c[i].feature = f.feature;
      c[i].ids = detail::c_dims(f.ids);
      c[i].num_ids = f.ids.size();
      c[i].sample_indices = f.sampleIndices.empty() ? nullptr : detail::c_dims(f.sampleIndices);
      c[i].row_splits = f.rowSplits.empty() ? nullptr : detail::c_dims(f.rowSplits);
      c[i].num_row_splits = f.rowSplits.size();
      c[i].weights = f.weights.empty() ? nullptr : f.weights.data();
      c[i].combiner = static_cast<tpu_embedding_combiner>(f.combiner);
    }
    detail::check(tpu_embedding_enqueue(ctx_, c.data(), detail::int_or_throw(c.size(), "features")));
  }
  // One tensor per configured feature; an empty Tensor for a feature not enqueued.
  std::vector<Tensor> embeddingRecvActivations() {
    std::vector<tpu_tensor*> h(static_cast<size_t>(embeddingNumFeatures()), nullptr);
    detail::check(tpu_embedding_recv_activations(ctx_, h.data(), detail::int_or_throw(h.size(), "features")));
    return Tensor::adopt(h);
  }
  // gradients: one per configured feature (empty for a feature not enqueued);
  // learningRates: one per dynamic learning-rate tag.
  void embeddingSendGradients(const std::vector<Tensor>& gradients, const std::vector<float>& learningRates) {
    std::vector<tpu_tensor*> h = Tensor::handles(gradients);
    detail::check(tpu_embedding_send_gradients(ctx_, h.data(), detail::int_or_throw(h.size(), "gradients"),
                                               learningRates.empty() ? nullptr : learningRates.data(),
                                               detail::int_or_throw(learningRates.size(), "learningRates")));
  }
  // The configuration's feature count, read through the step's system.
  int embeddingNumFeatures() const {
    int n = 0;
    detail::check(tpu_embedding_num_features(system_(), &n));
    return n;
  }
  // Features by name inside a computation (the languages' name-keyed enqueue and activations).
  int embeddingFeatureIndex(const std::string& name) const {
    int i = 0;
    detail::check(tpu_embedding_feature_index(system_(), name.c_str(), &i));
    return i;
  }
  std::string embeddingFeatureName(int feature) const {
    tpu_system* s = system_();
    return detail::read_string([&](char* o, size_t c, size_t* n) { return tpu_embedding_feature_name(s, feature, o, c, n); });
  }

 private:
  tpu_system* system_() const {
    tpu_system* s = nullptr;
    detail::check(tpu_replica_context_system(ctx_, &s));
    return s;
  }
  static void check_index(int i, int n, const char* what) {
    if (i < 0 || i >= n)
      throw Error(TPU_INVALID_ARGUMENT, std::string(what) + " " + std::to_string(i) + " is outside [0, " +
                                            std::to_string(n) + ")");
  }
  int get_int(tpu_status (*fn)(const tpu_replica_context*, int*)) const {
    int out = 0;
    detail::check(fn(ctx_, &out));
    return out;
  }
  tpu_replica_context* ctx_;
  tpu_tensor* const* inputs_;
  int num_inputs_;
  tpu_tensor** outputs_;
  int num_outputs_;
};

}  // namespace tpurt

#endif  // TPURT_BINDING_SUPPORT_CONTEXT_HPP
