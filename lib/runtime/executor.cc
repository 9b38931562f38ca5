#include "runtime/executor.h"

#include <pthread.h>
#include <sched.h>

#include <cstdio>
#include <thread>
#include <utility>

#include "collectives/communicator.h"
#include "core/cpus.h"
#include "core/status.h"
#include "core/tensor.h"
#include "runtime/replica_context.h"
#include "topology/group_modes.h"

namespace tpurt {
namespace {

thread_local int t_user_code_depth = 0;

// A core's slot state. The caller moves kRunning -> kLate when it gives up waiting
// for a replica; the worker moves kRunning -> kDone when the replica returns, so
// exactly one of them owns the cleanup. A late replica's worker moves kLate ->
// kIdle when it returns, which gives the core back. A caller-threads step leaves
// the slot kAwaiting: the joined thread moves it to kRunning, or the caller, giving
// up, to kIdle (never started).
enum CoreState : int { kIdle, kRunning, kDone, kLate, kAwaiting };

void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // best effort
}

}  // namespace

UserCodeScope::UserCodeScope() { ++t_user_code_depth; }
UserCodeScope::~UserCodeScope() { --t_user_code_depth; }
bool in_user_code() { return t_user_code_depth > 0; }

struct alignas(64) Executor::Core {
  std::atomic<uint32_t> go{0};  // bumped once per dispatch (and at stop)
  WakeWord wake;
  std::atomic<int> state{kIdle};
  tpu_replica_context ctx;
  // The replica's part of the step, copied at dispatch: a late replica must not
  // read the Step, which the next step overwrites.
  tpu_computation_fn fn = nullptr;
  void* user_data = nullptr;
  std::vector<tpu_tensor*> inputs;   // borrowed for the step; retained once late
  std::vector<tpu_tensor*> call_inputs;  // what the computation gets when a stage adds some
  std::shared_ptr<const StepStage> stage;
  WakeWord join_wake;                // woken when a caller-threads step hands the core work
  std::atomic<bool> joined{false};   // a thread has joined the core (waiting or running)
  std::vector<tpu_tensor*> outputs;  // staged until the step succeeds
  std::shared_ptr<Communicator> late_comm;  // the step's, held for a late replica
  tpu_status status = TPU_OK;        // the replica's failure, if any
  std::string error;
  std::thread thread;
};

struct Executor::Step {
  StepSpec spec;
  Communicator* comm = nullptr;
  std::vector<int> participants;  // the step's participants that run in this process
  int cores_per_replica = 1;
  alignas(64) std::atomic<uint32_t> pending{0};
  std::string never_started;           // caller threads: who did, as the step's error says
  std::atomic<int> first_failure{-1};  // replica that failed first on its own
  std::atomic<int> first_abort{-1};    // replica that first failed after the step had
  WakeWord done;
};

Executor::Executor(System* system, const std::vector<std::string>& device_names,
                   int pin_threads, int64_t timeout_ms)
    : num_cores_(static_cast<int>(device_names.size())),
      placement_(worker_placement(pin_threads, num_cores_)),
      cpu_of_rank_(num_cores_, -1),
      timeout_ms_(timeout_ms),
      // The caller waits too: one more thread than cores competes for the CPUs.
      policy_(SpinPolicy::for_threads(num_cores_ + 1, num_usable_cpus())),
      cores_(new Core[device_names.size()]),
      step_(new Step) {
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
  for (;;) {
    Deadline never = Deadline::never();
    wait_until(core.wake, policy_, never,
               [&] { return core.go.load(std::memory_order_acquire) != seen; },
               [] { return false; });
    seen = core.go.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    run_replica(core);
  }
}

// The one path of a participant, on a worker or on a thread that joined its core:
// enter_participant, the computation, leave_participant.
void Executor::run_replica(Core& core) {
  if (!enter_participant(core)) return;
  std::vector<tpu_tensor*>& inputs = core.stage ? core.call_inputs : core.inputs;
  tpu_status status;
  {
    UserCodeScope scope;
    try {
      status = core.fn(&core.ctx, inputs.data(), static_cast<int>(inputs.size()),
                       core.outputs.data(), static_cast<int>(core.outputs.size()),
                       core.user_data);
    } catch (...) {  // a C++ computation must not unwind into the worker
      status = set_last_error(TPU_INTERNAL, "the computation threw a C++ exception");
    }
  }
  leave_participant(core, status);
}

