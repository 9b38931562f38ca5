/* tpurt/collectives.h: collectives between the replicas of a step.
 *
 * Called from inside a computation through its replica context. Every replica of
 * the step must make the same sequence of collective calls: participants meet by
 * sequence number, and the n-th call of every replica is one collective. Every call
 * checks that all participants agree on operation, dtype, shape, parameters and
 * groups; if not, every participant gets TPU_INVALID_ARGUMENT naming the replicas
 * that disagree. A replica that does not arrive within the deadline (the call's
 * tpu_collective_options.timeout_ms, else the step's, else the system's) gives
 * TPU_DEADLINE_EXCEEDED naming the missing replicas. When any replica
 * of the step fails, the others return TPU_ABORTED at once.
 * Who said what: a replica R whose own arguments are invalid gets its own message,
 * from that call and from its later collectives in the step; the others get its code
 * and "replica R failed (CODE): <message>" (as for TPU_ABORTED: never "replica R: ",
 * which would read as if they were R); tpu_replicate reports "replica R: <message>".
 *
 * groups: NULL means one group of every replica. Otherwise it must be valid for the
 * step's replica count (tpu_group_assignment_validate); all-reduce, all-gather,
 * reduce-scatter, all-to-all and broadcast work within each group. With several
 * cores per replica, the options' group_mode says what the ids are (tpu_group_mode,
 * below); "replica" in this header then means a participant (replica, logical core),
 * and messages name it "replica R core C".
 *
 * Outputs are new tensor handles (*out, the caller's). Inputs are only read. The
 * members of a group may receive handles on one shared buffer for the result of
 * all-reduce, cross_replica_sum, all-gather and broadcast: read it with
 * tpu_tensor_data, write it with tpu_tensor_mutable_data (copy-on-write, tensor.h).
 * Reductions over bfloat16 and half accumulate in float32; integer sums wrap.
 * MEAN of integers is the mean of the values, truncated toward zero: it is summed
 * wide enough not to wrap (seven uint8 102s give 102).
 * An output whose shape would overflow (a dimension or the element count beyond
 * int64, as TensorFlow's TensorShape rules) is TPU_INVALID_ARGUMENT.
 */
#ifndef TPURT_COLLECTIVES_H
#define TPURT_COLLECTIVES_H

#include "common.h"
#include "replicate.h"
#include "tensor.h"
#include "topology.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef TPU_ENUM(tpu_reduce_op) {
  TPU_REDUCE_SUM = 0,
  TPU_REDUCE_PROD = 1,
  TPU_REDUCE_MIN = 2,
  TPU_REDUCE_MAX = 3,
  TPU_REDUCE_MEAN = 4
} tpu_reduce_op;

/* (1.3) Which ids a group assignment holds and who takes part: XLA's
 * CollectiveOpGroupMode (xla/service/collective_ops_utils.h), same numbers. A step
 * with k cores per replica has num_replicas * k participants, (replica r, logical
 * core c), whose flattened id is r * k + c. With one core per replica every mode
 * means today's groups of replica ids (CROSS_PARTITION then only allows {0}).
 * - CROSS_REPLICA (default): groups of replica ids; one collective per logical core,
 *   among the cores with the same logical core id. NULL groups: all replicas.
 * - CROSS_PARTITION: groups of logical-core ids; one collective per replica, among
 *   its cores. NULL groups: all cores of the replica.
 * - CROSS_REPLICA_AND_PARTITION: groups of replica ids; every core of those replicas
 *   takes part, ordered by replica, then logical core. NULL groups: everyone.
 * - FLATTENED_ID: groups of flattened ids. NULL groups: everyone.
 * The whole assignment is checked (not only the caller's group): every id of the
 * mode's kind exactly once, TPU_INVALID_ARGUMENT naming the id, the group and the
 * mode otherwise. collective_permute's pairs are replica ids (CROSS_REPLICA, one
 * permute per logical core), logical-core ids (CROSS_PARTITION, one per replica) or
 * flattened ids (FLATTENED_ID); CROSS_REPLICA_AND_PARTITION has no meaning for a
 * permute (TPU_INVALID_ARGUMENT), as in XLA. tpu_barrier ignores the mode: all
 * participants meet. */
typedef TPU_ENUM(tpu_group_mode) {
  TPU_GROUP_MODE_CROSS_REPLICA = 0,
  TPU_GROUP_MODE_CROSS_PARTITION = 1,
  TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION = 2,
  TPU_GROUP_MODE_FLATTENED_ID = 3
} tpu_group_mode;

/* (29) Groups of different sizes ({{0, 1, 2}, {3}}), which XLA's verifier allows for
 * all-reduce only (CheckReplicaGroups in xla/service/hlo_verifier.cc). A
 * tpu_group_assignment whose group_size is TPU_GROUP_SIZE_RAGGED holds num_groups
 * rows in replica_ids, each preceded by its length: {3, 0, 1, 2, 1, 3} for
 * {{0, 1, 2}, {3}}. tpu_group_assignment_ragged builds one. All-reduce,
 * cross_replica_sum and broadcast accept such groups in every group mode (a broadcast's
 * root must then be a position of every group). All-gather, reduce-scatter and
 * all-to-all refuse them with TPU_INVALID_ARGUMENT naming the groups, as XLA does.
 * Rows that all have one length are the uniform groups of that length. */
#define TPU_GROUP_SIZE_RAGGED (-1)

