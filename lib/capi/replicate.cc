// C API: replicated execution, the replica context and outside compilation.
#include <algorithm>

#include "capi/api.h"
#include "runtime/replica_context.h"
#include "runtime/replicate.h"

using namespace tpurt;

namespace {

// Outputs of a failed call are all NULL. Only slots a successful call could have
// written are touched: at most one replica per core.
void clear_outputs(const tpu_system* system, int num_replicas, int num_outputs,
                   tpu_tensor** outputs) {
  if (system == nullptr || outputs == nullptr || num_outputs <= 0 || num_replicas <= 0) return;
  const int n = std::min(num_replicas, system->impl->num_cores());
  std::fill(outputs, outputs + static_cast<int64_t>(n) * num_outputs, nullptr);
}

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

TPU_EXPORT tpu_status tpu_replicate(tpu_system* system, tpu_computation_fn computation,
                                    void* user_data, int num_replicas, int num_inputs,
                                    tpu_tensor* const* inputs,
                                    const tpu_device_assignment* device_assignment,
                                    const tpu_shape* maximum_shapes, int num_outputs,
                                    tpu_tensor** outputs) {
  tpu_status st = guarded([&] {
    replicate(system_of(system), computation, user_data, num_replicas, num_inputs, inputs,
              device_assignment, maximum_shapes, num_outputs, outputs);
  });
  if (st != TPU_OK) clear_outputs(system, num_replicas, num_outputs, outputs);
  return st;
}

TPU_EXPORT tpu_status tpu_rewrite(tpu_system* system, tpu_computation_fn computation,
                                  void* user_data, int num_inputs, tpu_tensor* const* inputs,
                                  const tpu_device_assignment* device_assignment,
                                  int num_outputs, tpu_tensor** outputs) {
  return tpu_replicate(system, computation, user_data, 1, num_inputs, inputs, device_assignment,
                       nullptr, num_outputs, outputs);
}

TPU_EXPORT tpu_status tpu_shard(tpu_system* system, tpu_computation_fn computation,
                                void* user_data, int num_inputs, tpu_tensor* const* inputs,
                                int num_shards, const int* input_shard_axes,
                                const int* outputs_from_all_shards, const int* output_shard_axes,
                                const tpu_device_assignment* device_assignment, int num_outputs,
                                tpu_tensor** outputs) {
  tpu_status st = guarded([&] {
    shard(system_of(system), computation, user_data, num_inputs, inputs, num_shards,
          input_shard_axes, outputs_from_all_shards, output_shard_axes, device_assignment,
          num_outputs, outputs);
  });
  if (st != TPU_OK) clear_outputs(system, 1, num_outputs, outputs);
  return st;
}

TPU_EXPORT tpu_status tpu_batch_parallel(tpu_system* system, tpu_computation_fn computation,
                                         void* user_data, int num_inputs,
                                         tpu_tensor* const* inputs, int num_shards,
                                         const tpu_device_assignment* device_assignment,
                                         int num_outputs, tpu_tensor** outputs) {
  return tpu_shard(system, computation, user_data, num_inputs, inputs, num_shards, nullptr,
                   nullptr, nullptr, device_assignment, num_outputs, outputs);
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

TPU_EXPORT tpu_status tpu_replica_context_device_name(const tpu_replica_context* ctx, char* buf,
                                                      size_t cap, size_t* len) {
  return guarded([&] { copy_string_out(context(ctx).device_name, buf, cap, len, "the device name"); });
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
