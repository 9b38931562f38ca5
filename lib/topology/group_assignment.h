// Group-assignment validation: on the hot path of every collective.
#pragma once

#include "tpurt/topology.h"

namespace tpurt {

// Checks that `groups` partitions the replicas [0, num_replicas): at least one group,
// positive group_size, replica_ids non-NULL, every id exactly once. NULL groups means
// one group of every replica (valid for any num_replicas >= 1). Throws
// TPU_INVALID_ARGUMENT naming the offending id and group. O(n); no heap allocation
// for n <= 4096 and no exception on success.
void validate_group_assignment(const tpu_group_assignment* groups, int num_replicas);

}  // namespace tpurt
