// Group modes turned into participant groups (lib/topology/group_modes.h), against
// XLA's own tables: each case below translates one from
// xla/service/collective_ops_utils_test.cc (openxla/xla) and cites it.
//
// Translating: XLA's tables name devices (33, 34, ...) laid out [replica][partition];
// tpurt names participant (replica r, logical core c) by its flattened id r * k + c.
// XLA's GetParticipatingDevices returns the caller's group; tpurt's
// participant_groups returns the whole assignment (or tells the caller to pass its
// groups on as they are), so a case checks the row that holds the caller, in XLA's
// order, and the whole table as a set of rows against XLA's
// GetParticipatingFlattenedIdGroups (tpurt lists the groups of one logical core, or
// of one replica, together; XLA lists each replica group's copies together: the group
// order carries no meaning). XLA's cases with groups of different sizes ({{0}, {1, 2}})
// are ragged assignments (TPU_GROUP_SIZE_RAGGED, issue 29).
//
// Then tpurt's own validation (ids of the wrong kind or range, duplicates, missing
// ids, permute pairs) with its messages, and tpu_collective_options' group_mode
// through the C API (a 1.0-sized struct reads it as 0; 7 is refused).
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "topology/group_modes.h"
#include "tpurt.h"

// After the C++ and library headers: cmocka defines a macro named fail().
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
extern "C" {
#include <cmocka.h>
}

#include "test_util.h"

namespace {

using Rows = std::vector<std::vector<int>>;

// XLA's CollectiveOpGroupMode (xla/hlo/ir/collective_op_group_mode.h): same numbers.
static_assert(TPU_GROUP_MODE_CROSS_REPLICA == 0 && TPU_GROUP_MODE_CROSS_PARTITION == 1 &&
                  TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION == 2 &&
                  TPU_GROUP_MODE_FLATTENED_ID == 3,
              "tpu_group_mode follows XLA's enum order");

// Flattens rows into a tpu_group_assignment's storage (empty rows: NULL groups); rows
// of different sizes become a ragged assignment, each row after its length.
struct Groups {
  explicit Groups(const Rows& rows) {
    bool ragged = false;
    for (const auto& row : rows) ragged |= row.size() != rows[0].size();
    for (const auto& row : rows) {
      if (ragged) ids.push_back(int32_t(row.size()));
      ids.insert(ids.end(), row.begin(), row.end());
    }
    view = {ids.data(), int(rows.size()),
            ragged ? TPU_GROUP_SIZE_RAGGED : rows.empty() ? 0 : int(rows[0].size())};
    null = rows.empty();
  }
  const tpu_group_assignment* get() const { return null ? nullptr : &view; }
  std::vector<int32_t> ids;
  tpu_group_assignment view;
  bool null;
};

// The participant groups of `rows` in `mode` as rows of flattened ids: what the
// collective ends up using, whether participant_groups translated them or said to
// pass them on (NULL groups then mean one group of everyone).
Rows participant_rows(int mode, const Rows& rows, int replicas, int cores) {
  Groups g(rows);
  tpurt::ParticipantGroups out;
  if (tpurt::participant_groups(mode, g.get(), replicas, cores, &out)) {
    Rows r(out.num_groups);
    size_t at = 0;
    for (int i = 0; i < out.num_groups; ++i) {
      const size_t size = out.group_size == TPU_GROUP_SIZE_RAGGED ? size_t(out.ids[at++]) : size_t(out.group_size);
      r[i].assign(out.ids.begin() + at, out.ids.begin() + at + size);
      at += size;
    }
    return r;
  }
  if (!rows.empty()) return rows;
  Rows all(1);
  for (int i = 0; i < replicas * cores; ++i) all[0].push_back(i);
  return all;
}

std::string str(const std::vector<int>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "}";
}

// One of XLA's GetParticipatingTest cases.
struct XlaCase {
  const char* source;  // where in collective_ops_utils_test.cc
  int mode;
  Rows devices;        // [replica][partition] device ids
  Rows groups;         // replica_groups; empty: none
  std::vector<std::pair<int, std::vector<int>>> subtests;  // caller device -> its group's devices
  Rows flattened_id_groups;                                 // GetParticipatingFlattenedIdGroups
  std::vector<int> participant_counts;                      // GetPariticipantCountsForReplicaGroups
};

void check_xla_case(const XlaCase& tc) {
  const int R = int(tc.devices.size()), k = int(tc.devices[0].size());
  auto flat = [&](int device) {
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < k; ++c)
        if (tc.devices[r][c] == device) return r * k + c;
    CHECK_FAIL("%s: device %d is not in the assignment", tc.source, device);
    return -1;
  };
  Rows got;
  try {
    got = participant_rows(tc.mode, tc.groups, R, k);
  } catch (const tpurt::Error& e) {
    CHECK_FAIL("%s: %s", tc.source, e.what());
    return;
  }
  // The caller's group, in XLA's order.
  for (const auto& [device, expected] : tc.subtests) {
    const int me = flat(device);
    std::vector<int> want;
    for (int d : expected) want.push_back(flat(d));
    const std::vector<int>* row = nullptr;
    for (const auto& r : got)
      if (std::find(r.begin(), r.end(), me) != r.end()) row = &r;
    if (row == nullptr || *row != want)
      CHECK_FAIL("%s: device %d (flattened id %d) is in %s, expected %s", tc.source, device, me,
                 row ? str(*row).c_str() : "no group", str(want).c_str());
  }
  // The whole table, as a set of rows.
  Rows a = got, b = tc.flattened_id_groups;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  if (a != b) {
    std::string s;
    for (const auto& r : got) s += str(r);
    CHECK_FAIL("%s: participant groups %s differ from XLA's flattened-id groups", tc.source,
               s.c_str());
  }
  // XLA counts the participants of each group; with groups of different sizes, as a
  // multiset of the rows' sizes.
  std::vector<int> sizes, counts = tc.participant_counts;
  for (const auto& r : got) sizes.push_back(int(r.size()));
  if (std::adjacent_find(sizes.begin(), sizes.end(), std::not_equal_to<int>()) != sizes.end()) {
    std::sort(sizes.begin(), sizes.end());
    std::sort(counts.begin(), counts.end());
    if (sizes != counts)
      CHECK_FAIL("%s: XLA counts %s participants, tpurt %s", tc.source, str(counts).c_str(),
                 str(sizes).c_str());
    return;
  }
  for (int count : tc.participant_counts)
    if (count != int(got[0].size()))
      CHECK_FAIL("%s: XLA counts %d participants per group, tpurt %zu", tc.source, count,
                 got[0].size());
}

