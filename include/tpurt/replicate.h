/* tpurt/replicate.h: replicated execution (tf.tpu.replicate, shard, batch_parallel,
 * rewrite), the replica context, and outside compilation.
 *
 * A computation is a C callback that runs to completion on the worker thread of the
 * core its replica is assigned to. It receives borrowed input tensors and must store
 * one new reference in each of outputs[0..num_outputs) (NULL is allowed and stays
 * NULL). It reports failure by returning a non-OK status; the message comes from
 * tpu_replica_context_fail, or else from the worker thread's last error.
 *
 * A step fails as one: the first failure cancels the step, every replica blocked in
 * a collective returns TPU_ABORTED at once, and the caller gets the first error with
 * "replica R: " before its message ("replica R core C: " when a replica spans several
 * cores). Outputs of a failed step are all NULL.
 *
 * Late replicas. Once the step has failed or a replica has finished, the others get
 * the step's collective deadline to return. One that has not returned by then is
 * late: the step fails without it (TPU_DEADLINE_EXCEEDED "replica R did not return
 * within T ms ...", or the first failure followed by that), and tpu_replicate
 * returns. From then on:
 * - the runtime touches nothing of the caller's: it holds its own references to the
 *   late replica's inputs and releases them, and what the replica outputs, when the
 *   computation returns (the caller may release its inputs at once);
 * - the late computation itself still runs with its `user_data`: the caller must
 *   keep user_data valid until it returns. tpu_system_shutdown (and release) wait
 *   for late computations, up to the deadline, and say TPU_DEADLINE_EXCEEDED when
 *   one is still running: after an OK shutdown no computation is running;
 * - its collectives fail at once (TPU_ABORTED);
 * - its core runs nothing else until it returns: a step that needs that core waits
 *   up to the deadline for it, then fails with TPU_UNAVAILABLE naming the core;
 *   steps on other cores run as usual. When it returns, its core serves steps again
 *   and the system stays open (unless close_on_failure closed it). Only a
 *   computation that never returns costs its core.
 *
 * tpu_replicate and friends may be called from several host threads; steps on one
 * system run one at a time in call order. They must not be called from inside a
 * computation (TPU_FAILED_PRECONDITION: nesting is not allowed, as in TensorFlow).
 */
#ifndef TPURT_REPLICATE_H
#define TPURT_REPLICATE_H

#include "common.h"
#include "system.h"
#include "tensor.h"
#include "topology.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_replica_context tpu_replica_context;

typedef tpu_status (*tpu_computation_fn)(tpu_replica_context *ctx, tpu_tensor *const *inputs,
                                         int num_inputs, tpu_tensor **outputs, int num_outputs,
                                         void *user_data);

/* An infeed queue (tpurt/feed.h); declared here for tpu_step_options. */
typedef struct tpu_infeed_queue tpu_infeed_queue;

/* tf.tpu's PaddingSpec for maximum_shapes: how a dimension whose maximum is unknown
 * (-1) is padded. */
typedef TPU_ENUM(tpu_padding_spec) {
  TPU_PADDING_AUTO = 0,        /* to max(largest size over the replicas, 2) */
  TPU_PADDING_POWER_OF_TWO = 1 /* to the smallest power of two >= that */
} tpu_padding_spec;

/* Spatial partitioning of one input or output over the cores of a replica (1.3): the
 * partition_dims of TensorFlow's TPUPartitionedInputV2 / TPUPartitionedOutputV2
 * (TPUEstimator's input_partition_dims).
 * - num_dims 0: not partitioned. An input goes whole to every core of its replica
 *   (each core gets its own handle on one buffer, copy-on-write as results are:
 *   tensor.h); an output is logical core 0's, and the other cores' are released.
 * - Otherwise num_dims equals the tensor's rank, every partition_dims[d] >= 1, and
 *   their product equals the step's cores per replica (so with one core per replica
 *   a spec is all ones and changes nothing; TPUEstimator also takes a product of 1
 *   with several cores to mean "core 0 only", tpurt does not). The tensor is cut into
 *   a grid of tiles (new tensors), partition_dims[d] along dimension d; logical core
 *   c gets tile c in row-major order of the grid (the last dimension varying
 *   fastest), as TensorFlow's tile assignment does: [[A, B, C, D], [E, F, G, H]] cut
 *   [2, 4] gives cores 0..7 A..H. A dimension of size n cut p ways is split as
 *   TPUEstimator splits it (tpu_feed.py) and XLA tiles it: n / p each when p divides
 *   n; otherwise greedily, pieces of ceil(n / p) while they fit, then the remainder,
 *   then empty pieces (5 cut 4 ways: 2, 2, 1, 0; [5, 14] cut [2, 4]: rows 3, 2 and
 *   columns 4, 4, 4, 2). An output is assembled the other way: every core must give
 *   a tensor of rank num_dims and one dtype, and the tiles are concatenated along
 *   every dimension, so tiles in one row of the grid must agree in the other
 *   dimensions (they need not have the split's sizes). Otherwise the step fails
 *   with TPU_INVALID_ARGUMENT naming the replica, the output and the logical cores
 *   at fault. When a replica's cores run on several tasks, its tiles travel to the
 *   task of its logical core 0, which gets the assembled output. */
