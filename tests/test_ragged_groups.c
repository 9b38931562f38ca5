/* Groups of different sizes (issue 29, tpurt/collectives.h: TPU_GROUP_SIZE_RAGGED and
 * tpu_group_assignment_ragged) in one process of 8 cores, as R replicas of k cores
 * (8 x 1, 4 x 2, 2 x 4), in every group mode that can hold them. Which collective
 * takes them follows XLA's verifier (xla/service/hlo_verifier.cc, openxla/xla):
 * - CheckReplicaGroups(hlo, mode, uniform_replica_group_size) names every id once and
 *   allows no empty group; HandleAllReduce and HandleAllReduceStart call it with
 *   uniform_replica_group_size = false: all-reduce (and cross_replica_sum, its SUM)
 *   takes groups of different sizes;
 * - CheckCommonAllGatherInvariants (all-gather), HandleReduceScatter and HandleAllToAll
 *   keep the default, true: "Replica groups expected to be of uniform size";
 * - HandleCollectiveBroadcast checks no replica groups: broadcast takes them, from a
 *   root that is a position of every group;
 * - collective-permute has pairs, not groups (CheckDuplicatedSourceOrTarget), and the
 *   barrier none.
 * The participant groups of each mode follow GetParticipatingDevices
 * (xla/service/collective_ops_utils.cc), whose tests use {{0}, {1, 2}}
 * (collective_ops_utils_test.cc; tests/test_group_modes.cc checks those tables). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tpurt.h>

#include "test_util.h"

#define NUM_CORES 8

TEST_SYSTEM_FIXTURE

static void start(void) {
  release_system(NULL);
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = NUM_CORES;
  o.collective_timeout_ms = 30000;
  tpu_status st = tpu_system_init(&o, &g_sys);
  if (st != TPU_OK) fail_msg("tpu_system_init: %s: %s", tpu_status_name(st), tpu_last_error());
}

/* R = 8 / k replicas of k cores, participant r * k + c on device r * k + c. */
static tpu_device_assignment *assignment(int k) {
  tpu_topology *topo = NULL;
  CHECK_OK(tpu_system_topology(g_sys, &topo));
  int32_t coords[NUM_CORES][4];
  for (int p = 0; p < NUM_CORES; ++p)
    CHECK_OK(tpu_topology_device_coordinates(topo, 0, p, coords[p], 4, &(size_t){0}));
  tpu_device_assignment *da = NULL;
  CHECK_OK(tpu_device_assignment_create(topo, &coords[0][0], NUM_CORES / k, k, &da));
  tpu_topology_release(topo);
  return da;
}

/* Rows of a mode's ids, at most 4 rows of 8. */
typedef struct {
  int n;
  int size[4];
  int32_t id[4][8];
} rows;

/* The ragged encoding of `g` through tpu_group_assignment_ragged. */
static tpu_group_assignment encode(const rows *g, int32_t *storage) {
  int32_t ids[32], sizes[4];
  int at = 0;
  for (int i = 0; i < g->n; ++i) {
    sizes[i] = g->size[i];
    for (int j = 0; j < g->size[i]; ++j) ids[at++] = g->id[i][j];
  }
  tpu_group_assignment out = {NULL, 0, 0};
  size_t count = 0;
  CHECK_OK(tpu_group_assignment_ragged(ids, sizes, g->n, storage, 40, &count, &out));
  return out;
}

/* Participant p's group in `mode` (include/tpurt/collectives.h, XLA's rule): its
 * members as participant ids and its position; returns the size. */
