// The collectives of one step whose participants live on several tasks. A participant
// is (replica r, logical core c), numbered r * k + c for k cores per replica (k = 1:
// the replicas); the cores of one replica may sit on different tasks. This task's
// participants meet in the in-process rendezvous (over local ranks); the first of
// them, the leader, then runs the exchange with the other tasks through the transport
// and writes every local member's result, while the others wait for it.
//
// Results are bit-identical to a single process. The algorithms of the exchange, one
// per file, and the tables that choose among them are cluster_algorithms.h's: the
// log-round, direct and posted gathers; the offload (MPI), staged-window, gathered,
// chained and sliced reductions. Permute, broadcast and barrier are here.
//
// One verdict (DESIGN.md): before any participant returns from a collective, every
// task knows how every other task's participants met it. The leader of each task (or,
// when this task's participants failed to meet, the first of them to fail) sends
// every other task a ballot: the descriptor digest its participants agreed on, or the
// failure they got (code, culprit, and the message as they got it). Every task decides
// the same verdict from the same ballots: a task's failure (the lowest task's, an
// abort only if there is nothing else), else, when descriptors differ anywhere, the
// disagreement worded from every participant's descriptor as one process words it.
// A failed verdict ends the step here as one process's failure would.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "collectives/cluster_context.h"
#include "collectives/communicator.h"
#include "core/deadline.h"
#include "core/function_ref.h"
#include "net/collective_offload.h"
#include "net/transport.h"

namespace tpurt {
struct Descriptor;

class ClusterCommunicator : public Communicator {
 public:
  // task_of_participant: every participant's task (R * k entries); this task's
  // participants are the local ranks in increasing order. Every call takes a
  // participant id and groups of participant ids. Another task learns of this task's
  // failed step from the transport's end of the step (net::Transport::end_step).
  // private_results: as Communicator's; otherwise a task's members of a group share
  // one result buffer for all-reduce, all-gather and broadcast above kInlineBytes.
  // cores_per_replica: k (task_of_participant has a multiple of k entries).
  ClusterCommunicator(std::vector<int> task_of_participant, int task_id, net::Transport* transport,
                      int64_t timeout_ms, int num_cpus, bool private_results = false,
                      int cores_per_replica = 1);
  ~ClusterCommunicator() override;

  int num_participants() const { return cx_.num_participants(); }
  const std::vector<int>& task_of_participant() const { return cx_.task_of(); }
  const std::vector<int>& local_participants() const { return cx_.local_participants(); }
  // "task 1 (replicas 2, 3)", or with several cores per replica "task 1 (replica 2
  // core 0, replica 3 core 1)", for messages.
  std::string describe_task(int task) const;

  void reset(const int* cpu_of_rank = nullptr) override;
  void set_call_timeout(int rank, int64_t timeout_ms) override;
  void abort(int participant, tpu_status code, const std::string& message) override;
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
  // Point to point: each task's leader sends each other task only the messages for
  // its participants, each its own size (all_to_all_bytes.cc).
  std::vector<std::vector<uint8_t>> all_to_all_bytes(int rank, int participants,
                                                     const std::vector<std::vector<uint8_t>>& out) override;

