// The data plane between the tasks of a cluster, as the collectives see it: a
// collective is one exchange of sends and receives with peer tasks, and a step ends
// with every peer agreeing that it ended (and how). One protocol over a byte stream
// per pair of tasks (stream_transport.h) implements it over TCP (tcp_transport.h) and
// over shared-memory rings between processes of one host (shm_transport.h, which can
// also reach other hosts' tasks by TCP); MPI is meant to implement it too.
//
// One thread at a time drives a transport: the leader replica of a collective, or
// the thread ending the step. interrupt() is the only call allowed from elsewhere.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "core/status.h"
#include "tpurt/common.h"

namespace tpurt {
namespace net {

// One transfer to or from a peer task. Transfers between two tasks are matched in
// the order each side lists them; tag tells them apart in messages and checks.
struct Send {
  int peer;
  uint32_t tag;
  const void* data;
  uint64_t bytes;
};
struct Recv {
  int peer;
  uint32_t tag;
  void* data;
  uint64_t bytes;
};

// The digest of a collective's vote (ClusterCommunicator's ballots): every task's
// frames of a vote carry it, whatever collective the tasks called.
constexpr uint64_t kVoteDigest = 0x766572646963742eull;

// Thrown by exchange() (and PostedGather::gather_posts) when a peer expected to send
// the collective's data calls a vote on it instead: the peer found a failure, and
// every task must vote before any returns. A frame of the vote is left unread.
class VoteCalled : public Error {
 public:
  using Error::Error;
};
// Thrown where a peer's data comes with another descriptor digest (its participants
// called another collective, or with other arguments).
class PeerDisagrees : public Error {
 public:
  using Error::Error;
};

// How a step ended on one task.
struct StepOutcome {
  tpu_status code = TPU_OK;
  int origin_replica = -1;  // the replica whose error it is, or -1
  std::string message;      // as tpu_replicate reports it
};

class Transport {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~Transport() = default;

  virtual int num_tasks() const = 0;
  virtual int task_id() const = 0;

  // Starts step `step` (every task numbers its steps alike). Throws TPU_UNAVAILABLE
  // when a peer's connection is already lost.
  virtual void begin_step(uint64_t step) = 0;

  // Runs the sends and receives of collective `seq` (digest: its descriptor, which
  // peers must share; kVoteDigest: the collective's vote, during which frames of the
  // collective itself are discarded) concurrently until all are done. check() is called whenever
  // the wait is interrupted and must throw if the step is to end. Throws
  // TPU_DEADLINE_EXCEEDED naming the peers still owing data at `deadline`,
  // TPU_INVALID_ARGUMENT when a peer is in another collective (PeerDisagrees when in
  // this one with another digest), VoteCalled when a peer votes instead, TPU_FAILED_PRECONDITION
  // when a peer ended the step without it, TPU_ABORTED with a peer's step failure,
  // TPU_UNAVAILABLE for a lost connection. name(task) words a task for messages.
  virtual void exchange(uint64_t seq, uint64_t digest, const Send* sends, size_t num_sends,
                        const Recv* recvs, size_t num_recvs, Clock::time_point deadline,
                        const std::function<void()>& check,
                        const std::function<std::string(int)>& name) = 0;

  // After collective seq's data all came: throws VoteCalled if a peer has already
  // voted on it behind its data (its frames are there to read now; nothing is waited
  // for). Anything else that came is left for the next exchange.
  // A task late to a collective gets its peers' data, which they sent before their
  // deadline, and only this tells it they have given up since.
  virtual void peek_votes(uint64_t seq, const std::function<std::string(int)>& name) {
    (void)seq, (void)name;
  }

  // Whether a vote's exchange (digest kVoteDigest) passed `peer` over: it ended the
  // step (or left) without the vote, before or during it; throw_if_ended() then throws
  // what its end means here, as exchange() would have.
  virtual bool vote_skipped(int peer) const { (void)peer; return false; }
  virtual void throw_if_ended(int peer, const std::function<std::string(int)>& name) {
    (void)peer, (void)name;
  }

  // Wakes a thread inside exchange() so that it calls check(). Any thread.
  virtual void interrupt() = 0;

  // Ends the step with every peer: completes or pads any frame a failed collective
  // left half-sent, discards what peers sent for this step that nobody read, tells
  // each peer `mine` and learns theirs. Returns the first failure a peer reports
  // (false: every peer succeeded). Bounded by timeout_ms; a peer that does not end
  // the step in time is disconnected (its later collectives fail TPU_UNAVAILABLE).
  virtual bool end_step(const StepOutcome& mine, int64_t timeout_ms, StepOutcome* remote,
                        const std::function<std::string(int)>& name) = 0;

  // Whether one exchange with every peer costs about one with a single peer (shared
  // memory), so that small gathers need no rounds of log2(tasks) exchanges and large
  // transfers no rounds of one peer each.
  virtual bool fans_out_cheaply() const { return false; }
  // Whether a large exchange with several peers goes in rounds of one peer each way
  // (fewer streams at once) rather than with every peer at once.
  virtual bool large_exchanges_in_rounds() const { return !fans_out_cheaply(); }

  // Marks the cluster failed: later calls throw TPU_UNAVAILABLE with this message.
  virtual void fail(const std::string& message) = 0;

  // This task leaves (its shutdown): tells every peer why, bounded in time, so that a
  // peer in a step with it fails at once with `why` (or, once the cluster failed, with
  // that failure) rather than waiting or blaming the link. The driver's thread.
  virtual void leave(const StepOutcome& why) { (void)why; }
};

}  // namespace net
}  // namespace tpurt
