// C API: collectives and the bfloat16 scope, called from inside a computation.
#include <algorithm>
#include <cstddef>
#include <vector>

#include "capi/api.h"
#include "collectives/communicator.h"
#include "core/options.h"
#include "runtime/replica_context.h"
#include "topology/group_assignment.h"
#include "topology/group_modes.h"

using namespace tpurt;

namespace {

// The 1.0 size of tpu_collective_options.
constexpr size_t kCollectiveOptionsMinSize =
    offsetof(tpu_collective_options, timeout_ms) + sizeof(int64_t);

// The step's communicator, with this participant's deadline for the call set from
// options; *group_mode receives the options' group mode.
Communicator& prepare(tpu_replica_context* ctx, const tpu_collective_options* options,
                      int* group_mode = nullptr) {
  Communicator& comm = step_communicator(ctx);
  const tpu_collective_options o =
      read_options(options, kCollectiveOptionsMinSize, "tpu_collective_options");
  if (o.timeout_ms < 0)
    invalid_argument("options->timeout_ms is ", o.timeout_ms,
                     "; it must be positive, or 0 for the step's deadline");
  if (group_mode != nullptr) *group_mode = o.group_mode;
  comm.set_call_timeout(ctx->participant, o.timeout_ms);
  return comm;
}

// Runs a check of the call's groups or pairs: a bad one fails the whole step with
// its own error, as the collectives' own checks do, so the peers blocked in the same
// collective learn of it at once.
template <typename Fn>
auto checked_by_all(Communicator& comm, const tpu_replica_context* ctx, Fn&& check) {
  try {
    return check();
  } catch (const Error& e) {
    comm.reject(ctx->participant, e);
    throw;
  }
}

// The last groups a thread translated, and what they became: a step's collectives
// usually repeat their groups, so the next call with the same ones (compared by
// content: the caller may rewrite its array) skips the validation and translation.
// Ragged groups are not kept: their length is only known by walking them.
struct TranslatedGroups {
  bool valid = false;
  int mode = 0, num_replicas = 0, cores_per_replica = 0;
  bool given = false;  // groups were not NULL
  int num_groups = 0, group_size = 0;
  std::vector<int32_t> ids;  // the caller's
  bool translated = false;   // false: the caller's groups are the participant groups
  ParticipantGroups storage;

