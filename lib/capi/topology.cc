// C API: topology, device assignment, device names and group assignment.
#include "topology/topology.h"

#include <cstring>

#include "capi/api.h"
#include "capi/handles.h"
#include "topology/device_assignment.h"
#include "topology/group_assignment.h"

using namespace tpurt;

namespace {

const Topology& topo(const tpu_topology* t) {
  require_not_null(t, "topology");
  return *t->impl;
}

const DeviceAssignment& assign(const tpu_device_assignment* a) {
  require_not_null(a, "assignment");
  return *a->impl;
}

void copy_coords(const Coords& c, int32_t* out, size_t capacity, size_t* count) {
  copy_array_out(c.data(), c.size(), out, capacity, count, "the coordinates");
}

// Input coordinates: exactly TPU_MESH_RANK of them.
const int32_t* checked_coords(const int32_t* coords, size_t num_coords) {
  require_not_null(coords, "coords");
  if (num_coords != TPU_MESH_RANK)
    invalid_argument("num_coords is ", num_coords, "; coordinates have ", TPU_MESH_RANK,
                     " entries (x, y, z, core)");
  return coords;
}

}  // namespace

TPU_EXPORT tpu_status tpu_topology_create(const int32_t* mesh_shape, int mesh_rank,
                                          const int32_t* device_coordinates, int num_tasks,
                                          int devices_per_task, tpu_topology** out) {
  return guarded([&] {
    require_not_null(out, "out");
    *out = new tpu_topology{
        Topology::create(mesh_shape, mesh_rank, device_coordinates, num_tasks, devices_per_task)};
  });
}

TPU_EXPORT tpu_status tpu_topology_parse(const void* bytes, size_t len, tpu_topology** out) {
  return guarded([&] {
    require_not_null(out, "out");
    *out = new tpu_topology{Topology::parse(bytes, len)};
  });
}

TPU_EXPORT tpu_status tpu_topology_serialize(const tpu_topology* topology, void* out,
                                             size_t capacity, size_t* count) {
  return guarded(
      [&] { copy_bytes_out(topo(topology).serialize(), out, capacity, count, "the TopologyProto"); });
}

TPU_EXPORT tpu_status tpu_topology_release(tpu_topology* topology) {
  return guarded([&] {
    require_live_or_null(topology, "topology");
    delete topology;
  });
}

TPU_EXPORT tpu_status tpu_topology_mesh_shape(const tpu_topology* topology, int32_t* out,
                                              size_t capacity, size_t* count) {
  return guarded([&] { copy_coords(topo(topology).mesh_shape(), out, capacity, count); });
}

TPU_EXPORT tpu_status tpu_topology_mesh_rank(const tpu_topology* topology, int* out) {
  return guarded([&] {
    const Topology& t = topo(topology);
    require_not_null(out, "out");
    *out = t.mesh_rank();
  });
}

TPU_EXPORT tpu_status tpu_topology_num_tasks(const tpu_topology* topology, int* out) {
  return guarded([&] {
    const Topology& t = topo(topology);
    require_not_null(out, "out");
    *out = t.num_tasks();
  });
}

TPU_EXPORT tpu_status tpu_topology_num_devices_per_task(const tpu_topology* topology, int* out) {
  return guarded([&] {
    const Topology& t = topo(topology);
    require_not_null(out, "out");
    *out = t.devices_per_task();
  });
}

TPU_EXPORT tpu_status tpu_topology_device_coordinates(const tpu_topology* topology, int task,
                                                      int device, int32_t* out,
                                                      size_t capacity, size_t* count) {
  return guarded([&] {
    copy_coords(topo(topology).device_coordinates(task, device), out, capacity, count);
  });
}

TPU_EXPORT tpu_status tpu_topology_task_ordinal_at_coordinates(const tpu_topology* topology,
                                                               const int32_t* coords,
                                                               size_t num_coords, int* out) {
  return guarded([&] {
    const Topology& t = topo(topology);
    checked_coords(coords, num_coords);
    require_not_null(out, "out");
    *out = t.task_at(coords);
  });
}