 private:
  int local_rank(int participant) const {
    if (participant < 0 || participant >= num_participants() || cx_.local_index(participant) < 0)
      not_local(participant);
    return cx_.local_index(participant);
  }
  [[noreturn]] void not_local(int participant) const;
  // The step's failure as the tasks agreed on it.
  struct Verdict {
    tpu_status code = TPU_OK;
    int origin = -1;  // the participant whose own error it is, or -1
    std::string message;
  };
  // Validates on this participant; a failure fails the whole step, so peers blocked in
  // the same collective learn of it at once (and, through settle, every task).
  template <typename Fn>
  void guard(int lr, int participant, Fn&& checks);
  // guard for the collectives defined in other files.
  void guard_ref(int lr, int participant, FunctionRef<void()> checks);
  // This task's ballot for collective seq (code TPU_OK: its participants agreed on
  // their descriptors; mismatch: they disagreed), exchanged with every task of the
  // step; returns the verdict every task reaches. Throws what the exchange throws (a
  // task that never votes: its end of the step, a lost link, the deadline).
  Verdict vote(uint64_t seq, tpu_status code, int origin, const std::string& message, bool mismatch,
               int64_t timeout_ms);
  // A participant's collective seq failed here with `local`: the first to fail votes,
  // the others wait for its verdict; throws the verdict (the participant it names as
  // origin gets its own error, as in one process).
  [[noreturn]] void settle(int participant, uint64_t seq, const Error& local);
  // A local participant's collective deadline.
  int64_t timeout_of(int lr);
  // Whether the tasks vote (one verdict): always but over an offload (MPI) that cannot
  // keep a vote apart from the collective's data (a plugin without vote()).
  bool votes() const { return cx_.offload() == nullptr || cx_.offload()->votes(); }
  // A ballot may come this long after the voter's own deadline (the task that waits
  // for a late participant votes at its deadline).
  static int64_t grace_ms(int64_t timeout_ms) { return std::min<int64_t>(std::max<int64_t>(timeout_ms / 4, 100), 2000); }
  // A timeout and its grace (saturating: a timeout past the clock's range stays none).
  static int64_t with_grace(int64_t timeout_ms) { return add_timeouts_ms(timeout_ms, grace_ms(timeout_ms)); }
  // How long a task's other participants wait for the leader: its vote and its
  // exchange, each with grace, and a second more.
  static int64_t leader_bound(int64_t timeout_ms) {
    return add_timeouts_ms(add_timeouts_ms(with_grace(timeout_ms), with_grace(timeout_ms)), 1000);
  }
  Groups groups_of(const tpu_group_assignment* groups, Descriptor* desc) const;
  // The participant whose result buffer `rank` shares: the first member of its group
  // on this task, when results are shared and its group has another member here;
  // else -1. Such a participant allocates no output: the leader writes the first one's.
  int shares_with(int rank, const Groups& g, size_t bytes) const;
  // Meets the local participants (after the caller validated), lets the leader run
  // `leader` and waits for it. out: this participant's result (for one that shares,
  // a handle on the first member's is made here); call.output of such a one is NULL.
  // fold: the groups, when every member's result depends on every member's input
  // (then a task whose data exchange reaches every task needs no separate vote: its
  // peers' data, or their ballots instead, are theirs); else nullptr.
  void run(int rank, const Descriptor& desc, const Tensor* x, Tensor** out, int share_with,
           const Groups* fold, FunctionRef<void(ClusterCall&)> leader) {
    run(rank, desc, x ? x->data : nullptr, x ? x->byte_size : 0, *out ? (*out)->data : nullptr, out,
        share_with, fold, leader);
  }
  // As above with the leader's input and output (call.input, call.output) given
  // apart from tensors: input of `bytes`, output (out: the result handle, or NULL).
  void run(int rank, const Descriptor& desc, const void* input, size_t bytes, void* output, Tensor** out,
           int share_with, const Groups* fold, FunctionRef<void(ClusterCall&)> leader);
  // Whether collective `desc` over groups g, of `bytes` a participant, can fold its
  // vote into its data exchange: every row spans every task of the step, and every
  // wait of the exchange notices a peer's vote (not MPI's offload, nor shared windows).
  bool folds(const Groups* g, size_t bytes) const;
  Tensor* reduce_impl(int rank, const Tensor* x, tpu_reduce_op op, const tpu_group_assignment* groups,
                      bool bf16_wire);
  Tensor* scatter_impl(int rank, const Tensor* x, tpu_reduce_op op, int axis,
                       const tpu_group_assignment* groups, bool bf16_wire);

  ClusterContext cx_;
  std::vector<int32_t> all_;  // the default group: every participant in order
  uint64_t all_hash_ = 0;
  std::vector<int64_t> call_timeout_ms_;  // by local rank
  std::unique_ptr<ClusterCall> call_;  // the leader's, reused (its vectors keep their capacity)
  // The step's verdict: claimed by the first participant to fail before its task voted
  // (voted_seq_: the last collective the leader voted on), decided once known.
  std::mutex verdict_mu_;
  std::condition_variable verdict_cv_;
  bool claimed_ = false;
  bool decided_ = false;
  uint64_t voted_seq_ = 0;
  Verdict verdict_;
};

}  // namespace tpurt
