// The collectives of one step whose replicas live on several tasks. The replicas of
// this task meet in the in-process rendezvous (over local ranks); the first of them,
// the leader, then runs the exchange with the other tasks through the transport and
// writes every local member's result, while the others wait for it.
//
// Results are bit-identical to a single process. The algorithms of the exchange, one
// per file, and the tables that choose among them are cluster_algorithms.h's: the
// log-round, direct and posted gathers; the offload (MPI), staged-window, gathered,
// chained and sliced reductions. Permute, broadcast and barrier are here.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "collectives/cluster_context.h"
#include "collectives/communicator.h"
#include "core/function_ref.h"
#include "net/transport.h"

namespace tpurt {
struct Descriptor;

class ClusterCommunicator : public Communicator {
 public:
  // task_of_replica: every replica's task; this task's replicas are the local ranks
  // in increasing replica order. Another task learns of this task's failed step from
  // the transport's end of the step (net::Transport::end_step).
  // private_results: as Communicator's; otherwise a task's members of a group share
  // one result buffer for all-reduce, all-gather and broadcast above kInlineBytes.
  // cores_per_replica: ranks are participants r * cores_per_replica + c.
  ClusterCommunicator(std::vector<int> task_of_replica, int task_id, net::Transport* transport,
                      int64_t timeout_ms, int num_cpus, bool private_results = false,
                      int cores_per_replica = 1);
  ~ClusterCommunicator() override;

  int num_replicas() const { return cx_.num_participants(); }
  const std::vector<int>& task_of_replica() const { return cx_.task_of(); }
  const std::vector<int>& local_replicas() const { return cx_.local_participants(); }
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

 private:
  int local_rank(int replica) const {
    if (replica < 0 || replica >= num_replicas() || cx_.local_index(replica) < 0) not_local(replica);
    return cx_.local_index(replica);
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
           FunctionRef<void(ClusterCall&)> leader);
  Tensor* reduce_impl(int rank, const Tensor* x, tpu_reduce_op op, const tpu_group_assignment* groups,
                      bool bf16_wire);
  Tensor* scatter_impl(int rank, const Tensor* x, tpu_reduce_op op, int axis,
                       const tpu_group_assignment* groups, bool bf16_wire);

  ClusterContext cx_;  // the participants are the replicas
  std::vector<int32_t> all_replicas_;
  uint64_t all_replicas_hash_ = 0;
  std::vector<int64_t> call_timeout_ms_;  // by local rank
  std::unique_ptr<ClusterCall> call_;  // the leader's, reused (its vectors keep their capacity)
};

}  // namespace tpurt
