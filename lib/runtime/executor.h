// The workers: one persistent thread per logical core ("tpurt-core-N"). A step is
// dispatched by filling each participating core's slot and bumping its sequence
// word; idle workers spin briefly, then yield, then sleep on a futex (core/wait.h),
// and the caller waits for the step's pending count the same way (with pinned
// workers, a waiter whose CPU has no other work spins where it would yield). Nothing
// on this path allocates once a step's run has grown to its input and output counts.
//
// One owner per step. Each step invocation is one StepRun (reference-counted): the
// spec (with its stage and the embedding engine's per-step state), the communicator,
// and each participant's slot (its inputs, outputs and outcome). While the caller
// waits for its participants its own reference keeps the run (no reference counted
// per participant and step); a participant the caller gives up on is late, and its
// core then holds a reference until it returns, so a late participant keeps only its
// own step alive; the next step runs on a new StepRun and never reads or writes the
// old one. The executor reuses a run only when no participant of it was late.
//
// A core's slot moves through these states, each change by one call of move_core()
// (executor.cc), which checks it against this table:
//
//   kFree     -> kRunning   the caller dispatches a participant to the core's worker
//   kFree     -> kAwaiting  the caller hands it to a thread that joins the core
//   kAwaiting -> kRunning   a joined thread claims it (tpu_step_join)
//   kAwaiting -> kFree      the caller gives up on it unclaimed: it never starts
//   kRunning  -> kDone      the participant returns while the step waits for it
//   kRunning  -> kLate      the caller gives up waiting: the step ends without it
//   kDone     -> kFree      the caller collects the participant's outputs
//   kLate     -> kFree      the late participant returns: its thread cleans up and
//                           the core (and its hold on the run) is let go
//
// kRunning -> kDone and kRunning -> kLate race; whoever wins owns the cleanup.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/wait.h"
#include "tpurt/replicate.h"

namespace tpurt {

class Communicator;
class System;
namespace embedding {
class StepState;
}

// Work the runtime does on a participant's thread around its computation (the
// infeed's dequeue, the gather of a partitioned output's tiles): the same on a
// worker and on a thread that joined the step (tpu_step_join).
class StepStage {
 public:
  virtual ~StepStage() = default;
  // Before the computation: *inputs holds the participant's inputs and may grow. A
  // non-OK status fails the participant (ctx->fail_code / fail_message say why).
  virtual tpu_status before(tpu_replica_context* ctx, std::vector<tpu_tensor*>* inputs) const = 0;
  // After it: status is the computation's; returns the participant's. Releases what
  // before() added (the inputs past num_given).
  virtual tpu_status after(tpu_replica_context* ctx, tpu_status status, std::vector<tpu_tensor*>* inputs,
                           size_t num_given, tpu_tensor** outputs, int num_outputs) const = 0;
};

// One step as the caller describes it.
struct StepSpec {
  StepSpec(tpu_computation_fn fn, void* user_data, int num_replicas, int num_inputs,
           int num_outputs, tpu_tensor* const* inputs)
      : fn(fn), user_data(user_data), num_replicas(num_replicas), num_inputs(num_inputs),
        num_outputs(num_outputs), inputs(inputs) {}
  StepSpec() = default;

  tpu_computation_fn fn = nullptr;
  void* user_data = nullptr;
  int num_replicas = 0;
  int num_inputs = 0;   // per participant
  int num_outputs = 0;  // per participant
  tpu_tensor* const* inputs = nullptr;  // [participant][input], borrowed for the step
  int64_t timeout_ms = 0;               // the step's collective deadline; 0: the system's
  bool caller_threads = false;  // participants run on threads that joined their cores
  std::shared_ptr<const StepStage> stage;  // NULL: none; held by late participants too
  // The embedding engine's state for this step (NULL without tables): the step's run
  // holds it, so a late participant never sees the next step's.
  std::shared_ptr<embedding::StepState> embedding;
};

// A participant handed to a thread that joined its core (tpu_joined_step).
struct JoinedParticipant {
  tpu_replica_context* ctx = nullptr;
  tpu_tensor* const* inputs = nullptr;
  int num_inputs = 0;
  int num_outputs = 0;
  tpu_computation_fn fn = nullptr;
  void* user_data = nullptr;
};

struct StepResult {
  tpu_status code = TPU_OK;
  std::string message;  // "replica R: ..." when code is not OK
  bool late = false;    // some replicas had not returned: the step's communicator is
                        // theirs until they do, and must not serve another step
};

struct StepRun;

// Marks the calling thread as running user code of a step (a computation or an
// outside-compilation function) for the scope's lifetime: such code must not start
// steps or shut the system down.
class UserCodeScope {
 public:
  UserCodeScope();
  ~UserCodeScope();
  UserCodeScope(const UserCodeScope&) = delete;
  UserCodeScope& operator=(const UserCodeScope&) = delete;
};
bool in_user_code();

class Executor {
 public:
  // device_names[c] is core c's fully qualified device name.
  Executor(System* system, const std::vector<std::string>& device_names, int pin_threads,
           int64_t timeout_ms);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Starts the workers; each holds `keepalive` until it exits.
  void start(const std::shared_ptr<System>& keepalive);
  // Stops the workers: joins the idle ones, detaches any still inside a late
  // computation (they exit when it returns). The caller holds the step lock.
  void stop();

