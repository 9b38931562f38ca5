// Binding-support layer (../tpurt_binding.hpp): TpuSystem, and the feed queues'
// constructors, which need it.
#ifndef TPURT_BINDING_SUPPORT_SYSTEM_HPP
#define TPURT_BINDING_SUPPORT_SYSTEM_HPP

#include "tensor.hpp"
#include "topology.hpp"
#include "options.hpp"
#include "cluster.hpp"
#include "feed.hpp"
#include "step.hpp"

namespace tpurt {

// ---- System --------------------------------------------------------------------------

class TpuSystem {
 public:
  explicit TpuSystem(const SystemOptions& options) {
    detail::check(tpu_system_init(options.toC(), &s_));
  }
  // tf.tpu.initialize_system: starts a system and keeps the TopologyProto it returns.
  static TpuSystem* initializeSystem(const SystemOptions& options) {
    tpu_system* s = nullptr;
    size_t count = 0;
    detail::check(tpu_initialize_system(options.toC(), &s, nullptr, 0, &count));
    return new TpuSystem(s);
  }
  // tf.tpu.experimental.initialize_tpu_system(cluster_resolver): joins the resolver's
  // cluster (null: resolved from the environment; nothing set gives a one-task system).
  // The global topology is topology().
  static TpuSystem* initializeTpuSystem(const ClusterResolver* resolver, const SystemOptions& systemOptions,
                                        const ClusterOptions& clusterOptions) {
    tpu_system* s = nullptr;
    detail::check(tpu_initialize_tpu_system(resolver ? resolver->handle() : nullptr, systemOptions.toC(),
                                            clusterOptions.toC(), &s, nullptr));
    return new TpuSystem(s);
  }
  // DTensor's initialize_accelerator_system (DTENSOR_* variables; local without
  // DTENSOR_JOBS). deviceType "": the preferred ("TPU"). The device type chosen is
  // deviceType().
  static TpuSystem* initializeAcceleratorSystem(const std::string& deviceType, bool enableCoordinationService,
                                                int numLogicalCpuDevices, bool experimentalResetContext) {
    return accelerator(&tpu_initialize_accelerator_system, deviceType, enableCoordinationService,
                       numLogicalCpuDevices, experimentalResetContext);
  }
  // DTensor's alias of initializeAcceleratorSystem.
  static TpuSystem* initializeMultiClient(const std::string& deviceType, bool enableCoordinationService,
                                          int numLogicalCpuDevices, bool experimentalResetContext) {
    return accelerator(&tpu_initialize_multi_client, deviceType, enableCoordinationService,
                       numLogicalCpuDevices, experimentalResetContext);
  }
  TpuSystem(const TpuSystem&) = delete;
  TpuSystem& operator=(const TpuSystem&) = delete;
  ~TpuSystem() { close(); }
  // Shuts down and releases the handle (idempotent).
  void close() {
    if (s_) tpu_system_release(s_);
    s_ = nullptr;
  }
  void shutdown() { detail::check(tpu_system_shutdown(handle())); }
  bool isClosed() const {
    int closed = 0;
    detail::check(tpu_system_is_closed(handle(), &closed));
    return closed != 0;
  }
  int numCores() const {
    int n = 0;
    detail::check(tpu_system_num_cores(handle(), &n));
    return n;
  }
  Topology* topology() const {
    tpu_topology* t = nullptr;
    detail::check(tpu_system_topology(handle(), &t));
    return new Topology(t);
  }
  std::vector<uint8_t> serializedTopology() const {
    return detail::read_array<uint8_t>([&](uint8_t* o, size_t c, size_t* n) {
      return tpu_system_serialized_topology(handle(), o, c, n);
    });
  }
  std::string jobName() const {
    return detail::read_string([&](char* o, size_t c, size_t* n) { return tpu_system_job_name(handle(), o, c, n); });
  }
  std::string deviceType() const {
    return detail::read_string([&](char* o, size_t c, size_t* n) { return tpu_system_device_type(handle(), o, c, n); });
  }
  // The data plane between tasks ("none" for one task, "tcp", "shm", "mpi") and, for
  // people, why it was chosen.
  std::string transport() const {
    return detail::read_string([&](char* o, size_t c, size_t* n) { return tpu_system_transport(handle(), o, c, n); });
  }
  std::string transportReason() const {
    return detail::read_string(
        [&](char* o, size_t c, size_t* n) { return tpu_system_transport_reason(handle(), o, c, n); });
  }
  std::vector<uint8_t> embeddingConfig() const {
    return detail::read_array<uint8_t>([&](uint8_t* o, size_t c, size_t* n) {
      return tpu_system_embedding_config(handle(), o, c, n);
    });
  }
  // DTensor's shutdown_accelerator_system (one-task systems; FailedPrecondition in
  // multi-client mode, where every task calls shutdown()). close() still releases.
  void shutdownAcceleratorSystem() { detail::check(tpu_shutdown_accelerator_system(handle())); }
  // This task's id and the number of tasks (0 and 1 for a one-task system).
  int numTasks() const {
    int n = 0;
    detail::check(tpu_system_num_tasks(handle(), &n));
    return n;
  }
  int taskId() const {
    int n = 0;
    detail::check(tpu_system_task_id(handle(), &n));
    return n;
  }

