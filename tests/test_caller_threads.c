/* Steps on the caller's threads (tpu_step_options.caller_threads, tpu_step_join,
 * tpu_step_leave): results against a naive reference and against the worker mode
 * (replicate, shard, batch_parallel, rewrite, maximum_shapes, infeed, 2 cores per
 * replica with partitions); a core never joined; the rules of join and leave; a
 * thread that exits inside its participant; a late joined thread; worker and
 * caller-thread steps mixed, from several host threads. Every wait is bounded. */
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
#include <unistd.h>

#include <tpurt.h>

#include "test_util.h"

#define MAX_CORES 8
#define LEN 5 /* elements of each replica's input */

TEST_SYSTEM_FIXTURE

static void start(int cores, int64_t timeout_ms) {
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = cores;
  o.collective_timeout_ms = timeout_ms;
  o.close_on_failure = 0;
  tpu_status st = tpu_system_init(&o, &g_sys);
  if (st != TPU_OK) fail_msg("tpu_system_init: %s: %s", tpu_status_name(st), tpu_last_error());
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static tpu_step_options caller_options(int64_t timeout_ms) {
  tpu_step_options o = TPU_STEP_OPTIONS_INIT;
  o.caller_threads = 1;
  o.collective_timeout_ms = timeout_ms;
  return o;
}

/* ---- tensors ----------------------------------------------------------------------- */

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

static const void *data_of(const tpu_tensor *t) {
  const void *p = NULL;
  CHECK_OK(tpu_tensor_data(t, &p));
  return p;
}

static int32_t int_of(const tpu_tensor *t) { return *(const int32_t *)data_of(t); }

static void release_all(tpu_tensor **t, int n) {
  for (int i = 0; i < n; ++i) {
    tpu_tensor_release(t[i]);
    t[i] = NULL;
  }
}

/* Replica r's input element i at step s: small integers, every sum exact. */
static float input_value(int s, int r, int i) { return (float)((s * 7 + r * 3 + i * 5) % 23); }

static void make_inputs(int s, int n, tpu_tensor **in) {
  for (int r = 0; r < n; ++r) {
    float v[LEN];
    for (int i = 0; i < LEN; ++i) v[i] = input_value(s, r, i);
    in[r] = floats(v, LEN);
  }
}

/* Equal dtype, shape and bytes; NULL equals NULL only. */
static int same_tensor(const tpu_tensor *a, const tpu_tensor *b) {
  if (a == NULL || b == NULL) return a == b;
  tpu_dtype da, db;
  int ra, rb;
  int64_t dims_a[TPU_MAX_RANK], dims_b[TPU_MAX_RANK];
  size_t na = 0, nb = 0, ba = 0, bb = 0;
  tpu_tensor_dtype(a, &da);
  tpu_tensor_dtype(b, &db);
  tpu_tensor_rank(a, &ra);
  tpu_tensor_rank(b, &rb);
  tpu_tensor_dims(a, dims_a, TPU_MAX_RANK, &na);
  tpu_tensor_dims(b, dims_b, TPU_MAX_RANK, &nb);
  tpu_tensor_byte_size(a, &ba);
  tpu_tensor_byte_size(b, &bb);
  return da == db && ra == rb && na == nb && !memcmp(dims_a, dims_b, na * sizeof(int64_t)) &&
         ba == bb && !memcmp(data_of(a), data_of(b), ba);
}

/* ---- computations ------------------------------------------------------------------ */

static int ctx_int(tpu_status (*get)(const tpu_replica_context *, int *),
                   const tpu_replica_context *ctx) {
  int v = -1;
  CHECK_OK(get(ctx, &v));
  return v;
}
#define REPLICA(ctx) ctx_int(tpu_replica_context_replica_id, (ctx))
#define CORE(ctx) ctx_int(tpu_replica_context_core, (ctx))

/* Where each core's computation last ran (a tpu_computation_fn's user_data). */
typedef struct where_ran {
  pthread_t thread[MAX_CORES];
  atomic_int calls;
} where_ran;

/* out[0] = cross_replica_sum(in[0]); out[1] = int32 replica * 100 + core, if asked. */
static tpu_status sum_fn(tpu_replica_context *ctx, tpu_tensor *const *in, int ni, tpu_tensor **out,
                         int no, void *user) {
  if (user != NULL) {
    where_ran *w = user;
    w->thread[CORE(ctx)] = pthread_self();
    atomic_fetch_add(&w->calls, 1);
  }
  if (ni < 1 || no < 1) return tpu_replica_context_fail(ctx, TPU_INTERNAL, "sum_fn: wrong counts");
  tpu_status st = tpu_cross_replica_sum(ctx, in[0], NULL, &out[0], NULL);
  if (st != TPU_OK) return st;
  if (no > 1) out[1] = int_scalar(REPLICA(ctx) * 100 + CORE(ctx));
  return TPU_OK;
}

/* out[o] = a new reference to in[o]: what the participant was given, to compare. */
static tpu_status echo_fn(tpu_replica_context *ctx, tpu_tensor *const *in, int ni, tpu_tensor **out,
                          int no, void *user) {
  (void)user;
  if (ni != no) return tpu_replica_context_fail(ctx, TPU_INTERNAL, "echo_fn: ni != no");
  for (int o = 0; o < no; ++o) {
    tpu_tensor_retain(in[o]);
    out[o] = in[o];
  }
  return TPU_OK;
}

/* out[0] = cross_replica_sum(in[0]) * (replica + 1) + logical core; out[1] = in[0]
 * scaled by the logical core + 1 (a tile, with partitions). */
static tpu_status affine_fn(tpu_replica_context *ctx, tpu_tensor *const *in, int ni, tpu_tensor **out,
                            int no, void *user) {
  (void)ni, (void)no, (void)user;
  int lc = ctx_int(tpu_replica_context_logical_core, ctx);
  tpu_tensor *sum = NULL;
  tpu_status st = tpu_cross_replica_sum(ctx, in[0], NULL, &sum, NULL);
  if (st != TPU_OK) return st;
  int64_t n = 0;
  tpu_tensor_num_elements(in[0], &n);
  float *a = calloc((size_t)n + 1, sizeof(float)), *b = calloc((size_t)n + 1, sizeof(float));
  const float *s = data_of(sum), *x = data_of(in[0]);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = s[i] * (float)(REPLICA(ctx) + 1) + (float)lc;
    b[i] = x[i] * (float)(lc + 1);
  }
  int rank = 0;
  int64_t dims[TPU_MAX_RANK];
  size_t nd = 0;
  tpu_tensor_rank(in[0], &rank);
  tpu_tensor_dims(in[0], dims, TPU_MAX_RANK, &nd);
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, rank, a, (size_t)n * sizeof(float), &out[0]));
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, rank, b, (size_t)n * sizeof(float), &out[1]));
  free(a);
  free(b);
  tpu_tensor_release(sum);
  return TPU_OK;
}

/* ---- a pool of joined threads: one per core, join -> run -> leave ------------------ */

typedef struct pool {
  tpu_system *sys;
  int num_cores;
  int serves[MAX_CORES]; /* a thread for this core */
  pthread_t tids[MAX_CORES];
  atomic_int stop;
  atomic_int served[MAX_CORES];
  atomic_int last_status[MAX_CORES]; /* the last computation's */
  atomic_int entered[MAX_CORES];     /* participants taken (tpu_step_join returned one) */
  atomic_int cancelled;              /* threads that ended with TPU_CANCELLED */
  int64_t join_timeout_ms;           /* each join's; -1: no limit (ended by a cancel) */
} pool;

typedef struct pool_arg {
  pool *p;
  int core;
} pool_arg;

static pool_arg g_pool_args[MAX_CORES];

static tpu_status run_joined(tpu_joined_step *j) {
  tpu_tensor *out[8] = {0};
  if (j->num_outputs > 8) {
    CHECK_FAIL("num_outputs %d", j->num_outputs);
    return tpu_step_leave(j->ctx, TPU_INTERNAL, NULL, 0);
  }
  tpu_computation_fn fn = j->computation ? j->computation : sum_fn;
  tpu_status st = fn(j->ctx, j->inputs, j->num_inputs, out, j->num_outputs, j->user_data);
  tpu_status left = tpu_step_leave(j->ctx, st, out, j->num_outputs);
  if (left != TPU_OK) CHECK_FAIL("tpu_step_leave: %s: %s", tpu_status_name(left), tpu_last_error());
  return st;
}