  // Waits up to the deadline for the late computations on cores[0..n) (all cores if
  // cores is NULL) to return. Returns those still running, as "core C (still
  // running replica R of an earlier step, ...), ...", or "" when none is.
  std::string wait_for_late(int n, const int* cores, int64_t timeout_ms);

  // The calling thread joins `core` (tpurt/replicate.h, tpu_step_join): waits up to
  // timeout_ms (< 0: no limit) for a caller-threads step to give the core a
  // participant, and returns it; the thread runs it and calls leave(). Holds
  // `keepalive` from the call until leave() (or the failed join): a thread between
  // joins holds nothing. Throws TPU_DEADLINE_EXCEEDED when none came,
  // TPU_CANCELLED when the executor stops, TPU_ALREADY_EXISTS when another thread
  // has joined the core, TPU_INVALID_ARGUMENT when this thread is joined already or
  // the core is out of range.
  JoinedParticipant join(int core, int64_t timeout_ms, const std::shared_ptr<System>& keepalive);
  // Ends the wait of the thread that has joined `core` with TPU_CANCELLED, or, when
  // none waits, the next one's (tpu_step_join_cancel). Throws TPU_INVALID_ARGUMENT
  // for a core out of range.
  void cancel_join(int core);
  // Ends the calling thread's participant as a computation that returned `status`
  // with outputs[0..num_outputs) (new references it takes over). Throws
  // TPU_INVALID_ARGUMENT when ctx is not the thread's joined participant; a wrong
  // num_outputs fails the participant and throws after ending it.
  static void leave(tpu_replica_context* ctx, tpu_status status, tpu_tensor* const* outputs,
                    int num_outputs);

  // Runs spec on cores[p] for participant p = r * cores_per_replica + c (replica r,
  // logical core c), with comm as the step's communicator: spec.inputs is
  // [participant][input]. On success outputs[p * num_outputs + o] receive new
  // references. A replica that has
  // not returned `timeout_ms` after the step failed or another replica finished is
  // late: the step fails without it, and its core runs nothing else until it
  // returns (the runtime holds its inputs meanwhile; what it outputs is released).
  // Throws TPU_UNAVAILABLE when a core of the step is still running a late
  // computation after waiting the deadline for it. The caller holds the step lock.
  // participants: those that run in this process (cores indexed by participant);
  // NULL: all of them.
  StepResult run(const StepSpec& spec, const int* cores, int cores_per_replica,
                 const std::shared_ptr<Communicator>& comm, tpu_tensor** outputs,
                 const std::vector<int>* participants = nullptr);

 private:
  struct Core;
  struct JoinedThread;

  void worker_loop(int index);
  void run_participant(Core& core);
  bool enter_participant(Core& core);
  void leave_participant(Core& core, tpu_status status);
  void dispatch(Core& core, bool to_joined_thread);
  bool cpu_idle(int cpu) const;
  void abandon_unclaimed(StepRun& run, bool step_failed);
  void finish_late(Core& core);
  void record_failure(StepRun& run, Core& core, tpu_status status);
  StepResult first_error(StepRun& run);
  StepResult collect(StepRun& run, tpu_tensor** outputs);
  StepResult give_up(StepRun& run, tpu_tensor** outputs);
  // The run for the next step: the last one again, unless a participant of it was
  // late (then the executor let go of it).
  std::shared_ptr<StepRun> fresh_run();

  static thread_local JoinedThread t_joined_;

  const int num_cores_;
  const std::vector<int> placement_;  // CPU per core, or empty: the OS places them
  std::vector<std::vector<int>> cores_on_cpu_;  // by CPU: the cores placed there
  // The CPU the caller last waited on: workers there yield to it (it is not pinned).
  std::atomic<int> caller_cpu_{-1};
  std::vector<int> cpu_of_rank_;      // per step: placement_ of each replica's core
  const int64_t timeout_ms_;
  const SpinPolicy policy_;
  std::unique_ptr<Core[]> cores_;
  std::shared_ptr<StepRun> run_;  // the last step's run (guarded by the step lock)
  // Woken when a participant of any run returns and when a joined thread claims one:
  // the executor's, not a run's, so nothing touches a run after its last decrement.
  WakeWord step_done_;
  WakeWord late_returned_;  // woken when a late computation returns
  std::atomic<bool> stop_{false};
};

}  // namespace tpurt
