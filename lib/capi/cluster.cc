// C API: joining tasks into one system (tpu_initialize_tpu_system, DTensor's entry
// points), and the coordination service's key-value store and barriers.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>

#include "capi/api.h"
#include "capi/handles.h"
#include "cluster/resolver.h"
#include "core/env.h"
#include "core/options.h"
#include "runtime/system.h"

using namespace tpurt;

namespace {

int64_t timeout_field(int64_t value, const char* field, EnvVar fallback) {
  if (value < 0) invalid_argument("cluster_options->", field, " is ", value, "; it must be > 0, or 0 for the default");
  return value > 0 ? value : env_value(fallback);
}

ClusterSetup setup_from(const ClusterResolver& r, const tpu_cluster_options* options) {
  const tpu_cluster_options o = read_options(options, sizeof(tpu_cluster_options), "tpu_cluster_options");
  ClusterSetup setup;
  CoordinationConfig& c = setup.coordination;
  c.job = r.job_name();
  c.task_id = r.task_id();
  c.addresses = r.task_addresses();
  c.service_address = r.coordinator_address();
  const char* token = o.token ? o.token : std::getenv("TPURT_CLUSTER_TOKEN");
  c.token = token ? token : "";
  c.init_timeout_ms = timeout_field(o.init_timeout_ms, "init_timeout_ms", EnvVar::kInitTimeoutMs);
  c.heartbeat_interval_ms =
      timeout_field(o.heartbeat_interval_ms, "heartbeat_interval_ms", EnvVar::kHeartbeatIntervalMs);
  c.heartbeat_timeout_ms =
      timeout_field(o.heartbeat_timeout_ms, "heartbeat_timeout_ms", EnvVar::kHeartbeatTimeoutMs);
  c.shutdown_barrier_timeout_ms = timeout_field(
      o.shutdown_barrier_timeout_ms, "shutdown_barrier_timeout_ms", EnvVar::kShutdownBarrierTimeoutMs);
  if (c.heartbeat_interval_ms >= c.heartbeat_timeout_ms)
    invalid_argument("the heartbeat interval (", c.heartbeat_interval_ms,
                     " ms) must be shorter than the heartbeat timeout (", c.heartbeat_timeout_ms, " ms)");
  if (c.task_id < 0 || c.task_id >= static_cast<int>(c.addresses.size()))
    invalid_argument("this task (", c.task_id, ") is not one of the ", c.addresses.size(),
                     " tasks of job '", c.job, "'");
  return setup;
}

// A resolver with one task needs no network: it starts as tpu_system_init does,
// under the resolver's job name.
std::shared_ptr<System> start_from(const ClusterResolver& r, const tpu_system_options* system_options,
                                   const tpu_cluster_options* cluster_options) {
  if (!r.has_task())
    invalid_argument("TF_CONFIG names a cluster but no task.type (nor options->task_type): "
                     "tpurt needs to know which of its tasks this process is");
  // DTensor's job_name() is os.environ.get(DTENSOR_JOB_NAME, ...): set but empty, it
  // is "", which names no device.
  if (r.source() == TPU_RESOLVER_DTENSOR && r.job_name().empty())
    invalid_argument("DTENSOR_JOB_NAME is set but empty: DTensor's job_name() is then \"\", "
                     "which names no device; unset it for DTensor's default or give a name");
  if (r.is_local() || r.task_addresses().size() <= 1) {
    read_options(cluster_options, sizeof(tpu_cluster_options), "tpu_cluster_options");
    tpu_system_options o = read_options(system_options, kSystemOptionsMinSize, "tpu_system_options");
    std::string job = r.job_name();
    // The resolver's job names the devices; a local TPU resolver's ("worker", as
    // TensorFlow's TPUClusterResolver('local')) does not: its devices are localhost's.
    // DTensor's local mode names them after job_name(), as its local_devices() does.
    if (o.job_name == nullptr && (!r.is_local() || r.source() == TPU_RESOLVER_DTENSOR))
      o.job_name = job.c_str();
    return System::start(&o);
  }
  return System::start_cluster(system_options, setup_from(r, cluster_options));
}

void check_kv_read(const char* key, const void* out, size_t capacity, const size_t* count) {
  require_not_null(key, "key");
  require_not_null(count, "count");
  if (out == nullptr && capacity != 0) invalid_argument("argument 'out' is NULL but capacity is ", capacity);
}

System& live(tpu_system* handle) {
  System& s = system_of(handle);
  s.check_live();
  return s;
}

tpu_status initialize_accelerator(const char* device_type, int enable_coordination_service,
                                  int num_logical_cpu_devices, int experimental_reset_context,
                                  tpu_system** system, char* out, size_t capacity, size_t* count) {
  return guarded([&] {
    require_not_null(system, "system");
    require_not_null(count, "count");
    if (out == nullptr && capacity != 0)
      invalid_argument("argument 'device_type_out' is NULL but capacity is ", capacity);
    std::string type = device_type ? device_type : "TPU";
    for (char& ch : type) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (type != "CPU" && type != "GPU" && type != "TPU")
      invalid_argument("Unknown device_type ", device_type, ". Allowed values are CPU, GPU, or TPU");
    if (type == "GPU") invalid_argument("device_type GPU: tpurt runs on CPUs and has no GPU devices");
    if (num_logical_cpu_devices < 0)
      invalid_argument("num_logical_cpu_devices is ", num_logical_cpu_devices,
                       "; it must be > 0, or 0 for the default");
    if (experimental_reset_context) System::shutdown_live();
    tpu_cluster_resolver_options ro = TPU_CLUSTER_RESOLVER_OPTIONS_INIT;
    ro.source = std::getenv("DTENSOR_JOBS") ? TPU_RESOLVER_DTENSOR : TPU_RESOLVER_TPU;
    if (ro.source == TPU_RESOLVER_TPU) ro.tpu = "local";
    std::unique_ptr<ClusterResolver> r = ClusterResolver::create(&ro);
    if (!enable_coordination_service && !r->is_local() && r->task_addresses().size() > 1)
      invalid_argument("enable_coordination_service is 0, but DTENSOR_JOBS names ",
                       r->task_addresses().size(), " clients: tpurt joins them through the coordination service");
    tpu_system_options so = TPU_SYSTEM_OPTIONS_INIT;
    so.num_cores = num_logical_cpu_devices;
    so.device_type = type.c_str();
    std::shared_ptr<System> s = start_from(*r, &so, nullptr);
    try {
      copy_string_out(type, out, capacity, count, "the device type");
    } catch (...) {
      try {
        s->shutdown();
      } catch (...) {
      }
      throw;
    }
    *system = new tpu_system{std::move(s)};
    (*system)->impl->set_c_handle(*system);
  });
}

}  // namespace

