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

static tpu_system *g_sys;

static int teardown(void **state) {
  (void)state;
  tpu_system_release(g_sys);
  g_sys = NULL;
  return 0;
}

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
  assert_int_equal(tpu_tensor_create(TPU_FLOAT, &n, 1, v, (size_t)n * sizeof(float), &t), TPU_OK);
  return t;
}

static tpu_tensor *int_scalar(int32_t v) {
  tpu_tensor *t = NULL;
  assert_int_equal(tpu_tensor_create(TPU_INT32, NULL, 0, &v, sizeof v, &t), TPU_OK);
  return t;
}

static const float *float_data(const tpu_tensor *t) {
  const void *p = NULL;
  assert_int_equal(tpu_tensor_data(t, &p), TPU_OK);
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
  assert_int_equal(tpu_replicate(g_sys, scale_by_replica, &n, 4, 1, in, NULL, NULL, 2, out), TPU_OK);
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
  assert_int_equal(tpu_rewrite(g_sys, scale_by_replica, &n, 1, in, NULL, 2, out), TPU_OK);
  assert_true(float_data(out[0])[0] == 0.0f);
  release_all(out, 2);
  release_all(in, 4);
}

static void test_replicate__explicit_device_assignment(void **state) {
  start(4, 0, 1);
  tpu_topology *topo = NULL;
  assert_int_equal(tpu_system_topology(g_sys, &topo), TPU_OK);
  /* Replica r on core 3 - r: mesh [4,1,1,1], so core c is at (c, 0, 0, 0). */
  int32_t reversed[4][1][4];
  for (int r = 0; r < 4; ++r) {
    int32_t c[4] = {3 - r, 0, 0, 0};
    memcpy(reversed[r][0], c, sizeof c);
  }
  tpu_device_assignment *da = NULL;
  assert_int_equal(tpu_device_assignment_create(topo, &reversed[0][0][0], 4, 1, &da), TPU_OK);
  int n = 4;
  tpu_tensor *in[4], *out[8];
  for (int r = 0; r < 4; ++r) {
    float v = 1;
    in[r] = floats(&v, 1);
  }
  assert_int_equal(tpu_replicate(g_sys, scale_by_replica, &n, 4, 1, in, da, NULL, 2, out), TPU_OK);
  for (int r = 0; r < 4; ++r) {
    const void *p;
    tpu_tensor_data(out[2 * r + 1], &p);
    assert_int_equal(*(const int32_t *)p, (3 - r) * 100 + 1);
  }
  release_all(out, 8);
  /* Its replica count must match. */
  expect_error(tpu_replicate(g_sys, scale_by_replica, &n, 1, 1, in, da, NULL, 2, out),
               TPU_INVALID_ARGUMENT, "device assignment has 4 replicas");
  tpu_device_assignment_release(da);

  /* Two cores per replica: replica r runs on its logical core 0. */
  int32_t pairs[2][2][4] = {{{2, 0, 0, 0}, {3, 0, 0, 0}}, {{0, 0, 0, 0}, {1, 0, 0, 0}}};
  assert_int_equal(tpu_device_assignment_create(topo, &pairs[0][0][0], 2, 2, &da), TPU_OK);
  n = 2;
  assert_int_equal(tpu_replicate(g_sys, scale_by_replica, &n, 2, 1, in, da, NULL, 2, out), TPU_OK);
  const void *p;
  tpu_tensor_data(out[1], &p);
  assert_int_equal(*(const int32_t *)p, 2 * 100 + 2);
  tpu_tensor_data(out[3], &p);
  assert_int_equal(*(const int32_t *)p, 0 * 100 + 2);
  release_all(out, 4);
  tpu_device_assignment_release(da);
  tpu_topology_release(topo);

  /* An assignment over a larger topology names cores this system lacks. */
  int32_t mesh[4] = {8, 1, 1, 1}, coords[8][4];
  for (int d = 0; d < 8; ++d) coords[d][0] = d, coords[d][1] = coords[d][2] = coords[d][3] = 0;
  assert_int_equal(tpu_topology_create(mesh, 4, &coords[0][0], 1, 8, &topo), TPU_OK);
  int32_t far[1][1][4] = {{{6, 0, 0, 0}}};
  assert_int_equal(tpu_device_assignment_create(topo, &far[0][0][0], 1, 1, &da), TPU_OK);
  expect_error(tpu_replicate(g_sys, scale_by_replica, &n, 1, 1, in, da, NULL, 2, out),
               TPU_INVALID_ARGUMENT, "device 6");
  tpu_device_assignment_release(da);
  tpu_topology_release(topo);
  /* The same mesh as two tasks of four devices: device (6,0,0,0) is on task 1. */
  assert_int_equal(tpu_topology_create(mesh, 4, &coords[0][0], 2, 4, &topo), TPU_OK);
  assert_int_equal(tpu_device_assignment_create(topo, &far[0][0][0], 1, 1, &da), TPU_OK);
  expect_error(tpu_replicate(g_sys, scale_by_replica, &n, 1, 1, in, da, NULL, 2, out),
               TPU_INVALID_ARGUMENT, "on task 1");
  tpu_device_assignment_release(da);
  tpu_topology_release(topo);
  release_all(in, 4);
}

