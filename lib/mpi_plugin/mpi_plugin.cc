// libtpurt_mpi.so: tpurt's data plane over MPI (the table of net/mpi_plugin_api.h).
// Point-to-point transfers become MPI_Isend/MPI_Irecv and all-reduces
// MPI_Iallreduce, on a duplicate of MPI_COMM_WORLD (or a communicator per group of
// tasks, made once), polled with MPI_Testsome until done so that every wait honours
// its deadline and the runtime's check(). Each task ends a step by sending every
// peer its outcome; a receive of each peer's is posted when the step begins, so a
// wait also notices a peer that ended the step without it.
//
// What MPI cannot undo: a send or a collective in flight cannot be cancelled (only a
// receive can). A wait that fails with one still in flight leaves the handle doomed
// (tpurt_mpi_plugin::doomed); the caller must end the process with abort().
#include <mpi.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "mpi_plugin/reduce_ops.h"
#include "net/mpi_plugin_api.h"

using tpurt::mpi::ReduceOps;

namespace {

// A step's outcome travels in one message of at most this many bytes.
constexpr size_t kMaxEndBytes = 64 * 1024;
// One MPI call moves at most this many bytes or elements (its counts are int).
constexpr uint64_t kMaxChunk = 1u << 30;
// Steps before the tags repeat: a message a failed step left unreceived can only
// match a step this many later.
constexpr uint64_t kTagCycle = 1024;
// After a peer ends the step, how long a wait on it still polls: what it sent before
// its end may still be arriving.
constexpr int64_t kEndGraceNs = 200 * 1000 * 1000;
// How long the tasks of a collective that missed its deadline have to say which
// collective they have reached.
constexpr int64_t kAskNs = 200 * 1000 * 1000;
// How long a failed wait lets cancelled receives and finished sends complete.
constexpr int64_t kSettleNs = 100 * 1000 * 1000;
// A wait spins on MPI as MPI's blocking calls do; only after this long without
// progress does it yield the CPU (a yield on a busy host may cost a time slice).
constexpr int64_t kSpinNs = 1000 * 1000;
// The peers' step ends are polled once in this many polls of the wait's requests:
// every MPI_Test runs MPI's progress engine once more.
constexpr unsigned kEndPollEvery = 64;

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void say(char* buf, size_t size, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
void say(char* buf, size_t size, const char* fmt, ...) {
  if (buf == nullptr || size == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, size, fmt, ap);
  va_end(ap);
}

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, len);
}

std::string name_of(const tpurt_mpi_wait* w, int task) {
  char buf[256] = "";
  if (w && w->name) w->name(w->ctx, task, buf, sizeof buf);
  if (buf[0] == '\0') snprintf(buf, sizeof buf, "task %d", task);
  return buf;
}

}  // namespace

struct tpurt_mpi_handle {
  MPI_Comm comm = MPI_COMM_NULL;
  int size = 0, rank = 0;
  uint64_t tag_slots = 1;  // data tags per step
  int tag_ub = 32767;
  uint64_t step = 0;
  uint64_t reached = 0;  // the last collective of the step this task waited in
  std::unique_ptr<ReduceOps> ops;
  // This step's ends: a receive of each peer's, posted when the step begins.
  std::vector<std::vector<char>> end_in;
  std::vector<MPI_Request> end_req;
  std::vector<char> ended;
  std::vector<int> end_len;
  std::vector<MPI_Request> end_send;
  std::string end_out;
  // Sends and collectives of failed waits that did not complete; stuck_send: which
  // are sends (the peer drains them when the step ends, a collective never ends).
  std::vector<MPI_Request> stuck;
  std::vector<char> stuck_send;
  std::list<std::vector<char>> sinks;  // of drains that did not finish
  std::list<std::pair<MPI_Request, uint64_t>> answers;  // to peers' queries, in flight
  std::map<std::vector<int32_t>, MPI_Comm> comms;  // by the group's tasks
};