  // The coordination service's key-value store. Set is AlreadyExists for a set key;
  // get waits up to timeoutMs (DeadlineExceeded); tryGet does not wait (NotFound, as
  // TensorFlow's TryGetKeyValue); delete removes key and every key under key/.
  void kvSet(const std::string& key, const std::vector<uint8_t>& value) {
    detail::check(tpu_kv_set(handle(), key.c_str(), value.data(), value.size()));
  }
  void kvSetString(const std::string& key, const std::string& value) {
    detail::check(tpu_kv_set(handle(), key.c_str(), value.data(), value.size()));
  }
  std::vector<uint8_t> kvGet(const std::string& key, int64_t timeoutMs) {
    return detail::read_bytes([&](uint8_t* o, size_t c, size_t* n) {
      return tpu_kv_get(handle(), key.c_str(), timeoutMs, o, c, n);
    });
  }
  std::string kvGetString(const std::string& key, int64_t timeoutMs) {
    std::vector<uint8_t> v = kvGet(key, timeoutMs);
    return std::string(v.begin(), v.end());
  }
  std::vector<uint8_t> kvTryGet(const std::string& key) {
    return detail::read_bytes([&](uint8_t* o, size_t c, size_t* n) { return tpu_kv_try_get(handle(), key.c_str(), o, c, n); });
  }
  std::string kvTryGetString(const std::string& key) {
    std::vector<uint8_t> v = kvTryGet(key);
    return std::string(v.begin(), v.end());
  }
  void kvDelete(const std::string& key) { detail::check(tpu_kv_delete(handle(), key.c_str())); }
  // Waits until the listed tasks (empty: all) reach barrier `id`.
  void waitAtBarrier(const std::string& id, int64_t timeoutMs, const std::vector<int32_t>& tasks) {
    detail::check(tpu_wait_at_barrier(handle(), id.c_str(), timeoutMs, tasks.empty() ? nullptr : tasks.data(),
                                      detail::int_or_throw(tasks.size(), "tasks")));
  }
  DeviceAssignment* defaultDeviceAssignment(int numReplicas) const {
    tpu_device_assignment* a = nullptr;
    detail::check(tpu_system_default_device_assignment(handle(), numReplicas, &a));
    return new DeviceAssignment(a);
  }