static void *pool_main(void *arg) {
  pool_arg *a = arg;
  pool *p = a->p;
  const double give_up = now() + time_limit(120); /* a hang ends here, not in the runner */
  while (!atomic_load(&p->stop) && now() < give_up) {
    tpu_joined_step j = TPU_JOINED_STEP_INIT;
    tpu_status st = tpu_step_join(p->sys, a->core, p->join_timeout_ms, &j);
    if (st == TPU_DEADLINE_EXCEEDED) continue;
    /* The test's readiness probe (pool_wait_ready) holds the core for a moment. */
    if (st == TPU_ALREADY_EXISTS && strstr(tpu_last_error(), "joined by another thread")) continue;
    /* Shut down while waiting, or between two joins. */
    if (st == TPU_CANCELLED || (st == TPU_FAILED_PRECONDITION && strstr(tpu_last_error(), "shut down"))) {
      atomic_fetch_add(&p->cancelled, 1);
      break;
    }
    if (st != TPU_OK) {
      CHECK_FAIL("core %d: tpu_step_join: %s: %s", a->core, tpu_status_name(st), tpu_last_error());
      break;
    }
    CHECK(CORE(j.ctx) == a->core);
    atomic_fetch_add(&p->entered[a->core], 1);
    atomic_store(&p->last_status[a->core], run_joined(&j));
    atomic_fetch_add(&p->served[a->core], 1);
  }
  return NULL;
}

/* Starts a thread for each core whose mask bit is set (mask 0: every core), each
 * joining with join_timeout_ms. */
static void pool_start_joining(pool *p, tpu_system *sys, int num_cores, unsigned mask, int64_t join_timeout_ms) {
  memset(p, 0, sizeof *p);
  p->sys = sys;
  p->join_timeout_ms = join_timeout_ms;
  p->num_cores = num_cores;
  for (int c = 0; c < num_cores; ++c) {
    if (mask && !(mask & (1u << c))) continue;
    g_pool_args[c] = (pool_arg){p, c};
    p->serves[c] = 1;
    assert_int_equal(pthread_create(&p->tids[c], NULL, pool_main, &g_pool_args[c]), 0);
  }
}

static void pool_start(pool *p, tpu_system *sys, int num_cores, unsigned mask) {
  pool_start_joining(p, sys, num_cores, mask, 20);
}

/* Waits until every thread of the pool waits in tpu_step_join (a probe join of its
 * core says "another thread"), so that a step with a short deadline finds them. Only
 * before a step: the probe would take a participant. */
static void pool_wait_ready(pool *p) {
  const double until = now() + time_limit(30);
  for (int c = 0; c < p->num_cores; ++c)
    while (p->serves[c]) {
      tpu_joined_step probe = TPU_JOINED_STEP_INIT;
      tpu_status st = tpu_step_join(p->sys, c, 0, &probe);
      if (st == TPU_ALREADY_EXISTS && strstr(tpu_last_error(), "joined by another thread")) break;
      assert_int_equal(st, TPU_DEADLINE_EXCEEDED);
      if (now() > until) fail_msg("core %d's thread never joined", c);
      sleep_ms(1);
    }
}

static void pool_stop(pool *p) {
  atomic_store(&p->stop, 1);
  for (int c = 0; c < p->num_cores; ++c)
    if (p->serves[c]) {
      pthread_join(p->tids[c], NULL);
      p->serves[c] = 0;
    }
}

/* Runs step s of the cross_replica_sum check on n replicas and checks every output
 * against the naive sum (and out[1] = replica * 100 + core). */
static tpu_status sum_step(tpu_system *sys, int s, int n, tpu_computation_fn fn, void *user,
                           const tpu_step_options *o) {
  tpu_tensor *in[MAX_CORES], *out[2 * MAX_CORES];
  memset(out, 0, sizeof out);
  make_inputs(s, n, in);
  tpu_status st = tpu_replicate(sys, fn, user, n, 1, in, 2, out, o);
  if (st == TPU_OK) {
    for (int r = 0; r < n; ++r) {
      const float *y = data_of(out[2 * r]);
      for (int i = 0; i < LEN; ++i) {
        float want = 0;
        for (int q = 0; q < n; ++q) want += input_value(s, q, i);
        if (y[i] != want) {
          CHECK_FAIL("step %d replica %d element %d: %g, want %g", s, r, i, y[i], want);
          break;
        }
      }
      CHECK(int_of(out[2 * r + 1]) == r * 100 + r);
    }
  } else {
    for (int k = 0; k < 2 * n; ++k) CHECK(out[k] == NULL);
  }
  release_all(out, 2 * n);
  release_all(in, n);
  return st;
}

/* ---- 1. results ---------------------------------------------------------------------- */

static void test_caller_threads__sum_200_steps_no_computation(void **state) {
  start(8, time_limit_ms(30000));
  pool p;
  pool_start(&p, g_sys, 8, 0);
  tpu_step_options o = caller_options(0);
  for (int s = 0; s < 200; ++s) {
    tpu_status st = sum_step(g_sys, s, 8, NULL, NULL, &o);
    if (st != TPU_OK) fail_msg("step %d: %s: %s", s, tpu_status_name(st), tpu_last_error());
  }
  pool_stop(&p);
  for (int c = 0; c < 8; ++c) assert_int_equal(atomic_load(&p.served[c]), 200);
  CHECK_NO_WORKER_FAILURES();
}

static void test_caller_threads__computation_runs_on_the_joined_thread(void **state) {
  start(8, time_limit_ms(30000));
  pool p;
  pool_start(&p, g_sys, 8, 0);
  tpu_step_options o = caller_options(0);
  where_ran w;
  memset(&w, 0, sizeof w);
  for (int s = 0; s < 200; ++s) {
    tpu_status st = sum_step(g_sys, s, 8, sum_fn, &w, &o);
    if (st != TPU_OK) fail_msg("step %d: %s: %s", s, tpu_status_name(st), tpu_last_error());
    for (int c = 0; c < 8; ++c) assert_true(pthread_equal(w.thread[c], p.tids[c]));
  }
  pool_stop(&p);
  assert_int_equal(atomic_load(&w.calls), 8 * 200);
  /* The worker mode runs the same computation on its own threads. */
  assert_int_equal(sum_step(g_sys, 7, 8, sum_fn, &w, NULL), TPU_OK);
  for (int c = 0; c < 8; ++c) assert_false(pthread_equal(w.thread[c], p.tids[c]));
  CHECK_NO_WORKER_FAILURES();
}

/* tpu_shard, tpu_batch_parallel and tpu_rewrite give the worker mode's outputs. */
static void test_caller_threads__shard_batch_parallel_rewrite_as_workers(void **state) {
  start(4, time_limit_ms(30000));
  pool p;
  pool_start(&p, g_sys, 4, 0);
  tpu_step_options co = caller_options(0);
  const tpu_step_options *modes[2] = {NULL, &co};
  float v[32];
  for (int i = 0; i < 32; ++i) v[i] = (float)(i % 7) - 2.0f;
  int64_t dims[2] = {4, 8};
  tpu_tensor *x = NULL;
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 2, v, sizeof v, &x));
  tpu_tensor *shard_out[2][2] = {{0}}, *batch_out[2][2] = {{0}}, *rewrite_out[2][2] = {{0}};
  const int in_axes[1] = {1}, from_all[2] = {1, 0}, out_axes[2] = {1, 0};
  for (int m = 0; m < 2; ++m) {
    CHECK_OK(tpu_shard(g_sys, affine_fn, NULL, 1, &x, 4, in_axes, from_all, out_axes, 2, shard_out[m],
                       modes[m]));
    CHECK_OK(tpu_batch_parallel(g_sys, affine_fn, NULL, 1, &x, 4, 2, batch_out[m], modes[m]));
    CHECK_OK(tpu_rewrite(g_sys, affine_fn, NULL, 1, &x, 2, rewrite_out[m], modes[m]));
  }
  pool_stop(&p);
  /* shard 4 + batch 4 + rewrite 1 participants ran on the pool. */
  int served = 0;
  for (int c = 0; c < 4; ++c) served += atomic_load(&p.served[c]);
  assert_int_equal(served, 4 + 4 + 1);
  for (int o = 0; o < 2; ++o) {
    assert_non_null(shard_out[1][o]);
    assert_true(same_tensor(shard_out[0][o], shard_out[1][o]));
    assert_true(same_tensor(batch_out[0][o], batch_out[1][o]));
    assert_true(same_tensor(rewrite_out[0][o], rewrite_out[1][o]));
  }
  /* rewrite's out[1] is x itself (logical core 0). */
  assert_true(same_tensor(rewrite_out[1][1], x));
  for (int m = 0; m < 2; ++m) {
    release_all(shard_out[m], 2);
    release_all(batch_out[m], 2);
    release_all(rewrite_out[m], 2);
  }
  tpu_tensor_release(x);
  CHECK_NO_WORKER_FAILURES();
}

