#include "cluster/resolver.h"

#include <cstdint>
#include <cstring>

#include "cluster/resolver_parse.h"
#include "core/status.h"

namespace tpurt {

using namespace resolver;

// ---- DTensor -----------------------------------------------------------------------

void ClusterResolver::resolve_dtensor(const tpu_cluster_resolver_options& o) {
  source_ = TPU_RESOLVER_DTENSOR;
  rpc_layer_ = o.rpc_layer ? o.rpc_layer : "grpc";
  const char* jobs_text = env("DTENSOR_JOBS", false);
  if (jobs_text == nullptr)
    invalid_argument("DTENSOR_JOBS is not set: DTensor's multi-client mode needs the "
                     "clients' host:port list (without it DTensor runs locally; use the "
                     "TPU source with \"local\" for that)");
  if (const char* executor = env("DTENSOR_USE_PARALLEL_EXECUTOR"))
    if (std::strcmp(executor, "pw") == 0)
      fail(TPU_UNIMPLEMENTED, "DTENSOR_USE_PARALLEL_EXECUTOR=pw asks for Pathways, which "
                              "tpurt does not have");
  tpu_name_ = jobs_text;
  // DTensor's jobs(): "" is no jobs, i.e. local mode (one client, id 0, job
  // "localhost"). Otherwise it splits on ','. DTENSOR_NUM_CLIENTS was removed from
  // DTensor: ignored.
  local_ = *jobs_text == '\0';
  std::vector<std::string> jobs;
  if (!local_) jobs = split(jobs_text, ',');
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (starts_with(jobs[i], "/bns/"))
      fail(TPU_UNIMPLEMENTED, "DTENSOR_JOBS entry ", i, " '", jobs[i],
           "' is a /bns/ address, which tpurt cannot resolve; use host:port");
    check_address(jobs[i], str_cat("DTENSOR_JOBS entry ", i));
  }
  check_no_duplicates(jobs, "DTENSOR_JOBS");
  int64_t client_id = 0;
  // DTensor's int(os.environ.get(...)): an empty value is not an integer either.
  if (const char* id = env("DTENSOR_CLIENT_ID", false)) {
    if (!parse_int(id, &client_id))
      invalid_argument("DTENSOR_CLIENT_ID='", id, "' is not an integer");
    if (client_id < 0) invalid_argument("DTENSOR_CLIENT_ID (=", id, ") must be >= 0");
    const size_t clients = local_ ? 1 : jobs.size();
    if (client_id >= static_cast<int64_t>(clients))
      invalid_argument("DTENSOR_CLIENT_ID (=", id, ") must be < ", clients,
                       " (the number of clients in DTENSOR_JOBS", local_ ? ", empty: local" : "",
                       ")");
  }
  task_id_ = static_cast<int>(client_id);
  if (o.job_name != nullptr)
    job_name_ = o.job_name;
  // DTensor's os.environ.get(DTENSOR_JOB_NAME, default): a set but empty name is "".
  else if (const char* name = env("DTENSOR_JOB_NAME", false))
    job_name_ = name;
  else  // DTensor's default, also for a multi-client run of one client
    job_name_ = jobs.size() <= 1 ? "localhost" : "worker";
  spec_[job_name_] = std::move(jobs);
}

}  // namespace tpurt
