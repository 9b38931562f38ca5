/* Model parallelism in one process (issue 19, items 1 and 3), from the headers
 * (tpurt/replicate.h, tpurt/collectives.h):
 * - every core of a replica runs: 8 cores as R replicas of k cores (k = 1, 2, 4, 8),
 *   device assignments made with tpu_device_assignment_create (the identity and a
 *   scrambled placement) and tpu_device_assignment_build; each (replica, logical
 *   core) runs once on the core the assignment names and its context says so;
 *   outputs without output_partitions are logical core 0's;
 * - every group mode x every collective, NULL and explicit groups, against a
 *   reference computed here from XLA's rules (GetParticipatingDevices in
 *   xla/service/collective_ops_utils.cc), with inputs that depend on the participant
 *   so that any wrong participant set or order shows;
 * - bad groups, pairs and modes, participants that disagree, a core that skips a
 *   collective, a missing core, and a failing core: named errors on every
 *   participant, never a hang, and the next step works. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tpurt.h>

#include "test_util.h"

#define NUM_CORES 8
#define MAX_P 8 /* participants: R * k is always the 8 cores */

TEST_SYSTEM_FIXTURE

static const int32_t kLinearMesh[4] = {0, 0, 0, 0}; /* the default [8, 1, 1, 1] */
static const int32_t kCubeMesh[4] = {2, 2, 1, 2};   /* x, y, z and 2 cores per chip */

static tpu_system *start(const int32_t *mesh, int64_t timeout_ms) {
  release_system(NULL);
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = NUM_CORES;
  memcpy(o.mesh_shape, mesh, sizeof o.mesh_shape);
  o.collective_timeout_ms = timeout_ms;
  tpu_status st = tpu_system_init(&o, &g_sys);
  if (st != TPU_OK) fail_msg("tpu_system_init: %s: %s", tpu_status_name(st), tpu_last_error());
  return g_sys;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static const char *mode_name(int mode) {
  static const char *const names[] = {"CROSS_REPLICA", "CROSS_PARTITION",
                                      "CROSS_REPLICA_AND_PARTITION", "FLATTENED_ID"};
  return mode >= 0 && mode < 4 ? names[mode] : "?";
}

/* ---- device assignments ------------------------------------------------------ */

typedef enum { DA_IDENTITY, DA_SCRAMBLED, DA_BUILT } da_kind;
static const char *const kDaName[] = {"create (identity)", "create (scrambled)", "build"};

/* A bijection of [0, 8) that moves every element. */
static int scramble(int i) { return (5 * i + 3) % NUM_CORES; }

/* R = 8 / k replicas of k cores on the running system. IDENTITY and SCRAMBLED place
 * participant p = r * k + c on device p (or scramble(p)) of task 0 by its
 * coordinates; BUILT asks TensorFlow's algorithm for a computation shape of k cores,
 * filling the core dimension first, then x, y, z. */
static tpu_device_assignment *make_assignment(da_kind kind, int k) {
  const int R = NUM_CORES / k;
  tpu_topology *topo = NULL;
  CHECK_OK(tpu_system_topology(g_sys, &topo));
  tpu_device_assignment *da = NULL;
  if (kind == DA_BUILT) {
    int32_t mesh[4], shape[4] = {1, 1, 1, 1};
    CHECK_OK(tpu_topology_mesh_shape(topo, mesh, 4, &(size_t){0}));
    int left = k;
    const int order[4] = {3, 0, 1, 2};
    for (int i = 0; i < 4; ++i) {
      int d = order[i];
      while (left > 1 && shape[d] * 2 <= mesh[d]) shape[d] *= 2, left /= 2;
    }
    assert_int_equal(left, 1);
    CHECK_OK(tpu_device_assignment_build(topo, shape, 4, NULL, 0, R, TPU_DEVICE_ORDER_AUTO, &da));
  } else {
    int32_t coords[NUM_CORES][4];
    for (int p = 0; p < NUM_CORES; ++p) {
      int device = kind == DA_SCRAMBLED ? scramble(p) : p;
      CHECK_OK(tpu_topology_device_coordinates(topo, 0, device, coords[p], 4, &(size_t){0}));
    }
    CHECK_OK(tpu_device_assignment_create(topo, &coords[0][0], R, k, &da));
  }
  tpu_topology_release(topo);
  int per = 0, reps = 0;
  CHECK_OK(tpu_device_assignment_num_cores_per_replica(da, &per));
  CHECK_OK(tpu_device_assignment_num_replicas(da, &reps));
  assert_int_equal(per, k);
  assert_int_equal(reps, R);
  return da;
}

static tpu_step_options step_options(const tpu_device_assignment *da, int64_t timeout_ms) {
  tpu_step_options o = TPU_STEP_OPTIONS_INIT;
  o.device_assignment = da;
  o.collective_timeout_ms = timeout_ms;
  return o;
}

/* ---- item 1: every core of a replica runs -------------------------------------- */

typedef struct {
  int R, k;
  atomic_int calls;
  atomic_int out_of_range; /* contexts whose (replica, logical core) is not in the step */
  struct {
    atomic_int runs;
    int replica, num_replicas, logical_core, per, core, num_inputs;
    float input;
    char name[160];
  } seen[MAX_P];
} ctx_case;

static tpu_tensor *int_scalar(int32_t v) {
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(TPU_INT32, NULL, 0, &v, sizeof v, &t));
  return t;
}

/* Records what the context says; outputs 1000 + 10 * replica + logical core. */
static tpu_status ctx_computation(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                  tpu_tensor **out, int no, void *user) {
  ctx_case *cc = user;
  atomic_fetch_add(&cc->calls, 1);
  int r = -1, n = -1, c = -1, per = -1, core = -1;
  CHECK_OK(tpu_replica_context_replica_id(ctx, &r));
  CHECK_OK(tpu_replica_context_num_replicas(ctx, &n));
  CHECK_OK(tpu_replica_context_logical_core(ctx, &c));
  CHECK_OK(tpu_replica_context_num_cores_per_replica(ctx, &per));
  CHECK_OK(tpu_replica_context_core(ctx, &core));
  if (r < 0 || r >= cc->R || c < 0 || c >= cc->k) {
    atomic_fetch_add(&cc->out_of_range, 1);
    return tpu_replica_context_fail(ctx, TPU_INTERNAL, "context out of range");
  }
  int p = r * cc->k + c;
  atomic_fetch_add(&cc->seen[p].runs, 1);
  cc->seen[p].replica = r;
  cc->seen[p].num_replicas = n;
  cc->seen[p].logical_core = c;
  cc->seen[p].per = per;
  cc->seen[p].core = core;
  cc->seen[p].num_inputs = ni;
  size_t len = 0;
  CHECK_OK(tpu_replica_context_device_name(ctx, cc->seen[p].name, sizeof cc->seen[p].name, &len));
  const void *data = NULL;
  if (ni == 1 && tpu_tensor_data(in[0], &data) == TPU_OK) cc->seen[p].input = *(const float *)data;
  if (no == 1) out[0] = int_scalar(1000 + 10 * r + c);
  return TPU_OK;
}

/* One step on assignment `da` (R replicas of k cores): every (r, c) ran once, on
 * the core the assignment names, with the context and input of its replica; the
 * outputs are logical core 0's. */
