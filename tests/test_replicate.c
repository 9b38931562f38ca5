/* Replicated execution: per-replica inputs and outputs, the replica context, device
 * assignments, argument rules, maximum_shapes padding, the failure model (first
 * error, collateral aborts, stuck replicas, close_on_failure), many and concurrent
 * steps, and outside compilation. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tpurt.h>

#include "test_util.h"

#define MAX_CORES 8

TEST_SYSTEM_FIXTURE

static void start(int cores, int64_t timeout_ms, int close_on_failure) {
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = cores;
  o.collective_timeout_ms = timeout_ms;
  o.close_on_failure = close_on_failure;
  tpu_status st = tpu_system_init(&o, &g_sys);
  if (st != TPU_OK) fail_msg("tpu_system_init: %s: %s", tpu_status_name(st), tpu_last_error());
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static tpu_tensor *floats(const float *v, int64_t n) {
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, &n, 1, v, (size_t)n * sizeof(float), &t));
  return t;
}

static tpu_tensor *int_scalar(int32_t v) {
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(TPU_INT32, NULL, 0, &v, sizeof v, &t));
  return t;
}

static const float *float_data(const tpu_tensor *t) {
  const void *p = NULL;
  CHECK_OK(tpu_tensor_data(t, &p));
  return p;
}

static int replica_id(tpu_replica_context *ctx) {
  int r = -1;
  tpu_replica_context_replica_id(ctx, &r);
  return r;
}

static void release_all(tpu_tensor **t, int n) {
  for (int i = 0; i < n; ++i) {
    tpu_tensor_release(t[i]);
    t[i] = NULL;
  }
}

static tpu_status empty(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                        tpu_tensor **out, int no, void *user) {
  atomic_fetch_add((atomic_int *)user, 1);
  return TPU_OK;
}

/* ---- results and the replica context ------------------------------------------ */

/* out[0] = replica_id * in[0]; out[1] = int32 core. */
static tpu_status scale_by_replica(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                   tpu_tensor **out, int no, void *user) {
  int r = replica_id(ctx), n = 0, core = -1, per = 0;
  tpu_replica_context_num_replicas(ctx, &n);
  tpu_replica_context_core(ctx, &core);
  tpu_replica_context_num_cores_per_replica(ctx, &per);
  char name[128], want[128];
  size_t len = 0;
  if (tpu_replica_context_device_name(ctx, name, sizeof name, &len) != TPU_OK) return TPU_INTERNAL;
  snprintf(want, sizeof want, "/job:localhost/replica:0/task:0/device:TPU:%d", core);
  if (strcmp(name, want) != 0 || n != *(int *)user || ni != 1 || no != 2)
    return tpu_replica_context_fail(ctx, TPU_INTERNAL, "bad context");
  int64_t count = 0;
  tpu_tensor_num_elements(in[0], &count);
  float v[16];
  const float *x = float_data(in[0]);
  for (int64_t i = 0; i < count; ++i) v[i] = x[i] * (float)r;
  out[0] = floats(v, count);
  out[1] = int_scalar(core * 100 + per);
  return TPU_OK;
}

static void test_replicate__per_replica_results(void **state) {
  start(4, 0, 1);
  int n = 4;
  tpu_tensor *in[4], *out[8];
  for (int r = 0; r < 4; ++r) {
    float v[3] = {1.0f + r, 2.0f, -3.0f};
    in[r] = floats(v, 3);
  }
  CHECK_OK(tpu_replicate(g_sys, scale_by_replica, &n, 4, 1, in, 2, out, NULL));
  CHECK_NO_WORKER_FAILURES();
  for (int r = 0; r < 4; ++r) {
    const float *y = float_data(out[2 * r]);
    assert_true(y[0] == (1.0f + r) * r && y[1] == 2.0f * r && y[2] == -3.0f * r);
    const void *p;
    tpu_tensor_data(out[2 * r + 1], &p);
    assert_int_equal(*(const int32_t *)p, r * 100 + 1); /* replica r on core r */
  }
  release_all(out, 8);
  /* tpu_rewrite: one replica on core 0. */
  n = 1;
  CHECK_OK(tpu_rewrite(g_sys, scale_by_replica, &n, 1, in, 2, out, NULL));
  CHECK_NO_WORKER_FAILURES();
  assert_true(float_data(out[0])[0] == 0.0f);
  release_all(out, 2);
  release_all(in, 4);
}