static int my_group(int mode, const rows *g, int R, int k, int p, int32_t *members, int *pos) {
  const int r = p / k, c = p % k;
  const int mine = mode == TPU_GROUP_MODE_CROSS_PARTITION ? c : mode == TPU_GROUP_MODE_FLATTENED_ID ? p : r;
  for (int i = 0; i < g->n; ++i)
    for (int j = 0; j < g->size[i]; ++j) {
      if (g->id[i][j] != mine) continue;
      int size = 0;
      for (int q = 0; q < g->size[i]; ++q) {
        const int id = g->id[i][q];
        if (mode == TPU_GROUP_MODE_CROSS_REPLICA) members[size++] = id * k + c;
        else if (mode == TPU_GROUP_MODE_CROSS_PARTITION) members[size++] = r * k + id;
        else if (mode == TPU_GROUP_MODE_FLATTENED_ID) members[size++] = id;
        else
          for (int cc = 0; cc < k; ++cc) members[size++] = id * k + cc;
      }
      *pos = mode == TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION ? j * k + c : j;
      return size;
    }
  return 0;
}

/* Integers in floats: every sum is exact, whatever the order. */
static float value(int p, int64_t i) { return (float)((p + 1) * (int)(i % 7 + 1)); }

static tpu_tensor *input(int p, int64_t n) {
  float *d = malloc((size_t)n * sizeof *d);
  for (int64_t i = 0; i < n; ++i) d[i] = value(p, i);
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, &n, 1, d, (size_t)n * sizeof *d, &t));
  free(d);
  return t;
}

static const char *mode_name(int mode) {
  static const char *const names[] = {"CROSS_REPLICA", "CROSS_PARTITION", "CROSS_REPLICA_AND_PARTITION",
                                      "FLATTENED_ID"};
  return names[mode];
}

typedef enum { RUN_ACCEPTED, RUN_ALL_GATHER, RUN_REDUCE_SCATTER, RUN_ALL_TO_ALL, RUN_BAD_ROOT } what;

typedef struct {
  int R, k, mode;
  rows groups;
  what run;
  atomic_int refused; /* participants that got the expected refusal */
} step;

#define EXPECT_FLOATS(label, t, n, want_expr)                                                       \
  do {                                                                                              \
    const void *d_ = NULL;                                                                          \
    CHECK_OK(tpu_tensor_data((t), &d_));                                                            \
    for (int64_t i = 0; i < (n); ++i) {                                                             \
      const float want_ = (want_expr), got_ = ((const float *)d_)[i];                               \
      if (got_ != want_) {                                                                          \
        CHECK_FAIL("%d x %d %s %s: participant %d element %lld is %g, want %g", s->R, s->k,         \
                   mode_name(s->mode), label, p, (long long)i, got_, want_);                        \
        break;                                                                                      \
      }                                                                                             \
    }                                                                                               \
  } while (0)

