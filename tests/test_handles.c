/* Handles (docs/ABI.md, "Handles"): releases that would pull the system from under a
 * running step are refused from inside a computation and leave the handle valid; the
 * runtime's pointer back to the system's handle is cleared when the handle goes; and
 * every handle type carries a magic word, so a released handle, or a handle of
 * another type cast to this one, is TPU_INVALID_ARGUMENT naming the argument.
 *
 * The magic word is checked where its memory is still mapped: a released handle whose
 * memory was reused by a new handle of the same type cannot be told apart, and unmapped
 * memory is a crash. Cases that pass a freed heap block are for builds without
 * AddressSanitizer, which reports them as the use after free they are (they skip
 * themselves under it). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <tpurt.h>

#include "test_util.h"

/* AddressSanitizer and ThreadSanitizer both report a use of a freed heap block. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif
#ifndef UNDER_SANITIZER
#define UNDER_SANITIZER 0
#endif

/* Skips a case that passes a freed heap block: the sanitizers report the use. */
#define SKIP_UNDER_SANITIZER()                                                                \
  do {                                                                                        \
    if (UNDER_SANITIZER) {                                                                    \
      print_message("skipped: passes a freed handle, which the sanitizers report (the "       \
                    "magic-word check is for builds without them)\n");                        \
      skip();                                                                                 \
    }                                                                                         \
  } while (0)

#define NOT_LIVE(type) "is not a live " type " (released, or a handle of another type)"

TEST_SYSTEM_FIXTURE

static void start(int cores, int64_t timeout_ms) {
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = cores;
  o.collective_timeout_ms = timeout_ms;
  tpu_status st = tpu_system_init(&o, &g_sys);
  if (st != TPU_OK) fail_msg("tpu_system_init: %s: %s", tpu_status_name(st), tpu_last_error());
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int replica_id(tpu_replica_context *ctx) {
  int r = -1;
  CHECK_OK(tpu_replica_context_replica_id(ctx, &r));
  return r;
}

static tpu_tensor *float_scalar(float v) {
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, NULL, 0, &v, sizeof v, &t));
  return t;
}

/* ---- releases from inside a computation --------------------------------------------- */

typedef struct {
  atomic_int tried;
  tpu_status status;
  char message[512];
} attempt;

static void record(attempt *a, tpu_status st) {
  a->status = st;
  snprintf(a->message, sizeof a->message, "%s", st == TPU_OK ? "" : tpu_last_error());
  atomic_store(&a->tried, 1);
}

static tpu_status release_system_inside(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                        tpu_tensor **out, int no, void *user) {
  if (replica_id(ctx) != 0) return TPU_OK;
  tpu_system *s = NULL;
  CHECK_OK(tpu_replica_context_system(ctx, &s));
  record(user, tpu_system_release(s));
  return TPU_OK;
}

/* tpu_system_release inside a computation used to return FAILED_PRECONDITION but free
 * the handle: the system ran on with no handle and every later tpu_system_init gave
 * ALREADY_EXISTS. It is refused now, and the handle stays valid. */
static void test_handles__system_release_inside_computation_is_refused(void **state) {
  start(2, 10000);
  attempt a;
  memset(&a, 0, sizeof a);
  CHECK_OK(tpu_replicate(g_sys, release_system_inside, &a, 2, 0, NULL, 0, NULL, NULL));
  assert_int_equal(atomic_load(&a.tried), 1);
  if (a.status != TPU_FAILED_PRECONDITION ||
      strstr(a.message, "tpu_system_release must not be called from inside a computation") == NULL ||
      strstr(a.message, "the handle stays valid") == NULL)
    fail_msg("release inside the computation gave %s \"%s\"", tpu_status_name(a.status), a.message);
  /* The same handle still works: another step, then the release. */
  int cores = 0;
  CHECK_OK(tpu_system_num_cores(g_sys, &cores));
  assert_int_equal(cores, 2);
  attempt again;
  memset(&again, 0, sizeof again);
  CHECK_OK(tpu_replicate(g_sys, release_system_inside, &again, 2, 0, NULL, 0, NULL, NULL));
  assert_int_equal(again.status, TPU_FAILED_PRECONDITION);
  CHECK_OK(tpu_system_release(g_sys));
  g_sys = NULL;
  /* Then a new system starts. */
  start(2, 10000);
  CHECK_OK(tpu_system_release(g_sys));
  g_sys = NULL;
  CHECK_NO_WORKER_FAILURES();
}