/* maximum_shapes: the joined thread gets the padded input and the extra size input. */
static void test_caller_threads__maximum_shapes_padding(void **state) {
  start(4, time_limit_ms(30000));
  pool p;
  pool_start(&p, g_sys, 4, 0);
  tpu_shape max = {1, {-1}};
  tpu_tensor *in[4], *out[2][8] = {{0}};
  for (int r = 0; r < 4; ++r) {
    float v[4] = {1.0f + r, 2.0f, 3.0f, 4.0f};
    in[r] = floats(v, r + 1);
  }
  /* echo_fn, through j.computation and j.inputs, fails unless it gets 2 inputs (the
   * padded one and its real size) for its 2 outputs. */
  for (int m = 0; m < 2; ++m) {
    tpu_step_options o = m ? caller_options(0) : (tpu_step_options)TPU_STEP_OPTIONS_INIT;
    o.maximum_shapes = &max;
    o.num_maximum_shapes = 1;
    CHECK_OK(tpu_replicate(g_sys, echo_fn, NULL, 4, 1, in, 2, out[m], &o));
  }
  pool_stop(&p);
  for (int r = 0; r < 4; ++r) {
    assert_int_equal(atomic_load(&p.served[r]), 1);
    assert_true(same_tensor(out[0][2 * r], out[1][2 * r]));
    assert_true(same_tensor(out[0][2 * r + 1], out[1][2 * r + 1]));
    int64_t n = 0;
    tpu_tensor_num_elements(out[1][2 * r], &n);
    assert_int_equal(n, 4); /* padded to the largest */
    assert_int_equal(int_of(out[1][2 * r + 1]), r + 1);
    const float *y = data_of(out[1][2 * r]);
    for (int i = r + 1; i < 4; ++i) assert_true(y[i] == 0.0f);
  }
  release_all(out[0], 8);
  release_all(out[1], 8);
  release_all(in, 4);
  CHECK_NO_WORKER_FAILURES();
}

/* An infeed queue: the dequeued tuple follows the inputs, and num_inputs counts it. */
static void test_caller_threads__infeed_tuple_after_the_inputs(void **state) {
  start(4, time_limit_ms(30000));
  tpu_dtype types[2] = {TPU_FLOAT, TPU_INT32};
  tpu_shape shapes[2] = {{1, {2}}, {0, {0}}};
  tpu_infeed_queue *q = NULL;
  CHECK_OK(tpu_infeed_queue_create(g_sys, 4, 2, types, shapes, 0, &q));
  pool p;
  pool_start(&p, g_sys, 4, 0);
  tpu_tensor *in[4], *out[2][12] = {{0}};
  make_inputs(3, 4, in);
  for (int m = 0; m < 2; ++m) {
    for (int r = 0; r < 4; ++r) {
      float v[2] = {10.0f * r, 10.0f * r + 1};
      tpu_tensor *tuple[2] = {floats(v, 2), int_scalar(100 + r)};
      CHECK_OK(tpu_infeed_enqueue(q, r, tuple, 2));
      release_all(tuple, 2);
    }
    tpu_step_options o = m ? caller_options(0) : (tpu_step_options)TPU_STEP_OPTIONS_INIT;
    o.infeed_queue = q;
    /* echo_fn: 3 inputs (input 0, then the tuple's two) for 3 outputs, or it fails. */
    CHECK_OK(tpu_replicate(g_sys, echo_fn, NULL, 4, 1, in, 3, out[m], &o));
  }
  pool_stop(&p);
  for (int r = 0; r < 4; ++r) {
    assert_int_equal(atomic_load(&p.served[r]), 1);
    for (int k = 0; k < 3; ++k) assert_true(same_tensor(out[0][3 * r + k], out[1][3 * r + k]));
    assert_true(same_tensor(out[1][3 * r], in[r]));
    const float *t = data_of(out[1][3 * r + 1]);
    assert_true(t[0] == 10.0f * r && t[1] == 10.0f * r + 1);
    assert_int_equal(int_of(out[1][3 * r + 2]), 100 + r);
  }
  release_all(out[0], 12);
  release_all(out[1], 12);
  release_all(in, 4);
  tpu_infeed_queue_release(q);
  CHECK_NO_WORKER_FAILURES();
}

/* 4 replicas of 2 cores on 8, a device assignment, a partitioned input and outputs:
 * the worker mode's results. */
static void test_caller_threads__two_cores_per_replica_with_partitions(void **state) {
  start(8, time_limit_ms(30000));
  tpu_topology *topo = NULL;
  CHECK_OK(tpu_system_topology(g_sys, &topo));
  int32_t coords[8 * TPU_MESH_RANK];
  for (int q = 0; q < 8; ++q) {
    size_t n = 0;
    /* Reversed: participant q on core 7 - q, so no core is its participant's number. */
    CHECK_OK(tpu_topology_device_coordinates(topo, 0, 7 - q, &coords[q * TPU_MESH_RANK], TPU_MESH_RANK, &n));
  }
  tpu_device_assignment *da = NULL;
  CHECK_OK(tpu_device_assignment_create(topo, coords, 4, 2, &da));
  tpu_topology_release(topo);
  tpu_partition_spec in_spec = {2, {2, 1}}, out_spec[2] = {{2, {1, 2}}, {2, {2, 1}}};
  tpu_tensor *in[4], *out[2][8] = {{0}};
  for (int r = 0; r < 4; ++r) {
    float v[12];
    for (int i = 0; i < 12; ++i) v[i] = (float)((r * 5 + i * 3) % 17);
    int64_t dims[2] = {4, 3};
    CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 2, v, sizeof v, &in[r]));
  }
  pool p;
  pool_start(&p, g_sys, 8, 0);
  for (int m = 0; m < 2; ++m) {
    tpu_step_options o = m ? caller_options(0) : (tpu_step_options)TPU_STEP_OPTIONS_INIT;
    o.device_assignment = da;
    o.input_partitions = &in_spec;
    o.num_input_partitions = 1;
    o.output_partitions = out_spec;
    o.num_output_partitions = 2;
    CHECK_OK(tpu_replicate(g_sys, affine_fn, NULL, 4, 1, in, 2, out[m], &o));
  }
  pool_stop(&p);
  for (int c = 0; c < 8; ++c) assert_int_equal(atomic_load(&p.served[c]), 1);
  for (int k = 0; k < 8; ++k) {
    assert_non_null(out[1][k]);
    assert_true(same_tensor(out[0][k], out[1][k]));
  }
  /* out[1] of replica r: its input's rows, the second half doubled (logical core 1). */
  for (int r = 0; r < 4; ++r) {
    const float *x = data_of(in[r]), *y = data_of(out[1][2 * r + 1]);
    for (int i = 0; i < 12; ++i) assert_true(y[i] == x[i] * (i < 6 ? 1.0f : 2.0f));
  }
  release_all(out[0], 8);
  release_all(out[1], 8);
  release_all(in, 4);
  tpu_device_assignment_release(da);
  CHECK_NO_WORKER_FAILURES();
}

/* ---- 2. a core never joined ----------------------------------------------------------- */

static void test_caller_threads__core_never_joined(void **state) {
  start(4, time_limit_ms(30000));
  pool p;
  pool_start(&p, g_sys, 4, 0xB); /* cores 0, 1 and 3 */
  pool_wait_ready(&p);
  tpu_step_options o = caller_options(time_limit_ms(300));
  double t0 = now();
  tpu_status st = sum_step(g_sys, 0, 4, NULL, NULL, &o);
  double took = now() - t0;
  assert_int_equal(st, TPU_DEADLINE_EXCEEDED);
  const char *msg = tpu_last_error();
  if (!strstr(msg, "replica 2 (core 2) never started") || !strstr(msg, "tpu_step_join"))
    fail_msg("message: %s", msg);
  assert_null(strstr(msg, "replica 0 (core"));
  assert_true(took < time_limit(10));
  /* The others were blocked in the sum: released (aborted, or their own deadline, the
   * same, came first), and they left. */
  for (int c = 0; c < 4; ++c) {
    if (c == 2) continue;
    assert_int_equal(atomic_load(&p.served[c]), 1);
    const int last = atomic_load(&p.last_status[c]);
    if (last != TPU_ABORTED && last != TPU_DEADLINE_EXCEEDED) fail_msg("core %d's sum: %d", c, last);
  }
  /* Core 2 joins now: the next step runs. */
  pool_stop(&p);
  pool_start(&p, g_sys, 4, 0);
  for (int s = 1; s < 4; ++s) {
    st = sum_step(g_sys, s, 4, NULL, NULL, &o);
    if (st != TPU_OK) fail_msg("step %d: %s: %s", s, tpu_status_name(st), tpu_last_error());
  }
  pool_stop(&p);
  CHECK_NO_WORKER_FAILURES();
}

