#include "runtime/executor_state.h"

#include <utility>

#include "core/status.h"
#include "core/tensor.h"
#include "runtime/replica_context.h"
#include "topology/group_modes.h"

namespace tpurt {

using namespace executor_internal;

// The participant a thread joined (tpu_step_join), until it leaves. Its destructor
// runs when the thread exits: a participant whose thread exits without leaving fails
// at once, instead of at the deadline, and frees its core.
struct Executor::JoinedThread {
  Executor* executor = nullptr;
  Core* core = nullptr;
  // The system, held from join to leave only: a thread between joins (a pool's idle
  // thread, or one that never joins again) keeps nothing alive.
  std::shared_ptr<System> keepalive;
  int pinned_cpu = -1;  // where join last pinned this thread

  ~JoinedThread() {
    if (core == nullptr) return;
    tpu_replica_context& ctx = core->ctx;
    ctx.fail_code = TPU_CANCELLED;
    ctx.fail_message = str_cat("the thread running ", participant_name(ctx.participant, ctx.num_cores_per_replica),
                               " exited before tpu_step_leave");
    leave_with(TPU_CANCELLED);
  }

  void leave_with(tpu_status status) {
    Core& c = *std::exchange(core, nullptr);
    --t_user_code_depth;
    c.joined.store(false, std::memory_order_release);
    executor->leave_participant(c, status);
    keepalive.reset();  // last: the system may go with it
  }
};

thread_local Executor::JoinedThread Executor::t_joined_;

JoinedParticipant Executor::join(int index, int64_t timeout_ms, const std::shared_ptr<System>& keepalive) {
  JoinedThread& me = t_joined_;
  if (me.core != nullptr)
    invalid_argument("this thread has joined core ", me.core->ctx.core, " and runs ",
                     participant_name(me.core->ctx.participant, me.core->ctx.num_cores_per_replica),
                     "; it must call tpu_step_leave before it joins again");
  if (in_user_code())
    fail(TPU_FAILED_PRECONDITION, "tpu_step_join must not be called from inside a computation");
  if (index < 0 || index >= num_cores_)
    invalid_argument("core is ", index, "; this task's cores are 0 to ", num_cores_ - 1);
  Core& core = cores_[index];
  bool free = false;
  if (!core.joined.compare_exchange_strong(free, true, std::memory_order_acq_rel))
    fail(TPU_ALREADY_EXISTS, "core ", index,
         " has been joined by another thread; one thread joins a core at a time");
  Deadline deadline(timeout_ms);  // saturating: a limit past the clock's range is none
  me.keepalive = keepalive;  // the system outlives the wait and the participant
  for (;;) {
    const WaitResult w = wait_until(
        core.join_wake, policy_, deadline,
        [&] { return core.state.load(std::memory_order_acquire) == kAwaiting; },
        [&] {
          return stop_.load(std::memory_order_acquire) || core.join_cancelled.load(std::memory_order_acquire);
        });
    if (w != WaitResult::kReady) {
      core.joined.store(false, std::memory_order_release);
      me.keepalive.reset();
      // The thread's owner may give it back its CPUs after a failed join (a binding's
      // pool ends it): pin again at its next participant.
      me.pinned_cpu = -1;
      if (w == WaitResult::kStopped && !stop_.load(std::memory_order_acquire) &&
          core.join_cancelled.exchange(false, std::memory_order_acq_rel))
        fail(TPU_CANCELLED, "tpu_step_join_cancel ended this thread's wait on core ", index);
      if (w == WaitResult::kStopped)
        fail(TPU_CANCELLED, "the TPU system was shut down while this thread waited on core ", index);
      fail(TPU_DEADLINE_EXCEEDED, "no step gave core ", index, " a participant within ", timeout_ms, " ms");
    }
    if (!move_core(core.state, kAwaiting, kRunning)) continue;  // the step gave up on it a moment ago
    step_done_.wake();  // the caller may wait for every participant to be claimed
    if (!enter_participant(core)) continue;  // its stage failed it: it has left
    // Pinned as the core's worker would be: replicas move in lockstep, and the
    // communicator's waits count on the placement.
    if (!placement_.empty() && me.pinned_cpu != placement_[index]) {
      pin_to(placement_[index]);
      me.pinned_cpu = placement_[index];
    }
    me.executor = this;
    me.core = &core;
    ++t_user_code_depth;
    const StepRun& run = *core.run;
    StepRun::Slot& slot = core.my_slot();
    std::vector<tpu_tensor*>& inputs = run.spec.stage ? slot.call_inputs : slot.inputs;
    JoinedParticipant out;
    out.ctx = &core.ctx;
    out.inputs = inputs.data();
    out.num_inputs = static_cast<int>(inputs.size());
    out.num_outputs = static_cast<int>(slot.outputs.size());
    out.fn = run.spec.fn;
    out.user_data = run.spec.user_data;
    return out;
  }
}

void Executor::cancel_join(int index) {
  if (index < 0 || index >= num_cores_)
    invalid_argument("core is ", index, "; this task's cores are 0 to ", num_cores_ - 1);
  Core& core = cores_[index];
  core.join_cancelled.store(true, std::memory_order_seq_cst);
  core.join_wake.wake();
}

void Executor::leave(tpu_replica_context* ctx, tpu_status status, tpu_tensor* const* outputs,
                     int num_outputs) {
  JoinedThread& me = t_joined_;
  if (me.core == nullptr)
    invalid_argument("this thread has no participant to leave: it has not joined a step (tpu_step_join)");
  if (ctx != &me.core->ctx)
    invalid_argument("ctx is not the context this thread joined (",
                     participant_name(me.core->ctx.participant, me.core->ctx.num_cores_per_replica),
                     " on core ", me.core->ctx.core, ")");
  StepRun::Slot& slot = me.core->my_slot();
  const int expected = static_cast<int>(slot.outputs.size());
  std::string wrong;
  if (num_outputs != expected)
    wrong = str_cat("tpu_step_leave got num_outputs ", num_outputs, ", but the step has ", expected);
  else if (num_outputs > 0 && outputs == nullptr)
    wrong = str_cat("tpu_step_leave got outputs NULL for ", num_outputs, " outputs");
  if (outputs != nullptr)  // taken over even when the count is wrong: nothing leaks
    for (int o = 0; o < num_outputs; ++o) {
      if (o < expected) slot.outputs[o] = outputs[o];
      else release(outputs[o]);
    }
  if (!wrong.empty()) {
    ctx->fail_code = TPU_INVALID_ARGUMENT;
    ctx->fail_message = wrong;
    status = TPU_INVALID_ARGUMENT;
  }
  me.leave_with(status);
  if (!wrong.empty()) invalid_argument(wrong);
}

}  // namespace tpurt
