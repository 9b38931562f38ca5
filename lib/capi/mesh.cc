// C API: named meshes. SCAFFOLDING: every function is TPU_UNIMPLEMENTED until the
// mesh lands (issue 19); the symbols exist so the bindings can be written against them.
#include "capi/api.h"

using namespace tpurt;

namespace {
tpu_status not_yet() { return set_last_error(TPU_UNIMPLEMENTED, "tpu_mesh_* is not built yet"); }
}  // namespace

TPU_EXPORT tpu_status tpu_mesh_create(const tpu_device_assignment*, const char* const*,
                                      const int64_t*, int, tpu_mesh**) { return not_yet(); }
TPU_EXPORT tpu_status tpu_mesh_create_from_topology(const tpu_topology*, const char* const*,
                                                    const int64_t*, int, tpu_mesh**) { return not_yet(); }
TPU_EXPORT tpu_status tpu_mesh_release(tpu_mesh*) { return TPU_OK; }
TPU_EXPORT tpu_status tpu_mesh_device_assignment(const tpu_mesh*, tpu_device_assignment**) { return not_yet(); }
TPU_EXPORT tpu_status tpu_mesh_num_axes(const tpu_mesh*, int*) { return not_yet(); }
TPU_EXPORT tpu_status tpu_mesh_size(const tpu_mesh*, int64_t*) { return not_yet(); }
TPU_EXPORT tpu_status tpu_mesh_axis_name(const tpu_mesh*, int, char*, size_t, size_t*) { return not_yet(); }
TPU_EXPORT tpu_status tpu_mesh_axis_size(const tpu_mesh*, int, int64_t*) { return not_yet(); }
TPU_EXPORT tpu_status tpu_mesh_axis_index(const tpu_mesh*, const char*, int*) { return not_yet(); }
TPU_EXPORT tpu_status tpu_mesh_coordinates(const tpu_mesh*, int, int, int64_t*, size_t, size_t*) { return not_yet(); }
TPU_EXPORT tpu_status tpu_mesh_axis_groups(const tpu_mesh*, const char* const*, int,
                                           tpu_group_assignment*, int*) { return not_yet(); }
