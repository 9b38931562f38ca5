// Waits on MPI requests: point-to-point exchanges, and the polling loop every wait
// runs (deadline, check(), a peer's end of the step); what a failed wait leaves.
#include "mpi_plugin/handle.h"

#include <sched.h>

#include <algorithm>

namespace tpurt {
namespace mpi {

namespace {

bool check_peer(const tpurt_mpi_handle* h, int peer, const char* what, char* err, size_t err_size) {
  if (peer >= 0 && peer < h->size && peer != h->rank) return true;
  say(err, err_size, "%s names task %d of %d (this is task %d)", what, peer, h->size, h->rank);
  return false;
}

// Posts the transfers, each in pieces MPI's int counts can hold.
void post(tpurt_mpi_handle* h, Waiting& w, const tpurt_mpi_transfer* t, size_t num, bool recv, int tag) {
  for (size_t i = 0; i < num; ++i) {
    uint64_t off = 0;
    do {
      const int len = static_cast<int>(std::min<uint64_t>(kMaxChunk, t[i].bytes - off));
      MPI_Request r;
      char* at = static_cast<char*>(t[i].data) + off;
      if (recv) MPI_Irecv(at, len, MPI_BYTE, t[i].peer, tag, h->comm, &r);
      else MPI_Isend(at, len, MPI_BYTE, t[i].peer, tag, h->comm, &r);
      w.reqs.push_back(r);
      w.peer.push_back(t[i].peer);
      w.kind.push_back(recv ? kReceive : kSend);
      off += static_cast<uint64_t>(len);
    } while (off < t[i].bytes);
  }
}

}  // namespace

// A failed wait: cancels its receives, lets what can complete complete, and keeps
// the rest (sends, collectives) as stuck.
void give_up(tpurt_mpi_handle* h, std::vector<MPI_Request>& reqs, const std::vector<char>& kind) {
  for (size_t i = 0; i < reqs.size(); ++i)
    if (reqs[i] != MPI_REQUEST_NULL && kind[i] == kReceive) MPI_Cancel(&reqs[i]);
  const int64_t until = now_ns() + kSettleNs;
  while (in_flight(reqs) && now_ns() < until) {
    int outcount = 0;
    std::vector<int> idx(reqs.size());
    MPI_Testsome(static_cast<int>(reqs.size()), reqs.data(), &outcount, idx.data(), MPI_STATUSES_IGNORE);
    if (outcount == 0 || outcount == MPI_UNDEFINED) sched_yield();
  }
  for (size_t i = 0; i < reqs.size(); ++i)
    if (reqs[i] != MPI_REQUEST_NULL) {
      h->stuck.push_back(reqs[i]);
      h->stuck_kind.push_back(kind[i]);
    }
}

// Completes the stuck sends and receives that can (never a collective: see
// tpurt_mpi_handle::stuck); whether a send is still stuck.
bool sends_stuck(tpurt_mpi_handle* h) {
  bool any = false;
  for (size_t i = 0; i < h->stuck.size(); ++i) {
    if (h->stuck_kind[i] == kCollective) continue;
    int done = 0;
    MPI_Test(&h->stuck[i], &done, MPI_STATUS_IGNORE);
    any |= !done && h->stuck_kind[i] == kSend;
  }
  size_t k = 0;
  for (size_t i = 0; i < h->stuck.size(); ++i)
    if (h->stuck[i] != MPI_REQUEST_NULL) {
      h->stuck[k] = h->stuck[i];
      h->stuck_kind[k++] = h->stuck_kind[i];
    }
  h->stuck.resize(k);
  h->stuck_kind.resize(k);
  return any;
}

// Polls w's requests until all are done. what: the collective, for messages.
tpu_status wait_all(tpurt_mpi_handle* h, Waiting& w, uint64_t seq, uint64_t digest, const tpurt_mpi_wait* wait,
                    const char* what, char* err, size_t err_size) {
  const size_t n = w.reqs.size();
  if (h->poll_index.size() < n) {
    h->poll_index.resize(n);
    h->poll_status.resize(n);
  }
  int* const idx = h->poll_index.data();
  MPI_Status* const st = h->poll_status.data();
  // last_progress: -1 until the clock is first read (a wait that completes on its
  // first polls never reads it).
  int64_t grace_until = -1, last_progress = -1;
  unsigned polls = 0;
  bool progressed = false, stalled = false;
  auto fail = [&](tpu_status code, const std::string& message) {
    give_up(h, w.reqs, w.kind);
    say(err, err_size, "%s", message.c_str());
    return code;
  };
  // A peer in another collective: named, whatever else went wrong (mismatched engine
  // collectives may also fail in MPI, or never complete).
  auto mismatch = [&](tpu_status* code, std::string* message) {
    Note theirs;
    const int bad = find_mismatch(h, seq, digest, &theirs);
    if (bad < 0) return false;
    // The peers may not have heard which collective this task is in.
    note_entry(h, seq, digest, w.peer.data(), w.peer.size());
    note_entry(h, seq, digest, w.watch.data(), w.watch.size());
    *code = TPU_INVALID_ARGUMENT;
    *message = mismatch_message(wait, bad, theirs, seq, digest);
    return true;
  };
  tpu_status code;
  std::string message;
  for (;;) {
    bool advanced = false;
    if (in_flight(w.reqs)) {
      int outcount = 0;
      int rc = MPI_Testsome(static_cast<int>(n), w.reqs.data(), &outcount, idx, st);
      if (rc != MPI_SUCCESS) {
        int bad_peer = -1, bad = rc;
        for (int i = 0; rc == MPI_ERR_IN_STATUS && i < outcount; ++i)
          if (st[i].MPI_ERROR != MPI_SUCCESS) bad = st[i].MPI_ERROR, bad_peer = w.peer[idx[i]];
        if (mismatch(&code, &message)) return fail(code, message);
        return fail(TPU_UNAVAILABLE, (bad_peer >= 0 ? name_of(wait, bad_peer) + ": " : std::string()) +
                                         what + " #" + std::to_string(seq) + " failed in MPI: " +
                                         mpi_error(bad));
      }
      advanced = outcount > 0 && outcount != MPI_UNDEFINED;
    }
    if (!in_flight(w.reqs)) return TPU_OK;
    progressed |= advanced;
    // The clock and what follows, once in kCheckEvery polls.
    if (++polls % kCheckEvery != 0) {
      if (stalled) sched_yield();
      continue;
    }
    const int64_t now = now_ns();
    if (last_progress < 0 || progressed) last_progress = now;
    progressed = false;
    // A peer that ended the step will not take part: its end fails the wait, once what
    // it sent before has had time to arrive.
    stalled = now - last_progress > kSpinNs;
    if (polls % kEndPollEvery == 0 || stalled) {
      poll_ends(h);
      serve_queries(h);
      // Peers send notes when they stall, so only a stalled wait looks (each look is
      // one more pass of MPI's progress engine).
      if ((stalled || h->eager_notes) && mismatch(&code, &message)) return fail(code, message);
    }
    // Stalled: transfers of another collective never match (their tags differ), nor
    // MPI collectives of other counts, so this task tells the peers it waits on which
    // collective it is in (once each).
    if (stalled) {
      note_entry(h, seq, digest, w.peer.data(), w.peer.size());
      note_entry(h, seq, digest, w.watch.data(), w.watch.size());
    }
    int gone = -1;
    for (size_t i = 0; i < n && gone < 0; ++i) {
      if (w.reqs[i] == MPI_REQUEST_NULL) continue;
      if (w.peer[i] >= 0) {
        if (h->ended[w.peer[i]]) gone = w.peer[i];
      } else {
        for (int t : w.watch)
          if (h->ended[t]) gone = t;
      }
    }
    if (gone >= 0 && mismatch(&code, &message)) return fail(code, message);
    if (gone >= 0) {
      int32_t code = 0, origin = -1;
      uint64_t reached = 0;
      std::string message;
      if (!read_end(h, gone, &code, &origin, &reached, &message))
        return fail(TPU_UNAVAILABLE, name_of(wait, gone) + " sent a malformed end of the step");
      // A lost task stays TPU_UNAVAILABLE wherever it is heard of, and a missed
      // deadline TPU_DEADLINE_EXCEEDED (this task is the late one: in one process a
      // participant arriving after the others' deadline gets it too), as over TCP; any
      // other failure is the peer's, which aborts this collective.
      if (code == TPU_UNAVAILABLE || code == TPU_DEADLINE_EXCEEDED) return fail(static_cast<tpu_status>(code), message);
      if (code != TPU_OK) return fail(TPU_ABORTED, message);
      // A peer that finished this collective (its part of an all-reduce may end
      // before ours) is waited for; one that never reached it skipped it.
      if (reached < seq) {
        if (grace_until < 0) grace_until = now + kEndGraceNs;
        if (now >= grace_until)
          return fail(TPU_FAILED_PRECONDITION, name_of(wait, gone) + " finished the step without calling " +
                                                   "collective #" + std::to_string(seq) +
                                                   ", which this task's replicas are in");
      }
    }
    if (wait->check && wait->check(wait->ctx)) {
      give_up(h, w.reqs, w.kind);
      say(err, err_size, "%s", "");
      return TPU_CANCELLED;
    }
    if (now >= wait->deadline_ns) {
      if (mismatch(&code, &message)) return fail(code, message);
      std::string owing, stuck, group;
      std::vector<char> seen_recv(h->size, 0), seen_send(h->size, 0);
      for (size_t i = 0; i < n; ++i) {
        if (w.reqs[i] == MPI_REQUEST_NULL) continue;
        const int p = w.peer[i];
        if (p < 0) {
          std::vector<int> missing = not_reached(h, w.watch, seq);
          const bool known = !missing.empty();
          if (!known) missing = w.watch;
          for (int t : missing) group += (group.empty() ? "" : "; ") + name_of(wait, t);
          group = known ? std::string(what) + " waited for " + group + ", which never joined it,"
                        : std::string(what) + " with " + group + " (one of them; MPI does not say which) did not finish";
        } else if (w.kind[i] == kReceive && !seen_recv[p]++) {
          owing += (owing.empty() ? "" : "; ") + name_of(wait, p);
        } else if (w.kind[i] == kSend && !seen_send[p]++) {
          stuck += (stuck.empty() ? "" : "; ") + name_of(wait, p);
        }
      }
      std::string m = "collective #" + std::to_string(seq) + " of the step did not complete: ";
      m += group;
      if (!owing.empty()) m += "no data arrived from " + owing;
      if (!owing.empty() && !stuck.empty()) m += ", and ";
      if (!stuck.empty()) m += "nothing could be sent to " + stuck;
      m += " before the collective deadline (the task is stopped, hung, or has not reached this collective)";
      return fail(TPU_DEADLINE_EXCEEDED, m);
    }
    if (stalled) sched_yield();
  }
}

tpu_status ended_before(tpurt_mpi_handle* h, const std::vector<int>& watch, uint64_t seq, const tpurt_mpi_wait* wait,
                        char* err, size_t err_size) {
  poll_ends(h);
  for (int t : watch) {
    if (!h->ended[t]) continue;
    int32_t code = 0, origin = -1;
    uint64_t reached = 0;
    std::string message;
    if (!read_end(h, t, &code, &origin, &reached, &message)) {
      say(err, err_size, "%s sent a malformed end of the step", name_of(wait, t).c_str());
      return TPU_UNAVAILABLE;
    }
    if (code != TPU_OK) {  // as wait_all words a peer's failed end
      say(err, err_size, "%s", message.c_str());
      return code == TPU_UNAVAILABLE || code == TPU_DEADLINE_EXCEEDED ? static_cast<tpu_status>(code) : TPU_ABORTED;
    }
    if (reached < seq) {
      say(err, err_size, "%s finished the step without calling collective #%llu, which this task's replicas are in",
          name_of(wait, t).c_str(), static_cast<unsigned long long>(seq));
      return TPU_FAILED_PRECONDITION;
    }
  }
  return TPU_OK;
}

tpu_status exchange_tagged(tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, uint64_t tag_digest,
                           const tpurt_mpi_transfer* sends, size_t num_sends, const tpurt_mpi_transfer* recvs,
                           size_t num_recvs, const tpurt_mpi_wait* wait, char* err, size_t err_size) {
  for (size_t i = 0; i < num_sends; ++i)
    if (!check_peer(h, sends[i].peer, "a send", err, err_size)) return TPU_INTERNAL;
  for (size_t i = 0; i < num_recvs; ++i)
    if (!check_peer(h, recvs[i].peer, "a receive", err, err_size)) return TPU_INTERNAL;
  Waiting w;
  h->reached = std::max(h->reached, seq);
  ++h->num_exchanges;
  const int tag = data_tag(h, seq, tag_digest);
  post(h, w, recvs, num_recvs, true, tag);
  post(h, w, sends, num_sends, false, tag);
  return wait_all(h, w, seq, digest, wait, "the exchange", err, err_size);
}

tpu_status do_exchange(tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, const tpurt_mpi_transfer* sends,
                       size_t num_sends, const tpurt_mpi_transfer* recvs, size_t num_recvs,
                       const tpurt_mpi_wait* wait, char* err, size_t err_size) {
  return exchange_tagged(h, seq, digest, digest, sends, num_sends, recvs, num_recvs, wait, err, err_size);
}

}  // namespace mpi
}  // namespace tpurt
