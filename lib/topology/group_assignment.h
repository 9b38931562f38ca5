// Group-assignment validation: on the hot path of every collective.
#pragma once

#include "tpurt/topology.h"

namespace tpurt {

// Checks that `groups` partitions the replicas [0, num_replicas): at least one group,
// positive group_size, replica_ids non-NULL, every id exactly once. NULL groups means
// one group of every replica (valid for any num_replicas >= 1). Throws
// TPU_INVALID_ARGUMENT naming the offending id and group. O(n); no heap allocation
// for n <= 4096 and no exception on success.
// kind names the ids in messages ("replica", "logical core", "flattened id"), and
// `where` is appended to them (for example " (group mode CROSS_PARTITION)").
void validate_group_assignment(const tpu_group_assignment* groups, int num_replicas,
                               const char* kind = "replica", const char* where = "");

}  // namespace tpurt
