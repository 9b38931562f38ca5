// The collectives of one step whose replicas live on several tasks. The replicas of
// this task meet in the in-process rendezvous (over local ranks); the first of them,
// the leader, then runs the exchange with the other tasks through the transport and
// writes every local member's result, while the others wait for it.
//
// Results are bit-identical to a single process: a reduction folds every member's
// input in member order. Where the order cannot change the bits (integer and bool
// sums and products, which wrap; min and max) each task first reduces its own
// members in memory and sends one partial; the elements are split among the tasks of
// a group (each reduces its slice and sends it to the others: reduce-scatter, then
// all-gather, pairwise). Floating-point reductions whose tasks hold several members
// each pass the fold along the tasks instead (reduce_chain): each folds its members
// in memory onto the fold so far, so a task sends one partial, not one input per
// member. The other collectives send each task the inputs it needs.
//
// A transport that runs collectives itself (net::CollectiveOffload: MPI) takes the
// all-reduces of rows whose order cannot matter here: one member per task (the
// engine's order among the tasks is its own, so floating-point results may differ in
// bits from one process's: docs/MPI.md), or exact reductions, each task's members
// reduced in memory first. The others keep the exact-order path above. Its
// reduce-scatter takes rows of one member per task in task order whose blocks are
// contiguous; other reduce-scatters of such rows are its all-reduces, each member's
// block copied out.
//
// Over shared memory small collectives (every task's post of all its members'
// inputs within net::PostedGather's limit, and for reductions all of a row's inputs
// within kGatherReduceBytes) are gathers of posts: each task posts its members'
// inputs once and copies those of the tasks it shares rows with out of their memory,
// then reduces or assembles every row in member order as above.
//
// Over shared memory (net::SharedWindows, every task of the row mapped) large
// all-reduces of such rows are staged through the tasks' windows instead: each task
// copies its input (or partial) into its window, reduces its slice reading every
// window in member order (so the bits stay a single process's), and copies the
// slices out of the owners' windows; zero-byte exchanges are the barriers.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "collectives/communicator.h"
#include "core/function_ref.h"
#include "net/transport.h"

namespace tpurt {
namespace net {
class CollectiveOffload;
class PostedGather;
class SharedWindows;
}

struct Descriptor;

class ClusterCommunicator : public Communicator {
 public:
  // task_of_replica: every replica's task; this task's replicas are the local ranks
  // in increasing replica order. Another task learns of this task's failed step from
  // the transport's end of the step (net::Transport::end_step).
  // private_results: as Communicator's; otherwise a task's members of a group share
  // one result buffer for all-reduce, all-gather and broadcast above kInlineBytes.
  ClusterCommunicator(std::vector<int> task_of_replica, int task_id, net::Transport* transport,
                      int64_t timeout_ms, int num_cpus, bool private_results = false);
  ~ClusterCommunicator() override;

  int num_replicas() const { return static_cast<int>(task_of_replica_.size()); }
  const std::vector<int>& task_of_replica() const { return task_of_replica_; }
  const std::vector<int>& local_replicas() const { return local_replicas_; }
  // "task 1 (replicas 2, 3)" for messages.
  std::string describe_task(int task) const;

  void set_call_timeout(int rank, int64_t timeout_ms) override;
  void abort(int replica, tpu_status code, const std::string& message) override;
  void depart(int rank) override;

  Tensor* all_reduce(int rank, const Tensor* x, tpu_reduce_op op,
                     const tpu_group_assignment* groups, bool bf16_wire) override;
  Tensor* all_gather(int rank, const Tensor* x, int axis, const tpu_group_assignment* groups) override;
  Tensor* reduce_scatter(int rank, const Tensor* x, tpu_reduce_op op, int axis,
                         const tpu_group_assignment* groups, bool bf16_wire) override;
  Tensor* all_to_all(int rank, const Tensor* x, int concat_dim, int split_dim, int split_count,
                     const tpu_group_assignment* groups) override;
  Tensor* collective_permute(int rank, const Tensor* x, const int32_t* pairs, int num_pairs) override;
  Tensor* broadcast(int rank, const Tensor* x, int root, const tpu_group_assignment* groups) override;
  void barrier(int rank) override;

 // The tasks of a group row, sorted, and each task's members in member order.
  struct TaskSplit {
    std::vector<int> tasks;
    std::vector<std::vector<int>> members;  // by position in tasks: positions in the row
    int mine = -1;                          // this task's position in tasks, or -1
  };

 private:
  struct Call;
  // The rows of a group assignment (NULL: every replica in one group).
  struct Groups {
    const int32_t* ids;
    int num_groups;
    int group_size;
  };

