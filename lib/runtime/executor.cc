#include "runtime/executor.h"

#include <pthread.h>
#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>

#include "collectives/communicator.h"
#include "core/cpus.h"
#include "core/status.h"
#include "core/tensor.h"
#include "runtime/executor_state.h"
#include "runtime/replica_context.h"
#include "topology/group_modes.h"
#include "trace/trace.h"

namespace tpurt {

using namespace executor_internal;

thread_local int executor_internal::t_user_code_depth = 0;

UserCodeScope::UserCodeScope() { ++t_user_code_depth; }
UserCodeScope::~UserCodeScope() { --t_user_code_depth; }
bool in_user_code() { return t_user_code_depth > 0; }

Executor::Executor(System* system, const std::vector<std::string>& device_names,
                   int pin_threads, int64_t timeout_ms)
    : num_cores_(static_cast<int>(device_names.size())),
      placement_(worker_placement(pin_threads, num_cores_)),
      cpu_of_rank_(num_cores_, -1),
      timeout_ms_(timeout_ms),
      // The caller waits too: one more thread than cores competes for the CPUs.
      policy_(SpinPolicy::for_threads(num_cores_ + 1, num_usable_cpus())),
      cores_(new Core[device_names.size()]) {
  for (int c = 0; c < static_cast<int>(placement_.size()); ++c) {
    if (placement_[c] >= static_cast<int>(cores_on_cpu_.size())) cores_on_cpu_.resize(placement_[c] + 1);
    cores_on_cpu_[placement_[c]].push_back(c);
  }
  for (int c = 0; c < num_cores_; ++c) {
    tpu_replica_context& ctx = cores_[c].ctx;
    ctx.system = system;
    ctx.core = c;
    ctx.device_name = device_names[c];
  }
}

Executor::~Executor() = default;

void Executor::start(const std::shared_ptr<System>& keepalive) {
  for (int c = 0; c < num_cores_; ++c)
    cores_[c].thread = std::thread([this, c, keepalive] { worker_loop(c); });
}

void Executor::stop() {
  stop_.store(true, std::memory_order_seq_cst);
  for (int c = 0; c < num_cores_; ++c) {
    Core& core = cores_[c];
    core.go.fetch_add(1, std::memory_order_seq_cst);
    core.wake.wake();
    core.join_wake.wake();
  }
  for (int c = 0; c < num_cores_; ++c) {
    Core& core = cores_[c];
    if (!core.thread.joinable()) continue;
    if (core.state.load(std::memory_order_acquire) == kLate) core.thread.detach();
    else core.thread.join();
  }
}

void Executor::worker_loop(int index) {
  char name[16];
  snprintf(name, sizeof name, "tpurt-core-%d", index);
  pthread_setname_np(pthread_self(), name);
  if (!placement_.empty()) pin_to(placement_[index]);
  Core& core = cores_[index];
  uint32_t seen = 0;
  // Spinning instead of yielding when nothing else on this CPU has work: a yield
  // would only hand the CPU to another idle worker.
  auto spin_instead = [&] {
    if (placement_.empty()) return false;
    const int cpu = placement_[index];
    return caller_cpu_.load(std::memory_order_relaxed) != cpu && cpu_idle(cpu);
  };
  for (;;) {
    Deadline never = Deadline::never();
    wait_until(core.wake, policy_, never,
               [&] { return core.go.load(std::memory_order_acquire) != seen; },
               [] { return false; }, spin_instead);
    seen = core.go.load(std::memory_order_acquire);
    core.seen.store(seen, std::memory_order_release);
    if (stop_.load(std::memory_order_acquire)) return;
    run_participant(core);
  }
}

// The one path of a participant, on a worker or on a thread that joined its core:
// enter_participant, the computation, leave_participant.
void Executor::run_participant(Core& core) {
  if (!enter_participant(core)) return;
  StepRun& run = *core.run;
  StepRun::Slot& slot = core.my_slot();
  std::vector<tpu_tensor*>& inputs = run.spec.stage ? slot.call_inputs : slot.inputs;
  tpu_status status;
  {
    UserCodeScope scope;
    try {
      status = run.spec.fn(&core.ctx, inputs.data(), static_cast<int>(inputs.size()), slot.outputs.data(),
                           static_cast<int>(slot.outputs.size()), run.spec.user_data);
    } catch (...) {  // a C++ computation must not unwind into the worker
      status = set_last_error(TPU_INTERNAL, "the computation threw a C++ exception");
    }
  }
  leave_participant(core, status);
}

// False when the stage failed the participant (then it has left already).
bool Executor::enter_participant(Core& core) {
  clear_last_error();
  trace::enter(core.ctx.core, core.ctx.participant, core.ctx.replica_id, core.ctx.logical_core, core.ctx.num_cores_per_replica);
  const StepStage* stage = core.run->spec.stage.get();
  if (stage == nullptr) return true;
  StepRun::Slot& slot = core.my_slot();
  slot.call_inputs.assign(slot.inputs.begin(), slot.inputs.end());
  const tpu_status status = stage->before(&core.ctx, &slot.call_inputs);
  trace::computation_begins();
  if (status == TPU_OK) return true;
  leave_participant(core, status);
  return false;
}

void Executor::leave_participant(Core& core, tpu_status status) {
  trace::computation_ends(status);
  tpu_replica_context& ctx = core.ctx;
  StepRun& run = *core.run;
  StepRun::Slot& slot = core.my_slot();
  if (const StepStage* stage = run.spec.stage.get())
    status = stage->after(&ctx, status, &slot.call_inputs, slot.inputs.size(), slot.outputs.data(),
                          static_cast<int>(slot.outputs.size()));
  trace::leave();
  if (!move_core(core.state, kRunning, kDone)) {
    finish_late(core);
    return;
  }
  if (status == TPU_OK) run.comm->depart(ctx.participant);
  else record_failure(run, core, status);
  ctx.comm = nullptr;  // a context kept past its step no longer reaches collectives
  ctx.embedding_step = nullptr;
  // The last touch of the run: the caller may reuse it once pending reaches 0.
  if (run.pending.fetch_sub(1, std::memory_order_seq_cst) == 1) step_done_.wake();
}

// The caller failed this participant's step without it and retained its inputs:
// release them and what it output, let go of the run, and give the core back.
// Nothing of the caller's is touched.
void Executor::finish_late(Core& core) {
  core.ctx.comm = nullptr;
  core.ctx.embedding_step = nullptr;
  StepRun::Slot& slot = core.my_slot();
  for (tpu_tensor* t : slot.inputs) release(t);
  for (tpu_tensor*& t : slot.outputs) release(std::exchange(t, nullptr));
  core.run = nullptr;
  core.late_hold.reset();  // the last holder frees the step: its communicator, stage, tables' state
  move_core(core.state, kLate, kFree);
  late_returned_.wake();
}

std::string Executor::wait_for_late(int n, const int* cores, int64_t timeout_ms) {
  if (cores == nullptr) n = num_cores_;
  auto late = [&](int i) {
    return cores_[cores ? cores[i] : i].state.load(std::memory_order_seq_cst) == kLate;
  };
  auto none_late = [&] {
    for (int i = 0; i < n; ++i)
      if (late(i)) return false;
    return true;
  };
  if (none_late()) return {};
  Deadline deadline(timeout_ms);
  if (wait_until(late_returned_, policy_, deadline, none_late, [] { return false; }) ==
      WaitResult::kReady)
    return {};
  std::string list;
  for (int i = 0; i < n; ++i) {
    const int c = cores ? cores[i] : i;
    if (late(i))
      list += str_cat(list.empty() ? "" : ", ", "core ", c, " (still running ",
                      participant_name(cores_[c].ctx.participant, cores_[c].ctx.num_cores_per_replica),
                      " of an earlier step, which overran its deadline)");
  }
  return list;
}

void Executor::record_failure(StepRun& run, Core& core, tpu_status status) {
  tpu_replica_context& ctx = core.ctx;
  StepRun::Slot& slot = core.my_slot();
  if (!is_status(status)) {
    slot.status = TPU_UNKNOWN;
    slot.error = str_cat("the computation returned ", static_cast<int>(status), ", which is not a tpu_status");
  } else {
    slot.status = status;
    if (ctx.fail_code != TPU_OK && !ctx.fail_message.empty()) slot.error = ctx.fail_message;
    else if (*last_error() != '\0') slot.error = last_error();
    else slot.error = str_cat("the computation returned ", status_name(status));
  }
  // A participant that fails after the step failed (aborted, or given another's
  // error) must not hide that failure; claiming first_failure before aborting the
  // communicator orders the two.
  int origin = -1;
  tpu_status code;
  std::string message;
  const bool collateral = run.comm->failure(&origin, &code, &message) && origin != ctx.participant;
  int none = -1;
  (collateral ? run.first_abort : run.first_failure)
      .compare_exchange_strong(none, core.slot, std::memory_order_acq_rel);
  run.comm->abort(ctx.participant, slot.status, slot.error);
}

std::shared_ptr<StepRun> Executor::fresh_run() {
  if (!run_) run_ = std::make_shared<StepRun>();
  return run_;
}

StepResult Executor::run(const StepSpec& spec, const int* cores, int cores_per_replica,
                         const std::shared_ptr<Communicator>& shared_comm,
                         tpu_tensor** outputs, const std::vector<int>* participants) {
  const int k = cores_per_replica;
  const int n = spec.num_replicas * k;  // participants
  int m = n;
  if (participants) m = static_cast<int>(participants->size());
  auto participant_at = [&](int i) { return participants ? (*participants)[i] : i; };
  const int64_t step_timeout_ms = spec.timeout_ms > 0 ? spec.timeout_ms : timeout_ms_;
  std::vector<int> local_cores(m);
  for (int i = 0; i < m; ++i) local_cores[i] = cores[participant_at(i)];
  const std::string busy = wait_for_late(m, local_cores.data(), step_timeout_ms);
  if (!busy.empty())
    fail(TPU_UNAVAILABLE, "the step needs ", busy, ", which did not return within ", step_timeout_ms,
         " ms more; a core serves steps again when its computation returns");

  const std::shared_ptr<StepRun> held = fresh_run();
  StepRun& run = *held;
  run.spec = spec;
  run.comm = shared_comm;
  run.cores_per_replica = k;
  run.timeout_ms = step_timeout_ms;
  run.first_failure.store(-1, std::memory_order_relaxed);
  run.first_abort.store(-1, std::memory_order_relaxed);
  run.never_started.clear();
  run.never_started_after_failure = false;
  run.pending.store(static_cast<uint32_t>(m), std::memory_order_relaxed);
  run.slots.resize(m);
  Communicator* comm = shared_comm.get();
  if (!placement_.empty())
    for (int i = 0; i < m; ++i) cpu_of_rank_[i] = placement_[local_cores[i]];
  comm->reset(placement_.empty() ? nullptr : cpu_of_rank_.data());
  comm->set_step_timeout(step_timeout_ms);
  for (int i = 0; i < m; ++i) {
    const int p = participant_at(i);
    StepRun::Slot& slot = run.slots[i];
    slot.participant = p;
    slot.core = local_cores[i];
    slot.status = TPU_OK;
    slot.error.clear();
    tpu_tensor* const* in = spec.inputs + static_cast<int64_t>(p) * spec.num_inputs;
    slot.inputs.assign(in, in + spec.num_inputs);
    slot.outputs.assign(spec.num_outputs, nullptr);
    Core& core = cores_[slot.core];
    core.run = held.get();
    core.slot = i;
    tpu_replica_context& ctx = core.ctx;
    ctx.comm = comm;
    ctx.embedding_step = spec.embedding.get();
    ctx.participant = p;
    ctx.replica_id = p / k;
    ctx.logical_core = p % k;
    ctx.num_replicas = spec.num_replicas;
    ctx.num_cores_per_replica = k;
    ctx.bf16_scope_depth = 0;
    ctx.fail_code = TPU_OK;
    ctx.fail_message.clear();
    ctx.late.store(false, std::memory_order_relaxed);
    dispatch(core, spec.caller_threads);
  }

  auto done = [&] { return run.pending.load(std::memory_order_seq_cst) == 0; };
  // Yielding while every participant on the caller's CPU has returned only hands the
  // CPU to idle workers; the workers spin only on CPUs the caller was not last seen on.
  auto spin_instead = [&] {
    if (placement_.empty()) return false;
    const int cpu = sched_getcpu();
    if (cpu < 0) return false;
    caller_cpu_.store(cpu, std::memory_order_relaxed);
    return cpu_idle(cpu);
  };
  // No deadline while every participant is still running: computations may be long.
  // Once the step has failed or one has finished, the rest get the collective
  // deadline to return.
  if (spec.caller_threads) {
    // A participant that no thread takes within the deadline never arrives.
    Deadline joins(step_timeout_ms);
    // Read from the cores' slots: a shared counter would be one more contended
    // write per participant and step.
    auto all_claimed = [&] {
      for (const StepRun::Slot& slot : run.slots)
        if (cores_[slot.core].state.load(std::memory_order_seq_cst) == kAwaiting) return false;
      return true;
    };
    const WaitResult w = wait_until(step_done_, policy_, joins, all_claimed, [&] {
      return run.pending.load(std::memory_order_relaxed) < static_cast<uint32_t>(m) || comm->aborted();
    });
    if (w == WaitResult::kTimedOut) abandon_unclaimed(run, false);
    // Failed before all were claimed: those never start. Waiting another deadline for
    // them would end the step here a deadline after the other tasks, who take that as
    // this task gone.
    else if (comm->aborted()) abandon_unclaimed(run, true);
  }
  Deadline never = Deadline::never();
  WaitResult w = wait_until(step_done_, policy_, never, done, [&] {
    return run.pending.load(std::memory_order_relaxed) < static_cast<uint32_t>(m) || comm->aborted();
  }, spin_instead);
  if (w != WaitResult::kReady) {
    Deadline deadline(step_timeout_ms);
    w = wait_until(step_done_, policy_, deadline, done, [] { return false; }, spin_instead);
  }
  if (w != WaitResult::kReady) {
    StepResult result = give_up(run, outputs);
    // The late participants' cores hold the run until they return; the next step
    // gets a new one.
    if (result.late) run_.reset();
    return result;
  }
  return collect(run, outputs);
}

// Whether no core placed on `cpu` has work: a dispatch its worker has not taken, a
// participant running (on its worker or a joined thread) or handed to a joined thread.
bool Executor::cpu_idle(int cpu) const {
  if (cpu < 0 || cpu >= static_cast<int>(cores_on_cpu_.size())) return true;
  for (int c : cores_on_cpu_[cpu]) {
    const Core& core = cores_[c];
    const int state = core.state.load(std::memory_order_acquire);
    if (state == kRunning || state == kAwaiting || state == kLate) return false;
    if (core.go.load(std::memory_order_acquire) != core.seen.load(std::memory_order_acquire)) return false;
  }
  return true;
}

void Executor::dispatch(Core& core, bool to_joined_thread) {
  // The caller waited for late participants: every core of the step is free.
  if (to_joined_thread) {
    must_move_core(core.state, kFree, kAwaiting);  // publishes the slot
    core.join_wake.wake();
    return;
  }
  must_move_core(core.state, kFree, kRunning);
  core.go.fetch_add(1, std::memory_order_seq_cst);  // publishes the slot
  core.wake.wake();
}

// The participants of a caller-threads step that no thread took: they never start,
// their cores are free again, and the step fails naming them. The others' collectives
// are aborted: they would wait for these.
void Executor::abandon_unclaimed(StepRun& run, bool step_failed) {
  if (!run.spec.caller_threads) return;
  std::string never;
  int num_never = 0;
  for (StepRun::Slot& slot : run.slots) {
    Core& core = cores_[slot.core];
    if (!move_core(core.state, kAwaiting, kFree)) continue;
    core.run = nullptr;
    never += str_cat(num_never++ ? ", " : "", participant_name(slot.participant, run.cores_per_replica),
                     " (core ", slot.core, ")");
    run.pending.fetch_sub(1, std::memory_order_seq_cst);
  }
  if (num_never == 0) return;
  run.never_started_after_failure = step_failed;
  run.never_started = str_cat(never, " never started: no thread joined ",
                              num_never > 1 ? "their cores" : "its core", " (tpu_step_join) ",
                              step_failed ? std::string("before the step failed")
                                          : str_cat("within ", run.timeout_ms, " ms"));
  run.comm->abort(-1, TPU_DEADLINE_EXCEEDED, run.never_started);
}

StepResult Executor::first_error(StepRun& run) {
  int failed = run.first_failure.load(std::memory_order_acquire);
  // Unclaimed participants fail the step only when nothing else had: otherwise the
  // step's failure (on every task, the verdict) comes first and they are noted after it.
  if (failed < 0 && !run.never_started.empty() && !run.never_started_after_failure)
    return {TPU_DEADLINE_EXCEEDED, run.never_started, false};
  if (failed < 0) {
    failed = run.first_abort.load(std::memory_order_acquire);
    if (failed < 0) return {};
    // Only failures after the step had: report the participant whose error that was,
    // as the communicator words it ("replica R: ..."), not R's error behind another name.
    int origin = -1;
    StepResult result;
    if (run.comm->failure(&origin, &result.code, &result.message) && origin >= 0) return result;
  }
  const StepRun::Slot& slot = run.slots[failed];
  StepResult result{slot.status,
                    str_cat(participant_name(slot.participant, run.cores_per_replica), ": ", slot.error), false};
  if (!run.never_started.empty()) result.message += str_cat(" (", run.never_started, ")");
  return result;
}

// Every participant is over (done, or never started): their outputs go to the caller
// on success, and their cores are free.
StepResult Executor::collect(StepRun& run, tpu_tensor** outputs) {
  const int num_outputs = run.spec.num_outputs;
  StepResult result = first_error(run);
  for (StepRun::Slot& slot : run.slots) {
    for (int o = 0; o < num_outputs; ++o) {
      tpu_tensor* t = std::exchange(slot.outputs[o], nullptr);
      if (result.code == TPU_OK) outputs[static_cast<int64_t>(slot.participant) * num_outputs + o] = t;
      else release(t);
    }
    Core& core = cores_[slot.core];
    if (move_core(core.state, kDone, kFree)) core.run = nullptr;
  }
  // What the step lent the run goes back now, not when the next step reuses it.
  run.spec.stage.reset();
  run.spec.embedding.reset();
  run.spec.user_data = nullptr;
  return result;
}

StepResult Executor::give_up(StepRun& run, tpu_tensor** outputs) {
  abandon_unclaimed(run, false);
  std::string late;
  int num_late = 0;
  for (StepRun::Slot& slot : run.slots) {
    Core& core = cores_[slot.core];
    const std::string who = participant_name(slot.participant, run.cores_per_replica);
    if (core.state.load(std::memory_order_acquire) == kFree) continue;  // never started
    // Handed over before the participant can see kLate: it may read its inputs after
    // the caller's references are gone, and call collectives on the run's communicator.
    for (tpu_tensor* t : slot.inputs) retain(t);
    core.late_hold = run_;  // the run outlives the call while the participant runs
    // Before it can be late: once it is, its collectives are TPU_ABORTED (replicate.h),
    // not the error that failed the step. Harmless if it returns first.
    core.ctx.late_reason = str_cat(who, " did not return within ", run.timeout_ms,
                                   " ms and its step failed without it: its collectives are aborted");
    core.ctx.late.store(true, std::memory_order_release);
    if (move_core(core.state, kRunning, kLate)) {
      late += str_cat(num_late++ ? ", " : "", run.cores_per_replica > 1 ? who : std::to_string(slot.participant));
    } else {
      for (tpu_tensor* t : slot.inputs) release(t);
      core.late_hold.reset();
    }
  }
  // The participants that did return are past their computations: their last
  // decrements are imminent.
  while (run.pending.load(std::memory_order_seq_cst) != static_cast<uint32_t>(num_late)) sched_yield();
  if (num_late == 0) return collect(run, outputs);
  for (StepRun::Slot& slot : run.slots) {
    Core& core = cores_[slot.core];
    if (!move_core(core.state, kDone, kFree)) continue;
    for (tpu_tensor*& t : slot.outputs) release(std::exchange(t, nullptr));
    core.run = nullptr;
  }
  const std::string overran = str_cat(run.cores_per_replica > 1 ? "" : num_late > 1 ? "replicas " : "replica ", late,
                                      " did not return within ", run.timeout_ms, " ms");
  StepResult result = first_error(run);
  result.late = true;
  if (result.code != TPU_OK) {
    result.message += str_cat(" (", overran, " of the failure)");
  } else {
    result.code = TPU_DEADLINE_EXCEEDED;
    result.message = str_cat(overran, " after another replica finished");
  }
  // From now on the late participants' collectives fail at once.
  run.comm->abort(-1, result.code, result.message);
  return result;
}

}  // namespace tpurt