static void test_replicate__argument_rules(void **state) {
  start(4, 0, 1);
  atomic_int calls = 0;
  tpu_tensor *out[8];
  /* Zero replicas: nothing runs. */
  assert_int_equal(tpu_replicate(g_sys, empty, &calls, 0, 0, NULL, NULL, NULL, 0, NULL), TPU_OK);
  assert_int_equal(calls, 0);
  expect_error(tpu_replicate(g_sys, empty, &calls, 3, 0, NULL, NULL, NULL, 0, NULL),
               TPU_INVALID_ARGUMENT, "'num_replicas' must be equal to 1 or 4");
  expect_error(tpu_replicate(g_sys, empty, &calls, -1, 0, NULL, NULL, NULL, 0, NULL),
               TPU_INVALID_ARGUMENT, "num_replicas");
  expect_error(tpu_replicate(g_sys, empty, &calls, 4, 1, NULL, NULL, NULL, 0, NULL),
               TPU_INVALID_ARGUMENT, "'inputs' is NULL");
  expect_error(tpu_replicate(g_sys, empty, &calls, 4, -2, NULL, NULL, NULL, 0, NULL),
               TPU_INVALID_ARGUMENT, "num_inputs");
  expect_error(tpu_replicate(g_sys, empty, &calls, 4, 0, NULL, NULL, NULL, 1, NULL),
               TPU_INVALID_ARGUMENT, "'outputs' is NULL");
  expect_error(tpu_replicate(g_sys, NULL, &calls, 4, 0, NULL, NULL, NULL, 0, NULL),
               TPU_INVALID_ARGUMENT, "computation");

  float v = 1;
  tpu_tensor *in[8];
  for (int i = 0; i < 8; ++i) in[i] = floats(&v, 1);
  tpu_tensor_release(in[5]);
  in[5] = int_scalar(7); /* replica 2 input 1 */
  for (int i = 0; i < 8; ++i) out[i] = (tpu_tensor *)&v; /* must come back NULL */
  expect_error(tpu_replicate(g_sys, empty, &calls, 4, 2, in, NULL, NULL, 2, out),
               TPU_INVALID_ARGUMENT,
               "Replicas must have matching input types: replica 2 input 1 is int32 but "
               "replica 0's is float32");
  for (int i = 0; i < 8; ++i) assert_null(out[i]);
  tpu_tensor_release(in[5]);
  in[5] = floats(&v, 1);
  tpu_tensor *saved = in[6];
  in[6] = NULL;
  expect_error(tpu_replicate(g_sys, empty, &calls, 4, 2, in, NULL, NULL, 0, NULL),
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
      tpu_tensor_dims(in[i], s->dims[r][i], 2);
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
  assert_int_equal(tpu_tensor_create(TPU_FLOAT, dims, 2, v, (size_t)(rows * cols) * 4, &t), TPU_OK);
  return t;
}

static void test_replicate__maximum_shapes(void **state) {
  start(2, 0, 1);
  seen_inputs s;
  memset(&s, 0, sizeof s);
  /* input 0: [2,3] vs [3,3] (dim 0 differs) padded to max(-1 -> 3); dim 1 equal.
   * input 1: [1,1] vs [1,4], target 8 in dim 1.  input 2: never padded. */
  tpu_tensor *in[6] = {matrix(2, 3, 1), matrix(1, 1, 0), matrix(1, 2, 0),
                       matrix(3, 3, 10), matrix(1, 4, 0), matrix(1, 3, 0)};
  tpu_shape max[3];
  memset(max, 0, sizeof max);
  max[0].rank = 2, max[0].dims[0] = -1, max[0].dims[1] = -1;
  max[1].rank = 2, max[1].dims[0] = 1, max[1].dims[1] = 8;
  max[2].rank = -1;
  assert_int_equal(tpu_replicate(g_sys, record_inputs, &s, 2, 3, in, NULL, max, 0, NULL), TPU_OK);
  assert_int_equal(s.num_inputs, 5); /* 3 inputs + (0,0) + (1,1) */
  for (int r = 0; r < 2; ++r) {
    assert_int_equal(s.dims[r][0][0], 3);
    assert_int_equal(s.dims[r][0][1], 3);
    assert_int_equal(s.dims[r][1][0], 1);
    assert_int_equal(s.dims[r][1][1], 8);
    assert_int_equal(s.dims[r][2][1], r == 0 ? 2 : 3); /* unpadded */
  }
  assert_int_equal(s.dims[0][3][0], 2); /* real sizes, (input, dimension) order */
  assert_int_equal(s.dims[1][3][0], 3);
  assert_int_equal(s.dims[0][4][0], 1);
  assert_int_equal(s.dims[1][4][0], 4);
  for (int i = 0; i < 9; ++i) /* replica 0: 6 values then a zero row */
    assert_true(s.first[0][i] == (i < 6 ? 1.0f + (float)i : 0.0f));
  for (int i = 0; i < 9; ++i) assert_true(s.first[1][i] == 10.0f + (float)i);

  /* A target below an actual size is an error. */
  max[1].dims[1] = 3;
  expect_error(tpu_replicate(g_sys, record_inputs, &s, 2, 3, in, NULL, max, 0, NULL),
               TPU_INVALID_ARGUMENT, "maximum_shapes[1].dims[1] = 3");
  /* A rank that does not match is an error. */
  max[1].rank = 1;
  expect_error(tpu_replicate(g_sys, record_inputs, &s, 2, 3, in, NULL, max, 0, NULL),
               TPU_INVALID_ARGUMENT, "maximum_shapes[1] has rank 1");
  release_all(in, 6);

  /* Targets are at least 2: sizes 0 and 1 pad to 2. */
  tpu_tensor *small[2] = {matrix(0, 1, 0), matrix(1, 1, 5)};
  tpu_shape one;
  memset(&one, 0, sizeof one);
  one.rank = 2, one.dims[0] = -1, one.dims[1] = -1;
  assert_int_equal(tpu_replicate(g_sys, record_inputs, &s, 2, 1, small, NULL, &one, 0, NULL), TPU_OK);
  assert_int_equal(s.num_inputs, 2);
  assert_int_equal(s.dims[0][0][0], 2);
  assert_int_equal(s.dims[0][0][1], 1);
  assert_int_equal(s.dims[0][1][0], 0);
  assert_int_equal(s.dims[1][1][0], 1);
  assert_true(s.first[1][0] == 5.0f && s.first[1][1] == 0.0f);
  release_all(small, 2);
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
    tpu_status st = tpu_barrier(ctx);
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
  start(4, 5000, 0);
  tpu_tensor *out[4];
  failure_plan p = {2, 0, 20, 0};
  for (int i = 0; i < 4; ++i) out[i] = (tpu_tensor *)&p;
  double t0 = now();
  expect_error(tpu_replicate(g_sys, fail_one, &p, 4, 0, NULL, NULL, NULL, 1, out),
               TPU_INVALID_ARGUMENT, "replica 2: boom");
  assert_true(now() - t0 < 2.0); /* the others' barrier was aborted, not timed out */
  assert_int_equal(p.aborted, 3);
  assert_string_equal(tpu_last_error(), "replica 2: boom");
  for (int i = 0; i < 4; ++i) assert_null(out[i]);

  p.failing = 1, p.mode = 1;
  expect_error(tpu_replicate(g_sys, fail_one, &p, 4, 0, NULL, NULL, NULL, 1, out),
               TPU_INVALID_ARGUMENT, "replica 1: unknown dtype 99");
  p.failing = 0, p.mode = 2;
  expect_error(tpu_replicate(g_sys, fail_one, &p, 4, 0, NULL, NULL, NULL, 1, out), TPU_INTERNAL,
               "replica 0: the computation returned INTERNAL");

  /* close_on_failure = 0: the next step runs normally. */
  p.failing = -1;
  assert_int_equal(tpu_replicate(g_sys, fail_one, &p, 4, 0, NULL, NULL, NULL, 1, out), TPU_OK);
  for (int r = 0; r < 4; ++r) {
    const void *d;
    tpu_tensor_data(out[r], &d);
    assert_int_equal(*(const int32_t *)d, r);
  }
  release_all(out, 4);
  int closed = 1;
  assert_int_equal(tpu_system_is_closed(g_sys, &closed), TPU_OK);
  assert_int_equal(closed, 0);
}

static void test_replicate__close_on_failure(void **state) {
  start(2, 5000, 1);
  tpu_tensor *out[2];
  failure_plan p = {1, 0, 0, 0};
  expect_error(tpu_replicate(g_sys, fail_one, &p, 2, 0, NULL, NULL, NULL, 1, out),
               TPU_INVALID_ARGUMENT, "replica 1: boom");
  p.failing = -1;
  expect_error(tpu_replicate(g_sys, fail_one, &p, 2, 0, NULL, NULL, NULL, 1, out),
               TPU_FAILED_PRECONDITION, "the system was closed by a failed step: replica 1: boom");
  int closed = 0;
  assert_int_equal(tpu_system_is_closed(g_sys, &closed), TPU_OK);
  assert_int_equal(closed, 1);
  assert_int_equal(tpu_system_shutdown(g_sys), TPU_OK);
}

static atomic_int g_release_stuck;

static tpu_status one_stuck(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                            tpu_tensor **out, int no, void *user) {
  if (replica_id(ctx) != 1) return TPU_OK;
  for (int i = 0; i < 10000 && !atomic_load(&g_release_stuck); ++i) sleep_ms(1); /* <= 10 s */
  return TPU_OK;
}

static void test_replicate__stuck_replica_is_bounded(void **state) {
  start(4, 200, 0);
  float v = 1;
  tpu_tensor *in[4];
  for (int r = 0; r < 4; ++r) in[r] = floats(&v, 1);
  double t0 = now();
  expect_error(tpu_replicate(g_sys, one_stuck, NULL, 4, 1, in, NULL, NULL, 0, NULL),
               TPU_DEADLINE_EXCEEDED, "replica 1 did not return within 200 ms");
  assert_true(now() - t0 < 5.0);
  release_all(in, 4); /* the stuck replica holds its own references */
  int closed = 0;
  assert_int_equal(tpu_system_is_closed(g_sys, &closed), TPU_OK);
  assert_int_equal(closed, 1);
  expect_error(tpu_replicate(g_sys, one_stuck, NULL, 1, 0, NULL, NULL, NULL, 0, NULL),
               TPU_FAILED_PRECONDITION, "closed by a failed step");
  atomic_store(&g_release_stuck, 1);
  assert_int_equal(tpu_system_shutdown(g_sys), TPU_OK);
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
    for (int r = 0; r < replicas; ++r) {
      for (int i = 0; i < ni; ++i) {
        float v[8];
        int len = 1 + rand_r(&seed) % 8;
        for (int k = 0; k < len; ++k) expect[r] += v[k] = (float)(rand_r(&seed) % 10);
        in[r * ni + i] = floats(v, len);
      }
    }
    tpu_status st = tpu_replicate(g_sys, sum_inputs, NULL, replicas, ni, in, NULL, NULL, no, out);
    if (st != TPU_OK) fail_msg("step %d: %s", step, tpu_last_error());
    for (int r = 0; r < replicas; ++r)
      for (int o = 0; o < no; ++o)
        assert_true(float_data(out[r * no + o])[0] == expect[r] + (float)o + (float)r);
    release_all(out, replicas * no);
    release_all(in, replicas * ni);
  }
}

