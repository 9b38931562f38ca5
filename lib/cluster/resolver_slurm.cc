#include "cluster/resolver.h"

#include <cstdint>

#include "cluster/hostlist.h"
#include "cluster/resolver_parse.h"
#include "core/status.h"

namespace tpurt {

using namespace resolver;

// ---- Slurm ---------------------------------------------------------------------------

namespace {

// SlurmClusterResolver's lookup: the step's variable, else the job's (may be NULL).
// *used gets the name of the one read.
std::string slurm_var(const char* step_name, const char* job_name, const char** used = nullptr) {
  for (const char* name : {step_name, job_name}) {
    if (name == nullptr) continue;
    if (const char* v = env(name)) {
      if (used) *used = name;
      return v;
    }
  }
  invalid_argument(step_name, " not found in environment. Not running inside a SLURM step?");
}

}  // namespace

void ClusterResolver::resolve_slurm(const tpu_cluster_resolver_options& o) {
  source_ = TPU_RESOLVER_SLURM;
  tpu_name_ = "slurm";
  rpc_layer_ = o.rpc_layer ? o.rpc_layer : "grpc";
  job_name_ = o.job_name ? o.job_name : "worker";
  int port_base = o.port_base ? o.port_base : kDefaultPortBase;

  const char *ntasks_var, *nodelist_var, *tpn_var;
  std::string procid = slurm_var("SLURM_PROCID", nullptr);
  std::string ntasks_text = slurm_var("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", &ntasks_var);
  std::string nodelist = slurm_var("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", &nodelist_var);
  std::string tasks_per_node_text =
      slurm_var("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", &tpn_var);

  // One task per address: kMaxHosts bounds the tasks as it bounds the hosts.
  int64_t ntasks = launcher_int(ntasks_var, ntasks_text.c_str(), kMaxHosts + 1);
  if (ntasks == 0) invalid_argument(ntasks_var, " is 0: the step has no tasks");
  int64_t rank = launcher_int("SLURM_PROCID", procid.c_str(), ntasks);

  std::vector<std::string> hosts = expand_hostlist(nodelist, nodelist_var);
  std::vector<int> per_node = expand_tasks_per_node(tasks_per_node_text, tpn_var);
  if (per_node.size() != hosts.size())
    invalid_argument(tpn_var, "='", tasks_per_node_text, "' has ", per_node.size(),
                     " entries but ", nodelist_var, "='", nodelist, "' has ", hosts.size(),
                     " hosts");
  int64_t total = 0;
  for (int n : per_node) total += n;
  if (total != ntasks)
    invalid_argument("Requested ", ntasks, " tasks but ", tpn_var, "='", tasks_per_node_text,
                     "' assigns ", total);

  // Hosts in Slurm's order, not TensorFlow's sorted order: with the default block
  // distribution Slurm gives consecutive ranks to each host in its list's order, so
  // this order makes task k the process whose SLURM_PROCID is k.
  std::vector<std::string> addresses;
  int64_t local_index = -1;
  for (size_t h = 0; h < hosts.size(); ++h) {
    for (int i = 0; i < per_node[h]; ++i) {
      if (static_cast<int64_t>(addresses.size()) == rank) local_index = i;
      addresses.push_back(port_base_address(hosts[h], port_base, i, hosts[h].c_str()));
    }
  }
  for (size_t i = 0; i < addresses.size(); ++i)
    check_address(addresses[i], str_cat(nodelist_var, " (task ", i, ")"));
  check_no_duplicates(addresses, nodelist_var);
  // A cyclic or arbitrary distribution breaks the block order assumed above.
  if (const char* localid = env("SLURM_LOCALID")) {
    int64_t id = launcher_int("SLURM_LOCALID", localid, kMaxHosts + 1);
    if (id != local_index)
      invalid_argument("SLURM_LOCALID=", id, " but task ", rank, " is local task ", local_index,
                       " of its node in block order; tpurt needs --distribution=block");
  }
  task_id_ = static_cast<int>(rank);
  spec_[job_name_] = std::move(addresses);

  if (o.coordinator_address == nullptr) {
    // JAX's choice (jax/_src/clusters/slurm_cluster.py): the first host, port
    // job_id % 2**12 + (65535 - 2**12 + 1), i.e. 61440 + SLURM_JOB_ID % 4096, a high
    // port that differs between concurrent jobs. Task addresses stay port_base + i.
    std::string job_id = slurm_var("SLURM_JOB_ID", nullptr);
    int64_t id = launcher_int("SLURM_JOB_ID", job_id.c_str(), INT64_MAX);
    std::string host, port;
    split_address(spec_[job_name_][0], &host, &port);
    coordinator_address_ = str_cat(host, ":", 61440 + id % 4096);
  }
}

}  // namespace tpurt
