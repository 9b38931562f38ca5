// Where the replicas of a step meet for each collective. Every participant
// publishes a record (descriptor, buffers, and for small inputs a copy of the data)
// under its sequence number, waits for the others' records, and checks that all
// descriptors agree. Records are double-buffered by sequence parity: a participant
// can only reuse a record after every peer has arrived at the next collective, by
// which time they have finished reading it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/wait.h"
#include "topology/group_modes.h"
#include "tpurt/collectives.h"

namespace tpurt {

enum class CollectiveKind : int32_t {
  kAllReduce = 1,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kCollectivePermute,
  kBroadcast,
  kBarrier
};

const char* kind_name(CollectiveKind kind);

// What every participant of one collective must agree on.
struct Descriptor {
  CollectiveKind kind;
  int32_t op;       // tpu_reduce_op, or 0
  int32_t dtype;    // tpu_dtype, or 0 for a barrier
  int32_t rank;
  int64_t dims[TPU_MAX_RANK];
  int32_t params[3];  // axis / split & concat dims & count / root
  int32_t bf16_wire;
  int32_t num_groups;
  int32_t group_size;
  uint64_t groups_hash;  // of the group assignment or permute pairs

  bool operator==(const Descriptor& o) const;
  std::string describe() const;
  uint64_t digest() const;
};

// The message of a disagreement among the participants of collective `seq`, whose
// descriptors are descs (by participant; name_of(i) names descs[i]): the descriptor
// most hold is "right", and everyone who differs from it is named. participants: the
// word is "participants" (several cores per replica), else "replicas". One process and
// every task of a cluster word it alike (ClusterCommunicator's verdict).
std::string mismatch_message(uint64_t seq, const std::vector<const Descriptor*>& descs,
                             const std::function<std::string(int)>& name_of, bool participants);

// Inputs up to kLineBytes travel in the arrival cache line itself, so a peer's
// arrival costs one line transfer; up to kInlineBytes in the record; larger ones are
// read in place.
constexpr size_t kLineBytes = 48;
constexpr size_t kInlineBytes = 4096;

struct Record {
  Descriptor desc;
  const void* input;  // inline copy or the caller's buffer
  void* output;
  const tpu_tensor* result;  // the group's one shared result (its first member's)
  alignas(64) unsigned char data[kInlineBytes];
};

class Rendezvous {
 public:
  // cores_per_replica names rank r as participant_name(r, cores_per_replica).
  Rendezvous(int size, int64_t timeout_ms, int num_cpus, int cores_per_replica = 1);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  int size() const { return size_; }
  int cores_per_replica() const { return cores_per_replica_; }
  // Messages name rank r as participant ids[r] (r itself while ids is empty): a
  // cluster's ranks are its task's participants. Origins (abort, poison) are
  // participant ids. Only between steps.
  void name_ranks(std::vector<int> ids) { ids_ = std::move(ids); }
  // Starts a step. cpu_of_rank: the CPU each rank's thread is pinned to, or NULL
  // when the OS places them (then waiters never spin in place of yielding).
  void reset(const int* cpu_of_rank);
  // The deadline of every wait in this step, and one rank's for its next calls
  // (0: the step's). Owner-only: set_call_timeout by the rank's own thread.
  void set_step_timeout(int64_t timeout_ms) { timeout_ms_ = timeout_ms; }
  int64_t step_timeout() const { return timeout_ms_; }
  void set_call_timeout(int rank, int64_t timeout_ms) { slots_[rank].call_timeout_ms = timeout_ms; }
  void abort(int replica, tpu_status code, const std::string& message);
  // Fails the step for everyone with `code` (a collective error all must see).
  // origin: the replica whose own error it is, or -1 for an error of the collective
  // itself. The step's failure (failure()) is then "replica R: message"; its later
  // collectives give the origin its own message, the others "replica R failed
  // (CODE): message", so that no participant's error reads as if it were R.
  void poison(tpu_status code, const std::string& message, int origin = -1);
  [[noreturn]] void poison_and_throw(tpu_status code, const std::string& message);
  // Makes `code` / `message` the step's failure even once it has failed (origin as
  // failure() reports it; the message is worded already): the verdict every task of
  // a cluster agreed on replaces what this task found. Wakes every waiter.
  void overrule(tpu_status code, const std::string& message, int origin);
  // The last collective whose participants here disagreed (report_mismatch), or 0.
  uint64_t mismatch_seq() const { return mismatch_seq_.load(std::memory_order_acquire); }
  bool aborted() const { return failed_.load(std::memory_order_acquire); }
  // The step's failure as participants get it, and the replica it came from (-1:
  // none); false while the step has not failed.
  bool failure(int* origin, tpu_status* code, std::string* message);
  // The step's failure as rank's collectives give it (see poison); rank -1: a
  // participant that is not its origin. False while the step has not failed.
  bool failure_for(int rank, tpu_status* code, std::string* message);
  void depart(int rank);

