// Binding-support layer (../tpurt_binding.hpp): cluster resolution (ClusterResolverOptions,
// ClusterResolver) and the ClusterOptions of a multi-task system.
#ifndef TPURT_BINDING_SUPPORT_CLUSTER_HPP
#define TPURT_BINDING_SUPPORT_CLUSTER_HPP

#include "common.hpp"

namespace tpurt {

// tpu_cluster_resolver_options; empty strings mean NULL (the source's default).
class ClusterResolverOptions {
 public:
  ClusterResolverOptions() { detail::check(tpu_cluster_resolver_options_init(&o_, sizeof o_)); }
  ResolverSource source = ResolverSource::Auto;
  std::string tpu;                 // TPU source: "" environment, "local", "grpc://host[:port],..."
  std::string jobName;             // "": the source's default ("worker")
  std::string coordinatorName;     // an extra job in the cluster spec ...
  std::string coordinatorAddress;  // ... at this host:port
  std::string taskType;            // TF_CONFIG: overrides task.type
  int taskId = -1;                 // TF_CONFIG: overrides task.index when >= 0
  std::string rpcLayer;            // "": the source's
  std::string environment;
  int portBase = 0;                // Slurm and Open MPI: 0 = 8888
  // A C view valid while this object is unchanged.
  const tpu_cluster_resolver_options* toC() const {
    o_.source = static_cast<int>(source);
    o_.tpu = detail::c_str_or_null(tpu);
    o_.job_name = detail::c_str_or_null(jobName);
    o_.coordinator_name = detail::c_str_or_null(coordinatorName);
    o_.coordinator_address = detail::c_str_or_null(coordinatorAddress);
    o_.task_type = detail::c_str_or_null(taskType);
    o_.task_id = taskId;
    o_.rpc_layer = detail::c_str_or_null(rpcLayer);
    o_.environment = detail::c_str_or_null(environment);
    o_.port_base = portBase;
    return &o_;
  }

 private:
  mutable tpu_cluster_resolver_options o_;
};

// tpu_cluster_options: how the tasks join; zero means the default (or the environment's).
class ClusterOptions {
 public:
  ClusterOptions() { detail::check(tpu_cluster_options_init(&o_, sizeof o_)); }
  int64_t initTimeoutMs = 0;
  int64_t heartbeatIntervalMs = 0;
  int64_t heartbeatTimeoutMs = 0;
  int64_t shutdownBarrierTimeoutMs = 0;
  std::string token;                   // "": TPURT_CLUSTER_TOKEN
  bool disableAuthentication = false;  // true: token "" whatever the environment says
  const tpu_cluster_options* toC() const {
    o_.init_timeout_ms = initTimeoutMs;
    o_.heartbeat_interval_ms = heartbeatIntervalMs;
    o_.heartbeat_timeout_ms = heartbeatTimeoutMs;
    o_.shutdown_barrier_timeout_ms = shutdownBarrierTimeoutMs;
    o_.token = disableAuthentication ? "" : detail::c_str_or_null(token);
    return &o_;
  }

 private:
  mutable tpu_cluster_options o_;
};

// ---- Cluster resolution ------------------------------------------------------------

// TensorFlow's ClusterResolver: a snapshot of the cluster taken when it is created.
// Empty job / task type / rpc layer arguments and task id -1 mean the resolver's own.
class ClusterResolver {
 public:
  explicit ClusterResolver(const ClusterResolverOptions& options) {
    detail::check(tpu_cluster_resolver_create(options.toC(), &r_));
  }
  ClusterResolver(const ClusterResolver&) = delete;
  ClusterResolver& operator=(const ClusterResolver&) = delete;
  ~ClusterResolver() { close(); }
  void close() {
    if (r_) tpu_cluster_resolver_release(r_);
    r_ = nullptr;
  }
  ResolverSource source() const {
    int out = 0;
    detail::check(tpu_cluster_resolver_source(handle(), &out));
    return static_cast<ResolverSource>(out);
  }
  std::string tpuName() const { return get_string(tpu_cluster_resolver_tpu_name); }
  // cluster_spec() as JSON: {"job": ["host:port", ...], ...}; "{}" when local.
  std::string clusterSpec() const { return get_string(tpu_cluster_resolver_cluster_spec); }
  int numTasks(const std::string& job) const {
    int out = 0;
    detail::check(tpu_cluster_resolver_num_tasks(handle(), detail::c_str_or_null(job), &out));
    return out;
  }
  std::string taskAddress(const std::string& job, int taskId) const {
    return detail::read_string([&](char* o, size_t c, size_t* n) {
      return tpu_cluster_resolver_task_address(handle(), detail::c_str_or_null(job), taskId, o, c, n);
    });
  }
  std::string master(const std::string& taskType, int taskId, const std::string& rpcLayer) const {
    return detail::read_string([&](char* o, size_t c, size_t* n) {
      return tpu_cluster_resolver_master(handle(), detail::c_str_or_null(taskType), taskId,
                                         detail::c_str_or_null(rpcLayer), o, c, n);
    });
  }
  // get_master(): master() with the resolver's own task type, task id and rpc layer.
  std::string getMaster() const { return get_string(tpu_cluster_resolver_get_master); }
  std::string jobName() const { return get_string(tpu_cluster_resolver_job_name); }
  int taskId() const {
    int out = 0;
    detail::check(tpu_cluster_resolver_task_id(handle(), &out));
    return out;
  }
  std::string rpcLayer() const { return get_string(tpu_cluster_resolver_rpc_layer); }
  std::string environment() const { return get_string(tpu_cluster_resolver_environment); }
  std::string coordinatorAddress() const { return get_string(tpu_cluster_resolver_coordinator_address); }
  int numAccelerators() const {
    int out = 0;
    detail::check(tpu_cluster_resolver_num_accelerators(handle(), &out));
    return out;
  }
  // num_accelerators(task_type, task_id): "" / -1 mean the resolver's own; a task not in
  // the spec is InvalidArgument, as master().
  int numAcceleratorsOf(const std::string& taskType, int taskId) const {
    int out = 0;
    detail::check(tpu_cluster_resolver_task_num_accelerators(
        handle(), detail::c_str_or_null(taskType), taskId, &out));
    return out;
  }
  // The context manager; exit without enter is FailedPrecondition.
  void enter() { detail::check(tpu_cluster_resolver_enter(handle())); }
  void exit() { detail::check(tpu_cluster_resolver_exit(handle())); }
  tpu_cluster_resolver* handle() const {
    detail::check_handle(r_, "the cluster resolver");
    return r_;
  }

 private:
  std::string get_string(tpu_status (*fn)(const tpu_cluster_resolver*, char*, size_t, size_t*)) const {
    return detail::read_string([&](char* o, size_t c, size_t* n) { return fn(handle(), o, c, n); });
  }
  tpu_cluster_resolver* r_ = nullptr;
};

}  // namespace tpurt

#endif  // TPURT_BINDING_SUPPORT_CLUSTER_HPP
