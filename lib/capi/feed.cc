// C API: infeed and outfeed queues.
#include "capi/api.h"
#include "capi/handles.h"
#include "runtime/feed.h"
#include "runtime/replica_context.h"
#include "runtime/system.h"

using namespace tpurt;


namespace {

template <typename Queue>
tpu_status create(const char* kind, tpu_system* system, int num_replicas, int num_elements,
                  const tpu_dtype* dtypes, const tpu_shape* shapes, int capacity, Queue** out) {
  return guarded([&] {
    system_of(system);
    require_not_null(out, "out");
    std::unique_ptr<FeedQueue> q(
        new FeedQueue(system->impl, kind, num_replicas, num_elements, dtypes, shapes, capacity));
    *out = new Queue(q.get());
    q.release();  // the handle holds the queue's first reference
  });
}

template <typename Queue>
FeedQueue& queue_of(Queue* queue) {
  require_not_null(queue, "queue");
  return *queue->impl;
}

// NULL is accepted; a handle that is not a live queue of this type is not freed. The
// handle goes; the queue goes with its last reference (a step's infeed stage keeps
// it). From inside a computation the release is refused and the handle stays: other
// replicas may be blocked in a dequeue or enqueue on it, which hold no reference.
template <typename Queue>
tpu_status release_queue(Queue* queue, const char* fn) {
  if (queue == nullptr) return TPU_OK;
  return guarded([&] {
    require_not_null(queue, "queue");
    if (in_user_code())
      fail(TPU_FAILED_PRECONDITION, fn,
           " must not be called from inside a computation: a running step may be using the "
           "queue; the queue stays valid, release it after the step returns");
    delete queue;
  });
}

// A replica's side of a queue: its step's communicator, so that an abort ends waits.
const Communicator& replica_side(const tpu_replica_context* ctx, const FeedQueue& queue) {
  const Communicator& comm = step_communicator(ctx);
  if (ctx->system != &queue.system())
    invalid_argument("the queue belongs to another TPU system than the replica");
  return comm;
}

}  // namespace

TPU_EXPORT tpu_status tpu_infeed_queue_create(tpu_system* system, int num_replicas,
                                              int num_elements, const tpu_dtype* dtypes,
                                              const tpu_shape* shapes, int capacity,
                                              tpu_infeed_queue** out) {
  return create("infeed", system, num_replicas, num_elements, dtypes, shapes, capacity, out);
}

TPU_EXPORT tpu_status tpu_infeed_queue_release(tpu_infeed_queue* queue) {
  return release_queue(queue, "tpu_infeed_queue_release");
}

TPU_EXPORT tpu_status tpu_infeed_queue_set_shard_dimensions(tpu_infeed_queue* queue,
                                                            const int* shard_dimensions,
                                                            int num_elements) {
  return guarded([&] { queue_of(queue).set_shard_dimensions(shard_dimensions, num_elements); });
}

TPU_EXPORT tpu_status tpu_infeed_enqueue(tpu_infeed_queue* queue, int replica,
                                         tpu_tensor* const* tuple, int num_elements) {
  return guarded([&] { queue_of(queue).push(replica, tuple, num_elements, nullptr); });
}

TPU_EXPORT tpu_status tpu_infeed_dequeue(tpu_replica_context* ctx, tpu_infeed_queue* queue,
                                         tpu_tensor** tuple, int num_elements) {
  return guarded([&] {
    FeedQueue& q = queue_of(queue);
    const Communicator& comm = replica_side(ctx, q);
    q.pop(ctx->replica_id, tuple, num_elements, &comm);
  });
}

TPU_EXPORT tpu_status tpu_outfeed_queue_create(tpu_system* system, int num_replicas,
                                               int num_elements, const tpu_dtype* dtypes,
                                               const tpu_shape* shapes, int capacity,
                                               tpu_outfeed_queue** out) {
  return create("outfeed", system, num_replicas, num_elements, dtypes, shapes, capacity, out);
}

TPU_EXPORT tpu_status tpu_outfeed_queue_release(tpu_outfeed_queue* queue) {
  return release_queue(queue, "tpu_outfeed_queue_release");
}

TPU_EXPORT tpu_status tpu_outfeed_enqueue(tpu_replica_context* ctx, tpu_outfeed_queue* queue,
                                          tpu_tensor* const* tuple, int num_elements) {
  return guarded([&] {
    FeedQueue& q = queue_of(queue);
    const Communicator& comm = replica_side(ctx, q);
    q.push(ctx->replica_id, tuple, num_elements, &comm);
  });
}

TPU_EXPORT tpu_status tpu_outfeed_dequeue(tpu_outfeed_queue* queue, int replica,
                                          tpu_tensor** tuple, int num_elements) {
  return guarded([&] { queue_of(queue).pop(replica, tuple, num_elements, nullptr); });
}
