// The plugin's state (tpurt_mpi_handle) and what its parts share: limits, tags, the
// requests of a wait, and the functions one part calls in another.
#pragma once

#include <mpi.h>
#include <time.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mpi_plugin/reduce_ops.h"
#include "net/mpi_plugin_api.h"

namespace tpurt {
namespace mpi {

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
// A wait reads the clock (its deadline, stalls) and checks the peers and check()
// once in this many polls of its requests: a clock read costs as much as a poll on
// some hosts (190 ns against MPI_Testsome's 100-200 under a VM's TSC).
constexpr unsigned kCheckEvery = 8;
// The peers' step ends are polled once in this many polls of the wait's requests
// (a multiple of kCheckEvery): every MPI_Test runs MPI's progress engine once more.
constexpr unsigned kEndPollEvery = 64;
static_assert(kEndPollEvery % kCheckEvery == 0, "ends are polled on a check");
// A step's end: code (4 bytes), origin replica (4), the last collective the task
// reached (8), the last round of a vote it sent (8: voted_round()'s, 0 for none),
// message.
constexpr size_t kEndHeaderBytes = 24;
// What a vote's message starts with (vote.cc): the round it is of.
struct VoteHeader {
  uint64_t step = 0, seq = 0;
  uint32_t round = 0;
  uint32_t magic = 0;
};
static_assert(sizeof(VoteHeader) == 24, "VoteHeader has no padding");
constexpr uint32_t kVoteMagic = 0x62616c6fu;  // "balo"
// A vote's messages are at most this many bytes (its rounds' own bound is 1 MiB).
constexpr uint64_t kMaxVoteBytes = 4u << 20;
// Up to this many bytes of input an all-reduce goes point to point (all_reduce.cc):
// every task sends its input, behind a header naming the collective, to every other
// and reduces them all in task order. At these sizes a non-blocking MPI collective
// costs 10-20x a blocking one (Open MPI's libnbc), while a message this small is one
// eager send within shared memory's 4 KiB; the header checks agreement.
constexpr uint64_t kDirectBytes = 2048;
// ... among at most this many tasks: every task sends to every other, so the messages
// grow as the square of the group (MPI's own rounds grow as its logarithm).
constexpr size_t kDirectTasks = 16;

// What a direct all-reduce's message starts with: the collective it is for and what
// it reduces, all compared with the receiver's.
struct DirectHeader {
  uint64_t step = 0, seq = 0, digest = 0;
  uint32_t what = 0;   // dtype << 8 | op
  uint32_t count = 0;  // elements (<= kDirectBytes)
};
static_assert(sizeof(DirectHeader) == 32, "DirectHeader has no padding");

// A note on the control communicator: the collective (step, seq, digest) a task has
// entered (notes.cc).
struct Note {
  uint64_t step = 0, seq = 0, digest = 0;
};
// One in flight to every peer of a collective, kept until the sends complete.
struct NoteOut {
  Note note;
  std::vector<MPI_Request> reqs;
};

enum Kind : char { kReceive, kSend, kCollective };

// What the requests of a wait are: a receive from, a send to, or a collective with
// peer (a collective watches every other task of its group: watch).
struct Waiting {
  std::vector<MPI_Request> reqs;
  std::vector<int> peer;      // -1: a collective
  std::vector<char> kind;     // Kind
  std::vector<int> watch;     // for a collective: its other tasks
};

inline int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline void say(char* buf, size_t size, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
inline void say(char* buf, size_t size, const char* fmt, ...) {
  if (buf == nullptr || size == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, size, fmt, ap);
  va_end(ap);
}

inline std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, len);
}

inline std::string name_of(const tpurt_mpi_wait* w, int task) {
  char buf[256] = "";
  if (w && w->name) w->name(w->ctx, task, buf, sizeof buf);
  if (buf[0] == '\0') snprintf(buf, sizeof buf, "task %d", task);
  return buf;
}

}  // namespace mpi
}  // namespace tpurt