// The device tables of GetParticipatingTest (3 replicas).
const Rows k3x1 = {{33}, {44}, {55}};
const Rows k3x2 = {{33, 34}, {44, 45}, {55, 56}};
const Rows k3x4 = {{33, 34, 35, 36}, {44, 45, 46, 47}, {55, 56, 57, 58}};

}  // namespace

// GetParticipatingTest's cross_replica_test_cases, each run by XLA twice (use_global_
// device_ids false and unset: both kCrossReplica). [2] and [3] ({{0}, {1, 2}}) have
// unequal groups: ragged assignments.
static void test_group_modes__xla_cross_replica(void** state) {
  (void)state;
  check_xla_case({"GetParticipatingTest cross_replica_test_cases[0]: 3r x 1p, no replica groups",
                  TPU_GROUP_MODE_CROSS_REPLICA, k3x1, {},
                  {{33, {33, 44, 55}}, {44, {33, 44, 55}}},
                  {{0, 1, 2}}, {3}});
  check_xla_case({"GetParticipatingTest cross_replica_test_cases[1]: 3r x 2p, no replica groups",
                  TPU_GROUP_MODE_CROSS_REPLICA, k3x2, {},
                  {{33, {33, 44, 55}}, {34, {34, 45, 56}}, {45, {34, 45, 56}}},
                  {{0, 2, 4}, {1, 3, 5}}, {3, 3}});
  check_xla_case({"GetParticipatingTest cross_replica_test_cases[2]: 3r x 1p, {{0}, {1, 2}}",
                  TPU_GROUP_MODE_CROSS_REPLICA, k3x1, {{0}, {1, 2}},
                  {{33, {33}}, {44, {44, 55}}},
                  {{0}, {1, 2}}, {1, 2}});
  check_xla_case({"GetParticipatingTest cross_replica_test_cases[3]: 3r x 2p, {{0}, {1, 2}}",
                  TPU_GROUP_MODE_CROSS_REPLICA, k3x2, {{0}, {1, 2}},
                  {{33, {33}}, {34, {34}}, {45, {45, 56}}},
                  {{0}, {1}, {2, 4}, {3, 5}}, {1, 1, 2, 2}});
  CHECK_NO_WORKER_FAILURES();
}