static void check_every_core_runs(const tpu_device_assignment *da, int R, int k, const char *what) {
  static ctx_case cc; /* atomics: zeroed below, not by an initializer */
  memset(&cc, 0, sizeof cc);
  cc.R = R;
  cc.k = k;
  tpu_tensor *in[MAX_P], *out[MAX_P] = {0};
  for (int r = 0; r < R; ++r) {
    float v = 10.0f + (float)r;
    int64_t dims[1] = {1};
    CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 1, &v, sizeof v, &in[r]));
  }
  tpu_step_options o = step_options(da, 0);
  tpu_status st = tpu_replicate(g_sys, ctx_computation, &cc, R, 1, in, 1, out, &o);
  CHECK_NO_WORKER_FAILURES();
  if (st != TPU_OK) fail_msg("%s: tpu_replicate: %s: %s", what, tpu_status_name(st), tpu_last_error());
  if (atomic_load(&cc.calls) != R * k || atomic_load(&cc.out_of_range) != 0)
    fail_msg("%s: the computation ran %d times (%d out of range); want R * k = %d", what,
             atomic_load(&cc.calls), atomic_load(&cc.out_of_range), R * k);
  int used[NUM_CORES] = {0};
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < k; ++c) {
      int p = r * k + c, ordinal = -1, task = -1;
      if (atomic_load(&cc.seen[p].runs) != 1)
        fail_msg("%s: replica %d core %d ran %d times", what, r, c, atomic_load(&cc.seen[p].runs));
      CHECK_OK(tpu_device_assignment_tpu_ordinal(da, r, c, &ordinal));
      CHECK_OK(tpu_device_assignment_task(da, r, c, &task));
      assert_int_equal(task, 0);
      if (cc.seen[p].num_replicas != R || cc.seen[p].per != k || cc.seen[p].core != ordinal ||
          cc.seen[p].num_inputs != 1 || cc.seen[p].input != 10.0f + (float)r)
        fail_msg("%s: replica %d core %d: context says num_replicas %d, cores per replica %d, "
                 "core %d, %d inputs, input %g; want %d, %d, %d, 1, %d",
                 what, r, c, cc.seen[p].num_replicas, cc.seen[p].per, cc.seen[p].core,
                 cc.seen[p].num_inputs, (double)cc.seen[p].input, R, k, ordinal, 10 + r);
      assert_true(ordinal >= 0 && ordinal < NUM_CORES);
      assert_int_equal(used[ordinal]++, 0); /* no two participants share a core */
      /* "/job:localhost/replica:0/task:T/device:TPU:D" is the assignment's
       * "/job:localhost/task:T/device:TPU:D" in TensorFlow's full form. */
      char dev[160], want[160];
      CHECK_OK(tpu_device_assignment_tpu_device(da, r, c, "localhost", dev, sizeof dev, &(size_t){0}));
      CHECK_OK(tpu_device_name("localhost", task, "TPU", ordinal, want, sizeof want, &(size_t){0}));
      const char *tail = strstr(dev, "/task:");
      if (strcmp(cc.seen[p].name, want) != 0 || tail == NULL ||
          strcmp(strstr(cc.seen[p].name, "/task:"), tail) != 0)
        fail_msg("%s: replica %d core %d: device name \"%s\"; want \"%s\" (the assignment's \"%s\")",
                 what, r, c, cc.seen[p].name, want, dev);
    }
  for (int r = 0; r < R; ++r) {
    const void *data = NULL;
    assert_non_null(out[r]);
    CHECK_OK(tpu_tensor_data(out[r], &data));
    if (*(const int32_t *)data != 1000 + 10 * r)
      fail_msg("%s: output of replica %d is %d; want logical core 0's, %d", what, r,
               *(const int32_t *)data, 1000 + 10 * r);
    tpu_tensor_release(out[r]);
    tpu_tensor_release(in[r]);
  }
}

static void test_model_parallel__every_core_runs(void **state) {
  (void)state;
  const int32_t *meshes[] = {kLinearMesh, kCubeMesh};
  const int ks[] = {2, 4, 8, 1};
  for (int mi = 0; mi < 2; ++mi) {
    start(meshes[mi], time_limit_ms(20000));
    for (int ki = 0; ki < 4; ++ki)
      for (int kind = DA_IDENTITY; kind <= DA_BUILT; ++kind) {
        char what[128];
        snprintf(what, sizeof what, "mesh %s, k = %d, %s", mi ? "[2,2,1,2]" : "[8,1,1,1]", ks[ki],
                 kDaName[kind]);
        tpu_device_assignment *da = make_assignment((da_kind)kind, ks[ki]);
        check_every_core_runs(da, NUM_CORES / ks[ki], ks[ki], what);
        tpu_device_assignment_release(da);
      }
    release_system(NULL);
  }
}

/* tpu_rewrite with an assignment of one replica of 8 cores runs all 8 too. */
static void test_model_parallel__rewrite_runs_every_core(void **state) {
  (void)state;
  start(kLinearMesh, time_limit_ms(20000));
  tpu_device_assignment *da = make_assignment(DA_SCRAMBLED, 8);
  static ctx_case cc;
  memset(&cc, 0, sizeof cc);
  cc.R = 1;
  cc.k = 8;
  tpu_step_options o = step_options(da, 0);
  tpu_tensor *out = NULL;
  CHECK_OK(tpu_rewrite(g_sys, ctx_computation, &cc, 0, NULL, 1, &out, &o));
  CHECK_NO_WORKER_FAILURES();
  assert_int_equal(atomic_load(&cc.calls), 8);
  for (int c = 0; c < 8; ++c) {
    int ordinal = -1;
    CHECK_OK(tpu_device_assignment_tpu_ordinal(da, 0, c, &ordinal));
    assert_int_equal(atomic_load(&cc.seen[c].runs), 1);
    assert_int_equal(cc.seen[c].core, ordinal);
    assert_int_equal(ordinal, scramble(c));
  }
  const void *data = NULL;
  CHECK_OK(tpu_tensor_data(out, &data));
  assert_int_equal(*(const int32_t *)data, 1000);
  tpu_tensor_release(out);
  tpu_device_assignment_release(da);
}

/* Every core of a replica gets its own handle on the replica's input: a core that
 * writes its input (tpu_tensor_mutable_data) changes neither its replica's other
 * cores' inputs nor the caller's. Each core writes, all meet, then each reads back
 * its own value. */
typedef struct {
  int k;
  atomic_int wrong;
} cow_case;

static tpu_status cow_computation(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                  tpu_tensor **out, int no, void *user) {
  cow_case *w = user;
  int r = -1, c = -1;
  tpu_replica_context_replica_id(ctx, &r);
  tpu_replica_context_logical_core(ctx, &c);
  const void *before = NULL;
  void *data = NULL;
  CHECK_OK(tpu_tensor_data(in[0], &before));
  if (before == NULL || ((const float *)before)[0] != 10.0f + (float)r) atomic_fetch_add(&w->wrong, 1);
  tpu_status st = tpu_tensor_mutable_data(in[0], &data);
  if (st != TPU_OK) return st;
  ((float *)data)[0] = (float)(-1 - (r * w->k + c));
  st = tpu_barrier(ctx, NULL); /* every core of every replica has written */
  if (st != TPU_OK) return st;
  const void *after = NULL;
  CHECK_OK(tpu_tensor_data(in[0], &after));
  if (((const float *)after)[0] != (float)(-1 - (r * w->k + c))) atomic_fetch_add(&w->wrong, 1);
  return TPU_OK;
}

static void test_model_parallel__cores_inputs_are_copy_on_write(void **state) {
  (void)state;
  start(kLinearMesh, time_limit_ms(20000));
  const int ks[] = {2, 4, 8};
  for (int ki = 0; ki < 3; ++ki) {
    const int k = ks[ki], R = NUM_CORES / k;
    tpu_device_assignment *da = make_assignment(DA_SCRAMBLED, k);
    tpu_tensor *in[MAX_P];
    for (int r = 0; r < R; ++r) {
      float v[4] = {10.0f + (float)r, 1, 2, 3};
      int64_t dims[1] = {4};
      CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 1, v, sizeof v, &in[r]));
    }
    static cow_case w;
    memset(&w, 0, sizeof w);
    w.k = k;
    tpu_step_options o = step_options(da, 0);
    CHECK_OK(tpu_replicate(g_sys, cow_computation, &w, R, 1, in, 0, NULL, &o));
    CHECK_NO_WORKER_FAILURES();
    if (atomic_load(&w.wrong) != 0)
      fail_msg("k = %d: %d core(s) saw another core's write to its input", k, atomic_load(&w.wrong));
    for (int r = 0; r < R; ++r) {
      const void *data = NULL;
      CHECK_OK(tpu_tensor_data(in[r], &data));
      if (((const float *)data)[0] != 10.0f + (float)r)
        fail_msg("k = %d: the caller's input of replica %d changed to %g", k, r,
                 (double)((const float *)data)[0]);
      tpu_tensor_release(in[r]);
    }
    tpu_device_assignment_release(da);
  }
}

/* ---- item 3: collectives in every group mode ------------------------------------ */

/* Participant p's input element i: p is a bit of element 0's sum, so a sum over a
 * wrong set of participants cannot come out right; odd, so products keep every
 * factor. Exact in float32 too (below 2^24 summed over 8). */
static int64_t in_val(int p, int64_t i) { return 4096 * ((int64_t)1 << p) + 2 * i + 1; }

