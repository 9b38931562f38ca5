#include "runtime/replicate.h"

#include <algorithm>
#include <vector>

#include "collectives/communicator.h"
#include "core/box_copy.h"
#include "core/checked.h"
#include "core/dtype.h"
#include "core/tensor_ops.h"
#include "core/tensor_ref.h"
#include "runtime/feed.h"
#include "runtime/partition.h"
#include "runtime/replica_context.h"
#include "runtime/shard_gather.h"
#include "topology/device_assignment.h"
#include "topology/group_modes.h"

namespace tpurt {
namespace {

void check_counts(tpu_computation_fn computation, int num_inputs, tpu_tensor* const* inputs,
                  int num_outputs, tpu_tensor** outputs, const StepOptions& options) {
  // Threads that joined run a caller-threads step: they need no function.
  if (computation == nullptr && !options.caller_threads)
    invalid_argument("argument 'computation' is NULL (it may be NULL only with options->caller_threads)");
  if (num_inputs < 0) invalid_argument("num_inputs is ", num_inputs, "; it must be >= 0");
  if (num_outputs < 0) invalid_argument("num_outputs is ", num_outputs, "; it must be >= 0");
  if (num_inputs > 0) require_not_null(inputs, "inputs");
  if (num_outputs > 0) require_not_null(outputs, "outputs");
}

// maximum_shapes (spec §4.2): the inputs each replica gets, padded, followed by one
// int32 scalar per padded (input, dimension) with the replica's real size.
struct PaddedInputs {
  std::vector<tpu_tensor*> inputs;  // [replica][input + extras]
  TensorRefs owned;
  int num_inputs = 0;
};

// The smallest power of two >= n. TensorFlow computes 2**ceil(log2(n)) in float32,
// which agrees up to 2^21 and beyond that can fall below n (an error there).
int64_t ceil_power_of_two(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

void pad_inputs(int num_replicas, int num_inputs, tpu_tensor* const* inputs,
                const tpu_shape* maximum_shapes, int padding_spec, PaddedInputs* out) {
  auto input = [&](int r, int i) { return inputs[static_cast<int64_t>(r) * num_inputs + i]; };
  struct PaddedDim {
    int input, dim;
  };
  std::vector<PaddedDim> padded;
  std::vector<int64_t> targets(static_cast<size_t>(num_inputs) * TPU_MAX_RANK);
  for (int i = 0; i < num_inputs; ++i) {
    const tpu_shape& max = maximum_shapes[i];
    if (max.rank == -1) continue;  // never padded
    if (max.rank < 0 || max.rank > TPU_MAX_RANK)
      invalid_argument("maximum_shapes[", i, "].rank is ", max.rank, "; it must be in [0, ",
                       TPU_MAX_RANK, "], or -1 to leave input ", i, " unpadded");
    for (int r = 0; r < num_replicas; ++r)
      if (input(r, i)->rank != max.rank)
        invalid_argument("maximum_shapes[", i, "] has rank ", max.rank, " but replica ", r,
                         " input ", i, " is ", describe(input(r, i)));
    int64_t* target = &targets[static_cast<size_t>(i) * TPU_MAX_RANK];
    for (int d = 0; d < max.rank; ++d) {
      if (max.dims[d] < -1)
        invalid_argument("maximum_shapes[", i, "].dims[", d, "] is ", max.dims[d],
                         "; it must be >= 0, or -1 for the largest size");
      int largest = 0;
      bool differs = false;
      for (int r = 0; r < num_replicas; ++r) {
        differs |= input(r, i)->dims[d] != input(0, i)->dims[d];
        if (input(r, i)->dims[d] > input(largest, i)->dims[d]) largest = r;
      }
      target[d] = input(0, i)->dims[d];
      if (!differs) continue;
      const int64_t largest_size = input(largest, i)->dims[d];
      // At least 2: XLA cannot represent a dynamic size of 1.
      if (max.dims[d] == -1) {
        target[d] = std::max<int64_t>(largest_size, 2);
        if (padding_spec == TPU_PADDING_POWER_OF_TWO) target[d] = ceil_power_of_two(target[d]);
      } else {
        target[d] = std::max<int64_t>(max.dims[d], 2);
      }
      if (target[d] < largest_size)
        invalid_argument("replica ", largest, " input ", i, " (", describe(input(largest, i)),
                         ") has size ", largest_size, " in dimension ", d,
                         ", more than maximum_shapes[", i, "].dims[", d, "] = ", max.dims[d]);
      if (largest_size > INT32_MAX)  // the real size travels as an int32 scalar
        invalid_argument("replica ", largest, " input ", i, " (", describe(input(largest, i)),
                         ") has size ", largest_size, " in dimension ", d,
                         ", more than the int32 real-size input of a padded dimension can hold");
      padded.push_back({i, d});
    }
  }
  if (padded.empty()) return;

  const int width = checked_add(num_inputs, static_cast<int>(padded.size()),
                                "the input count with the real-size inputs of padded dimensions");
  out->num_inputs = width;
  out->inputs.resize(static_cast<size_t>(num_replicas) * width);
  out->owned.reserve(out->inputs.size());
  for (int r = 0; r < num_replicas; ++r) {
    tpu_tensor** row = &out->inputs[static_cast<size_t>(r) * width];
    for (int i = 0; i < num_inputs; ++i) {
      Tensor* t = input(r, i);
      const int64_t* target = &targets[static_cast<size_t>(i) * TPU_MAX_RANK];
      const bool pad = maximum_shapes[i].rank != -1 && !std::equal(target, target + t->rank, t->dims);
      row[i] = t;
      if (pad) {
        row[i] = pad_tensor(t, target);
        out->owned.push_back(row[i]);
      }
    }
    for (size_t k = 0; k < padded.size(); ++k) {
      const int32_t size = static_cast<int32_t>(input(r, padded[k].input)->dims[padded[k].dim]);
      Tensor* s = new_tensor_uninitialized(TPU_INT32, nullptr, 0);
      *static_cast<int32_t*>(s->data) = size;
      out->owned.push_back(s);
      row[num_inputs + k] = s;
    }
  }
}

// The task of replica r's logical core c (da NULL: replica r on global core r, as
// System::run_step places it).
int task_of(const System& system, const DeviceAssignment* da, int r, int c) {
  return da ? da->task(r, c) : r / system.num_cores();
}

// Whether some core of replica r runs on this task.
bool runs_here(const System& system, const DeviceAssignment* da, int r) {
  const int cores = da ? da->num_cores_per_replica() : 1;
  for (int c = 0; c < cores; ++c)
    if (task_of(system, da, r, c) == system.task_id()) return true;
  return false;
}

// Inputs must agree between replicas: dtype always, shape unless maximum_shapes pads
// the input (TensorFlow merges the replicas' shapes in TPUReplicatedInput). Another
// task's replicas may pass NULL (docs/ABI.md), unless maximum_shapes needs every
// replica's shape.
void check_replica_inputs(const System& system, int num_replicas, int num_inputs,
                          tpu_tensor* const* inputs, const StepOptions& options) {
  const tpu_shape* maximum_shapes = options.maximum_shapes;
  for (int i = 0; i < num_inputs; ++i) {
    int first_replica = -1;
    for (int r = 0; r < num_replicas; ++r) {
      const Tensor* t = inputs[static_cast<int64_t>(r) * num_inputs + i];
      if (t == nullptr) {
        if (maximum_shapes == nullptr && !runs_here(system, options.device_assignment, r))
          continue;
        invalid_argument("replica ", r, " input ", i, " is NULL");
      }
      require_live(t, "inputs[", static_cast<int64_t>(r) * num_inputs + i, "]");
      if (first_replica < 0) first_replica = r;
      const Tensor* first = inputs[static_cast<int64_t>(first_replica) * num_inputs + i];
      if (t->dtype != first->dtype)
        invalid_argument("Replicas must have matching input types: replica ", r, " input ", i,
                         " is ", dtype_name(t->dtype), " but replica ", first_replica, "'s is ",
                         dtype_name(first->dtype));
      const bool padded = maximum_shapes != nullptr && maximum_shapes[i].rank != -1;
      if (!padded && !has_shape(t, first->dims, first->rank))
        invalid_argument("input ", i, " has shape ", describe(first), " in replica ",
                         first_replica, " but ", describe(t), " in replica ", r,
                         "; replicas' shapes must match unless maximum_shapes pads input ", i);
    }
  }
}

// The cores of each replica: the device assignment's, 1 without one.
int cores_per_replica(const StepOptions& o) {
  return o.device_assignment ? o.device_assignment->num_cores_per_replica() : 1;
}

// input_partitions and output_partitions: one valid spec per input and output.
void check_partitions(int num_inputs, int num_outputs, const StepOptions& o) {
  const int cores = cores_per_replica(o);
  struct Field {
    const char* kind;
    const tpu_partition_spec* specs;
    size_t count;
    int expected;
  };
  const Field fields[] = {
      {"input", o.input_partitions, o.num_input_partitions, num_inputs},
      {"output", o.output_partitions, o.num_output_partitions, num_outputs}};
  for (const Field& f : fields) {
    if (f.specs == nullptr && f.count != 0)
      invalid_argument("options->", f.kind, "_partitions is NULL but num_", f.kind,
                       "_partitions is ", f.count);
    if (f.specs == nullptr) continue;
    if (f.count != static_cast<size_t>(f.expected))
      invalid_argument("options->num_", f.kind, "_partitions is ", f.count, "; ", f.kind,
                       "_partitions needs one entry per ", f.kind, " (", f.expected, ")");
    for (int i = 0; i < f.expected; ++i) check_partition_spec(f.specs[i], cores, f.kind, i);
  }
}

// The step options' own rules, before anything runs.
void check_options(const System& system, int num_replicas, int num_inputs, int num_outputs,
                   const StepOptions& o) {
  check_partitions(num_inputs, num_outputs, o);
  if (o.padding_spec != TPU_PADDING_AUTO && o.padding_spec != TPU_PADDING_POWER_OF_TWO)
    invalid_argument("options->padding_spec is ", o.padding_spec,
                     "; it must be TPU_PADDING_AUTO (0) or TPU_PADDING_POWER_OF_TWO (1)");
  if (o.collective_timeout_ms < 0)
    invalid_argument("options->collective_timeout_ms is ", o.collective_timeout_ms,
                     "; it must be positive, or 0 for the system's");
  if (o.maximum_shapes == nullptr && o.num_maximum_shapes != 0)
    invalid_argument("options->maximum_shapes is NULL but num_maximum_shapes is ",
                     o.num_maximum_shapes);
  if (o.maximum_shapes != nullptr && o.num_maximum_shapes != static_cast<size_t>(num_inputs))
    invalid_argument("options->num_maximum_shapes is ", o.num_maximum_shapes,
                     "; maximum_shapes needs one entry per input (", num_inputs, ")");
  if (o.infeed_queue == nullptr) return;
  if (o.maximum_shapes != nullptr)
    invalid_argument("Dynamic input shapes are not supported with infeed queues: give "
                     "options->maximum_shapes or options->infeed_queue, not both");
  if (&o.infeed_queue->system() != &system)
    invalid_argument("options->infeed_queue belongs to another TPU system");
  if (o.infeed_queue->num_replicas() != num_replicas)
    invalid_argument("options->infeed_queue was created for ", o.infeed_queue->num_replicas(),
                     " replicas but the step has ", num_replicas);
}

tpu_status fail_participant(tpu_replica_context* ctx, const Error& e) {
  ctx->fail_code = e.code();
  ctx->fail_message = e.message();
  return e.code();
}

// TensorFlow's infeed_queue argument: each replica dequeues its tuple and gets it
// after its own inputs. With k cores per replica (tpu_feed.py's InfeedQueue with
// number_of_shards k, or _PartitionedInfeedQueue): the replica's logical core 0
// dequeues the tuple, broadcasts it to the replica's cores (which may run on other
// tasks), and logical core c gets piece c of element e cut k equal ways along
// shard_dims[e] (tpu_sharding.py's get_sharded_shape), or the whole element when
// shard_dims[e] is -1 (partition_or_replicate_on_host with dims None). Every
// participant runs the same broadcasts, in element order.
class InfeedStage : public StepStage {
 public:
  InfeedStage(FeedQueue* queue, int cores, std::vector<int> shard_dims)
      : queue_(queue), cores_(cores), shard_dims_(std::move(shard_dims)) {
    queue_->ref();
  }
  ~InfeedStage() override { FeedQueue::unref(queue_); }
  tpu_status before(tpu_replica_context* ctx, std::vector<tpu_tensor*>* inputs) const override {
    const size_t given = inputs->size();
    const int n = queue_->num_elements();
    inputs->resize(given + n, nullptr);
    try {
      // Given up on before it began: the tuple it would take is the next step's.
      if (ctx->late.load(std::memory_order_acquire)) fail(TPU_ABORTED, ctx->late_reason);
      if (cores_ == 1) {
        queue_->pop(ctx->replica_id, inputs->data() + given, n, ctx->comm);
        return TPU_OK;
      }
      TensorRefs whole(static_cast<size_t>(n));
      if (ctx->logical_core == 0) queue_->pop(ctx->replica_id, whole.data(), n, ctx->comm);
      ParticipantGroups cores_of_replica;
      tpu_group_assignment view{};
      const tpu_group_assignment* groups = nullptr;  // NULL: every participant (one replica)
      if (participant_groups(TPU_GROUP_MODE_CROSS_PARTITION, nullptr, ctx->num_replicas, cores_,
                             &cores_of_replica)) {
        view = cores_of_replica.view();
        groups = &view;
      }
      // The other cores wait for the tuple in the broadcast. Their wait is twice the
      // step's deadline, so that an empty FIFO is reported as what it is (core 0's
      // dequeue times out first and fails the step, which wakes them), not as a
      // broadcast that timed out waiting for core 0 at the same moment.
      const int64_t step_ms = ctx->comm->step_timeout_ms();
      const bool longer = ctx->logical_core != 0 && step_ms > 0 && step_ms < INT64_MAX / 2;
      if (longer) ctx->comm->set_call_timeout(ctx->participant, 2 * step_ms);
      struct Restore {
        tpu_replica_context* ctx;
        bool on;
        ~Restore() {
          if (on) ctx->comm->set_call_timeout(ctx->participant, 0);
        }
      } restore{ctx, longer};
      for (int e = 0; e < n; ++e) {
        const tpu_shape& shape = queue_->shape(e);
        // The other cores pass a tensor of the element's dtype and shape: the
        // broadcast's descriptor; its bytes are not read.
        TensorRef mine(ctx->logical_core == 0
                           ? whole.take(e)
                           : new_tensor_uninitialized(queue_->dtype(e), shape.dims, shape.rank));
        TensorRef element(ctx->comm->broadcast(ctx->participant, mine.get(), 0, groups));
        const int d = shard_dims_[e];
        if (d < 0) {
          (*inputs)[given + e] = element.take();
          continue;
        }
        tpu_partition_spec piece{};
        piece.num_dims = shape.rank;
        for (int a = 0; a < shape.rank; ++a) piece.partition_dims[a] = a == d ? cores_ : 1;
        (*inputs)[given + e] = partition_tile(element.get(), piece, ctx->logical_core);
      }
    } catch (const Error& e) {
      return fail_participant(ctx, e);
    }
    return TPU_OK;
  }
  tpu_status after(tpu_replica_context*, tpu_status status, std::vector<tpu_tensor*>* inputs,
                   size_t num_given, tpu_tensor**, int) const override {
    for (size_t i = num_given; i < inputs->size(); ++i) release(std::exchange((*inputs)[i], nullptr));
    inputs->resize(num_given);
    return status;
  }

 private:
  FeedQueue* const queue_;  // referenced: the caller may release it while a late participant runs
  const int cores_;         // per replica
  const std::vector<int> shard_dims_;  // the queue's, when the step began
};

// A partitioned output of a replica whose cores run on several tasks is assembled
// inside the step: after the computation, the replica's cores all-gather their tiles
// (first each tile's dtype, rank and dims, then the tiles padded to the largest, so
// uneven tiles travel as one collective), and logical core 0 assembles them. Every
// participant of the step runs these collectives, in the same order.

constexpr int kTileMetaWidth = 2 + TPU_MAX_RANK;  // dtype, rank, dims

Tensor* gather_tiles_to_core0(tpu_replica_context* ctx, const tpu_partition_spec& spec,
                              const Tensor* tile, int output) {
  const int k = ctx->num_cores_per_replica;
  if (tile == nullptr)
    invalid_argument("replica ", ctx->replica_id, " logical core ", ctx->logical_core,
                     " left output ", output, " NULL; a partitioned output (output_partitions[",
                     output, "]) needs a tile from every core");
  ParticipantGroups cores_of_replica;
  tpu_group_assignment view{};
  const tpu_group_assignment* groups = nullptr;  // NULL: every participant (one replica)
  if (participant_groups(TPU_GROUP_MODE_CROSS_PARTITION, nullptr, ctx->num_replicas, k,
                         &cores_of_replica)) {
    view = cores_of_replica.view();
    groups = &view;
  }
  Communicator& comm = *ctx->comm;
  const int64_t meta_dims[1] = {kTileMetaWidth};
  TensorRef meta(new_tensor(TPU_INT64, meta_dims, 1));
  int64_t* m = static_cast<int64_t*>(meta->data);
  m[0] = tile->dtype;
  m[1] = tile->rank;
  std::copy(tile->dims, tile->dims + tile->rank, m + 2);
  TensorRef metas(comm.all_gather(ctx->participant, meta.get(), 0, groups));
  const int64_t* all = static_cast<const int64_t*>(metas->data);
  int64_t largest[TPU_MAX_RANK] = {0};
  for (int c = 0; c < k; ++c) {
    const int64_t* mc = all + c * kTileMetaWidth;
    if (mc[0] != all[0] || mc[1] != all[1] || mc[1] < 1)
      invalid_argument("replica ", ctx->replica_id, " output ", output,
                       ": the tiles of logical cores 0 and ", c, " differ in dtype or rank (",
                       dtype_name(static_cast<tpu_dtype>(all[0])), " rank ", all[1], " against ",
                       dtype_name(static_cast<tpu_dtype>(mc[0])), " rank ", mc[1],
                       "); a partitioned output needs one dtype and rank >= 1 on every core");
    for (int d = 0; d < tile->rank; ++d) largest[d] = std::max(largest[d], mc[2 + d]);
  }
  TensorRef padded(pad_tensor(tile, largest));
  TensorRef gathered(comm.all_gather(ctx->participant, padded.get(), 0, groups));
  if (ctx->logical_core != 0) return nullptr;
  TensorRefs tiles(static_cast<size_t>(k));
  const size_t esize = dtype_size(tile->dtype);
  for (int c = 0; c < k; ++c) {
    const int64_t* dims = all + c * kTileMetaWidth + 2;
    tiles[c] = new_tensor_uninitialized(tile->dtype, dims, tile->rank);
    int64_t from[TPU_MAX_RANK] = {0}, to[TPU_MAX_RANK] = {0};
    from[0] = c * largest[0];
    copy_box(esize, tile->rank, dims, gathered->data, gathered->dims, from, tiles[c]->data, dims, to);
  }
  return assemble_tiles(tiles.data(), 1, k, spec, ctx->replica_id, output);
}

class TileGatherStage : public StepStage {
 public:
  TileGatherStage(const tpu_partition_spec* specs, int num_outputs) : specs_(specs, specs + num_outputs) {}
  tpu_status before(tpu_replica_context*, std::vector<tpu_tensor*>*) const override { return TPU_OK; }
  tpu_status after(tpu_replica_context* ctx, tpu_status status, std::vector<tpu_tensor*>*, size_t,
                   tpu_tensor** outputs, int num_outputs) const override {
    if (status != TPU_OK || ctx->late.load(std::memory_order_acquire)) return status;
    try {
      for (int o = 0; o < num_outputs; ++o) {
        if (!is_partitioned(specs_[o])) continue;
        Tensor* whole = gather_tiles_to_core0(ctx, specs_[o], outputs[o], o);
        release(std::exchange(outputs[o], whole));
      }
    } catch (const Error& e) {
      return fail_participant(ctx, e);
    }
    return TPU_OK;
  }

 private:
  const std::vector<tpu_partition_spec> specs_;  // a late participant outlives the caller's
};

// A step's participants (replica r, logical core c), flattened r * cores + c: which
// run on this task, and the inputs and outputs of each.
struct Participants {
  int num_replicas, cores;
  std::vector<char> local;  // [participant]
  std::vector<char> any_local;  // [replica]: some core of it runs here

  Participants(const System& system, const DeviceAssignment* da, int num_replicas)
      : num_replicas(num_replicas), cores(da ? da->num_cores_per_replica() : 1),
        local(static_cast<size_t>(num_replicas) * cores), any_local(num_replicas) {
    for (int r = 0; r < num_replicas; ++r)
      for (int c = 0; c < cores; ++c) {
        const bool here = task_of(system, da, r, c) == system.task_id();
        local[static_cast<size_t>(r) * cores + c] = here;
        any_local[r] |= here;
      }
  }

  // [replica][input] -> [participant][input]: input i split as its spec says, or
  // whole for every core, each core a handle of its own on one buffer (the caller's,
  // or one copy of it when the caller has written through its handle); inputs from
  // num_specs on (the padded sizes' extras) are whole. Participants of other tasks
  // get NULL.
  void spread_inputs(int width, tpu_tensor* const* inputs, const tpu_partition_spec* specs,
                     size_t num_specs, TensorRefs* out) const {
    for (int r = 0; r < num_replicas; ++r)
      for (int i = 0; i < width; ++i) {
        const Tensor* t = inputs[static_cast<size_t>(r) * width + i];
        const bool split = static_cast<size_t>(i) < num_specs && is_partitioned(specs[i]);
        const Tensor* whole = t;  // what the next core's handle shares
        for (int c = 0; c < cores; ++c) {
          const size_t p = static_cast<size_t>(r) * cores + c;
          if (!local[p]) continue;
          if (t == nullptr)  // another task's replica with a core on this task
            invalid_argument("replica ", r, " input ", i, " is NULL, but logical core ", c,
                             " of replica ", r, " runs on this task");
          Tensor*& slot = (*out)[p * width + i];
          slot = split ? partition_tile(t, specs[i], c) : share_whole(whole);
          if (!split) whole = slot;
        }
      }
  }

  // Whether some replica's cores run on several tasks (the same answer on every
  // task: the device assignment is global).
  bool replica_spans_tasks(const DeviceAssignment* da) const {
    for (int r = 0; da && r < num_replicas; ++r)
      for (int c = 1; c < cores; ++c)
        if (da->task(r, c) != da->task(r, 0)) return true;
    return false;
  }

  // [participant][output] -> [replica][output] for the replicas with a core here:
  // logical core 0's output (NULL if that core runs elsewhere), or the tiles assembled
  // (specs NULL: the step assembled them already, on logical core 0).
  void gather_outputs(int num_outputs, TensorRefs& staged, const tpu_partition_spec* specs,
                      tpu_tensor** outputs) const {
    TensorRefs results(static_cast<size_t>(num_replicas) * num_outputs);
    for (int r = 0; r < num_replicas; ++r) {
      if (!any_local[r]) continue;
      const size_t first = static_cast<size_t>(r) * cores * num_outputs;  // core 0's
      for (int o = 0; o < num_outputs; ++o)
        results[static_cast<size_t>(r) * num_outputs + o] =
            specs && is_partitioned(specs[o])
                ? assemble_tiles(staged.data() + first + o, num_outputs, cores, specs[o], r, o)
                : staged.take(first + o);
    }
    for (int r = 0; r < num_replicas; ++r)
      if (any_local[r])
        for (int o = 0; o < num_outputs; ++o)
          outputs[static_cast<size_t>(r) * num_outputs + o] =
              results.take(static_cast<size_t>(r) * num_outputs + o);
  }
};

// Runs spec (with the infeed wrapper if the options ask for it), spreading each
// replica's inputs over its cores and gathering its outputs back (tpu_partition_spec).
// `last`, if any, runs after the rest of each participant's stage, on the whole
// outputs: partitioned outputs are then assembled inside the step, on logical core 0.
void run(System& system, StepSpec spec, const StepOptions& options, tpu_tensor** outputs,
         std::shared_ptr<const StepStage> last = nullptr) {
  spec.timeout_ms = options.collective_timeout_ms;
  const int cores = cores_per_replica(options);
  std::vector<int> shard_dims;
  if (options.infeed_queue != nullptr) {
    shard_dims = options.infeed_queue->shard_dimensions();
    options.infeed_queue->check_shardable(shard_dims, cores);
  }
  // Every replica's input i has one rank; another task's replica may give NULL.
  for (size_t i = 0; i < options.num_input_partitions; ++i)
    for (int r = 0; r < spec.num_replicas; ++r)
      if (const Tensor* t = spec.inputs[static_cast<size_t>(r) * spec.num_inputs + i]) {
        check_partition_rank(options.input_partitions[i], t, "input", static_cast<int>(i));
        break;
      }
  spec.caller_threads = options.caller_threads;
  if (options.infeed_queue != nullptr)
    spec.stage = std::make_shared<InfeedStage>(options.infeed_queue, cores, std::move(shard_dims));
  // One core per replica and every output core 0's: today's path, nothing staged.
  if (cores == 1 && options.output_partitions == nullptr) {
    spec.stage = chain_stages(spec.stage, last);
    return system.run_step(spec, options.device_assignment, outputs);
  }
  const Participants parts(system, options.device_assignment, spec.num_replicas);
  const tpu_partition_spec* assemble_here = options.output_partitions;
  // (With one core a tile is the whole output: nothing to assemble in the step.)
  if (assemble_here != nullptr &&
      ((last && cores > 1) || parts.replica_spans_tasks(options.device_assignment))) {
    spec.stage = chain_stages(spec.stage, std::make_shared<TileGatherStage>(options.output_partitions,
                                                                            spec.num_outputs));
    assemble_here = nullptr;
  }
  spec.stage = chain_stages(spec.stage, last);
  // With one core a spec is whole or one tile, the tensor itself: inputs pass as they are.
  TensorRefs inputs(cores > 1 ? static_cast<size_t>(spec.num_replicas) * cores * spec.num_inputs
                              : 0);
  if (cores > 1) {
    parts.spread_inputs(spec.num_inputs, spec.inputs, options.input_partitions,
                        options.num_input_partitions, &inputs);
    spec.inputs = inputs.data();
  }
  TensorRefs staged(static_cast<size_t>(spec.num_replicas) * cores * spec.num_outputs);
  system.run_step(spec, options.device_assignment, staged.data());
  parts.gather_outputs(spec.num_outputs, staged, assemble_here, outputs);
}

// Across tasks every task returns tpu_shard's whole outputs, which only its own
// participants can receive: a task that runs none of the shards could not. Every task
// finds this alike (the device assignment is global), before the step.
void check_every_task_runs_a_shard(const System& system, const DeviceAssignment* da, int num_shards) {
  std::vector<char> runs(system.num_tasks());
  const int cores = da ? da->num_cores_per_replica() : 1;
  for (int r = 0; r < num_shards; ++r)
    for (int c = 0; c < cores; ++c) runs[task_of(system, da, r, c)] = 1;
  for (int t = 0; t < system.num_tasks(); ++t)
    if (!runs[t])
      invalid_argument("task ", t, " of ", system.num_tasks(), " runs none of the ", num_shards,
                       " shards (options->device_assignment), but every task returns tpu_shard's "
                       "outputs, which reach a task only through its shards");
}

}  // namespace

void replicate(System& system, tpu_computation_fn computation, void* user_data,
               int num_replicas, int num_inputs, tpu_tensor* const* inputs, int num_outputs,
               tpu_tensor** outputs, const StepOptions& options) {
  system.check_can_start_step();
  check_counts(computation, num_inputs, inputs, num_outputs, outputs, options);
  if (num_replicas < 0) invalid_argument("num_replicas is ", num_replicas, "; it must be >= 0");
  if (num_replicas == 0) return;
  check_options(system, num_replicas, num_inputs, num_outputs, options);
  system.check_num_replicas(num_replicas, options.device_assignment);
  check_replica_inputs(system, num_replicas, num_inputs, inputs, options);
  StepSpec spec(computation, user_data, num_replicas, num_inputs, num_outputs, inputs);
  PaddedInputs padded;
  if (options.maximum_shapes != nullptr && num_replicas > 1) {
    pad_inputs(num_replicas, num_inputs, inputs, options.maximum_shapes, options.padding_spec,
               &padded);
    if (padded.num_inputs > 0) {
      spec.inputs = padded.inputs.data();
      spec.num_inputs = padded.num_inputs;
    }
  }
  run(system, spec, options, outputs);
}

void shard(System& system, tpu_computation_fn computation, void* user_data, int num_inputs,
           tpu_tensor* const* inputs, int num_shards, const int* input_shard_axes,
           const int* outputs_from_all_shards, const int* output_shard_axes, int num_outputs,
           tpu_tensor** outputs, const StepOptions& options) {
  system.check_can_start_step();
  check_counts(computation, num_inputs, inputs, num_outputs, outputs, options);
  if (num_shards <= 0) invalid_argument("num_shards must be a positive integer, got ", num_shards);
  if (options.maximum_shapes != nullptr)
    invalid_argument("options->maximum_shapes applies to tpu_replicate only; shard, "
                     "batch_parallel and rewrite take it NULL");
  check_options(system, num_shards, num_inputs, num_outputs, options);
  system.check_num_replicas(num_shards, options.device_assignment);

  TensorRefs pieces(static_cast<size_t>(num_shards) * num_inputs);
  for (int i = 0; i < num_inputs; ++i) {
    Tensor* t = inputs[i];
    if (t == nullptr) invalid_argument("input ", i, " is NULL");
    require_live(t, "inputs[", i, "]");
    const int given = input_shard_axes ? input_shard_axes[i] : 0;
    if (t->rank == 0)
      invalid_argument("input ", i, " is a scalar (", describe(t), ") and cannot be split into ",
                       num_shards, " shards");
    const int axis =
        normalize_axis(given, t->rank, str_cat("input ", i, ": input_shard_axes[", i, "] =").c_str());
    if (t->dims[axis] % num_shards != 0)
      invalid_argument("input ", i, " (", describe(t), ") cannot be split into ", num_shards,
                       " shards along axis ", axis, ": size ", t->dims[axis],
                       " is not divisible by ", num_shards);
    for (int s = 0; s < num_shards; ++s)
      pieces[static_cast<size_t>(s) * num_inputs + i] = split_piece(t, axis, num_shards, s);
  }

  StepSpec spec(computation, user_data, num_shards, num_inputs, num_outputs, pieces.data());
  TensorRefs staged(static_cast<size_t>(num_shards) * num_outputs);
  if (num_outputs == 0) return run(system, spec, options, staged.data());
  // The outputs are checked inside the step, so that a bad one fails the step (on
  // every task, before the embedding engine keeps its updates); across tasks they are
  // gathered there too, and every task returns them whole (runtime/shard_gather.h).
  ShardOutputSpec out_spec;
  out_spec.num_shards = num_shards;
  out_spec.num_outputs = num_outputs;
  out_spec.from_all.assign(num_outputs, 1);
  out_spec.axes.assign(num_outputs, 0);
  for (int o = 0; o < num_outputs; ++o) {
    if (outputs_from_all_shards) out_spec.from_all[o] = outputs_from_all_shards[o] != 0;
    if (output_shard_axes) out_spec.axes[o] = output_shard_axes[o];
  }
  const bool across_tasks = system.num_tasks() > 1;
  if (across_tasks) check_every_task_runs_a_shard(system, options.device_assignment, num_shards);
  auto gather = std::make_shared<ShardGatherStage>(std::move(out_spec), cores_per_replica(options),
                                                   across_tasks);
  run(system, spec, options, staged.data(), gather);
  gather->finish(staged.data(), outputs);
}

}  // namespace tpurt
