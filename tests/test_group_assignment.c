/* tpu_group_assignment_validate: valid partitions and every error with its message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <tpurt.h>

#include "test_util.h"

static tpu_status validate(const int32_t *ids, int num_groups, int group_size, int num_replicas) {
  tpu_group_assignment g = {ids, num_groups, group_size};
  return tpu_group_assignment_validate(&g, num_replicas);
}

static void test_group_assignment__valid(void **state) {
  (void)state;
  const int32_t pairs[4] = {0, 1, 2, 3}, crossed[4] = {3, 0, 1, 2}, one[1] = {0};
  CHECK_OK(validate(pairs, 2, 2, 4));
  CHECK_OK(validate(pairs, 1, 4, 4));
  CHECK_OK(validate(pairs, 4, 1, 4));
  CHECK_OK(validate(crossed, 2, 2, 4));
  CHECK_OK(validate(one, 1, 1, 1));
  /* NULL means one group of every replica. */
  CHECK_OK(tpu_group_assignment_validate(NULL, 8));
}

/* Sizes around the stack bitmap's word and capacity boundaries, and a large one. */
static void test_group_assignment__sizes(void **state) {
  (void)state;
  const int sizes[] = {63, 64, 65, 128, 4095, 4096, 4097, 100000};
  for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); ++k) {
    int n = sizes[k];
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    assert_non_null(ids);
    for (int i = 0; i < n; ++i) ids[i] = n - 1 - i;
    CHECK_OK(validate(ids, 1, n, n));
    CHECK_OK(validate(ids, n, 1, n));
    ids[n / 2] = ids[0]; /* a duplicate far from its first occurrence */
    char needle[64];
    snprintf(needle, sizeof(needle), "replica %d appears twice", n - 1);
    CHECK_ERROR(validate(ids, n, 1, n), TPU_INVALID_ARGUMENT, needle);
    ids[n / 2] = n; /* just outside */
    snprintf(needle, sizeof(needle), "replica %d in group %d is outside [0, %d)", n, n / 2, n);
    CHECK_ERROR(validate(ids, n, 1, n), TPU_INVALID_ARGUMENT, needle);
    free(ids);
  }
}

static void test_group_assignment__errors(void **state) {
  (void)state;
  const int32_t dup_across[4] = {0, 3, 3, 1}, dup_within[4] = {1, 1, 0, 2};
  const int32_t outside[4] = {0, 1, 2, 5}, negative[4] = {0, -1, 2, 3};
  CHECK_ERROR(validate(dup_across, 2, 2, 4), TPU_INVALID_ARGUMENT,
                 "replica 3 appears twice in group_assignment (group 0 and group 1)");
  CHECK_ERROR(validate(dup_within, 2, 2, 4), TPU_INVALID_ARGUMENT, "replica 1 appears twice in group 0");
  CHECK_ERROR(validate(outside, 2, 2, 4), TPU_INVALID_ARGUMENT, "replica 5 in group 1 is outside [0, 4)");
  CHECK_ERROR(validate(negative, 2, 2, 4), TPU_INVALID_ARGUMENT, "replica -1 in group 0 is outside [0, 4)");
  /* Too few entries: the first id nobody claims. */
  const int32_t partial[2] = {0, 1};
  CHECK_ERROR(validate(partial, 1, 2, 4), TPU_INVALID_ARGUMENT, "replica 2 is in no group");
  const int32_t gap[3] = {3, 0, 1};
  CHECK_ERROR(validate(gap, 3, 1, 4), TPU_INVALID_ARGUMENT, "replica 2 is in no group");
  /* Too many entries: a duplicate or an outsider is always found. */
  const int32_t extra[6] = {0, 1, 2, 3, 0, 1};
  CHECK_ERROR(validate(extra, 3, 2, 4), TPU_INVALID_ARGUMENT,
                 "replica 0 appears twice in group_assignment (group 0 and group 2)");

  CHECK_ERROR(validate(dup_across, 0, 2, 4), TPU_INVALID_ARGUMENT, "0 groups");
  CHECK_ERROR(validate(dup_across, -1, 2, 4), TPU_INVALID_ARGUMENT, "-1 groups");
  CHECK_ERROR(validate(dup_across, 2, 0, 4), TPU_INVALID_ARGUMENT, "group_size must be >= 1; got 0");
  CHECK_ERROR(validate(NULL, 2, 2, 4), TPU_INVALID_ARGUMENT, "replica_ids is NULL");
  CHECK_ERROR(validate(dup_across, 2, 2, 0), TPU_INVALID_ARGUMENT, "num_replicas must be >= 1; got 0");
  CHECK_ERROR(tpu_group_assignment_validate(NULL, -3), TPU_INVALID_ARGUMENT, "num_replicas must be >= 1; got -3");
  CHECK_ERROR(validate(dup_across, 2, 2, 2147483647), TPU_INVALID_ARGUMENT, "2147483647");
}

/* Groups of different sizes (tpurt/collectives.h, issue 29): XLA's verifier checks the
 * same partition rules for them (CheckReplicaGroups in xla/service/hlo_verifier.cc: no
 * empty group, no id twice, every id named), only not the equal sizes. */
