#include "topology/group_assignment.h"

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "topology/topology.h"

namespace tpurt {

namespace {

constexpr int kStackWords = 64;  // a bitmap of 4096 replicas on the stack

// Error path only: finds where `id` first appeared to name both groups.
[[noreturn]] void fail_duplicate(const tpu_group_assignment& g, int32_t id, int64_t at,
                                 const char* kind, const char* where) {
  int64_t first = 0;
  while (g.replica_ids[first] != id) ++first;
  const int64_t g1 = first / g.group_size, g2 = at / g.group_size;
  if (g1 == g2)
    invalid_argument(kind, " ", id, " appears twice in group ", g1, " of group_assignment", where);
  invalid_argument(kind, " ", id, " appears twice in group_assignment (group ", g1, " and group ",
                   g2, ")", where);
}

}  // namespace

void validate_group_assignment(const tpu_group_assignment* groups, int num_replicas,
                               const char* kind, const char* where) {
  if (num_replicas < 1) invalid_argument("num_replicas must be >= 1; got ", num_replicas);
  if (num_replicas > kMaxDevices)
    invalid_argument("num_replicas ", num_replicas, " exceeds the supported ", kMaxDevices);
  if (groups == nullptr) return;
  const tpu_group_assignment& g = *groups;
  if (g.num_groups < 1)
    invalid_argument("group_assignment has ", g.num_groups, " groups; it needs at least one");
  if (g.group_size < 1)
    invalid_argument("group_assignment group_size must be >= 1; got ", g.group_size);
  if (g.replica_ids == nullptr) invalid_argument("group_assignment replica_ids is NULL");

  const int words = (num_replicas + 63) / 64;
  uint64_t stack_bits[kStackWords];
  std::vector<uint64_t> heap_bits;
  uint64_t* seen = stack_bits;
  if (words > kStackWords) {
    heap_bits.resize(static_cast<size_t>(words));
    seen = heap_bits.data();
  }
  for (int w = 0; w < words; ++w) seen[w] = 0;

  // More entries than replicas must hit a duplicate or a bad id within n + 1 reads.
  const int64_t total = int64_t{g.num_groups} * g.group_size;
  for (int64_t i = 0; i < total; ++i) {
    const int32_t id = g.replica_ids[i];
    if (id < 0 || id >= num_replicas)
      invalid_argument(kind, " ", id, " in group ", i / g.group_size, " is outside [0, ",
                       num_replicas, ")", where);
    const uint64_t bit = uint64_t{1} << (id & 63);
    if (seen[id >> 6] & bit) fail_duplicate(g, id, i, kind, where);
    seen[id >> 6] |= bit;
  }
  if (total < num_replicas) {
    int32_t id = 0;
    while (seen[id >> 6] & (uint64_t{1} << (id & 63))) ++id;
    invalid_argument(kind, " ", id, " is in no group (group_assignment has ", g.num_groups,
                     " groups of ", g.group_size, " for ", num_replicas, " ", kind, "s)", where);
  }
}

}  // namespace tpurt
