// What the resolver targets (fuzz_tf_config, fuzz_hostlist, fuzz_dtensor_jobs,
// fuzz_grpc_name) share: the input split into strings, an environment holding only
// what the target sets, and a resolve that must end in a tpurt::Error or a resolver
// whose every accessor works.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "cluster/resolver.h"
#include "core/status.h"

namespace fuzz {

// The input's NUL-separated fields (environment values cannot hold a NUL); missing
// ones are "".
inline std::vector<std::string> fields(const uint8_t* data, size_t size, size_t count) {
  std::vector<std::string> out(count);
  size_t f = 0;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      if (++f == count) break;
    } else {
      out[f].push_back(static_cast<char>(data[i]));
    }
  }
  return out;
}

// Unsets every variable a resolver reads, then sets `vars` (an empty value is still set:
// some sources tell "" from unset).
inline void set_environment(const std::vector<std::pair<const char*, const std::string*>>& vars) {
  static const char* const kRead[] = {
      "TF_CONFIG", "DTENSOR_JOBS", "DTENSOR_CLIENT_ID", "DTENSOR_JOB_NAME",
      "DTENSOR_USE_PARALLEL_EXECUTOR", "SLURM_JOB_ID", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS",
      "SLURM_NTASKS", "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_STEP_TASKS_PER_NODE",
      "SLURM_TASKS_PER_NODE", "SLURM_LOCALID", "OMPI_COMM_WORLD_SIZE", "TPU_NAME",
      "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", "TPURT_NUM_CORES"};
  for (const char* name : kRead) unsetenv(name);
  for (const auto& v : vars)
    if (v.second != nullptr) setenv(v.first, v.second->c_str(), 1);
}

// Resolves; a resolver that comes back must answer every question about itself.
inline void resolve(const tpu_cluster_resolver_options& options) {
  std::unique_ptr<tpurt::ClusterResolver> r;
  try {
    r = tpurt::ClusterResolver::create(&options);
  } catch (const tpurt::Error&) {
    return;  // rejected with a message: what the C API returns
  }
  (void)r->source();
  (void)r->is_local();
  (void)r->tpu_name();
  (void)r->task_id();
  (void)r->coordinator_address();
  (void)r->task_addresses();
  (void)r->cluster_spec_json();
  try {
    (void)r->master(nullptr, -1, nullptr);
  } catch (const tpurt::Error&) {
  }
  int asked = 0;
  for (const auto& job : r->cluster_spec()) {
    for (size_t t = 0; t <= job.second.size() && asked < 64; ++t, ++asked) {
      try {
        (void)r->master(job.first.c_str(), static_cast<int>(t), "grpc");
      } catch (const tpurt::Error&) {
        // A sparse job's missing index, or one past the end: TPU_INVALID_ARGUMENT.
      }
    }
  }
  try {
    (void)r->num_accelerators(nullptr, -1);
  } catch (const tpurt::Error&) {  // TPURT_NUM_CORES, if the fuzzer's environment sets it
  }
  r->enter();
  r->exit();
}

inline tpu_cluster_resolver_options options(int source) {
  tpu_cluster_resolver_options o = TPU_CLUSTER_RESOLVER_OPTIONS_INIT;
  o.source = source;
  return o;
}

// "" as NULL: options take NULL for the default and refuse "".
inline const char* or_null(const std::string& s) { return s.empty() ? nullptr : s.c_str(); }

}  // namespace fuzz