static tpu_status shutdown_system_inside(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                         tpu_tensor **out, int no, void *user) {
  if (replica_id(ctx) != 0) return TPU_OK;
  tpu_system *s = NULL;
  CHECK_OK(tpu_replica_context_system(ctx, &s));
  record(user, tpu_system_shutdown(s));
  return TPU_OK;
}

/* tpu_system_shutdown inside a computation: refused, nothing shut down, and the handle
 * shuts down, releases and lets a new system start after the step. (This one passed
 * before the fix too: it guards the rule beside its release counterpart.) */
static void test_handles__system_shutdown_inside_computation_is_refused(void **state) {
  start(2, 10000);
  attempt a;
  memset(&a, 0, sizeof a);
  CHECK_OK(tpu_replicate(g_sys, shutdown_system_inside, &a, 2, 0, NULL, 0, NULL, NULL));
  assert_int_equal(atomic_load(&a.tried), 1);
  assert_int_equal(a.status, TPU_FAILED_PRECONDITION);
  assert_non_null(strstr(a.message, "must not be called from inside a computation"));
  int closed = 1;
  CHECK_OK(tpu_system_is_closed(g_sys, &closed));
  assert_int_equal(closed, 0);
  CHECK_OK(tpu_system_shutdown(g_sys));
  CHECK_OK(tpu_system_release(g_sys));
  g_sys = NULL;
  start(2, 10000);
  CHECK_OK(tpu_system_release(g_sys));
  g_sys = NULL;
  CHECK_NO_WORKER_FAILURES();
}

typedef struct {
  tpu_infeed_queue *in;
  tpu_outfeed_queue *out;
  attempt in_release, out_release;
} queue_plan;

static tpu_status release_queues_inside(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                        tpu_tensor **out, int no, void *user) {
  queue_plan *p = user;
  if (replica_id(ctx) == 0) record(&p->in_release, tpu_infeed_queue_release(p->in));
  if (replica_id(ctx) == 1) record(&p->out_release, tpu_outfeed_queue_release(p->out));
  return TPU_OK;
}

/* A feed queue released from inside a computation would be freed under the replicas
 * (and the step's infeed stage) that use it: refused, and the queue stays valid. */
static void test_handles__queue_release_inside_computation_is_refused(void **state) {
  start(2, 10000);
  const tpu_dtype dtype = TPU_FLOAT;
  const tpu_shape shape = {0, {0}};
  queue_plan p;
  memset(&p, 0, sizeof p);
  CHECK_OK(tpu_infeed_queue_create(g_sys, 2, 1, &dtype, &shape, 4, &p.in));
  CHECK_OK(tpu_outfeed_queue_create(g_sys, 2, 1, &dtype, &shape, 4, &p.out));
  CHECK_OK(tpu_replicate(g_sys, release_queues_inside, &p, 2, 0, NULL, 0, NULL, NULL));
  assert_int_equal(atomic_load(&p.in_release.tried), 1);
  assert_int_equal(atomic_load(&p.out_release.tried), 1);
  if (p.in_release.status != TPU_FAILED_PRECONDITION ||
      strstr(p.in_release.message, "tpu_infeed_queue_release must not be called from inside a computation") == NULL)
    fail_msg("infeed release inside the computation gave %s \"%s\"",
             tpu_status_name(p.in_release.status), p.in_release.message);
  if (p.out_release.status != TPU_FAILED_PRECONDITION ||
      strstr(p.out_release.message, "tpu_outfeed_queue_release must not be called from inside a computation") == NULL)
    fail_msg("outfeed release inside the computation gave %s \"%s\"",
             tpu_status_name(p.out_release.status), p.out_release.message);
  /* Both still work after the step, then release. */
  tpu_tensor *t = float_scalar(3.0f), *got = NULL;
  CHECK_OK(tpu_infeed_enqueue(p.in, 1, &t, 1));
  tpu_tensor_release(t);
  CHECK_OK(tpu_infeed_queue_release(p.in));
  CHECK_ERROR(tpu_outfeed_dequeue(p.out, 7, &got, 1), TPU_INVALID_ARGUMENT, "replica");
  CHECK_OK(tpu_outfeed_queue_release(p.out));
  CHECK_NO_WORKER_FAILURES();
}

