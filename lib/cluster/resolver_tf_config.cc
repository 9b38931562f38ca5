#include "cluster/resolver.h"

#include <jansson.h>

#include <cstdint>

#include "cluster/resolver_parse.h"
#include "core/status.h"

namespace tpurt {

using namespace resolver;

// ---- TFConfigClusterResolver -------------------------------------------------------

namespace {

// Checked before a sparse job's vector grows, so that no input allocates past the bound.
[[noreturn]] void too_many_slots() {
  invalid_argument("TF_CONFIG's cluster has more than ", kMaxTaskSlots,
                   " task slots (a sparse job has as many as its largest index + 1)");
}

}  // namespace

void ClusterResolver::resolve_tf_config(const tpu_cluster_resolver_options& o, const char* text) {
  source_ = TPU_RESOLVER_TF_CONFIG;
  tpu_name_ = "TF_CONFIG";
  rpc_layer_.clear();
  JsonRef root(nullptr);
  if (text != nullptr) {
    json_error_t error;
    root.p = json_loads(text, 0, &error);
    if (root.p == nullptr)
      invalid_argument("TF_CONFIG is not valid JSON: ", error.text, " at line ", error.line,
                       " column ", error.column);
    if (!json_is_object(root.p))
      invalid_argument("TF_CONFIG is ", json_type_name(root.p), "; expected a JSON object");
  }
  const json_t* cluster = root.p ? json_object_get(root.p, "cluster") : nullptr;
  const json_t* task = root.p ? json_object_get(root.p, "task") : nullptr;
  const json_t* rpc = root.p ? json_object_get(root.p, "rpc_layer") : nullptr;
  const json_t* master = root.p ? json_object_get(root.p, "session_master") : nullptr;

  if (cluster != nullptr && !json_is_null(cluster)) {
    if (!json_is_object(cluster))
      invalid_argument("TF_CONFIG's \"cluster\" is ", json_type_name(cluster),
                       "; expected an object of job name -> list of host:port");
    const char* job;
    json_t* tasks;
    size_t slots = 0;
    json_object_foreach(const_cast<json_t*>(cluster), job, tasks) {
      std::string where = str_cat("TF_CONFIG's cluster.", job);
      std::vector<std::string> addresses;
      if (json_is_array(tasks)) {
        size_t i;
        json_t* a;
        json_array_foreach(tasks, i, a) {
          if (!json_is_string(a))
            invalid_argument(where, "[", i, "] is ", json_type_name(a), "; expected a \"host:port\" string");
          addresses.push_back(json_string_of(a));
          check_address(addresses.back(), str_cat(where, "[", i, "]"));
        }
      } else if (json_is_object(tasks)) {
        // A sparse job: {"index": "host:port"}.
        const char* key;
        json_t* a;
        json_object_foreach(tasks, key, a) {
          int64_t index;
          if (!parse_int(key, &index) || index < 0 || index > kMaxSparseIndex ||
              key[0] == '+' || key[0] == '-')
            invalid_argument(where, " has task index '", key, "'; expected a decimal integer in [0, ",
                             kMaxSparseIndex, "]");
          if (!json_is_string(a))
            invalid_argument(where, ".", key, " is ", json_type_name(a), "; expected a \"host:port\" string");
          if (slots + index + 1 > kMaxTaskSlots) too_many_slots();
          if (addresses.size() <= static_cast<size_t>(index)) addresses.resize(index + 1);
          if (!addresses[index].empty())
            invalid_argument(where, " names task ", index, " twice");
          addresses[index] = json_string_of(a);
          check_address(addresses[index], str_cat(where, ".", key));
        }
        sparse_jobs_.insert(job);
      } else {
        invalid_argument(where, " is ", json_type_name(tasks),
                         "; expected a list of \"host:port\" or an object of index -> \"host:port\"");
      }
      slots += addresses.size();
      if (slots > kMaxTaskSlots) too_many_slots();
      check_no_duplicates(addresses, where);
      spec_[job] = std::move(addresses);
    }
  }

  bool has_type = false, has_index = false;
  int64_t index = 0;
  if (task != nullptr && !json_is_null(task)) {
    if (!json_is_object(task))
      invalid_argument("TF_CONFIG's \"task\" is ", json_type_name(task), "; expected an object");
    const json_t* type = json_object_get(task, "type");
    if (type != nullptr && !json_is_null(type)) {
      if (!json_is_string(type))
        invalid_argument("TF_CONFIG's task.type is ", json_type_name(type), "; expected a string");
      job_name_ = json_string_of(type);
      has_type = true;
    }
    const json_t* idx = json_object_get(task, "index");
    if (idx != nullptr && !json_is_null(idx)) {
      if (!json_is_integer(idx))
        invalid_argument("TF_CONFIG's task.index is ", json_type_name(idx), "; expected an integer");
      index = json_integer_value(idx);
      has_index = true;
    }
  }
  if (rpc != nullptr && !json_is_null(rpc)) {
    if (!json_is_string(rpc))
      invalid_argument("TF_CONFIG's rpc_layer is ", json_type_name(rpc), "; expected a string");
    rpc_layer_ = json_string_of(rpc);
  }
  if (master != nullptr && !json_is_null(master)) {
    if (!json_is_string(master))
      invalid_argument("TF_CONFIG's session_master is ", json_type_name(master),
                       "; expected a string");
    session_master_ = json_string_of(master);
    has_session_master_ = true;
  }

  // The constructor's arguments win over TF_CONFIG (task_id 0 counts only together
  // with task_type, since zeroed options carry 0).
  if (o.task_type != nullptr) {
    job_name_ = o.task_type;
    has_type = true;
  }
  if (o.task_id > 0 || (o.task_id == 0 && o.task_type != nullptr)) {
    index = o.task_id;
    has_index = true;
  }
  if (o.rpc_layer != nullptr) rpc_layer_ = o.rpc_layer;

  if (spec_.empty()) {
    // No cluster: this process alone, as TensorFlow's empty ClusterSpec.
    local_ = true;
    task_id_ = index >= 0 && index <= INT32_MAX ? static_cast<int>(index) : 0;
    return;
  }
  // As TensorFlow: a cluster without task.type resolves, and master() is "" (this
  // process is none of the cluster's tasks: joining it fails, see has_task()).
  // TensorFlow lets task.index default to None; a missing index is task 0 here.
  has_task_ = has_type;
  task_id_ = index >= 0 && index <= INT32_MAX ? static_cast<int>(index) : 0;
  if (!has_type) return;
  auto job = spec_.find(job_name_);
  if (job == spec_.end())
    invalid_argument("TF_CONFIG's task.type '", job_name_, "' is not a job of its cluster");
  const std::vector<std::string>& tasks = job->second;
  if (index < 0 || index >= static_cast<int64_t>(tasks.size()) || tasks[index].empty())
    invalid_argument("task index ", index, " of TF_CONFIG's task (", job_name_,
                     ") is out of range: job '", job_name_, "' has ", count_tasks(tasks),
                     " task(s)", has_index ? "" : " (task.index was not given: 0)");
  task_id_ = static_cast<int>(index);
}

}  // namespace tpurt