typedef struct tpu_partition_spec {
  int num_dims;
  int partition_dims[TPU_MAX_RANK];
} tpu_partition_spec;

/* Per-step options of tpu_replicate, tpu_rewrite, tpu_shard and tpu_batch_parallel.
 * Zero (or a NULL options pointer) means default in every field. */
typedef struct tpu_step_options {
  size_t struct_size; /* sizeof(tpu_step_options) */
  /* NULL: one core per replica, replica r on core r; the replica count must then be 1
   * or the number of cores. Otherwise its replica count must equal the step's and it
   * must be built on this system's topology (tpu_system_topology). With
   * num_cores_per_replica = k the computation runs num_replicas * k times, once per
   * (replica r, logical core c), on the core (and task) the assignment names for
   * (r, c); no two of them may share a core. */
  const tpu_device_assignment *device_assignment;
  /* tpu_replicate only. NULL, or num_maximum_shapes == num_inputs entries: input i is
   * padded with zeros at the end of every dimension whose size differs between
   * replicas, to max(maximum_shapes[i].dims[d], 2), or for -1 as padding_spec says.
   * rank -1 means "never pad input i". For every padded dimension each replica gets an
   * extra int32 scalar input with its real size, appended after the inputs in
   * (input, dimension) order. Not allowed together with infeed_queue. */
  const tpu_shape *maximum_shapes;
  size_t num_maximum_shapes;
  int padding_spec; /* a tpu_padding_spec; 0 = TPU_PADDING_AUTO */
  /* The collective deadline of this step in ms, overriding the system's
   * collective_timeout_ms; 0: the system's. Must not be negative. INT64_MAX (any
   * value past the clock's range): no deadline. */
  int64_t collective_timeout_ms;
  /* TensorFlow's infeed_queue: before its computation runs, replica r dequeues its
   * next tuple from this queue (created for the step's replica count) and receives
   * the tuple's tensors after its own inputs (and after any padding sizes). NULL:
   * none. An empty FIFO waits up to the collective deadline. With several cores per
   * replica each core gets its piece of every element (tpurt/feed.h). */
  tpu_infeed_queue *infeed_queue;
  /* (1.3) NULL, or num_input_partitions == num_inputs entries: how input i is spread
   * over the cores of its replica (tpu_partition_spec). NULL: every input whole to
   * every core. Partitioning applies after maximum_shapes padding; the padded sizes'
   * extra inputs go whole to every core. */
  const tpu_partition_spec *input_partitions;
  size_t num_input_partitions;
  /* (1.3) NULL, or num_output_partitions == num_outputs entries: how output o is
   * assembled from the cores of its replica. NULL: logical core 0's outputs. */
  const tpu_partition_spec *output_partitions;
  size_t num_output_partitions;
  /* (1.4) Nonzero: the step's computations run on the caller's threads that joined
   * their cores (tpu_step_join below), not on the library's workers; `computation`
   * may then be NULL. */
  int caller_threads;
} tpu_step_options;

#define TPU_STEP_OPTIONS_INIT { sizeof(tpu_step_options), NULL, NULL, 0, 0, 0, NULL, NULL, 0, NULL, 0, 0 }

/* Fills *options with the defaults (zeros) and struct_size (the caller's sizeof; at
 * least the first release's size, at most this library's). */
TPU_API tpu_status tpu_step_options_init(tpu_step_options *options, size_t struct_size);

