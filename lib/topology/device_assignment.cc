#include "topology/device_assignment.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

#include "core/status.h"

namespace tpurt {

namespace {

struct Chip {
  int32_t x, y, z;
};

// Every (x, y) of an X x Y layer but (0, 0), as an open ring (spec §3.4).
std::vector<Chip> open_ring_2d(int32_t X, int32_t Y, int32_t z) {
  std::vector<Chip> ret;
  ret.reserve(static_cast<size_t>(X) * Y);
  for (int32_t i = 0; i < Y / 2; ++i) {
    for (int32_t x = 1; x < X; ++x) ret.push_back({x, 2 * i, z});
    for (int32_t x = X - 1; x > 0; --x) ret.push_back({x, 2 * i + 1, z});
  }
  for (int32_t y = Y - 1; y > 0; --y) ret.push_back({0, y, z});
  return ret;
}

// TensorFlow's _ring_3d: the chips of an X x Y x Z box in ring order.
std::vector<Chip> ring_3d(int32_t X, int32_t Y, int32_t Z) {
  std::vector<Chip> ret;
  ret.reserve(static_cast<size_t>(X) * Y * Z);
  if (X == 1 && Y == 1) {
    for (int32_t z = 0; z < Z; ++z) ret.push_back({0, 0, z});
    return ret;
  }
  if (X == 1 && Z == 1) {
    for (int32_t y = 0; y < Y; ++y) ret.push_back({0, y, 0});
    return ret;
  }
  if (Y == 1 && Z == 1) {
    for (int32_t x = 0; x < X; ++x) ret.push_back({x, 0, 0});
    return ret;
  }
  auto odd = [](int32_t n) { return n > 1 && n % 2 != 0; };
  if (odd(X) || odd(Y) || odd(Z)) {
    for (int32_t z = 0; z < Z; ++z)
      for (int32_t y = 0; y < Y; ++y)
        for (int32_t x = 0; x < X; ++x) ret.push_back({x, y, z});
    return ret;
  }
  ret.push_back({0, 0, 0});
  if (Z == 1) {
    for (const Chip& c : open_ring_2d(X, Y, 0)) ret.push_back(c);
  } else if (Y == 1) {
    for (const Chip& c : open_ring_2d(X, Z, 0)) ret.push_back({c.x, 0, c.y});
  } else if (X == 1) {
    for (const Chip& c : open_ring_2d(Y, Z, 0)) ret.push_back({0, c.x, c.y});
  } else {
    for (int32_t z = 0; z < Z; ++z) {
      std::vector<Chip> layer = open_ring_2d(X, Y, z);
      if (z % 2) std::reverse(layer.begin(), layer.end());
      ret.insert(ret.end(), layer.begin(), layer.end());
    }
    for (int32_t z = Z - 1; z > 0; --z) ret.push_back({0, 0, z});
  }
  return ret;
}

void check_rank(const char* name, const int32_t* v, int len, Coords& out) {
  if (v == nullptr) {
    out.fill(1);
    return;
  }
  if (len != TPU_MESH_RANK) invalid_argument(name, " must have shape [4]; got (", len, ",)");
  std::memcpy(out.data(), v, sizeof(out));
}

void check_positive(const char* name, const Coords& v) {
  for (int32_t x : v)
    if (x < 1)
      invalid_argument(name, " must be positive; got ", name, '=',
                       format_array(v.data(), v.size()));
}

template <typename T>
int64_t product(const T& v) {
  int64_t p = 1;
  for (auto x : v) p *= x;
  return p;
}

// The greedy "as cubic as possible" replica counts per axis (spec §3.2 step 5).
Coords replica_shape_for(const std::array<int64_t, 4>& replica_counts, int num_replicas) {
  Coords shape{};
  if (num_replicas == 0) return shape;
  std::array<std::pair<int64_t, int>, 4> order;
  for (int a = 0; a < 4; ++a) order[a] = {replica_counts[a], (a + 1) % 4};
  std::sort(order.begin(), order.end());
  int64_t remaining = num_replicas;
  int dims = 4;
  for (const auto& [count, key] : order) {
    const int a = (key + 3) % 4;
    // Floating root then ceiling, as TensorFlow computes it.
    const auto target =
        static_cast<int64_t>(std::ceil(std::pow(static_cast<double>(remaining), 1.0 / dims)));
    shape[a] = static_cast<int32_t>(std::min(target, count));
    remaining = (remaining + shape[a] - 1) / shape[a];
    --dims;
  }
  if (remaining != 1)
    fail(TPU_INTERNAL, "no replica layout for ", num_replicas, " replicas with replica counts ",
         format_array(replica_counts.data(), 4));
  return shape;
}

}  // namespace

tpu_device_order_mode checked_order_mode(int mode) {
  if (mode != TPU_DEVICE_ORDER_AUTO && mode != TPU_DEVICE_ORDER_RING &&
      mode != TPU_DEVICE_ORDER_MESH)
    invalid_argument("device_order_mode ", mode, " is not AUTO (0), RING (1) or MESH (2)");
  return static_cast<tpu_device_order_mode>(mode);
}

std::shared_ptr<const DeviceAssignment> DeviceAssignment::build(
    std::shared_ptr<const Topology> topology, const int32_t* computation_shape,
    int computation_shape_len, const int32_t* computation_stride, int computation_stride_len,
    int num_replicas, tpu_device_order_mode mode) {
  require_not_null(topology.get(), "topology");
  Coords cs, st;
  check_rank("computation_shape", computation_shape, computation_shape_len, cs);
  check_rank("computation_stride", computation_stride, computation_stride_len, st);
  check_positive("computation_shape", cs);
  check_positive("computation_stride", st);
  mode = checked_order_mode(static_cast<int>(mode));
  if (num_replicas < 0) invalid_argument("num_replicas must be >= 0; got ", num_replicas);

  const Coords& mesh = topology->mesh_shape();
  const std::string mesh_str = format_array(mesh.data(), mesh.size());
  std::array<int64_t, 4> footprint, replica_counts;
  for (int a = 0; a < 4; ++a) footprint[a] = int64_t{cs[a]} * st[a];
  for (int a = 0; a < 4; ++a)
    if (footprint[a] > mesh[a])
      invalid_argument("computation footprint ", format_array(footprint.data(), 4),
                       " does not fit in TPU topology shape ", mesh_str);
  for (int a = 0; a < 4; ++a) replica_counts[a] = mesh[a] / footprint[a] * st[a];
  const int64_t max_replicas = product(replica_counts);
  if (num_replicas > max_replicas)
    invalid_argument("requested ", num_replicas, " replicas but only ", max_replicas,
                     " replicas with shape ", format_array(cs.data(), 4),
                     " and computation_stride ", format_array(st.data(), 4),
                     " fit in a TPU mesh of shape ", mesh_str);

  const int cores = static_cast<int>(product(cs));  // fits: at most the mesh volume
  std::vector<int32_t> assignment;
  assignment.reserve(static_cast<size_t>(num_replicas) * cores * TPU_MESH_RANK);
  auto append = [&](int32_t x, int32_t y, int32_t z, int32_t core) {
    assignment.insert(assignment.end(), {x, y, z, core});
  };

  if (topology->has_missing_devices()) {
    // Degraded slice: devices in task order, geometry ignored (TF asserts these).
    if (product(st) != 1)
      invalid_argument("computation_stride ", format_array(st.data(), 4),
                       " must be all ones on a topology with missing devices (",
                       topology->num_missing_devices(), " mesh positions have no device)");
    const int64_t needed = int64_t{num_replicas} * cores;
    const int devices = topology->num_devices();
    if (needed > devices)
      invalid_argument("requested ", num_replicas, " replicas of ", cores, " cores (", needed,
                       " devices) but the topology has only ", devices, " devices (",
                       topology->num_missing_devices(), " mesh positions have no device)");
    const int per_task = topology->devices_per_task();
    for (int64_t id = 0; id < needed; ++id) {
      const Coords c = topology->device_coordinates(static_cast<int>(id / per_task),
                                                    static_cast<int>(id % per_task));
      append(c[0], c[1], c[2], c[3]);
    }
    return create(std::move(topology), std::move(assignment), num_replicas, cores);
  }

  const Coords rs = replica_shape_for(replica_counts, num_replicas);
  const bool ring_ok = cs[3] == mesh[3] && product(st) == 1 && num_replicas == max_replicas;
  if (mode == TPU_DEVICE_ORDER_RING && !ring_ok)
    invalid_argument(
        "device_order_mode=DeviceOrderMode.RING is not compatible with the 3D "
        "tiling current topology (it needs full replication, no stride, and "
        "replicas spanning every core of their chips); try AUTO");

  if (ring_ok && mode != TPU_DEVICE_ORDER_MESH) {
    const std::vector<Chip> inner = ring_3d(cs[0], cs[1], cs[2]);
    const std::vector<Chip> outer = ring_3d(rs[0], rs[1], rs[2]);
    const int32_t C = mesh[3];
    for (int r = 0; r < num_replicas; ++r)
      for (int k = 0; k < cores; ++k) {
        const Chip& o = outer[r];
        const Chip& i = inner[k / C];
        append(o.x * cs[0] + i.x, o.y * cs[1] + i.y, o.z * cs[2] + i.z, k % C);
      }
  } else {
    for (int r = 0; r < num_replicas; ++r) {
      // Mixed radix, core axis least significant, then x, y, z.
      Coords pos;
      int t = r;
      for (int a : {3, 0, 1, 2}) {
        pos[a] = t % rs[a];
        t /= rs[a];
      }
      Coords origin;
      for (int a = 0; a < 4; ++a)
        origin[a] = static_cast<int32_t>(pos[a] / st[a] * footprint[a] + pos[a] % st[a]);
      // Logical cores row-major: x slowest, core fastest.
      for (int32_t i0 = 0; i0 < cs[0]; ++i0)
        for (int32_t i1 = 0; i1 < cs[1]; ++i1)
          for (int32_t i2 = 0; i2 < cs[2]; ++i2)
            for (int32_t i3 = 0; i3 < cs[3]; ++i3)
              append(origin[0] + i0 * st[0], origin[1] + i1 * st[1], origin[2] + i2 * st[2],
                     origin[3] + i3 * st[3]);
    }
  }
  return create(std::move(topology), std::move(assignment), num_replicas, cores);
}

int64_t DeviceAssignment::checked_total(const Topology* topology, int num_replicas, int num_cores) {
  require_not_null(topology, "topology");
  if (num_replicas < 0) invalid_argument("num_replicas must be >= 0; got ", num_replicas);
  if (num_cores < 1) invalid_argument("num_cores_per_replica must be >= 1; got ", num_cores);
  const int64_t total = int64_t{num_replicas} * num_cores;
  if (total > topology->num_devices())
    invalid_argument("core_assignment needs num_replicas (", num_replicas,
                     ") * num_cores_per_replica (", num_cores, ") = ", total,
                     " devices but the topology has only ", topology->num_devices());
  return total;
}

std::shared_ptr<const DeviceAssignment> DeviceAssignment::create(
    std::shared_ptr<const Topology> topology, std::vector<int32_t> core_assignment,
    int num_replicas, int num_cores_per_replica) {
  const int64_t total = checked_total(topology.get(), num_replicas, num_cores_per_replica);
  if (core_assignment.size() != static_cast<size_t>(total) * TPU_MESH_RANK)
    invalid_argument("core_assignment has ", core_assignment.size(), " entries; num_replicas (",
                     num_replicas, ") * num_cores_per_replica (", num_cores_per_replica,
                     ") * 4 = ", total * TPU_MESH_RANK);
  return index_all(std::move(topology), std::move(core_assignment), num_replicas,
                   num_cores_per_replica);
}

std::shared_ptr<const DeviceAssignment> DeviceAssignment::create(
    std::shared_ptr<const Topology> topology, const int32_t* core_assignment, int num_replicas,
    int num_cores_per_replica) {
  const int64_t total = checked_total(topology.get(), num_replicas, num_cores_per_replica);
  if (total > 0) require_not_null(core_assignment, "core_assignment");
  std::vector<int32_t> v(core_assignment, core_assignment + total * TPU_MESH_RANK);
  return index_all(std::move(topology), std::move(v), num_replicas, num_cores_per_replica);
}

std::shared_ptr<const DeviceAssignment> DeviceAssignment::in_device_order(
    std::shared_ptr<const Topology> topology, int num_replicas) {
  checked_total(topology.get(), num_replicas, 1);
  std::vector<int32_t> coords(static_cast<size_t>(num_replicas) * TPU_MESH_RANK);
  for (int r = 0; r < num_replicas; ++r) {
    const int per_task = topology->devices_per_task();
    const Coords c = topology->device_coordinates(r / per_task, r % per_task);
    std::copy(c.begin(), c.end(), &coords[static_cast<size_t>(r) * TPU_MESH_RANK]);
  }
  return index_all(std::move(topology), std::move(coords), num_replicas, 1);
}

std::shared_ptr<const DeviceAssignment> DeviceAssignment::index_all(
    std::shared_ptr<const Topology> topology, std::vector<int32_t> core_assignment,
    int num_replicas, int num_cores_per_replica) {
  const int64_t total = int64_t{num_replicas} * num_cores_per_replica;
  const int devices = topology->num_devices();
  std::shared_ptr<DeviceAssignment> da(new DeviceAssignment());
  da->num_replicas_ = num_replicas;
  da->num_cores_ = num_cores_per_replica;
  da->flat_device_.resize(static_cast<size_t>(total));
  da->placements_.reserve(static_cast<size_t>(total));
  std::vector<int32_t> user(static_cast<size_t>(devices), -1);  // device -> r * C + c
  const int per_task = topology->devices_per_task();
  auto where = [&](int64_t i) {
    return str_cat("replica ", i / num_cores_per_replica, " logical core ",
                   i % num_cores_per_replica);
  };
  for (int64_t i = 0; i < total; ++i) {
    const int32_t* c = &core_assignment[i * TPU_MESH_RANK];
    if (!topology->in_mesh(c))
      invalid_argument("device coordinate ", format_coords(c), " of ", where(i),
                       " in core_assignment is outside of mesh shape ",
                       format_array(topology->mesh_shape().data(), TPU_MESH_RANK));
    const int d = topology->flat_device_at(c);
    if (d < 0)
      invalid_argument("no TPU device found for core_assignment device coordinate ",
                       format_coords(c), " of ", where(i));
    if (user[d] >= 0)
      invalid_argument("core_assignment has duplicate device coordinate ", format_coords(c), ": ",
                       where(i), " and ", where(user[d]));
    user[d] = static_cast<int32_t>(i);
    da->flat_device_[i] = d;
    da->placements_.push_back({d / per_task, static_cast<int32_t>(i % num_cores_per_replica),
                               static_cast<int32_t>(i / num_cores_per_replica)});
  }
  auto key = [](const Placement& p) { return std::make_tuple(p.task, p.logical_core, p.replica); };
  std::sort(da->placements_.begin(), da->placements_.end(),
            [&](const Placement& a, const Placement& b) { return key(a) < key(b); });
  da->assignment_ = std::move(core_assignment);
  da->topology_ = std::move(topology);
  return da;
}

size_t DeviceAssignment::index(int replica, int logical_core) const {
  if (replica < 0 || replica >= num_replicas_)
    fail(TPU_OUT_OF_RANGE, "replica ", replica, " is outside [0, ", num_replicas_, ")");
  if (logical_core < 0 || logical_core >= num_cores_)
    fail(TPU_OUT_OF_RANGE, "logical_core ", logical_core, " is outside [0, ", num_cores_, ")");
  return static_cast<size_t>(replica) * num_cores_ + logical_core;
}

Coords DeviceAssignment::coordinates(int replica, int logical_core) const {
  Coords c;
  std::memcpy(c.data(), &assignment_[index(replica, logical_core) * TPU_MESH_RANK], sizeof(c));
  return c;
}

int DeviceAssignment::task(int replica, int logical_core) const {
  return flat_device_[index(replica, logical_core)] / topology_->devices_per_task();
}

int DeviceAssignment::tpu_ordinal(int replica, int logical_core) const {
  return flat_device_[index(replica, logical_core)] % topology_->devices_per_task();
}

std::string DeviceAssignment::tpu_device(int replica, int logical_core, const char* job) const {
  const int d = flat_device_[index(replica, logical_core)];
  const int per_task = topology_->devices_per_task();
  return tpu_device_name(job, d / per_task, d % per_task);
}

std::string DeviceAssignment::host_device(int replica, int logical_core, const char* job) const {
  return host_device_name(job, task(replica, logical_core));
}

std::vector<int> DeviceAssignment::lookup_replicas(int task, int logical_core) const {
  // One error for every miss, out-of-range task or core included, as TensorFlow has.
  auto first =
      std::lower_bound(placements_.begin(), placements_.end(), std::make_pair(task, logical_core),
                       [](const Placement& p, const std::pair<int, int>& k) {
                         return std::make_pair(p.task, p.logical_core) < k;
                       });
  std::vector<int> replicas;
  for (auto it = first;
       it != placements_.end() && it->task == task && it->logical_core == logical_core; ++it)
    replicas.push_back(it->replica);
  if (replicas.empty())
    fail(TPU_NOT_FOUND, "Can not find any replica in task: ", task,
         " contains logical_core: ", logical_core);
  return replicas;
}

}  // namespace tpurt
