// XLA's collective group modes (CollectiveOpGroupMode) turned into participant
// groups, once, by the rules of GetParticipatingDevices / GetParticipatingIDs
// (xla/service/collective_ops_utils.cc). A step with R replicas of k cores has R * k
// participants; (replica r, logical core c) is participant r * k + c. Everything below
// the C API works on participant groups only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tpurt/collectives.h"

namespace tpurt {

// A group assignment over participants, owning its ids.
struct ParticipantGroups {
  std::vector<int32_t> ids;  // [num_groups][group_size], or ragged (TPU_GROUP_SIZE_RAGGED)
  int num_groups = 0;
  int group_size = 0;
  tpu_group_assignment view() const { return {ids.data(), num_groups, group_size}; }
};

// "CROSS_REPLICA", ...; "group mode 7" for a value that is not a mode.
const char* group_mode_name(int mode);

// Checks `mode` is a tpu_group_mode (TPU_INVALID_ARGUMENT naming it otherwise).
void check_group_mode(int mode);

// The participant groups of a collective called with `groups` (NULL: the mode's
// default) in `mode`, for R replicas of k cores. Validates the whole assignment in
// the mode's own ids: TPU_INVALID_ARGUMENT naming the id, its kind, the group and the
// mode. Returns false, leaving *out untouched, when the caller's groups already are
// participant groups (k == 1 in any mode but CROSS_PARTITION, or FLATTENED_ID): then
// the caller passes `groups` on as they are (validated). Groups of different sizes
// (TPU_GROUP_SIZE_RAGGED) give ragged participant groups; ragged rows of one length
// give uniform ones (true, also where the groups would have been passed on).
bool participant_groups(int mode, const tpu_group_assignment* groups, int num_replicas,
                        int cores_per_replica, ParticipantGroups* out);

// Collective-permute pairs[num_pairs][2] in `mode` as participant pairs, one permute
// per logical core (CROSS_REPLICA) or per replica (CROSS_PARTITION). Each id must be
// of the mode's kind and in range, at most once as a source and once as a target
// (TPU_INVALID_ARGUMENT naming the pair). Returns false when the pairs already are
// participant pairs (k == 1, or FLATTENED_ID); CROSS_REPLICA_AND_PARTITION is
// TPU_INVALID_ARGUMENT, as in XLA (a permute has no such mode).
bool participant_pairs(int mode, const int32_t* pairs, int num_pairs, int num_replicas,
                       int cores_per_replica, std::vector<int32_t>* out);

// Checks collective-permute pairs over ids [0, n) of `kind`: in range, each at most
// once as a source and once as a target (TPU_INVALID_ARGUMENT naming the pair; `where`
// is appended).
void check_permute_pairs(const int32_t* pairs, int num_pairs, int n, const char* kind,
                         const char* where);

// "replica R" when k == 1, else "replica R core C", for participant `id`.
std::string participant_name(int id, int cores_per_replica);

}  // namespace tpurt
