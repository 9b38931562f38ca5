// Binding-support layer (../tpurt_binding.hpp): Topology and DeviceAssignment.
#ifndef TPURT_BINDING_SUPPORT_TOPOLOGY_HPP
#define TPURT_BINDING_SUPPORT_TOPOLOGY_HPP

#include "common.hpp"

namespace tpurt {

// ---- Topology and device assignment ---------------------------------------------

class Topology {
 public:
  explicit Topology(tpu_topology* adopted) : t_(adopted) {}
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;
  ~Topology() { close(); }
  void close() {
    if (t_) tpu_topology_release(t_);
    t_ = nullptr;
  }
  static Topology* create(const std::vector<int32_t>& meshShape,
                          const std::vector<int32_t>& deviceCoordinates, int numTasks,
                          int devicesPerTask) {
    tpu_topology* t = nullptr;
    detail::check(tpu_topology_create(meshShape.data(), detail::int_or_throw(meshShape.size(), "meshShape"),
                                      deviceCoordinates.data(), numTasks, devicesPerTask, &t));
    return new Topology(t);
  }
  static Topology* parse(const std::vector<uint8_t>& bytes) {
    tpu_topology* t = nullptr;
    detail::check(tpu_topology_parse(bytes.data(), bytes.size(), &t));
    return new Topology(t);
  }
  std::vector<uint8_t> serialize() const {
    return detail::read_array<uint8_t>(
        [&](uint8_t* o, size_t c, size_t* n) { return tpu_topology_serialize(handle(), o, c, n); });
  }
  std::vector<int32_t> meshShape() const {
    return detail::read_array<int32_t>(
        [&](int32_t* o, size_t c, size_t* n) { return tpu_topology_mesh_shape(handle(), o, c, n); });
  }
  int meshRank() const { return get_int(tpu_topology_mesh_rank); }
  int numTasks() const { return get_int(tpu_topology_num_tasks); }
  int numDevicesPerTask() const { return get_int(tpu_topology_num_devices_per_task); }
  std::vector<int32_t> deviceCoordinates(int task, int device) const {
    return detail::read_array<int32_t>([&](int32_t* o, size_t c, size_t* n) {
      return tpu_topology_device_coordinates(handle(), task, device, o, c, n);
    });
  }
  int taskOrdinalAtCoordinates(const std::vector<int32_t>& coords) const {
    int out = 0;
    detail::check(tpu_topology_task_ordinal_at_coordinates(handle(), coords.data(), coords.size(), &out));
    return out;
  }
  int deviceOrdinalAtCoordinates(const std::vector<int32_t>& coords) const {
    int out = 0;
    detail::check(tpu_topology_device_ordinal_at_coordinates(handle(), coords.data(), coords.size(), &out));
    return out;
  }
  int numMissingDevices() const { return get_int(tpu_topology_num_missing_devices); }
  std::vector<int32_t> missingDevice(int index) const {
    return detail::read_array<int32_t>([&](int32_t* o, size_t c, size_t* n) {
      return tpu_topology_missing_device(handle(), index, o, c, n);
    });
  }
  // job "": no job part.
  std::string tpuDeviceName(const std::vector<int32_t>& coords, const std::string& job) const {
    return detail::read_string([&](char* o, size_t c, size_t* n) {
      return tpu_topology_tpu_device_name(handle(), coords.data(), coords.size(),
                                          job.empty() ? nullptr : job.c_str(), o, c, n);
    });
  }
  std::string cpuDeviceName(const std::vector<int32_t>& coords, const std::string& job) const {
    return detail::read_string([&](char* o, size_t c, size_t* n) {
      return tpu_topology_cpu_device_name(handle(), coords.data(), coords.size(),
                                          job.empty() ? nullptr : job.c_str(), o, c, n);
    });
  }
  // {embedding feature, embedding devices per chip}
  std::vector<int32_t> hardwareFeature() const {
    int feature = 0, per_chip = 0;
    detail::check(tpu_topology_hardware_feature(handle(), &feature, &per_chip));
    return {feature, per_chip};
  }
  tpu_topology* handle() const {
    detail::check_handle(t_, "the topology");
    return t_;
  }

