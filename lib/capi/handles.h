// Every C handle of the ABI, in one place. Two kinds:
// - A handle that names a runtime object holds a shared reference to it
//   (tpu_system, tpu_topology, tpu_device_assignment, tpu_mesh, and the feed queues,
//   which are reference-counted themselves): the shim makes and frees them, and the
//   layers below never see them.
// - tpu_tensor and tpu_replica_context are the runtime's own structs (lib/core/tensor.h,
//   lib/runtime/replica_context.h): the runtime hands them to C callbacks, so the type
//   a computation receives is the type the runtime made, with no wrapping per call.
#pragma once

#include <cstddef>
#include <memory>

#include "cluster/resolver.h"
#include "core/status.h"
#include "runtime/feed.h"
#include "runtime/system.h"
#include "topology/device_assignment.h"
#include "topology/mesh.h"
#include "topology/topology.h"

// Each begins with its magic word (core/handle.h): require_not_null checks it, and
// release poisons it.
struct tpu_system {
  tpurt::HandleMark<tpu_system> mark;
  std::shared_ptr<tpurt::System> impl;
  explicit tpu_system(std::shared_ptr<tpurt::System> s) : impl(std::move(s)) {}
};
struct tpu_topology {
  tpurt::HandleMark<tpu_topology> mark;
  std::shared_ptr<const tpurt::Topology> impl;
  explicit tpu_topology(std::shared_ptr<const tpurt::Topology> t) : impl(std::move(t)) {}
};
struct tpu_device_assignment {
  tpurt::HandleMark<tpu_device_assignment> mark;
  std::shared_ptr<const tpurt::DeviceAssignment> impl;
  explicit tpu_device_assignment(std::shared_ptr<const tpurt::DeviceAssignment> a)
      : impl(std::move(a)) {}
};
struct tpu_mesh {
  tpurt::HandleMark<tpu_mesh> mark;
  std::shared_ptr<const tpurt::Mesh> impl;
  explicit tpu_mesh(std::shared_ptr<const tpurt::Mesh> m) : impl(std::move(m)) {}
};
struct tpu_cluster_resolver {
  tpurt::HandleMark<tpu_cluster_resolver> mark;
  std::unique_ptr<tpurt::ClusterResolver> impl;
};
// A queue's handle holds one reference to it (FeedQueue::ref/unref): a step that
// still uses the queue keeps it after the handle is released.
struct tpu_infeed_queue {
  tpurt::HandleMark<tpu_infeed_queue> mark;
  tpurt::FeedQueue* impl;
  explicit tpu_infeed_queue(tpurt::FeedQueue* q) : impl(q) {}
  ~tpu_infeed_queue() { tpurt::FeedQueue::unref(impl); }
  tpu_infeed_queue(const tpu_infeed_queue&) = delete;
  tpu_infeed_queue& operator=(const tpu_infeed_queue&) = delete;
};
struct tpu_outfeed_queue {
  tpurt::HandleMark<tpu_outfeed_queue> mark;
  tpurt::FeedQueue* impl;
  explicit tpu_outfeed_queue(tpurt::FeedQueue* q) : impl(q) {}
  ~tpu_outfeed_queue() { tpurt::FeedQueue::unref(impl); }
  tpu_outfeed_queue(const tpu_outfeed_queue&) = delete;
  tpu_outfeed_queue& operator=(const tpu_outfeed_queue&) = delete;
};

namespace tpurt {
// Checks a handle that may be NULL (an optional argument, an options field).
template <typename T>
inline void require_live_or_null(const T* p, const char* name) {
  if (p != nullptr) require_not_null(p, name);
}

inline System& system_of(const tpu_system* handle) {
  require_not_null(handle, "system");
  return *handle->impl;
}
}  // namespace tpurt

// The mark at offset 0 of every handle (core/handle.h): read through a handle of
// another type, it stays inside that handle's memory. (tpu_tensor's and
// tpu_replica_context's are asserted beside their structs.)
#define TPURT_MARK_FIRST_(type) \
  static_assert(offsetof(type, mark) == 0, #type "'s magic word must come first");
TPURT_MARK_FIRST_(tpu_system)
TPURT_MARK_FIRST_(tpu_topology)
TPURT_MARK_FIRST_(tpu_device_assignment)
TPURT_MARK_FIRST_(tpu_mesh)
TPURT_MARK_FIRST_(tpu_cluster_resolver)
TPURT_MARK_FIRST_(tpu_infeed_queue)
TPURT_MARK_FIRST_(tpu_outfeed_queue)
#undef TPURT_MARK_FIRST_