typedef struct {
  tpu_device_assignment *da;
  attempt release;
} da_plan;

static tpu_status release_assignment_inside(tpu_replica_context *ctx, tpu_tensor *const *in,
                                            int ni, tpu_tensor **out, int no, void *user) {
  da_plan *p = user;
  int logical = -1;
  CHECK_OK(tpu_replica_context_logical_core(ctx, &logical));
  if (replica_id(ctx) == 0 && logical == 0) record(&p->release, tpu_device_assignment_release(p->da));
  const float v = (float)(10 * replica_id(ctx) + logical);
  return tpu_tensor_create(TPU_FLOAT, NULL, 0, &v, sizeof v, &out[0]);
}

/* The device assignment of a step's options may be released by the computation: the
 * step keeps the assignment itself until the call returns. (Today's runtime reads it
 * only before the computations start, so this passed before too: it guards the rule
 * for a runtime that reads it later, e.g. to gather a replica's outputs.) */
static void test_handles__step_keeps_its_device_assignment(void **state) {
  start(2, 10000);
  tpu_topology *topo = NULL;
  CHECK_OK(tpu_system_topology(g_sys, &topo));
  int32_t coords[2][4];
  for (int d = 0; d < 2; ++d)
    CHECK_OK(tpu_topology_device_coordinates(topo, 0, d, coords[d], 4, &(size_t){0}));
  da_plan p;
  memset(&p, 0, sizeof p);
  CHECK_OK(tpu_device_assignment_create(topo, &coords[0][0], 1, 2, &p.da)); /* 1 replica, 2 cores */
  tpu_topology_release(topo);
  tpu_step_options o = TPU_STEP_OPTIONS_INIT;
  o.device_assignment = p.da;
  tpu_tensor *out = NULL;
  CHECK_OK(tpu_replicate(g_sys, release_assignment_inside, &p, 1, 0, NULL, 1, &out, &o));
  assert_int_equal(atomic_load(&p.release.tried), 1);
  assert_int_equal(p.release.status, TPU_OK);
  assert_non_null(out);
  const void *data = NULL;
  CHECK_OK(tpu_tensor_data(out, &data));
  assert_true(*(const float *)data == 0.0f); /* logical core 0's */
  tpu_tensor_release(out);
  CHECK_NO_WORKER_FAILURES();
}

/* ---- the runtime's pointer back to the handle ---------------------------------------- */

typedef struct {
  atomic_int go;
  attempt lookup;
  tpu_system *seen;
} late_lookup_plan;

static tpu_status late_lookup(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                              tpu_tensor **out, int no, void *user) {
  late_lookup_plan *p = user;
  if (replica_id(ctx) != 1) return TPU_OK;
  for (int64_t i = 0; i < time_limit_ms(10000) && !atomic_load(&p->go); ++i) sleep_ms(1);
  p->seen = NULL;
  record(&p->lookup, tpu_replica_context_system(ctx, &p->seen));
  return TPU_OK;
}

/* A computation that outlives its step and the release of its system's handle asks
 * for the system: a precise error, never the freed handle. */
static void test_handles__context_system_after_release(void **state) {
  start(2, 200);
  static late_lookup_plan p; /* static: the late replica may outlive a failed assertion */
  memset(&p, 0, sizeof p);
  CHECK_ERROR(tpu_replicate(g_sys, late_lookup, &p, 2, 0, NULL, 0, NULL, NULL),
              TPU_DEADLINE_EXCEEDED, "replica 1 did not return");
  /* Shutdown waits for the late replica up to the deadline, then frees the handle. */
  CHECK_ERROR(tpu_system_release(g_sys), TPU_DEADLINE_EXCEEDED, "did not return");
  g_sys = NULL;
  atomic_store(&p.go, 1);
  for (int64_t i = 0; i < time_limit_ms(10000) && !atomic_load(&p.lookup.tried); ++i) sleep_ms(1);
  assert_int_equal(atomic_load(&p.lookup.tried), 1);
  if (p.lookup.status != TPU_FAILED_PRECONDITION ||
      strstr(p.lookup.message, "tpu_system handle of this computation's system was released") == NULL)
    fail_msg("tpu_replica_context_system after the release gave %s \"%s\" (handle %p)",
             tpu_status_name(p.lookup.status), p.lookup.message, (void *)p.seen);
  assert_null(p.seen);
  /* The late replica has returned: a new system starts. */
  sleep_ms(50);
  start(2, 10000);
  CHECK_NO_WORKER_FAILURES();
}