static void test_caller_threads__no_thread_joined(void **state) {
  start(4, time_limit_ms(30000));
  tpu_step_options o = caller_options(time_limit_ms(200));
  double t0 = now();
  assert_int_equal(sum_step(g_sys, 0, 4, NULL, NULL, &o), TPU_DEADLINE_EXCEEDED);
  assert_true(now() - t0 < time_limit(10));
  const char *msg = tpu_last_error();
  if (!strstr(msg, "replica 0 (core 0), replica 1 (core 1), replica 2 (core 2), replica 3 (core 3) "
                   "never started: no thread joined their cores"))
    fail_msg("message: %s", msg);
  /* Nothing is left behind: a rewrite on core 0, then the worker mode, then joined. */
  tpu_tensor *x = int_scalar(5), *y = NULL;
  assert_int_equal(tpu_rewrite(g_sys, NULL, NULL, 1, &x, 1, &y, &o), TPU_DEADLINE_EXCEEDED);
  assert_non_null(strstr(tpu_last_error(), "replica 0 (core 0) never started: no thread joined its core"));
  assert_null(y);
  tpu_tensor_release(x);
  assert_int_equal(sum_step(g_sys, 1, 4, sum_fn, NULL, NULL), TPU_OK);
  pool p;
  pool_start(&p, g_sys, 4, 0);
  assert_int_equal(sum_step(g_sys, 2, 4, NULL, NULL, &o), TPU_OK);
  pool_stop(&p);
  CHECK_NO_WORKER_FAILURES();
}

/* ---- 3. join rules ---------------------------------------------------------------------- */

/* A host thread that runs one step (so that the test's thread can join it). */
typedef struct step_thread {
  pthread_t tid;
  tpu_computation_fn fn;
  void *user;
  int n;
  int num_outputs;
  tpu_step_options o;
  tpu_status status;
  char message[512];
  tpu_tensor *out[MAX_CORES * 2];
} step_thread;

static void *step_main(void *arg) {
  step_thread *t = arg;
  tpu_tensor *in[MAX_CORES];
  make_inputs(0, t->n, in);
  t->status = tpu_replicate(g_sys, t->fn, t->user, t->n, 1, in, t->num_outputs, t->out, &t->o);
  snprintf(t->message, sizeof t->message, "%s", tpu_last_error());
  release_all(in, t->n);
  return NULL;
}

static void step_begin(step_thread *t, int n, int num_outputs, tpu_computation_fn fn, void *user,
                       int64_t timeout_ms) {
  memset(t, 0, sizeof *t);
  t->n = n;
  t->num_outputs = num_outputs;
  t->fn = fn;
  t->user = user;
  t->o = caller_options(timeout_ms);
  assert_int_equal(pthread_create(&t->tid, NULL, step_main, t), 0);
}

static void step_end(step_thread *t) {
  pthread_join(t->tid, NULL);
  release_all(t->out, t->n * t->num_outputs);
}

/* Joins `core` on the calling thread, retrying while the step has not come. */
static tpu_status join_within(int core, tpu_joined_step *j, double seconds) {
  const double until = now() + time_limit(seconds);
  tpu_status st;
  do {
    *j = (tpu_joined_step)TPU_JOINED_STEP_INIT;
    st = tpu_step_join(g_sys, core, 50, j);
  } while (st == TPU_DEADLINE_EXCEEDED && now() < until);
  return st;
}

static void test_caller_threads__join_twice_without_leaving(void **state) {
  start(2, time_limit_ms(30000));
  step_thread t;
  step_begin(&t, 1, 2, NULL, NULL, 0);
  tpu_joined_step j;
  assert_int_equal(join_within(0, &j, 30), TPU_OK);
  tpu_joined_step again = TPU_JOINED_STEP_INIT;
  CHECK_ERROR(tpu_step_join(g_sys, 1, 0, &again), TPU_INVALID_ARGUMENT,
              "this thread has joined core 0 and runs replica 0; it must call tpu_step_leave");
  CHECK_ERROR(tpu_step_join(g_sys, 0, 0, &again), TPU_INVALID_ARGUMENT, "joined core 0");
  assert_null(again.ctx);
  /* Still the participant: it finishes the step. */
  run_joined(&j);
  step_end(&t);
  assert_int_equal(t.status, TPU_OK);
  /* After leaving it may join again (and time out: no step). */
  tpu_joined_step later = TPU_JOINED_STEP_INIT;
  CHECK_ERROR(tpu_step_join(g_sys, 0, 0, &later), TPU_DEADLINE_EXCEEDED, "no step gave core 0");
  CHECK_NO_WORKER_FAILURES();
}

/* A thread waiting on core 0 until a step comes (or the bound). */
typedef struct waiter {
  pthread_t tid;
  int core;
  int64_t timeout_ms;
  atomic_int done;
  tpu_status status;
  char message[512];
  int run; /* run the participant it gets */
} waiter;

static void *waiter_main(void *arg) {
  waiter *w = arg;
  tpu_joined_step j = TPU_JOINED_STEP_INIT;
  const double until = now() + time_limit(60);
  do {
    j = (tpu_joined_step)TPU_JOINED_STEP_INIT;
    w->status = tpu_step_join(g_sys, w->core, w->timeout_ms, &j);
    /* The test's probe may hold the core for a moment. */
  } while (w->status == TPU_ALREADY_EXISTS && now() < until);
  snprintf(w->message, sizeof w->message, "%s", tpu_last_error());
  if (w->status == TPU_OK && w->run) run_joined(&j);
  atomic_store(&w->done, 1);
  return NULL;
}

/* Waits until the waiter holds its core: a probe join of the core says "another thread". */
static void wait_until_waiting(waiter *w) {
  const double until = now() + time_limit(30);
  for (;;) {
    tpu_joined_step probe = TPU_JOINED_STEP_INIT;
    tpu_status st = tpu_step_join(g_sys, w->core, 0, &probe);
    if (st == TPU_ALREADY_EXISTS) {
      char want[64];
      snprintf(want, sizeof want, "core %d has been joined by another thread", w->core);
      if (!strstr(tpu_last_error(), want)) fail_msg("probe: %s", tpu_last_error());
      return;
    }
    assert_int_equal(st, TPU_DEADLINE_EXCEEDED);
    assert_false(atomic_load(&w->done));
    if (now() > until) fail_msg("the waiter never joined core %d", w->core);
    sleep_ms(1);
  }
}

/* timeout 0 takes a step already waiting; a timeout too large for the clock waits as
 * "no limit" does (it must not overflow into "already passed"). */
static void test_caller_threads__join_timeouts_0_and_huge(void **state) {
  start(2, time_limit_ms(30000));
  step_thread t;
  step_begin(&t, 1, 2, NULL, NULL, 0);
  tpu_joined_step j;
  const double until = now() + time_limit(30);
  tpu_status st;
  do {
    j = (tpu_joined_step)TPU_JOINED_STEP_INIT;
    st = tpu_step_join(g_sys, 0, 0, &j);
    if (st == TPU_DEADLINE_EXCEEDED) sleep_ms(1);
  } while (st == TPU_DEADLINE_EXCEEDED && now() < until);
  assert_int_equal(st, TPU_OK);
  run_joined(&j);
  step_end(&t);
  assert_int_equal(t.status, TPU_OK);
  waiter w = {.core = 1, .timeout_ms = INT64_MAX, .run = 1};
  assert_int_equal(pthread_create(&w.tid, NULL, waiter_main, &w), 0);
  wait_until_waiting(&w);
  /* Still waiting well after its spinning ends, not timed out at once. */
  sleep_ms(200);
  assert_false(atomic_load(&w.done));
  wait_until_waiting(&w);
  tpu_tensor *x = int_scalar(9), *y = NULL;
  tpu_step_options o = caller_options(0);
  tpu_device_assignment *da = NULL;
  /* A rewrite on core 1: replica 0 of a one-replica step placed there. */
  tpu_topology *topo = NULL;
  CHECK_OK(tpu_system_topology(g_sys, &topo));
  int32_t coords[TPU_MESH_RANK];
  size_t n = 0;
  CHECK_OK(tpu_topology_device_coordinates(topo, 0, 1, coords, TPU_MESH_RANK, &n));
  CHECK_OK(tpu_device_assignment_create(topo, coords, 1, 1, &da));
  tpu_topology_release(topo);
  o.device_assignment = da;
  assert_int_equal(tpu_rewrite(g_sys, echo_fn, NULL, 1, &x, 1, &y, &o), TPU_OK);
  assert_int_equal(int_of(y), 9);
  pthread_join(w.tid, NULL);
  assert_int_equal(w.status, TPU_OK);
  tpu_device_assignment_release(da);
  release_all(&x, 1);
  release_all(&y, 1);
  CHECK_NO_WORKER_FAILURES();
}

static void test_caller_threads__second_thread_on_a_joined_core(void **state) {
  start(2, time_limit_ms(30000));
  waiter w = {.core = 0, .timeout_ms = time_limit_ms(30000), .run = 1};
  assert_int_equal(pthread_create(&w.tid, NULL, waiter_main, &w), 0);
  wait_until_waiting(&w);
  tpu_joined_step j = TPU_JOINED_STEP_INIT;
  /* A busy core has a status of its own: a programming error (a core out of range)
   * stays TPU_INVALID_ARGUMENT, so a pool that retries on this one hides nothing. */
  CHECK_ERROR(tpu_step_join(g_sys, 0, 100, &j), TPU_ALREADY_EXISTS,
              "core 0 has been joined by another thread; one thread joins a core at a time");
  assert_null(j.ctx);
  /* The waiter, not this thread, gets the step. */
  tpu_tensor *x = int_scalar(3), *y = NULL;
  tpu_step_options o = caller_options(0);
  assert_int_equal(tpu_rewrite(g_sys, echo_fn, NULL, 1, &x, 1, &y, &o), TPU_OK);
  assert_int_equal(int_of(y), 3);
  pthread_join(w.tid, NULL);
  assert_int_equal(w.status, TPU_OK);
  release_all(&x, 1);
  release_all(&y, 1);
  CHECK_NO_WORKER_FAILURES();
}