  bool same(int m, const tpu_group_assignment* g, int r, int k) const {
    if (!valid || m != mode || r != num_replicas || k != cores_per_replica || given != (g != nullptr)) return false;
    if (g == nullptr) return true;
    return g->num_groups == num_groups && g->group_size == group_size && g->replica_ids != nullptr &&
           std::equal(ids.begin(), ids.end(), g->replica_ids);
  }
};

// The caller's groups in its group mode as participant groups (the same pointer when
// they already are). The storage is per thread: one collective at a time per thread.
const tpu_group_assignment* participants(Communicator& comm, const tpu_replica_context* ctx,
                                         int mode, const tpu_group_assignment* groups) {
  if (mode == TPU_GROUP_MODE_CROSS_REPLICA && ctx->num_cores_per_replica == 1 && !is_ragged(groups))
    return groups;
  static thread_local TranslatedGroups last;
  static thread_local tpu_group_assignment view;
  const int r = ctx->num_replicas, k = ctx->num_cores_per_replica;
  if (!is_ragged(groups) && last.same(mode, groups, r, k)) {
    if (!last.translated) return groups;
    view = last.storage.view();
    return &view;
  }
  last.valid = false;
  return checked_by_all(comm, ctx, [&]() -> const tpu_group_assignment* {
    last.translated = participant_groups(mode, groups, r, k, &last.storage);
    if (!is_ragged(groups)) {  // validated: its uniform size is its length
      last.mode = mode, last.num_replicas = r, last.cores_per_replica = k, last.given = groups != nullptr;
      last.num_groups = groups ? groups->num_groups : 0;
      last.group_size = groups ? groups->group_size : 0;
      if (groups) last.ids.assign(groups->replica_ids, groups->replica_ids + int64_t{groups->num_groups} * groups->group_size);
      else last.ids.clear();
      last.valid = true;
    }
    if (!last.translated) return groups;
    view = last.storage.view();
    return &view;
  });
}

// Which collectives take groups of different sizes: XLA's verifier
// (xla/service/hlo_verifier.cc) calls CheckReplicaGroups with
// uniform_replica_group_size = false for all-reduce (HandleAllReduce,
// HandleAllReduceStart) only; all-gather (CheckCommonAllGatherInvariants),
// reduce-scatter (HandleReduceScatter) and all-to-all (HandleAllToAll) keep the default
// true, "Replica groups expected to be of uniform size". HandleCollectiveBroadcast checks
// no groups at all: broadcast takes them, with a root every group has.

// The refusal, after participant_groups (which turned rows of one length into uniform
// groups): the caller's groups, named as given, and XLA's reason.
void refuse_ragged(const char* op, const tpu_group_assignment* given, int mode,
                   const tpu_group_assignment* participant_groups) {
  if (!is_ragged(participant_groups)) return;
  invalid_argument(op, " needs groups of one size, as XLA's verifier (\"Replica groups expected to be "
                   "of uniform size\"; only all-reduce takes groups of different sizes): group_assignment ",
                   groups_text(*given), " (group mode ", group_mode_name(mode), ")");
}

// Collectives return their result through *out; check it before any meeting so a
// bad out pointer fails only this call's argument check. fn gets the communicator
// and the call's groups as participant groups.
template <typename Fn>
tpu_status collective(tpu_replica_context* ctx, const tpu_tensor* x,
                      const tpu_group_assignment* groups, tpu_tensor** out,
                      const tpu_collective_options* options, Fn&& fn,
                      const char* op = nullptr) {
  return guarded([&] {
    int mode = 0;
    Communicator& comm = prepare(ctx, options, &mode);
    require_not_null(x, "x");
    require_not_null(out, "out");
    const tpu_group_assignment* g = participants(comm, ctx, mode, groups);
    if (op != nullptr) checked_by_all(comm, ctx, [&] { refuse_ragged(op, groups, mode, g); });
    *out = fn(comm, g);
  });
}

bool bf16_wire(const tpu_replica_context* ctx) { return ctx->bf16_scope_depth > 0; }

}  // namespace

TPU_EXPORT tpu_status tpu_cross_replica_sum(tpu_replica_context* ctx, const tpu_tensor* x,
                                            const tpu_group_assignment* groups, tpu_tensor** out,
                                            const tpu_collective_options* options) {
  return collective(ctx, x, groups, out, options, [&](Communicator& c, const tpu_group_assignment* g) {
    return c.all_reduce(ctx->participant, x, TPU_REDUCE_SUM, g, bf16_wire(ctx));
  });
}

TPU_EXPORT tpu_status tpu_all_reduce(tpu_replica_context* ctx, const tpu_tensor* x, tpu_reduce_op op,
                                     const tpu_group_assignment* groups, tpu_tensor** out,
                                     const tpu_collective_options* options) {
  return collective(ctx, x, groups, out, options, [&](Communicator& c, const tpu_group_assignment* g) {
    return c.all_reduce(ctx->participant, x, op, g, bf16_wire(ctx));
  });
}

TPU_EXPORT tpu_status tpu_all_gather(tpu_replica_context* ctx, const tpu_tensor* x, int axis,
                                     const tpu_group_assignment* groups, tpu_tensor** out,
                                     const tpu_collective_options* options) {
  return collective(ctx, x, groups, out, options, [&](Communicator& c, const tpu_group_assignment* g) {
    return c.all_gather(ctx->participant, x, axis, g);
  }, "all_gather");
}

TPU_EXPORT tpu_status tpu_reduce_scatter(tpu_replica_context* ctx, const tpu_tensor* x,
                                         tpu_reduce_op op, int scatter_axis,
                                         const tpu_group_assignment* groups, tpu_tensor** out,
                                         const tpu_collective_options* options) {
  return collective(ctx, x, groups, out, options, [&](Communicator& c, const tpu_group_assignment* g) {
    return c.reduce_scatter(ctx->participant, x, op, scatter_axis, g, bf16_wire(ctx));
  }, "reduce_scatter");
}

