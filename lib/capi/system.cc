// C API: the TPU system.
#include <algorithm>
#include <cstring>
#include <memory>

#include "capi/api.h"
#include "capi/handles.h"
#include "core/options.h"
#include "runtime/system.h"

using namespace tpurt;

namespace {

tpu_system* start_system(const tpu_system_options* options) {
  tpu_system* handle = new tpu_system{System::start(options)};
  handle->impl->set_c_handle(handle);
  return handle;
}

const System& live_system(const tpu_system* handle) {
  const System& s = system_of(handle);
  s.check_live();
  return s;
}

}  // namespace

TPU_EXPORT tpu_status tpu_system_options_init(tpu_system_options* options, size_t struct_size) {
  return guarded(
      [&] { init_options(options, struct_size, kSystemOptionsMinSize, "tpu_system_options"); });
}

TPU_EXPORT tpu_status tpu_system_init(const tpu_system_options* options, tpu_system** out) {
  return guarded([&] {
    require_not_null(out, "out");
    *out = start_system(options);
  });
}

TPU_EXPORT tpu_status tpu_initialize_system(const tpu_system_options* options, tpu_system** out,
                                            void* topology, size_t capacity, size_t* count) {
  return guarded([&] {
    require_not_null(out, "out");
    require_not_null(count, "count");
    if (topology == nullptr && capacity != 0)
      invalid_argument("argument 'topology' is NULL but capacity is ", capacity);
    tpu_system* system = start_system(options);
    try {
      copy_bytes_out(system->impl->serialized_topology(), topology, capacity, count,
                     "the serialized topology");
    } catch (...) {  // nothing is started unless the call succeeds
      system->impl->shutdown();
      system->impl->set_c_handle(nullptr);
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
    System& s = system_of(system);
    // Refused before anything is freed: the step running this computation uses the
    // system, which cannot shut down under it, and a system left running without its
    // handle could never be shut down (every later tpu_system_init: ALREADY_EXISTS).
    if (in_user_code())
      fail(TPU_FAILED_PRECONDITION,
           "tpu_system_release must not be called from inside a computation: the running step "
           "uses the system; the handle stays valid, release it after the step returns");
    std::unique_ptr<tpu_system> owned(system);  // freed even when shutdown reports
    struct Forget {  // the runtime's pointer back to the handle goes before the handle
      System& s;
      ~Forget() { s.set_c_handle(nullptr); }
    } forget{s};
    s.shutdown();
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
    *out = new tpu_topology{s.topology()};
  });
}

TPU_EXPORT tpu_status tpu_system_serialized_topology(const tpu_system* system, void* out,
                                                     size_t capacity, size_t* count) {
  return guarded([&] {
    copy_bytes_out(live_system(system).serialized_topology(), out, capacity, count,
                   "the serialized topology");
  });
}

TPU_EXPORT tpu_status tpu_system_job_name(const tpu_system* system, char* out, size_t capacity,
                                          size_t* count) {
  return guarded([&] {
    copy_string_out(live_system(system).config().job_name, out, capacity, count, "the job name");
  });
}

TPU_EXPORT tpu_status tpu_system_device_type(const tpu_system* system, char* out, size_t capacity,
                                             size_t* count) {
  return guarded([&] {
    copy_string_out(live_system(system).config().device_type, out, capacity, count, "the device type");
  });
}

TPU_EXPORT tpu_status tpu_system_transport(const tpu_system* system, char* out, size_t capacity,
                                           size_t* count) {
  return guarded([&] {
    copy_string_out(live_system(system).transport_name(), out, capacity, count, "the transport's name");
  });
}

TPU_EXPORT tpu_status tpu_system_transport_reason(const tpu_system* system, char* out,
                                                  size_t capacity, size_t* count) {
  return guarded([&] {
    copy_string_out(live_system(system).transport_reason(), out, capacity, count,
                    "the reason for the transport");
  });
}

TPU_EXPORT tpu_status tpu_system_embedding_config(const tpu_system* system, void* out,
                                                  size_t capacity, size_t* count) {
  return guarded([&] {
    copy_bytes_out(live_system(system).config().embedding_config, out, capacity, count,
                   "the embedding configuration");
  });
}

TPU_EXPORT tpu_status tpu_system_default_device_assignment(const tpu_system* system,
                                                           int num_replicas,
                                                           tpu_device_assignment** out) {
  return guarded([&] {
    const System& s = live_system(system);
    require_not_null(out, "out");
    *out = new tpu_device_assignment{s.default_device_assignment(num_replicas)};
  });
}

TPU_EXPORT tpu_status tpu_system_is_closed(const tpu_system* system, int* out) {
  return guarded([&] {
    const System& s = system_of(system);
    require_not_null(out, "out");
    *out = s.is_closed() ? 1 : 0;
  });
}
