// C API: topology, device assignment, device names and group assignment.
#include "topology/topology.h"

#include <cstring>

#include "capi/api.h"
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

void copy_coords(const Coords& c, int32_t* out) { std::memcpy(out, c.data(), sizeof(c)); }

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

TPU_EXPORT tpu_status tpu_topology_serialize(const tpu_topology* topology, void* buf, size_t cap,
                                             size_t* len) {
  return guarded(
      [&] { copy_bytes_out(topo(topology).serialize(), buf, cap, len, "the TopologyProto"); });
}

TPU_EXPORT tpu_status tpu_topology_release(tpu_topology* topology) {
  return guarded([&] { delete topology; });
}

TPU_EXPORT tpu_status tpu_topology_mesh_shape(const tpu_topology* topology, int32_t* out) {
  return guarded([&] {
    const Topology& t = topo(topology);
    require_not_null(out, "out");
    copy_coords(t.mesh_shape(), out);
  });
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
                                                      int device, int32_t* out) {
  return guarded([&] {
    const Topology& t = topo(topology);
    require_not_null(out, "out");
    copy_coords(t.device_coordinates(task, device), out);
  });
}

TPU_EXPORT tpu_status tpu_topology_task_ordinal_at_coordinates(const tpu_topology* topology,
                                                               const int32_t* coords, int* out) {
  return guarded([&] {
    const Topology& t = topo(topology);
    require_not_null(coords, "coords");
    require_not_null(out, "out");
    *out = t.task_at(coords);
  });
}

TPU_EXPORT tpu_status tpu_topology_device_ordinal_at_coordinates(const tpu_topology* topology,
                                                                 const int32_t* coords, int* out) {
  return guarded([&] {
    const Topology& t = topo(topology);
    require_not_null(coords, "coords");
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
                                                  int32_t* out) {
  return guarded([&] {
    const Topology& t = topo(topology);
    require_not_null(out, "out");
    copy_coords(t.missing_device(index), out);
  });
}

TPU_EXPORT tpu_status tpu_topology_tpu_device_name(const tpu_topology* topology,
                                                   const int32_t* coords, const char* job,
                                                   char* buf, size_t cap, size_t* len) {
  return guarded([&] {
    const Topology& t = topo(topology);
    require_not_null(coords, "coords");
    copy_string_out(t.tpu_device_name(coords, job), buf, cap, len, "the device name");
  });
}

TPU_EXPORT tpu_status tpu_topology_cpu_device_name(const tpu_topology* topology,
                                                   const int32_t* coords, const char* job,
                                                   char* buf, size_t cap, size_t* len) {
  return guarded([&] {
    const Topology& t = topo(topology);
    require_not_null(coords, "coords");
    copy_string_out(t.cpu_device_name(coords, job), buf, cap, len, "the device name");
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
                                      int device, char* buf, size_t cap, size_t* len) {
  return guarded([&] {
    copy_string_out(full_device_name(job, task, device_type, device), buf, cap, len,
                    "the device name");
  });
}

TPU_EXPORT tpu_status tpu_core(int n, char* buf, size_t cap, size_t* len) {
  return guarded([&] { copy_string_out(core_device_name(n), buf, cap, len, "the core name"); });
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
  return guarded([&] { delete assignment; });
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
                                                            int32_t* out, size_t count) {
  return guarded([&] {
    const std::vector<int32_t>& v = assign(assignment).core_assignment();
    if (!v.empty()) require_not_null(out, "out");
    if (count < v.size())
      fail(TPU_OUT_OF_RANGE, "count ", count, " is smaller than the ", v.size(),
           " int32s of the core assignment");
    if (!v.empty()) std::memcpy(out, v.data(), v.size() * sizeof(int32_t));
  });
}

TPU_EXPORT tpu_status tpu_device_assignment_coordinates(const tpu_device_assignment* assignment,
                                                        int replica, int logical_core,
                                                        int32_t* out) {
  return guarded([&] {
    const DeviceAssignment& a = assign(assignment);
    require_not_null(out, "out");
    copy_coords(a.coordinates(replica, logical_core), out);
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
                                                       const char* job, char* buf, size_t cap,
                                                       size_t* len) {
  return guarded([&] {
    const DeviceAssignment& a = assign(assignment);
    copy_string_out(a.tpu_device(replica, logical_core, job), buf, cap, len, "the device name");
  });
}

TPU_EXPORT tpu_status tpu_device_assignment_host_device(const tpu_device_assignment* assignment,
                                                        int replica, int logical_core,
                                                        const char* job, char* buf, size_t cap,
                                                        size_t* len) {
  return guarded([&] {
    const DeviceAssignment& a = assign(assignment);
    copy_string_out(a.host_device(replica, logical_core, job), buf, cap, len, "the device name");
  });
}

TPU_EXPORT tpu_status tpu_device_assignment_lookup_replicas(const tpu_device_assignment* assignment,
                                                            int task, int logical_core, int* out,
                                                            int capacity, int* count) {
  return guarded([&] {
    const DeviceAssignment& a = assign(assignment);
    require_not_null(count, "count");
    if (capacity < 0) invalid_argument("capacity must be >= 0; got ", capacity);
    if (out == nullptr && capacity != 0)
      invalid_argument("argument 'out' is NULL but capacity is ", capacity);
    const std::vector<int> replicas = a.lookup_replicas(task, logical_core);
    const int n = static_cast<int>(replicas.size());
    *count = n;
    if (out == nullptr) return;
    if (capacity < n)
      fail(TPU_OUT_OF_RANGE, "capacity ", capacity, " is smaller than the ", n,
           " replicas of task ", task, " logical_core ", logical_core);
    std::memcpy(out, replicas.data(), replicas.size() * sizeof(int));
  });
}

TPU_EXPORT tpu_status tpu_group_assignment_validate(const tpu_group_assignment* groups,
                                                    int num_replicas) {
  return guarded([&] { validate_group_assignment(groups, num_replicas); });
}
