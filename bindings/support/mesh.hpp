// Binding-support layer (../tpurt_binding.hpp): Mesh, named axes over a device assignment.
#ifndef TPURT_BINDING_SUPPORT_MESH_HPP
#define TPURT_BINDING_SUPPORT_MESH_HPP

#include "tensor.hpp"
#include "topology.hpp"

namespace tpurt {

// tpu_mesh (1.3): named axes over a device assignment's participants.
class Mesh {
 public:
  explicit Mesh(tpu_mesh* adopted) : m_(adopted) {}
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;
  ~Mesh() { close(); }
  void close() {
    if (m_) tpu_mesh_release(m_);
    m_ = nullptr;
  }
  static Mesh* create(const DeviceAssignment& assignment, const std::vector<std::string>& axisNames,
                      const std::vector<long long>& axisSizes) {
    std::vector<const char*> names = detail::names_of(axisNames, axisSizes.size(), "axisSizes");
    tpu_mesh* m = nullptr;
    detail::check(tpu_mesh_create(assignment.handle(), names.data(), detail::c_dims(axisSizes),
                                  detail::int_or_throw(names.size(), "axisNames"), &m));
    return new Mesh(m);
  }
  static Mesh* createFromTopology(const Topology& topology, const std::vector<std::string>& axisNames,
                                  const std::vector<long long>& axisSizes) {
    std::vector<const char*> names = detail::names_of(axisNames, axisSizes.size(), "axisSizes");
    tpu_mesh* m = nullptr;
    detail::check(tpu_mesh_create_from_topology(topology.handle(), names.data(), detail::c_dims(axisSizes),
                                                detail::int_or_throw(names.size(), "axisNames"), &m));
    return new Mesh(m);
  }
  DeviceAssignment* deviceAssignment() const {
    tpu_device_assignment* a = nullptr;
    detail::check(tpu_mesh_device_assignment(handle(), &a));
    return new DeviceAssignment(a);
  }
  int numAxes() const {
    int n = 0;
    detail::check(tpu_mesh_num_axes(handle(), &n));
    return n;
  }
  int64_t size() const {
    int64_t n = 0;
    detail::check(tpu_mesh_size(handle(), &n));
    return n;
  }
  std::string axisName(int axis) const {
    return detail::read_string([&](char* o, size_t c, size_t* n) { return tpu_mesh_axis_name(handle(), axis, o, c, n); });
  }
  int64_t axisSize(int axis) const {
    int64_t n = 0;
    detail::check(tpu_mesh_axis_size(handle(), axis, &n));
    return n;
  }
  int axisIndex(const std::string& name) const {
    int i = 0;
    detail::check(tpu_mesh_axis_index(handle(), name.c_str(), &i));
    return i;
  }
  std::vector<long long> coordinates(int replica, int logicalCore) const {
    std::vector<int64_t> v = detail::read_array<int64_t>([&](int64_t* o, size_t c, size_t* n) {
      return tpu_mesh_coordinates(handle(), replica, logicalCore, o, c, n);
    });
    return std::vector<long long>(v.begin(), v.end());
  }
  // The groups of a collective over the named axes; pass axisGroupMode(axes) with them.
  GroupAssignment axisGroups(const std::vector<std::string>& axes) const {
    int mode = 0;
    return axis_groups(axes, &mode);
  }
  GroupMode axisGroupMode(const std::vector<std::string>& axes) const {
    int mode = 0;
    axis_groups(axes, &mode);
    return static_cast<GroupMode>(mode);
  }
  tpu_mesh* handle() const {
    detail::check_handle(m_, "the mesh");
    return m_;
  }

 private:
  GroupAssignment axis_groups(const std::vector<std::string>& axes, int* mode) const {
    std::vector<const char*> names = detail::names_of(axes, axes.size(), "axes");
    tpu_group_assignment g{};
    detail::check(tpu_mesh_axis_groups(handle(), names.data(), detail::int_or_throw(names.size(), "axes"), &g, mode));
    return GroupAssignment(std::vector<int32_t>(g.replica_ids, g.replica_ids + int64_t(g.num_groups) * g.group_size),
                           g.num_groups, g.group_size);
  }
  tpu_mesh* m_;
};

}  // namespace tpurt

#endif  // TPURT_BINDING_SUPPORT_MESH_HPP