namespace {

int end_tag(const tpurt_mpi_handle* h) { return h->tag_ub - static_cast<int>(h->step % kTagCycle); }

// A step's tags: tag_slots - 2 for data, then one for "which collective have you
// reached?" and one for the answers (all drained with the step's data).
int data_tag(const tpurt_mpi_handle* h, uint64_t seq, uint64_t digest) {
  uint64_t x = seq * 0x9e3779b97f4a7c15ull ^ digest;
  x ^= x >> 29;
  return static_cast<int>((h->step % kTagCycle) * h->tag_slots + x % (h->tag_slots - 2));
}

bool in_flight(const std::vector<MPI_Request>& reqs) {
  for (MPI_Request r : reqs)
    if (r != MPI_REQUEST_NULL) return true;
  return false;
}

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
// A step's end: code (4 bytes), origin replica (4), the last collective the task
// reached (8), message.
constexpr size_t kEndHeaderBytes = 16;

bool read_end(const tpurt_mpi_handle* h, int p, int32_t* code, int32_t* origin, uint64_t* reached,
              std::string* message) {
  if (h->end_len[p] < static_cast<int>(kEndHeaderBytes)) return false;
  const char* e = h->end_in[p].data();
  std::memcpy(code, e, 4);
  std::memcpy(origin, e + 4, 4);
  std::memcpy(reached, e + 8, 8);
  message->assign(e + kEndHeaderBytes, h->end_len[p] - kEndHeaderBytes);
  return true;
}

int query_tag(const tpurt_mpi_handle* h) {
  return static_cast<int>((h->step % kTagCycle + 1) * h->tag_slots - 2);
}
int answer_tag(const tpurt_mpi_handle* h) { return query_tag(h) + 1; }

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

enum Kind : char { kReceive, kSend, kCollective };

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
      h->stuck_send.push_back(kind[i] == kSend);
    }
}

// Completes what stuck requests can; whether a send is still stuck.
bool sends_stuck(tpurt_mpi_handle* h) {
  bool any = false;
  for (size_t i = 0; i < h->stuck.size(); ++i) {
    int done = 0;
    MPI_Test(&h->stuck[i], &done, MPI_STATUS_IGNORE);
    any |= !done && h->stuck_send[i];
  }
  size_t k = 0;
  for (size_t i = 0; i < h->stuck.size(); ++i)
    if (h->stuck[i] != MPI_REQUEST_NULL) {
      h->stuck[k] = h->stuck[i];
      h->stuck_send[k++] = h->stuck_send[i];
    }
  h->stuck.resize(k);
  h->stuck_send.resize(k);
  return any;
}

// What the requests of a wait are: a receive from, a send to, or a collective with
// peer (a collective watches every other task of its group: watch).
struct Waiting {
  std::vector<MPI_Request> reqs;
  std::vector<int> peer;      // -1: a collective
  std::vector<char> kind;     // Kind
  std::vector<int> watch;     // for a collective: its other tasks
};

