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
// kIdle when it returns, which gives the core back.
enum CoreState : int { kIdle, kRunning, kDone, kLate };

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
  if (!placement_.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(placement_[index], &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // best effort
  }
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

void Executor::run_replica(Core& core) {
  tpu_replica_context& ctx = core.ctx;
  tpu_status status;
  clear_last_error();
  {
    UserCodeScope scope;
    try {
      status = core.fn(&ctx, core.inputs.data(), static_cast<int>(core.inputs.size()),
                       core.outputs.data(), static_cast<int>(core.outputs.size()),
                       core.user_data);
    } catch (...) {  // a C++ computation must not unwind into the worker
      status = set_last_error(TPU_INTERNAL, "the computation threw a C++ exception");
    }
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
    core.state.store(kRunning, std::memory_order_relaxed);
    core.go.fetch_add(1, std::memory_order_seq_cst);  // publishes the slot
    core.wake.wake();
  }

  auto done = [&] { return step.pending.load(std::memory_order_seq_cst) == 0; };
  // No deadline while every replica is still running: computations may be long.
  // Once the step has failed or a replica has finished, the rest get the collective
  // deadline to return.
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

StepResult Executor::first_error(const int* cores) {
  Step& step = *step_;
  int failed = step.first_failure.load(std::memory_order_acquire);
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
  return {core.status, str_cat(participant_name(failed, step.cores_per_replica), ": ", core.error),
          false};
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
  std::string late;
  int num_late = 0;
  for (int p : step.participants) {
    Core& core = cores_[cores[p]];
    const std::string who = participant_name(p, step.cores_per_replica);
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