TPU_EXPORT tpu_status tpu_topology_device_ordinal_at_coordinates(const tpu_topology* topology,
                                                                 const int32_t* coords,
                                                                 size_t num_coords, int* out) {
  return guarded([&] {
    const Topology& t = topo(topology);
    checked_coords(coords, num_coords);
    require_not_null(out, "out");
    *out = t.device_at(coords);
  });
}

TPU_EXPORT tpu_status tpu_topology_num_missing_devices(const tpu_topology* topology, int* out) {
  return guarded([&] {
    const Topology& t = topo(topology);
    require_not_null(out, "out");
    *out = t.num_missing_devices();
  });
}

TPU_EXPORT tpu_status tpu_topology_missing_device(const tpu_topology* topology, int index,
                                                  int32_t* out, size_t capacity,
                                                  size_t* count) {
  return guarded([&] { copy_coords(topo(topology).missing_device(index), out, capacity, count); });
}

TPU_EXPORT tpu_status tpu_topology_tpu_device_name(const tpu_topology* topology,
                                                   const int32_t* coords, size_t num_coords,
                                                   const char* job, char* out, size_t capacity,
                                                   size_t* count) {
  return guarded([&] {
    const Topology& t = topo(topology);
    checked_coords(coords, num_coords);
    copy_string_out(t.tpu_device_name(coords, job), out, capacity, count, "the device name");
  });
}

TPU_EXPORT tpu_status tpu_topology_cpu_device_name(const tpu_topology* topology,
                                                   const int32_t* coords, size_t num_coords,
                                                   const char* job, char* out, size_t capacity,
                                                   size_t* count) {
  return guarded([&] {
    const Topology& t = topo(topology);
    checked_coords(coords, num_coords);
    copy_string_out(t.cpu_device_name(coords, job), out, capacity, count, "the device name");
  });
}

TPU_EXPORT tpu_status tpu_topology_hardware_feature(const tpu_topology* topology,
                                                    int* embedding_feature,
                                                    int* num_embedding_devices_per_chip) {
  return guarded([&] {
    const Topology& t = topo(topology);
    require_not_null(embedding_feature, "embedding_feature");
    require_not_null(num_embedding_devices_per_chip, "num_embedding_devices_per_chip");
    const HardwareFeature hw = t.hardware_feature().value_or(HardwareFeature{});
    *embedding_feature = hw.embedding_feature;
    *num_embedding_devices_per_chip = hw.num_embedding_devices_per_chip;
  });
}

TPU_EXPORT tpu_status tpu_device_name(const char* job, int task, const char* device_type,
                                      int device, char* out, size_t capacity, size_t* count) {
  return guarded([&] {
    copy_string_out(full_device_name(job, task, device_type, device), out, capacity, count,
                    "the device name");
  });
}

TPU_EXPORT tpu_status tpu_core(int n, char* out, size_t capacity, size_t* count) {
  return guarded([&] { copy_string_out(core_device_name(n), out, capacity, count, "the core name"); });
}

TPU_EXPORT tpu_status tpu_device_assignment_build(
    const tpu_topology* topology, const int32_t* computation_shape, int computation_shape_len,
    const int32_t* computation_stride, int computation_stride_len, int num_replicas,
    tpu_device_order_mode mode, tpu_device_assignment** out) {
  return guarded([&] {
    topo(topology);
    require_not_null(out, "out");
    int raw_mode;  // not loaded as the enum: a bad value would be UB in C++
    static_assert(sizeof(raw_mode) == sizeof(mode), "enum is int-sized");
    std::memcpy(&raw_mode, &mode, sizeof(raw_mode));
    *out = new tpu_device_assignment{DeviceAssignment::build(
        topology->impl, computation_shape, computation_shape_len, computation_stride,
        computation_stride_len, num_replicas, checked_order_mode(raw_mode))};
  });
}

TPU_EXPORT tpu_status tpu_device_assignment_create(const tpu_topology* topology,
                                                   const int32_t* core_assignment, int num_replicas,
                                                   int num_cores_per_replica,
                                                   tpu_device_assignment** out) {
  return guarded([&] {
    topo(topology);
    require_not_null(out, "out");
    *out = new tpu_device_assignment{DeviceAssignment::create(topology->impl, core_assignment,
                                                              num_replicas, num_cores_per_replica)};
  });
}