// Polls w's requests until all are done. what: the collective, for messages.
tpu_status wait_all(tpurt_mpi_handle* h, Waiting& w, uint64_t seq, const tpurt_mpi_wait* wait,
                    const char* what, char* err, size_t err_size) {
  const size_t n = w.reqs.size();
  std::vector<int> idx(n);
  std::vector<MPI_Status> st(n);
  int64_t grace_until = -1, last_progress = now_ns();
  unsigned polls = 0;
  auto fail = [&](tpu_status code, const std::string& message) {
    give_up(h, w.reqs, w.kind);
    say(err, err_size, "%s", message.c_str());
    return code;
  };
  for (;;) {
    bool advanced = false;
    if (in_flight(w.reqs)) {
      int outcount = 0;
      int rc = MPI_Testsome(static_cast<int>(n), w.reqs.data(), &outcount, idx.data(), st.data());
      if (rc != MPI_SUCCESS) {
        int bad_peer = -1, bad = rc;
        for (int i = 0; rc == MPI_ERR_IN_STATUS && i < outcount; ++i)
          if (st[i].MPI_ERROR != MPI_SUCCESS) bad = st[i].MPI_ERROR, bad_peer = w.peer[idx[i]];
        return fail(TPU_UNAVAILABLE, (bad_peer >= 0 ? name_of(wait, bad_peer) + ": " : std::string()) +
                                         what + " #" + std::to_string(seq) + " failed in MPI: " +
                                         mpi_error(bad));
      }
      advanced = outcount > 0 && outcount != MPI_UNDEFINED;
    }
    if (!in_flight(w.reqs)) return TPU_OK;
    const int64_t now = now_ns();
    if (advanced) last_progress = now;
    // A peer that ended the step will not take part: its end fails the wait, once what
    // it sent before has had time to arrive.
    if (++polls % kEndPollEvery == 0 || now - last_progress > kSpinNs) {
      poll_ends(h);
      serve_queries(h);
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
    if (gone >= 0) {
      int32_t code = 0, origin = -1;
      uint64_t reached = 0;
      std::string message;
      if (!read_end(h, gone, &code, &origin, &reached, &message))
        return fail(TPU_UNAVAILABLE, name_of(wait, gone) + " sent a malformed end of the step");
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
    if (now - last_progress > kSpinNs) sched_yield();
  }
}

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

tpu_status do_exchange(tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, const tpurt_mpi_transfer* sends,
                       size_t num_sends, const tpurt_mpi_transfer* recvs, size_t num_recvs,
                       const tpurt_mpi_wait* wait, char* err, size_t err_size) {
  for (size_t i = 0; i < num_sends; ++i)
    if (!check_peer(h, sends[i].peer, "a send", err, err_size)) return TPU_INTERNAL;
  for (size_t i = 0; i < num_recvs; ++i)
    if (!check_peer(h, recvs[i].peer, "a receive", err, err_size)) return TPU_INTERNAL;
  Waiting w;
  h->reached = std::max(h->reached, seq);
  const int tag = data_tag(h, seq, digest);
  post(h, w, recvs, num_recvs, true, tag);
  post(h, w, sends, num_sends, false, tag);
  return wait_all(h, w, seq, wait, "the exchange", err, err_size);
}

const char* library_version() {
  static char text[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  if (text[0] == '\0') {
    int len = 0;
    MPI_Get_library_version(text, &len);
    text[strcspn(text, "\n,")] = '\0';
  }
  return text;
}

// Whether this plugin initialised MPI: then it finalises it when the process exits,
// not when a handle closes, so that a program may shut its TPU system down and start
// another (MPI cannot be initialised twice).
bool g_initialized_here = false;
// Handles not yet closed: one with an operation in flight at exit aborts the job
// rather than finalise MPI under it.
std::vector<tpurt_mpi_handle*> g_open;

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (tpurt_mpi_handle* h : g_open)
    if (!h->stuck.empty()) {
      fprintf(stderr, "tpurt: task %d: MPI_Abort at exit: an MPI collective in flight cannot be cancelled\n",
              h->rank);
      fflush(stderr);
      MPI_Abort(h->comm, 1);
    }
  MPI_Finalize();
}

tpu_status open_handle(int num_tasks, int task_id, tpurt_mpi_handle** out, char* why, size_t why_size) {
  *out = nullptr;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    say(why, why_size, "MPI was already finalized in this process");
    return TPU_FAILED_PRECONDITION;
  }
  auto h = std::make_unique<tpurt_mpi_handle>();
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    // Open MPI's default non-blocking all-reduce is far slower than its blocking one
    // at large sizes; Rabenseifner's is as fast. The user's setting wins.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", 0);
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) {
      say(why, why_size, "MPI_Init_thread failed: %s", mpi_error(rc).c_str());
      return TPU_UNAVAILABLE;
    }
    g_initialized_here = true;
    atexit(finalize_at_exit);
  } else {
    MPI_Query_thread(&provided);
  }
  auto refuse = [&](const std::string& message) {
    say(why, why_size, "%s", message.c_str());
    return TPU_FAILED_PRECONDITION;
  };
  // Not always the same thread drives the transport: FUNNELED is not enough.
  if (provided < MPI_THREAD_SERIALIZED)
    return refuse("MPI provides thread level " + std::to_string(provided) +
                  "; the transport needs MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE (the program "
                  "initialised MPI with less)");
  MPI_Comm_size(MPI_COMM_WORLD, &h->size);
  MPI_Comm_rank(MPI_COMM_WORLD, &h->rank);
  if (h->size != num_tasks || h->rank != task_id)
    return refuse("MPI's world is rank " + std::to_string(h->rank) + " of " + std::to_string(h->size) +
                  " but this is task " + std::to_string(task_id) + " of " + std::to_string(num_tasks) +
                  " (the tasks must be the ranks of MPI_COMM_WORLD, in order)");
  void* ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  if (flag && ub) h->tag_ub = *static_cast<int*>(ub);
  h->tag_slots = (static_cast<uint64_t>(h->tag_ub) - kTagCycle) / kTagCycle;
  if (h->tag_slots < 3)
    return refuse("MPI_TAG_UB is " + std::to_string(h->tag_ub) + "; the transport needs at least " +
                  std::to_string(4 * kTagCycle) + " tags");
  MPI_Comm_dup(MPI_COMM_WORLD, &h->comm);
  MPI_Comm_set_errhandler(h->comm, MPI_ERRORS_RETURN);
  h->ops.reset(new ReduceOps());
  h->end_in.assign(h->size, std::vector<char>(kMaxEndBytes));
  h->end_req.assign(h->size, MPI_REQUEST_NULL);
  h->ended.assign(h->size, 0);
  h->end_len.assign(h->size, 0);
  *out = h.release();
  g_open.push_back(*out);
  return TPU_OK;
}