// GetParticipatingTest's cross_partition_test_cases[0].
static void test_group_modes__xla_cross_partition(void** state) {
  (void)state;
  check_xla_case({"GetParticipatingTest cross_partition_test_cases[0]: 3r x 4p, {{0, 1}, {2, 3}}",
                  TPU_GROUP_MODE_CROSS_PARTITION, k3x4, {{0, 1}, {2, 3}},
                  {{33, {33, 34}}, {35, {35, 36}}, {45, {44, 45}}, {47, {46, 47}}, {58, {57, 58}}},
                  {{0, 1}, {4, 5}, {8, 9}, {2, 3}, {6, 7}, {10, 11}}, {2, 2}});
  CHECK_NO_WORKER_FAILURES();
}

// GetParticipatingTest's cross_replica_and_partition_test_cases; [0] ({{0}, {1, 2}})
// has unequal groups (a ragged assignment).
static void test_group_modes__xla_cross_replica_and_partition(void** state) {
  (void)state;
  check_xla_case({"GetParticipatingTest cross_replica_and_partition_test_cases[0]: 3r x 2p, "
                  "{{0}, {1, 2}}",
                  TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION, k3x2, {{0}, {1, 2}},
                  {{33, {33, 34}}, {34, {33, 34}}, {45, {44, 45, 55, 56}}},
                  {{0, 1}, {2, 3, 4, 5}}, {2, 4}});
  check_xla_case({"GetParticipatingTest cross_replica_and_partition_test_cases[1]: 3r x 2p, "
                  "no replica groups",
                  TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION, k3x2, {},
                  {{33, {33, 34, 44, 45, 55, 56}},
                   {34, {33, 34, 44, 45, 55, 56}},
                   {56, {33, 34, 44, 45, 55, 56}}},
                  {{0, 1, 2, 3, 4, 5}}, {6}});
  CHECK_NO_WORKER_FAILURES();
}

// GetParticipatingTest's flattened_id_test_cases ([0], {{0}, {1, 2}, {3, 4, 5}}, has
// unequal groups) and CollectiveOpsUtilsTest.GetParticipatingIDs_*.
static void test_group_modes__xla_flattened_id(void** state) {
  (void)state;
  check_xla_case({"GetParticipatingTest flattened_id_test_cases[0]: 3r x 2p, {{0}, {1, 2}, {3, 4, 5}}",
                  TPU_GROUP_MODE_FLATTENED_ID, k3x2, {{0}, {1, 2}, {3, 4, 5}},
                  {{33, {33}}, {34, {34, 44}}, {44, {34, 44}}, {45, {45, 55, 56}}, {55, {45, 55, 56}},
                   {56, {45, 55, 56}}},
                  {{0}, {1, 2}, {3, 4, 5}}, {1, 2, 3}});
  // XLA: "empty replica groups not allowed" in kFlattenedID (expected_failure). tpurt
  // departs on purpose: NULL groups mean everyone in every mode (tpurt/collectives.h),
  // as GetParticipatingIDs itself does with no groups (next case).
  check_xla_case({"GetParticipatingTest flattened_id_test_cases[1]: 1r x 1p, no replica groups "
                  "(XLA refuses; tpurt: everyone)",
                  TPU_GROUP_MODE_FLATTENED_ID, {{33}}, {}, {{33, {33}}}, {{0}}, {1}});
  // GetParticipatingIDs_NoReplicaGroups: kFlattenedID, current_id 0, 3 participants.
  for (int k : {1, 3}) {
    const Rows all = participant_rows(TPU_GROUP_MODE_FLATTENED_ID, {}, 3 / k, k);
    CHECK(all == (Rows{{0, 1, 2}}));
  }
  // GetParticipatingIDs_ReplicaGroups: {{0, 4}, {1, 5}, {2, 3}}, current_id 1 -> {1, 5}.
  const Rows groups = {{0, 4}, {1, 5}, {2, 3}};
  for (int k : {1, 2, 3, 6}) {
    const Rows got = participant_rows(TPU_GROUP_MODE_FLATTENED_ID, groups, 6 / k, k);
    CHECK(got == groups);
    CHECK(got[1] == (std::vector<int>{1, 5}));
  }
  CHECK_NO_WORKER_FAILURES();
}

