// C API: replicated execution, the replica context and outside compilation.
#include <algorithm>
#include <cstddef>

#include "capi/api.h"
#include "capi/handles.h"
#include "core/options.h"
#include "runtime/executor.h"
#include "runtime/replica_context.h"
#include "runtime/replicate.h"

using namespace tpurt;

namespace {

// Outputs of a failed call are all NULL. Only slots a successful call could have
// written are touched: at most one replica per core.
void clear_outputs(const tpu_system* system, int num_replicas, int num_outputs,
                   tpu_tensor** outputs) {
  if (system == nullptr || !is_live_handle(system) || outputs == nullptr || num_outputs <= 0 ||
      num_replicas <= 0)
    return;
  const int n = std::min(num_replicas, system->impl->num_cores());
  std::fill(outputs, outputs + static_cast<int64_t>(n) * num_outputs, nullptr);
}

// The 1.0 size of tpu_step_options.
constexpr size_t kStepOptionsMinSize = offsetof(tpu_step_options, infeed_queue) + sizeof(void*);

// *keep holds the device assignment for the call: a computation may release the
// handle given in the options without freeing what the step reads (StepOptions keeps
// a plain pointer).
StepOptions step_options(const tpu_step_options* options,
                         std::shared_ptr<const DeviceAssignment>* keep) {
  const tpu_step_options o = read_options(options, kStepOptionsMinSize, "tpu_step_options");
  require_live_or_null(o.device_assignment, "options->device_assignment");
  require_live_or_null(o.infeed_queue, "options->infeed_queue");
  StepOptions out;
  if (o.device_assignment) *keep = o.device_assignment->impl;
  out.device_assignment = keep->get();
  out.maximum_shapes = o.maximum_shapes;
  out.num_maximum_shapes = o.num_maximum_shapes;
  out.padding_spec = o.padding_spec;
  out.collective_timeout_ms = o.collective_timeout_ms;
  out.infeed_queue = o.infeed_queue ? o.infeed_queue->impl : nullptr;
  out.input_partitions = o.input_partitions;
  out.num_input_partitions = o.num_input_partitions;
  out.output_partitions = o.output_partitions;
  out.num_output_partitions = o.num_output_partitions;
  out.caller_threads = o.caller_threads != 0;
  return out;
}

// The 1.4 size of tpu_joined_step.
constexpr size_t kJoinedStepMinSize = offsetof(tpu_joined_step, user_data) + sizeof(void*);

const tpu_replica_context& context(const tpu_replica_context* ctx) {
  require_not_null(ctx, "ctx");
  return *ctx;
}

template <typename T>
tpu_status get(const tpu_replica_context* ctx, T* out, T tpu_replica_context::*field) {
  return guarded([&] {
    const tpu_replica_context& c = context(ctx);
    require_not_null(out, "out");
    *out = c.*field;
  });
}

}  // namespace

TPU_EXPORT tpu_status tpu_step_options_init(tpu_step_options* options, size_t struct_size) {
  return guarded([&] { init_options(options, struct_size, kStepOptionsMinSize, "tpu_step_options"); });
}

TPU_EXPORT tpu_status tpu_replicate(tpu_system* system, tpu_computation_fn computation,
                                    void* user_data, int num_replicas, int num_inputs,
                                    tpu_tensor* const* inputs, int num_outputs,
                                    tpu_tensor** outputs, const tpu_step_options* options) {
  tpu_status st = guarded([&] {
    System& s = system_of(system);
    std::shared_ptr<const DeviceAssignment> keep;
    replicate(s, computation, user_data, num_replicas, num_inputs, inputs, num_outputs, outputs,
              step_options(options, &keep));
  });
  if (st != TPU_OK) clear_outputs(system, num_replicas, num_outputs, outputs);
  return st;
}

