// Group-assignment validation: on the hot path of every collective.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tpurt/collectives.h"
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

// Groups of different sizes (group_size TPU_GROUP_SIZE_RAGGED): rows preceded by their
// lengths in replica_ids (include/tpurt/collectives.h).
inline bool is_ragged(const tpu_group_assignment* groups) {
  return groups != nullptr && groups->group_size == TPU_GROUP_SIZE_RAGGED;
}

// The rows of a valid assignment as (ids, size), uniform or ragged.
template <typename Fn>
void for_each_row(const tpu_group_assignment& g, Fn&& fn) {
  if (g.group_size != TPU_GROUP_SIZE_RAGGED) {
    for (int i = 0; i < g.num_groups; ++i)
      fn(i, g.replica_ids + int64_t(i) * g.group_size, g.group_size);
    return;
  }
  const int32_t* p = g.replica_ids;
  for (int i = 0; i < g.num_groups; ++i) {
    const int size = *p++;
    fn(i, p, size);
    p += size;
  }
}

// The length of the ragged encoding of a valid ragged assignment, in int32 values.
int64_t ragged_length(const tpu_group_assignment& g);

// When every row of a valid ragged assignment has one length, its uniform form into
// *ids and *out (pointing into *ids); false otherwise.
bool uniform_form(const tpu_group_assignment& g, std::vector<int32_t>* ids, tpu_group_assignment* out);

// "{{0,1,2},{3}}" (long assignments end in "...").
std::string groups_text(const tpu_group_assignment& g);

}  // namespace tpurt
