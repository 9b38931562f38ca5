// The end of a step (END frames carrying each task's outcome) and of a task (a
// farewell carrying why it leaves), and what a peer's end means to this task.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/deadline.h"
#include "core/status.h"
#include "net/stream_peer.h"

namespace tpurt {
namespace net {
namespace {

// A farewell's frames may take this long to leave.
constexpr int64_t kFarewellMs = 1000;

}  // namespace

std::string encode_outcome(const StepOutcome& o) {
  std::string payload(8 + o.message.size(), '\0');
  const int32_t code = o.code, origin = o.origin_replica;
  std::memcpy(&payload[0], &code, 4);
  std::memcpy(&payload[4], &origin, 4);
  std::memcpy(&payload[8], o.message.data(), o.message.size());
  if (payload.size() > kMaxEndPayloadBytes) payload.resize(kMaxEndPayloadBytes);
  return payload;
}

bool StreamTransport::end_step(const StepOutcome& mine, int64_t timeout_ms, StepOutcome* remote,
                            const std::function<std::string(int)>& name) {
  // A late replica's leader, interrupted by the step's abort, leaves exchange() first.
  std::lock_guard<DriveLock> driving(drive_mu_);
  if (num_tasks_ == 1) return false;
  // A lost task ends the cluster: nobody waits for the others' step ends then, but
  // every peer hears the cause (the same error on every task), not a link closing.
  auto cluster_failed = [&] {
    StepOutcome why{TPU_UNAVAILABLE, -1, ""};
    {
      std::lock_guard<std::mutex> lock(mu_);
      why.message = failed_;
    }
    send_farewells(why, kFarewellMs);
    *remote = why;
    return true;
  };
  if (has_failed_.load(std::memory_order_acquire)) return cluster_failed();
  const std::string end_payload = encode_outcome(mine);

  for (int i = 0; i < num_tasks_; ++i) {
    Peer& p = peers_[i];
    if (i == task_id_ || !p.lost.empty() || p.link.load() == nullptr) continue;
    // What a failed collective left unsent is not sent: the rest of the frame in
    // flight becomes zeros, the transfers after it are dropped.
    if (p.out_left > 0) p.out_data = nullptr;
    p.drop_transfers();
    if (p.in_payload && !p.in_end) p.in_dest = nullptr;  // drain, not deliver
  }
  const auto deadline = deadline_after(timeout_ms);
  bool failed = false;
  std::vector<int> readers, writers;
  for (;;) {
    if (has_failed_.load(std::memory_order_acquire)) return cluster_failed();
    readers.clear();
    writers.clear();
    bool advanced = false;
    for (int i = 0; i < num_tasks_; ++i) {
      Peer& p = peers_[i];
      if (i == task_id_ || !p.lost.empty() || p.link.load() == nullptr || p.left) continue;
      if (!p.end_sent && p.out_header_left == 0 && p.out_left == 0 && p.sends.empty()) {
        start_control_frame(p, kEndTag, end_payload);
        p.end_sent = true;
      }
      if (p.out_header_left > 0 || p.out_left > 0) {
        advanced |= pump_send(p) == Progress::kAdvanced;
        if (!p.lost.empty()) continue;
      }
      // Until the END frame is out: a padded frame finishing first starts it next round.
      if (p.out_header_left > 0 || p.out_left > 0 || !p.end_sent) writers.push_back(i);
      try {
        advanced |= pump_recv(p, name, true) == Progress::kAdvanced;
      } catch (const Error& e) {
        if (getenv("TPURT_LOG")) fprintf(stderr, "end_step: %s\n", e.message().c_str());
        continue;  // the peer is lost; its failure reaches us through coordination
      }
      if (!(p.ended && !p.in_payload && p.in_header_got == 0)) readers.push_back(i);
    }
    if (readers.empty() && writers.empty()) break;
    if (advanced) continue;
    if (Clock::now() >= deadline) {
      for (int i : readers) lose(peers_[i], str_cat("did not end step ", step_, " within ", timeout_ms, " ms"));
      for (int i : writers) lose(peers_[i], str_cat("did not take the end of step ", step_, " within ", timeout_ms, " ms"));
      break;
    }
    wait_ready(readers, writers, deadline);
  }
  // The failure to report: a task's own error before the aborts it caused elsewhere.
  for (int i = 0; i < num_tasks_; ++i) {
    Peer& p = peers_[i];
    if (i == task_id_ || !p.ended || p.outcome.code == TPU_OK) continue;
    if (failed && !(remote->code == TPU_ABORTED && p.outcome.code != TPU_ABORTED)) continue;
    *remote = p.outcome;
    failed = true;
  }
  return failed;
}

void StreamTransport::throw_peer_ended(Peer& p, const std::function<std::string(int)>& name) {
  if (p.left) tpurt::fail(p.left_why.code, p.left_why.message);
  // A lost task stays TPU_UNAVAILABLE wherever it is heard of, and a missed deadline
  // TPU_DEADLINE_EXCEEDED (this task is the one late: in one process a participant
  // arriving after the others' deadline gets it too); any other failure is the
  // peer's, which aborts this task's collective.
  if (p.outcome.code == TPU_UNAVAILABLE || p.outcome.code == TPU_DEADLINE_EXCEEDED)
    tpurt::fail(p.outcome.code, p.outcome.message);
  if (p.outcome.code != TPU_OK) tpurt::fail(TPU_ABORTED, p.outcome.message);
  tpurt::fail(TPU_FAILED_PRECONDITION, name(p.id),
              " finished the step without calling collective #", seq_,
              ", which this task's replicas are in");
}

void StreamTransport::throw_gone(Peer& p, const std::function<std::string(int)>& name) {
  // What the peer sent before its link went is still there to read (a socket's queue,
  // a ring): its END or farewell says why it went, when it went because of a failure.
  if (!p.ended && !p.left && p.link.load() != nullptr) {
    if (p.in_payload && !p.in_end) p.in_dest = nullptr;  // the collective is over
    p.recvs.clear();
    p.recv_index = 0;
    p.recv_offset = 0;
    try {
      for (int rounds = 0; rounds < 1024 && !p.ended; ++rounds)
        if (pump_recv(p, name, /*ending=*/true) != Progress::kAdvanced) break;
    } catch (const Error&) {
      // The end of what it sent.
    }
  }
  if (p.left || (p.ended && p.outcome.code != TPU_OK)) throw_peer_ended(p, name);
  tpurt::fail(TPU_UNAVAILABLE, name(p.id), ": the data connection is gone (", p.lost, ")");
}

void StreamTransport::send_farewells(const StepOutcome& why, int64_t timeout_ms) {
  farewell_ = encode_outcome(why);
  std::vector<int> writers;
  for (int i = 0; i < num_tasks_; ++i) {
    Peer& p = peers_[i];
    if (i == task_id_ || !p.lost.empty() || p.link.load() == nullptr || p.farewell_sent) continue;
    if (p.out_left > 0) p.out_data = nullptr;  // a half-sent frame is padded
    p.drop_sends();
  }
  const auto deadline = deadline_after(timeout_ms);
  for (;;) {
    writers.clear();
    bool advanced = false;
    for (int i = 0; i < num_tasks_; ++i) {
      Peer& p = peers_[i];
      if (i == task_id_ || !p.lost.empty() || p.link.load() == nullptr) continue;
      if (!p.farewell_sent && p.out_header_left == 0 && p.out_left == 0) {
        start_control_frame(p, kFarewellTag, farewell_);
        p.farewell_sent = true;
      }
      if (p.out_header_left > 0 || p.out_left > 0) {
        advanced |= pump_send(p) == Progress::kAdvanced;
        if (p.lost.empty() && (p.out_header_left > 0 || p.out_left > 0)) writers.push_back(i);
      }
    }
    if (writers.empty()) return;
    if (advanced) continue;
    if (Clock::now() >= deadline) {
      // Never pumped again: the frame in flight points into farewell_.
      for (int i : writers) lose(peers_[i], "did not take this task's farewell");
      return;
    }
    wait_ready({}, writers, deadline);
  }
}

void StreamTransport::leave(const StepOutcome& why) {
  if (num_tasks_ == 1) return;
  // A replica that never returned may still drive a collective: then no farewell (its
  // peers learn of this task at its links' close or from the coordination service).
  if (!drive_mu_.try_lock_for(std::chrono::milliseconds(kFarewellMs))) return;
  std::lock_guard<DriveLock> driving(drive_mu_, std::adopt_lock);
  StepOutcome w = why;
  if (has_failed_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(mu_);
    w = StepOutcome{TPU_UNAVAILABLE, -1, failed_};
  }
  send_farewells(w, kFarewellMs);
}

}  // namespace net
}  // namespace tpurt