  int local_rank(int replica) const {
    if (replica < 0 || replica >= num_replicas() || local_rank_[replica] < 0) not_local(replica);
    return local_rank_[replica];
  }
  [[noreturn]] void not_local(int replica) const;
  Groups groups_of(const tpu_group_assignment* groups, Descriptor* desc) const;
  // The replica whose result buffer `rank` shares: the first member of its group
  // on this task, when results are shared and its group has another member here;
  // else -1. Such a replica allocates no output: the leader writes the first one's.
  int shares_with(int rank, const Groups& g, size_t bytes) const;
  // Meets the local replicas (after the caller validated), lets the leader run
  // `leader` and waits for it. out: this replica's result (for a replica that
  // shares, a handle on the first member's is made here); call.output of such a
  // replica is NULL.
  void run(int rank, const Descriptor& desc, const Tensor* x, Tensor** out, int share_with,
           FunctionRef<void(Call&)> leader);
  // One collective's transfers with the other tasks; tasks: those of the group, for
  // large transfers to go in rounds (NULL: all at once).
  void exchange(Call& call, std::vector<net::Send>& sends, std::vector<net::Recv>& recvs,
                const std::vector<int>* tasks = nullptr);
  void exchange_once(Call& call, std::vector<net::Send>& sends, std::vector<net::Recv>& recvs);
  // All-reduces one row through offload_ into result when it applies (see the top);
  // false: the caller reduces it.
  bool offload_row(Call& call, const int32_t* row, int size, const TaskSplit& split, const Tensor* x,
                   tpu_reduce_op op, char* result);
  // All-reduces one row through the shared windows into result when it applies (see
  // the top); false: the caller reduces it. tag: the barriers' tag.
  bool staged_row(Call& call, const int32_t* row, int size, const TaskSplit& split, const Tensor* x,
                  tpu_reduce_op op, char* result, uint32_t tag);
  // Reduce-scatters one row through offload_ straight into this task's member's
  // output when it applies: one member per task, in task order, and blocks that are
  // contiguous in the input (the caller knows); false: the caller reduces it.
  bool offload_scatter_row(Call& call, const int32_t* row, int size, const TaskSplit& split,
                           const Tensor* x, tpu_reduce_op op);
  // Reduces every group with members here. into_output: the result goes into the
  // group's first local member's output (else into a buffer of ours); deliver then
  // gives it to each local member. scatter_blocks: a reduce-scatter whose members'
  // blocks are contiguous in the input, which offload_scatter_row may take.
  void reduce_groups(Call& call, const Groups& g, const Tensor* x, tpu_reduce_op op,
                     bool into_output,
                     FunctionRef<void(int member, const char* result)> deliver,
                     bool scatter_blocks = false);
  // Reduces one row by passing the fold along its runs of members (each task folds its
  // own members onto what the previous run's task sends, in member order, so the
  // bits are a single process's), in pieces, pipelined; the last run's task then
  // spreads the result along the row's tasks. Tags: tag, and tag + 1 for the spread.
  void reduce_chain(Call& call, const int32_t* row, int size, const std::vector<int>& tasks,
                    const Tensor* x, tpu_reduce_op op, char* result, uint32_t tag);
  // Gives every task of a row every member's input (inputs: by position in the row)
  // in ceil(log2 tasks) rounds, for small inputs.
  void gather_in_rounds(Call& call, const int32_t* row, const TaskSplit& split, size_t bytes,
                        uint32_t tag, const void** inputs);
  void gather_groups(Call& call, const Groups& g, size_t bytes,
                     FunctionRef<void(const int32_t* row, int size, const void* const* inputs)> use);
  // Whether a gather of `bytes` per member goes by posts (the same answer on every task).
  bool posts_take(size_t bytes) const;
  // The gather of every row with members here through posts_ (posts_take(bytes)):
  // use(row, size, inputs) per such row, inputs by position in the row.
  void gather_posted(Call& call, const Groups& g, size_t bytes,
                     FunctionRef<void(const int32_t* row, int size, const void* const* inputs)> use);
  Tensor* reduce_impl(int rank, const Tensor* x, tpu_reduce_op op, const tpu_group_assignment* groups,
                      bool bf16_wire);
  Tensor* scatter_impl(int rank, const Tensor* x, tpu_reduce_op op, int axis,
                       const tpu_group_assignment* groups, bool bf16_wire);

  const std::vector<int> task_of_replica_;
  const int task_id_;
  net::Transport* const transport_;
  net::CollectiveOffload* const offload_;  // the transport's, or nullptr
  net::SharedWindows* const windows_;      // the transport's, or nullptr
  net::PostedGather* const posts_;         // the transport's, or nullptr
  int most_replicas_on_a_task_ = 0;
  std::vector<int> index_on_task_;   // by replica: its position among its task's replicas
  std::vector<int> replicas_on_task_;  // by task
  // gather_posted()'s: what this task posts, what it copies from each peer (post_at_:
  // where each task's post starts there, by task; SIZE_MAX: not read), the transfers.
  std::vector<char> post_out_, post_in_;
  std::vector<size_t> post_at_;
  std::vector<net::Recv> post_from_;
  std::vector<int> post_rows_;  // the groups with members here
  uint64_t post_plan_digest_ = 0;  // the collective the plan above is for
  const int32_t* post_plan_ids_ = nullptr;  // nullptr: no plan
  std::vector<const void*> post_inputs_;
  std::vector<int> local_replicas_;
  std::vector<int> local_rank_;  // by replica; -1 elsewhere
  std::vector<int32_t> all_replicas_;
  uint64_t all_replicas_hash_ = 0;
  std::vector<int64_t> call_timeout_ms_;  // by local rank
  // The leader's buffers, grown as needed and never cleared: a collective of the
  // same size again allocates and faults nothing.
  struct Buffer {
    std::unique_ptr<char[]> data;
    size_t capacity = 0;
  };
  static void grow(Buffer* buffer, size_t bytes);
  Buffer received_buffer_, partial_buffer_, result_buffer_;
  // What a transport's wait calls: check_ throws the step's failure; namer_ words a task.
  const std::function<void()> check_;
  const std::function<std::string(int)> namer_;
  std::unique_ptr<Call> call_;  // the leader's, reused (its vectors keep their capacity)
  std::vector<char> gather_staging_;
};

}  // namespace tpurt