// False when the stage failed the participant (then it has left already).
bool Executor::enter_participant(Core& core) {
  clear_last_error();
  if (!core.stage) return true;
  core.call_inputs.assign(core.inputs.begin(), core.inputs.end());
  const tpu_status status = core.stage->before(&core.ctx, &core.call_inputs);
  if (status == TPU_OK) return true;
  leave_participant(core, status);
  return false;
}

void Executor::leave_participant(Core& core, tpu_status status) {
  tpu_replica_context& ctx = core.ctx;
  if (core.stage) {
    status = core.stage->after(&ctx, status, &core.call_inputs, core.inputs.size(),
                               core.outputs.data(), static_cast<int>(core.outputs.size()));
    core.stage.reset();
  }
  int running = kRunning;
  if (!core.state.compare_exchange_strong(running, kDone, std::memory_order_acq_rel)) {
    finish_late(core);
    return;
  }
  Step& step = *step_;
  if (status == TPU_OK) ctx.comm->depart(ctx.participant);
  else record_failure(core, status);
  ctx.comm = nullptr;  // a context kept past its step no longer reaches collectives
  if (step.pending.fetch_sub(1, std::memory_order_seq_cst) == 1) step.done.wake();
}

// The caller failed this replica's step without it and handed it references to its
// inputs and the step's communicator: release them and what it output, and give the
// core back. Nothing of the caller's is touched.
void Executor::finish_late(Core& core) {
  core.ctx.comm = nullptr;
  for (tpu_tensor* t : core.inputs) release(t);
  for (tpu_tensor*& t : core.outputs) release(std::exchange(t, nullptr));
  core.late_comm.reset();
  core.state.store(kIdle, std::memory_order_release);
  late_returned_.wake();
}