static void test_caller_threads__join_arguments(void **state) {
  start(4, time_limit_ms(30000));
  tpu_joined_step j = TPU_JOINED_STEP_INIT;
  CHECK_ERROR(tpu_step_join(g_sys, 4, 0, &j), TPU_INVALID_ARGUMENT, "core is 4; this task's cores are 0 to 3");
  CHECK_ERROR(tpu_step_join(g_sys, -1, 0, &j), TPU_INVALID_ARGUMENT, "core is -1");
  j.struct_size = sizeof(size_t);
  CHECK_ERROR(tpu_step_join(g_sys, 0, 0, &j), TPU_INVALID_ARGUMENT, "out->struct_size is 8");
  j.struct_size = 0;
  CHECK_ERROR(tpu_step_join(g_sys, 0, 0, &j), TPU_INVALID_ARGUMENT, "TPU_JOINED_STEP_INIT");
  /* No step: timeout 0 returns at once, 50 ms after 50 ms; the core stays free. */
  j = (tpu_joined_step)TPU_JOINED_STEP_INIT;
  CHECK_ERROR(tpu_step_join(g_sys, 0, 0, &j), TPU_DEADLINE_EXCEEDED, "within 0 ms");
  double t0 = now();
  CHECK_ERROR(tpu_step_join(g_sys, 1, 50, &j), TPU_DEADLINE_EXCEEDED, "no step gave core 1 a participant within 50 ms");
  double took = now() - t0;
  assert_true(took >= 0.045 && took < time_limit(10));
  assert_null(j.ctx);
  /* A failed join leaves nothing joined: a pool serves both cores next. */
  pool p;
  pool_start(&p, g_sys, 4, 0);
  tpu_step_options o = caller_options(0);
  assert_int_equal(sum_step(g_sys, 0, 4, NULL, NULL, &o), TPU_OK);
  pool_stop(&p);
  CHECK_NO_WORKER_FAILURES();
}

static void test_caller_threads__shutdown_cancels_a_waiting_joiner(void **state) {
  start(2, time_limit_ms(30000));
  waiter w = {.core = 1, .timeout_ms = -1, .run = 1};
  assert_int_equal(pthread_create(&w.tid, NULL, waiter_main, &w), 0);
  wait_until_waiting(&w);
  double t0 = now();
  CHECK_OK(tpu_system_shutdown(g_sys));
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += (time_t)time_limit(10);
  if (pthread_timedjoin_np(w.tid, NULL, &until) != 0) fail_msg("the joiner did not return within 10 s");
  assert_true(now() - t0 < time_limit(10));
  assert_int_equal(w.status, TPU_CANCELLED);
  assert_non_null(strstr(w.message, "shut down while this thread waited on core 1"));
  tpu_joined_step j = TPU_JOINED_STEP_INIT;
  CHECK_ERROR(tpu_step_join(g_sys, 1, 0, &j), TPU_FAILED_PRECONDITION, "shut down");
  CHECK_ERROR(tpu_step_join(g_sys, 0, -1, &j), TPU_FAILED_PRECONDITION, "shut down");
  CHECK_NO_WORKER_FAILURES();
}

/* tpu_step_join_cancel ends a waiting join with TPU_CANCELLED and nothing else: the
 * system runs on, and the next join waits as usual. */
static void test_caller_threads__join_cancel_wakes_a_waiting_joiner(void **state) {
  start(2, time_limit_ms(30000));
  waiter w = {.core = 1, .timeout_ms = -1, .run = 1};
  assert_int_equal(pthread_create(&w.tid, NULL, waiter_main, &w), 0);
  wait_until_waiting(&w);
  CHECK_OK(tpu_step_join_cancel(g_sys, 1));
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += (time_t)time_limit(10);
  if (pthread_timedjoin_np(w.tid, NULL, &until) != 0) fail_msg("the joiner did not return within 10 s");
  assert_int_equal(w.status, TPU_CANCELLED);
  assert_non_null(strstr(w.message, "tpu_step_join_cancel ended this thread's wait on core 1"));
  /* Consumed: the next join of core 1 waits (here: times out), and a step still runs. */
  tpu_joined_step j = TPU_JOINED_STEP_INIT;
  CHECK_ERROR(tpu_step_join(g_sys, 1, 0, &j), TPU_DEADLINE_EXCEEDED, "no step gave core 1");
  CHECK_OK(sum_step(g_sys, 0, 2, sum_fn, NULL, NULL));
  CHECK_NO_WORKER_FAILURES();
}

/* A cancel with no thread waiting is kept for the core's next join (once: a second
 * cancel adds nothing), and only that core's. */
static void test_caller_threads__join_cancel_is_kept_for_the_next_join(void **state) {
  start(2, time_limit_ms(30000));
  CHECK_OK(tpu_step_join_cancel(g_sys, 0));
  CHECK_OK(tpu_step_join_cancel(g_sys, 0));
  tpu_joined_step j = TPU_JOINED_STEP_INIT;
  CHECK_ERROR(tpu_step_join(g_sys, 1, 0, &j), TPU_DEADLINE_EXCEEDED, "no step gave core 1");
  double t0 = now();
  CHECK_ERROR(tpu_step_join(g_sys, 0, -1, &j), TPU_CANCELLED, "tpu_step_join_cancel");
  assert_true(now() - t0 < time_limit(5));
  CHECK_ERROR(tpu_step_join(g_sys, 0, 0, &j), TPU_DEADLINE_EXCEEDED, "no step gave core 0");
  CHECK_NO_WORKER_FAILURES();
}

/* A pool stopped by cancels, without a shutdown or a join timeout: every thread's join
 * returns, and the system still runs steps on its workers. */
static void test_caller_threads__pool_ends_at_join_cancel(void **state) {
  start(4, time_limit_ms(30000));
  pool p;
  pool_start_joining(&p, g_sys, 4, 0, -1);
  tpu_step_options o = caller_options(0);
  assert_int_equal(sum_step(g_sys, 0, 4, NULL, NULL, &o), TPU_OK);
  atomic_store(&p.stop, 1);
  for (int c = 0; c < 4; ++c) CHECK_OK(tpu_step_join_cancel(g_sys, c));
  for (int c = 0; c < 4; ++c) pthread_join(p.tids[c], NULL);
  assert_int_equal(atomic_load(&p.cancelled), 4);
  for (int c = 0; c < 4; ++c) p.serves[c] = 0;
  CHECK_OK(sum_step(g_sys, 0, 4, sum_fn, NULL, NULL));
  CHECK_NO_WORKER_FAILURES();
}

static void test_caller_threads__join_cancel_arguments(void **state) {
  start(2, time_limit_ms(30000));
  CHECK_ERROR(tpu_step_join_cancel(NULL, 0), TPU_INVALID_ARGUMENT, "system");
  CHECK_ERROR(tpu_step_join_cancel(g_sys, 2), TPU_INVALID_ARGUMENT, "core is 2; this task's cores are 0 to 1");
  CHECK_ERROR(tpu_step_join_cancel(g_sys, -1), TPU_INVALID_ARGUMENT, "core is -1");
  CHECK_OK(tpu_system_shutdown(g_sys));
  CHECK_OK(tpu_step_join_cancel(g_sys, 1)); /* harmless after shutdown */
  CHECK_NO_WORKER_FAILURES();
}

/* A pool of waiters (no limit) ended as the header says: shut down, then release. */
static void test_caller_threads__pool_ends_at_shutdown(void **state) {
  start(4, time_limit_ms(30000));
  pool p;
  pool_start(&p, g_sys, 4, 0);
  tpu_step_options o = caller_options(0);
  assert_int_equal(sum_step(g_sys, 0, 4, NULL, NULL, &o), TPU_OK);
  CHECK_OK(tpu_system_shutdown(g_sys));
  for (int c = 0; c < 4; ++c) pthread_join(p.tids[c], NULL);
  /* Each ended with TPU_CANCELLED or (between two joins) TPU_FAILED_PRECONDITION. */
  assert_int_equal(atomic_load(&p.cancelled), 4);
  for (int c = 0; c < 4; ++c) p.serves[c] = 0;
  CHECK_NO_WORKER_FAILURES();
}

/* ---- what a pool thread holds ---------------------------------------------------- */

static long rss_mb(void) {
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f == NULL || fscanf(f, "%ld %ld", &pages, &resident) != 2) fail_msg("cannot read /proc/self/statm");
  fclose(f);
  return resident * (sysconf(_SC_PAGESIZE) / 1024) / 1024;
}

