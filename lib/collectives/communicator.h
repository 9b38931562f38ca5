// The collectives of one step's replicas in one process. The runtime owns one
// Communicator per replica count, resets it before each step, and aborts it when a
// replica fails; the C API's collective calls run on it from the replicas' threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "tpurt/collectives.h"

namespace tpurt {

class Rendezvous;
struct Descriptor;
struct Record;
enum class CollectiveKind : int32_t;

// FNV-1a of replica ids: what a group assignment contributes to a descriptor.
uint64_t hash_ids(const int32_t* ids, int64_t n);

class Communicator {
 public:
  // size: participants, (replica r, logical core c) as rank r * cores_per_replica + c;
  // timeout_ms: how long a participant waits for the others before
  // TPU_DEADLINE_EXCEEDED; num_cpus: decides spinning vs yielding; private_results:
  // every member gets its own copy of a result the group shares (all-reduce,
  // all-gather, broadcast) instead of one shared buffer. cores_per_replica only names
  // participants in messages ("replica R core C").
  Communicator(int size, int64_t timeout_ms, int num_cpus, bool private_results = false,
               int cores_per_replica = 1);
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int size() const;
  int cores_per_replica() const;

  // Prepares a new step: sequence numbers, departures and abort state start afresh.
  // No participant may be inside a collective. cpu_of_rank: the CPU each replica's
  // thread is pinned to, or NULL if the OS places them.
  virtual void reset(const int* cpu_of_rank = nullptr);
  // The step's collective deadline (from reset on), and one replica's for the calls
  // it makes next (0: the step's); the latter only from that replica's thread.
  virtual void set_step_timeout(int64_t timeout_ms);
  virtual void set_call_timeout(int rank, int64_t timeout_ms);
  virtual int64_t step_timeout_ms() const;

  // Fails the step on behalf of `replica` (-1: not a replica). Every participant
  // blocked in a collective, or entering one later in the step, throws TPU_ABORTED
  // "replica R failed: <message>". Thread-safe; the first call wins.
  virtual void abort(int replica, tpu_status code, const std::string& message);
  // Fails the step with the error of a collective's arguments that `participant`
  // found before meeting (a bad group mode or groups): every participant gets it as
  // "replica R: message" with its own code, as for the checks inside the collectives.
  void reject(int participant, const Error& error);
  virtual bool aborted() const;
  // The step's failure as participants get it, and the replica whose own error it
  // is (-1: an error of a collective itself, or none); false if the step has not
  // failed.
  virtual bool failure(int* origin, tpu_status* code, std::string* message) const;

  // Replica `rank` finished its computation. A participant waiting for it in a
  // collective fails at once (TPU_FAILED_PRECONDITION naming it) instead of waiting
  // for the deadline.
  virtual void depart(int rank);

  // The collectives. Each throws tpurt::Error; outputs are new handles. The members
  // of a group get handles on one shared buffer for all-reduce, all-gather and
  // broadcast inputs above kInlineBytes, unless private_results.
  virtual Tensor* all_reduce(int rank, const Tensor* x, tpu_reduce_op op,
                     const tpu_group_assignment* groups, bool bf16_wire);
  virtual Tensor* all_gather(int rank, const Tensor* x, int axis, const tpu_group_assignment* groups);
  virtual Tensor* reduce_scatter(int rank, const Tensor* x, tpu_reduce_op op, int axis,
                         const tpu_group_assignment* groups, bool bf16_wire);
  virtual Tensor* all_to_all(int rank, const Tensor* x, int concat_dim, int split_dim, int split_count,
                     const tpu_group_assignment* groups);
  virtual Tensor* collective_permute(int rank, const Tensor* x, const int32_t* pairs, int num_pairs);
  virtual Tensor* broadcast(int rank, const Tensor* x, int root, const tpu_group_assignment* groups);
  virtual void barrier(int rank);
  // Sends out[q] to participant q (out: one entry per participant of the step, each of
  // any size) and returns what each participant sent to `rank`, by sender. A
  // collective of all `participants` (all_to_all_bytes.cc). This default gathers the
  // sizes, then pads every message to the longest for one all_to_all.
  virtual std::vector<std::vector<uint8_t>> all_to_all_bytes(int rank, int participants,
                                                             const std::vector<std::vector<uint8_t>>& out);

 protected:
  Rendezvous& rendezvous() { return *rv_; }
  bool private_results() const { return private_results_; }

 private:
  // The group a replica belongs to in one collective call.
  struct GroupInfo {
    const int32_t* members = nullptr;
    int size = 0;
    int pos = 0;  // this replica's position in members
  };

  template <typename Fn>
  void check_local(int rank, Fn&& checks);
  void setup(int rank, CollectiveKind kind, const Tensor* x, const tpu_group_assignment* groups,
             Descriptor* desc, GroupInfo* group);
  bool meet(int rank, uint64_t seq, Record& rec, const Descriptor& desc, const Tensor* x,
            Tensor* out);
  const void* input_of(int replica, uint64_t seq, size_t bytes) const;
  void* output_of(int replica, uint64_t seq) const;
  // Whether a collective whose members all get the same result shares one buffer.
  bool shares_result(const GroupInfo& g, size_t input_bytes) const;
  // This member's output before the meeting: nullptr for a shared result's members
  // other than the first, which join_result points at the first member's buffer.
  Tensor* new_result(const GroupInfo& g, bool shared, const Tensor* x, const int64_t* dims);
  void join_result(const GroupInfo& g, bool shared, uint64_t seq, Tensor** out);
  Tensor* reduce_impl(int rank, const Tensor* x, tpu_reduce_op op,
                      const tpu_group_assignment* groups, bool bf16_wire);
  Tensor* scatter_impl(int rank, const Tensor* x, tpu_reduce_op op, int axis,
                       const tpu_group_assignment* groups, bool bf16_wire);

  std::unique_ptr<Rendezvous> rv_;
  std::vector<int32_t> identity_;  // the default group: every replica in order
  uint64_t identity_hash_ = 0;
  bool private_results_ = false;
};

}  // namespace tpurt