/* ---- magic words: released handles --------------------------------------------------- */

/* A released tensor whose struct is still allocated (a view shares its block): every
 * entry point, the double release and a collective name the argument. */
static tpu_status collective_on(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                tpu_tensor **out, int no, void *user) {
  tpu_tensor *dead = user, *sum = NULL;
  CHECK_ERROR(tpu_cross_replica_sum(ctx, dead, NULL, &sum, NULL), TPU_INVALID_ARGUMENT,
              "argument 'x' " NOT_LIVE("tpu_tensor"));
  return TPU_OK;
}

static void test_handles__released_tensor(void **state) {
  start(2, 10000);
  const float v[4] = {1, 2, 3, 4};
  const int64_t dims[1] = {4}, flat[2] = {2, 2};
  tpu_tensor *a = NULL, *view = NULL;
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 1, v, sizeof v, &a));
  CHECK_OK(tpu_tensor_reshape(a, flat, 2, &view)); /* keeps a's block allocated */
  CHECK_OK(tpu_tensor_release(a));
  tpu_dtype dtype;
  int rank;
  const void *data;
  CHECK_ERROR(tpu_tensor_dtype(a, &dtype), TPU_INVALID_ARGUMENT,
              "argument 'tensor' " NOT_LIVE("tpu_tensor"));
  CHECK_ERROR(tpu_tensor_rank(a, &rank), TPU_INVALID_ARGUMENT, NOT_LIVE("tpu_tensor"));
  CHECK_ERROR(tpu_tensor_data(a, &data), TPU_INVALID_ARGUMENT, NOT_LIVE("tpu_tensor"));
  CHECK_ERROR(tpu_tensor_retain(a), TPU_INVALID_ARGUMENT, NOT_LIVE("tpu_tensor"));
  CHECK_ERROR(tpu_tensor_release(a), TPU_INVALID_ARGUMENT, NOT_LIVE("tpu_tensor")); /* twice */
  CHECK_OK(tpu_replicate(g_sys, collective_on, a, 2, 0, NULL, 0, NULL, NULL));
  /* The view is untouched. */
  CHECK_OK(tpu_tensor_data(view, &data));
  assert_true(((const float *)data)[3] == 4.0f);
  CHECK_OK(tpu_tensor_release(view));
  CHECK_NO_WORKER_FAILURES();
}

/* A released tensor's block recycled for a new tensor: the new handle is live (its
 * magic word set again), whether or not it got the same address. */
static void test_handles__recycled_tensor_is_live(void **state) {
  for (int round = 0; round < 4; ++round) {
    const int64_t n = round < 2 ? 4 : 100000; /* small blocks, then the large block cache */
    tpu_tensor *a = NULL, *b = NULL;
    CHECK_OK(tpu_tensor_create(TPU_FLOAT, &n, 1, NULL, 0, &a));
    CHECK_OK(tpu_tensor_release(a));
    CHECK_OK(tpu_tensor_create(TPU_FLOAT, &n, 1, NULL, 0, &b));
    int64_t count = 0;
    CHECK_OK(tpu_tensor_num_elements(b, &count));
    assert_int_equal(count, n);
    void *w = NULL;
    CHECK_OK(tpu_tensor_mutable_data(b, &w));
    CHECK_OK(tpu_tensor_release(b));
  }
}