/* tf.tpu.replicate: runs `computation` once per replica. inputs[r * num_inputs + i]
 * is input i of replica r (borrowed); outputs[r * num_outputs + o] receives output o
 * of replica r (the caller releases them). options may be NULL (defaults). Rules, as
 * TensorFlow's:
 * - num_replicas == 0 returns TPU_OK at once and runs nothing;
 * - no input may be NULL; input i must have the same dtype in every replica, and the
 *   same shape unless maximum_shapes pads it (TPU_INVALID_ARGUMENT naming the input
 *   and the replicas that differ);
 * - device assignment, maximum_shapes, padding, deadline and infeed: see
 *   tpu_step_options.
 * Errors: TPU_INVALID_ARGUMENT, TPU_FAILED_PRECONDITION (system closed),
 * TPU_UNAVAILABLE (a core of the step still runs a late computation), or the first
 * replica's failure as "replica R: <message>" (TPU_DEADLINE_EXCEEDED for a late
 * replica, see above). */
TPU_API tpu_status tpu_replicate(tpu_system *system, tpu_computation_fn computation,
                                 void *user_data, int num_replicas, int num_inputs,
                                 tpu_tensor *const *inputs, int num_outputs,
                                 tpu_tensor **outputs, const tpu_step_options *options);

/* tf.tpu.rewrite: one replica on core 0 (or where options->device_assignment says).
 * options->maximum_shapes must be NULL. */
TPU_API tpu_status tpu_rewrite(tpu_system *system, tpu_computation_fn computation,
                               void *user_data, int num_inputs, tpu_tensor *const *inputs,
                               int num_outputs, tpu_tensor **outputs,
                               const tpu_step_options *options);

/* tf.tpu.shard: splits input i into num_shards equal pieces along
 * input_shard_axes[i] (NULL: all 0; axis must divide evenly, TPU_INVALID_ARGUMENT
 * naming input, axis and sizes otherwise), runs one replica per shard, and for
 * output o: if outputs_from_all_shards[o] (NULL: all true) concatenates the shards'
 * outputs along output_shard_axes[o] (NULL: all 0), stacking scalar outputs into a
 * [num_shards] vector; else returns shard 0's output. outputs[0..num_outputs).
 * input_shard_axes has num_inputs entries, the other two num_outputs.
 * options->maximum_shapes must be NULL. The outputs are checked inside the step: a
 * NULL output that is concatenated, or shards whose outputs cannot be concatenated,
 * fail the step (TPU_INVALID_ARGUMENT, "replica S: ..." naming the shard at fault),
 * so that, as for any failed step, no embedding row changes. In a multi-task system
 * every task returns the whole outputs, whichever tasks ran the shards (so every task
 * must run at least one shard when num_outputs > 0, TPU_INVALID_ARGUMENT naming the
 * task otherwise, before the step). */
TPU_API tpu_status tpu_shard(tpu_system *system, tpu_computation_fn computation,
                             void *user_data, int num_inputs, tpu_tensor *const *inputs,
                             int num_shards, const int *input_shard_axes,
                             const int *outputs_from_all_shards, const int *output_shard_axes,
                             int num_outputs, tpu_tensor **outputs,
                             const tpu_step_options *options);

/* tf.tpu.batch_parallel: tpu_shard with every axis 0 and every output concatenated. */
TPU_API tpu_status tpu_batch_parallel(tpu_system *system, tpu_computation_fn computation,
                                      void *user_data, int num_inputs,
                                      tpu_tensor *const *inputs, int num_shards,
                                      int num_outputs, tpu_tensor **outputs,
                                      const tpu_step_options *options);

