// A step's beginning and end: each task's outcome to every peer, what a failed step
// left to drain, and the peers' answers about which collective they reached.
#include "mpi_plugin/handle.h"

#include <sched.h>

#include <algorithm>
#include <cstring>

#include "core/deadline.h"

namespace tpurt {
namespace mpi {

namespace {

// Receives, into nothing, the data peer p sent for this step that is still
// unreceived (every message before its end: MPI matches a peer's messages in order).
// False while one is still arriving; stops at a message of another step.
bool drain(tpurt_mpi_handle* h, int p, int64_t deadline) {
  const uint64_t slot = h->step % kTagCycle;
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(p, MPI_ANY_TAG, h->comm, &flag, &st);
    if (!flag) return true;
    const uint64_t tag = static_cast<uint64_t>(st.MPI_TAG);
    if (tag >= kTagCycle * h->tag_slots || tag / h->tag_slots != slot) return true;
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    std::vector<char> sink(std::max(count, 1));
    MPI_Request r;
    MPI_Irecv(sink.data(), count, MPI_BYTE, p, st.MPI_TAG, h->comm, &r);
    int done = 0;
    while (!done && now_ns() < deadline) MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    if (!done) {  // mid-transfer at the deadline: the sink lives as long as the handle
      h->sinks.push_back(std::move(sink));
      h->stuck.push_back(r);
      h->stuck_kind.push_back(kReceive);
      return false;
    }
  }
}

}  // namespace

// Reads the ends of the step that have arrived.
void poll_ends(tpurt_mpi_handle* h) {
  for (int p = 0; p < h->size; ++p) {
    if (h->end_req[p] == MPI_REQUEST_NULL) continue;
    int done = 0;
    MPI_Status st;
    if (MPI_Test(&h->end_req[p], &done, &st) != MPI_SUCCESS || !done) continue;
    int len = 0;
    MPI_Get_count(&st, MPI_BYTE, &len);
    h->ended[p] = 1;
    h->end_len[p] = len == MPI_UNDEFINED ? 0 : len;
  }
}

// A peer's end as an outcome; false for a malformed one.
bool read_end(const tpurt_mpi_handle* h, int p, int32_t* code, int32_t* origin, uint64_t* reached,
              std::string* message, uint64_t* voted) {
  if (h->end_len[p] < static_cast<int>(kEndHeaderBytes)) return false;
  const char* e = h->end_in[p].data();
  std::memcpy(code, e, 4);
  std::memcpy(origin, e + 4, 4);
  std::memcpy(reached, e + 8, 8);
  if (voted) std::memcpy(voted, e + 16, 8);
  message->assign(e + kEndHeaderBytes, h->end_len[p] - kEndHeaderBytes);
  return true;
}

// Answers the peers asking which collective this task has reached (a wait whose
// collective missed its deadline asks, to name the tasks that are not in it).
void serve_queries(tpurt_mpi_handle* h) {
  for (auto it = h->answers.begin(); it != h->answers.end();) {
    int done = 0;
    MPI_Test(&it->first, &done, MPI_STATUS_IGNORE);
    it = done ? h->answers.erase(it) : std::next(it);
  }
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, query_tag(h), h->comm, &flag, &st);
    if (!flag) return;
    MPI_Recv(nullptr, 0, MPI_BYTE, st.MPI_SOURCE, query_tag(h), h->comm, MPI_STATUS_IGNORE);
    h->answers.emplace_back(MPI_REQUEST_NULL, h->reached);
    MPI_Isend(&h->answers.back().second, 8, MPI_BYTE, st.MPI_SOURCE, answer_tag(h), h->comm,
              &h->answers.back().first);
  }
}

// Of the tasks `watch`, those that have not reached collective seq: asked, and given
// kAskNs to answer (the step ends of those that ended say it already).
std::vector<int> not_reached(tpurt_mpi_handle* h, const std::vector<int>& watch, uint64_t seq) {
  std::vector<uint64_t> reached(h->size, 0);
  std::vector<char> known(h->size, 0);
  std::vector<MPI_Request> asks;
  for (int t : watch) {
    if (h->ended[t]) continue;
    asks.push_back(MPI_REQUEST_NULL);
    MPI_Isend(nullptr, 0, MPI_BYTE, t, query_tag(h), h->comm, &asks.back());
  }
  const int64_t until = now_ns() + kAskNs;
  for (bool waiting = true; waiting && now_ns() < until;) {
    serve_queries(h);  // the others ask at the same time
    poll_ends(h);
    waiting = false;
    for (int t : watch) {
      if (known[t] || h->ended[t]) continue;
      int flag = 0;
      MPI_Iprobe(t, answer_tag(h), h->comm, &flag, MPI_STATUS_IGNORE);
      if (flag) {
        MPI_Recv(&reached[t], 8, MPI_BYTE, t, answer_tag(h), h->comm, MPI_STATUS_IGNORE);
        known[t] = 1;
      } else {
        waiting = true;
      }
    }
    if (waiting) sched_yield();
  }
  for (MPI_Request& r : asks) {  // zero bytes: done, or dropped with the step's data
    int done = 0;
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    if (!done) MPI_Request_free(&r);
  }
  std::vector<int> missing;
  for (int t : watch) {
    if (h->ended[t]) {
      int32_t code = 0, origin = -1;
      std::string message;
      if (read_end(h, t, &code, &origin, &reached[t], &message)) known[t] = 1;
    }
    if (!known[t] || reached[t] < seq) missing.push_back(t);
  }
  return missing;
}