static tpu_status computation(tpu_replica_context *ctx, tpu_tensor *const *in, int nin, tpu_tensor **out,
                              int nout, void *user) {
  (void)in, (void)nin, (void)out, (void)nout;
  step *s = user;
  int r = 0, c = 0;
  CHECK_OK(tpu_replica_context_replica_id(ctx, &r));
  CHECK_OK(tpu_replica_context_logical_core(ctx, &c));
  const int p = r * s->k + c;
  int32_t storage[40], members[8];
  int pos = 0;
  tpu_group_assignment g = encode(&s->groups, storage);
  const int size = my_group(s->mode, &s->groups, s->R, s->k, p, members, &pos);
  tpu_collective_options o = TPU_COLLECTIVE_OPTIONS_INIT;
  o.group_mode = s->mode;
  tpu_tensor *x = NULL, *y = NULL;
  tpu_status st = TPU_OK;

  if (s->run != RUN_ACCEPTED) {
    x = input(p, 8 * 3);
    const char *want = "uniform size";
    switch (s->run) {
      case RUN_ALL_GATHER: st = tpu_all_gather(ctx, x, 0, &g, &y, &o); break;
      case RUN_REDUCE_SCATTER: st = tpu_reduce_scatter(ctx, x, TPU_REDUCE_SUM, 0, &g, &y, &o); break;
      case RUN_ALL_TO_ALL: st = tpu_all_to_all(ctx, x, 0, 0, size, &g, &y, &o); break;
      default: st = tpu_broadcast(ctx, x, 2, &g, &y, &o), want = "root 2 is outside group"; break;
    }
    /* Every participant finds the same fault in the same assignment: its own message. */
    if (st == TPU_INVALID_ARGUMENT && strstr(tpu_last_error(), want) != NULL) atomic_fetch_add(&s->refused, 1);
    else CHECK_FAIL("participant %d: %s \"%s\"; want INVALID_ARGUMENT with \"%s\"", p, tpu_status_name(st),
                    tpu_last_error(), want);
    tpu_tensor_release(x);
    tpu_tensor_release(y);
    return st;
  }

  /* all_reduce SUM: inline (5) and read in place, shared results (70001). */
  const int64_t counts[2] = {5, 70001};
  for (int n = 0; n < 2; ++n) {
    x = input(p, counts[n]);
    CHECK_OK(tpu_all_reduce(ctx, x, TPU_REDUCE_SUM, &g, &y, &o));
    float unit = 0;
    for (int q = 0; q < size; ++q) unit += (float)(members[q] + 1);
    EXPECT_FLOATS("all_reduce SUM", y, counts[n], unit * (float)(int)(i % 7 + 1));
    tpu_tensor_release(y), y = NULL;
    /* MAX, and cross_replica_sum (all-reduce's SUM). */
    CHECK_OK(tpu_all_reduce(ctx, x, TPU_REDUCE_MAX, &g, &y, &o));
    int top = 0;
    for (int q = 0; q < size; ++q) top = members[q] > top ? members[q] : top;
    EXPECT_FLOATS("all_reduce MAX", y, counts[n], value(top, i));
    tpu_tensor_release(y), y = NULL;
    CHECK_OK(tpu_cross_replica_sum(ctx, x, &g, &y, &o));
    EXPECT_FLOATS("cross_replica_sum", y, counts[n], unit * (float)(int)(i % 7 + 1));
    tpu_tensor_release(y), y = NULL;
    /* broadcast from position 0, which every group has. */
    CHECK_OK(tpu_broadcast(ctx, x, 0, &g, &y, &o));
    EXPECT_FLOATS("broadcast", y, counts[n], value(members[0], i));
    tpu_tensor_release(y), y = NULL;
    tpu_tensor_release(x);
  }
  (void)pos;
  return tpu_barrier(ctx, &o);
}

static tpu_status run_step(step *s) {
  tpu_device_assignment *da = assignment(s->k);
  tpu_status st = tpu_replicate(g_sys, computation, s, s->R, 0, NULL, 0, NULL, STEP_OPTIONS(da, NULL, 0));
  tpu_device_assignment_release(da);
  return st;
}

/* The layouts and, per mode, groups of different sizes in the mode's ids (a mode
 * whose ids number 2 or fewer has none). */
typedef struct {
  int R, k, mode;
  rows groups;
} layout;

static const layout kLayouts[] = {
    /* XLA's {{0}, {1, 2}} shape, bigger: 8 replicas of 1 core. */
    {8, 1, TPU_GROUP_MODE_CROSS_REPLICA, {3, {3, 1, 4}, {{7, 0, 1}, {2}, {3, 4, 5, 6}}}},
    {8, 1, TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION, {2, {1, 7}, {{5}, {0, 1, 2, 3, 4, 6, 7}}}},
    {8, 1, TPU_GROUP_MODE_FLATTENED_ID, {3, {1, 2, 5}, {{0}, {1, 2}, {3, 4, 5, 6, 7}}}},
    /* 4 replicas of 2 cores: one all-reduce per logical core, or every core of the
     * replicas, or flattened ids across replicas. */
    {4, 2, TPU_GROUP_MODE_CROSS_REPLICA, {2, {3, 1}, {{3, 0, 1}, {2}}}},
    {4, 2, TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION, {2, {1, 3}, {{2}, {1, 3, 0}}}},
    {4, 2, TPU_GROUP_MODE_FLATTENED_ID, {3, {3, 1, 4}, {{7, 2, 4}, {1}, {0, 5, 3, 6}}}},
    /* 2 replicas of 4 cores: groups of logical cores, per replica. */
    {2, 4, TPU_GROUP_MODE_CROSS_PARTITION, {2, {3, 1}, {{3, 0, 1}, {2}}}},
    {2, 4, TPU_GROUP_MODE_FLATTENED_ID, {2, {1, 7}, {{6}, {0, 1, 2, 3, 4, 5, 7}}}},
};
#define NUM_LAYOUTS (sizeof kLayouts / sizeof kLayouts[0])

