// The vote of a cross-task collective (cluster_communicator.h): a ballot from every
// task before any participant returns, and the verdict every task then throws.
#include <cstring>

#include "collectives/cluster_communicator.h"
#include "collectives/rendezvous.h"
#include "core/deadline.h"

namespace tpurt {
namespace {

// The vote (see the header): a ballot, then, only when the ballots differ, every
// task's message and descriptors. Its frames carry a digest of their own: tasks that
// disagree on the collective must still read each other's ballots.
constexpr uint32_t kBallotTag = 0, kBlobTag = 1;
using net::kVoteDigest;
constexpr uint32_t kBallotMagic = 0x766f7465u;
constexpr uint32_t kMismatch = 1, kDescriptors = 2;
constexpr uint64_t kMaxBlobBytes = 1u << 20;

struct Ballot {
  uint32_t magic = 0;
  int32_t code = TPU_OK;
  int32_t origin = -1;
  uint32_t flags = 0;
  uint64_t digest = 0;         // the descriptor its participants agreed on (kDescriptors)
  uint64_t message_bytes = 0;  // the blob: the message, then (kDescriptors) each local
  uint64_t blob_bytes = 0;     // participant's descriptor in order
};

}  // namespace

ClusterCommunicator::Verdict ClusterCommunicator::vote(uint64_t seq, tpu_status code, int origin,
                                                       const std::string& message, bool mismatch,
                                                       int64_t timeout_ms) {
  Rendezvous& rv = rendezvous();
  const int me = cx_.task_id(), num_tasks = cx_.num_tasks();
  const int n_local = static_cast<int>(cx_.local_participants().size());
  const bool descs = code == TPU_OK || mismatch;  // every local participant arrived
  Ballot mine;
  mine.magic = kBallotMagic;
  mine.code = code;
  mine.origin = origin;
  mine.flags = (mismatch ? kMismatch : 0) | (descs ? kDescriptors : 0);
  mine.digest = descs ? rv.arrival_digest(0, seq) : 0;
  mine.message_bytes = message.size();
  mine.blob_bytes = message.size() + (descs ? n_local * sizeof(Descriptor) : 0);
  std::vector<Ballot> ballots(num_tasks);
  ballots[me] = mine;
  std::vector<net::Send> sends;
  std::vector<net::Recv> recvs;
  for (int t = 0; t < num_tasks; ++t) {
    if (t == me || cx_.participants_on(t) == 0) continue;
    sends.push_back({t, kBallotTag, &mine, sizeof mine});
    recvs.push_back({t, kBallotTag, &ballots[t], sizeof(Ballot)});
  }
  // The vote runs to its end whatever happens here meanwhile: every task needs this
  // task's ballot.
  static const std::function<void()> no_check = [] {};
  const auto deadline = deadline_after(coarse_now(), timeout_ms);
  net::Transport* transport = cx_.transport();
  transport->exchange(seq, kVoteDigest, sends.data(), sends.size(), recvs.data(), recvs.size(), deadline,
                      no_check, cx_.namer());
  bool agree = true;
  std::vector<bool> gone(num_tasks, false);  // ended the step without voting
  for (const net::Recv& r : recvs) {
    const Ballot& b = ballots[r.peer];
    if (b.magic != kBallotMagic && transport->vote_skipped(r.peer)) {
      gone[r.peer] = true;
      agree = false;
      continue;
    }
    if (b.magic != kBallotMagic || b.blob_bytes > kMaxBlobBytes || b.message_bytes > b.blob_bytes ||
        ((b.flags & kDescriptors) &&
         b.blob_bytes != b.message_bytes + cx_.participants_on(r.peer) * sizeof(Descriptor)))
      fail(TPU_UNAVAILABLE, cx_.namer()(r.peer), " sent a malformed ballot for collective #", seq);
    agree &= b.code == TPU_OK && b.digest == mine.digest;
  }
  if (agree && code == TPU_OK) return {};

  // Every task knows the ballots differ: each sends its message and descriptors.
  std::vector<std::string> blobs(num_tasks);
  std::string& blob = blobs[me];
  blob.assign(mine.blob_bytes, '\0');
  std::memcpy(&blob[0], message.data(), message.size());
  if (descs)
    for (int j = 0; j < n_local; ++j)
      std::memcpy(&blob[message.size() + j * sizeof(Descriptor)], &rv.record(j, seq).desc, sizeof(Descriptor));
  const std::vector<net::Send> voters = sends;
  sends.clear();
  recvs.clear();
  for (const net::Send& v : voters) {
    const int t = v.peer;
    if (gone[t]) continue;
    blobs[t].assign(ballots[t].blob_bytes, '\0');
    sends.push_back({t, kBlobTag, blob.data(), blob.size()});
    recvs.push_back({t, kBlobTag, &blobs[t][0], blobs[t].size()});
  }
  transport->exchange(seq, kVoteDigest, sends.data(), sends.size(), recvs.data(), recvs.size(), deadline,
                      no_check, cx_.namer());
  // A voter that ended the step before its message came (it decided without this task,
  // late to vote) counts as gone: its end says what it decided.
  for (const net::Recv& r : recvs)
    if (transport->vote_skipped(r.peer)) gone[r.peer] = true;

  // The verdict, from what every task now holds alike (tasks in order).
  auto message_of = [&](int t) { return blobs[t].substr(0, ballots[t].message_bytes); };
  int failure = -1, abort = -1, first_with_descs = -1;
  bool disagree = false, all_descs = true;
  int first_gone = -1;
  for (int t = 0; t < num_tasks; ++t) {
    if (cx_.participants_on(t) == 0) continue;
    if (gone[t]) {
      if (first_gone < 0) first_gone = t;
      all_descs = false;
      continue;
    }
    const Ballot& b = ballots[t];
    if (b.flags & kMismatch) disagree = true;
    else if (b.code == TPU_ABORTED && abort < 0) abort = t;
    else if (b.code != TPU_OK && b.code != TPU_ABORTED && failure < 0) failure = t;
    if (!(b.flags & kDescriptors)) {
      all_descs = false;
    } else if (first_with_descs < 0) {
      first_with_descs = t;
    } else if (b.digest != ballots[first_with_descs].digest) {
      disagree = true;
    }
  }
  if (failure >= 0) {
    const Ballot& b = ballots[failure];
    return {static_cast<tpu_status>(b.code), b.origin, message_of(failure)};
  }
  if (disagree && all_descs) {
    const int n = num_participants();
    std::vector<Descriptor> all(n);
    std::vector<const Descriptor*> ptrs(n);
    for (int p = 0; p < n; ++p) {
      const int t = cx_.task_of(p);
      std::memcpy(&all[p], &blobs[t][ballots[t].message_bytes + cx_.index_on_task(p) * sizeof(Descriptor)],
                  sizeof(Descriptor));
      ptrs[p] = &all[p];
    }
    const int k = cores_per_replica();
    std::string message = mismatch_message(seq, ptrs, [k](int p) { return participant_name(p, k); }, k > 1);
    // When whole tasks disagree (each task's participants agreed among themselves),
    // which task called what: the program that diverged is a task's.
    bool local_mismatch = false;
    for (int t = 0; t < num_tasks; ++t) local_mismatch |= cx_.participants_on(t) > 0 && (ballots[t].flags & kMismatch);
    if (!local_mismatch) {
      std::string by_task;
      std::vector<bool> told(num_tasks, false);
      for (int t = 0; t < num_tasks; ++t) {
        if (cx_.participants_on(t) == 0 || told[t]) continue;
        std::string tasks;
        for (int u = t; u < num_tasks; ++u) {
          if (cx_.participants_on(u) == 0 || told[u] || ballots[u].digest != ballots[t].digest) continue;
          told[u] = true;
          tasks += str_cat(tasks.empty() ? "" : " and ", describe_task(u));
        }
        int p0 = 0;
        while (cx_.task_of(p0) != t) ++p0;
        by_task += str_cat(by_task.empty() ? "" : "; ", tasks, " called ", all[p0].describe());
      }
      message += str_cat(" (by task: ", by_task, ")");
    }
    return {TPU_INVALID_ARGUMENT, -1, message};
  }
  if (abort >= 0) {
    const Ballot& b = ballots[abort];
    return {TPU_ABORTED, b.origin, message_of(abort)};
  }
  if (first_gone >= 0) {  // what its end means, as every voter reads it
    try {
      transport->throw_if_ended(first_gone, cx_.namer());
    } catch (const Error& e) {
      return {e.code(), -1, e.message()};
    }
  }
  return {TPU_INVALID_ARGUMENT, -1,
          str_cat("collective #", seq, ": the tasks' participants called different collectives, or with "
                  "different dtypes, shapes, operations or groups")};
}

void ClusterCommunicator::settle(int participant, uint64_t seq, const Error& local) {
  if (!votes()) throw local;  // MPI: as before the verdict (see votes())
  Rendezvous& rv = rendezvous();
  const int64_t timeout = timeout_of(local_rank(participant));
  std::unique_lock<std::mutex> lock(verdict_mu_);
  if (!claimed_ && voted_seq_ < seq) {
    claimed_ = true;
    lock.unlock();
    // The failure as this task's participants got it (the culprit's own error is
    // worded without its name: the others get "replica R: ...").
    int origin = -1;
    tpu_status code = local.code();
    std::string message = local.message();
    rv.failure(&origin, &code, &message);
    Verdict v;
    try {
      v = vote(seq, code, origin, message, rv.mismatch_seq() == seq, with_grace(timeout));
    } catch (const Error& e) {
      v = {e.code(), -1, e.message()};
    }
    rv.overrule(v.code, v.message, v.origin);
    lock.lock();
    verdict_ = v;
    decided_ = true;
    verdict_cv_.notify_all();
  } else if (claimed_ && !decided_) {
    // Another participant here votes: its verdict is this one's. Bounded as its vote.
    wait_for_ms(verdict_cv_, lock, leader_bound(timeout), [&] { return decided_; });
  }
  if (decided_) {
    const Verdict v = verdict_;
    lock.unlock();
    if (v.origin == participant && v.code == local.code()) throw local;
    throw Error(v.code, v.message);
  }
  throw local;  // failed after its task voted (the leader's exchange): as before
}

}  // namespace tpurt