TPU_EXPORT tpu_status tpu_step_join(tpu_system* system, int core, int64_t timeout_ms,
                                    tpu_joined_step* out) {
  return guarded([&] {
    System& s = system_of(system);
    require_not_null(out, "out");
    if (out->struct_size < kJoinedStepMinSize)
      invalid_argument("out->struct_size is ", out->struct_size, "; tpu_joined_step needs at least ",
                       kJoinedStepMinSize, " (use TPU_JOINED_STEP_INIT)");
    // The joining thread holds the system while it waits (and between its joins): a
    // shutdown wakes it, and it must still find its core.
    const JoinedParticipant j = s.join_step(core, timeout_ms, system->impl);
    out->ctx = j.ctx;
    out->inputs = j.inputs;
    out->num_inputs = j.num_inputs;
    out->num_outputs = j.num_outputs;
    out->computation = j.fn;
    out->user_data = j.user_data;
  });
}

TPU_EXPORT tpu_status tpu_step_join_cancel(tpu_system* system, int core) {
  return guarded([&] { system_of(system).cancel_join(core); });
}

TPU_EXPORT tpu_status tpu_step_leave(tpu_replica_context* ctx, tpu_status status,
                                     tpu_tensor* const* outputs, int num_outputs) {
  return guarded([&] {
    require_not_null(ctx, "ctx");
    Executor::leave(ctx, status, outputs, num_outputs);
  });
}

TPU_EXPORT tpu_status tpu_rewrite(tpu_system* system, tpu_computation_fn computation,
                                  void* user_data, int num_inputs, tpu_tensor* const* inputs,
                                  int num_outputs, tpu_tensor** outputs,
                                  const tpu_step_options* options) {
  tpu_status st = guarded([&] {
    System& s = system_of(system);
    std::shared_ptr<const DeviceAssignment> keep;
    const StepOptions o = step_options(options, &keep);
    if (o.maximum_shapes != nullptr)
      invalid_argument("options->maximum_shapes applies to tpu_replicate only; rewrite takes it NULL");
    replicate(s, computation, user_data, 1, num_inputs, inputs, num_outputs, outputs, o);
  });
  if (st != TPU_OK) clear_outputs(system, 1, num_outputs, outputs);
  return st;
}

TPU_EXPORT tpu_status tpu_shard(tpu_system* system, tpu_computation_fn computation,
                                void* user_data, int num_inputs, tpu_tensor* const* inputs,
                                int num_shards, const int* input_shard_axes,
                                const int* outputs_from_all_shards, const int* output_shard_axes,
                                int num_outputs, tpu_tensor** outputs,
                                const tpu_step_options* options) {
  tpu_status st = guarded([&] {
    System& s = system_of(system);
    std::shared_ptr<const DeviceAssignment> keep;
    shard(s, computation, user_data, num_inputs, inputs, num_shards, input_shard_axes,
          outputs_from_all_shards, output_shard_axes, num_outputs, outputs,
          step_options(options, &keep));
  });
  if (st != TPU_OK) clear_outputs(system, 1, num_outputs, outputs);
  return st;
}

TPU_EXPORT tpu_status tpu_batch_parallel(tpu_system* system, tpu_computation_fn computation,
                                         void* user_data, int num_inputs,
                                         tpu_tensor* const* inputs, int num_shards,
                                         int num_outputs, tpu_tensor** outputs,
                                         const tpu_step_options* options) {
  return tpu_shard(system, computation, user_data, num_inputs, inputs, num_shards, nullptr,
                   nullptr, nullptr, num_outputs, outputs, options);
}

TPU_EXPORT tpu_status tpu_replica_context_replica_id(const tpu_replica_context* ctx, int* out) {
  return get(ctx, out, &tpu_replica_context::replica_id);
}

TPU_EXPORT tpu_status tpu_replica_context_num_replicas(const tpu_replica_context* ctx, int* out) {
  return get(ctx, out, &tpu_replica_context::num_replicas);
}

