// Infeed and outfeed: one bounded FIFO of tuples per replica, with fixed per-element
// dtypes and shapes. In a multi-task system each task's queue serves the replicas that
// task runs (replica r on task r / cores per task, as without a device assignment). Waits are bounded by the system's collective deadline; a
// replica's wait also ends when its step is aborted.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "tpurt/feed.h"

namespace tpurt {

class Communicator;
class System;

class FeedQueue {
 public:
  // kind names the queue in messages ("infeed", "outfeed"). Throws
  // TPU_INVALID_ARGUMENT for bad counts, dtypes or shapes.
  FeedQueue(std::shared_ptr<System> system, const char* kind, int num_replicas,
            int num_elements, const tpu_dtype* dtypes, const tpu_shape* shapes, int capacity);
  virtual ~FeedQueue();  // releases the queued tensors
  FeedQueue(const FeedQueue&) = delete;
  FeedQueue& operator=(const FeedQueue&) = delete;

  // Shared by the C handle (whose release is unref) and the steps that dequeue from
  // it: a late participant's step keeps the queue it reads.
  void ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  static void unref(FeedQueue* queue) {
    if (queue && queue->refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete queue;
  }

  System& system() const { return *system_; }
  int num_replicas() const { return num_replicas_; }
  int num_elements() const { return num_elements_; }
  tpu_dtype dtype(int element) const { return dtypes_[element]; }
  const tpu_shape& shape(int element) const { return shapes_[element]; }

  // TensorFlow's InfeedQueue.set_shard_dimensions: the dimension each tuple element is
  // split along over the cores of a replica (-1: every core gets it whole). Checks
  // the count and each value's range (TPU_INVALID_ARGUMENT); whether an element can
  // be split k ways is the step's check (check_shardable), as in tpu_sharding.py.
  void set_shard_dimensions(const int* dims, int num_elements);
  // A snapshot of the shard dimensions (all 0 until set).
  std::vector<int> shard_dimensions() const;
  // TPU_INVALID_ARGUMENT unless every element (shard dimension dims[e]) can be split
  // `cores` equal ways: tpu_sharding.py's get_sharded_shape.
  void check_shardable(const std::vector<int>& dims, int cores) const;

  // Checks every element, then appends the tuple (retained) to the replica's FIFO,
  // waiting while it is full. step: the caller's communicator when a replica
  // enqueues (its abort ends the wait), else nullptr.
  void push(int replica, tpu_tensor* const* tuple, int num_elements, const Communicator* step);
  // Takes the replica's oldest tuple (the references move to the caller), waiting
  // while the FIFO is empty.
  void pop(int replica, tpu_tensor** tuple, int num_elements, const Communicator* step);

 private:
  void check_replica(int replica) const;
  int task_of(int replica) const;
  // TPU_INVALID_ARGUMENT for a replica another task serves. step: as in push.
  void check_task(int replica, bool enqueue, const Communicator* step) const;
  void check_count(int num_elements) const;
  // Waits until ready() under lock; throws on deadline, abort or shutdown.
  template <typename Ready>
  void wait(std::unique_lock<std::mutex>& lock, Ready&& ready, const Communicator* step,
            int replica, bool enqueue);

  const std::shared_ptr<System> system_;
  const std::string kind_;
  const int num_replicas_;
  const int num_elements_;
  const size_t capacity_;  // tuples per replica
  std::vector<tpu_dtype> dtypes_;
  std::vector<tpu_shape> shapes_;
  std::vector<int> shard_dims_;  // under mu_
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::deque<Tensor*>> fifos_;  // num_elements_ tensors per tuple
  std::atomic<int> refs_{1};
};

}  // namespace tpurt