typedef struct lingering {
  tpu_system *sys;
  atomic_int phase; /* 1: it ran a participant and left; 2: go on; 3: it joined again; 4: end */
  tpu_status join_after_shutdown;
  char message[256];
} lingering;

static void wait_phase(atomic_int *phase, int want) {
  const double until = now() + time_limit(30);
  while (atomic_load(phase) < want && now() < until) sleep_ms(1);
  if (atomic_load(phase) < want) CHECK_FAIL("phase %d never came", want);
}

/* A pool thread: one participant, then it lingers, joins after the shutdown, and
 * lingers again while the system is released. */
static void *linger_main(void *arg) {
  lingering *l = arg;
  tpu_joined_step j = TPU_JOINED_STEP_INIT;
  tpu_status st = tpu_step_join(l->sys, 0, time_limit_ms(30000), &j);
  if (st != TPU_OK) CHECK_FAIL("tpu_step_join: %s: %s", tpu_status_name(st), tpu_last_error());
  else run_joined(&j);
  atomic_store(&l->phase, 1);
  wait_phase(&l->phase, 2);
  j = (tpu_joined_step)TPU_JOINED_STEP_INIT;
  l->join_after_shutdown = tpu_step_join(l->sys, 0, 0, &j);
  snprintf(l->message, sizeof l->message, "%s", tpu_last_error());
  atomic_store(&l->phase, 3);
  wait_phase(&l->phase, 4);
  return NULL;
}

/* A thread that joined and left holds nothing, nor does one whose join the shutdown
 * refused: the system, with its 128 MB of embedding accumulators, is freed at
 * tpu_system_release while that thread lives, not when it exits. */
static void test_caller_threads__released_system_is_freed_while_a_pool_thread_lives(void **state) {
  (void)state;
  static const char json[] =
      "{\"table_descriptor\": [{\"name\": \"big\", \"vocabulary_size\": 4194304, \"dimension\": 8,"
      " \"optimization_parameters\": {\"learning_rate\": {\"constant\": 0.1},"
      " \"adagrad\": {\"initial_accumulator\": 0.1}}}],"
      " \"feature_descriptor\": [{\"name\": \"f\", \"table_id\": 0, \"input_shape\": [1]}]}";
  static unsigned char cfg[4096];
  size_t len = 0;
  CHECK_OK(tpu_embedding_config_from_json(json, cfg, sizeof cfg, &len));
  const long before = rss_mb();
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = 1;
  o.collective_timeout_ms = time_limit_ms(30000);
  o.embedding_config = cfg;
  o.embedding_config_len = len;
  CHECK_OK(tpu_system_init(&o, &g_sys));
  const long with_tables = rss_mb();
  lingering l = {.sys = g_sys};
  pthread_t tid;
  assert_int_equal(pthread_create(&tid, NULL, linger_main, &l), 0);
  tpu_tensor *x = int_scalar(5), *y = NULL;
  tpu_step_options so = caller_options(0);
  assert_int_equal(tpu_rewrite(g_sys, echo_fn, NULL, 1, &x, 1, &y, &so), TPU_OK);
  assert_int_equal(int_of(y), 5);
  release_all(&x, 1);
  release_all(&y, 1);
  wait_phase(&l.phase, 1);
  CHECK_OK(tpu_system_shutdown(g_sys));
  atomic_store(&l.phase, 2);
  wait_phase(&l.phase, 3);
  assert_int_equal(l.join_after_shutdown, TPU_FAILED_PRECONDITION);
  assert_non_null(strstr(l.message, "shut down"));
  tpu_system_release(g_sys);
  g_sys = NULL;
  const long released = rss_mb();
  atomic_store(&l.phase, 4);
  pthread_join(tid, NULL);
  print_message("RSS %ld MB before init, %ld MB with the tables, %ld MB once released\n", before, with_tables,
                released);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  /* (A sanitizer's allocator keeps freed memory in quarantine: RSS cannot tell there.) */
  if (with_tables - before < 100) fail_msg("the tables took %ld MB; the test needs them resident", with_tables - before);
  if (with_tables - released < 100)
    fail_msg("released, the system still holds %ld MB: the pool thread kept it", released - before);
#endif
  CHECK_NO_WORKER_FAILURES();
}

typedef struct inside {
  tpu_status join_status;
  char message[512];
} inside;

static tpu_status join_inside_fn(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                 tpu_tensor **out, int no, void *user) {
  inside *w = user;
  tpu_system *sys = NULL;
  CHECK_OK(tpu_replica_context_system(ctx, &sys));
  tpu_joined_step j = TPU_JOINED_STEP_INIT;
  w->join_status = tpu_step_join(sys, 1, 0, &j);
  snprintf(w->message, sizeof w->message, "%s", tpu_last_error());
  return TPU_OK;
}

static void test_caller_threads__join_inside_a_computation(void **state) {
  start(2, time_limit_ms(30000));
  inside w = {TPU_OK, ""};
  CHECK_OK(tpu_rewrite(g_sys, join_inside_fn, &w, 0, NULL, 0, NULL, NULL));
  assert_int_equal(w.join_status, TPU_FAILED_PRECONDITION);
  assert_non_null(strstr(w.message, "tpu_step_join must not be called from inside a computation"));
  CHECK_NO_WORKER_FAILURES();
}

/* Between join and leave the thread is inside a computation: no steps, no shutdown. */
static void test_caller_threads__no_step_from_a_joined_thread(void **state) {
  start(2, time_limit_ms(30000));
  step_thread t;
  step_begin(&t, 2, 2, NULL, NULL, 0);
  pool p;
  pool_start(&p, g_sys, 2, 0x2); /* core 1 */
  tpu_joined_step j;
  assert_int_equal(join_within(0, &j, 30), TPU_OK);
  tpu_tensor *x = int_scalar(1), *y = NULL;
  CHECK_ERROR(tpu_rewrite(g_sys, echo_fn, NULL, 1, &x, 1, &y, NULL), TPU_FAILED_PRECONDITION,
              "a step was started from inside a computation");
  tpu_step_options o = caller_options(0);
  CHECK_ERROR(tpu_rewrite(g_sys, NULL, NULL, 1, &x, 1, &y, &o), TPU_FAILED_PRECONDITION,
              "inside a computation");
  CHECK_ERROR(tpu_system_shutdown(g_sys), TPU_FAILED_PRECONDITION, "inside a computation");
  tpu_tensor_release(x);
  run_joined(&j);
  step_end(&t);
  pool_stop(&p);
  assert_int_equal(t.status, TPU_OK);
  /* After leaving, it may start steps again. */
  assert_int_equal(sum_step(g_sys, 1, 2, sum_fn, NULL, NULL), TPU_OK);
  CHECK_NO_WORKER_FAILURES();
}

/* ---- 4. leave rules ---------------------------------------------------------------------- */

typedef struct other_leave {
  tpu_replica_context *ctx;
  tpu_tensor *x;
  tpu_status status;
  char message[512];
} other_leave;

static void *other_leave_main(void *arg) {
  other_leave *o = arg;
  o->status = tpu_step_leave(o->ctx, TPU_OK, &o->x, 1);
  snprintf(o->message, sizeof o->message, "%s", tpu_last_error());
  return NULL;
}

static void test_caller_threads__leave_without_join_takes_nothing(void **state) {
  start(2, time_limit_ms(30000));
  tpu_tensor *x = int_scalar(42);
  int bogus = 0;
  tpu_replica_context *fake = (tpu_replica_context *)&bogus;
  /* Not a context at all: its magic word says so (docs/ABI.md, "Handles"). */
  CHECK_ERROR(tpu_step_leave(fake, TPU_OK, &x, 1), TPU_INVALID_ARGUMENT,
              "argument 'ctx' is not a live tpu_replica_context");
  /* A context this thread joined before: gone once it has left. */
  step_thread t;
  step_begin(&t, 1, 1, NULL, NULL, 0);
  tpu_joined_step j;
  assert_int_equal(join_within(0, &j, 30), TPU_OK);
  /* Another thread, not joined, with this thread's context: refused, nothing taken. */
  other_leave ol = {j.ctx, x, TPU_OK, ""};
  pthread_t tid;
  assert_int_equal(pthread_create(&tid, NULL, other_leave_main, &ol), 0);
  pthread_join(tid, NULL);
  assert_int_equal(ol.status, TPU_INVALID_ARGUMENT);
  assert_non_null(strstr(ol.message, "has not joined a step"));
  /* Not its context: refused, nothing taken, the participant still its. */
  CHECK_ERROR(tpu_step_leave(fake, TPU_OK, &x, 1), TPU_INVALID_ARGUMENT,
              "argument 'ctx' is not a live tpu_replica_context");
  tpu_tensor *out = NULL;
  tpu_tensor_retain(j.inputs[0]);
  out = j.inputs[0];
  CHECK_OK(tpu_step_leave(j.ctx, TPU_OK, &out, 1));
  step_end(&t);
  assert_int_equal(t.status, TPU_OK);
  CHECK_ERROR(tpu_step_leave(j.ctx, TPU_OK, &x, 1), TPU_INVALID_ARGUMENT, "has not joined a step");
  /* x is still ours: readable (ASan would see a use after free), released once. */
  assert_int_equal(int_of(x), 42);
  tpu_tensor_release(x);
  CHECK_NO_WORKER_FAILURES();
}

