// C API: the TPU system.
#include <algorithm>
#include <cstring>
#include <memory>

#include "capi/api.h"
#include "runtime/system.h"

using namespace tpurt;

namespace {

tpu_system* start_system(const tpu_system_options* options) {
  return new tpu_system{System::start(options)};
}

const System& live_system(const tpu_system* handle) {
  const System& s = system_of(handle);
  s.check_live();
  return s;
}

}  // namespace

TPU_EXPORT tpu_status tpu_system_options_init(tpu_system_options* options, size_t struct_size) {
  return guarded([&] {
    require_not_null(options, "options");
    if (struct_size < kSystemOptionsMinSize)
      invalid_argument("struct_size is ", struct_size, " but tpu_system_options has ",
                       kSystemOptionsMinSize, " bytes");
    const tpu_system_options defaults = TPU_SYSTEM_OPTIONS_INIT;
    std::memset(static_cast<void*>(options), 0, struct_size);  // a newer caller's tail too
    std::memcpy(static_cast<void*>(options), &defaults, std::min(struct_size, sizeof defaults));
    options->struct_size = struct_size;
  });
}

TPU_EXPORT tpu_status tpu_system_init(const tpu_system_options* options, tpu_system** out) {
  return guarded([&] {
    require_not_null(out, "out");
    *out = start_system(options);
  });
}

TPU_EXPORT tpu_status tpu_initialize_system(const tpu_system_options* options, tpu_system** out,
                                            void* buf, size_t cap, size_t* len) {
  return guarded([&] {
    require_not_null(out, "out");
    require_not_null(len, "len");
    if (buf == nullptr && cap != 0) invalid_argument("argument 'buf' is NULL but cap is ", cap);
    tpu_system* system = start_system(options);
    try {
      copy_bytes_out(system->impl->serialized_topology(), buf, cap, len, "the serialized topology");
    } catch (...) {  // nothing is started unless the call succeeds
      system->impl->shutdown();
      delete system;
      throw;
    }
    *out = system;
  });
}

TPU_EXPORT tpu_status tpu_system_shutdown(tpu_system* system) {
  return guarded([&] { system_of(system).shutdown(); });
}

TPU_EXPORT tpu_status tpu_system_release(tpu_system* system) {
  if (system == nullptr) return TPU_OK;
  return guarded([&] {
    std::unique_ptr<tpu_system> owned(system);  // freed even when shutdown reports
    owned->impl->shutdown();
  });
}

TPU_EXPORT tpu_status tpu_system_num_cores(const tpu_system* system, int* out) {
  return guarded([&] {
    const System& s = live_system(system);
    require_not_null(out, "out");
    *out = s.num_cores();
  });
}

TPU_EXPORT tpu_status tpu_system_topology(const tpu_system* system, tpu_topology** out) {
  return guarded([&] {
    const System& s = live_system(system);
    require_not_null(out, "out");
    *out = s.new_topology();
  });
}

TPU_EXPORT tpu_status tpu_system_serialized_topology(const tpu_system* system, void* buf,
                                                     size_t cap, size_t* len) {
  return guarded([&] {
    copy_bytes_out(live_system(system).serialized_topology(), buf, cap, len,
                   "the serialized topology");
  });
}

TPU_EXPORT tpu_status tpu_system_job_name(const tpu_system* system, char* buf, size_t cap,
                                          size_t* len) {
  return guarded([&] {
    copy_string_out(live_system(system).config().job_name, buf, cap, len, "the job name");
  });
}

TPU_EXPORT tpu_status tpu_system_device_type(const tpu_system* system, char* buf, size_t cap,
                                             size_t* len) {
  return guarded([&] {
    copy_string_out(live_system(system).config().device_type, buf, cap, len, "the device type");
  });
}

TPU_EXPORT tpu_status tpu_system_embedding_config(const tpu_system* system, void* buf,
                                                  size_t cap, size_t* len) {
  return guarded([&] {
    copy_bytes_out(live_system(system).config().embedding_config, buf, cap, len,
                   "the embedding configuration");
  });
}

TPU_EXPORT tpu_status tpu_system_default_device_assignment(const tpu_system* system,
                                                           int num_replicas,
                                                           tpu_device_assignment** out) {
  return guarded([&] {
    const System& s = live_system(system);
    require_not_null(out, "out");
    s.check_num_replicas(num_replicas, nullptr);
    // Replica r on device r of task 0.
    std::vector<int32_t> coords(static_cast<size_t>(num_replicas) * TPU_MESH_RANK);
    tpu_topology* topology = s.new_topology();
    tpu_status st = TPU_OK;
    for (int r = 0; r < num_replicas && st == TPU_OK; ++r)
      st = tpu_topology_device_coordinates(topology, 0, r, &coords[static_cast<size_t>(r) * TPU_MESH_RANK]);
    if (st == TPU_OK) st = tpu_device_assignment_create(topology, coords.data(), num_replicas, 1, out);
    tpu_topology_release(topology);
    throw_if_failed(st);
  });
}

TPU_EXPORT tpu_status tpu_system_is_closed(const tpu_system* system, int* out) {
  return guarded([&] {
    const System& s = system_of(system);
    require_not_null(out, "out");
    *out = s.is_closed() ? 1 : 0;
  });
}
