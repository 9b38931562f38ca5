// Cluster resolution: where the tasks of a cluster are and which one this process
// is, from an explicit name or the environment a launcher leaves (TensorFlow's
// TPUClusterResolver and TFConfigClusterResolver, DTensor's DTENSOR_*, Slurm, Open
// MPI). include/tpurt/cluster.h states the sources and their rules.
#pragma once

#include <map>
#include <memory>
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
  const std::string& job_name() const;   // task_type
  int task_id() const;
  const std::string& rpc_layer() const;
  const std::string& environment() const;
  // job -> addresses, jobs in name order (cluster_spec()).
  const std::map<std::string, std::vector<std::string>>& cluster_spec() const;
  // The addresses of job_name()'s tasks, by task id.
  const std::vector<std::string>& task_addresses() const;
  std::string coordinator_address() const;
  std::string master(const char* task_type, int task_id, const char* rpc_layer) const;
  std::string cluster_spec_json() const;
  int num_accelerators() const;

  void enter();
  void exit();
};

}  // namespace tpurt