// GetPariticipantCountsForReplicaGroupsTest: XLA's counts are the sizes of the
// participant groups.
static void test_group_modes__xla_participant_counts(void** state) {
  (void)state;
  struct Case {
    const char* name;
    Rows groups;
    int mode, replicas, partitions;
    std::vector<int> expected;
  };
  const Case cases[] = {
      {"CrossReplicaEmptyGroup", {}, TPU_GROUP_MODE_CROSS_REPLICA, 8, 1, {8}},
      {"CrossReplicaWithPartitions", {{0, 1}, {2, 3}}, TPU_GROUP_MODE_CROSS_REPLICA, 4, 2,
       {2, 2, 2, 2}},
      {"CrossReplicaAndPartition", {{0, 1}, {2, 3}}, TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION, 4,
       2, {4, 4}},
      {"FlattenedID", {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}, TPU_GROUP_MODE_FLATTENED_ID, 4, 2,
       {1, 1, 1, 1, 1, 1, 1, 1}},
  };
  for (const Case& c : cases) {
    const Rows got = participant_rows(c.mode, c.groups, c.replicas, c.partitions);
    std::vector<int> counts;
    for (const auto& row : got) counts.push_back(int(row.size()));
    if (counts != c.expected)
      CHECK_FAIL("GetPariticipantCountsForReplicaGroups %s: %s, expected %s", c.name,
                 str(counts).c_str(), str(c.expected).c_str());
  }
  CHECK_NO_WORKER_FAILURES();
}

// IsExclusivelyCrossModuleTest and IsExclusivelyCrossReplicaTest: whether every
// participant group stays within one replica (cross-module) or within one logical
// core (cross-replica). XLA's mode there comes from (has_channel_id, use_global_ids):
// (no, no) CROSS_REPLICA, (yes, no) CROSS_REPLICA_AND_PARTITION, (yes, yes) FLATTENED_ID.
static void test_group_modes__xla_exclusively_cross_module_or_replica(void** state) {
  (void)state;
  struct Case {
    const char* name;
    int mode, replicas, partitions;
    Rows groups;
    bool cross_module, cross_replica;
  };
  const Case cases[] = {
      {"CrossReplicaNoChannelSet", TPU_GROUP_MODE_CROSS_REPLICA, 4, 2, {{0, 1}, {2, 3}}, false, true},
      {"CrossReplicaAndCrossModuleNoGlobalIds", TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION, 4, 2,
       {{0, 1}, {2, 3}}, false, false},
      {"CrossModuleNoGlobalIds", TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION, 4, 2,
       {{0}, {1}, {2}, {3}}, true, false},
      {"CrossReplicaWithGlobalIds", TPU_GROUP_MODE_FLATTENED_ID, 8, 1, {{0, 1, 2, 3, 4, 5, 6, 7}},
       false, true},
      {"CrossReplicaAndCrossModuleWithGlobalIds", TPU_GROUP_MODE_FLATTENED_ID, 4, 2,
       {{0, 1, 2, 3, 4, 5, 6, 7}}, false, false},
      {"CrossModuleWithGlobalIds", TPU_GROUP_MODE_FLATTENED_ID, 4, 2, {{0, 1}, {2, 3}, {4, 5}, {6, 7}},
       true, false},
  };
  for (const Case& c : cases) {
    const int k = c.partitions;
    bool module = true, replica = true;
    for (const auto& row : participant_rows(c.mode, c.groups, c.replicas, k))
      for (int id : row) {
        module = module && id / k == row[0] / k;
        replica = replica && id % k == row[0] % k;
      }
    if (module != c.cross_module || replica != c.cross_replica)
      CHECK_FAIL("IsExclusivelyCross*Test.%s: cross-module %d, cross-replica %d; XLA: %d, %d",
                 c.name, module, replica, c.cross_module, c.cross_replica);
  }
  CHECK_NO_WORKER_FAILURES();
}