/* all_reduce (SUM, MAX), cross_replica_sum and broadcast over groups of different
 * sizes, in every mode that can hold them, inline and in place. */
static void test_ragged_groups__all_reduce_and_broadcast_every_mode(void **state) {
  (void)state;
  start();
  for (size_t l = 0; l < NUM_LAYOUTS; ++l) {
    step s = {kLayouts[l].R, kLayouts[l].k, kLayouts[l].mode, kLayouts[l].groups, RUN_ACCEPTED, 0};
    tpu_status st = run_step(&s);
    CHECK_NO_WORKER_FAILURES();
    if (st != TPU_OK)
      fail_msg("%d x %d %s: %s: %s", s.R, s.k, mode_name(s.mode), tpu_status_name(st), tpu_last_error());
  }
}

/* all_gather, reduce_scatter and all_to_all refuse them, as XLA's verifier, in every
 * mode and on every participant (TPU_INVALID_ARGUMENT naming the groups); so does a
 * broadcast whose root is beyond a group. The next step works. */
static void test_ragged_groups__refused_where_xla_refuses(void **state) {
  (void)state;
  start();
  for (size_t l = 0; l < NUM_LAYOUTS; ++l)
    for (what w = RUN_ALL_GATHER; w <= RUN_BAD_ROOT; ++w) {
      step s = {kLayouts[l].R, kLayouts[l].k, kLayouts[l].mode, kLayouts[l].groups, w, 0};
      tpu_status st = run_step(&s);
      CHECK_NO_WORKER_FAILURES();
      if (st != TPU_INVALID_ARGUMENT || atomic_load(&s.refused) != NUM_CORES)
        fail_msg("%d x %d %s case %d: %s (%d refusals): %s", s.R, s.k, mode_name(s.mode), (int)w,
                 tpu_status_name(st), atomic_load(&s.refused), tpu_last_error());
    }
  /* The message names the collective, XLA's reason, the groups as given and the mode. */
  step s = {8, 1, TPU_GROUP_MODE_CROSS_REPLICA, kLayouts[0].groups, RUN_ALL_GATHER, 0};
  CHECK_ERROR(run_step(&s), TPU_INVALID_ARGUMENT,
              "all_gather needs groups of one size, as XLA's verifier (\"Replica groups expected to be of "
              "uniform size\"; only all-reduce takes groups of different sizes): group_assignment "
              "{{7,0,1},{2},{3,4,5,6}} (group mode CROSS_REPLICA)");
  CHECK_NO_WORKER_FAILURES();
  step ok = {8, 1, TPU_GROUP_MODE_CROSS_REPLICA, kLayouts[0].groups, RUN_ACCEPTED, 0};
  CHECK_OK(run_step(&ok));
  CHECK_NO_WORKER_FAILURES();
}

/* Rows of one length in the ragged encoding are the uniform groups of that length:
 * half the replicas pass {{0, 1}, {2, 3}, ...} one way, half the other, and they agree;
 * an all_gather takes them. */