tpu_status begin_step(tpurt_mpi_handle* h, uint64_t step, char* err, size_t err_size) {
  h->step = step;
  h->reached = 0;
  h->voted = 0;
  h->noted.assign(h->size, 0);
  h->agreed.assign(h->size, 0);
  for (int p = 0; p < h->size; ++p) {
    h->ended[p] = 0;
    h->end_len[p] = 0;
    if (p == h->rank) continue;
    if (h->end_req[p] != MPI_REQUEST_NULL) {  // a peer that did not end the last step
      MPI_Cancel(&h->end_req[p]);
      MPI_Wait(&h->end_req[p], MPI_STATUS_IGNORE);
    }
    int rc = MPI_Irecv(h->end_in[p].data(), static_cast<int>(kMaxEndBytes), MPI_BYTE, p, end_tag(h),
                       h->comm, &h->end_req[p]);
    if (rc != MPI_SUCCESS) {
      say(err, err_size, "MPI_Irecv of task %d's end of step %llu failed: %s", p,
          static_cast<unsigned long long>(step), mpi_error(rc).c_str());
      return TPU_UNAVAILABLE;
    }
  }
  return TPU_OK;
}

tpu_status end_step(tpurt_mpi_handle* h, const tpurt_mpi_outcome* mine, int64_t timeout_ms,
                    const tpurt_mpi_wait* wait, tpurt_mpi_outcome* remote, int* failed, char* err,
                    size_t err_size) {
  *failed = 0;
  const size_t len = mine->message ? std::min(strlen(mine->message), kMaxEndBytes - kEndHeaderBytes) : 0;
  h->end_out.assign(kEndHeaderBytes + len, '\0');
  std::memcpy(&h->end_out[0], &mine->code, 4);
  std::memcpy(&h->end_out[4], &mine->origin_replica, 4);
  std::memcpy(&h->end_out[8], &h->reached, 8);
  std::memcpy(&h->end_out[16], &h->voted, 8);
  if (len) std::memcpy(&h->end_out[kEndHeaderBytes], mine->message, len);
  h->end_send.assign(h->size, MPI_REQUEST_NULL);
  for (int p = 0; p < h->size; ++p)
    if (p != h->rank)
      MPI_Isend(h->end_out.data(), static_cast<int>(h->end_out.size()), MPI_BYTE, p, end_tag(h), h->comm,
                &h->end_send[p]);
  const int64_t deadline = tpurt::deadline_ns_after(now_ns(), timeout_ms);
  tpu_status status = TPU_OK;
  std::vector<char> drained(h->size, 0);
  Note none;
  for (;;) {
    poll_ends(h);
    serve_queries(h);
    // The step's notes that no wait read (those of quick exchanges): read now, so
    // that they do not pile up in MPI from step to step.
    find_mismatch(h, UINT64_MAX, 0, &none);
    // What a peer sent for this step that nobody received (its step failed, or this
    // one's): drained, so that its sends complete and it need not abort.
    for (int p = 0; p < h->size; ++p)
      if (h->ended[p] && !drained[p]) drained[p] = drain(h, p, deadline);
    int all_sent = 0;
    MPI_Testall(h->size, h->end_send.data(), &all_sent, MPI_STATUSES_IGNORE);
    const bool sending = sends_stuck(h);
    bool all_drained = true;
    for (int p = 0; p < h->size; ++p) all_drained &= p == h->rank || drained[p];
    if (all_sent && !in_flight(h->end_req) && !sending && all_drained) break;
    if (wait->check && wait->check(wait->ctx)) {
      status = TPU_CANCELLED;
      break;
    }
    if (now_ns() >= deadline) {
      std::string late;
      for (int p = 0; p < h->size; ++p)
        if (h->end_req[p] != MPI_REQUEST_NULL) late += (late.empty() ? "" : "; ") + name_of(wait, p);
      say(err, err_size, "%s did not end step %llu within %lld ms", late.c_str(),
          static_cast<unsigned long long>(h->step), static_cast<long long>(timeout_ms));
      break;
    }
    sched_yield();
  }
  // Ends that never came are not waited for again; unsent ones are stuck.
  give_up(h, h->end_req, std::vector<char>(h->size, kReceive));
  h->end_req.assign(h->size, MPI_REQUEST_NULL);
  give_up(h, h->end_send, std::vector<char>(h->size, kSend));
  if (status != TPU_OK) return status;
  // The failure to report: a task's own error before the aborts it caused elsewhere.
  for (int p = 0; p < h->size; ++p) {
    int32_t code = 0, origin = -1;
    uint64_t reached = 0;
    std::string message;
    if (p == h->rank || !h->ended[p] || !read_end(h, p, &code, &origin, &reached, &message) || code == TPU_OK)
      continue;
    if (*failed && !(remote->code == TPU_ABORTED && code != TPU_ABORTED)) continue;
    remote->code = code;
    remote->origin_replica = origin;
    say(remote->message, remote->message_size, "%s", message.c_str());
    *failed = 1;
  }
  return TPU_OK;
}

}  // namespace mpi
}  // namespace tpurt
