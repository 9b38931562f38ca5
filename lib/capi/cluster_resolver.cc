// C API: cluster resolution (the tpu_cluster_resolver_* part of tpurt/cluster.h).
#include "cluster/resolver.h"

#include <memory>

#include "capi/api.h"
#include "capi/handles.h"
#include "core/options.h"

using namespace tpurt;


namespace {

ClusterResolver& resolver_of(const tpu_cluster_resolver* handle) {
  require_not_null(handle, "resolver");
  return *handle->impl;
}

// NULL: the resolver's job.
std::string job_or_own(const ClusterResolver& r, const char* job) {
  return job ? std::string(job) : r.job_name();
}

const std::vector<std::string>& job_tasks(const ClusterResolver& r, const std::string& job) {
  const auto& spec = r.cluster_spec();
  auto it = spec.find(job);
  if (it == spec.end())
    fail(TPU_NOT_FOUND, "job '", job, "' is not in the cluster spec",
         r.is_local() ? " (the resolver is local: the spec is empty)" : "");
  return it->second;
}

}  // namespace

TPU_EXPORT tpu_status tpu_cluster_resolver_options_init(tpu_cluster_resolver_options* options,
                                                        size_t struct_size) {
  return guarded([&] {
    init_options(options, struct_size, sizeof(tpu_cluster_resolver_options),
                 "tpu_cluster_resolver_options");
    options->task_id = -1;  // as TPU_CLUSTER_RESOLVER_OPTIONS_INIT: no override
  });
}

TPU_EXPORT tpu_status tpu_cluster_resolver_create(const tpu_cluster_resolver_options* options,
                                                  tpu_cluster_resolver** out) {
  return guarded([&] {
    require_not_null(out, "out");
    auto handle = std::make_unique<tpu_cluster_resolver>();
    handle->impl = ClusterResolver::create(options);
    *out = handle.release();
  });
}

TPU_EXPORT tpu_status tpu_cluster_resolver_release(tpu_cluster_resolver* resolver) {
  return guarded([&] {
    require_live_or_null(resolver, "resolver");
    delete resolver;
  });
}

TPU_EXPORT tpu_status tpu_cluster_resolver_source(const tpu_cluster_resolver* resolver, int* out) {
  return guarded([&] {
    const ClusterResolver& r = resolver_of(resolver);
    require_not_null(out, "out");
    *out = r.source();
  });
}

TPU_EXPORT tpu_status tpu_cluster_resolver_tpu_name(const tpu_cluster_resolver* resolver,
                                                    char* out, size_t capacity, size_t* count) {
  return guarded(
      [&] { copy_string_out(resolver_of(resolver).tpu_name(), out, capacity, count, "the TPU name"); });
}

TPU_EXPORT tpu_status tpu_cluster_resolver_cluster_spec(const tpu_cluster_resolver* resolver,
                                                        char* out, size_t capacity,
                                                        size_t* count) {
  return guarded([&] {
    copy_string_out(resolver_of(resolver).cluster_spec_json(), out, capacity, count,
                    "the cluster spec");
  });
}

TPU_EXPORT tpu_status tpu_cluster_resolver_num_tasks(const tpu_cluster_resolver* resolver,
                                                     const char* job, int* out) {
  return guarded([&] {
    const ClusterResolver& r = resolver_of(resolver);
    require_not_null(out, "out");
    *out = count_tasks(job_tasks(r, job_or_own(r, job)));
  });
}

TPU_EXPORT tpu_status tpu_cluster_resolver_task_address(const tpu_cluster_resolver* resolver,
                                                        const char* job, int task_id, char* out,
                                                        size_t capacity, size_t* count) {
  return guarded([&] {
    const ClusterResolver& r = resolver_of(resolver);
    std::string name = job_or_own(r, job);
    const std::vector<std::string>& tasks = job_tasks(r, name);
    if (task_id < 0 || static_cast<size_t>(task_id) >= tasks.size() || tasks[task_id].empty())
      fail(TPU_NOT_FOUND, "job '", name, "' has no task ", task_id, " (it has ",
           count_tasks(tasks), " task(s))");
    copy_string_out(tasks[task_id], out, capacity, count, "the task address");
  });
}

TPU_EXPORT tpu_status tpu_cluster_resolver_master(const tpu_cluster_resolver* resolver,
                                                  const char* task_type, int task_id,
                                                  const char* rpc_layer, char* out,
                                                  size_t capacity, size_t* count) {
  return guarded([&] {
    copy_string_out(resolver_of(resolver).master(task_type, task_id, rpc_layer), out, capacity,
                    count, "the master");
  });
}

TPU_EXPORT tpu_status tpu_cluster_resolver_get_master(const tpu_cluster_resolver* resolver,
                                                      char* out, size_t capacity, size_t* count) {
  return guarded([&] {
    copy_string_out(resolver_of(resolver).master(nullptr, -1, nullptr), out, capacity, count,
                    "the master");
  });
}

TPU_EXPORT tpu_status tpu_cluster_resolver_job_name(const tpu_cluster_resolver* resolver,
                                                    char* out, size_t capacity, size_t* count) {
  return guarded(
      [&] { copy_string_out(resolver_of(resolver).job_name(), out, capacity, count, "the job name"); });
}

TPU_EXPORT tpu_status tpu_cluster_resolver_task_id(const tpu_cluster_resolver* resolver, int* out) {
  return guarded([&] {
    const ClusterResolver& r = resolver_of(resolver);
    require_not_null(out, "out");
    *out = r.task_id();
  });
}

TPU_EXPORT tpu_status tpu_cluster_resolver_rpc_layer(const tpu_cluster_resolver* resolver,
                                                     char* out, size_t capacity, size_t* count) {
  return guarded([&] {
    copy_string_out(resolver_of(resolver).rpc_layer(), out, capacity, count, "the rpc layer");
  });
}

TPU_EXPORT tpu_status tpu_cluster_resolver_environment(const tpu_cluster_resolver* resolver,
                                                       char* out, size_t capacity, size_t* count) {
  return guarded([&] {
    copy_string_out(resolver_of(resolver).environment(), out, capacity, count, "the environment");
  });
}

TPU_EXPORT tpu_status tpu_cluster_resolver_coordinator_address(
    const tpu_cluster_resolver* resolver, char* out, size_t capacity, size_t* count) {
  return guarded([&] {
    copy_string_out(resolver_of(resolver).coordinator_address(), out, capacity, count,
                    "the coordinator address");
  });
}

TPU_EXPORT tpu_status tpu_cluster_resolver_num_accelerators(const tpu_cluster_resolver* resolver,
                                                            int* out) {
  return guarded([&] {
    const ClusterResolver& r = resolver_of(resolver);
    require_not_null(out, "out");
    *out = r.num_accelerators();
  });
}

TPU_EXPORT tpu_status tpu_cluster_resolver_task_num_accelerators(
    const tpu_cluster_resolver* resolver, const char* task_type, int task_id, int* out) {
  return guarded([&] {
    const ClusterResolver& r = resolver_of(resolver);
    require_not_null(out, "out");
    *out = r.num_accelerators(task_type, task_id);
  });
}

TPU_EXPORT tpu_status tpu_cluster_resolver_enter(tpu_cluster_resolver* resolver) {
  return guarded([&] { resolver_of(resolver).enter(); });
}

TPU_EXPORT tpu_status tpu_cluster_resolver_exit(tpu_cluster_resolver* resolver) {
  return guarded([&] { resolver_of(resolver).exit(); });
}
