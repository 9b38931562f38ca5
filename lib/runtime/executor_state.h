// The executor's internal state, shared by its files (executor.cc: the workers and
// the step; executor_join.cc: threads that join a core): a core's states and their
// one transition function, a step invocation's slots, and a core.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/executor.h"
#include "runtime/replica_context.h"

namespace tpurt {
namespace executor_internal {

// How deep the calling thread is in user code (in_user_code()).
extern thread_local int t_user_code_depth;

// A core's slot state: the table in executor.h.
enum CoreState : int { kFree, kRunning, kDone, kLate, kAwaiting };

constexpr const char* kStateNames[] = {"free", "running", "done", "late", "awaiting"};

constexpr bool allowed(int from, int to) {
  return (from == kFree && (to == kRunning || to == kAwaiting)) ||
         (from == kAwaiting && (to == kRunning || to == kFree)) ||
         (from == kRunning && (to == kDone || to == kLate)) ||
         (from == kDone && to == kFree) || (from == kLate && to == kFree);
}

// The one way a core's state changes: from -> to if it is `from`, else false. An
// edge outside the table is a bug in the executor: it stops the process rather than
// run two participants on one core.
inline bool move_core(std::atomic<int>& state, int from, int to) {
  if (!allowed(from, to)) {
    fprintf(stderr, "tpurt: internal error: core state %s -> %s is not a transition\n", kStateNames[from],
            kStateNames[to]);
    abort();
  }
  // Two edges race (a joined thread's claim and the caller's give-up from kAwaiting; a
  // participant's return and the caller's give-up from kRunning): those compare and
  // swap. The others have one writer, the state's owner then.
  if (from == kAwaiting || from == kRunning)
    return state.compare_exchange_strong(from, to, std::memory_order_seq_cst);
  if (state.load(std::memory_order_relaxed) != from) return false;
  // seq_cst where a wake() follows: it must not miss a waiter that read the old state.
  state.store(to, to == kAwaiting || from == kLate ? std::memory_order_seq_cst : std::memory_order_release);
  return true;
}

inline void must_move_core(std::atomic<int>& state, int from, int to) {
  if (move_core(state, from, to)) return;
  fprintf(stderr, "tpurt: internal error: a core is %s, not %s, when it should go %s\n",
          kStateNames[state.load()], kStateNames[from], kStateNames[to]);
  abort();
}

inline void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // best effort
}

}  // namespace executor_internal

// One step invocation (executor.h): everything its participants read or write.
struct StepRun {
  // One participant that runs in this process. Written by the participant's thread
  // while it runs, by the caller before dispatch and after collecting.
  struct alignas(64) Slot {
    int participant = 0;
    int core = 0;
    std::vector<tpu_tensor*> inputs;       // borrowed for the step; retained once late
    std::vector<tpu_tensor*> call_inputs;  // what the computation gets when a stage adds some
    std::vector<tpu_tensor*> outputs;      // staged until the step succeeds
    tpu_status status = TPU_OK;            // the participant's failure, if any
    std::string error;
  };

  StepSpec spec;
  std::shared_ptr<Communicator> comm;
  int cores_per_replica = 1;
  int64_t timeout_ms = 0;  // the step's collective deadline
  std::vector<Slot> slots;
  alignas(64) std::atomic<uint32_t> pending{0};
  std::string never_started;           // caller threads: who did, as the step's error says
  bool never_started_after_failure = false;  // ... once the step had failed: not its cause
  std::atomic<int> first_failure{-1};  // slot of the participant that failed first on its own
  std::atomic<int> first_abort{-1};    // slot of the first that failed after the step had
};

struct alignas(64) Executor::Core {
  std::atomic<uint32_t> go{0};  // bumped once per dispatch (and at stop)
  std::atomic<uint32_t> seen{0};  // the last go its worker took: go != seen is work
  WakeWord wake;
  std::atomic<int> state{executor_internal::kFree};
  tpu_replica_context ctx;
  // The run of the participant this core serves, and its slot there: set by the
  // caller before dispatch. While the caller waits for the participant, the caller's
  // own reference keeps the run; once the participant is late, the core holds one
  // (late_hold), which the participant's thread lets go when it returns.
  StepRun* run = nullptr;
  std::shared_ptr<StepRun> late_hold;
  int slot = 0;
  WakeWord join_wake;                // woken when a caller-threads step hands the core work
  std::atomic<bool> joined{false};   // a thread has joined the core (waiting or running)
  std::atomic<bool> join_cancelled{false};  // tpu_step_join_cancel: the next join wait ends
  std::thread thread;

  StepRun::Slot& my_slot() { return run->slots[slot]; }
};

}  // namespace tpurt