// ---- tpurt's validation --------------------------------------------------------------

namespace {

// fn() throws TPU_INVALID_ARGUMENT whose message holds `fragment`.
void expect_invalid(const std::function<void()>& fn, const char* fragment, int line) {
  try {
    fn();
  } catch (const tpurt::Error& e) {
    if (e.code() != TPU_INVALID_ARGUMENT || e.message().find(fragment) == std::string::npos)
      tpurt_test_failed_(__FILE__, line, "gave %s \"%s\"; expected INVALID_ARGUMENT with \"%s\"",
                         tpu_status_name(e.code()), e.what(), fragment);
    return;
  }
  tpurt_test_failed_(__FILE__, line, "succeeded; expected INVALID_ARGUMENT with \"%s\"", fragment);
}
#define EXPECT_INVALID(call, fragment) expect_invalid([&] { call; }, fragment, __LINE__)

void groups_in(int mode, const Rows& rows, int replicas, int cores) {
  Groups g(rows);
  tpurt::ParticipantGroups out;
  tpurt::participant_groups(mode, g.get(), replicas, cores, &out);
}

void pairs_in(int mode, const std::vector<int32_t>& pairs, int replicas, int cores,
              std::vector<int32_t>* out = nullptr) {
  std::vector<int32_t> scratch;
  tpurt::participant_pairs(mode, pairs.data(), int(pairs.size() / 2), replicas, cores,
                           out ? out : &scratch);
}

}  // namespace

static void test_group_modes__ids_of_the_wrong_kind_or_range(void** state) {
  (void)state;
  // A core id >= k in CROSS_PARTITION.
  EXPECT_INVALID(groups_in(TPU_GROUP_MODE_CROSS_PARTITION, {{0, 2}}, 4, 2),
                 "logical core 2 in group 0 is outside [0, 2) (group mode CROSS_PARTITION)");
  // A replica id in a cross-partition group: 4 replicas of 2 cores, "replicas" {0..3}.
  EXPECT_INVALID(groups_in(TPU_GROUP_MODE_CROSS_PARTITION, {{0, 1, 2, 3}}, 4, 2),
                 "logical core 2 in group 0 is outside [0, 2) (group mode CROSS_PARTITION)");
  // Replica ids beyond the replicas, also when they would be valid flattened ids.
  EXPECT_INVALID(groups_in(TPU_GROUP_MODE_CROSS_REPLICA, {{0, 1}, {2, 3}}, 2, 2),
                 "replica 2 in group 1 is outside [0, 2) (group mode CROSS_REPLICA)");
  EXPECT_INVALID(groups_in(TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION, {{0, 4}}, 2, 2),
                 "replica 4 in group 0 is outside [0, 2) (group mode CROSS_REPLICA_AND_PARTITION)");
  EXPECT_INVALID(groups_in(TPU_GROUP_MODE_CROSS_REPLICA, {{-1, 0}}, 2, 1),
                 "replica -1 in group 0 is outside [0, 2) (group mode CROSS_REPLICA)");
  EXPECT_INVALID(groups_in(TPU_GROUP_MODE_FLATTENED_ID, {{0, 1, 2, 3}, {4, 5, 6, 8}}, 4, 2),
                 "flattened id 8 in group 1 is outside [0, 8) (group mode FLATTENED_ID)");
  // With one core per replica CROSS_PARTITION allows only {0}.
  EXPECT_INVALID(groups_in(TPU_GROUP_MODE_CROSS_PARTITION, {{0, 1}}, 2, 1),
                 "logical core 1 in group 0 is outside [0, 1)");
  groups_in(TPU_GROUP_MODE_CROSS_PARTITION, {{0}}, 2, 1);
  CHECK_NO_WORKER_FAILURES();
}

