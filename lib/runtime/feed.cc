#include "runtime/feed.h"

#include <algorithm>
#include <chrono>

#include "collectives/communicator.h"
#include "core/deadline.h"
#include "core/dtype.h"
#include "core/wait.h"
#include "runtime/system.h"
#include "trace/trace.h"

namespace tpurt {
namespace {

constexpr int kDefaultCapacity = 16;

bool is_infeed_type(tpu_dtype d) {
  switch (d) {
    case TPU_BOOL:
    case TPU_INT32:
    case TPU_INT64:
    case TPU_BFLOAT16:
    case TPU_FLOAT:
    case TPU_COMPLEX64:
    case TPU_UINT32:
      return true;
    default:
      return false;
  }
}

}  // namespace

FeedQueue::FeedQueue(std::shared_ptr<System> system, const char* kind, int num_replicas,
                     int num_elements, const tpu_dtype* dtypes, const tpu_shape* shapes,
                     int capacity)
    : system_(std::move(system)),
      kind_(kind),
      num_replicas_(num_replicas),
      num_elements_(num_elements),
      capacity_(capacity == 0 ? kDefaultCapacity : static_cast<size_t>(capacity)) {
  system_->check_live();
  if (num_replicas <= 0 || num_replicas > system_->num_global_cores())
    invalid_argument("num_replicas is ", num_replicas, "; it must be in [1, ",
                     system_->num_global_cores(), "] (the number of cores",
                     system_->num_tasks() > 1 ? " of all tasks" : "", ")");
  if (num_elements <= 0)
    invalid_argument("num_elements is ", num_elements, "; a tuple needs at least one element");
  require_not_null(dtypes, "dtypes");
  require_not_null(shapes, "shapes");
  if (capacity < 0) invalid_argument("capacity is ", capacity, "; it must be >= 0 (0: ", kDefaultCapacity, ")");
  for (int e = 0; e < num_elements; ++e) {
    if (!is_infeed_type(dtypes[e]))
      invalid_argument(kind_, " tuple element ", e, ": ",
                       is_valid_dtype(dtypes[e]) ? dtype_name(dtypes[e]) : "unknown dtype",
                       " (", static_cast<int>(dtypes[e]),
                       ") is not a supported TPU infeed type (bool, int32, int64, bfloat16, "
                       "float32, complex64, uint32)");
    const tpu_shape& s = shapes[e];
    if (s.rank < 0 || s.rank > TPU_MAX_RANK)
      invalid_argument(kind_, " tuple element ", e, ": rank ", s.rank, " is outside [0, ",
                       TPU_MAX_RANK, "]");
    for (int d = 0; d < s.rank; ++d)
      if (s.dims[d] < 0)
        invalid_argument(kind_, " tuple element ", e, ": dimension ", d, " is ", s.dims[d],
                         "; shapes must be fully known");
    int64_t n;
    size_t bytes;
    check_shape(dtypes[e], s.dims, s.rank, &n, &bytes);
  }
  dtypes_.assign(dtypes, dtypes + num_elements);
  shapes_.assign(shapes, shapes + num_elements);
  shard_dims_.assign(num_elements, 0);  // tpu_sharding.py's _DEFAULT_SHARD_DIMENSION
  fifos_.resize(num_replicas);
}

void FeedQueue::set_shard_dimensions(const int* dims, int num_elements) {
  require_not_null(dims, "shard_dimensions");
  if (num_elements != num_elements_)
    invalid_argument("shard_dimensions has ", num_elements, " entries, but must have one per tuple element (",
                     num_elements_, ")");
  for (int e = 0; e < num_elements; ++e)
    if (dims[e] < -1 || dims[e] >= TPU_MAX_RANK)
      invalid_argument(kind_, " tuple element ", e, ": shard dimension ", dims[e],
                       " is outside [-1, ", TPU_MAX_RANK, ") (-1: the element goes whole to every core)");
  std::lock_guard<std::mutex> lock(mu_);
  shard_dims_.assign(dims, dims + num_elements);
}

std::vector<int> FeedQueue::shard_dimensions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shard_dims_;
}

void FeedQueue::check_shardable(const std::vector<int>& dims, int cores) const {
  if (cores == 1) return;  // one shard: nothing to split (get_sharded_shape)
  for (int e = 0; e < num_elements_; ++e) {
    const int d = dims[e];
    if (d < 0) continue;
    const tpu_shape& s = shapes_[e];
    if (s.rank <= d)
      invalid_argument(kind_, " tuple element ", e, ": shape ", shape_string(s.dims, s.rank),
                       " does not contain shard dimension ", d, ", so it cannot be split over the ",
                       cores, " cores of a replica (tpu_infeed_queue_set_shard_dimensions; -1 gives "
                       "every core the whole element)");
    if (s.dims[d] % cores != 0)
      invalid_argument(kind_, " tuple element ", e, ": shape ", shape_string(s.dims, s.rank),
                       " cannot be sharded ", cores, " ways along dimension ", d,
                       " (the cores of a replica)");
  }
}