static tpu_status mixed_computation(tpu_replica_context *ctx, tpu_tensor *const *in, int nin, tpu_tensor **out,
                                    int nout, void *user) {
  (void)in, (void)nin, (void)out, (void)nout, (void)user;
  int r = 0;
  CHECK_OK(tpu_replica_context_replica_id(ctx, &r));
  const int32_t uniform[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  const int32_t ragged[12] = {2, 0, 1, 2, 2, 3, 2, 4, 5, 2, 6, 7};
  tpu_group_assignment g = r % 2 ? (tpu_group_assignment){uniform, 4, 2}
                                 : (tpu_group_assignment){ragged, 4, TPU_GROUP_SIZE_RAGGED};
  tpu_tensor *x = input(r, 3), *y = NULL;
  CHECK_OK(tpu_all_reduce(ctx, x, TPU_REDUCE_SUM, &g, &y, NULL));
  const void *d = NULL;
  CHECK_OK(tpu_tensor_data(y, &d));
  const int a = r & ~1;
  for (int i = 0; i < 3; ++i) CHECK(((const float *)d)[i] == value(a, i) + value(a + 1, i));
  tpu_tensor_release(y), y = NULL;
  CHECK_OK(tpu_all_gather(ctx, x, 0, &g, &y, NULL));
  int64_t dim = 0;
  CHECK_OK(tpu_tensor_dim(y, 0, &dim));
  CHECK(dim == 6);
  tpu_tensor_release(y);
  tpu_tensor_release(x);
  return TPU_OK;
}

static void test_ragged_groups__rows_of_one_length_are_uniform(void **state) {
  (void)state;
  start();
  CHECK_OK(tpu_replicate(g_sys, mixed_computation, NULL, NUM_CORES, 0, NULL, 0, NULL, NULL));
  CHECK_NO_WORKER_FAILURES();
}

/* Participants that disagree on the groups (replica 3 passes {{0, 1, 2}, {3, ..., 7}},
 * the others pairs): TPU_INVALID_ARGUMENT on every participant, never a hang
 * or a wrong sum. */
static atomic_int g_disagreed;
static tpu_status disagree_computation(tpu_replica_context *ctx, tpu_tensor *const *in, int nin, tpu_tensor **out,
                                       int nout, void *user) {
  (void)in, (void)nin, (void)out, (void)nout, (void)user;
  int r = 0;
  CHECK_OK(tpu_replica_context_replica_id(ctx, &r));
  const int32_t pairs[8] = {0, 1, 2, 3, 4, 5, 6, 7}, ragged[10] = {3, 0, 1, 2, 5, 3, 4, 5, 6, 7};
  tpu_group_assignment g = r == 3 ? (tpu_group_assignment){ragged, 2, TPU_GROUP_SIZE_RAGGED}
                                  : (tpu_group_assignment){pairs, 4, 2};
  tpu_tensor *x = input(r, 3), *y = NULL;
  tpu_status st = tpu_all_reduce(ctx, x, TPU_REDUCE_SUM, &g, &y, NULL);
  if (st == TPU_INVALID_ARGUMENT) atomic_fetch_add(&g_disagreed, 1);
  else CHECK_FAIL("replica %d: %s \"%s\"; want INVALID_ARGUMENT", r, tpu_status_name(st), tpu_last_error());
  tpu_tensor_release(x);
  tpu_tensor_release(y);
  return st;
}

static void test_ragged_groups__participants_that_disagree(void **state) {
  (void)state;
  start();
  atomic_store(&g_disagreed, 0);
  CHECK_ERROR(tpu_replicate(g_sys, disagree_computation, NULL, NUM_CORES, 0, NULL, 0, NULL, NULL),
              TPU_INVALID_ARGUMENT, "replica");
  CHECK_NO_WORKER_FAILURES();
  /* Replicas that had not started when the step failed do not run. */
  CHECK(atomic_load(&g_disagreed) >= 1);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_ragged_groups__all_reduce_and_broadcast_every_mode, release_system),
      cmocka_unit_test_teardown(test_ragged_groups__refused_where_xla_refuses, release_system),
      cmocka_unit_test_teardown(test_ragged_groups__rows_of_one_length_are_uniform, release_system),
      cmocka_unit_test_teardown(test_ragged_groups__participants_that_disagree, release_system),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