static void test_replicate__explicit_device_assignment(void **state) {
  start(4, 0, 1);
  tpu_topology *topo = NULL;
  CHECK_OK(tpu_system_topology(g_sys, &topo));
  /* Replica r on core 3 - r: mesh [4,1,1,1], so core c is at (c, 0, 0, 0). */
  int32_t reversed[4][1][4];
  for (int r = 0; r < 4; ++r) {
    int32_t c[4] = {3 - r, 0, 0, 0};
    memcpy(reversed[r][0], c, sizeof c);
  }
  tpu_device_assignment *da = NULL;
  CHECK_OK(tpu_device_assignment_create(topo, &reversed[0][0][0], 4, 1, &da));
  int n = 4;
  tpu_tensor *in[4], *out[8];
  for (int r = 0; r < 4; ++r) {
    float v = 1;
    in[r] = floats(&v, 1);
  }
  CHECK_OK(tpu_replicate(g_sys, scale_by_replica, &n, 4, 1, in, 2, out, STEP_OPTIONS(da, NULL, 0)));
  CHECK_NO_WORKER_FAILURES();
  for (int r = 0; r < 4; ++r) {
    const void *p;
    tpu_tensor_data(out[2 * r + 1], &p);
    assert_int_equal(*(const int32_t *)p, (3 - r) * 100 + 1);
  }
  release_all(out, 8);
  /* Its replica count must match. */
  CHECK_ERROR(tpu_replicate(g_sys, scale_by_replica, &n, 1, 1, in, 2, out, STEP_OPTIONS(da, NULL, 0)),
               TPU_INVALID_ARGUMENT, "device assignment has 4 replicas");
  tpu_device_assignment_release(da);

  /* Two cores per replica: replica r runs on its logical core 0. */
  int32_t pairs[2][2][4] = {{{2, 0, 0, 0}, {3, 0, 0, 0}}, {{0, 0, 0, 0}, {1, 0, 0, 0}}};
  CHECK_OK(tpu_device_assignment_create(topo, &pairs[0][0][0], 2, 2, &da));
  n = 2;
  CHECK_OK(tpu_replicate(g_sys, scale_by_replica, &n, 2, 1, in, 2, out, STEP_OPTIONS(da, NULL, 0)));
  CHECK_NO_WORKER_FAILURES();
  const void *p;
  tpu_tensor_data(out[1], &p);
  assert_int_equal(*(const int32_t *)p, 2 * 100 + 2);
  tpu_tensor_data(out[3], &p);
  assert_int_equal(*(const int32_t *)p, 0 * 100 + 2);
  release_all(out, 4);
  tpu_device_assignment_release(da);
  tpu_topology_release(topo);

  /* An assignment over another (larger) topology is rejected as foreign (spec §1.3). */
  int32_t mesh[4] = {8, 1, 1, 1}, coords[8][4];
  for (int d = 0; d < 8; ++d) coords[d][0] = d, coords[d][1] = coords[d][2] = coords[d][3] = 0;
  CHECK_OK(tpu_topology_create(mesh, 4, &coords[0][0], 1, 8, &topo));
  int32_t far[1][1][4] = {{{6, 0, 0, 0}}};
  CHECK_OK(tpu_device_assignment_create(topo, &far[0][0][0], 1, 1, &da));
  CHECK_ERROR(tpu_replicate(g_sys, scale_by_replica, &n, 1, 1, in, 2, out, STEP_OPTIONS(da, NULL, 0)),
               TPU_INVALID_ARGUMENT, "built for another topology (mesh [8, 1, 1, 1], 1 task of 8");
  tpu_device_assignment_release(da);
  tpu_topology_release(topo);
  /* The same mesh as two tasks of four devices: foreign too. */
  CHECK_OK(tpu_topology_create(mesh, 4, &coords[0][0], 2, 4, &topo));
  CHECK_OK(tpu_device_assignment_create(topo, &far[0][0][0], 1, 1, &da));
  CHECK_ERROR(tpu_replicate(g_sys, scale_by_replica, &n, 1, 1, in, 2, out, STEP_OPTIONS(da, NULL, 0)),
               TPU_INVALID_ARGUMENT, "(mesh [8, 1, 1, 1], 2 tasks of 4 devices)");
  tpu_device_assignment_release(da);
  tpu_topology_release(topo);
  release_all(in, 4);
}

static void test_replicate__argument_rules(void **state) {
  start(4, 0, 1);
  atomic_int calls = 0;
  tpu_tensor *out[8];
  /* Zero replicas: nothing runs. */
  CHECK_OK(tpu_replicate(g_sys, empty, &calls, 0, 0, NULL, 0, NULL, NULL));
  assert_int_equal(calls, 0);
  CHECK_ERROR(tpu_replicate(g_sys, empty, &calls, 3, 0, NULL, 0, NULL, NULL),
               TPU_INVALID_ARGUMENT, "'num_replicas' must be equal to 1 or 4");
  CHECK_ERROR(tpu_replicate(g_sys, empty, &calls, -1, 0, NULL, 0, NULL, NULL),
               TPU_INVALID_ARGUMENT, "num_replicas");
  CHECK_ERROR(tpu_replicate(g_sys, empty, &calls, 4, 1, NULL, 0, NULL, NULL),
               TPU_INVALID_ARGUMENT, "'inputs' is NULL");
  CHECK_ERROR(tpu_replicate(g_sys, empty, &calls, 4, -2, NULL, 0, NULL, NULL),
               TPU_INVALID_ARGUMENT, "num_inputs");
  CHECK_ERROR(tpu_replicate(g_sys, empty, &calls, 4, 0, NULL, 1, NULL, NULL),
               TPU_INVALID_ARGUMENT, "'outputs' is NULL");
  CHECK_ERROR(tpu_replicate(g_sys, NULL, &calls, 4, 0, NULL, 0, NULL, NULL),
               TPU_INVALID_ARGUMENT, "computation");

  float v = 1;
  tpu_tensor *in[8];
  for (int i = 0; i < 8; ++i) in[i] = floats(&v, 1);
  tpu_tensor_release(in[5]);
  in[5] = int_scalar(7); /* replica 2 input 1 */
  for (int i = 0; i < 8; ++i) out[i] = (tpu_tensor *)&v; /* must come back NULL */
  CHECK_ERROR(tpu_replicate(g_sys, empty, &calls, 4, 2, in, 2, out, NULL),
               TPU_INVALID_ARGUMENT,
               "Replicas must have matching input types: replica 2 input 1 is int32 but "
               "replica 0's is float32");
  for (int i = 0; i < 8; ++i) assert_null(out[i]);
  tpu_tensor_release(in[5]);
  in[5] = floats(&v, 1);
  tpu_tensor *saved = in[6];
  in[6] = NULL;
  CHECK_ERROR(tpu_replicate(g_sys, empty, &calls, 4, 2, in, 0, NULL, NULL),
               TPU_INVALID_ARGUMENT, "replica 3 input 0 is NULL");
  in[6] = saved;
  assert_int_equal(calls, 0);
  release_all(in, 8);
}