TPU_EXPORT tpu_status tpu_device_assignment_release(tpu_device_assignment* assignment) {
  return guarded([&] {
    require_live_or_null(assignment, "assignment");
    delete assignment;
  });
}

TPU_EXPORT tpu_status tpu_device_assignment_topology(const tpu_device_assignment* assignment,
                                                     tpu_topology** out) {
  return guarded([&] {
    const DeviceAssignment& a = assign(assignment);
    require_not_null(out, "out");
    *out = new tpu_topology{a.topology()};
  });
}

TPU_EXPORT tpu_status tpu_device_assignment_num_replicas(const tpu_device_assignment* assignment,
                                                         int* out) {
  return guarded([&] {
    const DeviceAssignment& a = assign(assignment);
    require_not_null(out, "out");
    *out = a.num_replicas();
  });
}

TPU_EXPORT tpu_status
tpu_device_assignment_num_cores_per_replica(const tpu_device_assignment* assignment, int* out) {
  return guarded([&] {
    const DeviceAssignment& a = assign(assignment);
    require_not_null(out, "out");
    *out = a.num_cores_per_replica();
  });
}

TPU_EXPORT tpu_status tpu_device_assignment_core_assignment(const tpu_device_assignment* assignment,
                                                            int32_t* out, size_t capacity,
                                                            size_t* count) {
  return guarded([&] {
    const std::vector<int32_t>& v = assign(assignment).core_assignment();
    copy_array_out(v.data(), v.size(), out, capacity, count, "the core assignment");
  });
}

TPU_EXPORT tpu_status tpu_device_assignment_coordinates(const tpu_device_assignment* assignment,
                                                        int replica, int logical_core,
                                                        int32_t* out, size_t capacity,
                                                        size_t* count) {
  return guarded([&] {
    copy_coords(assign(assignment).coordinates(replica, logical_core), out, capacity, count);
  });
}

TPU_EXPORT tpu_status tpu_device_assignment_task(const tpu_device_assignment* assignment,
                                                 int replica, int logical_core, int* out) {
  return guarded([&] {
    const DeviceAssignment& a = assign(assignment);
    require_not_null(out, "out");
    *out = a.task(replica, logical_core);
  });
}

TPU_EXPORT tpu_status tpu_device_assignment_tpu_ordinal(const tpu_device_assignment* assignment,
                                                        int replica, int logical_core, int* out) {
  return guarded([&] {
    const DeviceAssignment& a = assign(assignment);
    require_not_null(out, "out");
    *out = a.tpu_ordinal(replica, logical_core);
  });
}

TPU_EXPORT tpu_status tpu_device_assignment_tpu_device(const tpu_device_assignment* assignment,
                                                       int replica, int logical_core,
                                                       const char* job, char* out, size_t capacity,
                                                       size_t* count) {
  return guarded([&] {
    const DeviceAssignment& a = assign(assignment);
    copy_string_out(a.tpu_device(replica, logical_core, job), out, capacity, count, "the device name");
  });
}

TPU_EXPORT tpu_status tpu_device_assignment_host_device(const tpu_device_assignment* assignment,
                                                        int replica, int logical_core,
                                                        const char* job, char* out, size_t capacity,
                                                        size_t* count) {
  return guarded([&] {
    const DeviceAssignment& a = assign(assignment);
    copy_string_out(a.host_device(replica, logical_core, job), out, capacity, count, "the device name");
  });
}

TPU_EXPORT tpu_status tpu_device_assignment_lookup_replicas(const tpu_device_assignment* assignment,
                                                            int task, int logical_core, int* out,
                                                            size_t capacity, size_t* count) {
  return guarded([&] {
    const std::vector<int> replicas = assign(assignment).lookup_replicas(task, logical_core);
    copy_array_out(replicas.data(), replicas.size(), out, capacity, count, "the replicas");
  });
}

TPU_EXPORT tpu_status tpu_group_assignment_validate(const tpu_group_assignment* groups,
                                                    int num_replicas) {
  return guarded([&] { validate_group_assignment(groups, num_replicas); });
}