std::string Executor::wait_for_late(int n, const int* cores, int64_t timeout_ms) {
  if (cores == nullptr) n = num_cores_;
  auto late = [&](int i) {
    return cores_[cores ? cores[i] : i].state.load(std::memory_order_acquire) == kLate;
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

// The participant a thread joined (tpu_step_join), until it leaves. Its destructor
// runs when the thread exits: a participant whose thread exits without leaving fails
// at once, instead of at the deadline, and frees its core.
struct Executor::JoinedThread {
  Executor* executor = nullptr;
  Core* core = nullptr;
  // Kept from join to join (a pool thread's refcount is not touched every step); let
  // go when a join fails and when the thread exits.
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
    invalid_argument("core ", index, " has been joined by another thread; one thread joins a core at a time");
  // A limit past the clock's range (now + it overflows into the past) is no limit.
  constexpr int64_t kNoLimitBeyondMs = int64_t{1} << 40;  // 34 years
  Deadline deadline(timeout_ms > kNoLimitBeyondMs ? -1 : timeout_ms);
  if (me.keepalive != keepalive) me.keepalive = keepalive;  // the system outlives the wait
  for (;;) {
    const WaitResult w = wait_until(
        core.join_wake, policy_, deadline,
        [&] { return core.state.load(std::memory_order_acquire) == kAwaiting; },
        [&] { return stop_.load(std::memory_order_acquire); });
    if (w != WaitResult::kReady) {
      core.joined.store(false, std::memory_order_release);
      me.keepalive.reset();
      if (w == WaitResult::kStopped)
        fail(TPU_CANCELLED, "the TPU system was shut down while this thread waited on core ", index);
      fail(TPU_DEADLINE_EXCEEDED, "no step gave core ", index, " a participant within ", timeout_ms, " ms");
    }
    int awaiting = kAwaiting;
    if (!core.state.compare_exchange_strong(awaiting, kRunning, std::memory_order_acq_rel))
      continue;  // the step gave up on it a moment ago
    step_->done.wake();  // the caller may wait for every participant to be claimed
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
    std::vector<tpu_tensor*>& inputs = core.stage ? core.call_inputs : core.inputs;
    JoinedParticipant out;
    out.ctx = &core.ctx;
    out.inputs = inputs.data();
    out.num_inputs = static_cast<int>(inputs.size());
    out.num_outputs = static_cast<int>(core.outputs.size());
    out.fn = core.fn;
    out.user_data = core.user_data;
    return out;
  }
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
  Core& core = *me.core;
  const int expected = static_cast<int>(core.outputs.size());
  std::string wrong;
  if (num_outputs != expected)
    wrong = str_cat("tpu_step_leave got num_outputs ", num_outputs, ", but the step has ", expected);
  else if (num_outputs > 0 && outputs == nullptr)
    wrong = str_cat("tpu_step_leave got outputs NULL for ", num_outputs, " outputs");
  if (outputs != nullptr)  // taken over even when the count is wrong: nothing leaks
    for (int o = 0; o < num_outputs; ++o) {
      if (o < expected) core.outputs[o] = outputs[o];
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

void Executor::record_failure(Core& core, tpu_status status) {
  Step& step = *step_;
  tpu_replica_context& ctx = core.ctx;
  if (!is_status(status)) {
    core.status = TPU_UNKNOWN;
    core.error = str_cat("the computation returned ", static_cast<int>(status),
                         ", which is not a tpu_status");
  } else {
    core.status = status;
    if (ctx.fail_code != TPU_OK && !ctx.fail_message.empty()) core.error = ctx.fail_message;
    else if (*last_error() != '\0') core.error = last_error();
    else core.error = str_cat("the computation returned ", status_name(status));
  }
  // A replica that fails after the step failed (aborted, or given another replica's
  // error) must not hide that failure; claiming first_failure before aborting the
  // communicator orders the two.
  int origin = -1;
  tpu_status code;
  std::string message;
  const bool collateral =
      step.comm->failure(&origin, &code, &message) && origin != ctx.participant;
  int none = -1;
  (collateral ? step.first_abort : step.first_failure)
      .compare_exchange_strong(none, ctx.participant, std::memory_order_acq_rel);
  step.comm->abort(ctx.participant, core.status, core.error);
}

StepResult Executor::run(const StepSpec& spec, const int* cores, int cores_per_replica,
                         const std::shared_ptr<Communicator>& shared_comm,
                         tpu_tensor** outputs, const std::vector<int>* participants) {
  Step& step = *step_;
  const int k = cores_per_replica;
  const int n = spec.num_replicas * k;  // participants
  step.cores_per_replica = k;
  step.participants.clear();
  if (participants) step.participants = *participants;
  else
    for (int p = 0; p < n; ++p) step.participants.push_back(p);
  const int m = static_cast<int>(step.participants.size());
  const int64_t step_timeout_ms = spec.timeout_ms > 0 ? spec.timeout_ms : timeout_ms_;
  std::vector<int> local_cores(m);
  for (int i = 0; i < m; ++i) local_cores[i] = cores[step.participants[i]];
  const std::string busy = wait_for_late(m, local_cores.data(), step_timeout_ms);
  if (!busy.empty())
    fail(TPU_UNAVAILABLE, "the step needs ", busy, ", which did not return within ", step_timeout_ms,
         " ms more; a core serves steps again when its computation returns");
  Communicator* comm = shared_comm.get();
  step.spec = spec;
  step.comm = comm;
  step.first_failure.store(-1, std::memory_order_relaxed);
  step.first_abort.store(-1, std::memory_order_relaxed);
  step.never_started.clear();
  step.pending.store(static_cast<uint32_t>(m), std::memory_order_relaxed);
  if (!placement_.empty())
    for (int i = 0; i < m; ++i) cpu_of_rank_[i] = placement_[cores[step.participants[i]]];
  comm->reset(placement_.empty() ? nullptr : cpu_of_rank_.data());
  step_timeout_ms_ = step_timeout_ms;
  comm->set_step_timeout(step_timeout_ms_);
  for (int p : step.participants) {
    Core& core = cores_[cores[p]];
    tpu_replica_context& ctx = core.ctx;
    ctx.comm = comm;
    ctx.participant = p;
    ctx.replica_id = p / k;
    ctx.logical_core = p % k;
    ctx.num_replicas = spec.num_replicas;
    ctx.num_cores_per_replica = k;
    ctx.bf16_scope_depth = 0;
    ctx.fail_code = TPU_OK;
    ctx.fail_message.clear();
    ctx.late.store(false, std::memory_order_relaxed);
    core.fn = spec.fn;
    core.user_data = spec.user_data;
    tpu_tensor* const* in = spec.inputs + static_cast<int64_t>(p) * spec.num_inputs;
    core.inputs.assign(in, in + spec.num_inputs);
    core.outputs.assign(spec.num_outputs, nullptr);
    core.stage = spec.stage;
    dispatch(core, spec.caller_threads);
  }

  auto done = [&] { return step.pending.load(std::memory_order_seq_cst) == 0; };
  // No deadline while every replica is still running: computations may be long.
  // Once the step has failed or a replica has finished, the rest get the collective
  // deadline to return.
  if (spec.caller_threads) {
    // A participant that no thread takes within the deadline never arrives.
    Deadline joins(step_timeout_ms_);
    // Read from the cores' slots: a shared counter would be one more contended
    // write per participant and step.
    auto all_claimed = [&] {
      for (int p : step.participants)
        if (cores_[cores[p]].state.load(std::memory_order_seq_cst) == kAwaiting) return false;
      return true;
    };
    const WaitResult w = wait_until(step.done, policy_, joins, all_claimed, [&] {
      return step.pending.load(std::memory_order_relaxed) < static_cast<uint32_t>(m) ||
             comm->aborted();
    });
    if (w == WaitResult::kTimedOut) abandon_unclaimed(cores, false);
    // Failed before all were claimed: those never start. Waiting another deadline for
    // them would end the step here a deadline after the other tasks, who take that as
    // this task gone.
    else if (comm->aborted()) abandon_unclaimed(cores, true);
  }
  Deadline never = Deadline::never();
  WaitResult w = wait_until(step.done, policy_, never, done, [&] {
    return step.pending.load(std::memory_order_relaxed) < static_cast<uint32_t>(m) ||
           comm->aborted();
  });
  if (w != WaitResult::kReady) {
    Deadline deadline(step_timeout_ms_);
    w = wait_until(step.done, policy_, deadline, done, [] { return false; });
  }
  if (w != WaitResult::kReady) return give_up(n, cores, shared_comm, outputs);
  return collect(n, cores, outputs);
}

void Executor::dispatch(Core& core, bool to_joined_thread) {
  if (to_joined_thread) {
    core.state.store(kAwaiting, std::memory_order_seq_cst);  // publishes the slot
    core.join_wake.wake();
    return;
  }
  core.state.store(kRunning, std::memory_order_relaxed);
  core.go.fetch_add(1, std::memory_order_seq_cst);  // publishes the slot
  core.wake.wake();
}

// The participants of a caller-threads step that no thread took: they never start,
// their cores are free again, and the step fails naming them. The others' collectives
// are aborted: they would wait for these.
void Executor::abandon_unclaimed(const int* cores, bool step_failed) {
  Step& step = *step_;
  if (!step.spec.caller_threads) return;
  std::string never;
  int num_never = 0;
  for (int p : step.participants) {
    Core& core = cores_[cores[p]];
    int awaiting = kAwaiting;
    if (!core.state.compare_exchange_strong(awaiting, kIdle, std::memory_order_acq_rel)) continue;
    core.stage.reset();
    never += str_cat(num_never++ ? ", " : "", participant_name(p, step.cores_per_replica),
                     " (core ", cores[p], ")");
    if (step.pending.fetch_sub(1, std::memory_order_seq_cst) == 1) step.done.wake();
  }
  if (num_never == 0) return;
  step.never_started = str_cat(never, " never started: no thread joined ",
                               num_never > 1 ? "their cores" : "its core", " (tpu_step_join) ",
                               step_failed ? std::string("before the step failed")
                                           : str_cat("within ", step_timeout_ms_, " ms"));
  step.comm->abort(-1, TPU_DEADLINE_EXCEEDED, step.never_started);
}

StepResult Executor::first_error(const int* cores) {
  Step& step = *step_;
  int failed = step.first_failure.load(std::memory_order_acquire);
  if (failed < 0 && !step.never_started.empty())
    return {TPU_DEADLINE_EXCEEDED, step.never_started, false};
  if (failed < 0) {
    failed = step.first_abort.load(std::memory_order_acquire);
    if (failed < 0) return {};
    // Only failures after the step had: report the replica whose error that was, as
    // the communicator words it ("replica R: ..."), not R's error behind another name.
    int origin = -1;
    StepResult result;
    if (step.comm->failure(&origin, &result.code, &result.message) && origin >= 0) return result;
  }
  const Core& core = cores_[cores[failed]];
  StepResult result{core.status, str_cat(participant_name(failed, step.cores_per_replica), ": ", core.error),
                    false};
  if (!step.never_started.empty()) result.message += str_cat(" (", step.never_started, ")");
  return result;
}

StepResult Executor::collect(int num_replicas, const int* cores, tpu_tensor** outputs) {
  Step& step = *step_;
  const int num_outputs = step.spec.num_outputs;
  StepResult result = first_error(cores);
  (void)num_replicas;
  for (int p : step.participants) {
    Core& core = cores_[cores[p]];
    for (int o = 0; o < num_outputs; ++o) {
      tpu_tensor* t = std::exchange(core.outputs[o], nullptr);
      if (result.code == TPU_OK) outputs[static_cast<int64_t>(p) * num_outputs + o] = t;
      else release(t);
    }
  }
  return result;
}

StepResult Executor::give_up(int num_replicas, const int* cores,
                             const std::shared_ptr<Communicator>& comm, tpu_tensor** outputs) {
  Step& step = *step_;
  abandon_unclaimed(cores, false);
  std::string late;
  int num_late = 0;
  for (int p : step.participants) {
    Core& core = cores_[cores[p]];
    const std::string who = participant_name(p, step.cores_per_replica);
    if (core.state.load(std::memory_order_acquire) == kIdle) continue;  // never started
    // Handed over before the replica can see kLate: it may read its inputs after the
    // caller's references are gone, and call collectives on its communicator.
    for (tpu_tensor* t : core.inputs) retain(t);
    core.late_comm = comm;
    // Before it can be late: once it is, its collectives are TPU_ABORTED (replicate.h),
    // not the error that failed the step. Harmless if it returns first.
    core.ctx.late_reason = str_cat(who, " did not return within ", step_timeout_ms_,
                                   " ms and its step failed without it: its collectives are aborted");
    core.ctx.late.store(true, std::memory_order_release);
    int running = kRunning;
    if (core.state.compare_exchange_strong(running, kLate, std::memory_order_acq_rel)) {
      late += str_cat(num_late++ ? ", " : "", step.cores_per_replica > 1 ? who : std::to_string(p));
    } else {
      for (tpu_tensor* t : core.inputs) release(t);
      core.late_comm.reset();
    }
  }
  // The replicas that did return are past their computations: their last
  // decrements are imminent.
  while (step.pending.load(std::memory_order_seq_cst) != static_cast<uint32_t>(num_late))
    sched_yield();
  if (num_late == 0) return collect(num_replicas, cores, outputs);
  for (int p : step.participants) {
    Core& core = cores_[cores[p]];
    if (core.state.load(std::memory_order_acquire) != kDone) continue;
    for (tpu_tensor*& t : core.outputs) release(std::exchange(t, nullptr));
  }
  const std::string overran = str_cat(step.cores_per_replica > 1 ? "" : num_late > 1 ? "replicas " : "replica ", late,
                                      " did not return within ", step_timeout_ms_, " ms");
  StepResult result = first_error(cores);
  result.late = true;
  if (result.code != TPU_OK) {
    result.message += str_cat(" (", overran, " of the failure)");
  } else {
    result.code = TPU_DEADLINE_EXCEEDED;
    result.message = str_cat(overran, " after another replica finished");
  }
  // From now on the late replicas' collectives fail at once.
  comm->abort(-1, result.code, result.message);
  return result;
}

}  // namespace tpurt