/* ---- Steps on the caller's threads (1.4) ---------------------------------------
 * A step with options->caller_threads set (tpu_replicate, tpu_rewrite, tpu_shard or
 * tpu_batch_parallel; the call is the step's begin and end) hands each of its
 * participants on this task to the thread that has joined the participant's core,
 * instead of calling `computation` on a worker. That thread runs the participant
 * itself, calling collectives as usual, and leaves; the language bindings run
 * replicas this way on their own threads (a goroutine locked to its OS thread, a
 * managed thread), so that no computation is a call from a foreign thread. A thread
 * serving core c:
 *
 *   for (;;) {
 *     tpu_joined_step j = TPU_JOINED_STEP_INIT;
 *     if (tpu_step_join(system, c, -1, &j) != TPU_OK) break;  // waits for a step
 *     tpu_tensor *out[MAX] = {0};
 *     tpu_status st = my_computation(j.ctx, j.inputs, j.num_inputs, out, j.num_outputs);
 *     tpu_step_leave(j.ctx, st, out, j.num_outputs);  // hands the outputs over
 *   }
 *
 * The step's outcome, errors, deadlines and late participants are tpu_replicate's
 * (see the top of this header), with a joined thread in the place of a worker:
 * - a participant whose core no thread joins within the step's collective deadline
 *   never starts: the step fails with TPU_DEADLINE_EXCEEDED, "replica R (core C)
 *   never started: no thread joined its core (tpu_step_join) within T ms", and the
 *   others' collectives are aborted; a step that fails before then ends at once, its
 *   error followed by "(replica R (core C) never started: ... before the step failed)";
 * - a joined thread that has not left when the deadline after a failure or another
 *   replica's return has passed is late: its collectives fail with TPU_ABORTED, and
 *   its core serves no step until it calls tpu_step_leave;
 * - a thread that exits between join and leave fails its participant at once
 *   (TPU_CANCELLED, "the thread running replica R exited before tpu_step_leave").
 * Between join and leave the thread is inside a computation: it must not start steps
 * or shut the system down (TPU_FAILED_PRECONDITION), and the context is valid on
 * it only. Infeed queues, maximum_shapes padding and partitioned inputs and outputs
 * apply as with a worker. */

/* What tpu_step_join hands the joining thread; valid until tpu_step_leave. */
typedef struct tpu_joined_step {
  size_t struct_size;            /* sizeof(tpu_joined_step) */
  tpu_replica_context *ctx;      /* the participant's context */
  tpu_tensor *const *inputs;     /* its inputs (borrowed), as a computation gets them */
  int num_inputs;
  int num_outputs;               /* tpu_step_leave must hand over this many */
  tpu_computation_fn computation; /* the step's computation and user_data, as given */
  void *user_data;               /* to tpu_replicate (computation may be NULL) */
} tpu_joined_step;

#define TPU_JOINED_STEP_INIT { sizeof(tpu_joined_step), NULL, NULL, 0, 0, NULL, NULL }

/* The calling thread joins `core` (of this task, 0 to num_cores - 1): waits up to
 * timeout_ms (< 0: no limit; 0: only a step already waiting) for a caller-threads
 * step to give the core a participant, and fills *out with it. One thread joins a
 * core at a time. Errors: TPU_DEADLINE_EXCEEDED (no step came), TPU_CANCELLED (the
 * system was shut down meanwhile), TPU_FAILED_PRECONDITION (shut down already, or
 * called from inside a computation), TPU_ALREADY_EXISTS (another thread has joined
 * the core: the one status a pool may retry on), TPU_INVALID_ARGUMENT (a core out of
 * range, or a thread that has joined and not left: a thread joins twice only after
 * leaving). The thread holds the system from this call until tpu_step_leave (or
 * until the join fails): a thread between joins holds nothing, so a released
 * system is freed even while its pool's threads live. While the system pins its workers
 * (tpu_system_options.pin_threads) a thread that gets a participant of core c is pinned
 * to c's CPU, as c's worker would be, and keeps that affinity. To end a pool of joined
 * threads, shut the
 * system down (they return TPU_CANCELLED) and release it once they have returned. */
TPU_API tpu_status tpu_step_join(tpu_system *system, int core, int64_t timeout_ms,
                                 tpu_joined_step *out);

/* (1.4) Ends the wait of the thread waiting in tpu_step_join on `core` of this task:
 * that join returns TPU_CANCELLED. When no thread waits there (none has joined the
 * core, or its thread is running a participant), the cancel is kept for the core's
 * next tpu_step_join, which returns TPU_CANCELLED at once; a second cancel before
 * then adds nothing. So a pool stops its threads without a timeout or a shutdown:
 * set its own stop flag, cancel each core, and every thread's join returns. A join
 * that has already been handed a participant is not affected. Callable from any
 * thread, also after shutdown. Errors: TPU_INVALID_ARGUMENT (NULL system, or a core
 * out of range). */
