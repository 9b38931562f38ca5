#include "cluster/resolver.h"

#include <jansson.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cluster/resolver_parse.h"
#include "core/env.h"
#include "core/options.h"
#include "core/status.h"

namespace tpurt {

using namespace resolver;

int count_tasks(const std::vector<std::string>& addresses) {
  return static_cast<int>(
      std::count_if(addresses.begin(), addresses.end(), [](const std::string& a) {
        return !a.empty();
      }));
}

std::unique_ptr<ClusterResolver> ClusterResolver::create(
    const tpu_cluster_resolver_options* options) {
  // Every field exists since the first release: the whole struct is the minimum.
  const tpu_cluster_resolver_options o = read_options(
      options, sizeof(tpu_cluster_resolver_options), "tpu_cluster_resolver_options");
  if (o.source < TPU_RESOLVER_AUTO || o.source > TPU_RESOLVER_OPENMPI)
    invalid_argument("options->source is ", o.source,
                     "; expected a tpu_resolver_source (0 to 5)");
  if (o.task_id < -1) invalid_argument("options->task_id is ", o.task_id, "; expected >= -1");
  if (o.port_base < 0 || o.port_base > 65535)
    invalid_argument("options->port_base is ", o.port_base, "; expected 0 (8888) to 65535");
  if (o.job_name != nullptr && *o.job_name == '\0')
    invalid_argument("options->job_name is \"\"; use NULL for the source's default");
  if (o.coordinator_name != nullptr && *o.coordinator_name == '\0')
    invalid_argument("options->coordinator_name is \"\"; use NULL for none");
  std::unique_ptr<ClusterResolver> r(new ClusterResolver());
  r->environment_ = o.environment ? o.environment : "";
  r->resolve(o);
  r->finish(o);
  return r;
}

void ClusterResolver::resolve(const tpu_cluster_resolver_options& o) {
  switch (o.source) {
    case TPU_RESOLVER_TPU: return resolve_tpu(o, true);
    case TPU_RESOLVER_TF_CONFIG: return resolve_tf_config(o, env("TF_CONFIG"));
    case TPU_RESOLVER_DTENSOR: return resolve_dtensor(o);
    case TPU_RESOLVER_SLURM: return resolve_slurm(o);
    case TPU_RESOLVER_OPENMPI: return resolve_openmpi(o);
    default: break;
  }
  // AUTO, in the header's order. A DTENSOR_JOBS set to "" still counts: DTensor's
  // local mode.
  if (env("DTENSOR_JOBS", false) != nullptr) return resolve_dtensor(o);
  if (const char* tf_config = env("TF_CONFIG")) {
    // Parsed here to see whether it names a cluster; a malformed one is reported,
    // not skipped, since the user meant it.
    resolve_tf_config(o, tf_config);
    if (!spec_.empty()) return;
    // No cluster: forget what it set and go on with the other sources.
    sparse_jobs_.clear();
    has_task_ = true;
    has_session_master_ = false;
    session_master_.clear();
    job_name_.clear();
    rpc_layer_.clear();
    tpu_name_.clear();
    task_id_ = 0;
    local_ = false;
  }
  if (env("SLURM_JOB_ID") != nullptr) return resolve_slurm(o);
  if (env("OMPI_COMM_WORLD_SIZE") != nullptr) return resolve_openmpi(o);
  resolve_tpu(o, false);
}

// ---- TPUClusterResolver ----------------------------------------------------------

void ClusterResolver::resolve_tpu(const tpu_cluster_resolver_options& o, bool required) {
  source_ = TPU_RESOLVER_TPU;
  job_name_ = o.job_name ? o.job_name : "worker";
  task_id_ = 0;
  rpc_layer_ = "grpc";  // master() always says grpc:// for this source
  std::string where = "options->tpu";
  std::string name = o.tpu ? o.tpu : "";
  if (name.empty()) {
    for (const char* var : {"KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", "TPU_NAME"}) {
      if (const char* v = env(var)) {
        name = v;
        where = var;
        break;
      }
    }
  }
  if (name.empty()) {
    // TensorFlow's words for an explicit TPU resolver; AUTO with nothing found means
    // this process alone.
    if (required)
      invalid_argument("Please provide a TPU Name to connect to. (options->tpu, "
                       "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS and TPU_NAME are all unset; "
                       "use \"local\" or grpc://host:port)");
    name = "local";
  }
  tpu_name_ = name;
  if (name == "local") {
    local_ = true;
    return;
  }
  if (!starts_with(name, kGrpcPrefix))
    fail(TPU_NOT_FOUND, "TPU '", name, "' (from ", where,
         ") is a Cloud TPU name; tpurt has no Cloud TPU API to look it up. Tried "
         "options->tpu, KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS, TPU_NAME; name the workers as "
         "grpc://host:port[,grpc://host:port...] or use \"local\"");
  std::vector<std::string> endpoints;
  for (std::string item : split(name, ',')) {
    if (starts_with(item, kGrpcPrefix)) item.erase(0, std::strlen(kGrpcPrefix));
    endpoints.push_back(with_default_port(item, kDefaultTpuPort, where));
  }
  check_no_duplicates(endpoints, where);
  spec_[job_name_] = std::move(endpoints);
}

// ---- Common to every source --------------------------------------------------------

void ClusterResolver::finish(const tpu_cluster_resolver_options& o) {
  if (o.coordinator_name != nullptr && o.coordinator_address == nullptr)
    invalid_argument("options->coordinator_name '", o.coordinator_name,
                     "' needs options->coordinator_address: tpurt starts no server to "
                     "stand in for it, as TensorFlow does");
  if (o.coordinator_address != nullptr)
    check_address(o.coordinator_address, "options->coordinator_address");
  // Local means no network: TensorFlow's 'local' has an empty ClusterSpec whatever
  // the coordinator options say.
  // Job names go into cluster_spec_json(), and so must be UTF-8 (jansson checks).
  for (const auto& job : spec_) {
    json_t* name = json_string(job.first.c_str());
    if (name == nullptr) invalid_argument("job name '", job.first, "' is not valid UTF-8");
    json_decref(name);
  }
  if (o.coordinator_name != nullptr) {
    json_t* name = json_string(o.coordinator_name);
    if (name == nullptr)
      invalid_argument("options->coordinator_name '", o.coordinator_name, "' is not valid UTF-8");
    json_decref(name);
  }
  if (local_) {
    spec_.clear();
    coordinator_address_.clear();
    return;
  }
  if (o.coordinator_address != nullptr) coordinator_address_ = o.coordinator_address;
  if (o.coordinator_name != nullptr) {
    if (spec_.count(o.coordinator_name))
      invalid_argument("options->coordinator_name '", o.coordinator_name,
                       "' is already a job of the cluster");
    spec_[o.coordinator_name] = {o.coordinator_address};
  }
  if (coordinator_address_.empty()) {
    // Task 0 of the leader job: the chief's in TF_CONFIG (else the workers', else the
    // first job's: every task must pick the same), otherwise this resolver's job.
    const std::vector<std::string>* leader = nullptr;
    if (source_ == TPU_RESOLVER_TF_CONFIG) {
      for (const char* job : {"chief", "worker"})
        if (!leader && spec_.count(job) && count_tasks(spec_.at(job)) > 0) leader = &spec_.at(job);
      for (const auto& job : spec_)
        if (!leader && count_tasks(job.second) > 0) leader = &job.second;
    } else {
      leader = &spec_.at(job_name_);
    }
    if (leader != nullptr)
      for (const std::string& a : *leader)
        if (!a.empty()) {
          coordinator_address_ = a;
          break;
        }
  }
}

tpu_resolver_source ClusterResolver::source() const { return source_; }
bool ClusterResolver::is_local() const { return local_; }
const std::string& ClusterResolver::tpu_name() const { return tpu_name_; }
const std::string& ClusterResolver::job_name() const { return job_name_; }
int ClusterResolver::task_id() const { return task_id_; }
const std::string& ClusterResolver::rpc_layer() const { return rpc_layer_; }
const std::string& ClusterResolver::environment() const { return environment_; }
const std::map<std::string, std::vector<std::string>>& ClusterResolver::cluster_spec() const {
  return spec_;
}

const std::vector<std::string>& ClusterResolver::task_addresses() const {
  static const std::vector<std::string> kNone;
  auto job = spec_.find(job_name_);
  return job == spec_.end() ? kNone : job->second;
}

std::string ClusterResolver::coordinator_address() const { return coordinator_address_; }

// master()'s lookup, in the words of TensorFlow's ClusterSpec.task_address, whose
// ValueError is TPU_INVALID_ARGUMENT here; task_address() and num_tasks() keep
// TPU_NOT_FOUND.
const std::string& ClusterResolver::master_address(const std::string& job, int task) const {
  auto it = spec_.find(job);
  if (it == spec_.end()) {
    std::string jobs;
    for (const auto& j : spec_) jobs += (jobs.empty() ? "'" : ", '") + j.first + "'";
    invalid_argument("No such job in cluster: '", job, "' (",
                     jobs.empty() ? std::string("it has no jobs") : "jobs: " + jobs, ")");
  }
  const std::vector<std::string>& tasks = it->second;
  if (task < 0 || static_cast<size_t>(task) >= tasks.size() || tasks[task].empty())
    invalid_argument("No task with index ", task, " in job '", job, "' (it has ",
                     count_tasks(tasks), " task(s))");
  return tasks[task];
}

std::string ClusterResolver::master(const char* task_type, int task_id,
                                    const char* rpc_layer) const {
  if (task_id < -1) invalid_argument("task_id is ", task_id, "; expected >= 0, or -1 for the resolver's own");
  // TensorFlow looks at session_master first, even without a cluster.
  if (source_ == TPU_RESOLVER_TF_CONFIG && has_session_master_) return session_master_;
  if (local_) return "";
  // TensorFlow's master() is "" while the task type is None.
  if (task_type == nullptr && !has_task_) return "";
  std::string type = task_type ? task_type : job_name_;
  int id = task_id >= 0 ? task_id : task_id_;
  switch (source_) {
    case TPU_RESOLVER_TPU:  // rpc_layer is ignored: always grpc
      return kGrpcPrefix + master_address(type, id);
    case TPU_RESOLVER_TF_CONFIG:
      if (spec_.size() == 1 && count_tasks(spec_.begin()->second) == 1) return "";
      break;
    default:
      break;
  }
  return format_master_url(master_address(type, id), rpc_layer ? rpc_layer : rpc_layer_);
}

std::string ClusterResolver::cluster_spec_json() const {
  JsonRef root(json_object());
  if (root.p == nullptr) throw std::bad_alloc();
  for (const auto& job : spec_) {
    json_t* tasks;
    if (sparse_jobs_.count(job.first)) {
      tasks = json_object();
      for (size_t i = 0; tasks && i < job.second.size(); ++i)
        if (!job.second[i].empty())
          json_object_set_new(tasks, std::to_string(i).c_str(),
                              json_stringn(job.second[i].data(), job.second[i].size()));
    } else {
      tasks = json_array();
      for (size_t i = 0; tasks && i < job.second.size(); ++i)
        json_array_append_new(tasks, json_stringn(job.second[i].data(), job.second[i].size()));
    }
    if (tasks == nullptr || json_object_set_new(root.p, job.first.c_str(), tasks) != 0)
      throw std::bad_alloc();
  }
  char* text = json_dumps(root.p, JSON_COMPACT | JSON_SORT_KEYS);
  if (text == nullptr) throw std::bad_alloc();
  std::string out(text);
  std::free(text);
  return out;
}

int ClusterResolver::num_accelerators() const {
  // The cores tpu_system_init would give this task: TPURT_NUM_CORES, else its default.
  return static_cast<int>(env_value(EnvVar::kNumCores));
}

int ClusterResolver::num_accelerators(const char* task_type, int task_id) const {
  if (task_id < -1)
    invalid_argument("task_id is ", task_id, "; expected >= 0, or -1 for the resolver's own");
  // The task must be one of the spec's, as TensorFlow's ClusterResolver.num_accelerators
  // finds it through master(task_type, task_id). Every task of a system has the same
  // cores (tpu_initialize_tpu_system refuses others, as TPUClusterResolver's
  // _verify_and_return_same_core_count), so the answer is this task's count.
  if (!local_ && (task_type != nullptr || task_id >= 0) &&
      (task_type != nullptr || has_task_))
    master_address(task_type ? task_type : job_name_, task_id >= 0 ? task_id : task_id_);
  return num_accelerators();
}

void ClusterResolver::enter() {
  std::lock_guard<std::mutex> lock(mu_);
  ++entered_;
}

void ClusterResolver::exit() {
  std::lock_guard<std::mutex> lock(mu_);
  if (entered_ == 0)
    fail(TPU_FAILED_PRECONDITION, "cluster resolver exit without a matching enter");
  --entered_;
}

}  // namespace tpurt
