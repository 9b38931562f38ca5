#include "topology/group_assignment.h"

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "topology/topology.h"

namespace tpurt {

namespace {

constexpr int kStackWords = 64;  // a bitmap of 4096 replicas on the stack

// The group of entry `at` of replica_ids (for a ragged assignment: of the encoding).
int64_t group_of(const tpu_group_assignment& g, int64_t at) {
  if (g.group_size != TPU_GROUP_SIZE_RAGGED) return at / g.group_size;
  int64_t p = 0;
  for (int i = 0;; ++i) {
    p += 1 + g.replica_ids[p];
    if (at < p) return i;
  }
}

// Error path only: finds where `id` first appeared to name both groups.
[[noreturn]] void fail_duplicate(const tpu_group_assignment& g, int32_t id, int64_t at,
                                 const char* kind, const char* where) {
  int64_t first = 0;
  if (g.group_size == TPU_GROUP_SIZE_RAGGED) {
    for (int64_t p = 0;; p += 1 + g.replica_ids[p]) {
      const int32_t* row = g.replica_ids + p + 1;
      int64_t k = 0;
      while (k < g.replica_ids[p] && row[k] != id) ++k;
      if (k < g.replica_ids[p]) {
        first = p + 1 + k;
        break;
      }
    }
  } else {
    while (g.replica_ids[first] != id) ++first;
  }
  const int64_t g1 = group_of(g, first), g2 = group_of(g, at);
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
  if (g.group_size < 1 && g.group_size != TPU_GROUP_SIZE_RAGGED)
    invalid_argument("group_assignment group_size must be >= 1; got ", g.group_size,
                     " (TPU_GROUP_SIZE_RAGGED, -1, marks groups of different sizes)");
  if (g.replica_ids == nullptr) invalid_argument("group_assignment replica_ids is NULL");
  const bool ragged = g.group_size == TPU_GROUP_SIZE_RAGGED;

  const int words = (num_replicas + 63) / 64;
  uint64_t stack_bits[kStackWords];
  std::vector<uint64_t> heap_bits;
  uint64_t* seen = stack_bits;
  if (words > kStackWords) {
    heap_bits.resize(static_cast<size_t>(words));
    seen = heap_bits.data();
  }
  for (int w = 0; w < words; ++w) seen[w] = 0;

  auto check = [&](int64_t at, int64_t group) {
    const int32_t id = g.replica_ids[at];
    if (id < 0 || id >= num_replicas)
      invalid_argument(kind, " ", id, " in group ", group, " is outside [0, ", num_replicas, ")",
                       where);
    const uint64_t bit = uint64_t{1} << (id & 63);
    if (seen[id >> 6] & bit) fail_duplicate(g, id, at, kind, where);
    seen[id >> 6] |= bit;
  };
  int64_t ids = 0;
  if (ragged) {
    // Each row's length, then its ids; a length is checked before its ids are read.
    int64_t at = 0;
    for (int group = 0; group < g.num_groups; ++group) {
      const int32_t len = g.replica_ids[at++];
      if (len < 1 || len > num_replicas)
        invalid_argument("group ", group, " of group_assignment has length ", len,
                         "; it must be in [1, ", num_replicas, "]", where);
      for (int32_t k = 0; k < len; ++k) check(at++, group);
      ids += len;
    }
  } else {
    // More entries than replicas must hit a duplicate or a bad id within n + 1 reads.
    const int64_t total = int64_t{g.num_groups} * g.group_size;
    for (int64_t i = 0; i < total; ++i) check(i, i / g.group_size);
    ids = total;
  }
  if (ids < num_replicas) {
    int32_t id = 0;
    while (seen[id >> 6] & (uint64_t{1} << (id & 63))) ++id;
    if (ragged)
      invalid_argument(kind, " ", id, " is in no group (group_assignment ", groups_text(g), " has ",
                       ids, " ", kind, "s of ", num_replicas, ")", where);
    invalid_argument(kind, " ", id, " is in no group (group_assignment has ", g.num_groups,
                     " groups of ", g.group_size, " for ", num_replicas, " ", kind, "s)", where);
  }
}

int64_t ragged_length(const tpu_group_assignment& g) {
  int64_t p = 0;
  for (int i = 0; i < g.num_groups; ++i) p += 1 + g.replica_ids[p];
  return p;
}

bool uniform_form(const tpu_group_assignment& g, std::vector<int32_t>* ids, tpu_group_assignment* out) {
  int size = -1;
  bool equal = true;
  for_each_row(g, [&](int, const int32_t*, int n) {
    if (size >= 0 && n != size) equal = false;
    size = n;
  });
  if (!equal) return false;
  ids->clear();
  for_each_row(g, [&](int, const int32_t* row, int n) { ids->insert(ids->end(), row, row + n); });
  *out = {ids->data(), g.num_groups, size};
  return true;
}

std::string groups_text(const tpu_group_assignment& g) {
  std::string s = "{";
  int shown = 0;
  for_each_row(g, [&](int i, const int32_t* row, int n) {
    if (shown > 64) return;
    if (i) s += ",";
    s += "{";
    for (int k = 0; k < n && shown <= 64; ++k, ++shown) {
      if (k) s += ",";
      s += std::to_string(row[k]);
    }
    s += "}";
  });
  if (shown > 64) s += "...";
  return s + "}";
}

}  // namespace tpurt