  // inputs[replica * numInputs + i]; returns outputs[replica * numOutputs + j].
  std::vector<Tensor> replicate(Computation& computation, int numReplicas, int numInputs,
                                const std::vector<Tensor>& inputs, int numOutputs,
                                const StepOptions& options) {
    return replicate_(&Computation::trampoline, &computation, false, numReplicas, numInputs, inputs,
                      numOutputs, options);
  }
  std::vector<Tensor> rewrite(Computation& computation, const std::vector<Tensor>& inputs, int numOutputs,
                              const StepOptions& options) {
    return rewrite_(&Computation::trampoline, &computation, false, inputs, numOutputs, options);
  }
  // Empty axis vectors mean TensorFlow's defaults (all 0, every output concatenated).
  std::vector<Tensor> shard(Computation& computation, const std::vector<Tensor>& inputs, int numShards,
                            const std::vector<int32_t>& inputShardAxes, const std::vector<int32_t>& outputsFromAllShards,
                            const std::vector<int32_t>& outputShardAxes, int numOutputs,
                            const StepOptions& options) {
    return shard_(&Computation::trampoline, &computation, false, inputs, numShards, inputShardAxes,
                  outputsFromAllShards, outputShardAxes, numOutputs, options);
  }
  std::vector<Tensor> batchParallel(Computation& computation, const std::vector<Tensor>& inputs, int numShards,
                                    int numOutputs, const StepOptions& options) {
    return batchParallel_(&Computation::trampoline, &computation, false, inputs, numShards, numOutputs, options);
  }

  // ---- (1.4) The same steps on the caller's threads --------------------------------
  // Each participant goes to the thread that joined its core (stepJoin); `key` comes
  // back as its JoinedStep::userData(), for the binding to find the computation.
  std::vector<Tensor> replicateOnJoinedThreads(int64_t key, int numReplicas, int numInputs,
                                               const std::vector<Tensor>& inputs, int numOutputs,
                                               const StepOptions& options) {
    return replicate_(nullptr, as_user_data(key), true, numReplicas, numInputs, inputs, numOutputs, options);
  }
  std::vector<Tensor> rewriteOnJoinedThreads(int64_t key, const std::vector<Tensor>& inputs, int numOutputs,
                                             const StepOptions& options) {
    return rewrite_(nullptr, as_user_data(key), true, inputs, numOutputs, options);
  }
  std::vector<Tensor> shardOnJoinedThreads(int64_t key, const std::vector<Tensor>& inputs, int numShards,
                                           const std::vector<int32_t>& inputShardAxes,
                                           const std::vector<int32_t>& outputsFromAllShards,
                                           const std::vector<int32_t>& outputShardAxes, int numOutputs,
                                           const StepOptions& options) {
    return shard_(nullptr, as_user_data(key), true, inputs, numShards, inputShardAxes, outputsFromAllShards,
                  outputShardAxes, numOutputs, options);
  }
  std::vector<Tensor> batchParallelOnJoinedThreads(int64_t key, const std::vector<Tensor>& inputs, int numShards,
                                                   int numOutputs, const StepOptions& options) {
    return batchParallel_(nullptr, as_user_data(key), true, inputs, numShards, numOutputs, options);
  }
  // Waits up to timeoutMs (< 0: no limit) for a caller-threads step to give `core` a
  // participant (tpu_step_join). Throws DeadlineExceeded when none came, Cancelled
  // when the system shuts down meanwhile, AlreadyExists when another thread has joined
  // the core (the one error a pool may retry on), InvalidArgument for a core out of
  // range or a thread that has joined and not left (a programming error: no retry).
  JoinedStep* stepJoin(int core, int64_t timeoutMs) {
    tpu_joined_step j = TPU_JOINED_STEP_INIT;
    detail::check(tpu_step_join(handle(), core, timeoutMs, &j));
    return new JoinedStep(j);
  }
  // Ends the wait of the thread in stepJoin on `core` (or the core's next one) with
  // Status::Cancelled: how a pool of raw stepJoin threads stops without a timeout.
  void stepJoinCancel(int core) { detail::check(tpu_step_join_cancel(handle(), core)); }