FeedQueue::~FeedQueue() {
  for (auto& fifo : fifos_)
    for (Tensor* t : fifo) release(t);
}

void FeedQueue::check_replica(int replica) const {
  if (replica < 0 || replica >= num_replicas_)
    invalid_argument(kind_, " replica ", replica, " is out of range: the queue has ",
                     num_replicas_, " replicas");
}

int FeedQueue::task_of(int replica) const { return replica / system_->num_cores(); }

// As TensorFlow feeds each host's cores from that host: the host side serves only the
// replicas of this task, and a replica only reaches the FIFO its own task fills.
void FeedQueue::check_task(int replica, bool enqueue, const Communicator* step) const {
  const int task = task_of(replica), here = system_->task_id();
  if (task == here) return;
  if (step != nullptr)
    invalid_argument(kind_, " replica ", replica, " runs on task ", here,
                     " in this step, but the queue serves it from task ", task,
                     " (replica r belongs to task r / ", system_->num_cores(),
                     ", as without a device assignment)");
  const int first = here * system_->num_cores();
  const int last = std::min(first + system_->num_cores(), num_replicas_) - 1;
  invalid_argument(kind_, " replica ", replica, " runs on task ", task, ": task ", here,
                   enqueue ? " enqueues" : " dequeues", " only for its own replicas",
                   first > last    ? std::string(" (none)")
                   : first == last ? str_cat(" (replica ", first, ")")
                                   : str_cat(" (replicas ", first, " to ", last, ")"));
}

void FeedQueue::check_count(int num_elements) const {
  if (num_elements != num_elements_)
    invalid_argument(kind_, " tuple has ", num_elements, " elements but the queue's tuples have ",
                     num_elements_);
}

template <typename Ready>
void FeedQueue::wait(std::unique_lock<std::mutex>& lock, Ready&& ready, const Communicator* step,
                     int replica, bool enqueue) {
  const char* what = enqueue ? "enqueue" : "dequeue";
  if (ready()) return;
  trace::Span span(enqueue ? "outfeed wait" : "infeed wait", "feed");  // a participant's only
  // A replica's wait has its step's deadline (tpu_step_options); the host's the system's.
  const int64_t timeout_ms = step ? step->step_timeout_ms() : system_->config().collective_timeout_ms;
  const auto deadline = deadline_after(timeout_ms);
  // Aborts and shutdowns are polled: a replica must notice within a few ms.
  const auto slice = std::chrono::milliseconds(step ? 2 : 20);
  while (!ready()) {
    if (step && step->aborted())
      fail(TPU_ABORTED, kind_, " ", what, " for replica ", replica, " was aborted: the step failed");
    system_->check_live();
    const auto now = Clock::now();
    if (now >= deadline)
      fail(TPU_DEADLINE_EXCEEDED, kind_, " ", what, " for replica ", replica, " timed out after ",
           timeout_ms, " ms: the queue stayed ", enqueue ? "full" : "empty");
    cv_.wait_until(lock, std::min(now + slice, deadline));
  }
}

void FeedQueue::push(int replica, tpu_tensor* const* tuple, int num_elements,
                     const Communicator* step) {
  system_->check_live();
  check_replica(replica);
  check_task(replica, true, step);
  check_count(num_elements);
  require_not_null(tuple, "tuple");
  for (int e = 0; e < num_elements_; ++e) {
    const Tensor* t = tuple[e];
    if (t == nullptr) invalid_argument(kind_, " tuple element ", e, " is NULL");
    require_live(t, "tuple[", e, "]");
    if (t->dtype != dtypes_[e] || !has_shape(t, shapes_[e].dims, shapes_[e].rank))
      invalid_argument(kind_, " tuple element ", e, ": expected ", dtype_name(dtypes_[e]),
                       shape_string(shapes_[e].dims, shapes_[e].rank), ", got ", describe(t));
  }
  std::unique_lock<std::mutex> lock(mu_);
  std::deque<Tensor*>& fifo = fifos_[replica];
  wait(lock, [&] { return fifo.size() < capacity_ * num_elements_; }, step, replica, true);
  const size_t old_size = fifo.size();
  try {
    fifo.insert(fifo.end(), tuple, tuple + num_elements_);
  } catch (...) {  // out of memory: leave no partial tuple behind
    fifo.resize(old_size);
    throw;
  }
  for (int e = 0; e < num_elements_; ++e) retain(tuple[e]);
  cv_.notify_all();
}

void FeedQueue::pop(int replica, tpu_tensor** tuple, int num_elements, const Communicator* step) {
  system_->check_live();
  check_replica(replica);
  check_task(replica, false, step);
  check_count(num_elements);
  require_not_null(tuple, "tuple");
  std::unique_lock<std::mutex> lock(mu_);
  std::deque<Tensor*>& fifo = fifos_[replica];
  wait(lock, [&] { return !fifo.empty(); }, step, replica, false);
  for (int e = 0; e < num_elements_; ++e) {
    tuple[e] = fifo.front();
    fifo.pop_front();
  }
  cv_.notify_all();
}

}  // namespace tpurt