/* ---- maximum_shapes ----------------------------------------------------------- */

typedef struct {
  int num_inputs;
  int64_t dims[MAX_CORES][6][2]; /* per replica, per input: rank-2 dims (or scalar value) */
  float first[MAX_CORES][32];
} seen_inputs;

static tpu_status record_inputs(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                tpu_tensor **out, int no, void *user) {
  seen_inputs *s = user;
  int r = replica_id(ctx);
  if (r == 0) s->num_inputs = ni;
  for (int i = 0; i < ni && i < 6; ++i) {
    int rank = 0;
    tpu_tensor_rank(in[i], &rank);
    if (rank == 0) {
      const void *p;
      tpu_tensor_data(in[i], &p);
      s->dims[r][i][0] = *(const int32_t *)p;
      s->dims[r][i][1] = -1;
    } else {
      tpu_tensor_dims(in[i], s->dims[r][i], 2, &(size_t){0});
    }
  }
  int64_t count = 0;
  tpu_tensor_num_elements(in[0], &count);
  memcpy(s->first[r], float_data(in[0]), (size_t)count * sizeof(float));
  return TPU_OK;
}

static tpu_tensor *matrix(int64_t rows, int64_t cols, float base) {
  float v[32];
  for (int i = 0; i < rows * cols; ++i) v[i] = base + (float)i;
  int64_t dims[2] = {rows, cols};
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 2, v, (size_t)(rows * cols) * 4, &t));
  return t;
}

static void test_replicate__maximum_shapes(void **state) {
  start(2, 0, 1);
  seen_inputs s;
  memset(&s, 0, sizeof s);
  /* input 0: [2,3] vs [3,3] (dim 0 differs) padded to max(-1 -> 3); dim 1 equal.
   * input 1: [1,1] vs [1,4], target 8 in dim 1.  input 2: never padded. */
  tpu_tensor *in[6] = {matrix(2, 3, 1), matrix(1, 1, 0), matrix(1, 2, 0),
                       matrix(3, 3, 10), matrix(1, 4, 0), matrix(1, 2, 0)};
  tpu_shape max[3];
  memset(max, 0, sizeof max);
  max[0].rank = 2, max[0].dims[0] = -1, max[0].dims[1] = -1;
  max[1].rank = 2, max[1].dims[0] = 1, max[1].dims[1] = 8;
  max[2].rank = -1;
  CHECK_OK(tpu_replicate(g_sys, record_inputs, &s, 2, 3, in, 0, NULL, STEP_OPTIONS(NULL, max, 3)));
  CHECK_NO_WORKER_FAILURES();
  assert_int_equal(s.num_inputs, 5); /* 3 inputs + (0,0) + (1,1) */
  for (int r = 0; r < 2; ++r) {
    assert_int_equal(s.dims[r][0][0], 3);
    assert_int_equal(s.dims[r][0][1], 3);
    assert_int_equal(s.dims[r][1][0], 1);
    assert_int_equal(s.dims[r][1][1], 8);
    assert_int_equal(s.dims[r][2][1], 2); /* unpadded */
  }
  assert_int_equal(s.dims[0][3][0], 2); /* real sizes, (input, dimension) order */
  assert_int_equal(s.dims[1][3][0], 3);
  assert_int_equal(s.dims[0][4][0], 1);
  assert_int_equal(s.dims[1][4][0], 4);
  for (int i = 0; i < 9; ++i) /* replica 0: 6 values then a zero row */
    assert_true(s.first[0][i] == (i < 6 ? 1.0f + (float)i : 0.0f));
  for (int i = 0; i < 9; ++i) assert_true(s.first[1][i] == 10.0f + (float)i);

  /* An input that is never padded must have one shape in every replica, as
   * TensorFlow's TPUReplicatedInput requires. */
  tpu_tensor *odd = matrix(1, 3, 0);
  tpu_tensor *swapped[6] = {in[0], in[1], in[2], in[3], in[4], odd};
  CHECK_ERROR(tpu_replicate(g_sys, record_inputs, &s, 2, 3, swapped, 0, NULL, STEP_OPTIONS(NULL, max, 3)),
               TPU_INVALID_ARGUMENT, "input 2 has shape float32[1,2] in replica 0 but float32[1,3] in replica 1");
  CHECK_ERROR(tpu_replicate(g_sys, record_inputs, &s, 2, 3, swapped, 0, NULL, NULL),
               TPU_INVALID_ARGUMENT, "input 0 has shape float32[2,3] in replica 0 but float32[3,3] in replica 1");
  tpu_tensor_release(odd);

  /* A target below an actual size is an error. */
  max[1].dims[1] = 3;
  CHECK_ERROR(tpu_replicate(g_sys, record_inputs, &s, 2, 3, in, 0, NULL, STEP_OPTIONS(NULL, max, 3)),
               TPU_INVALID_ARGUMENT, "maximum_shapes[1].dims[1] = 3");
  /* A rank that does not match is an error. */
  max[1].rank = 1;
  CHECK_ERROR(tpu_replicate(g_sys, record_inputs, &s, 2, 3, in, 0, NULL, STEP_OPTIONS(NULL, max, 3)),
               TPU_INVALID_ARGUMENT, "maximum_shapes[1] has rank 1");
  release_all(in, 6);

  /* Targets are at least 2: sizes 0 and 1 pad to 2. */
  tpu_tensor *small[2] = {matrix(0, 1, 0), matrix(1, 1, 5)};
  tpu_shape one;
  memset(&one, 0, sizeof one);
  one.rank = 2, one.dims[0] = -1, one.dims[1] = -1;
  CHECK_OK(tpu_replicate(g_sys, record_inputs, &s, 2, 1, small, 0, NULL, STEP_OPTIONS(NULL, &one, 1)));
  CHECK_NO_WORKER_FAILURES();
  assert_int_equal(s.num_inputs, 2);
  assert_int_equal(s.dims[0][0][0], 2);
  assert_int_equal(s.dims[0][0][1], 1);
  assert_int_equal(s.dims[0][1][0], 0);
  assert_int_equal(s.dims[1][1][0], 1);
  assert_true(s.first[1][0] == 5.0f && s.first[1][1] == 0.0f);
  release_all(small, 2);
}