/* Released handles of the other types (their memory freed, still mapped). */
static void test_handles__released_handles(void **state) {
  SKIP_UNDER_SANITIZER();
  start(2, 10000);
  tpu_topology *topo = NULL;
  tpu_device_assignment *da = NULL;
  tpu_mesh *mesh = NULL;
  tpu_cluster_resolver *resolver = NULL;
  CHECK_OK(tpu_system_topology(g_sys, &topo));
  CHECK_OK(tpu_system_default_device_assignment(g_sys, 2, &da));
  const char *names[1] = {"x"};
  const int64_t sizes[1] = {2};
  CHECK_OK(tpu_mesh_create(da, names, sizes, 1, &mesh));
  CHECK_OK(tpu_cluster_resolver_create(NULL, &resolver));
  CHECK_OK(tpu_topology_release(topo));
  CHECK_OK(tpu_device_assignment_release(da));
  CHECK_OK(tpu_mesh_release(mesh));
  CHECK_OK(tpu_cluster_resolver_release(resolver));
  int n;
  CHECK_ERROR(tpu_topology_num_tasks(topo, &n), TPU_INVALID_ARGUMENT,
              "argument 'topology' " NOT_LIVE("tpu_topology"));
  CHECK_ERROR(tpu_device_assignment_num_replicas(da, &n), TPU_INVALID_ARGUMENT,
              "argument 'assignment' " NOT_LIVE("tpu_device_assignment"));
  CHECK_ERROR(tpu_mesh_num_axes(mesh, &n), TPU_INVALID_ARGUMENT,
              "argument 'mesh' " NOT_LIVE("tpu_mesh"));
  CHECK_ERROR(tpu_cluster_resolver_source(resolver, &n), TPU_INVALID_ARGUMENT,
              "argument 'resolver' " NOT_LIVE("tpu_cluster_resolver"));
  /* A second release is an error, not a double free. */
  CHECK_ERROR(tpu_topology_release(topo), TPU_INVALID_ARGUMENT, NOT_LIVE("tpu_topology"));
  CHECK_ERROR(tpu_device_assignment_release(da), TPU_INVALID_ARGUMENT,
              NOT_LIVE("tpu_device_assignment"));
  CHECK_ERROR(tpu_mesh_release(mesh), TPU_INVALID_ARGUMENT, NOT_LIVE("tpu_mesh"));
  CHECK_ERROR(tpu_cluster_resolver_release(resolver), TPU_INVALID_ARGUMENT,
              NOT_LIVE("tpu_cluster_resolver"));

  const tpu_dtype dtype = TPU_FLOAT;
  const tpu_shape shape = {0, {0}};
  tpu_infeed_queue *in = NULL;
  tpu_outfeed_queue *out = NULL;
  CHECK_OK(tpu_infeed_queue_create(g_sys, 2, 1, &dtype, &shape, 4, &in));
  CHECK_OK(tpu_outfeed_queue_create(g_sys, 2, 1, &dtype, &shape, 4, &out));
  CHECK_OK(tpu_infeed_queue_release(in));
  CHECK_OK(tpu_outfeed_queue_release(out));
  tpu_tensor *t = float_scalar(1.0f), *got = NULL;
  CHECK_ERROR(tpu_infeed_enqueue(in, 0, &t, 1), TPU_INVALID_ARGUMENT,
              "argument 'queue' " NOT_LIVE("tpu_infeed_queue"));
  CHECK_ERROR(tpu_outfeed_dequeue(out, 0, &got, 1), TPU_INVALID_ARGUMENT,
              "argument 'queue' " NOT_LIVE("tpu_outfeed_queue"));
  CHECK_ERROR(tpu_infeed_queue_release(in), TPU_INVALID_ARGUMENT, NOT_LIVE("tpu_infeed_queue"));
  CHECK_ERROR(tpu_outfeed_queue_release(out), TPU_INVALID_ARGUMENT, NOT_LIVE("tpu_outfeed_queue"));
  tpu_tensor_release(t);

  /* The system last: its handle freed, then passed again. */
  tpu_system *old = g_sys;
  CHECK_OK(tpu_system_release(g_sys));
  g_sys = NULL;
  CHECK_ERROR(tpu_system_num_cores(old, &n), TPU_INVALID_ARGUMENT,
              "argument 'system' " NOT_LIVE("tpu_system"));
  CHECK_ERROR(tpu_system_release(old), TPU_INVALID_ARGUMENT, NOT_LIVE("tpu_system"));
}

