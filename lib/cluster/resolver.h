// Cluster resolution: where the tasks of a cluster are and which one this process
// is, from an explicit name or the environment a launcher leaves (TensorFlow's
// TPUClusterResolver and TFConfigClusterResolver, DTensor's DTENSOR_*, Slurm, Open
// MPI). include/tpurt/cluster.h states the sources and their rules.
//
// A resolver is a snapshot: the environment is read once, by create(). TensorFlow's
// TFConfigClusterResolver re-reads TF_CONFIG on every access; here a changed
// environment needs a new resolver (create again). The object is immutable after
// create() except for the enter/exit counter, so every const member is thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "tpurt/cluster.h"

namespace tpurt {

class ClusterResolver {
 public:
  // Resolves now. Throws tpurt::Error as the header says.
  static std::unique_ptr<ClusterResolver> create(const tpu_cluster_resolver_options* options);

  tpu_resolver_source source() const;
  bool is_local() const;                 // one task, no network
  const std::string& tpu_name() const;
  const std::string& job_name() const;   // task_type ("" when TF_CONFIG names none)
  // Whether this process is one of the spec's tasks: false for a TF_CONFIG whose
  // cluster comes without task.type (TensorFlow's task_type None), which cannot join.
  bool has_task() const { return has_task_; }
  int task_id() const;
  const std::string& rpc_layer() const;
  const std::string& environment() const;
  // job -> addresses, jobs in name order (cluster_spec()). Index = task id; a
  // sparse TF_CONFIG job ({"1": "h:p"}) has "" at the ids it does not name.
  const std::map<std::string, std::vector<std::string>>& cluster_spec() const;
  // The addresses of job_name()'s tasks, by task id (empty when local or when the
  // job is not in the spec).
  const std::vector<std::string>& task_addresses() const;
  // The coordination service's host:port ("" when local).
  std::string coordinator_address() const;
  // NULL / -1 mean the resolver's own task type, task id and rpc layer. Throws
  // TPU_INVALID_ARGUMENT for a task that is not in the spec (TensorFlow's ValueError).
  std::string master(const char* task_type, int task_id, const char* rpc_layer) const;
  // {"job": ["h:p", ...], "sparse": {"1": "h:p"}}, compact with sorted keys.
  std::string cluster_spec_json() const;
  // TPURT_NUM_CORES, else the system's default core count (read at each call).
  int num_accelerators() const;
  // num_accelerators(task_type, task_id): NULL / -1 mean the resolver's own; the task
  // must be in the spec (TPU_INVALID_ARGUMENT, as master()); ignored when local.
  int num_accelerators(const char* task_type, int task_id) const;

  // A nesting counter; exit() without enter() throws TPU_FAILED_PRECONDITION.
  void enter();
  void exit();

 private:
  ClusterResolver() = default;
  void resolve(const tpu_cluster_resolver_options& o);
  void resolve_tpu(const tpu_cluster_resolver_options& o, bool required);
  void resolve_tf_config(const tpu_cluster_resolver_options& o, const char* text);
  void resolve_dtensor(const tpu_cluster_resolver_options& o);
  void resolve_slurm(const tpu_cluster_resolver_options& o);
  void resolve_openmpi(const tpu_cluster_resolver_options& o);
  // Adds options->coordinator_name/_address and checks the spec.
  void finish(const tpu_cluster_resolver_options& o);

  // The address of (job, task) for master(); throws TPU_INVALID_ARGUMENT naming them.
  const std::string& master_address(const std::string& job, int task) const;

  tpu_resolver_source source_ = TPU_RESOLVER_TPU;
  bool local_ = false;
  std::string tpu_name_, job_name_, rpc_layer_, environment_;
  int task_id_ = 0;
  std::map<std::string, std::vector<std::string>> spec_;
  std::set<std::string> sparse_jobs_;  // TF_CONFIG jobs given as {index: address}
  bool has_task_ = true;
  bool has_session_master_ = false;
  std::string session_master_;
  std::string coordinator_address_;

  mutable std::mutex mu_;
  int entered_ = 0;
};

// The number of tasks a cluster_spec() job has (a sparse job's named ones).
int count_tasks(const std::vector<std::string>& addresses);

}  // namespace tpurt
