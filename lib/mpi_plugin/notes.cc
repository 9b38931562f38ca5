// Notes: which collective each task has entered, so that a task whose replicas called
// another collective is named (TPU_INVALID_ARGUMENT) instead of showing as a missed
// deadline. Transfers carry the collective's digest in their tag, so mismatched ones
// never match; engine collectives on one communicator match in call order whatever
// they are, so two with the same counts and another op would complete with wrong
// results. A note (24 bytes, on a communicator of its own) says which collective a
// task is in. A task sends its note to the peers it waits on when its wait stalls
// (kSpinNs without progress: mismatched transfers never complete, nor do most
// mismatched MPI collectives) or when it finds a peer in another collective; waits
// read the notes that arrived as they poll, and a peer in the same collective number
// with another digest fails the wait, naming it. Nothing is sent while collectives
// progress. Unless TPURT_MPI_CHECK_COLLECTIVES=0, a task also sends its note on
// entering every MPI collective, and once the collective completes looks for its
// peers' (sent before their parts, so due): two MPI collectives that MPI matched and
// completed (the same counts, another op) are caught too, for one small message a
// peer a collective.
#include "mpi_plugin/handle.h"

#include <sched.h>

#include <algorithm>

namespace tpurt {
namespace mpi {

namespace {

constexpr int kNoteTag = 0;

int post_note(tpurt_mpi_handle* h, int p) {
  h->note_have[p] = 0;
  return MPI_Irecv(&h->note_in[p], static_cast<int>(sizeof(Note)), MPI_BYTE, p, kNoteTag, h->ctl, &h->note_req[p]);
}

// Frees the notes whose sends completed.
void reap(tpurt_mpi_handle* h) {
  for (auto it = h->notes_out.begin(); it != h->notes_out.end();) {
    int done = 0;
    MPI_Testall(static_cast<int>(it->reqs.size()), it->reqs.data(), &done, MPI_STATUSES_IGNORE);
    it = done ? h->notes_out.erase(it) : std::next(it);
  }
}

std::string hex(uint64_t x) {
  char buf[24];
  snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(x));
  return buf;
}

}  // namespace

tpu_status open_notes(tpurt_mpi_handle* h, char* err, size_t err_size) {
  h->note_in.assign(h->size, Note{});
  h->note_req.assign(h->size, MPI_REQUEST_NULL);
  h->note_have.assign(h->size, 0);
  h->note_index.assign(h->size, 0);
  h->noted.assign(h->size, 0);
  h->agreed.assign(h->size, 0);
  for (int p = 0; p < h->size; ++p) {
    if (p == h->rank) continue;
    int rc = post_note(h, p);
    if (rc != MPI_SUCCESS) {
      say(err, err_size, "MPI_Irecv of task %d's notes failed: %s", p, mpi_error(rc).c_str());
      return TPU_UNAVAILABLE;
    }
  }
  return TPU_OK;
}

void close_notes(tpurt_mpi_handle* h) {
  for (MPI_Request& r : h->note_req)
    if (r != MPI_REQUEST_NULL) {
      MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
  for (NoteOut& n : h->notes_out)  // 24 bytes: sent eagerly, or dropped with the job
    for (MPI_Request& r : n.reqs)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  h->notes_out.clear();
}

void note_entry(tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, const int* peers, size_t num) {
  NoteOut* out = nullptr;
  for (size_t i = 0; i < num; ++i) {
    const int p = peers[i];
    if (p < 0 || p >= h->size || p == h->rank || h->noted[p] == seq + 1) continue;
    h->noted[p] = seq + 1;
    if (out == nullptr) {
      reap(h);
      h->notes_out.emplace_back();
      out = &h->notes_out.back();
      out->note = Note{h->step, seq, digest};
      out->reqs.reserve(num);
    }
    out->reqs.push_back(MPI_REQUEST_NULL);
    MPI_Isend(&out->note, static_cast<int>(sizeof(Note)), MPI_BYTE, p, kNoteTag, h->ctl, &out->reqs.back());
  }
}

int find_mismatch(tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, Note* theirs) {
  // One MPI_Testsome for every peer's next note (each MPI call runs MPI's progress
  // engine once more): a note queued behind one passed here is read at the next look.
  {
    int outcount = 0;
    MPI_Testsome(h->size, h->note_req.data(), &outcount, h->note_index.data(), MPI_STATUSES_IGNORE);
    for (int i = 0; outcount != MPI_UNDEFINED && i < outcount; ++i) h->note_have[h->note_index[i]] = 1;
    for (int p = 0; p < h->size; ++p) {
      if (!h->note_have[p]) continue;
      const Note& n = h->note_in[p];
      const bool behind = n.step < h->step || (n.step == h->step && n.seq < seq);
      const bool here = n.step == h->step && n.seq == seq;
      if (here && n.digest != digest) {  // kept: every later look names it again
        *theirs = n;
        return p;
      }
      if (!behind && !here) continue;  // the peer is ahead: its note waits for this task
      if (here) h->agreed[p] = seq + 1;
      post_note(h, p);
    }
  }
  return -1;
}

std::string mismatch_message(const tpurt_mpi_wait* wait, int p, const Note& theirs, uint64_t seq,
                             uint64_t digest) {
  return name_of(wait, p) + " is in collective #" + std::to_string(theirs.seq) + " of the step (descriptor digest " +
         hex(theirs.digest) + ") while this task is in collective #" + std::to_string(seq) + " (digest " +
         hex(digest) +
         "): the tasks' replicas called different collectives, or with different dtypes, shapes, operations "
         "or groups";
}

tpu_status confirm(tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, const std::vector<int>& watch,
                   const tpurt_mpi_wait* wait, char* err, size_t err_size) {
  const int64_t until = std::min<int64_t>(wait->deadline_ns, now_ns() + kAskNs);
  for (unsigned polls = 0;; ++polls) {
    Note theirs;
    const int bad = find_mismatch(h, seq, digest, &theirs);
    if (bad >= 0) {
      say(err, err_size, "%s", mismatch_message(wait, bad, theirs, seq, digest).c_str());
      return TPU_INVALID_ARGUMENT;
    }
    bool known = true;
    for (int t : watch) {
      const Note& n = h->note_in[t];
      const bool ahead = h->note_have[t] && (n.step > h->step || (n.step == h->step && n.seq > seq));
      known &= h->agreed[t] == seq + 1 || ahead;
    }
    // A note that does not come (it is due at once) says nothing: the collective
    // completed, and nothing says it was another.
    if (known || now_ns() >= until) return TPU_OK;
    if (polls % kEndPollEvery == kEndPollEvery - 1) sched_yield();
  }
}

}  // namespace mpi
}  // namespace tpurt