TPU_EXPORT tpu_status tpu_all_to_all(tpu_replica_context* ctx, const tpu_tensor* x,
                                     int concat_dimension, int split_dimension, int split_count,
                                     const tpu_group_assignment* groups, tpu_tensor** out,
                                     const tpu_collective_options* options) {
  return collective(ctx, x, groups, out, options, [&](Communicator& c, const tpu_group_assignment* g) {
    return c.all_to_all(ctx->participant, x, concat_dimension, split_dimension, split_count, g);
  }, "all_to_all");
}

TPU_EXPORT tpu_status tpu_collective_permute(tpu_replica_context* ctx, const tpu_tensor* x,
                                             const int32_t* source_target_pairs, int num_pairs,
                                             tpu_tensor** out,
                                             const tpu_collective_options* options) {
  return guarded([&] {
    int mode = 0;
    Communicator& comm = prepare(ctx, options, &mode);
    require_not_null(x, "x");
    require_not_null(out, "out");
    static thread_local std::vector<int32_t> pairs;  // one collective at a time per thread
    const int32_t* p = source_target_pairs;
    int n = num_pairs;
    if (checked_by_all(comm, ctx, [&] {
          return participant_pairs(mode, source_target_pairs, num_pairs, ctx->num_replicas,
                                   ctx->num_cores_per_replica, &pairs);
        })) {
      p = pairs.data();
      n = static_cast<int>(pairs.size() / 2);
    }
    *out = comm.collective_permute(ctx->participant, x, p, n);
  });
}

TPU_EXPORT tpu_status tpu_broadcast(tpu_replica_context* ctx, const tpu_tensor* x, int root,
                                    const tpu_group_assignment* groups, tpu_tensor** out,
                                    const tpu_collective_options* options) {
  return collective(ctx, x, groups, out, options, [&](Communicator& c, const tpu_group_assignment* g) {
    // Groups of different sizes: the root must be a position of every group, checked
    // on the whole assignment so that every member says the same.
    if (is_ragged(g))
      checked_by_all(c, ctx, [&] {
        for_each_row(*g, [&](int gi, const int32_t*, int size) {
          if (root < 0 || root >= size)
            invalid_argument("root ", root, " is outside group ", gi, " of ", size, " (group_assignment ",
                             groups_text(*g), " in participant ids)");
        });
      });
    return c.broadcast(ctx->participant, x, root, g);
  });
}

TPU_EXPORT tpu_status tpu_barrier(tpu_replica_context* ctx, const tpu_collective_options* options) {
  return guarded([&] {
    int mode = 0;
    Communicator& comm = prepare(ctx, options, &mode);
    checked_by_all(comm, ctx, [&] { check_group_mode(mode); });
    comm.barrier(ctx->participant);
  });
}

TPU_EXPORT tpu_status tpu_group_assignment_ragged(const int32_t* replica_ids, const int32_t* group_sizes,
                                                  int num_groups, int32_t* storage, size_t capacity,
                                                  size_t* count, tpu_group_assignment* out) {
  return guarded([&] {
    if (num_groups < 1) invalid_argument("num_groups is ", num_groups, "; it must be at least 1");
    require_not_null(group_sizes, "group_sizes");
    require_not_null(count, "count");
    require_not_null(out, "out");
    size_t total = static_cast<size_t>(num_groups);
    for (int g = 0; g < num_groups; ++g) {
      if (group_sizes[g] < 1)
        invalid_argument("group_sizes[", g, "] is ", group_sizes[g], "; every group needs at least one id");
      total += static_cast<size_t>(group_sizes[g]);
    }
    require_not_null(replica_ids, "replica_ids");
    *count = total;
    if (storage == nullptr && capacity == 0) return;  // a size query
    require_not_null(storage, "storage");
    if (capacity < total)
      fail(TPU_OUT_OF_RANGE, "storage holds ", capacity, " int32 values; the encoding needs ", total);
    size_t at = 0, id = 0;
    for (int g = 0; g < num_groups; ++g) {
      storage[at++] = group_sizes[g];
      for (int32_t k = 0; k < group_sizes[g]; ++k) storage[at++] = replica_ids[id++];
    }
    *out = {storage, num_groups, TPU_GROUP_SIZE_RAGGED};
  });
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