/* ---- sizes that overflow --------------------------------------------------------- */

#define HUGE_DIM (INT64_C(1) << 62)

/* out[0] = int8[0, 2^62]: no elements, a valid shape. */
static tpu_status empty_huge(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                             tpu_tensor **out, int no, void *user) {
  const int64_t dims[2] = {0, HUGE_DIM};
  return tpu_tensor_create(TPU_INT8, dims, 2, NULL, 0, &out[0]);
}

static tpu_tensor *int8_tensor(int64_t d0, int64_t d1) {
  const int64_t dims[2] = {d0, d1};
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(TPU_INT8, dims, 2, NULL, 0, &t));
  return t;
}

static void test_replicate__sizes_that_overflow(void **state) {
  start(4, 0, 0);
  /* shard: four [0, 2^62] outputs concatenated along axis 1 would have 2^64 columns. */
  tpu_tensor *out = NULL;
  const int axis1 = 1;
  CHECK_ERROR(tpu_shard(g_sys, empty_huge, NULL, 0, NULL, 4, NULL, NULL, &axis1, 1, &out, NULL),
               TPU_INVALID_ARGUMENT,
               "dimension 1 of output 0 concatenated from 4 shards overflows: 4611686018427387904 "
               "+ 4611686018427387904 is more than 9223372036854775807");
  assert_null(out);
  /* Along axis 0 they concatenate to [0, 2^62]. */
  CHECK_OK(tpu_shard(g_sys, empty_huge, NULL, 0, NULL, 4, NULL, NULL, NULL, 1, &out, NULL));
  int64_t dims[2] = {-1, -1};
  CHECK_OK(tpu_tensor_dims(out, dims, 2, &(size_t){0}));
  assert_true(dims[0] == 0 && dims[1] == HUGE_DIM);
  tpu_tensor_release(out);

  /* maximum_shapes: a padded dimension's real size is an int32 input, so a size beyond
   * INT32_MAX is refused rather than truncated. */
  tpu_tensor *in[4] = {int8_tensor(0, 2), int8_tensor(0, INT64_C(3000000000)),
                       int8_tensor(0, 2), int8_tensor(0, 2)};
  tpu_shape max;
  memset(&max, 0, sizeof max);
  max.rank = 2, max.dims[0] = -1, max.dims[1] = -1;
  atomic_int calls = 0;
  CHECK_ERROR(tpu_replicate(g_sys, empty, &calls, 4, 1, in, 0, NULL, STEP_OPTIONS(NULL, &max, 1)),
               TPU_INVALID_ARGUMENT,
               "replica 1 input 0 (int8[0,3000000000]) has size 3000000000 in dimension 1, more "
               "than the int32 real-size input of a padded dimension can hold");
  assert_int_equal(calls, 0);
  release_all(in, 4);
}

/* ---- failures ------------------------------------------------------------------ */

typedef struct {
  int failing;        /* replica that fails */
  int mode;           /* 0: context_fail, 1: last error, 2: bare status */
  int delay_ms;       /* before failing */
  atomic_int aborted; /* replicas whose barrier returned ABORTED */
} failure_plan;

static tpu_status fail_one(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                           tpu_tensor **out, int no, void *user) {
  failure_plan *p = user;
  int r = replica_id(ctx);
  out[0] = int_scalar(r); /* outputs of a failed step must be released, not leaked */
  if (r != p->failing) {
    tpu_status st = tpu_barrier(ctx, NULL);
    if (st == TPU_ABORTED) atomic_fetch_add(&p->aborted, 1);
    return st;
  }
  sleep_ms(p->delay_ms);
  if (p->mode == 0) return tpu_replica_context_fail(ctx, TPU_INVALID_ARGUMENT, "boom");
  if (p->mode == 1) {
    tpu_tensor *t = NULL;
    return tpu_tensor_create((tpu_dtype)99, NULL, 0, NULL, 0, &t);
  }
  return TPU_INTERNAL;
}

