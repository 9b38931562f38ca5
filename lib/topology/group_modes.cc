#include "topology/group_modes.h"

#include <array>

#include "core/status.h"
#include "topology/group_assignment.h"

namespace tpurt {
namespace {

// What the ids of a mode's groups are, for messages.
const char* id_kind(int mode) {
  switch (mode) {
    case TPU_GROUP_MODE_CROSS_PARTITION: return "logical core";
    case TPU_GROUP_MODE_FLATTENED_ID: return "flattened id";
    default: return "replica";
  }
}

// Built once: every collective call passes it, and str_cat per call cost ~2 us (a
// cross-partition all-reduce of 8 B between two tasks took twice a cross-replica one).
const char* where(int mode) {
  static const auto suffixes = [] {
    std::array<std::string, TPU_GROUP_MODE_FLATTENED_ID + 1> s;
    for (int m = 0; m < static_cast<int>(s.size()); ++m)
      s[m] = str_cat(" (group mode ", group_mode_name(m), ")");
    return s;
  }();
  return suffixes[mode].c_str();
}

// The ids a mode's groups range over.
int id_count(int mode, int num_replicas, int cores_per_replica) {
  switch (mode) {
    case TPU_GROUP_MODE_CROSS_PARTITION: return cores_per_replica;
    case TPU_GROUP_MODE_FLATTENED_ID: return num_replicas * cores_per_replica;
    default: return num_replicas;
  }
}

}  // namespace

const char* group_mode_name(int mode) {
  switch (mode) {
    case TPU_GROUP_MODE_CROSS_REPLICA: return "CROSS_REPLICA";
    case TPU_GROUP_MODE_CROSS_PARTITION: return "CROSS_PARTITION";
    case TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION: return "CROSS_REPLICA_AND_PARTITION";
    case TPU_GROUP_MODE_FLATTENED_ID: return "FLATTENED_ID";
    default: return "an unknown group mode";
  }
}

void check_group_mode(int mode) {
  if (mode < TPU_GROUP_MODE_CROSS_REPLICA || mode > TPU_GROUP_MODE_FLATTENED_ID)
    invalid_argument("options->group_mode is ", mode,
                     "; it must be a tpu_group_mode: TPU_GROUP_MODE_CROSS_REPLICA (0), "
                     "CROSS_PARTITION (1), CROSS_REPLICA_AND_PARTITION (2) or FLATTENED_ID (3)");
}

bool participant_groups(int mode, const tpu_group_assignment* groups, int num_replicas,
                        int cores_per_replica, ParticipantGroups* out) {
  check_group_mode(mode);
  const int k = cores_per_replica;
  const int n = id_count(mode, num_replicas, k);
  validate_group_assignment(groups, n, id_kind(mode), where(mode));
  // Rows of different sizes that all have one size are the uniform groups of it.
  std::vector<int32_t> flat;
  tpu_group_assignment uniform;
  const bool normalized = is_ragged(groups) && uniform_form(*groups, &flat, &uniform);
  if (normalized) groups = &uniform;
  const bool as_given = mode == TPU_GROUP_MODE_FLATTENED_ID ||
                        (k == 1 && mode != TPU_GROUP_MODE_CROSS_PARTITION);
  if (as_given && !normalized) return false;
  // One group of every participant in flattened order is what NULL means below: keep
  // the communicator's all-participants path (cross-partition with one replica,
  // cross-replica-and-partition over everyone).
  if (groups == nullptr && (mode == TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION ||
                            (mode == TPU_GROUP_MODE_CROSS_PARTITION && num_replicas == 1)))
    return false;

  // The caller's groups, or the mode's default: one group of every id.
  std::vector<int32_t> all;
  tpu_group_assignment everyone;
  if (groups == nullptr) {
    all.resize(n);
    for (int i = 0; i < n; ++i) all[i] = i;
    everyone = {all.data(), 1, n};
    groups = &everyone;
  }
  const bool ragged = is_ragged(groups);
  out->ids.clear();
  if (as_given) {  // normalized: the uniform form itself
    out->ids = flat;
    out->num_groups = uniform.num_groups;
    out->group_size = uniform.group_size;
    return true;
  }
  // Each row in participant ids, preceded by its length when the rows differ.
  auto emit = [&](int size, auto&& ids_of_row) {
    if (ragged) out->ids.push_back(size);
    ids_of_row();
  };
  const int num_groups = groups->num_groups;
  switch (mode) {
    case TPU_GROUP_MODE_CROSS_REPLICA:  // per logical core, the same replica groups
      out->num_groups = num_groups * k;
      out->group_size = groups->group_size;
      for (int c = 0; c < k; ++c)
        for_each_row(*groups, [&](int, const int32_t* row, int size) {
          emit(size, [&] { for (int i = 0; i < size; ++i) out->ids.push_back(row[i] * k + c); });
        });
      break;
    case TPU_GROUP_MODE_CROSS_PARTITION:  // per replica, the same core groups
      out->num_groups = num_groups * num_replicas;
      out->group_size = groups->group_size;
      for (int r = 0; r < num_replicas; ++r)
        for_each_row(*groups, [&](int, const int32_t* row, int size) {
          emit(size, [&] { for (int i = 0; i < size; ++i) out->ids.push_back(r * k + row[i]); });
        });
      break;
    default:  // CROSS_REPLICA_AND_PARTITION: every core of the group's replicas
      out->num_groups = num_groups;
      out->group_size = ragged ? TPU_GROUP_SIZE_RAGGED : groups->group_size * k;
      for_each_row(*groups, [&](int, const int32_t* row, int size) {
        emit(size * k, [&] {
          for (int i = 0; i < size; ++i)
            for (int c = 0; c < k; ++c) out->ids.push_back(row[i] * k + c);
        });
      });
      break;
  }
  return true;
}

void check_permute_pairs(const int32_t* pairs, int num_pairs, int n, const char* kind,
                         const char* where) {
  if (num_pairs < 0) invalid_argument("num_pairs must be >= 0, got ", num_pairs);
  if (num_pairs > 0) require_not_null(pairs, "source_target_pairs");
  std::vector<int> as_source(n, -1), as_target(n, -1);
  for (int i = 0; i < num_pairs; ++i) {
    const int a = pairs[2 * i], b = pairs[2 * i + 1];
    if (a < 0 || a >= n || b < 0 || b >= n)
      invalid_argument("source_target_pairs[", i, "] = (", a, ", ", b, ") names a ", kind,
                       " outside [0, ", n, ")", where);
    if (as_source[a] >= 0)
      invalid_argument("Source ", a, " appears more than once (pairs ", as_source[a], " and ", i,
                       ")", where);
    if (as_target[b] >= 0)
      invalid_argument("Target ", b, " appears more than once (pairs ", as_target[b], " and ", i,
                       ")", where);
    as_source[a] = i;
    as_target[b] = i;
  }
}

bool participant_pairs(int mode, const int32_t* pairs, int num_pairs, int num_replicas,
                       int cores_per_replica, std::vector<int32_t>* out) {
  check_group_mode(mode);
  if (mode == TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION)
    invalid_argument("collective_permute has no group mode CROSS_REPLICA_AND_PARTITION (as in "
                     "XLA): its pairs are replica ids (CROSS_REPLICA), logical-core ids "
                     "(CROSS_PARTITION) or flattened ids (FLATTENED_ID)");
  const int k = cores_per_replica;
  check_permute_pairs(pairs, num_pairs, id_count(mode, num_replicas, k), id_kind(mode),
                      where(mode));
  if (mode == TPU_GROUP_MODE_FLATTENED_ID || (k == 1 && mode == TPU_GROUP_MODE_CROSS_REPLICA))
    return false;
  out->clear();
  const int copies = mode == TPU_GROUP_MODE_CROSS_REPLICA ? k : num_replicas;
  for (int x = 0; x < copies; ++x)
    for (int i = 0; i < num_pairs; ++i)
      for (int e = 0; e < 2; ++e) {
        const int32_t v = pairs[2 * i + e];
        out->push_back(mode == TPU_GROUP_MODE_CROSS_REPLICA ? v * k + x : x * k + v);
      }
  return true;
}

std::string participant_name(int id, int cores_per_replica) {
  if (cores_per_replica <= 1) return str_cat("replica ", id);
  return str_cat("replica ", id / cores_per_replica, " core ", id % cores_per_replica);
}

}  // namespace tpurt
