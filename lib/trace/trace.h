// Traces of steps in Chrome's trace-event JSON (Perfetto and chrome://tracing open
// it): one pid per task, one tid per participant (tid 0: the task's steps). Events
// are buffered per core in memory and written when a step ends or the system stops.
//
// Off, every hook is one predictable branch on g_on (no clock read, no allocation):
// the hooks below are inline and call out of line only when tracing is on.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tpurt/collectives.h"

struct tpu_tensor;

namespace tpurt {
namespace trace {

// True while a live system traces (set once at init, cleared at shutdown). Atomic so
// that a late participant reading it at shutdown is no data race; a relaxed load is a
// plain load.
// Hidden: a hook reads it straight, not through the GOT.
extern std::atomic<bool> g_on __attribute__((visibility("hidden")));
inline bool on() { return __builtin_expect(g_on.load(std::memory_order_relaxed), false); }

struct Event {
  const char* name;      // static: "computation", "all_reduce", ...
  const char* cat;       // static: "compute", "collective", "feed", "embedding"
  int tid;               // participant + 1
  int64_t ts_ns, dur_ns;
  std::string args;      // JSON object members, without braces
};

// One core's events since the last flush. Late participants may still append after
// their step: the mutex keeps them and the flush apart.
struct Buffer {
  std::mutex mu;
  std::vector<Event> events;
  std::string transport;  // the system's data plane, for the collectives' events
};

// Where a system's trace goes. One per system, created at init when tracing is asked.
class Recorder {
 public:
  // path: the file (truncated); task: the pid; offset_ns: added to this process's
  // clock to give task 0's (the coordination service's); transport: the data plane's
  // name, for the collectives' events. Throws TPU_INVALID_ARGUMENT naming an
  // unwritable path.
  Recorder(const std::string& path, int task, int num_tasks, int64_t offset_ns, std::string transport,
           int num_cores);
  ~Recorder();  // flushes and closes the JSON array
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // The step's begin (caller thread) and its end: its span and verdict, then every
  // core's buffered events go to the file.
  void begin_step();
  void end_step(int code, const std::string& message);

  // A participant starts on `core` (its thread): later hooks on this thread record
  // as its tid.
  void enter(int core, int participant, int replica, int logical_core, int cores_per_replica);
  const std::string& transport() const { return transport_; }
  int64_t step() const { return step_; }

  // The path after substituting the task: "%t" becomes the task id; without it, a
  // system of several tasks gets ".task<T>" before the extension.
  static std::string path_for_task(const std::string& path, int task, int num_tasks);

 private:
  void write(const Event& e);
  void flush_locked();

  std::mutex mu_;  // the file, and the tids named so far
  FILE* file_ = nullptr;
  const int task_;
  const int64_t offset_ns_;
  const std::string transport_;
  std::vector<std::shared_ptr<Buffer>> buffers_;  // per core
  std::vector<bool> named_;                     // tids given a thread_name
  int64_t step_ = 0;
  int64_t step_begin_ns_ = 0;
  bool first_ = true;
};

// The live system's recorder (NULL when not tracing): set with g_on.
void install(Recorder* recorder);

// Out-of-line halves of the hooks below.
void enter_slow(int core, int participant, int replica, int logical_core, int cores_per_replica);
void leave_slow();
void computation_begins_slow();
void computation_ends_slow(int status);
int64_t span_begin();  // now, or 0 on a thread that runs no participant
void span_end(const char* name, const char* cat, int64_t begin_ns, std::string args);
int64_t collective_begin();
void collective_end(const char* kind, int64_t begin_ns, const tpu_tensor* x,
                    const tpu_group_assignment* groups);
int64_t wait_begin();  // now, or 0 outside a traced collective
void wait_end(int64_t begin_ns);
void note_algorithm_slow(const char* algorithm);

// A participant's thread enters and leaves its step.
inline void enter(int core, int participant, int replica, int logical_core, int cores_per_replica) {
  if (on()) enter_slow(core, participant, replica, logical_core, cores_per_replica);
}
inline void leave() {
  if (on()) leave_slow();
}
// The computation's span: from enter (or the end of the stage before it, the infeed's
// dequeue) to the participant's leaving, with the status it returned.
inline void computation_begins() {
  if (on()) computation_begins_slow();
}
inline void computation_ends(int status) {
  if (on()) computation_ends_slow(status);
}

// A span on the participant's row: the computation, a feed's wait, an embedding phase.
class Span {
 public:
  Span(const char* name, const char* cat) : name_(name), cat_(cat) {
    if (on()) begin_ = span_begin();
  }
  ~Span() {
    if (begin_) span_end(name_, cat_, begin_, std::string());
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  const char* name_;
  const char* cat_;
  int64_t begin_ = 0;
};

// A collective: its kind, bytes, group, the algorithm chosen and the transport, and its
// time split into waiting for the others (Rendezvous arrivals, WaitSpan) and moving
// data (the rest). A collective inside another (the cluster's own) is not counted twice.
class CollectiveSpan {
 public:
  CollectiveSpan(const char* kind, const tpu_tensor* x, const tpu_group_assignment* groups)
      : kind_(kind), x_(x), groups_(groups) {
    if (on()) begin_ = collective_begin();
  }
  ~CollectiveSpan() {
    if (begin_) collective_end(kind_, begin_, x_, groups_);
  }
  CollectiveSpan(const CollectiveSpan&) = delete;
  CollectiveSpan& operator=(const CollectiveSpan&) = delete;

 private:
  const char* kind_;
  const tpu_tensor* x_;
  const tpu_group_assignment* groups_;
  int64_t begin_ = 0;
};

// Time a participant spends waiting for the others inside a collective (a wait
// outside one, or on a thread that runs no participant, records nothing).
class WaitSpan {
 public:
  WaitSpan() {
    if (on()) begin_ = wait_begin();
  }
  ~WaitSpan() {
    if (begin_) wait_end(begin_);
  }
  WaitSpan(const WaitSpan&) = delete;
  WaitSpan& operator=(const WaitSpan&) = delete;

 private:
  int64_t begin_ = 0;
};

// The algorithm a cluster collective chose (static string), for its event.
inline void note_algorithm(const char* algorithm) {
  if (on()) note_algorithm_slow(algorithm);
}

}  // namespace trace
}  // namespace tpurt
