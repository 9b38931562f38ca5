// The coordination service of a cluster, modelled on XLA/TSL's: task 0 hosts the
// service, every task (task 0 too) runs an agent connected to it. One libuv event
// loop thread per process runs the service, the agent and the task's listener.
//
// The runtime uses one Coordination per multi-task system: start() joins the
// cluster (registration with incarnation, optional token), exchanges every task's
// TaskInfo, and from then on reports task failures (a closed connection at once,
// missed heartbeats after the timeout, an error a task reports) through the
// failure callback, and relays step aborts between tasks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tpurt/common.h"

namespace tpurt {

struct CoordinationConfig {
  std::string job;                     // the cluster's job name
  int task_id = 0;                     // this task
  std::vector<std::string> addresses;  // host:port of every task; task i listens on [i]
  std::string service_address;         // the service's host:port (task 0 listens there too
                                       // when it differs from addresses[0])
  std::string token;                   // "" = no authentication
  int num_cores = 0;                   // this task's logical cores
  int64_t init_timeout_ms = 300000;
  int64_t heartbeat_interval_ms = 1000;
  int64_t heartbeat_timeout_ms = 10000;
  int64_t shutdown_barrier_timeout_ms = 60000;
};

struct TaskInfo {
  int task_id = 0;
  std::string hostname;   // gethostname() of the task (same-host detection)
  std::string address;    // its listening host:port
  int num_cores = 0;
  uint64_t incarnation = 0;
};

struct TaskFailure {
  int task = -1;              // the failed or lost task
  tpu_status code = TPU_OK;   // TPU_UNAVAILABLE for a lost task
  std::string message;        // names the task: "task 2 (127.0.0.1:9001) lost: ..."
};

struct StepAbort {
  uint64_t step = 0;
  int origin_task = -1;
  int origin_replica = -1;    // global replica id, or -1
  tpu_status code = TPU_OK;
  std::string message;
};

class Coordination {
 public:
  // Called on the loop thread with a data connection another task dialled (the
  // handshake done, the peer named): the callee owns fd.
  using DataConnectionHandler = std::function<void(int peer_task, int fd)>;

  // Starts the loop thread and the listener on addresses[task_id] (which accepts
  // data connections for on_data, and in task 0 agents for the service), then
  // registers with the service (retrying until init_timeout_ms) and waits until
  // every task has registered. Throws TPU_DEADLINE_EXCEEDED naming the tasks that did
  // not register, TPU_UNAUTHENTICATED, TPU_ALREADY_EXISTS "duplicate task id N" naming both
  // processes' hosts for a task id another live process holds, TPU_INVALID_ARGUMENT for a config that does not hold.
  static std::unique_ptr<Coordination> start(const CoordinationConfig& config,
                                             DataConnectionHandler on_data);
  // shutdown() if not done, without the barrier: a Disconnect that tells the service
  // this task left without shutdown, which every other task then gets as this
  // task's failure (TPU_UNAVAILABLE). Never from a callback (the loop thread).
  ~Coordination();

  int task_id() const;
  int num_tasks() const;
  uint64_t incarnation() const;
  const std::string& cluster_id() const;
  // Every task's info, by task id; the same on every task.
  const std::vector<TaskInfo>& tasks() const;

  // Callbacks run on the loop thread; set them before anything can fail (right
  // after start). A failure is delivered once per failed task.
  void on_task_failure(std::function<void(const TaskFailure&)> callback);
  void on_step_abort(std::function<void(const StepAbort&)> callback);
  // The first task failure seen, if any.
  bool failure(TaskFailure* out) const;

  // Tells every other task that this task's step failed (they abort that step).
  void broadcast_step_abort(const StepAbort& abort);
  // This task failed beyond a step: every other task gets it as a task failure.
  void report_error(tpu_status code, const std::string& message);

  // The key-value store and barriers of include/tpurt/cluster.h; they throw.
  void kv_set(const std::string& key, const std::string& value);
  std::string kv_get(const std::string& key, int64_t timeout_ms);
  bool kv_try_get(const std::string& key, std::string* value);
  // What to add to this process's CLOCK_MONOTONIC (now_ns, core/deadline.h) to read the
  // service's: from the fastest of a few round trips (each bounded like kv_try_get),
  // as NTP estimates it. Task 0's is 0.
  int64_t clock_offset_ns();
  void kv_delete(const std::string& key);
  void barrier(const std::string& id, int64_t timeout_ms, const std::vector<int32_t>& tasks);

  // The shutdown barrier (bounded by shutdown_barrier_timeout_ms), then disconnect
  // and stop the loop. Throws TPU_DEADLINE_EXCEEDED naming the tasks that did not
  // arrive, after disconnecting all the same. Idempotent.
  void shutdown();

 private:
  struct Impl;
  explicit Coordination(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Key normalisation as XLA's: repeated '/' collapsed, leading and trailing '/'
// removed. Throws TPU_INVALID_ARGUMENT for a key that normalises to "".
std::string normalize_key(const std::string& key);

}  // namespace tpurt