static void test_group_modes__duplicate_and_missing_ids(void** state) {
  (void)state;
  EXPECT_INVALID(groups_in(TPU_GROUP_MODE_CROSS_PARTITION, {{1, 1}}, 2, 2),
                 "logical core 1 appears twice in group 0 of group_assignment (group mode "
                 "CROSS_PARTITION)");
  EXPECT_INVALID(groups_in(TPU_GROUP_MODE_CROSS_REPLICA, {{0, 1}, {2, 0}}, 3, 2),
                 "replica 0 appears twice in group_assignment (group 0 and group 1) (group mode "
                 "CROSS_REPLICA)");
  EXPECT_INVALID(groups_in(TPU_GROUP_MODE_FLATTENED_ID, {{0, 5}, {5, 1}}, 2, 2),
                 "flattened id 5 in group 0 is outside [0, 4)");
  EXPECT_INVALID(groups_in(TPU_GROUP_MODE_FLATTENED_ID, {{0, 3}, {3, 1}}, 2, 2),
                 "flattened id 3 appears twice in group_assignment (group 0 and group 1)");
  // Missing: every id of the mode's kind must be in a group.
  EXPECT_INVALID(groups_in(TPU_GROUP_MODE_CROSS_PARTITION, {{0, 1}}, 2, 4),
                 "logical core 2 is in no group (group_assignment has 1 groups of 2 for 4 logical "
                 "cores) (group mode CROSS_PARTITION)");
  EXPECT_INVALID(groups_in(TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION, {{0}, {2}}, 3, 2),
                 "replica 1 is in no group");
  EXPECT_INVALID(groups_in(TPU_GROUP_MODE_FLATTENED_ID, {{0, 1}, {2, 3}}, 3, 2),
                 "flattened id 4 is in no group");
  CHECK_NO_WORKER_FAILURES();
}

static void test_group_modes__permute_pairs(void** state) {
  (void)state;
  std::vector<int32_t> out;
  // CROSS_REPLICA: the replica pairs, once per logical core.
  pairs_in(TPU_GROUP_MODE_CROSS_REPLICA, {0, 1, 1, 2}, 3, 2, &out);
  CHECK(out == (std::vector<int32_t>{0, 2, 2, 4, 1, 3, 3, 5}));
  // CROSS_PARTITION: the core pairs, once per replica.
  pairs_in(TPU_GROUP_MODE_CROSS_PARTITION, {0, 1, 1, 0}, 2, 2, &out);
  CHECK(out == (std::vector<int32_t>{0, 1, 1, 0, 2, 3, 3, 2}));
  // Passed on as they are: flattened ids, and replica ids with one core.
  CHECK(!tpurt::participant_pairs(TPU_GROUP_MODE_FLATTENED_ID,
                                  std::vector<int32_t>{0, 3}.data(), 1, 2, 2, &out));
  CHECK(!tpurt::participant_pairs(TPU_GROUP_MODE_CROSS_REPLICA,
                                  std::vector<int32_t>{0, 1}.data(), 1, 2, 1, &out));

  // A core named twice, as a source or as a target.
  EXPECT_INVALID(pairs_in(TPU_GROUP_MODE_CROSS_PARTITION, {0, 1, 0, 2}, 2, 3),
                 "Source 0 appears more than once (pairs 0 and 1) (group mode CROSS_PARTITION)");
  EXPECT_INVALID(pairs_in(TPU_GROUP_MODE_CROSS_PARTITION, {0, 1, 2, 1}, 2, 3),
                 "Target 1 appears more than once (pairs 0 and 1) (group mode CROSS_PARTITION)");
  EXPECT_INVALID(pairs_in(TPU_GROUP_MODE_FLATTENED_ID, {0, 1, 3, 1}, 2, 2),
                 "Target 1 appears more than once (pairs 0 and 1) (group mode FLATTENED_ID)");
  // Ids of the wrong kind or range.
  EXPECT_INVALID(pairs_in(TPU_GROUP_MODE_CROSS_PARTITION, {0, 2}, 4, 2),
                 "source_target_pairs[0] = (0, 2) names a logical core outside [0, 2) (group mode "
                 "CROSS_PARTITION)");
  EXPECT_INVALID(pairs_in(TPU_GROUP_MODE_CROSS_REPLICA, {0, 1, 2, 0}, 2, 2),
                 "source_target_pairs[1] = (2, 0) names a replica outside [0, 2) (group mode "
                 "CROSS_REPLICA)");
  EXPECT_INVALID(pairs_in(TPU_GROUP_MODE_FLATTENED_ID, {4, 0}, 2, 2),
                 "names a flattened id outside [0, 4)");
  // A permute has no CROSS_REPLICA_AND_PARTITION, as in XLA.
  EXPECT_INVALID(pairs_in(TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION, {0, 1}, 2, 2),
                 "collective_permute has no group mode CROSS_REPLICA_AND_PARTITION");
  CHECK_NO_WORKER_FAILURES();
}

