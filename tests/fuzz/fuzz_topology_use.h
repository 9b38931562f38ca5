// What fuzz_topology and fuzz_device_assignment do with what they built: every
// accessor, over every device, core and replica (bounded), must answer or throw
// tpurt::Error; and a topology's bytes must parse back to the same layout.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>

#include "core/status.h"
#include "topology/device_assignment.h"
#include "topology/topology.h"

namespace fuzz {

// Bounds the work per input: topologies and assignments can hold 2^20 devices.
constexpr int kMaxVisits = 4096;

inline void use(const std::shared_ptr<const tpurt::Topology>& t) {
  (void)t->describe();
  const std::string bytes = t->serialize();
  auto again = tpurt::Topology::parse(bytes.data(), bytes.size());
  if (!again->same_layout(*t)) std::abort();
  for (int d = 0; d < t->num_devices() && d < kMaxVisits; ++d) {
    tpurt::Coords c = t->device_coordinates(d / t->devices_per_task(), d % t->devices_per_task());
    if (t->require_device_at(c.data()) != d) std::abort();
    (void)t->tpu_device_name(c.data(), "worker");
    (void)t->cpu_device_name(c.data(), nullptr);
  }
  for (int m = 0; m < t->num_missing_devices() && m < kMaxVisits; ++m) {
    tpurt::Coords c = t->missing_device(m);
    if (t->flat_device_at(c.data()) != -1) std::abort();
  }
}

inline void use(const std::shared_ptr<const tpurt::DeviceAssignment>& a) {
  const tpurt::Topology& t = *a->topology();
  int visits = 0;
  for (int r = 0; r < a->num_replicas() && visits < kMaxVisits; ++r) {
    for (int c = 0; c < a->num_cores_per_replica() && visits < kMaxVisits; ++c, ++visits) {
      tpurt::Coords xyz = a->coordinates(r, c);
      if (t.require_device_at(xyz.data()) !=
          a->task(r, c) * t.devices_per_task() + a->tpu_ordinal(r, c))
        std::abort();
      (void)a->tpu_device(r, c, "worker");
      (void)a->host_device(r, c, nullptr);
      try {
        (void)a->lookup_replicas(a->task(r, c), c);
      } catch (const tpurt::Error&) {
        std::abort();  // replica r is on that task: it must be found
      }
    }
  }
}

}  // namespace fuzz
