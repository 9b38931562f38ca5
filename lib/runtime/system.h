// A TPU system: validated options, the topology, one worker per logical core, the
// host thread for outside compilation, and the lock that serialises steps. One may
// be live per process. Shared ownership: the C handle, the feed queues and the
// worker threads hold references, so a thread still inside a late computation
// (one that overran its step's deadline) never outlives what it touches.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cluster/coordination.h"
#include "core/function_ref.h"
#include "core/status.h"
#include "runtime/executor.h"
#include "runtime/fifo_mutex.h"
#include "runtime/host_executor.h"
#include "topology/device_assignment.h"
#include "tpurt/system.h"

struct tpu_system;

namespace tpurt {

class Communicator;
class ClusterCommunicator;
namespace embedding {
class Engine;
}
class DataConnections;
namespace net {
class Transport;
}
namespace trace {
class Recorder;
}

// The options after defaults and validation.
struct SystemConfig {
  int num_cores = 0;
  int32_t mesh_shape[TPU_MESH_RANK] = {0, 0, 0, 0};
  std::string job_name;
  std::string device_type;  // "TPU" or "CPU"
  int pin_threads = TPU_PIN_AUTO;
  int64_t collective_timeout_ms = TPU_DEFAULT_COLLECTIVE_TIMEOUT_MS;
  bool close_on_failure = false;
  std::string embedding_config;
  bool private_collective_results = false;
  std::string trace_path;  // "": no trace (options->trace_path, else TPURT_TRACE)
  int num_tasks = 1;  // tasks of the cluster; each has num_cores cores
  int task_id = 0;
};

// How this task joins a cluster (from a resolver and tpu_cluster_options).
struct ClusterSetup {
  CoordinationConfig coordination;  // job, task_id, addresses, service address, token, timeouts
};

// The 1.0 struct size: callers must pass at least this much.
constexpr size_t kSystemOptionsMinSize =
    offsetof(tpu_system_options, embedding_config_len) + sizeof(size_t);

// Fills defaults and validates (options may be NULL). Throws TPU_INVALID_ARGUMENT
// naming the field.
SystemConfig resolve_system_options(const tpu_system_options* options);

class System {
 public:
  // Starts a system. TPU_ALREADY_EXISTS while another is live in the process.
  static std::shared_ptr<System> start(const tpu_system_options* options);
  // Joins the cluster and starts this task's part of a multi-task system.
  // Shuts down the process's live system, if any (DTensor's reset_context).
  static void shutdown_live();
  static std::shared_ptr<System> start_cluster(const tpu_system_options* options,
                                               const ClusterSetup& setup);
  ~System();
  System(const System&) = delete;
  System& operator=(const System&) = delete;

  const SystemConfig& config() const { return config_; }
  int num_cores() const { return config_.num_cores; }  // this task's
  int num_tasks() const { return config_.num_tasks; }
  int task_id() const { return config_.task_id; }
  // The data plane between tasks ("none" for one task, "tcp", "shm", "mpi") and why
  // it was chosen, for tpurt info and tpu_system_transport.
  const std::string& transport_name() const { return transport_name_; }
  const std::string& transport_reason() const { return transport_reason_; }
  int num_global_cores() const { return config_.num_cores * config_.num_tasks; }

  // The key-value store and barriers: the coordination service's, or in process for
  // a one-task system.
  void kv_set(const std::string& key, const std::string& value);
  std::string kv_get(const std::string& key, int64_t timeout_ms);
  bool kv_try_get(const std::string& key, std::string* value);
  void kv_delete(const std::string& key);
  void barrier(const std::string& id, int64_t timeout_ms, const std::vector<int32_t>& tasks);
  // The same store under tpurt's own prefix (kReservedKeyPrefix + key), which users'
  // keys cannot reach: lib/checkpoint's votes between the tasks.
  void internal_kv_set(const std::string& key, const std::string& value);
  std::string internal_kv_get(const std::string& key, int64_t timeout_ms);
  // Numbers this system's checkpoint calls (every task makes them in the same order),
  // so that each call's keys are its own.
  uint64_t next_checkpoint_call() { return checkpoint_calls_.fetch_add(1) + 1; }
  const std::string& serialized_topology() const { return serialized_topology_; }

  // TPU_FAILED_PRECONDITION once shut down.
  void check_live() const;
  // TPU_FAILED_PRECONDITION once shut down or closed by a failed step.
  void check_open() const;
  bool is_shut_down() const { return state_.load(std::memory_order_acquire) == kShutDown; }
  bool is_closed() const { return state_.load(std::memory_order_acquire) != kOpen; }
  // TPU_FAILED_PRECONDITION inside a computation (no nesting) or once closed.
  void check_can_start_step() const;
  // The replica-count rules of tpu_replicate (TPU_INVALID_ARGUMENT).
  void check_num_replicas(int num_replicas, const DeviceAssignment* da) const;
  const std::shared_ptr<const Topology>& topology() const { return topology_; }
  // What a step without a device assignment runs on: replica r on core r.
  std::shared_ptr<const DeviceAssignment> default_device_assignment(int num_replicas) const;