static void test_group_modes__mode_values(void** state) {
  (void)state;
  for (int mode : {-1, 4, 7})
    EXPECT_INVALID(groups_in(mode, {}, 2, 2),
                   ("options->group_mode is " + std::to_string(mode)).c_str());
  EXPECT_INVALID(pairs_in(7, {0, 1}, 2, 2), "options->group_mode is 7");
  assert_string_equal(tpurt::group_mode_name(TPU_GROUP_MODE_CROSS_PARTITION), "CROSS_PARTITION");
  assert_string_equal(tpurt::participant_name(5, 2).c_str(), "replica 2 core 1");
  assert_string_equal(tpurt::participant_name(5, 1).c_str(), "replica 5");
  CHECK_NO_WORKER_FAILURES();
}

// ---- tpu_collective_options.group_mode through the C API -----------------------------

namespace {

// The 1.0 tpu_collective_options: struct_size and timeout_ms.
constexpr size_t kOptions10 = offsetof(tpu_collective_options, timeout_ms) + sizeof(int64_t);

struct SumCase {
  tpu_collective_options options;
  float got[2] = {0, 0};
  tpu_status status[2] = {TPU_OK, TPU_OK};
  char message[2][256] = {};
};

tpu_status sum_with_options(tpu_replica_context* ctx, tpu_tensor* const*, int, tpu_tensor**, int,
                            void* user) {
  SumCase* c = static_cast<SumCase*>(user);
  int r = 0;
  CHECK_OK(tpu_replica_context_replica_id(ctx, &r));
  const float v = float(r + 1);
  const int64_t dims[1] = {1};
  tpu_tensor *x = nullptr, *sum = nullptr;
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 1, &v, sizeof v, &x));
  c->status[r] = tpu_cross_replica_sum(ctx, x, nullptr, &sum, &c->options);
  snprintf(c->message[r], sizeof c->message[r], "%s", tpu_last_error());
  if (c->status[r] == TPU_OK) {
    const void* p = nullptr;
    CHECK_OK(tpu_tensor_data(sum, &p));
    c->got[r] = *static_cast<const float*>(p);
  }
  tpu_tensor_release(sum);
  tpu_tensor_release(x);
  return c->status[r];
}

}  // namespace

static tpu_system* g_sys;

static int release_system(void** state) {
  (void)state;
  tpu_system_release(g_sys);
  g_sys = nullptr;
  return 0;
}