TPU_EXPORT tpu_status tpu_cluster_options_init(tpu_cluster_options* options, size_t struct_size) {
  return guarded([&] {
    init_options(options, struct_size, sizeof(tpu_cluster_options), "tpu_cluster_options");
  });
}

TPU_EXPORT tpu_status tpu_initialize_tpu_system(const tpu_cluster_resolver* resolver,
                                                const tpu_system_options* system_options,
                                                const tpu_cluster_options* cluster_options,
                                                tpu_system** system, tpu_topology** topology) {
  return guarded([&] {
    require_not_null(system, "system");
    std::unique_ptr<ClusterResolver> own;
    const ClusterResolver* r;
    if (resolver) {
      require_not_null(resolver, "resolver");
      r = resolver->impl.get();
    } else {
      own = ClusterResolver::create(nullptr);
      r = own.get();
    }
    std::shared_ptr<System> s = start_from(*r, system_options, cluster_options);
    std::unique_ptr<tpu_topology> t;
    if (topology) t.reset(new tpu_topology{s->topology()});
    *system = new tpu_system{std::move(s)};
    (*system)->impl->set_c_handle(*system);
    if (topology) *topology = t.release();
  });
}

TPU_EXPORT tpu_status tpu_initialize_accelerator_system(const char* device_type,
                                                        int enable_coordination_service,
                                                        int num_logical_cpu_devices,
                                                        int experimental_reset_context,
                                                        tpu_system** system, char* device_type_out,
                                                        size_t capacity, size_t* count) {
  return initialize_accelerator(device_type, enable_coordination_service, num_logical_cpu_devices,
                                experimental_reset_context, system, device_type_out, capacity, count);
}

