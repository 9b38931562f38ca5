// Topology: the mesh of cores and which task/device sits at each coordinate, as
// TensorFlow's tf.tpu.experimental.Topology; encodes and decodes TopologyProto.
// Immutable once built, so shared freely between threads.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tpurt/topology.h"

namespace tpurt {

// Bound on mesh positions, devices and replicas: keeps everything sized from untrusted
// bytes or caller counts small.
constexpr int64_t kMaxDevices = int64_t{1} << 20;

using Coords = std::array<int32_t, TPU_MESH_RANK>;

// TopologyProto field 5.
struct HardwareFeature {
  int32_t embedding_feature = 0;  // 0 UNSUPPORTED, 1 V1, 2 V2
  int32_t num_embedding_devices_per_chip = 0;
};

// "[1 2 1 2]": arrays printed the way numpy prints them in TensorFlow's messages.
template <typename T>
std::string format_array(const T* v, size_t n) {
  std::ostringstream os;
  os << '[';
  const size_t shown = n > 16 ? 16 : n;
  for (size_t i = 0; i < shown; ++i) os << (i ? " " : "") << v[i];
  if (shown < n) os << " ... (" << n << " entries)";
  os << ']';
  return os.str();
}

// "(x, y, z, core)"
std::string format_coords(const int32_t* coords);

// Device names (spec §2.1). job NULL or "": no job part. A job containing '/' or ':'
// is TPU_INVALID_ARGUMENT.
std::string tpu_device_name(const char* job, int task, int device);  // /job:J/task:T/device:TPU:D
std::string host_device_name(const char* job, int task);             // /job:J/task:T/device:CPU:0
// The fully qualified "/job:J/replica:0/task:T/device:TYPE:D" (type "TPU" or "CPU").
std::string full_device_name(const char* job, int task, const char* device_type, int device);
// tf.tpu.core(n): "device:TPU_REPLICATED_CORE:n".
std::string core_device_name(int n);

class Topology {
 public:
  // device_coordinates is [num_tasks][devices_per_task][4] flattened. Throws
  // TPU_INVALID_ARGUMENT for a bad mesh, counts, length, or a coordinate that is
  // negative, outside the mesh or used twice.
  static std::shared_ptr<const Topology> create(
      const std::vector<int32_t>& mesh_shape, const std::vector<int32_t>& device_coordinates,
      int num_tasks, int devices_per_task,
      std::optional<HardwareFeature> hardware_feature = std::nullopt);
  // The C form: device_coordinates holds num_tasks * devices_per_task * 4 entries
  // (may be NULL when that is 0); mesh_shape holds mesh_rank entries.
  static std::shared_ptr<const Topology> create(const int32_t* mesh_shape, int mesh_rank,
                                                const int32_t* device_coordinates, int num_tasks,
                                                int devices_per_task);
  // Serialized TopologyProto; untrusted bytes give TPU_INVALID_ARGUMENT, never a crash.
  static std::shared_ptr<const Topology> parse(const void* bytes, size_t len);
  // One task whose num_cores devices fill the mesh densely: core fastest, then x,
  // then y, then z. The mesh product must equal num_cores.
  static std::shared_ptr<const Topology> local(const int32_t mesh[TPU_MESH_RANK], int num_cores);

  // TensorFlow's bytes: fields 1-4 (packed, zeros omitted), 5 when present. A parsed
  // topology returns the bytes it was parsed from.
  std::string serialize() const { return serialized_; }

  const Coords& mesh_shape() const { return mesh_; }
  int mesh_rank() const { return TPU_MESH_RANK; }
  int num_tasks() const { return num_tasks_; }
  int devices_per_task() const { return devices_per_task_; }
  int num_devices() const { return num_tasks_ * devices_per_task_; }
  const std::optional<HardwareFeature>& hardware_feature() const { return hardware_feature_; }

  // The same mesh and the same devices at the same coordinates (hardware features and
  // the bytes it came from aside): a device assignment built on one fits the other.
  bool same_layout(const Topology& other) const {
    return mesh_ == other.mesh_ && num_tasks_ == other.num_tasks_ &&
           devices_per_task_ == other.devices_per_task_ && coordinates_ == other.coordinates_;
  }
  // "mesh [x, y, z, c], T task(s) of D devices", for messages.
  std::string describe() const;

  // Task/device indices outside the topology: TPU_OUT_OF_RANGE.
  Coords device_coordinates(int task, int device) const;

  bool in_mesh(const int32_t* coords) const;
  // task * devices_per_task + device, or -1 where no device sits; coords outside the
  // mesh: TPU_INVALID_ARGUMENT.
  int flat_device_at(const int32_t* coords) const;
  // The same, but a position without a device is TPU_NOT_FOUND.
  int require_device_at(const int32_t* coords) const;
  // The task, and the device's ordinal in its task, at coords; errors as
  // require_device_at.
  int task_at(const int32_t* coords) const { return require_device_at(coords) / devices_per_task_; }
  int device_at(const int32_t* coords) const { return require_device_at(coords) % devices_per_task_; }

  // Mesh positions without a device, row-major (x slowest, core fastest).
  int num_missing_devices() const { return static_cast<int>(missing_.size()); }
  bool has_missing_devices() const { return !missing_.empty(); }
  Coords missing_device(int index) const;  // TPU_OUT_OF_RANGE outside [0, count)

  // Names of the device at coords; no device there: TPU_NOT_FOUND.
  std::string tpu_device_name(const int32_t* coords, const char* job) const;
  std::string cpu_device_name(const int32_t* coords, const char* job) const;

 private:
  struct Fields;
  static std::shared_ptr<const Topology> make(const Fields& f);

  int64_t position(const int32_t* coords) const;  // row-major mesh index
  Coords coords_of_position(int64_t pos) const;

  Coords mesh_{};
  int num_tasks_ = 0;
  int devices_per_task_ = 0;
  std::vector<int32_t> coordinates_;  // [task][device][4]
  std::optional<HardwareFeature> hardware_feature_;
  std::vector<int32_t> device_at_position_;  // task * devices_per_task + device, or -1
  std::vector<int32_t> missing_;             // positions, ascending
  std::string serialized_;
};

}  // namespace tpurt

