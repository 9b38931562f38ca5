#include "topology/mesh.h"

#include <cstring>
#include <limits>

#include "core/status.h"

namespace tpurt {
namespace {

// DTensor's reserved sharding specs (Layout::kUnshardedDim, kMatch, kAny), which
// Mesh::GetAbstractMesh refuses as dimension names.
constexpr const char* kReserved[] = {"unsharded", "match", "any"};

bool reserved(const char* name) {
  for (const char* r : kReserved)
    if (std::strcmp(name, r) == 0) return true;
  return false;
}

}  // namespace

int64_t Mesh::checked_axes(const char* const* axis_names, const int64_t* axis_sizes,
                           int num_axes) {
  if (num_axes < 1) invalid_argument("num_axes is ", num_axes, "; a mesh has at least one axis");
  require_not_null(axis_names, "axis_names");
  require_not_null(axis_sizes, "axis_sizes");
  int64_t product = 1;
  for (int i = 0; i < num_axes; ++i) {
    const char* name = axis_names[i];
    if (name == nullptr) invalid_argument("axis_names[", i, "] is NULL");
    if (name[0] == '\0') invalid_argument("axis_names[", i, "] is empty: a mesh axis needs a name");
    if (reserved(name))
      invalid_argument("axis_names[", i, "] is \"", name,
                       "\", a name DTensor reserves (\"unsharded\", \"match\", \"any\")");
    for (int j = 0; j < i; ++j)
      if (std::strcmp(axis_names[j], name) == 0)
        invalid_argument("axis_names[", i, "] is \"", name, "\", the same as axis_names[", j,
                         "]: mesh axis names must be unique");
    if (axis_sizes[i] < 1)
      invalid_argument("axis_sizes[", i, "] is ", axis_sizes[i], " (axis \"", name,
                       "\"); every axis size must be >= 1");
    if (axis_sizes[i] > std::numeric_limits<int32_t>::max() / product)
      invalid_argument("the axis sizes multiply to more than ", std::numeric_limits<int32_t>::max(),
                       " at axis_sizes[", i, "] = ", axis_sizes[i], " (axis \"", name, "\")");
    product *= axis_sizes[i];
  }
  return product;
}

std::shared_ptr<const Mesh> Mesh::create(std::shared_ptr<const DeviceAssignment> assignment,
                                         const char* const* axis_names,
                                         const int64_t* axis_sizes, int num_axes) {
  require_not_null(assignment.get(), "assignment");
  const int64_t product = checked_axes(axis_names, axis_sizes, num_axes);
  const int64_t replicas = assignment->num_replicas(), k = assignment->num_cores_per_replica();
  if (product != replicas * k) {
    std::string shape;
    for (int i = 0; i < num_axes; ++i)
      shape += str_cat(i ? " x " : "", "\"", axis_names[i], "\" ", axis_sizes[i]);
    invalid_argument("the mesh's axis sizes multiply to ", product, " (", shape,
                     "), but the device assignment has ", replicas, " replicas x ", k,
                     " cores per replica = ", replicas * k, " participants");
  }
  std::shared_ptr<Mesh> mesh(new Mesh());
  mesh->assignment_ = std::move(assignment);
  mesh->names_.assign(axis_names, axis_names + num_axes);
  mesh->sizes_.assign(axis_sizes, axis_sizes + num_axes);
  mesh->strides_.assign(num_axes, 1);
  for (int i = num_axes - 2; i >= 0; --i)
    mesh->strides_[i] = mesh->strides_[i + 1] * mesh->sizes_[i + 1];
  mesh->size_ = product;
  return mesh;
}

std::string Mesh::axis_list() const {
  std::string s;
  for (size_t i = 0; i < names_.size(); ++i) s += str_cat(i ? ", " : "", "\"", names_[i], "\"");
  return s;
}

void Mesh::check_axis(int axis) const {
  if (axis < 0 || axis >= num_axes())
    fail(TPU_OUT_OF_RANGE, "axis ", axis, " is outside [0, ", num_axes(), ") (the mesh's axes are ",
         axis_list(), ")");
}

const std::string& Mesh::axis_name(int axis) const {
  check_axis(axis);
  return names_[axis];
}

int64_t Mesh::axis_size(int axis) const {
  check_axis(axis);
  return sizes_[axis];
}

int Mesh::axis_index(const char* name) const {
  require_not_null(name, "name");
  for (int i = 0; i < num_axes(); ++i)
    if (names_[i] == name) return i;
  fail(TPU_NOT_FOUND, "the mesh has no axis \"", name, "\"; its axes are ", axis_list());
}

std::vector<int64_t> Mesh::coordinates(int replica, int logical_core) const {
  const int k = assignment_->num_cores_per_replica();
  if (replica < 0 || replica >= assignment_->num_replicas())
    fail(TPU_OUT_OF_RANGE, "replica ", replica, " is outside [0, ", assignment_->num_replicas(),
         ") (the mesh's device assignment)");
  if (logical_core < 0 || logical_core >= k)
    fail(TPU_OUT_OF_RANGE, "logical_core ", logical_core, " is outside [0, ", k,
         ") (the mesh's device assignment)");
  const int64_t id = int64_t(replica) * k + logical_core;
  std::vector<int64_t> c(names_.size());
  for (size_t i = 0; i < c.size(); ++i) c[i] = id / strides_[i] % sizes_[i];
  return c;
}

const ParticipantGroups& Mesh::axis_groups(const char* const* axes, int num_axes) const {
  if (num_axes < 1)
    invalid_argument("num_axes is ", num_axes, "; name at least one of the mesh's axes (",
                     axis_list(), ")");
  require_not_null(axes, "axes");
  std::vector<int> named;  // the axes' indices, in the order given
  std::vector<bool> in_group(names_.size(), false);
  for (int i = 0; i < num_axes; ++i) {
    if (axes[i] == nullptr) invalid_argument("axes[", i, "] is NULL");
    int a = -1;
    for (int j = 0; j < this->num_axes(); ++j)
      if (names_[j] == axes[i]) a = j;
    if (a < 0)
      fail(TPU_NOT_FOUND, "axes[", i, "] is \"", axes[i], "\", not an axis of the mesh; its axes are ",
           axis_list());
    if (in_group[a]) {
      int first = 0;
      while (named[first] != a) ++first;
      invalid_argument("axes[", i, "] is \"", axes[i], "\", already named by axes[", first,
                       "]: each axis at most once");
    }
    in_group[a] = true;
    named.push_back(a);
  }

  std::lock_guard<std::mutex> lock(mu_);
  auto it = groups_.find(named);
  if (it != groups_.end()) return it->second;

  std::vector<int> others;  // the other axes, in mesh order: they number the groups
  for (int j = 0; j < this->num_axes(); ++j)
    if (!in_group[j]) others.push_back(j);
  int64_t group_size = 1;
  for (int a : named) group_size *= sizes_[a];
  const int64_t num_groups = size_ / group_size;

  // The flattened-id offset of row-major index n over the axes `over` (last fastest).
  auto offset = [&](const std::vector<int>& over, int64_t n) {
    int64_t id = 0;
    for (size_t i = over.size(); i-- > 0;) {
      id += n % sizes_[over[i]] * strides_[over[i]];
      n /= sizes_[over[i]];
    }
    return id;
  };
  ParticipantGroups g;
  g.num_groups = static_cast<int>(num_groups);
  g.group_size = static_cast<int>(group_size);
  g.ids.reserve(static_cast<size_t>(size_));
  for (int64_t n = 0; n < num_groups; ++n) {
    const int64_t base = offset(others, n);
    for (int64_t m = 0; m < group_size; ++m)
      g.ids.push_back(static_cast<int32_t>(base + offset(named, m)));
  }
  return groups_.emplace(std::move(named), std::move(g)).first->second;
}

}  // namespace tpurt