struct tpurt_mpi_handle {
  MPI_Comm comm = MPI_COMM_NULL;
  int size = 0, rank = 0;
  uint64_t tag_slots = 1;  // data tags per step
  int tag_ub = 32767;
  uint64_t step = 0;
  uint64_t reached = 0;  // the last collective of the step this task waited in
  uint64_t voted = 0;    // the last round of a vote this task sent in the step (voted_round)
  std::unique_ptr<tpurt::mpi::ReduceOps> ops;
  // This step's ends: a receive of each peer's, posted when the step begins.
  std::vector<std::vector<char>> end_in;
  std::vector<MPI_Request> end_req;
  std::vector<char> ended;
  std::vector<int> end_len;
  std::vector<MPI_Request> end_send;
  std::string end_out;
  // Requests of failed waits that did not complete, and their Kind: a send completes
  // when its peer drains it at the end of the step, a cancelled receive when MPI
  // settles it; a collective stays stuck for good, because the one that completes it
  // may be a peer's collective of a later step (matched out of step).
  std::vector<MPI_Request> stuck;
  std::vector<char> stuck_kind;
  std::list<std::vector<char>> sinks;  // of drains that did not finish
  std::list<std::pair<MPI_Request, uint64_t>> answers;  // to peers' queries, in flight
  std::map<std::vector<int32_t>, MPI_Comm> comms;  // by the group's tasks
  // Notes (notes.cc), on a communicator of their own: drains of the data never take
  // them. By peer: the receive of its next note (note_have: received, not yet passed),
  // and seq + 1 of the collective of this step last noted to it and last agreed on.
  MPI_Comm ctl = MPI_COMM_NULL;
  // TPURT_MPI_CHECK_COLLECTIVES (on unless 0): a note on entering every MPI
  // collective, and its peers' looked for once it completes (else only when a wait
  // stalls).
  bool eager_notes = true;
  std::vector<tpurt::mpi::Note> note_in;
  std::vector<MPI_Request> note_req;
  std::vector<char> note_have;
  std::vector<int> note_index;  // MPI_Testsome's
  std::vector<uint64_t> noted, agreed;
  std::list<tpurt::mpi::NoteOut> notes_out;
  // Direct all-reduces (all_reduce.cc): this task's message, and a slot per task for
  // the others' (given to sinks when a wait fails with them in flight).
  std::vector<char> direct_out, direct_in;
  tpurt::mpi::Waiting direct_wait;  // its requests, kept for their capacity
  // A vote round's staging and requests (vote.cc), kept for their capacity; a buffer
  // MPI may still use after a failed round is given to sinks.
  struct {
    std::vector<std::vector<char>> bufs;
    std::vector<MPI_Request> reqs;
    std::vector<char> kind, passed;
    std::vector<MPI_Status> status;
    std::vector<int> index;
  } vote;
  // wait_all's MPI_Testsome results, kept for their capacity (one wait at a time).
  std::vector<int> poll_index;
  std::vector<MPI_Status> poll_status;
  // What the plugin ran (printed at close with TPURT_MPI_STATS=1, for the tests).
  uint64_t num_exchanges = 0, num_iallreduce = 0, num_ireduce_scatter = 0, num_direct = 0, num_votes = 0;
};

