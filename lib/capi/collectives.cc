// C API: collectives and the bfloat16 scope, called from inside a computation.
#include <cstddef>

#include "capi/api.h"
#include "collectives/communicator.h"
#include "core/options.h"
#include "runtime/replica_context.h"

using namespace tpurt;

namespace {

// The 1.0 size of tpu_collective_options.
constexpr size_t kCollectiveOptionsMinSize =
    offsetof(tpu_collective_options, timeout_ms) + sizeof(int64_t);

// The step's communicator, with this replica's deadline for the call set from options.
Communicator& prepare(tpu_replica_context* ctx, const tpu_collective_options* options) {
  Communicator& comm = step_communicator(ctx);
  const tpu_collective_options o =
      read_options(options, kCollectiveOptionsMinSize, "tpu_collective_options");
  if (o.timeout_ms < 0)
    invalid_argument("options->timeout_ms is ", o.timeout_ms,
                     "; it must be positive, or 0 for the step's deadline");
  comm.set_call_timeout(ctx->replica_id, o.timeout_ms);
  return comm;
}

// Collectives return their result through *out; check it before any meeting so a
// bad out pointer fails only this call's argument check.
template <typename Fn>
tpu_status collective(tpu_replica_context* ctx, const tpu_tensor* x, tpu_tensor** out,
                      const tpu_collective_options* options, Fn&& fn) {
  return guarded([&] {
    Communicator& comm = prepare(ctx, options);
    require_not_null(x, "x");
    require_not_null(out, "out");
    *out = fn(comm);
  });
}

bool bf16_wire(const tpu_replica_context* ctx) { return ctx->bf16_scope_depth > 0; }

}  // namespace

TPU_EXPORT tpu_status tpu_cross_replica_sum(tpu_replica_context* ctx, const tpu_tensor* x,
                                            const tpu_group_assignment* groups, tpu_tensor** out,
                                            const tpu_collective_options* options) {
  return collective(ctx, x, out, options, [&](Communicator& c) {
    return c.all_reduce(ctx->replica_id, x, TPU_REDUCE_SUM, groups, bf16_wire(ctx));
  });
}

TPU_EXPORT tpu_status tpu_all_reduce(tpu_replica_context* ctx, const tpu_tensor* x, tpu_reduce_op op,
                                     const tpu_group_assignment* groups, tpu_tensor** out,
                                     const tpu_collective_options* options) {
  return collective(ctx, x, out, options, [&](Communicator& c) {
    return c.all_reduce(ctx->replica_id, x, op, groups, bf16_wire(ctx));
  });
}

TPU_EXPORT tpu_status tpu_all_gather(tpu_replica_context* ctx, const tpu_tensor* x, int axis,
                                     const tpu_group_assignment* groups, tpu_tensor** out,
                                     const tpu_collective_options* options) {
  return collective(ctx, x, out, options, [&](Communicator& c) { return c.all_gather(ctx->replica_id, x, axis, groups); });
}

TPU_EXPORT tpu_status tpu_reduce_scatter(tpu_replica_context* ctx, const tpu_tensor* x,
                                         tpu_reduce_op op, int scatter_axis,
                                         const tpu_group_assignment* groups, tpu_tensor** out,
                                         const tpu_collective_options* options) {
  return collective(ctx, x, out, options, [&](Communicator& c) {
    return c.reduce_scatter(ctx->replica_id, x, op, scatter_axis, groups, bf16_wire(ctx));
  });
}

TPU_EXPORT tpu_status tpu_all_to_all(tpu_replica_context* ctx, const tpu_tensor* x,
                                     int concat_dimension, int split_dimension, int split_count,
                                     const tpu_group_assignment* groups, tpu_tensor** out,
                                     const tpu_collective_options* options) {
  return collective(ctx, x, out, options, [&](Communicator& c) {
    return c.all_to_all(ctx->replica_id, x, concat_dimension, split_dimension, split_count, groups);
  });
}

TPU_EXPORT tpu_status tpu_collective_permute(tpu_replica_context* ctx, const tpu_tensor* x,
                                             const int32_t* source_target_pairs, int num_pairs,
                                             tpu_tensor** out,
                                             const tpu_collective_options* options) {
  return collective(ctx, x, out, options, [&](Communicator& c) {
    return c.collective_permute(ctx->replica_id, x, source_target_pairs, num_pairs);
  });
}

TPU_EXPORT tpu_status tpu_broadcast(tpu_replica_context* ctx, const tpu_tensor* x, int root,
                                    const tpu_group_assignment* groups, tpu_tensor** out,
                                    const tpu_collective_options* options) {
  return collective(ctx, x, out, options, [&](Communicator& c) { return c.broadcast(ctx->replica_id, x, root, groups); });
}

TPU_EXPORT tpu_status tpu_barrier(tpu_replica_context* ctx, const tpu_collective_options* options) {
  return guarded([&] { prepare(ctx, options).barrier(ctx->replica_id); });
}

TPU_EXPORT tpu_status tpu_collective_options_init(tpu_collective_options* options,
                                                  size_t struct_size) {
  return guarded([&] {
    init_options(options, struct_size, kCollectiveOptionsMinSize, "tpu_collective_options");
  });
}

TPU_EXPORT tpu_status tpu_bfloat16_scope_enter(tpu_replica_context* ctx) {
  return guarded([&] {
    step_communicator(ctx);
    ++ctx->bf16_scope_depth;
  });
}

TPU_EXPORT tpu_status tpu_bfloat16_scope_exit(tpu_replica_context* ctx) {
  return guarded([&] {
    step_communicator(ctx);
    if (ctx->bf16_scope_depth == 0)
      fail(TPU_FAILED_PRECONDITION, "tpu_bfloat16_scope_exit without a matching tpu_bfloat16_scope_enter");
    --ctx->bf16_scope_depth;
  });
}