/* A thread for core c that joins, then leaves as `how` says. */
typedef struct leaver {
  pthread_t tid;
  int core;
  int how; /* 0: num_outputs + 1 outputs; 1: 0 outputs; 2: fail with an output; 3: exit */
  tpu_status leave_status;
  char leave_message[512];
  atomic_int joined;
  pool *after; /* NULL, or it leaves once every thread of this pool has taken its participant */
} leaver;

static void *leaver_main(void *arg) {
  leaver *l = arg;
  tpu_joined_step j;
  const double until = now() + time_limit(60);
  tpu_status st;
  do {
    j = (tpu_joined_step)TPU_JOINED_STEP_INIT;
    st = tpu_step_join(g_sys, l->core, 50, &j);
  } while (st == TPU_DEADLINE_EXCEEDED && now() < until);
  if (st != TPU_OK) {
    CHECK_FAIL("core %d: join: %s: %s", l->core, tpu_status_name(st), tpu_last_error());
    return NULL;
  }
  atomic_store(&l->joined, 1);
  /* Otherwise the step may fail before the others are taken: they never start. */
  for (int c = 0; l->after && c < l->after->num_cores; ++c)
    while (l->after->serves[c] && !atomic_load(&l->after->entered[c]) && now() < until) sleep_ms(1);
  tpu_tensor *out[4] = {0};
  int n = j.num_outputs;
  if (l->how == 0) {
    n = j.num_outputs + 1;
    for (int o = 0; o < n; ++o) out[o] = int_scalar(o);
    st = TPU_OK;
  } else if (l->how == 1) {
    n = 0;
    st = TPU_OK;
  } else if (l->how == 2) {
    for (int o = 0; o < n; ++o) out[o] = int_scalar(o);
    st = tpu_replica_context_fail(j.ctx, TPU_DATA_LOSS, "the disk ate it");
  } else {
    /* Killed inside its participant: never leaves. */
    pthread_exit(NULL);
  }
  l->leave_status = tpu_step_leave(j.ctx, st, out, n);
  snprintf(l->leave_message, sizeof l->leave_message, "%s", tpu_last_error());
  return NULL;
}

static void leaver_start(leaver *l, int core, int how, pool *after) {
  memset(l, 0, sizeof *l);
  l->core = core;
  l->how = how;
  l->after = after;
  assert_int_equal(pthread_create(&l->tid, NULL, leaver_main, l), 0);
}

static void test_caller_threads__leave_with_the_wrong_num_outputs(void **state) {
  start(2, time_limit_ms(30000));
  for (int how = 0; how < 2; ++how) {
    pool p;
    pool_start(&p, g_sys, 2, 0x1); /* core 0 */
    leaver l;
    leaver_start(&l, 1, how, &p);
    tpu_step_options o = caller_options(0);
    tpu_status st = sum_step(g_sys, 0, 2, NULL, NULL, &o);
    char want[128];
    snprintf(want, sizeof want, "replica 1: tpu_step_leave got num_outputs %d, but the step has 2",
             how == 0 ? 3 : 0);
    if (st != TPU_INVALID_ARGUMENT || !strstr(tpu_last_error(), want))
      fail_msg("step: %s: %s; want %s", tpu_status_name(st), tpu_last_error(), want);
    pthread_join(l.tid, NULL);
    pool_stop(&p);
    assert_int_equal(l.leave_status, TPU_INVALID_ARGUMENT);
    assert_non_null(strstr(l.leave_message, want + strlen("replica 1: ")));
    /* Replica 0 was aborted out of its sum (or finished): it left; its outputs released. */
    assert_int_equal(atomic_load(&p.served[0]), 1);
  }
  /* Core 1 serves the next step. */
  pool p;
  pool_start(&p, g_sys, 2, 0);
  tpu_step_options o = caller_options(0);
  assert_int_equal(sum_step(g_sys, 1, 2, NULL, NULL, &o), TPU_OK);
  pool_stop(&p);
  CHECK_NO_WORKER_FAILURES();
}

static void test_caller_threads__leave_with_a_failure(void **state) {
  start(3, time_limit_ms(30000));
  pool p;
  pool_start(&p, g_sys, 3, 0x5); /* cores 0 and 2 */
  leaver l;
  leaver_start(&l, 1, 2, &p);
  tpu_step_options o = caller_options(0);
  tpu_status st = sum_step(g_sys, 0, 3, NULL, NULL, &o); /* checks the outputs are NULL */
  assert_int_equal(st, TPU_DATA_LOSS);
  assert_string_equal(tpu_last_error(), "replica 1: the disk ate it");
  pthread_join(l.tid, NULL);
  pool_stop(&p);
  assert_int_equal(l.leave_status, TPU_OK);
  /* The others were aborted out of their sums. */
  assert_int_equal(atomic_load(&p.last_status[0]), TPU_ABORTED);
  assert_int_equal(atomic_load(&p.last_status[2]), TPU_ABORTED);
  pool_start(&p, g_sys, 3, 0);
  assert_int_equal(sum_step(g_sys, 1, 3, NULL, NULL, &o), TPU_OK);
  pool_stop(&p);
  CHECK_NO_WORKER_FAILURES();
}

/* A step that fails while a core is still unjoined ends at once, not a deadline later
 * (across tasks the others would take that long as this task gone). */
static void test_caller_threads__failure_before_a_core_is_joined(void **state) {
  const int64_t deadline_ms = time_limit_ms(20000);
  start(2, deadline_ms);
  leaver l;
  leaver_start(&l, 0, 2, NULL); /* fails with TPU_DATA_LOSS "the disk ate it" */
  tpu_step_options o = caller_options(0);
  double t0 = now();
  tpu_status st = sum_step(g_sys, 0, 2, NULL, NULL, &o);
  double took = now() - t0;
  pthread_join(l.tid, NULL);
  assert_int_equal(st, TPU_DATA_LOSS);
  assert_string_equal(tpu_last_error(),
                      "replica 0: the disk ate it (replica 1 (core 1) never started: no thread joined "
                      "its core (tpu_step_join) before the step failed)");
  assert_true(took < (double)deadline_ms / 2000.0);
  pool p;
  pool_start(&p, g_sys, 2, 0);
  assert_int_equal(sum_step(g_sys, 1, 2, NULL, NULL, &o), TPU_OK);
  pool_stop(&p);
  CHECK_NO_WORKER_FAILURES();
}

/* ---- 5. a thread that exits between join and leave ---------------------------------------- */

static void test_caller_threads__thread_exits_before_leave(void **state) {
  const int64_t deadline_ms = time_limit_ms(20000);
  start(2, deadline_ms);
  for (int round = 0; round < 3; ++round) {
    pool p;
    pool_start(&p, g_sys, 2, 0x1);
    leaver l;
    leaver_start(&l, 1, 3, &p);
    tpu_step_options o = caller_options(0);
    double t0 = now();
    tpu_status st = sum_step(g_sys, round, 2, NULL, NULL, &o);
    double took = now() - t0;
    pthread_join(l.tid, NULL);
    pool_stop(&p);
    assert_int_equal(st, TPU_CANCELLED);
    if (!strstr(tpu_last_error(), "replica 1: the thread running replica 1 exited before tpu_step_leave"))
      fail_msg("message: %s", tpu_last_error());
    assert_true(took < (double)deadline_ms / 2000.0); /* at once, not at the deadline */
    assert_int_equal(atomic_load(&p.last_status[0]), TPU_ABORTED);
    /* Its core serves the next step. */
    pool_start(&p, g_sys, 2, 0);
    assert_int_equal(sum_step(g_sys, round + 1, 2, NULL, NULL, &o), TPU_OK);
    pool_stop(&p);
  }
  CHECK_NO_WORKER_FAILURES();
}

/* ---- 6. a late joined thread ---------------------------------------------------------------- */

typedef struct late {
  pthread_t tid;
  atomic_int go;              /* the test lets it go on */
  void *expected_user;        /* compared, never read through */
  tpu_status collective;      /* its sum after the step failed without it */
  tpu_status leave_status;
} late;

