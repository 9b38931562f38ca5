/* tpurt/feed.h: infeed and outfeed queues between the host and the replicas.
 *
 * A queue carries tuples of `num_elements` tensors with fixed per-element dtypes and
 * shapes, one FIFO per replica. The host enqueues infeed tuples for a replica and
 * the replica dequeues its own inside its computation; outfeed goes the other way.
 * Each FIFO holds at most `capacity` tuples; a full (enqueue) or empty (dequeue)
 * FIFO blocks up to the deadline, then TPU_DEADLINE_EXCEEDED: inside a computation
 * the step's (tpu_step_options.collective_timeout_ms, else the system's), on the
 * host the system's collective deadline.
 * A dequeue inside a computation also returns TPU_ABORTED when the step fails.
 * Queue operations are safe from any thread. A queue must not outlive its system.
 *
 * Several cores per replica (tpu_step_options.device_assignment with
 * num_cores_per_replica k > 1): as TensorFlow's InfeedQueue shards each tuple element
 * (tpu_feed.py, tpu_sharding.py), the host enqueues a replica's whole tuple, and in
 * the step logical core c of the replica gets piece c of element e cut k equal ways
 * along the element's shard dimension (0 unless tpu_infeed_queue_set_shard_dimensions
 * says otherwise), or the whole element when its shard dimension is -1. An element
 * that cannot be cut so (rank <= its shard dimension, or that dimension not a
 * multiple of k) fails the step before it runs with TPU_INVALID_ARGUMENT naming the
 * element, its shape and the dimension. The replica's logical core 0 dequeues the
 * tuple, so it must run on the task that serves the replica; its other cores may run
 * on other tasks. They wait for the tuple up to twice the step's deadline, so that an
 * empty FIFO fails the step as logical core 0's dequeue timing out.
 *
 * Many tasks: as TensorFlow feeds each host's cores from that host, each task creates
 * the queue (for the step's replicas of all tasks) and serves the replicas it runs:
 * replica r belongs to task r / (cores per task), where a step without a device
 * assignment runs it. Enqueueing infeed for, or dequeueing outfeed of, another task's
 * replica is TPU_INVALID_ARGUMENT naming it and its task; so is a replica's own call
 * when a device assignment runs it on another task than that.
 */
#ifndef TPURT_FEED_H
#define TPURT_FEED_H

#include "common.h"
#include "replicate.h"
#include "system.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* tpu_infeed_queue is declared in tpurt/replicate.h. */
typedef struct tpu_outfeed_queue tpu_outfeed_queue;

/* num_replicas: 1 to the cores of all tasks. dtypes[num_elements] must be infeed
 * types (bool, int32, int64, bfloat16, float32, complex64, uint32;
 * TPU_INVALID_ARGUMENT naming the element otherwise);
 * shapes[num_elements] fully known. capacity 0 means 16. */
TPU_API tpu_status tpu_infeed_queue_create(tpu_system *system, int num_replicas,
                                           int num_elements, const tpu_dtype *dtypes,
                                           const tpu_shape *shapes, int capacity,
                                           tpu_infeed_queue **out);
/* NULL is accepted. From inside a computation it is refused (TPU_FAILED_PRECONDITION:
 * a step may be using the queue) and the queue stays valid. */
TPU_API tpu_status tpu_infeed_queue_release(tpu_infeed_queue *queue);

/* TensorFlow's InfeedQueue.set_shard_dimensions: shard_dimensions[num_elements] (one
 * per tuple element, num_elements the queue's, TPU_INVALID_ARGUMENT otherwise) say
 * along which dimension a step with several cores per replica cuts each element;
 * each is -1 (the whole element to every core) or in [0, TPU_MAX_RANK). The default
 * is 0 for every element. A step uses the dimensions set when it begins; a step with
 * one core per replica ignores them. Safe to call concurrently with steps and with
 * the queue's other functions. */
TPU_API tpu_status tpu_infeed_queue_set_shard_dimensions(tpu_infeed_queue *queue,
                                                         const int *shard_dimensions,
                                                         int num_elements);

/* Host side: enqueues tuple[0..num_elements) for `replica` (each tensor retained).
 * A tensor of the wrong dtype or shape is rejected (TPU_INVALID_ARGUMENT naming the
 * element, expected and actual), and nothing is enqueued. */
TPU_API tpu_status tpu_infeed_enqueue(tpu_infeed_queue *queue, int replica,
                                      tpu_tensor *const *tuple, int num_elements);

/* Replica side: dequeues this replica's next tuple into tuple[0..num_elements)
 * (new references). */
TPU_API tpu_status tpu_infeed_dequeue(tpu_replica_context *ctx, tpu_infeed_queue *queue,
                                      tpu_tensor **tuple, int num_elements);

TPU_API tpu_status tpu_outfeed_queue_create(tpu_system *system, int num_replicas,
                                            int num_elements, const tpu_dtype *dtypes,
                                            const tpu_shape *shapes, int capacity,
                                            tpu_outfeed_queue **out);
/* NULL is accepted. From inside a computation it is refused (TPU_FAILED_PRECONDITION:
 * a step may be using the queue) and the queue stays valid. */
TPU_API tpu_status tpu_outfeed_queue_release(tpu_outfeed_queue *queue);

/* Replica side: enqueues a tuple for the host (checked like tpu_infeed_enqueue). */
TPU_API tpu_status tpu_outfeed_enqueue(tpu_replica_context *ctx, tpu_outfeed_queue *queue,
                                       tpu_tensor *const *tuple, int num_elements);

/* Host side: dequeues replica `replica`'s next tuple (new references). */
TPU_API tpu_status tpu_outfeed_dequeue(tpu_outfeed_queue *queue, int replica,
                                       tpu_tensor **tuple, int num_elements);

#ifdef __cplusplus
}
#endif

#endif /* TPURT_FEED_H */