#define ROWS 8 /* divisible by every group size (1, 2, 4, 8) */
#define COLS 3

enum {
  C_CRS, C_SUM, C_PROD, C_MIN, C_MAX, C_MEAN, C_GATHER, C_SCATTER_SUM, C_SCATTER_MIN, C_A2A,
  C_BCAST, C_PERMUTE, C_PERMUTE_NONE, C_BARRIER, NUM_COLL
};
static const char *const kCollName[NUM_COLL] = {
    "cross_replica_sum", "all_reduce SUM", "all_reduce PROD", "all_reduce MIN", "all_reduce MAX",
    "all_reduce MEAN", "all_gather", "reduce_scatter SUM", "reduce_scatter MIN", "all_to_all",
    "broadcast", "collective_permute", "collective_permute (no pairs)", "barrier"};

typedef struct {
  int R, k, mode;
  const tpu_collective_options *options; /* NULL for the default mode */
  const tpu_group_assignment *groups;    /* in the mode's ids */
  const int32_t *pairs;                  /* in the mode's ids */
  int num_pairs;
  int explicit_groups;
  tpu_collective_options options_store;
  tpu_group_assignment groups_store;
  int32_t ids_store[MAX_P], pairs_store[2 * MAX_P];
  /* The reference: participant groups (flattened ids, in XLA's order), and each
   * participant's permute source (-1: none). */
  int32_t ref[MAX_P][MAX_P];
  int ref_groups, ref_size;
  int src[MAX_P];
  atomic_int arrived[2];
  atomic_int runs[MAX_P];
  tpu_status status[MAX_P][NUM_COLL];
  long wrong[MAX_P][NUM_COLL]; /* wrong elements; -1: wrong dtype or shape */
  char message[MAX_P][512];
} mp_case;

/* How many ids a mode's groups hold: replicas, logical cores, or participants. */
static int id_count(int mode, int R, int k) {
  return mode == TPU_GROUP_MODE_CROSS_PARTITION ? k
         : mode == TPU_GROUP_MODE_FLATTENED_ID  ? R * k
                                                : R;
}

/* XLA's GetParticipatingDevices, as the header states it: the participant groups of
 * `groups` (NULL: one group of every id) in `mode`. */
static void reference_groups(mp_case *m) {
  const int R = m->R, k = m->k, n = id_count(m->mode, R, k);
  int ng = 1, gs = n;
  int32_t all[MAX_P];
  for (int i = 0; i < n; ++i) all[i] = i;
  const int32_t *ids = all;
  if (m->groups) {
    ng = m->groups->num_groups;
    gs = m->groups->group_size;
    ids = m->groups->replica_ids;
  }
  m->ref_groups = 0;
  switch (m->mode) {
    case TPU_GROUP_MODE_CROSS_REPLICA: /* for each partition c: (r, c) for r in group */
      for (int c = 0; c < k; ++c)
        for (int g = 0; g < ng; ++g, ++m->ref_groups)
          for (int i = 0; i < gs; ++i) m->ref[m->ref_groups][i] = ids[g * gs + i] * k + c;
      m->ref_size = gs;
      break;
    case TPU_GROUP_MODE_CROSS_PARTITION: /* for each replica r: (r, c) for c in group */
      for (int r = 0; r < R; ++r)
        for (int g = 0; g < ng; ++g, ++m->ref_groups)
          for (int i = 0; i < gs; ++i) m->ref[m->ref_groups][i] = r * k + ids[g * gs + i];
      m->ref_size = gs;
      break;
    case TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION: /* for r in group, for every c */
      for (int g = 0; g < ng; ++g, ++m->ref_groups)
        for (int i = 0; i < gs; ++i)
          for (int c = 0; c < k; ++c) m->ref[m->ref_groups][i * k + c] = ids[g * gs + i] * k + c;
      m->ref_size = gs * k;
      break;
    default: /* FLATTENED_ID: the ids are the participants */
      for (int g = 0; g < ng; ++g, ++m->ref_groups)
        for (int i = 0; i < gs; ++i) m->ref[m->ref_groups][i] = ids[g * gs + i];
      m->ref_size = gs;
  }
  /* Permute pairs: replica ids per partition, core ids per replica, or flattened. */
  for (int p = 0; p < MAX_P; ++p) m->src[p] = -1;
  for (int x = 0; x < (m->mode == TPU_GROUP_MODE_CROSS_REPLICA    ? k
                       : m->mode == TPU_GROUP_MODE_CROSS_PARTITION ? R
                                                                   : 1);
       ++x)
    for (int i = 0; i < m->num_pairs; ++i) {
      int a = m->pairs[2 * i], b = m->pairs[2 * i + 1];
      if (m->mode == TPU_GROUP_MODE_CROSS_REPLICA) a = a * k + x, b = b * k + x;
      if (m->mode == TPU_GROUP_MODE_CROSS_PARTITION) a = x * k + a, b = x * k + b;
      m->src[b] = a;
    }
}

/* p's group and its position in it; the group size, or 0 when p is in none. */
static int group_of(const mp_case *m, int p, const int32_t **members, int *pos) {
  for (int g = 0; g < m->ref_groups; ++g)
    for (int i = 0; i < m->ref_size; ++i)
      if (m->ref[g][i] == p) {
        *members = m->ref[g];
        *pos = i;
        return m->ref_size;
      }
  return 0;
}

static int64_t reduce_ref(int op, const int32_t *members, int g, int64_t i) {
  int64_t acc = in_val(members[0], i);
  for (int j = 1; j < g; ++j) {
    int64_t v = in_val(members[j], i);
    switch (op) {
      case TPU_REDUCE_SUM: case TPU_REDUCE_MEAN: acc += v; break;
      case TPU_REDUCE_PROD: acc = (int64_t)((uint64_t)acc * (uint64_t)v); break; /* wraps */
      case TPU_REDUCE_MIN: acc = v < acc ? v : acc; break;
      default: acc = v > acc ? v : acc; break;
    }
  }
  return op == TPU_REDUCE_MEAN ? acc / g : acc;
}

static tpu_tensor *make_input(tpu_dtype dtype, int p) {
  const int64_t dims[2] = {ROWS, COLS};
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(dtype, dims, 2, NULL, 0, &t));
  void *data = NULL;
  CHECK_OK(tpu_tensor_mutable_data(t, &data));
  for (int64_t i = 0; i < ROWS * COLS; ++i) {
    if (dtype == TPU_FLOAT) ((float *)data)[i] = (float)in_val(p, i);
    else ((int64_t *)data)[i] = in_val(p, i);
  }
  return t;
}

/* Participant p's result of collective `op` against the reference: the number of
 * wrong elements, -1 for a wrong dtype or shape. */
static long check_result(const mp_case *m, int op, int p, const tpu_tensor *out) {
  const int32_t *members = NULL;
  int pos = 0, g = group_of(m, p, &members, &pos);
  if (g == 0) return -1;
  const int bs = ROWS / g;
  int64_t want_dims[2] = {ROWS, COLS};
  if (op == C_GATHER) want_dims[1] = COLS * g;
  if (op == C_SCATTER_SUM || op == C_SCATTER_MIN) want_dims[0] = bs;
  if (op == C_A2A) want_dims[0] = bs, want_dims[1] = COLS * g;
  tpu_dtype dtype = 0;
  int64_t dims[2] = {0};
  size_t rank = 0;
  tpu_tensor_dtype(out, &dtype);
  if (tpu_tensor_dims(out, dims, 2, &rank) != TPU_OK || rank != 2 || dims[0] != want_dims[0] ||
      dims[1] != want_dims[1] || dtype != (op == C_CRS ? TPU_FLOAT : TPU_INT64))
    return -1;
  const void *data = NULL;
  tpu_tensor_data(out, &data);
  long wrong = 0;
  for (int64_t row = 0; row < dims[0]; ++row)
    for (int64_t col = 0; col < dims[1]; ++col) {
      int64_t f = row * dims[1] + col, want = 0;
      switch (op) {
        case C_CRS: want = reduce_ref(TPU_REDUCE_SUM, members, g, f); break;
        case C_SUM: case C_PROD: case C_MIN: case C_MAX: case C_MEAN:
          want = reduce_ref(op - C_SUM + TPU_REDUCE_SUM, members, g, f);
          break;
        case C_GATHER: want = in_val(members[col / COLS], row * COLS + col % COLS); break;
        case C_SCATTER_SUM: case C_SCATTER_MIN:
          want = reduce_ref(op == C_SCATTER_SUM ? TPU_REDUCE_SUM : TPU_REDUCE_MIN, members, g,
                            (pos * bs + row) * COLS + col);
          break;
        case C_A2A: want = in_val(members[col / COLS], (pos * bs + row) * COLS + col % COLS); break;
        case C_BCAST: want = in_val(members[g - 1], f); break;
        case C_PERMUTE: want = m->src[p] < 0 ? 0 : in_val(m->src[p], f); break;
        default: want = 0; break; /* nobody sends: zeros */
      }
      int64_t got = op == C_CRS ? (int64_t)((const float *)data)[f] : ((const int64_t *)data)[f];
      if (op == C_CRS && ((const float *)data)[f] != (float)want) got = want + 1;
      wrong += got != want;
    }
  return wrong;
}