static void test_group_modes__collective_options_sizes(void** state) {
  (void)state;
  // group_mode follows the 1.0 struct directly.
  static_assert(offsetof(tpu_collective_options, group_mode) == kOptions10, "1.3 appends");
  tpu_collective_options co;
  std::memset(&co, 0xAB, sizeof co);
  CHECK_OK(tpu_collective_options_init(&co, kOptions10)); /* a 1.0 caller's init */
  assert_int_equal(co.struct_size, kOptions10);
  assert_int_equal(co.timeout_ms, 0);
  int untouched;
  std::memset(&untouched, 0xAB, sizeof untouched);
  assert_int_equal(co.group_mode, untouched); /* beyond the caller's struct */
  CHECK_OK(tpu_collective_options_init(&co, sizeof co));
  assert_int_equal(co.group_mode, 0);
  // Below the 1.0 size or above this library's: refused.
  CHECK_ERROR(tpu_collective_options_init(&co, kOptions10 - 1), TPU_INVALID_ARGUMENT, "struct_size");
  CHECK_ERROR(tpu_collective_options_init(&co, sizeof co + 8), TPU_INVALID_ARGUMENT, "struct_size");

  tpu_system_options so = TPU_SYSTEM_OPTIONS_INIT;
  so.num_cores = 2;
  so.collective_timeout_ms = time_limit_ms(30000);
  CHECK_OK(tpu_system_init(&so, &g_sys));

  // A 1.0-sized struct: whatever lies behind it is not read, so group_mode is 0
  // (CROSS_REPLICA): the sum over both replicas, even with CROSS_PARTITION or 7 there.
  for (int behind : {int(TPU_GROUP_MODE_CROSS_PARTITION), 7}) {
    SumCase c;
    std::memset(&c.options, 0, sizeof c.options);
    c.options.struct_size = kOptions10;
    c.options.group_mode = behind;
    CHECK_OK(tpu_replicate(g_sys, sum_with_options, &c, 2, 0, nullptr, 0, nullptr, nullptr));
    CHECK_NO_WORKER_FAILURES();
    assert_true(c.got[0] == 3.0f && c.got[1] == 3.0f);
  }
  // The 1.3 size reads it: CROSS_PARTITION with one core per replica is each alone.
  {
    SumCase c;
    c.options = TPU_COLLECTIVE_OPTIONS_INIT;
    c.options.group_mode = TPU_GROUP_MODE_CROSS_PARTITION;
    CHECK_OK(tpu_replicate(g_sys, sum_with_options, &c, 2, 0, nullptr, 0, nullptr, nullptr));
    CHECK_NO_WORKER_FAILURES();
    assert_true(c.got[0] == 1.0f && c.got[1] == 2.0f);
  }
  // And refuses a value that is no mode, naming it, on every participant.
  {
    SumCase c;
    c.options = TPU_COLLECTIVE_OPTIONS_INIT;
    c.options.group_mode = 7;
    CHECK_ERROR(tpu_replicate(g_sys, sum_with_options, &c, 2, 0, nullptr, 0, nullptr, nullptr),
                TPU_INVALID_ARGUMENT, "options->group_mode is 7");
    CHECK_NO_WORKER_FAILURES();
    for (int r = 0; r < 2; ++r) {
      assert_int_equal(c.status[r], TPU_INVALID_ARGUMENT);
      assert_non_null(strstr(c.message[r], "options->group_mode is 7"));
    }
  }
}

int main(int argc, char** argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_group_modes__xla_cross_replica),
      cmocka_unit_test(test_group_modes__xla_cross_partition),
      cmocka_unit_test(test_group_modes__xla_cross_replica_and_partition),
      cmocka_unit_test(test_group_modes__xla_flattened_id),
      cmocka_unit_test(test_group_modes__xla_participant_counts),
      cmocka_unit_test(test_group_modes__xla_exclusively_cross_module_or_replica),
      cmocka_unit_test(test_group_modes__ids_of_the_wrong_kind_or_range),
      cmocka_unit_test(test_group_modes__duplicate_and_missing_ids),
      cmocka_unit_test(test_group_modes__permute_pairs),
      cmocka_unit_test(test_group_modes__mode_values),
      cmocka_unit_test_teardown(test_group_modes__collective_options_sizes, release_system),
  };
  return RUN_TESTS(argc, argv, tests, nullptr, nullptr);
}