static void test_replicate__first_failure_and_recovery(void **state) {
  start(4, time_limit_ms(5000), 0);
  tpu_tensor *out[4];
  failure_plan p = {2, 0, 20, 0};
  for (int i = 0; i < 4; ++i) out[i] = (tpu_tensor *)&p;
  double t0 = now();
  CHECK_ERROR(tpu_replicate(g_sys, fail_one, &p, 4, 0, NULL, 1, out, NULL),
               TPU_INVALID_ARGUMENT, "replica 2: boom");
  assert_true(now() - t0 < time_limit(2.0)); /* the others' barrier was aborted, not timed out */
  assert_int_equal(p.aborted, 3);
  assert_string_equal(tpu_last_error(), "replica 2: boom");
  for (int i = 0; i < 4; ++i) assert_null(out[i]);

  p.failing = 1, p.mode = 1;
  CHECK_ERROR(tpu_replicate(g_sys, fail_one, &p, 4, 0, NULL, 1, out, NULL),
               TPU_INVALID_ARGUMENT, "replica 1: unknown dtype 99");
  p.failing = 0, p.mode = 2;
  CHECK_ERROR(tpu_replicate(g_sys, fail_one, &p, 4, 0, NULL, 1, out, NULL), TPU_INTERNAL,
               "replica 0: the computation returned INTERNAL");

  /* close_on_failure = 0: the next step runs normally. */
  p.failing = -1;
  CHECK_OK(tpu_replicate(g_sys, fail_one, &p, 4, 0, NULL, 1, out, NULL));
  CHECK_NO_WORKER_FAILURES();
  for (int r = 0; r < 4; ++r) {
    const void *d;
    tpu_tensor_data(out[r], &d);
    assert_int_equal(*(const int32_t *)d, r);
  }
  release_all(out, 4);
  int closed = 1;
  CHECK_OK(tpu_system_is_closed(g_sys, &closed));
  assert_int_equal(closed, 0);
}

static void test_replicate__close_on_failure(void **state) {
  start(2, time_limit_ms(5000), 1);
  tpu_tensor *out[2];
  failure_plan p = {1, 0, 0, 0};
  CHECK_ERROR(tpu_replicate(g_sys, fail_one, &p, 2, 0, NULL, 1, out, NULL),
               TPU_INVALID_ARGUMENT, "replica 1: boom");
  p.failing = -1;
  CHECK_ERROR(tpu_replicate(g_sys, fail_one, &p, 2, 0, NULL, 1, out, NULL),
               TPU_FAILED_PRECONDITION, "the system was closed by a failed step: replica 1: boom");
  int closed = 0;
  CHECK_OK(tpu_system_is_closed(g_sys, &closed));
  assert_int_equal(closed, 1);
  CHECK_OK(tpu_system_shutdown(g_sys));
}

/* ---- replicas that overrun the deadline --------------------------------------------- */

static atomic_int g_release_stuck;
static atomic_int g_stuck_returned;
static float g_stuck_input;

/* Replica 1 waits for g_release_stuck (at most 10 s), then reads its input, which
 * its caller released long ago: the runtime holds it. */
static tpu_status one_stuck(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                            tpu_tensor **out, int no, void *user) {
  if (replica_id(ctx) != 1) return TPU_OK;
  /* Until the test releases it, or 10 s (scaled) so that it ends even if the test does not. */
  for (int64_t i = 0; i < time_limit_ms(10000) && !atomic_load(&g_release_stuck); ++i) sleep_ms(1);
  const void *p = NULL;
  if (ni > 0 && tpu_tensor_data(in[0], &p) == TPU_OK) g_stuck_input = *(const float *)p;
  atomic_store(&g_stuck_returned, 1);
  return TPU_OK;
}

/* A computation that does not return costs its core, and only that: the caller gets
 * the deadline error in bounded time, a step that needs the core fails after waiting
 * the deadline for it, steps on other cores run, and shutdown is bounded too. */
static void test_replicate__stuck_replica_is_bounded(void **state) {
  atomic_store(&g_release_stuck, 0);
  atomic_store(&g_stuck_returned, 0);
  start(4, 200, 0);
  tpu_tensor *in[4];
  for (int r = 0; r < 4; ++r) {
    float v = (float)(r + 1);
    in[r] = floats(&v, 1);
  }
  double t0 = now();
  CHECK_ERROR(tpu_replicate(g_sys, one_stuck, NULL, 4, 1, in, 0, NULL, NULL),
               TPU_DEADLINE_EXCEEDED, "replica 1 did not return within 200 ms after another replica finished");
  assert_true(now() - t0 < time_limit(5.0));
  release_all(in, 4); /* the late replica holds its own references */
  int closed = 1;
  CHECK_OK(tpu_system_is_closed(g_sys, &closed));
  assert_int_equal(closed, 0);

  t0 = now();
  CHECK_ERROR(tpu_replicate(g_sys, one_stuck, NULL, 4, 0, NULL, 0, NULL, NULL),
               TPU_UNAVAILABLE,
               "the step needs core 1 (still running replica 1 of an earlier step, which overran "
               "its deadline), which did not return within 200 ms more");
  assert_true(now() - t0 < 5.0);
  atomic_int calls = 0;
  CHECK_OK(tpu_replicate(g_sys, empty, &calls, 1, 0, NULL, 0, NULL, NULL));
  assert_int_equal(calls, 1); /* replica 0 on core 0 */

  t0 = now();
  CHECK_ERROR(tpu_system_shutdown(g_sys), TPU_DEADLINE_EXCEEDED,
               "the system is shut down, but core 1 (still running replica 1 of an earlier step");
  assert_true(now() - t0 < 5.0);
  assert_int_equal(g_stuck_returned, 0);
  /* When it returns at last, shutdown finds nothing running. */
  atomic_store(&g_release_stuck, 1);
  CHECK_OK(tpu_system_shutdown(g_sys));
  assert_int_equal(g_stuck_returned, 1);
  assert_true(g_stuck_input == 2.0f);
}

typedef struct {
  int sleep_ms;          /* replica 1 sleeps this long before it touches anything */
  atomic_int go;         /* or, if sleep_ms is 0, waits for this */
  atomic_int returned;   /* set last, just before replica 1 returns */
  float seen;            /* replica 1's input, read after the sleep */
} late_plan;

