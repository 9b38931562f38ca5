// DeviceAssignment: logical cores of each replica -> mesh coordinates, as TensorFlow's
// tf.tpu.experimental.DeviceAssignment. Immutable; lookups are O(1) except
// lookup_replicas (O(log n)).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "topology/topology.h"

namespace tpurt {

// A raw device_order_mode value as the enum; TPU_INVALID_ARGUMENT unless AUTO, RING or
// MESH. The C API reads the caller's enum as an int first: out-of-range enum values
// are undefined behaviour in C++.
tpu_device_order_mode checked_order_mode(int mode);

class DeviceAssignment {
 public:
  // TensorFlow's device_assignment() (spec §3.2-3.6). computation_shape/stride NULL:
  // all ones; otherwise their lengths must be 4. Errors: TPU_INVALID_ARGUMENT with
  // TensorFlow's reason.
  static std::shared_ptr<const DeviceAssignment> build(
      std::shared_ptr<const Topology> topology, const int32_t* computation_shape,
      int computation_shape_len, const int32_t* computation_stride, int computation_stride_len,
      int num_replicas, tpu_device_order_mode mode = TPU_DEVICE_ORDER_AUTO);

  // An explicit core_assignment[num_replicas][num_cores_per_replica][4]: every
  // coordinate must name a device of the topology, none twice.
  static std::shared_ptr<const DeviceAssignment> create(std::shared_ptr<const Topology> topology,
                                                        std::vector<int32_t> core_assignment,
                                                        int num_replicas,
                                                        int num_cores_per_replica);
  // The C form: core_assignment holds num_replicas * num_cores_per_replica * 4
  // entries (may be NULL when that is 0); the counts are checked before reading.
  static std::shared_ptr<const DeviceAssignment> create(std::shared_ptr<const Topology> topology,
                                                        const int32_t* core_assignment,
                                                        int num_replicas,
                                                        int num_cores_per_replica);

  // Replica r on global device r (task r / devices per task, its device r mod that),
  // one core each: the assignment a step without one runs on. num_replicas must not
  // exceed the topology's devices.
  static std::shared_ptr<const DeviceAssignment> in_device_order(
      std::shared_ptr<const Topology> topology, int num_replicas);

  const std::shared_ptr<const Topology>& topology() const { return topology_; }
  int num_replicas() const { return num_replicas_; }
  int num_cores_per_replica() const { return num_cores_; }
  // [replica][logical_core][4], flattened.
  const std::vector<int32_t>& core_assignment() const { return assignment_; }

  // (replica, logical_core) outside the assignment: TPU_OUT_OF_RANGE.
  Coords coordinates(int replica, int logical_core) const;
  int task(int replica, int logical_core) const;
  int tpu_ordinal(int replica, int logical_core) const;
  std::string tpu_device(int replica, int logical_core, const char* job) const;
  std::string host_device(int replica, int logical_core, const char* job) const;

  // Ascending replicas whose logical_core lives on task. Task or core outside the
  // topology/assignment: TPU_OUT_OF_RANGE; none: TPU_NOT_FOUND.
  std::vector<int> lookup_replicas(int task, int logical_core) const;

 private:
  DeviceAssignment() = default;
  // Checks the counts against the topology; returns num_replicas * num_cores.
  static int64_t checked_total(const Topology* topology, int num_replicas, int num_cores);
  // Validates every coordinate and builds the lookup tables.
  static std::shared_ptr<const DeviceAssignment> index_all(std::shared_ptr<const Topology> topology,
                                                           std::vector<int32_t> core_assignment,
                                                           int num_replicas, int num_cores);
  size_t index(int replica, int logical_core) const;

  struct Placement {
    int32_t task;
    int32_t logical_core;
    int32_t replica;
  };

  std::shared_ptr<const Topology> topology_;
  int num_replicas_ = 0;
  int num_cores_ = 0;
  std::vector<int32_t> assignment_;    // [r][c][4]
  std::vector<int32_t> flat_device_;   // [r][c]: task * devices_per_task + device
  std::vector<Placement> placements_;  // sorted by (task, logical_core, replica)
};

}  // namespace tpurt