 private:
  static void* as_user_data(int64_t key) { return reinterpret_cast<void*>(static_cast<intptr_t>(key)); }
  static const tpu_step_options* step_options(const StepOptions& options, bool callerThreads,
                                              std::vector<tpu_shape>* shapes, tpu_step_options* copy) {
    *copy = *options.toC(shapes);
    if (callerThreads) copy->caller_threads = 1;
    return copy;
  }
  std::vector<Tensor> replicate_(tpu_computation_fn fn, void* userData, bool callerThreads, int numReplicas,
                                 int numInputs, const std::vector<Tensor>& inputs, int numOutputs,
                                 const StepOptions& options) {
    if (numReplicas < 0 || numOutputs < 0 ||
        static_cast<int64_t>(numReplicas) * numInputs != static_cast<int64_t>(inputs.size()))
      throw Error(TPU_INVALID_ARGUMENT, std::to_string(inputs.size()) + " inputs are not " +
                                            std::to_string(numReplicas) + " replicas x " +
                                            std::to_string(numInputs));
    std::vector<tpu_tensor*> in = Tensor::handles(inputs);
    std::vector<tpu_tensor*> out(static_cast<size_t>(numReplicas) * static_cast<size_t>(numOutputs), nullptr);
    std::vector<tpu_shape> shapes;
    tpu_step_options o;
    detail::check(tpu_replicate(handle(), fn, userData, numReplicas, numInputs, in.data(), numOutputs,
                                out.data(), step_options(options, callerThreads, &shapes, &o)));
    return Tensor::adopt(out);
  }
  std::vector<Tensor> rewrite_(tpu_computation_fn fn, void* userData, bool callerThreads,
                               const std::vector<Tensor>& inputs, int numOutputs, const StepOptions& options) {
    std::vector<tpu_tensor*> in = Tensor::handles(inputs);
    std::vector<tpu_tensor*> out(static_cast<size_t>(numOutputs < 0 ? 0 : numOutputs), nullptr);
    std::vector<tpu_shape> shapes;
    tpu_step_options o;
    detail::check(tpu_rewrite(handle(), fn, userData, detail::int_or_throw(in.size(), "inputs"), in.data(),
                              numOutputs, out.data(), step_options(options, callerThreads, &shapes, &o)));
    return Tensor::adopt(out);
  }
  std::vector<Tensor> shard_(tpu_computation_fn fn, void* userData, bool callerThreads,
                             const std::vector<Tensor>& inputs, int numShards,
                             const std::vector<int32_t>& inputShardAxes, const std::vector<int32_t>& outputsFromAllShards,
                             const std::vector<int32_t>& outputShardAxes, int numOutputs,
                             const StepOptions& options) {
    std::vector<tpu_tensor*> in = Tensor::handles(inputs);
    check_len(inputShardAxes, in.size(), "inputShardAxes");
    check_len(outputsFromAllShards, static_cast<size_t>(numOutputs < 0 ? 0 : numOutputs), "outputsFromAllShards");
    check_len(outputShardAxes, static_cast<size_t>(numOutputs < 0 ? 0 : numOutputs), "outputShardAxes");
    std::vector<tpu_tensor*> out(static_cast<size_t>(numOutputs < 0 ? 0 : numOutputs), nullptr);
    std::vector<tpu_shape> shapes;
    tpu_step_options o;
    detail::check(tpu_shard(handle(), fn, userData, detail::int_or_throw(in.size(), "inputs"), in.data(),
                            numShards, or_null(inputShardAxes), or_null(outputsFromAllShards),
                            or_null(outputShardAxes), numOutputs, out.data(),
                            step_options(options, callerThreads, &shapes, &o)));
    return Tensor::adopt(out);
  }
  std::vector<Tensor> batchParallel_(tpu_computation_fn fn, void* userData, bool callerThreads,
                                     const std::vector<Tensor>& inputs, int numShards, int numOutputs,
                                     const StepOptions& options) {
    std::vector<tpu_tensor*> in = Tensor::handles(inputs);
    std::vector<tpu_tensor*> out(static_cast<size_t>(numOutputs < 0 ? 0 : numOutputs), nullptr);
    std::vector<tpu_shape> shapes;
    tpu_step_options o;
    detail::check(tpu_batch_parallel(handle(), fn, userData, detail::int_or_throw(in.size(), "inputs"),
                                     in.data(), numShards, numOutputs, out.data(),
                                     step_options(options, callerThreads, &shapes, &o)));
    return Tensor::adopt(out);
  }