static tpu_status run_one(tpu_replica_context *ctx, mp_case *m, int op, int p, tpu_tensor *xf,
                          tpu_tensor *xi, tpu_tensor **out) {
  const tpu_collective_options *o = m->options;
  const int32_t *members = NULL;
  int pos = 0, g = group_of(m, p, &members, &pos);
  switch (op) {
    case C_CRS: return tpu_cross_replica_sum(ctx, xf, m->groups, out, o);
    case C_SUM: case C_PROD: case C_MIN: case C_MAX: case C_MEAN:
      return tpu_all_reduce(ctx, xi, (tpu_reduce_op)(op - C_SUM + TPU_REDUCE_SUM), m->groups, out, o);
    case C_GATHER: return tpu_all_gather(ctx, xi, 1, m->groups, out, o);
    case C_SCATTER_SUM: return tpu_reduce_scatter(ctx, xi, TPU_REDUCE_SUM, 0, m->groups, out, o);
    case C_SCATTER_MIN: return tpu_reduce_scatter(ctx, xi, TPU_REDUCE_MIN, 0, m->groups, out, o);
    case C_A2A: return tpu_all_to_all(ctx, xi, 1, 0, g, m->groups, out, o);
    case C_BCAST: return tpu_broadcast(ctx, xi, g - 1, m->groups, out, o);
    case C_PERMUTE: return tpu_collective_permute(ctx, xi, m->pairs, m->num_pairs, out, o);
    case C_PERMUTE_NONE: return tpu_collective_permute(ctx, xi, NULL, 0, out, o);
    default: { /* every participant meets, whatever the mode: twice, counted */
      int total = m->R * m->k;
      for (int round = 0; round < 2; ++round) {
        atomic_fetch_add(&m->arrived[round], 1);
        tpu_status st = tpu_barrier(ctx, o);
        if (st != TPU_OK) return st;
        if (atomic_load(&m->arrived[round]) != total) m->wrong[p][op] += 1;
      }
      return TPU_OK;
    }
  }
}

/* Every collective of case m in turn, as participant p; a permute has no
 * CROSS_REPLICA_AND_PARTITION mode. */
static tpu_status run_case_ops(tpu_replica_context *ctx, mp_case *m, int p) {
  atomic_fetch_add(&m->runs[p], 1);
  tpu_tensor *xf = make_input(TPU_FLOAT, p), *xi = make_input(TPU_INT64, p);
  tpu_status st = TPU_OK;
  for (int op = 0; op < NUM_COLL && st == TPU_OK; ++op) {
    if ((op == C_PERMUTE || op == C_PERMUTE_NONE) &&
        m->mode == TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION)
      continue;
    tpu_tensor *out = NULL;
    st = run_one(ctx, m, op, p, xf, xi, &out);
    m->status[p][op] = st;
    if (st != TPU_OK)
      snprintf(m->message[p], sizeof m->message[p], "%s: %s", kCollName[op], tpu_last_error());
    else if (op != C_BARRIER)
      m->wrong[p][op] = check_result(m, op, p, out);
    tpu_tensor_release(out);
  }
  tpu_tensor_release(xf);
  tpu_tensor_release(xi);
  return st;
}

/* This participant's flattened id, or -1 (after failing the step) when the context
 * names one outside R replicas of k cores. */
static int participant(tpu_replica_context *ctx, int R, int k) {
  int r = -1, c = -1;
  tpu_replica_context_replica_id(ctx, &r);
  tpu_replica_context_logical_core(ctx, &c);
  if (r < 0 || r >= R || c < 0 || c >= k) {
    tpu_replica_context_fail(ctx, TPU_INTERNAL, "context out of range");
    return -1;
  }
  return r * k + c;
}

static tpu_status mp_computation(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                 tpu_tensor **outs, int no, void *user) {
  mp_case *m = user;
  const int p = participant(ctx, m->R, m->k);
  return p < 0 ? TPU_INTERNAL : run_case_ops(ctx, m, p);
}

/* A scrambled order of [0, n) (the identity for n = 1). */
static void scrambled_ids(int n, int32_t *ids) {
  for (int i = 0; i < n; ++i) ids[i] = n % 3 ? (3 * i + 1) % n : n - 1 - i;
}

/* Case m: every collective in `mode` with NULL groups (and ring pairs) or with
 * explicit scrambled groups (and chain pairs), and its reference. options NULL for
 * CROSS_REPLICA without groups: the default. */
static void prepare_case(mp_case *m, int R, int k, int mode, int explicit_groups) {
  memset(m, 0, sizeof *m);
  m->R = R;
  m->k = k;
  m->mode = mode;
  m->explicit_groups = explicit_groups;
  tpu_collective_options o = TPU_COLLECTIVE_OPTIONS_INIT;
  o.group_mode = mode;
  m->options_store = o;
  m->options = mode == TPU_GROUP_MODE_CROSS_REPLICA && !explicit_groups ? NULL : &m->options_store;
  const int n = id_count(mode, R, k);
  int32_t *ids = m->ids_store, *pairs = m->pairs_store;
  m->groups_store = (tpu_group_assignment){ids, n >= 4 ? 2 : 1, n >= 4 ? n / 2 : n};
  scrambled_ids(n, ids);
  if (explicit_groups) {
    m->groups = &m->groups_store;
    for (int i = 0; i + 1 < n; ++i) pairs[2 * i] = ids[i], pairs[2 * i + 1] = ids[i + 1];
    m->num_pairs = n - 1; /* a chain: its first member receives zeros */
  } else {
    for (int i = 0; i < n; ++i) pairs[2 * i] = i, pairs[2 * i + 1] = (i + 1) % n;
    m->num_pairs = n; /* a ring (n = 1: to itself) */
  }
  m->pairs = pairs;
  reference_groups(m);
}

/* Prints what went wrong in case m (each participant ran its collectives once, all
 * OK and right); returns the number of failures. */
static int report_case(const mp_case *m, const char *what) {
  const int R = m->R, k = m->k;
  int bad = 0;
  char where[256];
  snprintf(where, sizeof where, "%s, R = %d, k = %d, %s, %s groups", what, R, k,
           mode_name(m->mode), m->explicit_groups ? "explicit" : "NULL");
  for (int p = 0; p < R * k; ++p) {
    if (atomic_load(&m->runs[p]) != 1) {
      print_error("%s: replica %d core %d ran %d times\n", where, p / k, p % k,
                  atomic_load(&m->runs[p]));
      ++bad;
    }
    for (int op = 0; op < NUM_COLL; ++op) {
      if (m->status[p][op] != TPU_OK) {
        print_error("%s: replica %d core %d: %s\n", where, p / k, p % k, m->message[p]);
        ++bad;
        break;
      }
      if (m->wrong[p][op] != 0) {
        print_error("%s: replica %d core %d: %s: %s\n", where, p / k, p % k, kCollName[op],
                    m->wrong[p][op] < 0 ? "wrong dtype or shape" : "wrong elements");
        ++bad;
      }
    }
  }
  return bad;
}

/* One step of case (mode, explicit_groups) on assignment da (NULL: none, k = 1). */
static void run_matrix(const tpu_device_assignment *da, int R, int k, int mode, int explicit_groups,
                       const char *what) {
  static mp_case m;
  prepare_case(&m, R, k, mode, explicit_groups);
  tpu_step_options so = step_options(da, 0);
  tpu_status st = tpu_replicate(g_sys, mp_computation, &m, R, 0, NULL, 0, NULL, &so);
  CHECK_NO_WORKER_FAILURES();
  int bad = report_case(&m, what);
  if (st != TPU_OK) {
    print_error("%s, %s: tpu_replicate: %s: %s\n", what, mode_name(mode), tpu_status_name(st),
                tpu_last_error());
    ++bad;
  }
  if (bad) fail_msg("%s, R = %d, k = %d, %s: %d failure(s), above", what, R, k, mode_name(mode), bad);
}

