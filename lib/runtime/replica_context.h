// The state behind a tpu_replica_context handle: one per replica per step, living on
// the replica's worker thread for the duration of its computation.
#pragma once

#include <string>

#include "tpurt/replicate.h"

namespace tpurt {
class Communicator;
class System;
}  // namespace tpurt

struct tpu_replica_context {
  tpurt::System* system = nullptr;
  tpurt::Communicator* comm = nullptr;  // the step's communicator
  int replica_id = 0;
  int num_replicas = 0;
  int core = 0;
  int num_cores_per_replica = 1;
  int bf16_scope_depth = 0;             // tpu_bfloat16_scope_enter/exit nesting
  tpu_status fail_code = TPU_OK;        // set by tpu_replica_context_fail
  std::string fail_message;
  std::string device_name;              // "/job:J/replica:0/task:T/device:TPU:D"
};
