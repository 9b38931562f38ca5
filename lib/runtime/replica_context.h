// The state behind a tpu_replica_context handle: one per core, filled in for the
// replica the core runs in each step and valid on its worker thread for the duration
// of that computation.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

#include "core/status.h"
#include "tpurt/replicate.h"

namespace tpurt {
class Communicator;
class System;
namespace embedding {
class StepState;
}
}  // namespace tpurt

struct tpu_replica_context {
  tpurt::HandleMark<tpu_replica_context> mark;  // first: core/handle.h
  tpurt::System* system = nullptr;
  tpurt::Communicator* comm = nullptr;  // the step's communicator
  // The embedding engine's state of the step (NULL without tables); the step's run
  // holds it while this computation runs.
  tpurt::embedding::StepState* embedding_step = nullptr;
  int replica_id = 0;
  int num_replicas = 0;
  int core = 0;                         // the system core it runs on
  int logical_core = 0;                 // XLA's partition id, in [0, num_cores_per_replica)
  int num_cores_per_replica = 1;
  int participant = 0;                  // replica_id * num_cores_per_replica + logical_core
  int bf16_scope_depth = 0;             // tpu_bfloat16_scope_enter/exit nesting
  tpu_status fail_code = TPU_OK;        // set by tpu_replica_context_fail
  std::string fail_message;
  std::string device_name;              // "/job:J/replica:0/task:T/device:TPU:D"
  // Set when the step gives up on this replica (late_reason first): its collectives
  // then fail at once with TPU_ABORTED, whatever failed the step.
  std::atomic<bool> late{false};
  std::string late_reason;
};

static_assert(offsetof(tpu_replica_context, mark) == 0, "the magic word must come first");

namespace tpurt {
// The communicator of the step ctx belongs to; TPU_FAILED_PRECONDITION for a context
// used outside its computation.
inline Communicator& step_communicator(const tpu_replica_context* ctx) {
  require_not_null(ctx, "ctx");
  if (ctx->comm == nullptr)
    fail(TPU_FAILED_PRECONDITION, "replica context is not inside a running computation");
  if (ctx->late.load(std::memory_order_acquire)) fail(TPU_ABORTED, ctx->late_reason);
  return *ctx->comm;
}
}  // namespace tpurt