static tpu_status one_late(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                           tpu_tensor **out, int no, void *user) {
  late_plan *p = user;
  if (replica_id(ctx) != 1) return TPU_OK;
  if (p->sleep_ms > 0) sleep_ms(p->sleep_ms);
  for (int i = 0; i < 10000 && p->sleep_ms == 0 && !atomic_load(&p->go); ++i) sleep_ms(1);
  if (p->sleep_ms == 0) sleep_ms(50); /* still running when the caller starts to wait */
  const void *data = NULL;
  if (ni > 0 && tpu_tensor_data(in[0], &data) == TPU_OK) p->seen = *(const float *)data;
  const int32_t one = 1; /* an output the runtime releases: the step failed */
  if (no > 0) tpu_tensor_create(TPU_INT32, NULL, 0, &one, sizeof one, &out[0]);
  atomic_store(&p->returned, 1);
  return TPU_OK;
}

/* One replica sleeps 1.5 s past a 400 ms deadline: the step fails naming it, and
 * once it returns its core serves the next step (it used to close the system). */
static void test_replicate__late_replica_gives_its_core_back(void **state) {
  start(4, 400, 0);
  late_plan plan;
  memset(&plan, 0, sizeof plan);
  plan.sleep_ms = 1900;
  tpu_tensor *out[4] = {NULL, NULL, NULL, NULL};
  CHECK_ERROR(tpu_replicate(g_sys, one_late, &plan, 4, 0, NULL, 1, out, NULL),
               TPU_DEADLINE_EXCEEDED,
               "replica 1 did not return within 400 ms after another replica finished");
  for (int r = 0; r < 4; ++r) assert_null(out[r]);
  assert_int_equal(plan.returned, 0);
  for (int i = 0; i < 10000 && !atomic_load(&plan.returned); ++i) sleep_ms(1);
  assert_int_equal(plan.returned, 1);
  atomic_int calls = 0;
  CHECK_OK(tpu_replicate(g_sys, empty, &calls, 4, 0, NULL, 0, NULL, NULL));
  assert_int_equal(calls, 4);
  int closed = 1;
  CHECK_OK(tpu_system_is_closed(g_sys, &closed));
  assert_int_equal(closed, 0);
}

/* The contract of replicate.h: after a step fails without a late replica, its
 * inputs are the runtime's to keep alive and its user_data stays the caller's to
 * keep alive until shutdown has waited for the computation. Here both are freed as
 * early as the contract allows; AddressSanitizer reports a use after free if the
 * runtime returned from shutdown before the computation did, or lost its inputs. */
static void test_replicate__late_replica_and_the_callers_memory(void **state) {
  start(4, 400, 0);
  late_plan *plan = calloc(1, sizeof *plan);
  assert_non_null(plan);
  tpu_tensor *in[4];
  for (int r = 0; r < 4; ++r) {
    float v = (float)(10 + r);
    in[r] = floats(&v, 1);
  }
  CHECK_ERROR(tpu_replicate(g_sys, one_late, plan, 4, 1, in, 0, NULL, NULL),
               TPU_DEADLINE_EXCEEDED, "replica 1 did not return");
  release_all(in, 4);
  atomic_store(&plan->go, 1);
  CHECK_OK(tpu_system_shutdown(g_sys)); /* waits for replica 1 */
  assert_int_equal(plan->returned, 1);
  assert_true(plan->seen == 11.0f);
  free(plan);
}

typedef struct {
  atomic_int go, returned;
  tpu_status status; /* replica 1's collective, once late */
  char message[512];
} late_collective_plan;

static tpu_status late_collective(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                  tpu_tensor **out, int no, void *user) {
  late_collective_plan *p = user;
  const float one = 1.0f;
  tpu_tensor *x = floats(&one, 1), *sum = NULL;
  if (replica_id(ctx) == 1) /* arrives only after the step has failed without it */
    for (int i = 0; i < 10000 && !atomic_load(&p->go); ++i) sleep_ms(1);
  tpu_status st = tpu_cross_replica_sum(ctx, x, NULL, &sum, NULL);
  if (replica_id(ctx) == 1) {
    p->status = st;
    snprintf(p->message, sizeof p->message, "%s", st == TPU_OK ? "" : tpu_last_error());
    atomic_store(&p->returned, 1);
  }
  tpu_tensor_release(sum);
  tpu_tensor_release(x);
  return st;
}

/* replicate.h: a late replica's collectives fail at once with TPU_ABORTED, even when
 * what failed the step was the others' collective deadline (it used to get that
 * TPU_DEADLINE_EXCEEDED and its message). */
static void test_replicate__late_replicas_collectives_are_aborted(void **state) {
  start(4, 300, 0);
  static late_collective_plan plan; /* static: a late replica may outlive a failed assertion */
  memset(&plan, 0, sizeof plan);
  CHECK_ERROR(tpu_replicate(g_sys, late_collective, &plan, 4, 0, NULL, 0, NULL, NULL),
              TPU_DEADLINE_EXCEEDED, "timed out after 300 ms waiting for replicas [1]");
  assert_int_equal(atomic_load(&plan.returned), 0);
  atomic_store(&plan.go, 1);
  for (int i = 0; i < 10000 && !atomic_load(&plan.returned); ++i) sleep_ms(1);
  assert_int_equal(atomic_load(&plan.returned), 1);
  if (plan.status != TPU_ABORTED)
    fail_msg("the late replica's collective: %s \"%s\"", tpu_status_name(plan.status), plan.message);
  assert_non_null(strstr(plan.message, "replica 1 did not return within 300 ms"));
  CHECK_OK(tpu_system_shutdown(g_sys)); /* nothing is still running */
}

/* ---- many and concurrent steps ------------------------------------------------- */