/* Every mode, NULL and explicit groups, on a scrambled explicit assignment and on
 * one TensorFlow's algorithm built on the [2,2,1,2] mesh. */
static void check_all_modes(int k) {
  for (int mesh = 0; mesh < 2; ++mesh) {
    start(mesh ? kCubeMesh : kLinearMesh, time_limit_ms(20000));
    tpu_device_assignment *da = make_assignment(mesh ? DA_BUILT : DA_SCRAMBLED, k);
    for (int mode = 0; mode < 4; ++mode)
      for (int ex = 0; ex < 2; ++ex) run_matrix(da, NUM_CORES / k, k, mode, ex, kDaName[mesh ? DA_BUILT : DA_SCRAMBLED]);
    tpu_device_assignment_release(da);
    release_system(NULL);
  }
}

static void test_model_parallel__collectives_k2(void **state) { (void)state; check_all_modes(2); }
static void test_model_parallel__collectives_k4(void **state) { (void)state; check_all_modes(4); }
static void test_model_parallel__collectives_k8(void **state) { (void)state; check_all_modes(8); }

/* k == 1: every mode means today's replica groups (CROSS_PARTITION: each replica
 * alone), with a device assignment and without one. */
static void test_model_parallel__collectives_k1_is_today(void **state) {
  (void)state;
  check_all_modes(1);
  start(kLinearMesh, time_limit_ms(20000));
  for (int mode = 0; mode < 4; ++mode)
    for (int ex = 0; ex < 2; ++ex) run_matrix(NULL, NUM_CORES, 1, mode, ex, "no device assignment");
  release_system(NULL);
}

/* Modes mixed in one step, as tensor parallelism mixes them (Megatron: a
 * cross-partition sum of partial activations, then a cross-replica sum of
 * gradients): all eight cases of the matrix, one after the other, interleaved by
 * mode, in one computation. */
typedef struct {
  int R, k;
  mp_case cases[8];
} mixed_case;

static const int kMixedOrder[8][2] = {{1, 0}, {0, 0}, {2, 1}, {3, 0},
                                      {1, 1}, {3, 1}, {0, 1}, {2, 0}}; /* (mode, explicit) */

static tpu_status mixed_computation(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                    tpu_tensor **outs, int no, void *user) {
  mixed_case *x = user;
  const int p = participant(ctx, x->R, x->k);
  tpu_status st = p < 0 ? TPU_INTERNAL : TPU_OK;
  for (int i = 0; i < 8 && st == TPU_OK; ++i) st = run_case_ops(ctx, &x->cases[i], p);
  return st;
}

static void test_model_parallel__modes_mixed_in_one_step(void **state) {
  (void)state;
  start(kLinearMesh, time_limit_ms(20000));
  static mixed_case x;
  const int ks[] = {2, 4};
  for (int ki = 0; ki < 2; ++ki) {
    x.k = ks[ki];
    x.R = NUM_CORES / x.k;
    for (int i = 0; i < 8; ++i) prepare_case(&x.cases[i], x.R, x.k, kMixedOrder[i][0], kMixedOrder[i][1]);
    tpu_device_assignment *da = make_assignment(DA_SCRAMBLED, x.k);
    tpu_step_options so = step_options(da, 0);
    tpu_status st = tpu_replicate(g_sys, mixed_computation, &x, x.R, 0, NULL, 0, NULL, &so);
    CHECK_NO_WORKER_FAILURES();
    tpu_device_assignment_release(da);
    int bad = 0;
    for (int i = 0; i < 8; ++i) bad += report_case(&x.cases[i], "modes mixed in one step");
    if (st != TPU_OK || bad)
      fail_msg("k = %d, modes mixed in one step: %s \"%s\", %d failure(s) above", x.k,
               tpu_status_name(st), st == TPU_OK ? "" : tpu_last_error(), bad);
  }
}

/* ---- bad input and failures ------------------------------------------------------ */

enum {
  E_CORE_OUT_OF_RANGE, E_REPLICA_IDS_AS_CORES, E_DUPLICATE, E_MISSING, E_FLAT_DUPLICATE,
  E_FLAT_MISSING, E_PERMUTE_TARGET_TWICE, E_PERMUTE_SOURCE_TWICE, E_PERMUTE_CORE_OUT_OF_RANGE,
  E_PERMUTE_CROSS_REPLICA_AND_PARTITION, E_MODE_7, E_BARRIER_MODE_7,
  /* only participant (1, 1) differs */
  E_ONE_MODE_7, E_ONE_BAD_GROUPS, E_ONE_BAD_PAIRS, E_ONE_OTHER_MODE, E_ONE_OTHER_GROUPS,
  E_ONE_OTHER_DTYPE,
  /* failures */
  E_SKIP, E_LATE, E_FAIL, E_FAIL_ALONE,
  /* only replica 2 core 1 passes groups, which leave replica 2 out; then a barrier */
  E_ONE_MISSING_THEN_BARRIER
};

typedef struct {
  int mode, k, R;
  int late_ms;
  atomic_int runs;
  tpu_status status[MAX_P];
  char message[MAX_P][512];
  char first[MAX_P][512]; /* E_ONE_MISSING_THEN_BARRIER: the first collective's */
} err_case;