void close_handle(tpurt_mpi_handle* h) {
  if (h == nullptr) return;
  g_open.erase(std::remove(g_open.begin(), g_open.end(), h), g_open.end());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    for (MPI_Request& r : h->end_req)
      if (r != MPI_REQUEST_NULL) {
        MPI_Cancel(&r);
        MPI_Request_free(&r);
      }
    for (auto& a : h->answers)
      if (a.first != MPI_REQUEST_NULL) MPI_Request_free(&a.first);
    for (auto& c : h->comms) MPI_Comm_free(&c.second);
    h->ops.reset();
    if (h->comm != MPI_COMM_NULL) MPI_Comm_free(&h->comm);
  }
  delete h;
}

tpu_status begin_step(tpurt_mpi_handle* h, uint64_t step, char* err, size_t err_size) {
  h->step = step;
  h->reached = 0;
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

// The group's communicator: MPI_COMM_WORLD's duplicate for every task, else one made
// once with MPI_Comm_create_group, which only the group's tasks call. That call
// blocks until they all do: a zero-byte exchange with each first, bounded by the
// deadline, makes sure they are there.
tpu_status comm_for(tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, const int32_t* tasks, size_t num,
                    const tpurt_mpi_wait* wait, MPI_Comm* comm, char* err, size_t err_size) {
  if (static_cast<int>(num) == h->size) {
    *comm = h->comm;
    return TPU_OK;
  }
  std::vector<int32_t> key(tasks, tasks + num);
  auto it = h->comms.find(key);
  if (it != h->comms.end()) {
    *comm = it->second;
    return TPU_OK;
  }
  std::vector<tpurt_mpi_transfer> meet;
  for (int32_t t : key)
    if (t != h->rank) meet.push_back({t, 0, nullptr, 0});
  tpu_status s = do_exchange(h, seq, digest ^ 0x636f6d6dull, meet.data(), meet.size(), meet.data(),
                             meet.size(), wait, err, err_size);
  if (s != TPU_OK) return s;
  MPI_Group world, group;
  MPI_Comm_group(h->comm, &world);
  std::vector<int> ranks(key.begin(), key.end());
  MPI_Group_incl(world, static_cast<int>(ranks.size()), ranks.data(), &group);
  MPI_Comm made = MPI_COMM_NULL;
  int rc = MPI_Comm_create_group(h->comm, group, 1, &made);
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  if (rc != MPI_SUCCESS || made == MPI_COMM_NULL) {
    say(err, err_size, "MPI_Comm_create_group for %zu tasks failed: %s", num, mpi_error(rc).c_str());
    return TPU_INTERNAL;
  }
  MPI_Comm_set_errhandler(made, MPI_ERRORS_RETURN);
  h->comms.emplace(std::move(key), made);
  *comm = made;
  return TPU_OK;
}

tpu_status all_reduce(tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, const int32_t* tasks,
                      size_t num_tasks, tpu_dtype dtype, tpu_reduce_op op, const void* in, void* out,
                      uint64_t count, int32_t divisor, const tpurt_mpi_wait* wait, char* err,
                      size_t err_size) {
  MPI_Datatype type;
  MPI_Op mpi_op;
  if (!h->ops->map(dtype, op, &type, &mpi_op)) {
    say(err, err_size, "MPI cannot reduce dtype %d with op %d as tpurt does", static_cast<int>(dtype),
        static_cast<int>(op));
    return TPU_INTERNAL;
  }
  bool here = false;
  for (size_t i = 0; i < num_tasks; ++i) {
    if (tasks[i] < 0 || tasks[i] >= h->size || (i > 0 && tasks[i] <= tasks[i - 1])) {
      say(err, err_size, "the group's tasks are not distinct tasks of 0..%d in increasing order (entry %zu is %d)",
          h->size - 1, i, tasks[i]);
      return TPU_INTERNAL;
    }
    here |= tasks[i] == h->rank;
  }
  if (!here) {
    say(err, err_size, "task %d is not in the group it reduces over", h->rank);
    return TPU_INTERNAL;
  }
  MPI_Comm comm = MPI_COMM_NULL;
  h->reached = std::max(h->reached, seq);
  tpu_status s = comm_for(h, seq, digest, tasks, num_tasks, wait, &comm, err, err_size);
  if (s != TPU_OK) return s;
  int esize = 0;
  MPI_Type_size(type, &esize);
  Waiting w;
  for (size_t i = 0; i < num_tasks; ++i)
    if (tasks[i] != h->rank) w.watch.push_back(tasks[i]);
  for (uint64_t off = 0; off < count || (count == 0 && off == 0);) {
    const int len = static_cast<int>(std::min<uint64_t>(kMaxChunk, count - off));
    w.reqs.assign(1, MPI_REQUEST_NULL);
    w.peer.assign(1, -1);
    w.kind.assign(1, kCollective);
    int rc = MPI_Iallreduce(static_cast<const char*>(in) + off * esize, static_cast<char*>(out) + off * esize,
                            len, type, mpi_op, comm, &w.reqs[0]);
    if (rc != MPI_SUCCESS) {
      say(err, err_size, "MPI_Iallreduce of collective #%llu failed: %s", static_cast<unsigned long long>(seq),
          mpi_error(rc).c_str());
      return TPU_UNAVAILABLE;
    }
    s = wait_all(h, w, seq, wait, "MPI_Iallreduce", err, err_size);
    if (s != TPU_OK) return s;
    off += static_cast<uint64_t>(len);
    if (count == 0) break;
  }
  if (op == TPU_REDUCE_MEAN) tpurt::mpi::divide(dtype, out, count, divisor);
  return TPU_OK;
}

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
      h->stuck_send.push_back(0);
      return false;
    }
  }
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
  if (len) std::memcpy(&h->end_out[kEndHeaderBytes], mine->message, len);
  h->end_send.assign(h->size, MPI_REQUEST_NULL);
  for (int p = 0; p < h->size; ++p)
    if (p != h->rank)
      MPI_Isend(h->end_out.data(), static_cast<int>(h->end_out.size()), MPI_BYTE, p, end_tag(h), h->comm,
                &h->end_send[p]);
  const int64_t deadline = now_ns() + timeout_ms * 1000000;
  tpu_status status = TPU_OK;
  std::vector<char> drained(h->size, 0);
  for (;;) {
    poll_ends(h);
    serve_queries(h);
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

int doomed(tpurt_mpi_handle* h) {
  if (h->stuck.empty()) return 0;
  for (char send : h->stuck_send)
    if (!send) return 2;
  return 1;
}

int can_all_reduce(tpurt_mpi_handle* h, tpu_dtype dtype, tpu_reduce_op op) {
  MPI_Datatype type;
  MPI_Op mpi_op;
  return h->ops->map(dtype, op, &type, &mpi_op);
}

void abort_all(tpurt_mpi_handle* h, int code) {
  fflush(stdout);
  fflush(stderr);
  MPI_Abort(h && h->comm != MPI_COMM_NULL ? h->comm : MPI_COMM_WORLD, code);
  _exit(code);  // MPI_Abort does not return; should it, this process still ends
}

// No exception crosses into libtpurt.
template <typename Fn>
tpu_status guarded(char* err, size_t err_size, Fn&& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    say(err, err_size, "out of memory in the MPI plugin");
    return TPU_RESOURCE_EXHAUSTED;
  } catch (...) {
    say(err, err_size, "unexpected exception in the MPI plugin");
    return TPU_INTERNAL;
  }
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const tpurt_mpi_plugin* tpurt_mpi_plugin_v1(void) {
  static const tpurt_mpi_plugin table = {
      sizeof(tpurt_mpi_plugin),
      TPURT_MPI_PLUGIN_VERSION,
      library_version,
      [](int num_tasks, int task_id, tpurt_mpi_handle** out, char* why, size_t why_size) {
        return guarded(why, why_size, [&] { return open_handle(num_tasks, task_id, out, why, why_size); });
      },
      close_handle,
      [](tpurt_mpi_handle* h, uint64_t step, char* err, size_t err_size) {
        return guarded(err, err_size, [&] { return begin_step(h, step, err, err_size); });
      },
      [](tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, const tpurt_mpi_transfer* sends, size_t num_sends,
         const tpurt_mpi_transfer* recvs, size_t num_recvs, const tpurt_mpi_wait* wait, char* err,
         size_t err_size) {
        return guarded(err, err_size, [&] {
          return do_exchange(h, seq, digest, sends, num_sends, recvs, num_recvs, wait, err, err_size);
        });
      },
      can_all_reduce,
      [](tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, const int32_t* tasks, size_t num_tasks,
         tpu_dtype dtype, tpu_reduce_op op, const void* in, void* out, uint64_t count, int32_t divisor,
         const tpurt_mpi_wait* wait, char* err, size_t err_size) {
        return guarded(err, err_size, [&] {
          return all_reduce(h, seq, digest, tasks, num_tasks, dtype, op, in, out, count, divisor, wait, err,
                            err_size);
        });
      },
      [](tpurt_mpi_handle* h, const tpurt_mpi_outcome* mine, int64_t timeout_ms, const tpurt_mpi_wait* wait,
         tpurt_mpi_outcome* remote, int* failed, char* err, size_t err_size) {
        return guarded(err, err_size, [&] {
          return end_step(h, mine, timeout_ms, wait, remote, failed, err, err_size);
        });
      },
      doomed,
      abort_all,
  };
  return &table;
}
