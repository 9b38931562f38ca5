// The vote of a collective (tpurt_mpi_plugin::vote; the ballots are libtpurt's,
// collectives/cluster_vote.cc): each round's messages go on a tag of their own in the
// step's slot (vote_tag), so that they never match a collective's data, whatever
// collective the peers are in, and are drained with the step's data when a failed step
// leaves them unreceived. Every message starts with a VoteHeader naming its step,
// collective and round. A peer whose end of the step says it never sent this round
// (it ended the step without voting) is passed over; one whose end says it did is
// still waited for (its end, on another tag, may overtake its ballot). Polled as
// wait_all polls: the deadline, check(), the peers' ends and their questions.
#include <sched.h>

#include <algorithm>
#include <cstring>

#include "mpi_plugin/handle.h"

namespace tpurt {
namespace mpi {

tpu_status vote(tpurt_mpi_handle* h, uint64_t seq, const tpurt_mpi_transfer* sends, size_t num_sends,
                const tpurt_mpi_transfer* recvs, size_t num_recvs, const tpurt_mpi_wait* wait, int32_t* skipped,
                char* err, size_t err_size) {
  constexpr size_t kHead = sizeof(VoteHeader);
  auto bad_transfer = [&](const tpurt_mpi_transfer& t, const char* what) {
    if (t.peer < 0 || t.peer >= h->size || t.peer == h->rank) {
      say(err, err_size, "a vote's %s names task %d of %d (this is task %d)", what, t.peer, h->size, h->rank);
      return true;
    }
    if (t.tag > 1 || t.bytes > kMaxVoteBytes - kHead) {
      say(err, err_size, "a vote's %s of round %u, %llu bytes: rounds are 0 and 1, of at most %llu bytes", what,
          t.tag, static_cast<unsigned long long>(t.bytes), static_cast<unsigned long long>(kMaxVoteBytes - kHead));
      return true;
    }
    return false;
  };
  for (size_t i = 0; i < num_sends; ++i)
    if (bad_transfer(sends[i], "send")) return TPU_INTERNAL;
  for (size_t i = 0; i < num_recvs; ++i) {
    if (bad_transfer(recvs[i], "receive")) return TPU_INTERNAL;
    skipped[i] = 0;
  }
  ++h->num_votes;
  // Requests: the receives (0..num_recvs-1), then the sends. Every message is staged
  // behind its header; a buffer MPI may still use when the wait fails lives as long as
  // the handle (sinks).
  const size_t n = num_recvs + num_sends;
  auto& v = h->vote;
  if (v.bufs.size() < n) v.bufs.resize(n);
  std::vector<std::vector<char>>& bufs = v.bufs;
  std::vector<MPI_Request>& reqs = v.reqs;
  std::vector<char>& kind = v.kind;
  reqs.assign(n, MPI_REQUEST_NULL);
  kind.resize(n);
  v.status.resize(n);
  v.index.resize(n);
  MPI_Status* const st = v.status.data();
  int* const idx = v.index.data();
  for (size_t i = 0; i < num_recvs; ++i) {
    bufs[i].resize(kHead + recvs[i].bytes);
    kind[i] = kReceive;
    MPI_Irecv(bufs[i].data(), static_cast<int>(bufs[i].size()), MPI_BYTE, recvs[i].peer, vote_tag(h, recvs[i].tag),
              h->comm, &reqs[i]);
  }
  for (size_t i = 0; i < num_sends; ++i) {
    const tpurt_mpi_transfer& t = sends[i];
    h->voted = std::max(h->voted, voted_round(seq, t.tag));
    std::vector<char>& b = bufs[num_recvs + i];
    b.resize(kHead + t.bytes);
    VoteHeader head;
    head.step = h->step;
    head.seq = seq;
    head.round = t.tag;
    head.magic = kVoteMagic;
    std::memcpy(b.data(), &head, kHead);
    if (t.bytes) std::memcpy(b.data() + kHead, t.data, t.bytes);
    kind[num_recvs + i] = kSend;
    MPI_Isend(b.data(), static_cast<int>(b.size()), MPI_BYTE, t.peer, vote_tag(h, t.tag), h->comm,
              &reqs[num_recvs + i]);
  }
  std::vector<char>& passed = v.passed;  // peers passed over
  passed.assign(h->size, 0);
  auto fail = [&](tpu_status code, const std::string& message) {
    give_up(h, reqs, kind);
    for (size_t i = 0; i < n; ++i)
      if (reqs[i] != MPI_REQUEST_NULL) h->sinks.push_back(std::move(bufs[i]));
    say(err, err_size, "%s", message.c_str());
    return code;
  };
  // Whether every receive is done (or passed over), and every send but those to peers
  // passed over (they end the step without reading it: drained at its end).
  auto done = [&] {
    for (size_t i = 0; i < n; ++i) {
      if (reqs[i] == MPI_REQUEST_NULL) continue;
      const int peer = i < num_recvs ? recvs[i].peer : sends[i - num_recvs].peer;
      if (kind[i] == kReceive || !passed[peer]) return false;
    }
    return true;
  };
  int64_t last_progress = -1;
  unsigned polls = 0;
  bool progressed = false, stalled = false;
  for (;;) {
    int outcount = 0;
    int rc = MPI_Testsome(static_cast<int>(n), reqs.data(), &outcount, idx, st);
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS)
      return fail(TPU_UNAVAILABLE, "the vote on collective #" + std::to_string(seq) + " failed in MPI: " + mpi_error(rc));
    for (int k = 0; outcount != MPI_UNDEFINED && k < outcount; ++k) {
      const size_t i = static_cast<size_t>(idx[k]);
      const int peer = i < num_recvs ? recvs[i].peer : sends[i - num_recvs].peer;
      if (rc == MPI_ERR_IN_STATUS && st[k].MPI_ERROR != MPI_SUCCESS)
        return fail(TPU_UNAVAILABLE, name_of(wait, peer) + ": the vote on collective #" + std::to_string(seq) +
                                         " failed in MPI: " + mpi_error(st[k].MPI_ERROR));
      progressed = true;
      if (i >= num_recvs) continue;
      int count = 0;
      MPI_Get_count(&st[k], MPI_BYTE, &count);
      VoteHeader head;
      if (count >= static_cast<int>(kHead)) std::memcpy(&head, bufs[i].data(), kHead);
      if (static_cast<size_t>(count) != bufs[i].size() || head.magic != kVoteMagic || head.step != h->step ||
          head.seq != seq || head.round != recvs[i].tag)
        return fail(TPU_UNAVAILABLE, name_of(wait, peer) + " sent a malformed vote message for collective #" +
                                         std::to_string(seq) + " (" + std::to_string(count) + " bytes)");
      if (recvs[i].bytes) std::memcpy(recvs[i].data, bufs[i].data() + kHead, recvs[i].bytes);
    }
    if (done()) break;
    if (++polls % kCheckEvery != 0) {
      if (stalled) sched_yield();
      continue;
    }
    const int64_t now = now_ns();
    if (last_progress < 0 || progressed) last_progress = now;
    progressed = false;
    stalled = now - last_progress > kSpinNs;
    if (polls % kEndPollEvery == 0 || stalled) {
      poll_ends(h);
      serve_queries(h);
      // A peer whose end came without this round is passed over.
      for (size_t i = 0; i < num_recvs; ++i) {
        const int p = recvs[i].peer;
        if (reqs[i] == MPI_REQUEST_NULL || !h->ended[p]) continue;
        int32_t code = 0, origin = -1;
        uint64_t reached = 0, voted = 0;
        std::string message;
        if (!read_end(h, p, &code, &origin, &reached, &message, &voted))
          return fail(TPU_UNAVAILABLE, name_of(wait, p) + " sent a malformed end of the step");
        if (voted >= voted_round(seq, recvs[i].tag)) continue;  // its ballot is on its way
        MPI_Cancel(&reqs[i]);
        MPI_Status cs;
        MPI_Wait(&reqs[i], &cs);
        int cancelled = 0;
        MPI_Test_cancelled(&cs, &cancelled);
        if (!cancelled)  // it came after all: its end was wrong
          return fail(TPU_UNAVAILABLE, name_of(wait, p) + " voted on collective #" + std::to_string(seq) +
                                           " after its end of the step said it had not");
        skipped[i] = 1;
        passed[p] = 1;
      }
      if (done()) break;
    }
    if (wait->check && wait->check(wait->ctx)) {
      give_up(h, reqs, kind);
      for (size_t i = 0; i < n; ++i)
        if (reqs[i] != MPI_REQUEST_NULL) h->sinks.push_back(std::move(bufs[i]));
      say(err, err_size, "%s", "");
      return TPU_CANCELLED;
    }
    if (now >= wait->deadline_ns) {
      std::string owing, stuck;
      std::vector<char> seen_recv(h->size, 0), seen_send(h->size, 0);
      for (size_t i = 0; i < n; ++i) {
        if (reqs[i] == MPI_REQUEST_NULL) continue;
        const int p = i < num_recvs ? recvs[i].peer : sends[i - num_recvs].peer;
        if (kind[i] == kReceive && !seen_recv[p]++) owing += (owing.empty() ? "" : "; ") + name_of(wait, p);
        else if (kind[i] == kSend && !passed[p] && !seen_send[p]++)
          stuck += (stuck.empty() ? "" : "; ") + name_of(wait, p);
      }
      std::string m = "collective #" + std::to_string(seq) + " of the step did not complete: ";
      if (!owing.empty()) m += "no data arrived from " + owing;
      if (!owing.empty() && !stuck.empty()) m += ", and ";
      if (!stuck.empty()) m += "nothing could be sent to " + stuck;
      m += " before the collective deadline (the task is stopped, hung, or has not reached this collective)";
      return fail(TPU_DEADLINE_EXCEEDED, m);
    }
    if (stalled) sched_yield();
  }
  // Sends to peers passed over: drained when they end the step (end_step waits for that).
  for (size_t i = 0; i < n; ++i)
    if (reqs[i] != MPI_REQUEST_NULL) {
      h->stuck.push_back(reqs[i]);
      h->stuck_kind.push_back(kSend);
      h->sinks.push_back(std::move(bufs[i]));
    }
  return TPU_OK;
}

}  // namespace mpi
}  // namespace tpurt
