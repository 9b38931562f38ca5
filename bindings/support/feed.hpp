// Binding-support layer (../tpurt_binding.hpp): InfeedQueue and OutfeedQueue. Their
// constructors take a TpuSystem, so they are defined after it, in system.hpp.
#ifndef TPURT_BINDING_SUPPORT_FEED_HPP
#define TPURT_BINDING_SUPPORT_FEED_HPP

#include "tensor.hpp"

namespace tpurt {

// ---- Feeds -----------------------------------------------------------------------

class TpuSystem;

class InfeedQueue {
 public:
  InfeedQueue(const TpuSystem& system, int numReplicas, const std::vector<int32_t>& dtypes,
              const std::vector<Shape>& shapes, int capacity);
  InfeedQueue(const InfeedQueue&) = delete;
  InfeedQueue& operator=(const InfeedQueue&) = delete;
  ~InfeedQueue() { close(); }
  void close() {
    if (q_) tpu_infeed_queue_release(q_);
    q_ = nullptr;
  }
  int numElements() const { return num_elements_; }
  void enqueue(int replica, const std::vector<Tensor>& tuple) {
    std::vector<tpu_tensor*> h = Tensor::handles(tuple);
    detail::check(tpu_infeed_enqueue(handle(), replica, h.data(), detail::int_or_throw(h.size(), "tuple")));
  }
  // TensorFlow's InfeedQueue.set_shard_dimensions: the dimension each tuple element is
  // cut along over the cores of a replica (-1: whole to every core; default 0).
  void setShardDimensions(const std::vector<int32_t>& dims) {
    detail::check(tpu_infeed_queue_set_shard_dimensions(handle(), dims.data(),
                                                        detail::int_or_throw(dims.size(), "shard dimensions")));
  }
  tpu_infeed_queue* handle() const {
    detail::check_handle(q_, "the infeed queue");
    return q_;
  }

 private:
  tpu_infeed_queue* q_ = nullptr;
  int num_elements_ = 0;
};

class OutfeedQueue {
 public:
  OutfeedQueue(const TpuSystem& system, int numReplicas, const std::vector<int32_t>& dtypes,
               const std::vector<Shape>& shapes, int capacity);
  OutfeedQueue(const OutfeedQueue&) = delete;
  OutfeedQueue& operator=(const OutfeedQueue&) = delete;
  ~OutfeedQueue() { close(); }
  void close() {
    if (q_) tpu_outfeed_queue_release(q_);
    q_ = nullptr;
  }
  int numElements() const { return num_elements_; }
  std::vector<Tensor> dequeue(int replica) {
    std::vector<tpu_tensor*> h(static_cast<size_t>(num_elements_), nullptr);
    detail::check(tpu_outfeed_dequeue(handle(), replica, h.data(), num_elements_));
    return Tensor::adopt(h);
  }
  tpu_outfeed_queue* handle() const {
    detail::check_handle(q_, "the outfeed queue");
    return q_;
  }

 private:
  tpu_outfeed_queue* q_ = nullptr;
  int num_elements_ = 0;
};

}  // namespace tpurt

#endif  // TPURT_BINDING_SUPPORT_FEED_HPP