static tpu_status err_computation(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                  tpu_tensor **outs, int no, void *user) {
  err_case *e = user;
  int r = -1, c = -1;
  tpu_replica_context_replica_id(ctx, &r);
  tpu_replica_context_logical_core(ctx, &c);
  if (r < 0 || r >= e->R || c < 0 || c >= e->k)
    return tpu_replica_context_fail(ctx, TPU_INTERNAL, "context out of range");
  const int p = r * e->k + c;
  const int odd = r == 1 && c == 1;         /* the one participant that differs */
  const int last = r == e->R - 1 && c == 1; /* the one that skips, is late or fails */
  atomic_fetch_add(&e->runs, 1);
  tpu_tensor *x = make_input(TPU_INT64, p), *out = NULL;
  tpu_collective_options o = TPU_COLLECTIVE_OPTIONS_INIT;
  tpu_status st = TPU_OK;
  /* k = 2, R = 4 unless the case says otherwise */
  const int32_t cores_bad[] = {0, 1, 7}, replicas_as_cores[] = {0, 1, 2, 3};
  const int32_t dup[] = {0, 1, 1, 3}, half[] = {0, 1}, flat_dup[] = {0, 1, 2, 3, 4, 5, 6, 6};
  const int32_t flat_half[] = {0, 1, 2, 3}, twice_target[] = {0, 1, 1, 1};
  const int32_t twice_source[] = {0, 1, 0, 0}, core_2[] = {0, 2}, pair[] = {0, 1};
  const int32_t rgroups_a[] = {0, 2, 1, 3}, rgroups_b[] = {0, 1, 2, 3}, rgroups_r2[] = {1, 0};
  tpu_group_assignment g;
  switch (e->mode) {
    case E_CORE_OUT_OF_RANGE:
      o.group_mode = TPU_GROUP_MODE_CROSS_PARTITION;
      g = (tpu_group_assignment){cores_bad, 3, 1};
      st = tpu_all_reduce(ctx, x, TPU_REDUCE_SUM, &g, &out, &o);
      break;
    case E_REPLICA_IDS_AS_CORES:
      o.group_mode = TPU_GROUP_MODE_CROSS_PARTITION;
      g = (tpu_group_assignment){replicas_as_cores, 2, 2};
      st = tpu_all_gather(ctx, x, 0, &g, &out, &o);
      break;
    case E_DUPLICATE:
      o.group_mode = TPU_GROUP_MODE_CROSS_REPLICA;
      g = (tpu_group_assignment){dup, 2, 2};
      st = tpu_cross_replica_sum(ctx, x, &g, &out, &o);
      break;
    case E_MISSING:
      o.group_mode = TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION;
      g = (tpu_group_assignment){half, 1, 2};
      st = tpu_broadcast(ctx, x, 0, &g, &out, &o);
      break;
    case E_FLAT_DUPLICATE:
      o.group_mode = TPU_GROUP_MODE_FLATTENED_ID;
      g = (tpu_group_assignment){flat_dup, 2, 4};
      st = tpu_reduce_scatter(ctx, x, TPU_REDUCE_SUM, 0, &g, &out, &o);
      break;
    case E_FLAT_MISSING:
      o.group_mode = TPU_GROUP_MODE_FLATTENED_ID;
      g = (tpu_group_assignment){flat_half, 1, 4};
      st = tpu_all_to_all(ctx, x, 0, 0, 4, &g, &out, &o);
      break;
    case E_PERMUTE_TARGET_TWICE:
      o.group_mode = TPU_GROUP_MODE_CROSS_PARTITION;
      st = tpu_collective_permute(ctx, x, twice_target, 2, &out, &o);
      break;
    case E_PERMUTE_SOURCE_TWICE:
      o.group_mode = TPU_GROUP_MODE_CROSS_PARTITION;
      st = tpu_collective_permute(ctx, x, twice_source, 2, &out, &o);
      break;
    case E_PERMUTE_CORE_OUT_OF_RANGE:
      o.group_mode = TPU_GROUP_MODE_CROSS_PARTITION;
      st = tpu_collective_permute(ctx, x, core_2, 1, &out, &o);
      break;
    case E_PERMUTE_CROSS_REPLICA_AND_PARTITION:
      o.group_mode = TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION;
      st = tpu_collective_permute(ctx, x, pair, 1, &out, &o);
      break;
    case E_MODE_7:
      o.group_mode = 7;
      st = tpu_all_reduce(ctx, x, TPU_REDUCE_MAX, NULL, &out, &o);
      break;
    case E_BARRIER_MODE_7:
      o.group_mode = 7;
      st = tpu_barrier(ctx, &o);
      break;
    case E_ONE_MODE_7:
      o.group_mode = odd ? 7 : TPU_GROUP_MODE_CROSS_PARTITION;
      st = tpu_all_reduce(ctx, x, TPU_REDUCE_SUM, NULL, &out, &o);
      if (odd) sleep_ms(50); /* the others, failed by it, record theirs first */
      break;
    case E_ONE_BAD_GROUPS: /* the others pass good ones: all cores of the replica */
      o.group_mode = TPU_GROUP_MODE_CROSS_PARTITION;
      g = (tpu_group_assignment){cores_bad, 3, 1};
      st = tpu_all_reduce(ctx, x, TPU_REDUCE_SUM, odd ? &g : NULL, &out, &o);
      if (odd) sleep_ms(50);
      break;
    case E_ONE_BAD_PAIRS: /* the others pass (0, 1) */
      o.group_mode = TPU_GROUP_MODE_CROSS_PARTITION;
      st = tpu_collective_permute(ctx, x, odd ? twice_target : pair, odd ? 2 : 1, &out, &o);
      if (odd) sleep_ms(50);
      break;
    case E_ONE_OTHER_MODE: /* NULL groups: all cores of its replica, not all replicas of core 1 */
      o.group_mode = odd ? TPU_GROUP_MODE_CROSS_PARTITION : TPU_GROUP_MODE_CROSS_REPLICA;
      st = tpu_all_reduce(ctx, x, TPU_REDUCE_SUM, NULL, &out, &o);
      break;
    case E_ONE_OTHER_GROUPS:
      o.group_mode = TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION;
      if (e->R == 4) g = (tpu_group_assignment){odd ? rgroups_b : rgroups_a, 2, 2};
      else g = (tpu_group_assignment){odd ? rgroups_b : rgroups_r2, 1, 2}; /* {0, 1} vs {1, 0} */
      st = tpu_all_reduce(ctx, x, TPU_REDUCE_SUM, &g, &out, &o);
      break;
    case E_ONE_OTHER_DTYPE: /* cross-partition sums, one core's of float32 */
      o.group_mode = TPU_GROUP_MODE_CROSS_PARTITION;
      if (odd) {
        tpu_tensor *xf = make_input(TPU_FLOAT, p);
        st = tpu_all_reduce(ctx, xf, TPU_REDUCE_SUM, NULL, &out, &o);
        tpu_tensor_release(xf);
      } else {
        st = tpu_all_reduce(ctx, x, TPU_REDUCE_SUM, NULL, &out, &o);
      }
      break;
    case E_SKIP: /* the last replica's core 1 skips the cross-partition sum its core 0 entered */
      o.group_mode = TPU_GROUP_MODE_CROSS_PARTITION;
      if (!last) st = tpu_all_reduce(ctx, x, TPU_REDUCE_SUM, NULL, &out, &o);
      break;
    case E_LATE: /* the last replica's core 1 arrives after the deadline */
      o.group_mode = TPU_GROUP_MODE_CROSS_PARTITION;
      if (last) sleep_ms(e->late_ms);
      st = tpu_all_reduce(ctx, x, TPU_REDUCE_SUM, NULL, &out, &o);
      break;
    case E_FAIL: /* the last replica's core 1 fails while everyone else waits for it */
      o.group_mode = TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION;
      if (last) {
        st = tpu_replica_context_fail(ctx, TPU_INTERNAL, "the model diverged");
      } else {
        st = tpu_all_reduce(ctx, x, TPU_REDUCE_SUM, NULL, &out, &o);
        tpu_tensor_release(out);
        out = NULL;
        if (st == TPU_OK) st = tpu_all_reduce(ctx, x, TPU_REDUCE_SUM, NULL, &out, &o);
      }
      break;
    case E_ONE_MISSING_THEN_BARRIER: {
      const int is = r == 2 && c == 1;
      o.group_mode = TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION;
      g = (tpu_group_assignment){half, 1, 2};
      st = tpu_all_reduce(ctx, x, TPU_REDUCE_SUM, is ? &g : NULL, &out, &o);
      snprintf(e->first[p], sizeof e->first[p], "%s", st == TPU_OK ? "" : tpu_last_error());
      if (is) sleep_ms(50); /* the others reach the barrier first */
      st = tpu_barrier(ctx, NULL);
      break;
    }
    case E_FAIL_ALONE: /* no collective at all: only replica 1's core 1 fails */
      if (odd) st = tpu_replica_context_fail(ctx, TPU_DATA_LOSS, "lost a shard");
      break;
  }
  e->status[p] = st;
  snprintf(e->message[p], sizeof e->message[p], "%s", st == TPU_OK ? "" : tpu_last_error());
  tpu_tensor_release(out);
  tpu_tensor_release(x);
  return st;
}

/* A correct step on the system that just failed one: every collective, everyone. */
static void run_ok_step(int R, int k) {
  tpu_device_assignment *da = make_assignment(DA_SCRAMBLED, k);
  run_matrix(da, R, k, TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION, 0, "the step after an error");
  tpu_device_assignment_release(da);
}

/* `message` is "replica R core C: ..." for a participant of the step ("replica R: "
 * with one core per replica); *rest points past that prefix. */
static void expect_participant_prefix(const char *message, int R, int k, const char **rest) {
  int r = -1, c = 0, n = 0;
  int ok = k == 1 ? sscanf(message, "replica %d: %n", &r, &n) == 1
                  : sscanf(message, "replica %d core %d: %n", &r, &c, &n) == 2;
  if (!ok || n == 0 || r < 0 || r >= R || c < 0 || c >= k)
    fail_msg("message \"%s\" does not begin with \"%s\"", message,
             k == 1 ? "replica R: " : "replica R core C: ");
  *rest = message + n;
}

/* A participant's own message, or "replica R core C: " and the one it got. */
static const char *strip_prefix(const char *message) {
  int r, c, n = 0;
  if (sscanf(message, "replica %d core %d: %n", &r, &c, &n) == 2 && n > 0) return message + n;
  n = 0;
  if (sscanf(message, "replica %d: %n", &r, &n) == 1 && n > 0) return message + n;
  return message;
}

static tpu_status run_err(err_case *e, int mode, int R, int k, int64_t timeout_ms) {
  int late_ms = e->late_ms;
  memset(e, 0, sizeof *e);
  e->mode = mode;
  e->R = R;
  e->k = k;
  e->late_ms = late_ms;
  tpu_device_assignment *da = make_assignment(DA_SCRAMBLED, k);
  tpu_step_options o = step_options(da, timeout_ms);
  tpu_status st = tpu_replicate(g_sys, err_computation, e, R, 0, NULL, 0, NULL, &o);
  tpu_device_assignment_release(da);
  return st;
}