static void test_group_assignment__ragged(void **state) {
  (void)state;
  /* {{0, 1, 2}, {3}}: XLA's all-reduce test groups. */
  const int32_t ids[4] = {0, 1, 2, 3}, sizes[2] = {3, 1};
  int32_t storage[6];
  size_t count = 0;
  tpu_group_assignment g = {NULL, 0, 0};
  /* A size query, then too little room: *count either way, nothing else written. */
  CHECK_OK(tpu_group_assignment_ragged(ids, sizes, 2, NULL, 0, &count, &g));
  CHECK(count == 6 && g.replica_ids == NULL);
  count = 0;
  CHECK_ERROR(tpu_group_assignment_ragged(ids, sizes, 2, storage, 5, &count, &g), TPU_OUT_OF_RANGE,
              "needs 6");
  CHECK(count == 6 && g.replica_ids == NULL);
  CHECK_OK(tpu_group_assignment_ragged(ids, sizes, 2, storage, 6, &count, &g));
  const int32_t want[6] = {3, 0, 1, 2, 1, 3};
  CHECK(memcmp(storage, want, sizeof want) == 0);
  CHECK(g.replica_ids == storage && g.num_groups == 2 && g.group_size == TPU_GROUP_SIZE_RAGGED);
  CHECK_OK(tpu_group_assignment_validate(&g, 4));
  /* XLA's {{0}, {1, 2}, {3, 4, 5}} (collective_ops_utils_test.cc flattened_id_test_cases[0]). */
  const int32_t three[9] = {1, 0, 2, 1, 2, 3, 3, 4, 5};
  CHECK_OK(validate(three, 3, TPU_GROUP_SIZE_RAGGED, 6));
  /* Rows of one length are valid too (the uniform groups of that length). */
  const int32_t pairs[6] = {2, 1, 0, 2, 3, 2};
  CHECK_OK(validate(pairs, 2, TPU_GROUP_SIZE_RAGGED, 4));

  /* The constructor's own errors. */
  const int32_t zero[2] = {3, 0}, negative[2] = {-1, 4};
  CHECK_ERROR(tpu_group_assignment_ragged(ids, sizes, 0, storage, 6, &count, &g), TPU_INVALID_ARGUMENT,
              "num_groups is 0");
  CHECK_ERROR(tpu_group_assignment_ragged(ids, zero, 2, storage, 6, &count, &g), TPU_INVALID_ARGUMENT,
              "group_sizes[1] is 0");
  CHECK_ERROR(tpu_group_assignment_ragged(ids, negative, 2, storage, 6, &count, &g), TPU_INVALID_ARGUMENT,
              "group_sizes[0] is -1");
  CHECK_ERROR(tpu_group_assignment_ragged(NULL, sizes, 2, storage, 6, &count, &g), TPU_INVALID_ARGUMENT,
              "replica_ids");

  /* Validation, as for uniform groups: XLA's "Instruction cannot have an empty replica
   * group", "Replica %d is repeated", "Replica %d is not named". */
  const int32_t empty[5] = {0, 3, 0, 1, 2};
  CHECK_ERROR(validate(empty, 2, TPU_GROUP_SIZE_RAGGED, 3), TPU_INVALID_ARGUMENT,
              "group 0 of group_assignment has length 0");
  const int32_t dup[6] = {3, 0, 1, 2, 1, 1};
  CHECK_ERROR(validate(dup, 2, TPU_GROUP_SIZE_RAGGED, 4), TPU_INVALID_ARGUMENT,
              "replica 1 appears twice in group_assignment (group 0 and group 1)");
  const int32_t missing[5] = {3, 0, 1, 3, 0};
  CHECK_ERROR(validate(missing, 1, TPU_GROUP_SIZE_RAGGED, 4), TPU_INVALID_ARGUMENT,
              "replica 2 is in no group (group_assignment {{0,1,3}} has 3 replicas of 4)");
  const int32_t outside[6] = {3, 0, 1, 2, 1, 4};
  CHECK_ERROR(validate(outside, 2, TPU_GROUP_SIZE_RAGGED, 4), TPU_INVALID_ARGUMENT,
              "replica 4 in group 1 is outside [0, 4)");
  const int32_t long_row[3] = {9, 0, 1};
  CHECK_ERROR(validate(long_row, 1, TPU_GROUP_SIZE_RAGGED, 4), TPU_INVALID_ARGUMENT,
              "group 0 of group_assignment has length 9; it must be in [1, 4]");
  CHECK_ERROR(validate(ids, 2, -2, 4), TPU_INVALID_ARGUMENT, "group_size must be >= 1; got -2");
}

/* A failure leaves the message; a later success does not clear it (common.h). */
static void test_group_assignment__message_survives_success(void **state) {
  (void)state;
  const int32_t ids[2] = {0, 0};
  CHECK_ERROR(validate(ids, 1, 2, 2), TPU_INVALID_ARGUMENT, "appears twice");
  const int32_t good[2] = {1, 0};
  CHECK_OK(validate(good, 1, 2, 2));
  assert_non_null(strstr(tpu_last_error(), "appears twice"));
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_group_assignment__valid),
      cmocka_unit_test(test_group_assignment__sizes),
      cmocka_unit_test(test_group_assignment__errors),
      cmocka_unit_test(test_group_assignment__ragged),
      cmocka_unit_test(test_group_assignment__message_survives_success),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