/* out[o] = sum of in[*] + o, as a float scalar. */
static tpu_status sum_inputs(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                             tpu_tensor **out, int no, void *user) {
  float sum = 0;
  for (int i = 0; i < ni; ++i) {
    int64_t n = 0;
    tpu_tensor_num_elements(in[i], &n);
    const float *x = float_data(in[i]);
    for (int64_t k = 0; k < n; ++k) sum += x[k];
  }
  for (int o = 0; o < no; ++o) {
    float v = sum + (float)o + (float)replica_id(ctx);
    int64_t one = 1;
    if (tpu_tensor_create(TPU_FLOAT, &one, 1, &v, sizeof v, &out[o]) != TPU_OK) return TPU_INTERNAL;
  }
  return TPU_OK;
}

static void run_random_steps(unsigned seed, int steps, int cores) {
  for (int step = 0; step < steps; ++step) {
    int replicas = rand_r(&seed) % 2 ? cores : 1;
    int ni = rand_r(&seed) % 4, no = rand_r(&seed) % 4;
    tpu_tensor *in[MAX_CORES * 3], *out[MAX_CORES * 3];
    float expect[MAX_CORES] = {0};
    int len[3]; /* per input: replicas' shapes must match */
    for (int i = 0; i < ni; ++i) len[i] = 1 + rand_r(&seed) % 8;
    for (int r = 0; r < replicas; ++r) {
      for (int i = 0; i < ni; ++i) {
        float v[8];
        for (int k = 0; k < len[i]; ++k) expect[r] += v[k] = (float)(rand_r(&seed) % 10);
        in[r * ni + i] = floats(v, len[i]);
      }
    }
    tpu_status st = tpu_replicate(g_sys, sum_inputs, NULL, replicas, ni, in, no, out, NULL);
    CHECK_OK(st);
    if (st == TPU_OK)
      for (int r = 0; r < replicas; ++r)
        for (int o = 0; o < no; ++o)
          CHECK(float_data(out[r * no + o])[0] == expect[r] + (float)o + (float)r);
    if (st == TPU_OK) release_all(out, replicas * no);
    release_all(in, replicas * ni);
  }
}

static void test_replicate__many_steps(void **state) {
  start(4, 0, 1);
  double t0 = now();
  run_random_steps(42, 1000, 4);
  assert_true(now() - t0 < time_limit(10.0));
}

/* The odd replicas busy-wait before an all-reduce: with 8 cores on 2 CPUs (pinned
 * round-robin) one CPU's workers and the caller run out of work while the other's
 * still compute, so idle workers and the waiting caller spin instead of yielding
 * (executor.cc). Every step's sum is right and no step waits on a spinner. */
static tpu_status uneven_sum(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                             tpu_tensor **out, int no, void *user) {
  const int r = replica_id(ctx);
  if (r % 2) {
    const double until = now() + 50e-6;
    while (now() < until) {
    }
  }
  const float v = (float)r;
  tpu_tensor *x = floats(&v, 1);
  tpu_status st = tpu_cross_replica_sum(ctx, x, NULL, &out[0], NULL);
  tpu_tensor_release(x);
  atomic_fetch_add((atomic_int *)user, 1);
  return st;
}

static void test_replicate__uneven_cpus_steps(void **state) {
  start(8, 0, 0);
  atomic_int calls = 0;
  double t0 = now();
  for (int step = 0; step < 100; ++step) {
    tpu_tensor *out[8] = {NULL};
    CHECK_OK(tpu_replicate(g_sys, uneven_sum, &calls, 8, 0, NULL, 1, out, NULL));
    for (int r = 0; r < 8; ++r) assert_true(float_data(out[r])[0] == 28.0f);
    release_all(out, 8);
  }
  assert_int_equal(calls, 8 * 100);
  /* 200 us of busy-waiting on one CPU a step: 20 ms alone, some seconds on a loaded
   * machine; the bound catches a wait that never ends, not a slow one. */
  assert_true(now() - t0 < time_limit(20.0));
}

static void *host_thread(void *arg) {
  run_random_steps((unsigned)(uintptr_t)arg, 300, 4);
  return NULL;
}

static void test_replicate__concurrent_callers(void **state) {
  start(4, 0, 1);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, host_thread, (void *)(uintptr_t)7), 0);
  run_random_steps(8, 300, 4);
  pthread_join(t, NULL);
  CHECK_NO_WORKER_FAILURES();
}

static tpu_status nested(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                         tpu_tensor **out, int no, void *user) {
  tpu_status st = tpu_replicate(g_sys, empty, user, 1, 0, NULL, 0, NULL, NULL);
  return st == TPU_FAILED_PRECONDITION && strstr(tpu_last_error(), "cannot be nested") ? TPU_OK
                                                                                       : TPU_INTERNAL;
}

static void test_replicate__no_nesting(void **state) {
  start(2, 0, 1);
  atomic_int calls = 0;
  CHECK_OK(tpu_replicate(g_sys, nested, &calls, 2, 0, NULL, 0, NULL, NULL));
  assert_int_equal(calls, 0);
}

/* ---- outside compilation -------------------------------------------------------- */

typedef struct {
  atomic_int inside, overlaps, calls, ran[MAX_CORES];
  int fail_replica;
  const char *why; /* set: the failing call says this through tpu_set_last_error */
} host_state;