  // Waits for the step in flight and, up to the collective deadline, for late
  // computations; stops the threads. Throws TPU_DEADLINE_EXCEEDED naming the late
  // computations still running (their threads are left to finish); shut down all
  // the same. Idempotent, and each call waits for late computations again.
  void shutdown();

  // Runs one step on the cores the device assignment names (NULL: replica r on core
  // r), after checking it against num_replicas: one participant per (replica r,
  // logical core c), p = r * k + c with k the assignment's cores per replica.
  // spec.inputs is [participant][input] and, on success, outputs[p * num_outputs + o]
  // get new references (this task's participants only); on failure throws "replica
  // R: ..." ("replica R core C: ..." when k > 1) and leaves outputs alone. Steps run
  // one at a time in call order. A core still running a late computation is waited
  // for up to the deadline (then TPU_UNAVAILABLE).
  void run_step(const StepSpec& spec, const DeviceAssignment* device_assignment,
                tpu_tensor** outputs);

  HostExecutor& host() { return host_; }

  // The embedding tables (NULL without an embedding configuration).
  embedding::Engine* embedding() const { return embedding_.get(); }
  // Runs fn under the step lock, between steps: TPU_FAILED_PRECONDITION from inside a
  // computation or once shut down.
  void between_steps(FunctionRef<void()> fn);
  // tpu_step_join: the calling thread waits for a caller-threads step's participant
  // on `core` (Executor::join).
  JoinedParticipant join_step(int core, int64_t timeout_ms, const std::shared_ptr<System>& keepalive);
  // No check of liveness: after shutdown every join fails anyway.
  void cancel_join(int core) { executor_.cancel_join(core); }

  // The C handle the caller was given (tpu_replica_context_system's answer).
  tpu_system* c_handle() const { return c_handle_; }
  void set_c_handle(tpu_system* handle) { c_handle_ = handle; }

 private:
  enum State { kOpen, kClosed, kShutDown };

  explicit System(SystemConfig config);
  // Registers and starts a system (joining the cluster first when setup is given).
  static std::shared_ptr<System> launch(SystemConfig config, const ClusterSetup* setup);
  void build_topology();
  // The core of every participant (-1 on other tasks), indexed by flattened id.
  const int* resolve_cores(int num_replicas, const DeviceAssignment* da,
                           int* cores_per_replica);
  const std::shared_ptr<Communicator>& communicator(int num_participants, int cores_per_replica);
  void join_cluster(const ClusterSetup& setup);
  void run_cluster_step(const StepSpec& spec, const int* cores, int cores_per_replica,
                        tpu_tensor** outputs);
  void close(const std::string& why);
  void internal_kv_set_unchecked(const std::string& key, const std::string& value);
  // Opens the trace config_.trace_path names, if any, and turns the hooks on.
  void start_trace();

  const SystemConfig config_;
  std::shared_ptr<const Topology> topology_;
  std::string serialized_topology_;
  std::atomic<int> state_{kOpen};
  mutable std::mutex closed_mu_;
  std::string closed_message_;

  FifoMutex step_mu_;
  // Guarded by step_mu_: one communicator per participant count (a step's late
  // participants keep theirs; the next step gets a new one), and the participant ->
  // core map of the current step.
  std::vector<std::shared_ptr<Communicator>> comms_;
  std::vector<int> participant_core_;
  std::vector<int> core_owner_;

  // Guarded by step_mu_: which participants run here (multi-task steps).
  std::vector<int> participant_task_;
  std::vector<int> local_participants_;

  // A multi-task system's: the data plane, the coordination agent, the step count.
  // Before coordination_: the service's callbacks use them until it is gone.
  std::unique_ptr<DataConnections> connections_;
  std::unique_ptr<net::Transport> transport_;
  std::unique_ptr<Coordination> coordination_;
  std::shared_ptr<ClusterCommunicator> cluster_comm_;  // guarded by step_mu_
  uint64_t step_number_ = 0;
  std::string transport_name_ = "none";
  std::string transport_reason_ = "one task: its replicas share this process's memory";

  // A one-task system's key-value store and barrier counts.
  std::mutex kv_mu_;
  std::condition_variable kv_changed_;
  std::map<std::string, std::string> kv_;

  std::unique_ptr<embedding::Engine> embedding_;
  std::atomic<uint64_t> checkpoint_calls_{0};
  std::unique_ptr<trace::Recorder> trace_;  // NULL unless tracing (lib/trace/trace.h)
  tpu_system* c_handle_ = nullptr;

  Executor executor_;
  HostExecutor host_;
};

}  // namespace tpurt