 private:
  int get_int(tpu_status (*fn)(const tpu_topology*, int*)) const {
    int out = 0;
    detail::check(fn(handle(), &out));
    return out;
  }
  tpu_topology* t_;
};

class DeviceAssignment {
 public:
  explicit DeviceAssignment(tpu_device_assignment* adopted) : a_(adopted) {}
  DeviceAssignment(const DeviceAssignment&) = delete;
  DeviceAssignment& operator=(const DeviceAssignment&) = delete;
  ~DeviceAssignment() { close(); }
  void close() {
    if (a_) tpu_device_assignment_release(a_);
    a_ = nullptr;
  }
  // TensorFlow's device_assignment(); empty shape/stride vectors mean the defaults.
  static DeviceAssignment* build(const Topology& topology, const std::vector<int32_t>& computationShape,
                                 const std::vector<int32_t>& computationStride, int numReplicas,
                                 DeviceOrderMode deviceOrderMode) {
    tpu_device_assignment* a = nullptr;
    detail::check(tpu_device_assignment_build(
        topology.handle(), computationShape.empty() ? nullptr : computationShape.data(),
        detail::int_or_throw(computationShape.size(), "computationShape"),
        computationStride.empty() ? nullptr : computationStride.data(),
        detail::int_or_throw(computationStride.size(), "computationStride"), numReplicas,
        static_cast<tpu_device_order_mode>(deviceOrderMode), &a));
    return new DeviceAssignment(a);
  }
  // coreAssignment[numReplicas][numCoresPerReplica][4], flattened.
  static DeviceAssignment* create(const Topology& topology, const std::vector<int32_t>& coreAssignment,
                                  int numReplicas, int numCoresPerReplica) {
    if (static_cast<int64_t>(numReplicas) * numCoresPerReplica * TPU_MESH_RANK !=
        static_cast<int64_t>(coreAssignment.size()))
      throw Error(TPU_INVALID_ARGUMENT,
                  "coreAssignment has " + std::to_string(coreAssignment.size()) + " entries, not " +
                      std::to_string(numReplicas) + " x " + std::to_string(numCoresPerReplica) + " x 4");
    tpu_device_assignment* a = nullptr;
    detail::check(tpu_device_assignment_create(topology.handle(), coreAssignment.data(), numReplicas,
                                               numCoresPerReplica, &a));
    return new DeviceAssignment(a);
  }
  Topology* topology() const {
    tpu_topology* t = nullptr;
    detail::check(tpu_device_assignment_topology(handle(), &t));
    return new Topology(t);
  }
  int numReplicas() const {
    int n = 0;
    detail::check(tpu_device_assignment_num_replicas(handle(), &n));
    return n;
  }
  int numCoresPerReplica() const {
    int n = 0;
    detail::check(tpu_device_assignment_num_cores_per_replica(handle(), &n));
    return n;
  }
  std::vector<int32_t> coreAssignment() const {
    return detail::read_array<int32_t>([&](int32_t* o, size_t c, size_t* n) {
      return tpu_device_assignment_core_assignment(handle(), o, c, n);
    });
  }
  std::vector<int32_t> coordinates(int replica, int logicalCore) const {
    return detail::read_array<int32_t>([&](int32_t* o, size_t c, size_t* n) {
      return tpu_device_assignment_coordinates(handle(), replica, logicalCore, o, c, n);
    });
  }
  int task(int replica, int logicalCore) const {
    int out = 0;
    detail::check(tpu_device_assignment_task(handle(), replica, logicalCore, &out));
    return out;
  }
  int tpuOrdinal(int replica, int logicalCore) const {
    int out = 0;
    detail::check(tpu_device_assignment_tpu_ordinal(handle(), replica, logicalCore, &out));
    return out;
  }
  std::string tpuDevice(int replica, int logicalCore, const std::string& job) const {
    return detail::read_string([&](char* o, size_t c, size_t* n) {
      return tpu_device_assignment_tpu_device(handle(), replica, logicalCore,
                                              job.empty() ? nullptr : job.c_str(), o, c, n);
    });
  }
  std::string hostDevice(int replica, int logicalCore, const std::string& job) const {
    return detail::read_string([&](char* o, size_t c, size_t* n) {
      return tpu_device_assignment_host_device(handle(), replica, logicalCore,
                                               job.empty() ? nullptr : job.c_str(), o, c, n);
    });
  }
  std::vector<int32_t> lookupReplicas(int task, int logicalCore) const {
    std::vector<int> v = detail::read_array<int>([&](int* o, size_t c, size_t* n) {
      return tpu_device_assignment_lookup_replicas(handle(), task, logicalCore, o, c, n);
    });
    return std::vector<int32_t>(v.begin(), v.end());
  }
  tpu_device_assignment* handle() const {
    detail::check_handle(a_, "the device assignment");
    return a_;
  }

 private:
  tpu_device_assignment* a_;
};

}  // namespace tpurt

#endif  // TPURT_BINDING_SUPPORT_TOPOLOGY_HPP