 public:
  // ---- Embeddings (embedding.h, 1.4): the tables of the embedding configuration ----
  EmbeddingMode embeddingMode() const {
    tpu_embedding_mode m = TPU_EMBEDDING_MODE_UNSPECIFIED;
    detail::check(tpu_embedding_mode_of(handle(), &m));
    return static_cast<EmbeddingMode>(m);
  }
  int embeddingNumTables() const { return get_count(tpu_embedding_num_tables); }
  int embeddingTableIndex(const std::string& name) const {
    int i = 0;
    detail::check(tpu_embedding_table_index(handle(), name.c_str(), &i));
    return i;
  }
  std::string embeddingTableName(int table) const {
    return detail::read_string([&](char* o, size_t c, size_t* n) { return tpu_embedding_table_name(handle(), table, o, c, n); });
  }
  int64_t embeddingVocabularySize(int table) const {
    int64_t v = 0;
    int32_t d = 0;
    detail::check(tpu_embedding_table_shape(handle(), table, &v, &d));
    return v;
  }
  int embeddingDimension(int table) const {
    int64_t v = 0;
    int32_t d = 0;
    detail::check(tpu_embedding_table_shape(handle(), table, &v, &d));
    return d;
  }
  EmbeddingOptimizer embeddingTableOptimizer(int table) const {
    tpu_embedding_optimizer o = TPU_EMBEDDING_OPTIMIZER_SGD;
    detail::check(tpu_embedding_table_optimizer(handle(), table, &o));
    return static_cast<EmbeddingOptimizer>(o);
  }
  int embeddingNumVariables(int table) const {
    int n = 0;
    detail::check(tpu_embedding_table_num_variables(handle(), table, &n));
    return n;
  }
  std::string embeddingVariableName(int table, int variable) const {
    return detail::read_string(
        [&](char* o, size_t c, size_t* n) { return tpu_embedding_variable_name(handle(), table, variable, o, c, n); });
  }
  // The global core holding a row's shard, and the row's index there.
  int embeddingRowCore(int table, int64_t row) const {
    int core = 0;
    int64_t shardRow = 0;
    detail::check(tpu_embedding_row_owner(handle(), table, row, &core, &shardRow));
    return core;
  }
  int64_t embeddingShardRow(int table, int64_t row) const {
    int core = 0;
    int64_t shardRow = 0;
    detail::check(tpu_embedding_row_owner(handle(), table, row, &core, &shardRow));
    return shardRow;
  }
  int embeddingNumFeatures() const { return get_count(tpu_embedding_num_features); }
  int embeddingFeatureIndex(const std::string& name) const {
    int i = 0;
    detail::check(tpu_embedding_feature_index(handle(), name.c_str(), &i));
    return i;
  }
  std::string embeddingFeatureName(int feature) const {
    return detail::read_string(
        [&](char* o, size_t c, size_t* n) { return tpu_embedding_feature_name(handle(), feature, o, c, n); });
  }
  int embeddingFeatureTable(int feature) const {
    int t = 0;
    detail::check(tpu_embedding_feature_table(handle(), feature, &t));
    return t;
  }
  std::vector<long long> embeddingFeatureShape(int feature) const {
    std::vector<int64_t> v = detail::read_array<int64_t>(
        [&](int64_t* o, size_t c, size_t* n) { return tpu_embedding_feature_shape(handle(), feature, o, c, n); });
    return std::vector<long long>(v.begin(), v.end());
  }
  // values: numRows * dimension floats, row-major.
  void embeddingLoad(int table, int variable, int64_t firstRow, int64_t numRows, const std::vector<float>& values) {
    detail::check(tpu_embedding_load(handle(), table, variable, firstRow, numRows,
                                     values.empty() ? nullptr : values.data(), values.size()));
  }
  // numRows * dimension floats; in a multi-task system the rows other tasks hold are NaN.
  std::vector<float> embeddingRetrieve(int table, int variable, int64_t firstRow, int64_t numRows) const {
    size_t count = 0;
    detail::check(tpu_embedding_retrieve(handle(), table, variable, firstRow, numRows, nullptr, 0, &count));
    std::vector<float> v(count, std::numeric_limits<float>::quiet_NaN());
    if (count > 0) detail::check(tpu_embedding_retrieve(handle(), table, variable, firstRow, numRows, v.data(), v.size(), &count));
    return v;
  }
  // Array forms of the two above (the languages' float arrays in place, no vector copy);
  // retrieve leaves the rows other tasks hold in `out` as they were.
  void embeddingLoadFloats(int table, int variable, int64_t firstRow, int64_t numRows, const float* data, size_t count) {
    detail::check(tpu_embedding_load(handle(), table, variable, firstRow, numRows, data, count));
  }
  void embeddingRetrieveInto(int table, int variable, int64_t firstRow, int64_t numRows, float* out, size_t count) const {
    size_t n = 0;
    detail::check(tpu_embedding_retrieve(handle(), table, variable, firstRow, numRows, nullptr, 0, &n));
    if (n != count)
      throw Error(TPU_INVALID_ARGUMENT, "out holds " + std::to_string(count) + " floats, " + std::to_string(numRows) +
                                            " rows of table " + std::to_string(table) + " are " + std::to_string(n) + " floats");
    if (n > 0) detail::check(tpu_embedding_retrieve(handle(), table, variable, firstRow, numRows, out, count, &n));
  }
  tpu_system* handle() const {
    detail::check_handle(s_, "the TPU system");
    return s_;
  }