/* The step fails with `code`, its message "replica R core C: " then one naming
 * `frag1` and `frag2`; with `every`, each participant's own error is `code` and
 * names them too. Then a correct step runs on the same system. */
static void expect_step_error(int mode, int R, int k, tpu_status code, const char *frag1,
                              const char *frag2, int every) {
  static err_case e;
  tpu_clear_last_error();
  tpu_status st = run_err(&e, mode, R, k, 0);
  CHECK_NO_WORKER_FAILURES();
  char message[1024];
  snprintf(message, sizeof message, "%s", tpu_last_error());
  const char *rest = NULL;
  expect_participant_prefix(message, R, k, &rest);
  if (st != code || strstr(rest, frag1) == NULL || strstr(rest, frag2) == NULL)
    fail_msg("case %d (R = %d, k = %d): %s \"%s\"; want %s naming \"%s\" and \"%s\"", mode, R, k,
             tpu_status_name(st), message, tpu_status_name(code), frag1, frag2);
  assert_int_equal(atomic_load(&e.runs), R * k);
  if (every)
    for (int p = 0; p < R * k; ++p)
      if (e.status[p] != code || strstr(strip_prefix(e.message[p]), frag1) == NULL ||
          strstr(strip_prefix(e.message[p]), frag2) == NULL)
        fail_msg("case %d: replica %d core %d got %s \"%s\"; want %s naming \"%s\" and \"%s\"",
                 mode, p / k, p % k, tpu_status_name(e.status[p]), e.message[p],
                 tpu_status_name(code), frag1, frag2);
  run_ok_step(R, k);
}

