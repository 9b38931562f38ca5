// The workers: one persistent thread per logical core ("tpurt-core-N"). A step is
// dispatched by filling each participating core's slot and bumping its sequence
// word; idle workers spin briefly, then yield, then sleep on a futex (core/wait.h),
// and the caller waits for the step's pending count the same way. Nothing on this
// path allocates once the slots have grown to the step's input and output counts.
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
};

struct StepResult {
  tpu_status code = TPU_OK;
  std::string message;  // "replica R: ..." when code is not OK
  bool late = false;    // some replicas had not returned: the step's communicator is
                        // theirs until they do, and must not serve another step
};

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
  struct Step;

  void worker_loop(int index);
  void run_replica(Core& core);
  void finish_late(Core& core);
  void record_failure(Core& core, tpu_status status);
  StepResult first_error(const int* cores);
  StepResult collect(int num_replicas, const int* cores, tpu_tensor** outputs);
  StepResult give_up(int num_replicas, const int* cores,
                     const std::shared_ptr<Communicator>& comm, tpu_tensor** outputs);

  const int num_cores_;
  const std::vector<int> placement_;  // CPU per core, or empty: the OS places them
  std::vector<int> cpu_of_rank_;      // per step: placement_ of each replica's core
  const int64_t timeout_ms_;
  int64_t step_timeout_ms_ = 0;  // the running step's deadline
  const SpinPolicy policy_;
  std::unique_ptr<Core[]> cores_;
  std::unique_ptr<Step> step_;
  WakeWord late_returned_;  // woken when a late computation returns
  std::atomic<bool> stop_{false};
};

}  // namespace tpurt