static void *late_main(void *arg) {
  late *l = arg;
  tpu_joined_step j;
  const double until = now() + time_limit(60);
  tpu_status st;
  do {
    j = (tpu_joined_step)TPU_JOINED_STEP_INIT;
    st = tpu_step_join(g_sys, 1, 50, &j);
  } while ((st == TPU_DEADLINE_EXCEEDED || st == TPU_INVALID_ARGUMENT) && now() < until);
  if (st != TPU_OK) {
    CHECK_FAIL("join: %s: %s", tpu_status_name(st), tpu_last_error());
    return NULL;
  }
  CHECK(j.user_data == l->expected_user);
  while (!atomic_load(&l->go) && now() < until) sleep_ms(5);
  tpu_tensor *out[2] = {NULL, int_scalar(7)};
  l->collective = tpu_cross_replica_sum(j.ctx, j.inputs[0], NULL, &out[0], NULL);
  CHECK(out[0] == NULL);
  out[0] = int_scalar(8); /* outputs of a late participant are released by the runtime */
  l->leave_status = tpu_step_leave(j.ctx, TPU_OK, out, 2);
  return NULL;
}

/* Replica 0 returns at once, replica 1's thread sleeps past the deadline. */
static tpu_status quick_or_late_fn(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                   tpu_tensor **out, int no, void *user) {
  out[0] = int_scalar(1);
  out[1] = int_scalar(2);
  return TPU_OK;
}

static void test_caller_threads__late_joined_thread(void **state) {
  start(2, time_limit_ms(1000));
  late l;
  memset(&l, 0, sizeof l);
  void *user = malloc(64);
  l.expected_user = user;
  assert_int_equal(pthread_create(&l.tid, NULL, late_main, &l), 0);
  pool p;
  pool_start(&p, g_sys, 2, 0x1);
  pool_wait_ready(&p);
  waiter probe = {.core = 1};
  wait_until_waiting(&probe);
  tpu_step_options o = caller_options(0);
  tpu_tensor *in[2], *out[4] = {0};
  make_inputs(0, 2, in);
  tpu_status st = tpu_replicate(g_sys, quick_or_late_fn, user, 2, 1, in, 2, out, &o);
  free(user); /* the late thread got it; the runtime must not touch it */
  release_all(in, 2); /* the runtime holds the late participant's own references */
  pool_stop(&p);
  assert_int_equal(st, TPU_DEADLINE_EXCEEDED);
  if (!strstr(tpu_last_error(), "replica 1 did not return within"))
    fail_msg("message: %s", tpu_last_error());
  for (int k = 0; k < 4; ++k) assert_null(out[k]);
  /* A step needing core 1 waits the deadline, then names it. */
  st = sum_step(g_sys, 1, 2, sum_fn, NULL, NULL);
  assert_int_equal(st, TPU_UNAVAILABLE);
  assert_non_null(strstr(tpu_last_error(), "core 1 (still running replica 1 of an earlier step"));
  st = sum_step(g_sys, 1, 2, NULL, NULL, &o);
  assert_int_equal(st, TPU_UNAVAILABLE);
  assert_non_null(strstr(tpu_last_error(), "core 1"));
  /* Core 0 serves steps meanwhile. */
  tpu_tensor *x = int_scalar(4), *y = NULL;
  CHECK_OK(tpu_rewrite(g_sys, echo_fn, NULL, 1, &x, 1, &y, NULL));
  assert_int_equal(int_of(y), 4);
  release_all(&y, 1);
  /* Its collectives are aborted; it leaves; core 1 serves again. */
  atomic_store(&l.go, 1);
  pthread_join(l.tid, NULL);
  assert_int_equal(l.collective, TPU_ABORTED);
  assert_int_equal(l.leave_status, TPU_OK);
  pool_start(&p, g_sys, 2, 0);
  assert_int_equal(sum_step(g_sys, 2, 2, NULL, NULL, &o), TPU_OK);
  pool_stop(&p);
  release_all(&x, 1);
  CHECK_NO_WORKER_FAILURES();
}

/* ---- 7. mixed modes ---------------------------------------------------------------------------- */

static void test_caller_threads__worker_and_caller_steps_alternate(void **state) {
  start(4, time_limit_ms(30000));
  pool p;
  pool_start(&p, g_sys, 4, 0);
  tpu_step_options o = caller_options(0);
  for (int s = 0; s < 100; ++s) {
    tpu_status st = (s % 2) ? sum_step(g_sys, s, 4, NULL, NULL, &o) : sum_step(g_sys, s, 4, sum_fn, NULL, NULL);
    if (st != TPU_OK) fail_msg("step %d: %s: %s", s, tpu_status_name(st), tpu_last_error());
  }
  pool_stop(&p);
  for (int c = 0; c < 4; ++c) assert_int_equal(atomic_load(&p.served[c]), 50);
  CHECK_NO_WORKER_FAILURES();
}

typedef struct host {
  pthread_t tid;
  int mode; /* 0: worker; 1: caller threads, NULL computation; 2: alternating */
  int ok;
} host;

static void *host_main(void *arg) {
  host *h = arg;
  tpu_step_options o = caller_options(0);
  for (int s = 0; s < 40; ++s) {
    int caller = h->mode == 1 || (h->mode == 2 && s % 2);
    tpu_status st = caller ? sum_step(g_sys, s + h->mode, 4, NULL, NULL, &o)
                           : sum_step(g_sys, s + h->mode, 4, sum_fn, NULL, NULL);
    if (st != TPU_OK) {
      CHECK_FAIL("host %d step %d: %s: %s", h->mode, s, tpu_status_name(st), tpu_last_error());
      return NULL;
    }
    h->ok++;
  }
  return NULL;
}

static void test_caller_threads__steps_from_concurrent_host_threads(void **state) {
  start(4, time_limit_ms(30000));
  pool p;
  pool_start(&p, g_sys, 4, 0);
  host h[3] = {{.mode = 0}, {.mode = 1}, {.mode = 2}};
  for (int i = 0; i < 3; ++i) assert_int_equal(pthread_create(&h[i].tid, NULL, host_main, &h[i]), 0);
  for (int i = 0; i < 3; ++i) pthread_join(h[i].tid, NULL);
  pool_stop(&p);
  CHECK_NO_WORKER_FAILURES();
  for (int i = 0; i < 3; ++i) assert_int_equal(h[i].ok, 40);
  for (int c = 0; c < 4; ++c) assert_int_equal(atomic_load(&p.served[c]), 40 + 20);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_caller_threads__sum_200_steps_no_computation, release_system),
      cmocka_unit_test_teardown(test_caller_threads__computation_runs_on_the_joined_thread, release_system),
      cmocka_unit_test_teardown(test_caller_threads__shard_batch_parallel_rewrite_as_workers, release_system),
      cmocka_unit_test_teardown(test_caller_threads__maximum_shapes_padding, release_system),
      cmocka_unit_test_teardown(test_caller_threads__infeed_tuple_after_the_inputs, release_system),
      cmocka_unit_test_teardown(test_caller_threads__two_cores_per_replica_with_partitions, release_system),
      cmocka_unit_test_teardown(test_caller_threads__core_never_joined, release_system),
      cmocka_unit_test_teardown(test_caller_threads__no_thread_joined, release_system),
      cmocka_unit_test_teardown(test_caller_threads__failure_before_a_core_is_joined, release_system),
      cmocka_unit_test_teardown(test_caller_threads__join_twice_without_leaving, release_system),
      cmocka_unit_test_teardown(test_caller_threads__join_timeouts_0_and_huge, release_system),
      cmocka_unit_test_teardown(test_caller_threads__second_thread_on_a_joined_core, release_system),
      cmocka_unit_test_teardown(test_caller_threads__join_arguments, release_system),
      cmocka_unit_test_teardown(test_caller_threads__shutdown_cancels_a_waiting_joiner, release_system),
      cmocka_unit_test_teardown(test_caller_threads__pool_ends_at_shutdown, release_system),
      cmocka_unit_test_teardown(test_caller_threads__join_cancel_wakes_a_waiting_joiner, release_system),
      cmocka_unit_test_teardown(test_caller_threads__join_cancel_is_kept_for_the_next_join, release_system),
      cmocka_unit_test_teardown(test_caller_threads__pool_ends_at_join_cancel, release_system),
      cmocka_unit_test_teardown(test_caller_threads__join_cancel_arguments, release_system),
      cmocka_unit_test_teardown(test_caller_threads__released_system_is_freed_while_a_pool_thread_lives,
                                release_system),
      cmocka_unit_test_teardown(test_caller_threads__join_inside_a_computation, release_system),
      cmocka_unit_test_teardown(test_caller_threads__no_step_from_a_joined_thread, release_system),
      cmocka_unit_test_teardown(test_caller_threads__leave_without_join_takes_nothing, release_system),
      cmocka_unit_test_teardown(test_caller_threads__leave_with_the_wrong_num_outputs, release_system),
      cmocka_unit_test_teardown(test_caller_threads__leave_with_a_failure, release_system),
      cmocka_unit_test_teardown(test_caller_threads__thread_exits_before_leave, release_system),
      cmocka_unit_test_teardown(test_caller_threads__late_joined_thread, release_system),
      cmocka_unit_test_teardown(test_caller_threads__worker_and_caller_steps_alternate, release_system),
      cmocka_unit_test_teardown(test_caller_threads__steps_from_concurrent_host_threads, release_system),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
