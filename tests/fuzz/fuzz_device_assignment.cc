// What a caller gives to build a topology, a device assignment and a group
// assignment, under libFuzzer (tests/fuzz/fuzz.mk): the counts and arrays of
// Topology::create, DeviceAssignment::build (shape, stride, replicas, a raw
// device_order_mode) and DeviceAssignment::create, and validate_group_assignment, as
// the C API passes them. Every array holds as many entries as its counts say (the C
// API's contract); the values and counts are the fuzzer's.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "fuzz_topology_use.h"
#include "topology/group_assignment.h"

namespace {

// A count: mostly small, sometimes anything.
int count(FuzzedDataProvider& in, int small) {
  return in.ConsumeBool() ? in.ConsumeIntegralInRange<int>(-1, small) : in.ConsumeIntegral<int>();
}

int32_t value(FuzzedDataProvider& in) {
  return in.ConsumeBool() ? in.ConsumeIntegralInRange<int32_t>(-1, 8) : in.ConsumeIntegral<int32_t>();
}

std::vector<int32_t> values(FuzzedDataProvider& in, size_t n) {
  std::vector<int32_t> v(n);
  for (auto& x : v) x = value(in);
  return v;
}

// A topology from raw counts and coordinates, or a dense mesh with some devices left
// out and the rest shuffled into tasks (which mostly succeeds).
std::shared_ptr<const tpurt::Topology> topology(FuzzedDataProvider& in) {
  if (in.ConsumeBool()) {
    std::vector<int32_t> mesh = values(in, in.ConsumeIntegralInRange<size_t>(0, 5));
    const int tasks = count(in, 4), per_task = count(in, 8);
    const int64_t n = int64_t{tasks} * per_task;  // devices
    std::vector<int32_t> coords =
        values(in, n >= 0 && n <= 256 && in.ConsumeBool() ? static_cast<size_t>(n) * TPU_MESH_RANK
                                                           : in.ConsumeIntegralInRange<size_t>(0, 64));
    return tpurt::Topology::create(mesh, coords, tasks, per_task);
  }
  int32_t mesh[TPU_MESH_RANK];
  for (auto& m : mesh) m = in.ConsumeIntegralInRange<int32_t>(1, 4);
  auto dense = tpurt::Topology::local(mesh, mesh[0] * mesh[1] * mesh[2] * mesh[3]);
  const int devices = dense->num_devices();
  std::vector<int32_t> coords;
  for (int d = 0; d < devices; ++d) {
    tpurt::Coords c = dense->device_coordinates(0, d);
    coords.insert(coords.end(), c.begin(), c.end());
  }
  for (int swaps = in.ConsumeIntegralInRange(0, 8); swaps > 0; --swaps) {
    const int a = in.ConsumeIntegralInRange(0, devices - 1), b = in.ConsumeIntegralInRange(0, devices - 1);
    for (int k = 0; k < TPU_MESH_RANK; ++k) std::swap(coords[a * 4 + k], coords[b * 4 + k]);
  }
  const int per_task = in.ConsumeIntegralInRange(1, devices);
  const int tasks = in.ConsumeIntegralInRange(1, devices / per_task);
  coords.resize(static_cast<size_t>(tasks) * per_task * TPU_MESH_RANK);
  return tpurt::Topology::create(std::vector<int32_t>(mesh, mesh + TPU_MESH_RANK), coords, tasks,
                                 per_task);
}

// NULL (all ones), or an array of 0 to 5 entries.
void build(FuzzedDataProvider& in, const std::shared_ptr<const tpurt::Topology>& t) {
  std::vector<int32_t> shape = values(in, in.ConsumeIntegralInRange<size_t>(0, 5));
  std::vector<int32_t> stride = values(in, in.ConsumeIntegralInRange<size_t>(0, 5));
  const bool no_shape = in.ConsumeBool(), no_stride = in.ConsumeBool();
  const int replicas = in.ConsumeBool() ? in.ConsumeIntegralInRange(-1, t->num_devices() + 1)
                                        : in.ConsumeIntegral<int>();
  const int mode = in.ConsumeIntegralInRange(-1, 3);
  try {
    fuzz::use(tpurt::DeviceAssignment::build(
        t, no_shape ? nullptr : shape.data(), static_cast<int>(shape.size()),
        no_stride ? nullptr : stride.data(), static_cast<int>(stride.size()), replicas,
        tpurt::checked_order_mode(mode)));
  } catch (const tpurt::Error&) {
  }
}

// Coordinates of the topology's devices (by a fuzzed index) or raw values.
void create(FuzzedDataProvider& in, const std::shared_ptr<const tpurt::Topology>& t) {
  const int replicas = count(in, 8), cores = count(in, 8);
  const int64_t n = int64_t{replicas} * cores;
  const bool exact = n >= 0 && n <= 1024 && in.ConsumeBool();
  std::vector<int32_t> coords;
  const size_t entries = exact ? static_cast<size_t>(n) : in.ConsumeIntegralInRange<size_t>(0, 16);
  for (size_t i = 0; i < entries; ++i) {
    if (in.ConsumeBool() && t->num_devices() > 0) {
      const int d = in.ConsumeIntegralInRange(0, t->num_devices() - 1);
      tpurt::Coords c = t->device_coordinates(d / t->devices_per_task(), d % t->devices_per_task());
      coords.insert(coords.end(), c.begin(), c.end());
    } else {
      for (int k = 0; k < TPU_MESH_RANK; ++k) coords.push_back(value(in));
    }
  }
  try {
    if (exact && in.ConsumeBool())  // the C form: the array holds what the counts say
      fuzz::use(tpurt::DeviceAssignment::create(t, coords.empty() ? nullptr : coords.data(),
                                                replicas, cores));
    else
      fuzz::use(tpurt::DeviceAssignment::create(t, coords, replicas, cores));
  } catch (const tpurt::Error&) {
  }
}

void groups(FuzzedDataProvider& in) {
  tpu_group_assignment g;
  g.num_groups = count(in, 8);
  g.group_size = count(in, 8);
  const int replicas = in.ConsumeBool() ? count(in, 64) : in.ConsumeIntegralInRange(0, 5000);
  const int64_t n = int64_t{g.num_groups} * g.group_size;
  std::vector<int32_t> ids;
  if (n > 0 && n <= 8192)
    for (int64_t i = 0; i < n; ++i)
      ids.push_back(in.ConsumeBool() ? static_cast<int32_t>(i) : in.ConsumeIntegralInRange(-1, std::max(replicas, 0)));
  g.replica_ids = ids.empty() ? nullptr : ids.data();
  try {
    tpurt::validate_group_assignment(in.ConsumeBool() ? nullptr : &g, replicas);
  } catch (const tpurt::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  groups(in);
  std::shared_ptr<const tpurt::Topology> t;
  try {
    t = topology(in);
  } catch (const tpurt::Error&) {
    return 0;
  }
  fuzz::use(t);
  build(in, t);
  create(in, t);
  return 0;
}