static tpu_status host_fn(int replica, void *user) {
  host_state *h = user;
  char name[16] = "";
  pthread_getname_np(pthread_self(), name, sizeof name);
  if (atomic_fetch_add(&h->inside, 1) != 0 || strcmp(name, "tpurt-host") != 0)
    atomic_fetch_add(&h->overlaps, 1);
  sleep_ms(1);
  atomic_fetch_add(&h->ran[replica], 1);
  atomic_fetch_add(&h->calls, 1);
  atomic_fetch_sub(&h->inside, 1);
  if (replica == h->fail_replica && h->why) return tpu_set_last_error(TPU_NOT_FOUND, h->why);
  if (replica == h->fail_replica) {
    tpu_tensor *t = NULL;
    return tpu_tensor_create((tpu_dtype)77, NULL, 0, NULL, 0, &t);
  }
  return TPU_OK;
}

static tpu_status call_host(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                            tpu_tensor **out, int no, void *user) {
  for (int i = 0; i < 3; ++i) {
    tpu_status st = tpu_outside_compilation(ctx, host_fn, user);
    if (st != TPU_OK) return st;
  }
  return TPU_OK;
}

static void test_replicate__outside_compilation(void **state) {
  start(8, 0, 0);
  host_state h;
  memset(&h, 0, sizeof h);
  h.fail_replica = -1;
  CHECK_OK(tpu_replicate(g_sys, call_host, &h, 8, 0, NULL, 0, NULL, NULL));
  assert_int_equal(h.calls, 24);
  assert_int_equal(h.overlaps, 0);
  /* A host function's failure comes back with its message. */
  h.fail_replica = 5;
  CHECK_ERROR(tpu_replicate(g_sys, call_host, &h, 8, 0, NULL, 0, NULL, NULL),
               TPU_INVALID_ARGUMENT, "replica 5: unknown dtype 77");
  /* So does a message a host function (a binding's) sets itself. */
  h.fail_replica = 2;
  h.why = "KeyError: 'weights'";
  CHECK_ERROR(tpu_replicate(g_sys, call_host, &h, 8, 0, NULL, 0, NULL, NULL), TPU_NOT_FOUND,
              "replica 2: KeyError: 'weights'");
  atomic_int calls = 0;
  CHECK_OK(tpu_replicate(g_sys, empty, &calls, 8, 0, NULL, 0, NULL, NULL));
  assert_int_equal(calls, 8);
}

static void test_replicate__set_last_error(void **state) {
  assert_int_equal(tpu_set_last_error(TPU_ABORTED, "why"), TPU_ABORTED);
  assert_string_equal(tpu_last_error(), "why");
  assert_int_equal(tpu_set_last_error(TPU_UNKNOWN, NULL), TPU_UNKNOWN);
  assert_string_equal(tpu_last_error(), "");
  CHECK_ERROR(tpu_set_last_error(TPU_OK, "fine"), TPU_INVALID_ARGUMENT, "not TPU_OK");
}

typedef struct {
  atomic_int ran[4];
  atomic_int aborted;
} cancel_state;

static tpu_status slow_host(int replica, void *user) {
  cancel_state *c = user;
  atomic_fetch_add(&c->ran[replica], 1);
  if (replica == 0) sleep_ms(300);
  return TPU_OK;
}

static tpu_status queue_then_fail(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                  tpu_tensor **out, int no, void *user) {
  cancel_state *c = user;
  int r = replica_id(ctx);
  if (r == 1) {
    sleep_ms(60);
    return tpu_replica_context_fail(ctx, TPU_UNAVAILABLE, "gone");
  }
  if (r > 1) sleep_ms(20); /* queue behind replica 0's long call */
  tpu_status st = tpu_outside_compilation(ctx, slow_host, c);
  if (st == TPU_ABORTED) atomic_fetch_add(&c->aborted, 1);
  return st;
}

static void test_replicate__outside_compilation_cancelled_by_abort(void **state) {
  start(4, time_limit_ms(5000), 0);
  cancel_state c;
  memset(&c, 0, sizeof c);
  CHECK_ERROR(tpu_replicate(g_sys, queue_then_fail, &c, 4, 0, NULL, 0, NULL, NULL),
               TPU_UNAVAILABLE, "replica 1: gone");
  assert_int_equal(c.ran[0], 1);
  assert_int_equal(c.ran[2] + c.ran[3], 0); /* dropped from the queue, never ran */
  assert_int_equal(c.aborted, 2);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_replicate__per_replica_results, release_system),
      cmocka_unit_test_teardown(test_replicate__explicit_device_assignment, release_system),
      cmocka_unit_test_teardown(test_replicate__argument_rules, release_system),
      cmocka_unit_test_teardown(test_replicate__maximum_shapes, release_system),
      cmocka_unit_test_teardown(test_replicate__sizes_that_overflow, release_system),
      cmocka_unit_test_teardown(test_replicate__first_failure_and_recovery, release_system),
      cmocka_unit_test_teardown(test_replicate__close_on_failure, release_system),
      cmocka_unit_test_teardown(test_replicate__stuck_replica_is_bounded, release_system),
      cmocka_unit_test_teardown(test_replicate__late_replica_gives_its_core_back, release_system),
      cmocka_unit_test_teardown(test_replicate__late_replica_and_the_callers_memory, release_system),
      cmocka_unit_test_teardown(test_replicate__late_replicas_collectives_are_aborted, release_system),
      cmocka_unit_test_teardown(test_replicate__many_steps, release_system),
      cmocka_unit_test_teardown(test_replicate__concurrent_callers, release_system),
      cmocka_unit_test_teardown(test_replicate__uneven_cpus_steps, release_system),
      cmocka_unit_test_teardown(test_replicate__no_nesting, release_system),
      cmocka_unit_test_teardown(test_replicate__outside_compilation, release_system),
      cmocka_unit_test(test_replicate__set_last_error),
      cmocka_unit_test_teardown(test_replicate__outside_compilation_cancelled_by_abort, release_system),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