TPU_EXPORT tpu_status tpu_replica_context_core(const tpu_replica_context* ctx, int* out) {
  return get(ctx, out, &tpu_replica_context::core);
}

TPU_EXPORT tpu_status tpu_replica_context_num_cores_per_replica(const tpu_replica_context* ctx,
                                                                int* out) {
  return get(ctx, out, &tpu_replica_context::num_cores_per_replica);
}

TPU_EXPORT tpu_status tpu_replica_context_logical_core(const tpu_replica_context* ctx, int* out) {
  return get(ctx, out, &tpu_replica_context::logical_core);
}

TPU_EXPORT tpu_status tpu_replica_context_system(const tpu_replica_context* ctx, tpu_system** out) {
  return guarded([&] {
    const tpu_replica_context& c = context(ctx);
    require_not_null(out, "out");
    if (c.system == nullptr) fail(TPU_FAILED_PRECONDITION, "replica context has no system");
    // Cleared by tpu_system_release: a computation that outlived its step (and the
    // system's shutdown) must not get a freed handle. Read once.
    tpu_system* handle = c.system->c_handle();
    if (handle == nullptr)
      fail(TPU_FAILED_PRECONDITION,
           "the tpu_system handle of this computation's system was released "
           "(tpu_system_release) while the computation still ran");
    *out = handle;
  });
}

TPU_EXPORT tpu_status tpu_replica_context_device_name(const tpu_replica_context* ctx, char* out,
                                                      size_t capacity, size_t* count) {
  return guarded([&] { copy_string_out(context(ctx).device_name, out, capacity, count, "the device name"); });
}

TPU_EXPORT tpu_status tpu_replica_context_fail(tpu_replica_context* ctx, tpu_status code,
                                               const char* message) {
  tpu_status st = guarded([&] {
    require_not_null(ctx, "ctx");
    if (code == TPU_OK) invalid_argument("tpu_replica_context_fail needs an error code, not TPU_OK");
    ctx->fail_code = code;
    ctx->fail_message = message ? message : "";
  });
  if (st != TPU_OK) return st;
  return set_last_error(code, ctx->fail_message);
}

TPU_EXPORT tpu_status tpu_outside_compilation(tpu_replica_context* ctx, tpu_host_fn fn,
                                              void* user_data) {
  return guarded([&] {
    Communicator& comm = step_communicator(ctx);
    if (fn == nullptr) invalid_argument("argument 'fn' is NULL");
    std::string message;
    tpu_status st = ctx->system->host().call(fn, user_data, ctx->replica_id, comm, &message);
    if (st != TPU_OK) throw Error(st, message);
  });
}

TPU_EXPORT tpu_status tpu_outside_compilation_tensors(tpu_replica_context* ctx,
                                                      tpu_host_tensors_fn fn, void* user_data,
                                                      tpu_tensor* const* inputs, int num_inputs,
                                                      tpu_tensor** outputs, int num_outputs) {
  return guarded([&] {
    Communicator& comm = step_communicator(ctx);
    if (fn == nullptr) invalid_argument("argument 'fn' is NULL");
    if (num_inputs < 0) invalid_argument("num_inputs is ", num_inputs, "; it must be >= 0");
    if (num_outputs < 0) invalid_argument("num_outputs is ", num_outputs, "; it must be >= 0");
    if (num_inputs > 0) require_not_null(inputs, "inputs");
    if (num_outputs > 0) require_not_null(outputs, "outputs");
    for (int i = 0; i < num_inputs; ++i) {
      if (inputs[i] == nullptr) invalid_argument("input ", i, " is NULL");
      require_live(inputs[i], "inputs[", i, "]");
    }
    std::string message;
    tpu_status st = ctx->system->host().call_tensors(fn, user_data, ctx->replica_id, inputs, num_inputs,
                                                     outputs, num_outputs, comm, &message);
    if (st != TPU_OK) throw Error(st, message);
  });
}
