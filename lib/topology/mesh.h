// Mesh: named axes over the participants of a device assignment, as DTensor's and
// JAX's Mesh (include/tpurt/mesh.h). Participant (replica r, logical core c) has
// flattened id r * k + c, laid over the axes in row-major order. Immutable; the only
// mutable state is the cache of axis groups, behind a mutex, so every method may be
// called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "topology/device_assignment.h"
#include "topology/group_modes.h"

namespace tpurt {

class Mesh {
 public:
  // Checks the axes by TensorFlow's Mesh rules (at least one; names non-NULL,
  // non-empty, unique, not DTensor's reserved "unsharded", "match" or "any"; sizes
  // >= 1) and that their product is the assignment's num_replicas * k.
  // TPU_INVALID_ARGUMENT naming the axis, name or size otherwise.
  static std::shared_ptr<const Mesh> create(std::shared_ptr<const DeviceAssignment> assignment,
                                            const char* const* axis_names,
                                            const int64_t* axis_sizes, int num_axes);

  // The same checks without an assignment; returns the product of the sizes
  // (TPU_INVALID_ARGUMENT when it exceeds INT32_MAX: ids are int32).
  static int64_t checked_axes(const char* const* axis_names, const int64_t* axis_sizes,
                              int num_axes);

  const std::shared_ptr<const DeviceAssignment>& device_assignment() const { return assignment_; }
  int num_axes() const { return static_cast<int>(names_.size()); }
  int64_t size() const { return size_; }
  // axis outside [0, num_axes): TPU_OUT_OF_RANGE.
  const std::string& axis_name(int axis) const;
  int64_t axis_size(int axis) const;
  // TPU_NOT_FOUND naming `name` and the mesh's axes.
  int axis_index(const char* name) const;
  // Mesh coordinates of (replica, logical_core); outside the assignment: TPU_OUT_OF_RANGE.
  std::vector<int64_t> coordinates(int replica, int logical_core) const;

  // The flattened-id groups of a collective over axes[num_axes] (distinct names of
  // this mesh): participants that differ only in those axes form a group, members
  // row-major over the named axes in the order given, groups in ascending order of
  // their first member. Computed once per distinct axis list; the reference stays
  // valid as long as the mesh.
  const ParticipantGroups& axis_groups(const char* const* axes, int num_axes) const;

 private:
  Mesh() = default;
  std::string axis_list() const;  // "\"batch\", \"model\"", for messages
  void check_axis(int axis) const;

  std::shared_ptr<const DeviceAssignment> assignment_;
  std::vector<std::string> names_;
  std::vector<int64_t> sizes_;
  std::vector<int64_t> strides_;  // row-major: strides_[i] = product of sizes_[i+1..]
  int64_t size_ = 0;

  mutable std::mutex mu_;
  // Keyed by the axis indices in the order given; map nodes never move, so the
  // references handed out stay valid.
  mutable std::map<std::vector<int>, ParticipantGroups> groups_;
};

}  // namespace tpurt
