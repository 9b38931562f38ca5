// Every C handle of the ABI, in one place. Two kinds:
// - A handle that names a runtime object holds a shared reference to it
//   (tpu_system, tpu_topology, tpu_device_assignment, tpu_mesh) or is that object's C face
//   (tpu_infeed_queue, tpu_outfeed_queue): the shim makes and frees them, and the
//   layers below never see them.
// - tpu_tensor and tpu_replica_context are the runtime's own structs (lib/core/tensor.h,
//   lib/runtime/replica_context.h): the runtime hands them to C callbacks, so the type
//   a computation receives is the type the runtime made, with no wrapping per call.
#pragma once

#include <memory>

#include "cluster/resolver.h"
#include "core/status.h"
#include "runtime/feed.h"
#include "runtime/system.h"
#include "topology/device_assignment.h"
#include "topology/mesh.h"
#include "topology/topology.h"

struct tpu_system {
  std::shared_ptr<tpurt::System> impl;
};
struct tpu_topology {
  std::shared_ptr<const tpurt::Topology> impl;
};
struct tpu_device_assignment {
  std::shared_ptr<const tpurt::DeviceAssignment> impl;
};
struct tpu_mesh {
  std::shared_ptr<const tpurt::Mesh> impl;
};
struct tpu_cluster_resolver {
  std::unique_ptr<tpurt::ClusterResolver> impl;
};
struct tpu_infeed_queue : tpurt::FeedQueue {
  using FeedQueue::FeedQueue;
};
struct tpu_outfeed_queue : tpurt::FeedQueue {
  using FeedQueue::FeedQueue;
};

namespace tpurt {
inline System& system_of(const tpu_system* handle) {
  require_not_null(handle, "system");
  return *handle->impl;
}
}  // namespace tpurt