namespace tpurt {
namespace mpi {

inline int end_tag(const tpurt_mpi_handle* h) { return h->tag_ub - static_cast<int>(h->step % kTagCycle); }

// A step's tags: tag_slots - 4 for data, then one for each round of a vote, one for
// "which collective have you reached?" and one for the answers (all drained with the
// step's data).
constexpr uint64_t kReservedTags = 4;
inline int data_tag(const tpurt_mpi_handle* h, uint64_t seq, uint64_t digest) {
  uint64_t x = seq * 0x9e3779b97f4a7c15ull ^ digest;
  x ^= x >> 29;
  return static_cast<int>((h->step % kTagCycle) * h->tag_slots + x % (h->tag_slots - kReservedTags));
}
inline int vote_tag(const tpurt_mpi_handle* h, uint32_t round) {
  return static_cast<int>((h->step % kTagCycle + 1) * h->tag_slots - 4 + round);
}
// A vote's round as ends carry it: rounds of later collectives are larger; 0 is none.
inline uint64_t voted_round(uint64_t seq, uint32_t round) { return (seq << 1 | round) + 1; }
inline int query_tag(const tpurt_mpi_handle* h) {
  return static_cast<int>((h->step % kTagCycle + 1) * h->tag_slots - 2);
}
inline int answer_tag(const tpurt_mpi_handle* h) { return query_tag(h) + 1; }

inline bool in_flight(const std::vector<MPI_Request>& reqs) {
  for (MPI_Request r : reqs)
    if (r != MPI_REQUEST_NULL) return true;
  return false;
}

// wait.cc
// A failed wait: cancels its receives, lets what can complete complete, and keeps
// the rest (sends, collectives) as stuck.
void give_up(tpurt_mpi_handle* h, std::vector<MPI_Request>& reqs, const std::vector<char>& kind);
// Completes what stuck requests can; whether a send is still stuck.
bool sends_stuck(tpurt_mpi_handle* h);
// Polls w's requests until all are done. what: the collective (seq, digest: its
// descriptor), for messages.
tpu_status wait_all(tpurt_mpi_handle* h, Waiting& w, uint64_t seq, uint64_t digest, const tpurt_mpi_wait* wait,
                    const char* what, char* err, size_t err_size);
// Before an engine collective of collective seq with the tasks `watch`: the failure
// (as wait_all words it) of one of them that has already ended the step, else TPU_OK.
tpu_status ended_before(tpurt_mpi_handle* h, const std::vector<int>& watch, uint64_t seq, const tpurt_mpi_wait* wait,
                        char* err, size_t err_size);
// tag_digest: the digest the tag is made of (digest, or another for the transfers
// of a collective's own set-up).
tpu_status exchange_tagged(tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, uint64_t tag_digest,
                           const tpurt_mpi_transfer* sends, size_t num_sends, const tpurt_mpi_transfer* recvs,
                           size_t num_recvs, const tpurt_mpi_wait* wait, char* err, size_t err_size);
tpu_status do_exchange(tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, const tpurt_mpi_transfer* sends,
                       size_t num_sends, const tpurt_mpi_transfer* recvs, size_t num_recvs,
                       const tpurt_mpi_wait* wait, char* err, size_t err_size);

// notes.cc
// Posts the receive of every peer's notes (at open).
tpu_status open_notes(tpurt_mpi_handle* h, char* err, size_t err_size);
// Cancels and frees what notes left (at close).
void close_notes(tpurt_mpi_handle* h);
// Tells each of peers not told yet that this task has entered collective seq.
void note_entry(tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, const int* peers, size_t num);
// Reads the notes that arrived up to collective seq; a peer whose note says it is in
// collective seq with another digest (*theirs: the note), or -1.
int find_mismatch(tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, Note* theirs);
// The error naming peer p, in collective `theirs` while this task is in seq, digest.
std::string mismatch_message(const tpurt_mpi_wait* wait, int p, const Note& theirs, uint64_t seq,
                             uint64_t digest);
// After an engine's collective completed: whether each of watch (the group's other
// tasks) took part in this one (its note agrees) rather than another with the same
// counts, waiting for the notes (sent before the collective, they are due) kAskNs at
// most.
tpu_status confirm(tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, const std::vector<int>& watch,
                   const tpurt_mpi_wait* wait, char* err, size_t err_size);

// step.cc
// Reads the ends of the step that have arrived.
void poll_ends(tpurt_mpi_handle* h);
// A peer's end as an outcome; false for a malformed one.
bool read_end(const tpurt_mpi_handle* h, int p, int32_t* code, int32_t* origin, uint64_t* reached,
              std::string* message, uint64_t* voted = nullptr);
// Answers the peers asking which collective this task has reached (a wait whose
// collective missed its deadline asks, to name the tasks that are not in it).
void serve_queries(tpurt_mpi_handle* h);
// Of the tasks `watch`, those that have not reached collective seq: asked, and given
// kAskNs to answer (the step ends of those that ended say it already).
std::vector<int> not_reached(tpurt_mpi_handle* h, const std::vector<int>& watch, uint64_t seq);
tpu_status begin_step(tpurt_mpi_handle* h, uint64_t step, char* err, size_t err_size);
tpu_status end_step(tpurt_mpi_handle* h, const tpurt_mpi_outcome* mine, int64_t timeout_ms,
                    const tpurt_mpi_wait* wait, tpurt_mpi_outcome* remote, int* failed, char* err,
                    size_t err_size);

// vote.cc
// A round of a collective's vote (tpurt_mpi_plugin::vote).
tpu_status vote(tpurt_mpi_handle* h, uint64_t seq, const tpurt_mpi_transfer* sends, size_t num_sends,
                const tpurt_mpi_transfer* recvs, size_t num_recvs, const tpurt_mpi_wait* wait, int32_t* skipped,
                char* err, size_t err_size);

// all_reduce.cc (all-reduces and reduce-scatters)
tpu_status reduce_scatter(tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, const int32_t* tasks,
                          size_t num_tasks, tpu_dtype dtype, tpu_reduce_op op, const void* in, void* out,
                          uint64_t block, int32_t divisor, const tpurt_mpi_wait* wait, char* err,
                          size_t err_size);
tpu_status all_reduce(tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, const int32_t* tasks,
                      size_t num_tasks, tpu_dtype dtype, tpu_reduce_op op, const void* in, void* out,
                      uint64_t count, int32_t divisor, const tpurt_mpi_wait* wait, char* err,
                      size_t err_size);

}  // namespace mpi
}  // namespace tpurt