TPU_API tpu_status tpu_step_join_cancel(tpu_system *system, int core);

/* Ends the calling thread's participant as a computation that returned `status`
 * (TPU_OK, or its failure; the message comes from tpu_replica_context_fail or the
 * thread's last error) with outputs[0..num_outputs): new references the runtime takes
 * over (released if the step fails). num_outputs must be the joined step's
 * num_outputs, else the participant fails with TPU_INVALID_ARGUMENT naming both and
 * this call returns it (the outputs are still taken over). TPU_INVALID_ARGUMENT, and
 * nothing taken, when ctx is not the context this thread joined. */
TPU_API tpu_status tpu_step_leave(tpu_replica_context *ctx, tpu_status status,
                                  tpu_tensor *const *outputs, int num_outputs);

/* ---- Inside a computation ----------------------------------------------------
 * A replica context is valid only on its worker thread during its computation (or
 * on the thread that joined it, until it leaves). With
 * several cores per replica there is one context per (replica, logical core): the
 * computation runs once for each, and messages name "replica R core C". */

TPU_API tpu_status tpu_replica_context_replica_id(const tpu_replica_context *ctx, int *out);
TPU_API tpu_status tpu_replica_context_num_replicas(const tpu_replica_context *ctx, int *out);
/* The system core (worker) this computation runs on. */
TPU_API tpu_status tpu_replica_context_core(const tpu_replica_context *ctx, int *out);
TPU_API tpu_status tpu_replica_context_num_cores_per_replica(const tpu_replica_context *ctx,
                                                             int *out);
/* (1.3) This computation's logical core within its replica, in
 * [0, num_cores_per_replica): XLA's partition id, the n of tf.tpu.core(n). */
TPU_API tpu_status tpu_replica_context_logical_core(const tpu_replica_context *ctx, int *out);
/* "/job:J/replica:0/task:T/device:TPU:D" of this computation's core. */
TPU_API tpu_status tpu_replica_context_device_name(const tpu_replica_context *ctx, char *out,
                                                   size_t capacity, size_t *count);

/* (1.4) The system running this computation: a borrowed handle, valid during the
 * computation (to read the system's configuration, such as its embedding tables).
 * TPU_FAILED_PRECONDITION for a late computation whose system's handle was released. */
TPU_API tpu_status tpu_replica_context_system(const tpu_replica_context *ctx,
                                              tpu_system **out);

/* Records why the computation fails and returns `code`, so a computation can end
 * with `return tpu_replica_context_fail(ctx, TPU_INVALID_ARGUMENT, "why");`.
 * tpu_replicate's caller gets "replica R: why". code must not be TPU_OK. */
TPU_API tpu_status tpu_replica_context_fail(tpu_replica_context *ctx, tpu_status code,
                                            const char *message);

/* tf.tpu.outside_compilation: runs fn(replica_id, user_data) on the system's host
 * thread, serialised across replicas, and returns its status (its message is
 * carried back into this thread's last error). Blocks the calling replica. */
typedef tpu_status (*tpu_host_fn)(int replica_id, void *user_data);
TPU_API tpu_status tpu_outside_compilation(tpu_replica_context *ctx, tpu_host_fn fn,
                                           void *user_data);

/* tf.tpu.outside_compilation(computation, *args) (1.2): as tpu_outside_compilation, and
 * fn gets this replica's inputs[0..num_inputs) (borrowed for the call) and sets each
 * of outputs[0..num_outputs) to a tensor it owns a reference to; those references
 * pass to the calling replica. On failure (fn's status, or TPU_INVALID_ARGUMENT for an
 * output fn left NULL) outputs are unchanged and what fn set is released. A NULL
 * input is TPU_INVALID_ARGUMENT naming it. */
typedef tpu_status (*tpu_host_tensors_fn)(int replica_id, tpu_tensor *const *inputs,
                                          int num_inputs, tpu_tensor **outputs,
                                          int num_outputs, void *user_data);
TPU_API tpu_status tpu_outside_compilation_tensors(tpu_replica_context *ctx,
                                                   tpu_host_tensors_fn fn, void *user_data,
                                                   tpu_tensor *const *inputs, int num_inputs,
                                                   tpu_tensor **outputs, int num_outputs);

#ifdef __cplusplus
}
#endif

#endif /* TPURT_REPLICATE_H */