/* Encodes rows of different lengths: row g has group_sizes[g] ids, taken in order
 * from replica_ids (the rows one after another). Writes num_groups plus the sum of
 * group_sizes int32 values to storage (the out-array rule) and fills *out with
 * {storage, num_groups, TPU_GROUP_SIZE_RAGGED}, which points into the caller's
 * storage. The ids themselves are checked where the groups are used
 * (tpu_group_assignment_validate). Errors: TPU_INVALID_ARGUMENT for num_groups < 1 or a
 * group size < 1, naming the group. */
TPU_API tpu_status tpu_group_assignment_ragged(const int32_t *replica_ids,
                                               const int32_t *group_sizes, int num_groups,
                                               int32_t *storage, size_t capacity,
                                               size_t *count, tpu_group_assignment *out);

/* Per-call options, as Gloo's per-operation options: every collective takes a
 * pointer to one as its last argument; NULL or zeros mean the defaults. */
typedef struct tpu_collective_options {
  size_t struct_size; /* sizeof(tpu_collective_options) */
  /* How long this replica waits in this call for the other participants, in ms;
   * 0: the step's deadline (tpu_step_options.collective_timeout_ms, else the
   * system's). Must not be negative. Each participant applies its own. */
  int64_t timeout_ms;
  /* (1.3) A tpu_group_mode: what the groups (or permute pairs) hold. Every
   * participant of one collective must pass the same mode and groups. */
  int group_mode;
} tpu_collective_options;

#define TPU_COLLECTIVE_OPTIONS_INIT { sizeof(tpu_collective_options), 0, 0 }

/* Fills *options with the defaults (zeros) and struct_size (the caller's sizeof; at
 * least the first release's size, at most this library's). */
TPU_API tpu_status tpu_collective_options_init(tpu_collective_options *options,
                                               size_t struct_size);

/* tf.tpu.cross_replica_sum: every replica gets the elementwise sum over its group.
 * Numeric dtypes (not bool); shape unchanged. */
TPU_API tpu_status tpu_cross_replica_sum(tpu_replica_context *ctx, const tpu_tensor *x,
                                         const tpu_group_assignment *groups, tpu_tensor **out,
                                         const tpu_collective_options *options);

/* All-reduce with `op` (SUM, PROD, MIN, MAX, MEAN). MIN/MAX are not defined for
 * complex64; bool supports MIN (and) and MAX (or) only. */
TPU_API tpu_status tpu_all_reduce(tpu_replica_context *ctx, const tpu_tensor *x,
                                  tpu_reduce_op op, const tpu_group_assignment *groups,
                                  tpu_tensor **out,
                                  const tpu_collective_options *options);

/* Concatenates the group members' inputs along `axis` in group order (the output's
 * axis is group_size times larger). Any dtype; rank >= 1. */
TPU_API tpu_status tpu_all_gather(tpu_replica_context *ctx, const tpu_tensor *x, int axis,
                                  const tpu_group_assignment *groups, tpu_tensor **out,
                                  const tpu_collective_options *options);

/* Reduces over the group, then the member at position k keeps block k along
 * `scatter_axis`, whose size must be divisible by the group size. */
TPU_API tpu_status tpu_reduce_scatter(tpu_replica_context *ctx, const tpu_tensor *x,
                                      tpu_reduce_op op, int scatter_axis,
                                      const tpu_group_assignment *groups, tpu_tensor **out,
                                      const tpu_collective_options *options);

/* tf.tpu.all_to_all: splits x into split_count blocks along split_dimension, sends
 * block j to the j-th member of the group, and concatenates what arrives along
 * concat_dimension in group order. split_count must equal the group size. */
TPU_API tpu_status tpu_all_to_all(tpu_replica_context *ctx, const tpu_tensor *x,
                                  int concat_dimension, int split_dimension, int split_count,
                                  const tpu_group_assignment *groups, tpu_tensor **out,
                                  const tpu_collective_options *options);

/* tf.tpu.collective_permute: source_target_pairs[num_pairs][2]; replica b gets
 * replica a's x for each pair (a, b); a replica nobody sends to gets zeros. Each id
 * at most once as a source and once as a target. */
TPU_API tpu_status tpu_collective_permute(tpu_replica_context *ctx, const tpu_tensor *x,
                                          const int32_t *source_target_pairs, int num_pairs,
                                          tpu_tensor **out,
                                          const tpu_collective_options *options);

/* Every member of a group gets the x of the member at position `root` of its group. */
TPU_API tpu_status tpu_broadcast(tpu_replica_context *ctx, const tpu_tensor *x, int root,
                                 const tpu_group_assignment *groups, tpu_tensor **out,
                                 const tpu_collective_options *options);

/* Returns when every replica of the step has arrived. */
TPU_API tpu_status tpu_barrier(tpu_replica_context *ctx, const tpu_collective_options *options);

/* bfloat16 scope: between enter and exit (they nest, per replica), all-reduce,
 * cross_replica_sum and reduce-scatter of float32 tensors travel as bfloat16 (half
 * the bytes: each input is rounded to bfloat16, the sum accumulates in float32 and
 * is rounded to bfloat16 once) and return float32. Every replica must be in the
 * same scope state for a collective, else TPU_INVALID_ARGUMENT. */
TPU_API tpu_status tpu_bfloat16_scope_enter(tpu_replica_context *ctx);
TPU_API tpu_status tpu_bfloat16_scope_exit(tpu_replica_context *ctx);

#ifdef __cplusplus
}
#endif

#endif /* TPURT_COLLECTIVES_H */