/* ---- magic words: a handle of another type ------------------------------------------ */

static tpu_status context_checks(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                 tpu_tensor **out, int no, void *user) {
  tpu_tensor *x = in[0], *sum = NULL;
  int r;
  /* A tensor where the context goes, and the context where a tensor goes. */
  CHECK_ERROR(tpu_replica_context_replica_id((tpu_replica_context *)x, &r), TPU_INVALID_ARGUMENT,
              "argument 'ctx' " NOT_LIVE("tpu_replica_context"));
  CHECK_ERROR(tpu_cross_replica_sum((tpu_replica_context *)x, x, NULL, &sum, NULL),
              TPU_INVALID_ARGUMENT, NOT_LIVE("tpu_replica_context"));
  CHECK_ERROR(tpu_cross_replica_sum(ctx, (tpu_tensor *)ctx, NULL, &sum, NULL),
              TPU_INVALID_ARGUMENT, "argument 'x' " NOT_LIVE("tpu_tensor"));
  return TPU_OK;
}

/* Each handle type given a live handle of another type (a cast, as a binding or a C
 * caller might by mistake): TPU_INVALID_ARGUMENT naming the argument and the type. */
static void test_handles__handle_of_another_type(void **state) {
  start(2, 10000);
  tpu_topology *topo = NULL;
  tpu_device_assignment *da = NULL;
  tpu_mesh *mesh = NULL;
  tpu_cluster_resolver *resolver = NULL;
  tpu_infeed_queue *in = NULL;
  tpu_outfeed_queue *out = NULL;
  CHECK_OK(tpu_system_topology(g_sys, &topo));
  CHECK_OK(tpu_system_default_device_assignment(g_sys, 2, &da));
  const char *names[1] = {"x"};
  const int64_t sizes[1] = {2};
  CHECK_OK(tpu_mesh_create(da, names, sizes, 1, &mesh));
  CHECK_OK(tpu_cluster_resolver_create(NULL, &resolver));
  const tpu_dtype dtype = TPU_FLOAT;
  const tpu_shape shape = {0, {0}};
  CHECK_OK(tpu_infeed_queue_create(g_sys, 2, 1, &dtype, &shape, 4, &in));
  CHECK_OK(tpu_outfeed_queue_create(g_sys, 2, 1, &dtype, &shape, 4, &out));
  tpu_tensor *t = float_scalar(1.0f), *got = NULL;
  int n;

  CHECK_ERROR(tpu_device_assignment_num_replicas((tpu_device_assignment *)topo, &n),
              TPU_INVALID_ARGUMENT, "argument 'assignment' " NOT_LIVE("tpu_device_assignment"));
  CHECK_ERROR(tpu_topology_num_tasks((tpu_topology *)da, &n), TPU_INVALID_ARGUMENT,
              "argument 'topology' " NOT_LIVE("tpu_topology"));
  CHECK_ERROR(tpu_system_num_cores((tpu_system *)topo, &n), TPU_INVALID_ARGUMENT,
              "argument 'system' " NOT_LIVE("tpu_system"));
  CHECK_ERROR(tpu_mesh_num_axes((tpu_mesh *)da, &n), TPU_INVALID_ARGUMENT,
              "argument 'mesh' " NOT_LIVE("tpu_mesh"));
  CHECK_ERROR(tpu_cluster_resolver_source((tpu_cluster_resolver *)mesh, &n), TPU_INVALID_ARGUMENT,
              "argument 'resolver' " NOT_LIVE("tpu_cluster_resolver"));
  CHECK_ERROR(tpu_tensor_rank((tpu_tensor *)resolver, &n), TPU_INVALID_ARGUMENT,
              "argument 'tensor' " NOT_LIVE("tpu_tensor"));
  CHECK_ERROR(tpu_infeed_enqueue((tpu_infeed_queue *)out, 0, &t, 1), TPU_INVALID_ARGUMENT,
              "argument 'queue' " NOT_LIVE("tpu_infeed_queue"));
  CHECK_OK(tpu_infeed_enqueue(in, 0, &t, 1)); /* something to dequeue, were it accepted */
  CHECK_ERROR(tpu_outfeed_dequeue((tpu_outfeed_queue *)in, 0, &got, 1), TPU_INVALID_ARGUMENT,
              "argument 'queue' " NOT_LIVE("tpu_outfeed_queue"));
  assert_null(got);
  /* Handles inside arguments: an options field, a tuple element, a replicate input. */
  tpu_step_options o = TPU_STEP_OPTIONS_INIT;
  o.device_assignment = (tpu_device_assignment *)topo;
  CHECK_ERROR(tpu_replicate(g_sys, context_checks, NULL, 2, 0, NULL, 0, NULL, &o),
              TPU_INVALID_ARGUMENT, "argument 'options->device_assignment' " NOT_LIVE("tpu_device_assignment"));
  o.device_assignment = NULL;
  o.infeed_queue = (tpu_infeed_queue *)out;
  CHECK_ERROR(tpu_replicate(g_sys, context_checks, NULL, 2, 0, NULL, 0, NULL, &o),
              TPU_INVALID_ARGUMENT, "argument 'options->infeed_queue' " NOT_LIVE("tpu_infeed_queue"));
  tpu_tensor *bad = (tpu_tensor *)topo;
  CHECK_ERROR(tpu_infeed_enqueue(in, 1, &bad, 1), TPU_INVALID_ARGUMENT,
              "argument 'tuple[0]' " NOT_LIVE("tpu_tensor"));
  tpu_tensor *mixed[2] = {t, (tpu_tensor *)mesh};
  CHECK_ERROR(tpu_replicate(g_sys, context_checks, NULL, 2, 1, mixed, 0, NULL, NULL), TPU_INVALID_ARGUMENT,
              "argument 'inputs[1]' " NOT_LIVE("tpu_tensor"));
  const int axis0[1] = {0};
  CHECK_ERROR(tpu_shard(g_sys, context_checks, NULL, 1, &mixed[1], 2, axis0, NULL, NULL, 0, NULL, NULL),
              TPU_INVALID_ARGUMENT, "argument 'inputs[0]' " NOT_LIVE("tpu_tensor"));
  /* Releases check the type too: nothing is freed. */
  CHECK_ERROR(tpu_topology_release((tpu_topology *)da), TPU_INVALID_ARGUMENT, NOT_LIVE("tpu_topology"));
  CHECK_ERROR(tpu_tensor_release((tpu_tensor *)mesh), TPU_INVALID_ARGUMENT, NOT_LIVE("tpu_tensor"));
  CHECK_ERROR(tpu_system_release((tpu_system *)in), TPU_INVALID_ARGUMENT, NOT_LIVE("tpu_system"));
  /* Inside a computation: the replica context and a collective's tensor. */
  tpu_tensor *inputs[2] = {t, t};
  CHECK_OK(tpu_replicate(g_sys, context_checks, NULL, 2, 1, inputs, 0, NULL, NULL));

  /* Everything is still live and releases once. */
  CHECK_OK(tpu_topology_num_tasks(topo, &n));
  CHECK_OK(tpu_tensor_release(t));
  CHECK_OK(tpu_infeed_queue_release(in));
  CHECK_OK(tpu_outfeed_queue_release(out));
  CHECK_OK(tpu_cluster_resolver_release(resolver));
  CHECK_OK(tpu_mesh_release(mesh));
  CHECK_OK(tpu_device_assignment_release(da));
  CHECK_OK(tpu_topology_release(topo));
  CHECK_NO_WORKER_FAILURES();
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_handles__system_release_inside_computation_is_refused,
                                release_system),
      cmocka_unit_test_teardown(test_handles__system_shutdown_inside_computation_is_refused,
                                release_system),
      cmocka_unit_test_teardown(test_handles__queue_release_inside_computation_is_refused,
                                release_system),
      cmocka_unit_test_teardown(test_handles__step_keeps_its_device_assignment, release_system),
      cmocka_unit_test_teardown(test_handles__context_system_after_release, release_system),
      cmocka_unit_test_teardown(test_handles__released_tensor, release_system),
      cmocka_unit_test_teardown(test_handles__recycled_tensor_is_live, release_system),
      cmocka_unit_test_teardown(test_handles__released_handles, release_system),
      cmocka_unit_test_teardown(test_handles__handle_of_another_type, release_system),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