  // Starts collective number seq for `rank`: returns the record to fill.
  Record& begin(int rank, uint64_t* seq);
  // Copies up to kLineBytes of input into rank's arrival line for seq.
  void set_line_data(int rank, uint64_t seq, const void* data, size_t bytes);
  const void* line_data(int rank, uint64_t seq) const { return slots_[rank].line[seq & 1].data; }
  // Publishes the record and waits until every participant has published seq and
  // all descriptors match. Throws on mismatch, abort, departure or deadline.
  void arrive_and_check(int rank, uint64_t seq);
  // Declares that `rank` finished touching peers' buffers for seq, and waits until
  // every participant has (needed when peers read or write this rank's buffers).
  // timeout_ms: the wait's bound, when not the call's (a cluster's participants wait
  // for their leader's exchange, which is bounded itself).
  void finish(int rank, uint64_t seq, int64_t timeout_ms = 0);

  const Record& record(int rank, uint64_t seq) const { return slots_[rank].rec[seq & 1]; }
  // The digest of rank's descriptor for seq, once it has arrived.
  uint64_t arrival_digest(int rank, uint64_t seq) const { return slots_[rank].line[seq & 1].digest; }

  // Takes the reference to an output that `rank` published for peers to write into
  // when its collective failed: a peer may still be writing, so it is released only
  // by the next reset (when no participant is inside a collective) or the destructor.
  void park(int rank, tpu_tensor* output) noexcept;

  // Work claiming for collective seq: returns the next unclaimed chunk index of the
  // group whose first member is `group_key`. Counters start at 0 for every collective.
  int64_t claim_chunk(int group_key, uint64_t seq) {
    return claims_[seq & 1][group_key].next.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  // What a peer reads to see an arrival: one cache line.
  struct alignas(64) Line {
    std::atomic<uint64_t> seq{0};
    uint64_t digest = 0;
    unsigned char data[kLineBytes];
  };
  struct alignas(64) Slot {
    Line line[2];  // by sequence parity
    alignas(64) std::atomic<uint64_t> finished{0};
    alignas(64) std::atomic<bool> departed{false};
    // Owner-only, and off departed's line, which waiting peers read.
    alignas(64) uint64_t next_seq = 0;
    int64_t call_timeout_ms = 0;
    std::vector<tpu_tensor*> parked;  // see park()
    Record rec[2];
  };

  void release_parked();
  // "replica R", or "replica R core C" with several cores per replica.
  std::string name(int rank) const { return participant_name(id(rank), cores_per_replica_); }
  int id(int rank) const { return ids_.empty() ? rank : ids_[rank]; }

  enum class Phase { kArrive, kFinish };
  void wait_all(int rank, uint64_t seq, Phase phase, int64_t timeout_ms = 0);
  [[noreturn]] void throw_failure(int rank);
  void set_failure_locked(tpu_status code, int origin, const std::string& raw);
  [[noreturn]] void report_mismatch(uint64_t seq);
  std::string missing_list(uint64_t seq, Phase phase) const;

  // With more threads than CPUs, a waiter whose CPU-mates have all arrived spins
  // rather than yields: none of them can use the CPU, and the ranks still missing
  // run elsewhere.
  bool cpu_mates_arrived(int rank, uint64_t seq, Phase phase) const;

  int size_;
  int cores_per_replica_;
  std::vector<int> ids_;  // name_ranks'
  int64_t timeout_ms_;
  SpinPolicy policy_;
  std::unique_ptr<Slot[]> slots_;
  // The ranks pinned to one CPU form a cycle: next_cpu_mate_[r] is the next rank on
  // r's CPU (r itself if alone), or -1 when r's CPU is unknown. first_/last_on_cpu_
  // (indexed by CPU id, -1 between resets) build it in one pass with no allocation.
  static constexpr int kMaxCpuIds = 1024;
  std::vector<int> next_cpu_mate_;
  std::vector<int> first_on_cpu_, last_on_cpu_;
  struct alignas(64) ClaimCounter {
    std::atomic<int64_t> next{0};
  };
  // By sequence parity, per group (indexed by the group's first member). Rank 0 zeroes
  // the other parity when it arrives: every claim on it ended before its last meeting.
  std::unique_ptr<ClaimCounter[]> claims_[2];
  WakeWord wake_;
  std::atomic<bool> failed_{false};
  std::atomic<uint64_t> mismatch_seq_{0};
  std::mutex failure_mu_;
  tpu_status failure_code_ = TPU_OK;
  int failure_origin_ = -1;
  std::string failure_message_;  // the step's: "replica R: ..." for a poison with an origin
  std::string failure_to_others_;  // what the participants but the origin get
  tpu_status origin_code_ = TPU_OK;  // and what the origin gets
  std::string origin_message_;
};

}  // namespace tpurt