TPU_EXPORT tpu_status tpu_initialize_multi_client(const char* device_type,
                                                  int enable_coordination_service,
                                                  int num_logical_cpu_devices,
                                                  int experimental_reset_context, tpu_system** system,
                                                  char* device_type_out, size_t capacity,
                                                  size_t* count) {
  return initialize_accelerator(device_type, enable_coordination_service, num_logical_cpu_devices,
                                experimental_reset_context, system, device_type_out, capacity, count);
}

TPU_EXPORT tpu_status tpu_shutdown_accelerator_system(tpu_system* system) {
  return guarded([&] {
    System& s = system_of(system);
    if (s.is_shut_down()) fail(TPU_FAILED_PRECONDITION, "Accelerator system is not initialized.");
    if (s.num_tasks() > 1)
      fail(TPU_FAILED_PRECONDITION,
           "Shutting down accelerator system under multi-client mode is not supported (as in "
           "DTensor); every task calls tpu_system_shutdown, which waits at the shutdown barrier");
    s.shutdown();
  });
}

TPU_EXPORT tpu_status tpu_system_num_tasks(const tpu_system* system, int* out) {
  return guarded([&] {
    const System& s = system_of(system);
    require_not_null(out, "out");
    *out = s.num_tasks();
  });
}

TPU_EXPORT tpu_status tpu_system_task_id(const tpu_system* system, int* out) {
  return guarded([&] {
    const System& s = system_of(system);
    require_not_null(out, "out");
    *out = s.task_id();
  });
}

TPU_EXPORT tpu_status tpu_kv_set(tpu_system* system, const char* key, const void* value,
                                 size_t value_len) {
  return guarded([&] {
    System& s = live(system);
    require_not_null(key, "key");
    if (value == nullptr && value_len != 0)
      invalid_argument("argument 'value' is NULL but value_len is ", value_len);
    s.kv_set(key, std::string(static_cast<const char*>(value), value ? value_len : 0));
  });
}

TPU_EXPORT tpu_status tpu_kv_get(tpu_system* system, const char* key, int64_t timeout_ms, void* out,
                                 size_t capacity, size_t* count) {
  return guarded([&] {
    System& s = live(system);
    check_kv_read(key, out, capacity, count);
    copy_bytes_out(s.kv_get(key, timeout_ms), out, capacity, count, "the value");
  });
}

TPU_EXPORT tpu_status tpu_kv_try_get(tpu_system* system, const char* key, void* out,
                                     size_t capacity, size_t* count) {
  return guarded([&] {
    System& s = live(system);
    check_kv_read(key, out, capacity, count);
    std::string value;
    if (!s.kv_try_get(key, &value)) fail(TPU_NOT_FOUND, "Config key ", key, " not found.");
    copy_bytes_out(value, out, capacity, count, "the value");
  });
}

TPU_EXPORT tpu_status tpu_kv_delete(tpu_system* system, const char* key) {
  return guarded([&] {
    System& s = live(system);
    require_not_null(key, "key");
    s.kv_delete(key);
  });
}

TPU_EXPORT tpu_status tpu_wait_at_barrier(tpu_system* system, const char* id, int64_t timeout_ms,
                                          const int32_t* tasks, int num_tasks) {
  return guarded([&] {
    System& s = live(system);
    require_not_null(id, "id");
    if (num_tasks < 0) invalid_argument("num_tasks is ", num_tasks, "; it must be >= 0");
    if (num_tasks > 0) require_not_null(tasks, "tasks");
    s.barrier(id, timeout_ms, std::vector<int32_t>(tasks, tasks + num_tasks));
  });
}
