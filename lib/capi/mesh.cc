// C API: meshes with named axes (tpurt/mesh.h) over lib/topology/mesh.h.
#include "topology/mesh.h"

#include "capi/api.h"
#include "capi/handles.h"

using namespace tpurt;

namespace {

const Mesh& mesh_of(const tpu_mesh* m) {
  require_not_null(m, "mesh");
  return *m->impl;
}

}  // namespace

TPU_EXPORT tpu_status tpu_mesh_create(const tpu_device_assignment* assignment,
                                      const char* const* axis_names, const int64_t* axis_sizes,
                                      int num_axes, tpu_mesh** out) {
  return guarded([&] {
    require_not_null(assignment, "assignment");
    require_not_null(out, "out");
    *out = new tpu_mesh{Mesh::create(assignment->impl, axis_names, axis_sizes, num_axes)};
  });
}

TPU_EXPORT tpu_status tpu_mesh_create_from_topology(const tpu_topology* topology,
                                                    const char* const* axis_names,
                                                    const int64_t* axis_sizes, int num_axes,
                                                    tpu_mesh** out) {
  return guarded([&] {
    require_not_null(topology, "topology");
    require_not_null(out, "out");
    // The axes first: their product is the replica count of the assignment.
    const int64_t replicas = Mesh::checked_axes(axis_names, axis_sizes, num_axes);
    auto assignment = DeviceAssignment::build(topology->impl, nullptr, 0, nullptr, 0,
                                              static_cast<int>(replicas), TPU_DEVICE_ORDER_AUTO);
    *out = new tpu_mesh{Mesh::create(std::move(assignment), axis_names, axis_sizes, num_axes)};
  });
}

TPU_EXPORT tpu_status tpu_mesh_release(tpu_mesh* mesh) {
  return guarded([&] {
    require_live_or_null(mesh, "mesh");
    delete mesh;
  });
}

TPU_EXPORT tpu_status tpu_mesh_device_assignment(const tpu_mesh* mesh,
                                                 tpu_device_assignment** out) {
  return guarded([&] {
    const Mesh& m = mesh_of(mesh);
    require_not_null(out, "out");
    *out = new tpu_device_assignment{m.device_assignment()};
  });
}

TPU_EXPORT tpu_status tpu_mesh_num_axes(const tpu_mesh* mesh, int* out) {
  return guarded([&] {
    const Mesh& m = mesh_of(mesh);
    require_not_null(out, "out");
    *out = m.num_axes();
  });
}

TPU_EXPORT tpu_status tpu_mesh_size(const tpu_mesh* mesh, int64_t* out) {
  return guarded([&] {
    const Mesh& m = mesh_of(mesh);
    require_not_null(out, "out");
    *out = m.size();
  });
}

TPU_EXPORT tpu_status tpu_mesh_axis_name(const tpu_mesh* mesh, int axis, char* out,
                                         size_t capacity, size_t* count) {
  return guarded([&] {
    copy_string_out(mesh_of(mesh).axis_name(axis), out, capacity, count, "the axis name");
  });
}

TPU_EXPORT tpu_status tpu_mesh_axis_size(const tpu_mesh* mesh, int axis, int64_t* out) {
  return guarded([&] {
    const Mesh& m = mesh_of(mesh);
    require_not_null(out, "out");
    *out = m.axis_size(axis);
  });
}

TPU_EXPORT tpu_status tpu_mesh_axis_index(const tpu_mesh* mesh, const char* name, int* out) {
  return guarded([&] {
    const Mesh& m = mesh_of(mesh);
    require_not_null(name, "name");
    require_not_null(out, "out");
    *out = m.axis_index(name);
  });
}

TPU_EXPORT tpu_status tpu_mesh_coordinates(const tpu_mesh* mesh, int replica, int logical_core,
                                           int64_t* out, size_t capacity, size_t* count) {
  return guarded([&] {
    const std::vector<int64_t> c = mesh_of(mesh).coordinates(replica, logical_core);
    copy_array_out(c.data(), c.size(), out, capacity, count, "the mesh coordinates");
  });
}

TPU_EXPORT tpu_status tpu_mesh_axis_groups(const tpu_mesh* mesh, const char* const* axes,
                                           int num_axes, tpu_group_assignment* groups,
                                           int* group_mode) {
  return guarded([&] {
    const Mesh& m = mesh_of(mesh);
    require_not_null(groups, "groups");
    require_not_null(group_mode, "group_mode");
    *groups = m.axis_groups(axes, num_axes).view();
    *group_mode = TPU_GROUP_MODE_FLATTENED_ID;
  });
}