static void test_replicate__many_steps(void **state) {
  start(4, 0, 1);
  double t0 = now();
  run_random_steps(42, 1000, 4);
  assert_true(now() - t0 < 10.0);
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
}

static tpu_status nested(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                         tpu_tensor **out, int no, void *user) {
  tpu_status st = tpu_replicate(g_sys, empty, user, 1, 0, NULL, NULL, NULL, 0, NULL);
  return st == TPU_FAILED_PRECONDITION && strstr(tpu_last_error(), "cannot be nested") ? TPU_OK
                                                                                       : TPU_INTERNAL;
}

static void test_replicate__no_nesting(void **state) {
  start(2, 0, 1);
  atomic_int calls = 0;
  assert_int_equal(tpu_replicate(g_sys, nested, &calls, 2, 0, NULL, NULL, NULL, 0, NULL), TPU_OK);
  assert_int_equal(calls, 0);
}

/* ---- outside compilation -------------------------------------------------------- */

typedef struct {
  atomic_int inside, overlaps, calls, ran[MAX_CORES];
  int fail_replica;
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
  assert_int_equal(tpu_replicate(g_sys, call_host, &h, 8, 0, NULL, NULL, NULL, 0, NULL), TPU_OK);
  assert_int_equal(h.calls, 24);
  assert_int_equal(h.overlaps, 0);
  /* A host function's failure comes back with its message. */
  h.fail_replica = 5;
  expect_error(tpu_replicate(g_sys, call_host, &h, 8, 0, NULL, NULL, NULL, 0, NULL),
               TPU_INVALID_ARGUMENT, "replica 5: unknown dtype 77");
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
  start(4, 5000, 0);
  cancel_state c;
  memset(&c, 0, sizeof c);
  expect_error(tpu_replicate(g_sys, queue_then_fail, &c, 4, 0, NULL, NULL, NULL, 0, NULL),
               TPU_UNAVAILABLE, "replica 1: gone");
  assert_int_equal(c.ran[0], 1);
  assert_int_equal(c.ran[2] + c.ran[3], 0); /* dropped from the queue, never ran */
  assert_int_equal(c.aborted, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_replicate__per_replica_results, teardown),
      cmocka_unit_test_teardown(test_replicate__explicit_device_assignment, teardown),
      cmocka_unit_test_teardown(test_replicate__argument_rules, teardown),
      cmocka_unit_test_teardown(test_replicate__maximum_shapes, teardown),
      cmocka_unit_test_teardown(test_replicate__first_failure_and_recovery, teardown),
      cmocka_unit_test_teardown(test_replicate__close_on_failure, teardown),
      cmocka_unit_test_teardown(test_replicate__stuck_replica_is_bounded, teardown),
      cmocka_unit_test_teardown(test_replicate__many_steps, teardown),
      cmocka_unit_test_teardown(test_replicate__concurrent_callers, teardown),
      cmocka_unit_test_teardown(test_replicate__no_nesting, teardown),
      cmocka_unit_test_teardown(test_replicate__outside_compilation, teardown),
      cmocka_unit_test_teardown(test_replicate__outside_compilation_cancelled_by_abort, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