static void test_model_parallel__bad_groups_pairs_and_modes(void **state) {
  (void)state;
  start(kLinearMesh, time_limit_ms(20000));
  const struct {
    int mode;
    const char *frag1, *frag2;
  } cases[] = {
      {E_CORE_OUT_OF_RANGE, "logical core 7", "CROSS_PARTITION"},
      {E_REPLICA_IDS_AS_CORES, "logical core 2", "CROSS_PARTITION"},
      {E_DUPLICATE, "replica 1 appears twice", "CROSS_REPLICA"},
      {E_MISSING, "replica 2", "CROSS_REPLICA_AND_PARTITION"},
      {E_FLAT_DUPLICATE, "flattened id 6", "FLATTENED_ID"},
      {E_FLAT_MISSING, "flattened id 4", "FLATTENED_ID"},
      {E_PERMUTE_TARGET_TWICE, "Target 1 appears more than once", "CROSS_PARTITION"},
      {E_PERMUTE_SOURCE_TWICE, "Source 0 appears more than once", "CROSS_PARTITION"},
      {E_PERMUTE_CORE_OUT_OF_RANGE, "(0, 2)", "CROSS_PARTITION"},
      {E_PERMUTE_CROSS_REPLICA_AND_PARTITION, "collective_permute", "CROSS_REPLICA_AND_PARTITION"},
      {E_MODE_7, "group_mode", "7"},
      {E_BARRIER_MODE_7, "group_mode", "7"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
    expect_step_error(cases[i].mode, 4, 2, TPU_INVALID_ARGUMENT, cases[i].frag1, cases[i].frag2, 1);
  /* Four cores per replica: core ids up to 3. */
  expect_step_error(E_CORE_OUT_OF_RANGE, 2, 4, TPU_INVALID_ARGUMENT, "logical core 7", "CROSS_PARTITION", 1);
  expect_step_error(E_PERMUTE_TARGET_TWICE, 2, 4, TPU_INVALID_ARGUMENT, "Target 1 appears more than once",
                    "CROSS_PARTITION", 1);
  expect_step_error(E_PERMUTE_CROSS_REPLICA_AND_PARTITION, 2, 4, TPU_INVALID_ARGUMENT,
                    "collective_permute", "CROSS_REPLICA_AND_PARTITION", 1);
  expect_step_error(E_FLAT_DUPLICATE, 2, 4, TPU_INVALID_ARGUMENT, "flattened id 6", "FLATTENED_ID", 1);
  expect_step_error(E_MODE_7, 2, 4, TPU_INVALID_ARGUMENT, "group_mode", "7", 1);
  /* One core per replica: CROSS_PARTITION allows only core 0. */
  expect_step_error(E_CORE_OUT_OF_RANGE, 8, 1, TPU_INVALID_ARGUMENT, "logical core 1", "CROSS_PARTITION", 1);
  expect_step_error(E_PERMUTE_CORE_OUT_OF_RANGE, 8, 1, TPU_INVALID_ARGUMENT, "(0, 2)", "CROSS_PARTITION", 1);
  expect_step_error(E_PERMUTE_CROSS_REPLICA_AND_PARTITION, 8, 1, TPU_INVALID_ARGUMENT,
                    "collective_permute", "CROSS_REPLICA_AND_PARTITION", 1);
}

/* One participant, replica 1 core 1, passes bad input the others do not: the step
 * is its error, and every participant gets TPU_INVALID_ARGUMENT naming it, as a
 * replica's bad groups are today (test_collectives' bad_arguments). */
static void test_model_parallel__one_core_with_bad_input(void **state) {
  (void)state;
  start(kLinearMesh, time_limit_ms(20000));
  static err_case e;
  const struct {
    int mode;
    const char *what, *frag;
  } cases[] = {{E_ONE_MODE_7, "group mode 7", "group_mode is 7"},
               {E_ONE_BAD_GROUPS, "CROSS_PARTITION groups with core 7", "logical core 7"},
               {E_ONE_BAD_PAIRS, "permute target 1 twice", "Target 1 appears more than once"}};
  const int ks[] = {2, 4};
  int bad = 0;
  for (int ki = 0; ki < 2; ++ki)
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ++ci) {
      const int k = ks[ki], R = NUM_CORES / k;
      tpu_clear_last_error();
      tpu_status st = run_err(&e, cases[ci].mode, R, k, 0);
      CHECK_NO_WORKER_FAILURES();
      if (st != TPU_INVALID_ARGUMENT || strncmp(tpu_last_error(), "replica 1 core 1: ", 18) != 0 ||
          strstr(tpu_last_error(), cases[ci].frag) == NULL) {
        print_error("k = %d, only replica 1 core 1 passes %s: the step gave %s \"%s\"; want "
                    "TPU_INVALID_ARGUMENT \"replica 1 core 1: ...%s...\"\n", k, cases[ci].what,
                    tpu_status_name(st), tpu_last_error(),
                    cases[ci].frag);
        ++bad;
      }
      int wrong = 0, first = -1;
      for (int p = 0; p < R * k; ++p)
        if (e.status[p] != TPU_INVALID_ARGUMENT || strstr(e.message[p], cases[ci].frag) == NULL ||
            (p != k + 1 && strstr(e.message[p], "replica 1 core 1") == NULL))
          first = first < 0 ? p : first, ++wrong;
      if (wrong) {
        print_error("k = %d, only replica 1 core 1 passes %s: %d participant(s) wrong, first "
                    "replica %d core %d: %s \"%s\"; want TPU_INVALID_ARGUMENT naming replica 1 "
                    "core 1 and \"%s\"\n", k, cases[ci].what, wrong, first / k, first % k, tpu_status_name(e.status[first]),
                    e.message[first], cases[ci].frag);
        ++bad;
      }
      run_ok_step(R, k);
    }
  if (bad) fail_msg("%d failure(s), above", bad);
}

/* One participant, replica 1 core 1, uses another mode, other groups or another
 * dtype than the others: every participant fails with TPU_INVALID_ARGUMENT naming it. */
static void test_model_parallel__participants_that_disagree(void **state) {
  (void)state;
  start(kLinearMesh, time_limit_ms(20000));
  static err_case e;
  const int ks[] = {2, 4};
  for (int ki = 0; ki < 2; ++ki) {
    const int k = ks[ki], R = NUM_CORES / k;
    tpu_status st;
    /* Another mode, or other groups, on one core. */
    const int modes[] = {E_ONE_OTHER_MODE, E_ONE_OTHER_GROUPS, E_ONE_OTHER_DTYPE};
    for (int mi = 0; mi < 3; ++mi) {
      tpu_clear_last_error();
      st = run_err(&e, modes[mi], R, k, 0);
      CHECK_NO_WORKER_FAILURES();
      char message[1024];
      snprintf(message, sizeof message, "%s", tpu_last_error());
      const char *rest = NULL;
      expect_participant_prefix(message, R, k, &rest);
      if (st != TPU_INVALID_ARGUMENT || strstr(rest, "replica 1 core 1") == NULL)
        fail_msg("k = %d, case %d: %s \"%s\"; want TPU_INVALID_ARGUMENT naming replica 1 core 1",
                 k, modes[mi], tpu_status_name(st), message);
      for (int p = 0; p < R * k; ++p)
        if (e.status[p] != TPU_INVALID_ARGUMENT || strstr(strip_prefix(e.message[p]), "replica 1 core 1") == NULL)
          fail_msg("k = %d, case %d: replica %d core %d got %s \"%s\"; want TPU_INVALID_ARGUMENT "
                   "naming replica 1 core 1", k, modes[mi], p / k, p % k,
                   tpu_status_name(e.status[p]), e.message[p]);
      run_ok_step(R, k);
    }
  }
}

/* A core that skips a collective its replica's other cores entered is named at
 * once: the deadline is long, so waiting for it would be TPU_DEADLINE_EXCEEDED. */
static void test_model_parallel__core_that_skips_a_collective(void **state) {
  (void)state;
  start(kLinearMesh, time_limit_ms(30000));
  static err_case e;
  const int ks[] = {2, 4};
  for (int ki = 0; ki < 2; ++ki) {
    const int k = ks[ki], R = NUM_CORES / k;
    char want[128];
    snprintf(want, sizeof want, "replica %d core 1 finished its computation without joining", R - 1);
    tpu_clear_last_error();
    tpu_status st = run_err(&e, E_SKIP, R, k, 0);
    CHECK_NO_WORKER_FAILURES();
    char message[1024];
    snprintf(message, sizeof message, "%s", tpu_last_error());
    const char *rest = NULL;
    expect_participant_prefix(message, R, k, &rest);
    if (st != TPU_FAILED_PRECONDITION || strstr(rest, want) == NULL)
      fail_msg("k = %d: %s \"%s\"; want TPU_FAILED_PRECONDITION \"...%s...\"", k,
               tpu_status_name(st), message, want);
    CHECK_OK(e.status[(R - 1) * k + 1]);
    assert_int_equal(e.status[(R - 1) * k], TPU_FAILED_PRECONDITION);
    run_ok_step(R, k);
  }
}

/* A core that arrives after the deadline: the step fails naming it (replica and
 * core), and the system works for the next step once it has returned. */
static void test_model_parallel__deadline_names_the_missing_core(void **state) {
  (void)state;
  start(kLinearMesh, time_limit_ms(20000));
  static err_case e;
  const int64_t deadline = time_limit_ms(300);
  e.late_ms = (int)(deadline * 3 / 2); /* back within the grace period after the failure */
  tpu_clear_last_error();
  tpu_status st = run_err(&e, E_LATE, 4, 2, deadline);
  CHECK_NO_WORKER_FAILURES();
  char message[1024];
  snprintf(message, sizeof message, "%s", tpu_last_error());
  const char *rest = NULL;
  expect_participant_prefix(message, 4, 2, &rest);
  if (st != TPU_DEADLINE_EXCEEDED || strstr(rest, "replica 3 core 1") == NULL)
    fail_msg("%s \"%s\"; want TPU_DEADLINE_EXCEEDED naming replica 3 core 1", tpu_status_name(st), message);
  assert_int_equal(e.status[3 * 2 + 0], TPU_DEADLINE_EXCEEDED);
  assert_non_null(strstr(e.message[3 * 2 + 0], "replica 3 core 1"));
  run_ok_step(4, 2);
}

/* The first error of a failing core reaches the caller as "replica R core C: message";
 * everyone waiting for it is aborted naming it. */
static void test_model_parallel__first_error_names_replica_and_core(void **state) {
  (void)state;
  start(kLinearMesh, time_limit_ms(60000)); /* the aborts must not wait for it */
  static err_case e;
  const int ks[] = {2, 4};
  for (int ki = 0; ki < 2; ++ki) {
    const int k = ks[ki], R = NUM_CORES / k;
    char want[128], who[64];
    snprintf(who, sizeof who, "replica %d core 1", R - 1);
    snprintf(want, sizeof want, "%s: the model diverged", who);
    CHECK_ERROR(run_err(&e, E_FAIL, R, k, 0), TPU_INTERNAL, want);
    CHECK_NO_WORKER_FAILURES();
    assert_string_equal(tpu_last_error(), want);
    for (int p = 0; p < R * k; ++p)
      if (p != (R - 1) * k + 1 && (e.status[p] != TPU_ABORTED || strstr(e.message[p], who) == NULL))
        fail_msg("k = %d: replica %d core %d got %s \"%s\"; want TPU_ABORTED naming %s", k, p / k,
                 p % k, tpu_status_name(e.status[p]), e.message[p], who);
    run_ok_step(R, k);
    CHECK_ERROR(run_err(&e, E_FAIL_ALONE, R, k, 0), TPU_DATA_LOSS, "replica 1 core 1: lost a shard");
    CHECK_NO_WORKER_FAILURES();
    assert_string_equal(tpu_last_error(), "replica 1 core 1: lost a shard");
    for (int p = 0; p < R * k; ++p)
      if (p != k + 1) CHECK_OK(e.status[p]);
    run_ok_step(R, k);
  }
}

/* The participant whose groups are bad names itself once: the step's message is
 * "replica 2 core 1: replica 2 is in no group ...", not "replica 2 core 1: replica 2
 * core 1: ..." (its barrier after the failed collective gives it its own message), and
 * the others' errors name it as the one that failed. */
static void test_model_parallel__bad_groups_name_the_core_once(void **state) {
  (void)state;
  start(kLinearMesh, time_limit_ms(20000));
  static err_case e;
  const int k = 2, R = NUM_CORES / k, origin = 2 * k + 1;
  const char *raw = "replica 2 is in no group (group_assignment has 1 groups of 2 for 4 replicas) "
                    "(group mode CROSS_REPLICA_AND_PARTITION)";
  char step[512], others[512];
  snprintf(step, sizeof step, "replica 2 core 1: %s", raw);
  snprintf(others, sizeof others, "replica 2 core 1 failed (INVALID_ARGUMENT): %s", raw);
  tpu_clear_last_error();
  tpu_status st = run_err(&e, E_ONE_MISSING_THEN_BARRIER, R, k, 0);
  CHECK_NO_WORKER_FAILURES();
  assert_int_equal(st, TPU_INVALID_ARGUMENT);
  assert_string_equal(tpu_last_error(), step);
  for (int p = 0; p < R * k; ++p) {
    assert_int_equal(e.status[p], TPU_INVALID_ARGUMENT);
    assert_string_equal(e.first[p], p == origin ? raw : others);
    assert_string_equal(e.message[p], p == origin ? raw : others);
  }
  run_ok_step(R, k);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_model_parallel__every_core_runs, release_system),
      cmocka_unit_test_teardown(test_model_parallel__rewrite_runs_every_core, release_system),
      cmocka_unit_test_teardown(test_model_parallel__cores_inputs_are_copy_on_write, release_system),
      cmocka_unit_test_teardown(test_model_parallel__collectives_k2, release_system),
      cmocka_unit_test_teardown(test_model_parallel__collectives_k4, release_system),
      cmocka_unit_test_teardown(test_model_parallel__collectives_k8, release_system),
      cmocka_unit_test_teardown(test_model_parallel__collectives_k1_is_today, release_system),
      cmocka_unit_test_teardown(test_model_parallel__modes_mixed_in_one_step, release_system),
      cmocka_unit_test_teardown(test_model_parallel__bad_groups_pairs_and_modes, release_system),
      cmocka_unit_test_teardown(test_model_parallel__one_core_with_bad_input, release_system),
      cmocka_unit_test_teardown(test_model_parallel__bad_groups_name_the_core_once, release_system),
      cmocka_unit_test_teardown(test_model_parallel__participants_that_disagree, release_system),
      cmocka_unit_test_teardown(test_model_parallel__core_that_skips_a_collective, release_system),
      cmocka_unit_test_teardown(test_model_parallel__deadline_names_the_missing_core, release_system),
      cmocka_unit_test_teardown(test_model_parallel__first_error_names_replica_and_core, release_system),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