 private:
  explicit TpuSystem(tpu_system* adopted) : s_(adopted) {}
  template <typename Fn>
  static TpuSystem* accelerator(Fn fn, const std::string& deviceType, bool enableCoordinationService,
                                int numLogicalCpuDevices, bool experimentalResetContext) {
    tpu_system* s = nullptr;
    char chosen[8];
    size_t count = 0;
    detail::check(fn(detail::c_str_or_null(deviceType), enableCoordinationService ? 1 : 0, numLogicalCpuDevices,
                     experimentalResetContext ? 1 : 0, &s, chosen, sizeof chosen, &count));
    return new TpuSystem(s);
  }
  static void check_len(const std::vector<int32_t>& v, size_t n, const char* what) {
    if (!v.empty() && v.size() != n)
      throw Error(TPU_INVALID_ARGUMENT, std::string(what) + " has " + std::to_string(v.size()) +
                                            " entries, not " + std::to_string(n));
  }
  int get_count(tpu_status (*fn)(const tpu_system*, int*)) const {
    int n = 0;
    detail::check(fn(handle(), &n));
    return n;
  }
  static const int* or_null(const std::vector<int32_t>& v) { return v.empty() ? nullptr : v.data(); }
  tpu_system* s_ = nullptr;
};

#ifndef SWIG
namespace detail {
template <typename Create, typename Q>
Q* make_queue(Create create, const TpuSystem& system, int numReplicas, const std::vector<int32_t>& dtypes,
              const std::vector<Shape>& shapes, int capacity) {
  if (dtypes.size() != shapes.size())
    throw Error(TPU_INVALID_ARGUMENT, std::to_string(dtypes.size()) + " dtypes but " +
                                          std::to_string(shapes.size()) + " shapes");
  std::vector<tpu_dtype> d;
  std::vector<tpu_shape> s;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    d.push_back(static_cast<tpu_dtype>(dtypes[i]));
    s.push_back(shapes[i].toC());
  }
  Q* q = nullptr;
  check(create(system.handle(), numReplicas, int_or_throw(d.size(), "dtypes"), d.data(), s.data(), capacity, &q));
  return q;
}
}  // namespace detail
#endif

inline InfeedQueue::InfeedQueue(const TpuSystem& system, int numReplicas, const std::vector<int32_t>& dtypes,
                                const std::vector<Shape>& shapes, int capacity)
    : q_(detail::make_queue<decltype(&tpu_infeed_queue_create), tpu_infeed_queue>(
          &tpu_infeed_queue_create, system, numReplicas, dtypes, shapes, capacity)),
      num_elements_(static_cast<int>(dtypes.size())) {}

inline OutfeedQueue::OutfeedQueue(const TpuSystem& system, int numReplicas, const std::vector<int32_t>& dtypes,
                                  const std::vector<Shape>& shapes, int capacity)
    : q_(detail::make_queue<decltype(&tpu_outfeed_queue_create), tpu_outfeed_queue>(
          &tpu_outfeed_queue_create, system, numReplicas, dtypes, shapes, capacity)),
      num_elements_(static_cast<int>(dtypes.size())) {}

}  // namespace tpurt

#endif  // TPURT_BINDING_SUPPORT_SYSTEM_HPP
