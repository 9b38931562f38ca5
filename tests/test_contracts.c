/* Sentences of docs/ABI.md, tpurt/system.h and tpurt/replicate.h that no other test
 * asserted (tests/contracts/<document>.tsv names each case beside its sentence, and
 * tests/check_contracts.sh checks the tables): the default deadline, job name and mesh,
 * what shutdown and release wait for, pointers the library keeps, options layouts,
 * steps one at a time in call order, a NULL output, tpu_rewrite's core,
 * tpu_replica_context_fail with TPU_OK, a joined thread's pinning; and of
 * tpurt/collectives.h, the handles collectives give out. Waits are bounded. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tpurt.h>

#include "test_util.h"

TEST_SYSTEM_FIXTURE

static void start(int cores, int64_t timeout_ms) {
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = cores;
  o.collective_timeout_ms = timeout_ms;
  CHECK_OK(tpu_system_init(&o, &g_sys));
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Waits up to `seconds` (scaled) for *flag to become nonzero. */
static int wait_for(atomic_int *flag, double seconds) {
  const double end = now() + time_limit(seconds);
  while (!atomic_load(flag) && now() < end) sleep_ms(2);
  return atomic_load(flag);
}

/* The process's threads named "tpurt-core-N" (the system's workers). */
static int count_workers(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[300], name[32] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    if (fgets(name, sizeof name, f) && !strncmp(name, "tpurt-core-", 11)) n++;
    fclose(f);
  }
  closedir(d);
  return n;
}

static tpu_status nothing(tpu_replica_context *ctx, tpu_tensor *const *in, int ni, tpu_tensor **out,
                          int no, void *user) {
  return TPU_OK;
}

/* ---- system.h ------------------------------------------------------------------- */

/* "Default collective deadline: 5 minutes." */
static void test_contracts__default_collective_deadline_is_5_minutes(void **state) {
  assert_int_equal(TPU_DEFAULT_COLLECTIVE_TIMEOUT_MS, 5 * 60 * 1000);
}

/* job_name "NULL: "localhost"", in the system's queries and its devices' names. */
static tpu_status device_name_of(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                 tpu_tensor **out, int no, void *user) {
  return tpu_replica_context_device_name(ctx, user, 128, &(size_t){0});
}

static void test_contracts__default_job_name_is_localhost(void **state) {
  start(1, 0);
  char buf[128];
  size_t len = 0;
  CHECK_OK(tpu_system_job_name(g_sys, buf, sizeof buf, &len));
  assert_string_equal(buf, "localhost");
  assert_int_equal(len, strlen("localhost"));
  CHECK_OK(tpu_replicate(g_sys, device_name_of, buf, 1, 0, NULL, 0, NULL, NULL));
  assert_non_null(strstr(buf, "/job:localhost/"));
}

/* mesh_shape "all 0: [num_cores, 1, 1, 1]". */
static void test_contracts__default_mesh_shape(void **state) {
  start(3, 0);
  tpu_topology *t = NULL;
  CHECK_OK(tpu_system_topology(g_sys, &t));
  int32_t mesh[4] = {0, 0, 0, 0};
  size_t n = 0;
  CHECK_OK(tpu_topology_mesh_shape(t, mesh, 4, &n));
  tpu_topology_release(t);
  assert_int_equal(n, 4);
  assert_int_equal(mesh[0], 3);
  assert_int_equal(mesh[1], 1);
  assert_int_equal(mesh[2], 1);
  assert_int_equal(mesh[3], 1);
}

typedef struct {
  atomic_int started, finished;
  tpu_status step;
} in_flight;

static tpu_status slow(tpu_replica_context *ctx, tpu_tensor *const *in, int ni, tpu_tensor **out,
                       int no, void *user) {
  in_flight *f = user;
  atomic_store(&f->started, 1);
  sleep_ms(300);
  atomic_store(&f->finished, 1);
  return TPU_OK;
}

static void *run_slow_step(void *arg) {
  in_flight *f = arg;
  f->step = tpu_replicate(g_sys, slow, f, 1, 0, NULL, 0, NULL, NULL);
  return NULL;
}

/* tpu_system_shutdown "Waits for work in flight, stops and joins the workers": a step
 * running on another thread ends first, and no worker thread is left. */
static void test_contracts__shutdown_waits_for_work_in_flight(void **state) {
  start(2, 0);
  const double end = now() + time_limit(10); /* a worker names itself once it runs */
  while (count_workers() != 2 && now() < end) sleep_ms(2);
  assert_int_equal(count_workers(), 2);
  in_flight f = {0, 0, TPU_UNKNOWN};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, run_slow_step, &f), 0);
  assert_true(wait_for(&f.started, 10));
  CHECK_OK(tpu_system_shutdown(g_sys));
  assert_int_equal(atomic_load(&f.finished), 1);
  assert_int_equal(count_workers(), 0);
  pthread_join(t, NULL);
  assert_int_equal(f.step, TPU_OK);
}

static atomic_int g_go, g_returned;

/* Replica 1 returns only when g_go is set (or after 20 s). */
static tpu_status one_late(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                           tpu_tensor **out, int no, void *user) {
  int r = -1;
  tpu_replica_context_replica_id(ctx, &r);
  if (r == 1) {
    const double end = now() + 20;
    while (!atomic_load(&g_go) && now() < end) sleep_ms(5);
    atomic_store(&g_returned, 1);
  }
  return TPU_OK;
}

/* tpu_system_release "Shuts the system down if needed, as tpu_system_shutdown (same
 * wait and status), and frees it whatever the status": a live system is shut down
 * (its workers joined) and freed (a new one may start); with a late computation still
 * running, release says TPU_DEADLINE_EXCEEDED as shutdown would, and frees it all the
 * same. */
static void test_contracts__release_shuts_down_and_frees(void **state) {
  start(2, 0);
  CHECK_OK(tpu_replicate(g_sys, nothing, NULL, 2, 0, NULL, 0, NULL, NULL));
  CHECK_OK(tpu_system_release(g_sys)); /* never shut down */
  g_sys = NULL;
  assert_int_equal(count_workers(), 0);

  start(2, time_limit_ms(200));
  atomic_store(&g_go, 0);
  atomic_store(&g_returned, 0);
  CHECK_ERROR(tpu_replicate(g_sys, one_late, NULL, 2, 0, NULL, 0, NULL, NULL),
              TPU_DEADLINE_EXCEEDED, "replica 1 did not return");
  const double t0 = now();
  CHECK_ERROR(tpu_system_release(g_sys), TPU_DEADLINE_EXCEEDED, "replica 1");
  g_sys = NULL;
  assert_true(now() - t0 < time_limit(10));
  assert_int_equal(atomic_load(&g_returned), 0);
  atomic_store(&g_go, 1);
  assert_true(wait_for(&g_returned, 10));
  start(1, 0); /* the released system is gone: one may be live at a time */
}

/* ---- docs/ABI.md ------------------------------------------------------------------- */

/* "A function never keeps a caller's pointer past its return unless its comment says
 * so": the options' strings may be overwritten and freed once tpu_system_init returns
 * (AddressSanitizer reports a use after free otherwise). */
static void test_contracts__init_keeps_no_caller_pointer(void **state) {
  tpu_system_options *o = malloc(sizeof *o);
  char *job = strdup("trainer"), *type = strdup("cpu");
  assert_true(o && job && type);
  CHECK_OK(tpu_system_options_init(o, sizeof *o));
  o->num_cores = 2;
  o->job_name = job;
  o->device_type = type;
  CHECK_OK(tpu_system_init(o, &g_sys));
  memset(job, 'x', strlen(job));
  memset(type, 'x', strlen(type));
  memset(o, 0xAB, sizeof *o);
  free(job);
  free(type);
  free(o);
  char buf[32];
  size_t len = 0;
  CHECK_OK(tpu_system_job_name(g_sys, buf, sizeof buf, &len));
  assert_string_equal(buf, "trainer");
  CHECK_OK(tpu_system_device_type(g_sys, buf, sizeof buf, &len));
  assert_string_equal(buf, "CPU");
  CHECK_OK(tpu_replicate(g_sys, nothing, NULL, 2, 0, NULL, 0, NULL, NULL));
}

/* "Fields are only ever appended, never reordered, resized or removed": every field of
 * the options structs (and tpu_joined_step) stays where the release that added it put
 * it (LP64). A new field goes at the end, and its line here. */
#define AT(type, field, offset, size)                          \
  do {                                                         \
    assert_int_equal(offsetof(type, field), (offset));         \
    assert_int_equal(sizeof(((type *)0)->field), (size));      \
  } while (0)

static void test_contracts__options_fields_keep_their_offsets(void **state) {
  if (sizeof(void *) != 8 || sizeof(size_t) != 8 || sizeof(int) != 4) skip();
  AT(tpu_system_options, struct_size, 0, 8); /* 1.0 */
  AT(tpu_system_options, num_cores, 8, 4);
  AT(tpu_system_options, mesh_shape, 12, 16);
  AT(tpu_system_options, job_name, 32, 8);
  AT(tpu_system_options, device_type, 40, 8);
  AT(tpu_system_options, pin_threads, 48, 4);
  AT(tpu_system_options, collective_timeout_ms, 56, 8);
  AT(tpu_system_options, close_on_failure, 64, 4);
  AT(tpu_system_options, embedding_config, 72, 8);
  AT(tpu_system_options, embedding_config_len, 80, 8);
  AT(tpu_system_options, private_collective_results, 88, 4);
  AT(tpu_system_options, trace_path, 96, 8); /* 1.4 */

  AT(tpu_step_options, struct_size, 0, 8);
  AT(tpu_step_options, device_assignment, 8, 8);
  AT(tpu_step_options, maximum_shapes, 16, 8);
  AT(tpu_step_options, num_maximum_shapes, 24, 8);
  AT(tpu_step_options, padding_spec, 32, 4);
  AT(tpu_step_options, collective_timeout_ms, 40, 8);
  AT(tpu_step_options, infeed_queue, 48, 8);
  AT(tpu_step_options, input_partitions, 56, 8); /* 1.3 */
  AT(tpu_step_options, num_input_partitions, 64, 8);
  AT(tpu_step_options, output_partitions, 72, 8);
  AT(tpu_step_options, num_output_partitions, 80, 8);
  AT(tpu_step_options, caller_threads, 88, 4); /* 1.4 */

  AT(tpu_collective_options, struct_size, 0, 8);
  AT(tpu_collective_options, timeout_ms, 8, 8);
  AT(tpu_collective_options, group_mode, 16, 4); /* 1.3 */

  AT(tpu_joined_step, struct_size, 0, 8); /* 1.4 */
  AT(tpu_joined_step, ctx, 8, 8);
  AT(tpu_joined_step, inputs, 16, 8);
  AT(tpu_joined_step, num_inputs, 24, 4);
  AT(tpu_joined_step, num_outputs, 28, 4);
  AT(tpu_joined_step, computation, 32, 8);
  AT(tpu_joined_step, user_data, 40, 8);
}

/* Steps "on one system run one at a time, in call order; they may be called from
 * several threads": three host threads call steps in a known order while the first
 * step holds the system; the steps run in that order and never overlap. */
typedef struct {
  atomic_int running, overlaps, next, order[3], hold_started, release_hold;
} step_log;

typedef struct {
  step_log *log;
  int id;
  atomic_int calling;
  tpu_status status;
} step_call;

static tpu_status logged(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                         tpu_tensor **out, int no, void *user) {
  step_call *c = user;
  step_log *l = c->log;
  int r = -1;
  tpu_replica_context_replica_id(ctx, &r);
  if (atomic_fetch_add(&l->running, 1) >= 2) atomic_fetch_add(&l->overlaps, 1);
  if (r == 0) l->order[atomic_fetch_add(&l->next, 1) % 3] = c->id;
  if (c->id == 0 && r == 0) {
    atomic_store(&l->hold_started, 1);
    const double end = now() + 20;
    while (!atomic_load(&l->release_hold) && now() < end) sleep_ms(2);
  }
  sleep_ms(20);
  atomic_fetch_sub(&l->running, 1);
  return TPU_OK;
}

static void *call_step(void *arg) {
  step_call *c = arg;
  atomic_store(&c->calling, 1);
  c->status = tpu_replicate(g_sys, logged, c, 2, 0, NULL, 0, NULL, NULL);
  return NULL;
}

static void test_contracts__steps_run_one_at_a_time_in_call_order(void **state) {
  start(2, 0);
  step_log l;
  memset(&l, 0, sizeof l);
  step_call calls[3];
  pthread_t t[3];
  for (int i = 0; i < 3; ++i) {
    calls[i].log = &l, calls[i].id = i, calls[i].status = TPU_UNKNOWN;
    atomic_init(&calls[i].calling, 0);
    assert_int_equal(pthread_create(&t[i], NULL, call_step, &calls[i]), 0);
    /* The next call comes well after this one has been made. */
    if (i == 0) assert_true(wait_for(&l.hold_started, 10));
    else assert_true(wait_for(&calls[i].calling, 10));
    sleep_ms((int)time_limit_ms(150));
  }
  atomic_store(&l.release_hold, 1);
  for (int i = 0; i < 3; ++i) pthread_join(t[i], NULL);
  for (int i = 0; i < 3; ++i) assert_int_equal(calls[i].status, TPU_OK);
  assert_int_equal(atomic_load(&l.next), 3);
  assert_int_equal(atomic_load(&l.overlaps), 0);
  for (int i = 0; i < 3; ++i) assert_int_equal(l.order[i], i);
}

/* ---- replicate.h ------------------------------------------------------------------- */

/* Outputs: "NULL is allowed and stays NULL". */
static tpu_status first_output_only(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                    tpu_tensor **out, int no, void *user) {
  int64_t n = 1;
  const float v = 2;
  out[1] = NULL;
  return tpu_tensor_create(TPU_FLOAT, &n, 1, &v, sizeof v, &out[0]);
}

static void test_contracts__null_output_stays_null(void **state) {
  start(2, 0);
  int dummy;
  tpu_tensor *out[4] = {(tpu_tensor *)&dummy, (tpu_tensor *)&dummy, (tpu_tensor *)&dummy,
                        (tpu_tensor *)&dummy};
  CHECK_OK(tpu_replicate(g_sys, first_output_only, NULL, 2, 0, NULL, 2, out, NULL));
  for (int r = 0; r < 2; ++r) {
    assert_non_null(out[r * 2]);
    assert_ptr_not_equal(out[r * 2], (tpu_tensor *)&dummy);
    assert_null(out[r * 2 + 1]);
    tpu_tensor_release(out[r * 2]);
  }
}

/* tpu_rewrite: "one replica on core 0" when no device assignment says otherwise. */
static tpu_status record_core(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                              tpu_tensor **out, int no, void *user) {
  int *seen = user;
  tpu_replica_context_num_replicas(ctx, &seen[1]);
  return tpu_replica_context_core(ctx, &seen[0]);
}

static void test_contracts__rewrite_runs_on_core_0(void **state) {
  start(4, 0);
  for (int i = 0; i < 3; ++i) {
    int seen[2] = {-1, -1};
    CHECK_OK(tpu_rewrite(g_sys, record_core, seen, 0, NULL, 0, NULL, NULL));
    assert_int_equal(seen[0], 0);
    assert_int_equal(seen[1], 1);
  }
}

/* tpu_replica_context_fail: "code must not be TPU_OK" (TPU_INVALID_ARGUMENT, and the
 * computation goes on). */
typedef struct {
  tpu_status status;
  char message[256];
} fail_ok;

static tpu_status fail_with_ok(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                               tpu_tensor **out, int no, void *user) {
  fail_ok *f = user;
  f->status = tpu_replica_context_fail(ctx, TPU_OK, "not a failure");
  snprintf(f->message, sizeof f->message, "%s", tpu_last_error());
  return TPU_OK;
}

static void test_contracts__context_fail_needs_an_error(void **state) {
  start(1, 0);
  fail_ok f = {TPU_OK, ""};
  CHECK_OK(tpu_replicate(g_sys, fail_with_ok, &f, 1, 0, NULL, 0, NULL, NULL));
  assert_int_equal(f.status, TPU_INVALID_ARGUMENT);
  assert_non_null(strstr(f.message, "TPU_OK"));
}

/* tpu_step_join: "While the system pins its workers (tpu_system_options.pin_threads) a
 * thread that gets a participant of core c is pinned to c's CPU, as c's worker would
 * be, and keeps that affinity." */
typedef struct {
  int core;
  tpu_status join, leave;
  int during, after; /* the one CPU of the thread's mask, -1 if not exactly one */
} joiner;

static int only_cpu(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) != 1) return -1;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) return c;
  return -1;
}

static void *join_and_leave(void *arg) {
  joiner *j = arg;
  tpu_joined_step s = TPU_JOINED_STEP_INIT;
  j->join = tpu_step_join(g_sys, j->core, (int64_t)time_limit_ms(20000), &s);
  if (j->join != TPU_OK) return NULL;
  j->during = only_cpu();
  j->leave = tpu_step_leave(s.ctx, TPU_OK, NULL, 0);
  j->after = only_cpu();
  return NULL;
}

static void test_contracts__joined_thread_is_pinned_like_the_worker(void **state) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  assert_int_equal(sched_getaffinity(0, sizeof mask, &mask), 0);
  int usable[CPU_SETSIZE], n = 0;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mask)) usable[n++] = c;
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = 2;
  o.pin_threads = TPU_PIN_ALWAYS;
  CHECK_OK(tpu_system_init(&o, &g_sys));
  joiner j[2] = {{0, TPU_UNKNOWN, TPU_UNKNOWN, -1, -1}, {1, TPU_UNKNOWN, TPU_UNKNOWN, -1, -1}};
  pthread_t t[2];
  for (int c = 0; c < 2; ++c) assert_int_equal(pthread_create(&t[c], NULL, join_and_leave, &j[c]), 0);
  tpu_step_options so = TPU_STEP_OPTIONS_INIT;
  so.caller_threads = 1;
  so.collective_timeout_ms = time_limit_ms(20000);
  CHECK_OK(tpu_replicate(g_sys, NULL, NULL, 2, 0, NULL, 0, NULL, &so));
  for (int c = 0; c < 2; ++c) pthread_join(t[c], NULL);
  for (int c = 0; c < 2; ++c) {
    assert_int_equal(j[c].join, TPU_OK);
    assert_int_equal(j[c].leave, TPU_OK);
    assert_int_equal(j[c].during, usable[c % n]);
    assert_int_equal(j[c].after, usable[c % n]);
  }
}

/* collectives.h: "Outputs are new tensor handles (*out, the caller's). Inputs are only
 * read." Every collective on two replicas: each output is a handle of its own, not the
 * input's, that outlives the step (the test thread reads and releases them after it);
 * the input keeps its values, shape and buffer. */
enum { kOps = 7 };

typedef struct {
  tpu_tensor *out[2][kOps];
  const void *x[2], *in_before[2], *in_after[2];
  int in_changed[2];
} new_outputs;

static tpu_status every_collective(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                   tpu_tensor **outs, int no, void *user) {
  new_outputs *n = user;
  int r = 0;
  tpu_replica_context_replica_id(ctx, &r);
  float v[4];
  for (int i = 0; i < 4; ++i) v[i] = (float)(10 * r + i);
  const int64_t dims[1] = {4};
  const int32_t pairs[4] = {0, 1, 1, 0};
  tpu_tensor *x = NULL;
  tpu_status st = tpu_tensor_create(TPU_FLOAT, dims, 1, v, sizeof v, &x);
  n->x[r] = x;
  if (st == TPU_OK) st = tpu_tensor_data(x, &n->in_before[r]);
  tpu_tensor **o = n->out[r];
  if (st == TPU_OK) st = tpu_cross_replica_sum(ctx, x, NULL, &o[0], NULL);
  if (st == TPU_OK) st = tpu_all_reduce(ctx, x, TPU_REDUCE_MAX, NULL, &o[1], NULL);
  if (st == TPU_OK) st = tpu_all_gather(ctx, x, 0, NULL, &o[2], NULL);
  if (st == TPU_OK) st = tpu_reduce_scatter(ctx, x, TPU_REDUCE_SUM, 0, NULL, &o[3], NULL);
  if (st == TPU_OK) st = tpu_all_to_all(ctx, x, 0, 0, 2, NULL, &o[4], NULL);
  if (st == TPU_OK) st = tpu_collective_permute(ctx, x, pairs, 2, &o[5], NULL);
  if (st == TPU_OK) st = tpu_broadcast(ctx, x, 0, NULL, &o[6], NULL);
  int64_t got_dims[1] = {0};
  const void *p = NULL;
  if (st == TPU_OK) st = tpu_tensor_data(x, &p);
  if (st == TPU_OK) st = tpu_tensor_dims(x, got_dims, 1, &(size_t){0});
  n->in_after[r] = p;
  n->in_changed[r] = st != TPU_OK || got_dims[0] != 4 || memcmp(p, v, sizeof v) != 0;
  tpu_tensor_release(x);
  return st;
}

static void test_contracts__collective_outputs_are_new_and_inputs_only_read(void **state) {
  start(2, time_limit_ms(20000));
  static new_outputs n;
  memset(&n, 0, sizeof n);
  CHECK_OK(tpu_replicate(g_sys, every_collective, &n, 2, 0, NULL, 0, NULL, NULL));
  /* Replica r's x is {10r, 10r + 1, 10r + 2, 10r + 3}. */
  const float want0[kOps][8] = {{10, 12, 14, 16}, {10, 11, 12, 13}, {0, 1, 2, 3, 10, 11, 12, 13},
                                {10, 12}, {0, 1, 10, 11}, {10, 11, 12, 13}, {0, 1, 2, 3}};
  const int64_t count[kOps] = {4, 4, 8, 2, 4, 4, 4};
  for (int r = 0; r < 2; ++r) {
    assert_false(n.in_changed[r]);
    assert_ptr_equal(n.in_after[r], n.in_before[r]);
    for (int op = 0; op < kOps; ++op) {
      tpu_tensor *t = n.out[r][op];
      assert_non_null(t);
      assert_ptr_not_equal(t, n.x[r]); /* x was alive then: a new handle has another address */
      for (int q = 0; q < 2; ++q) /* no handle given out twice */
        for (int other = 0; other < kOps; ++other)
          if (q != r || other != op) assert_ptr_not_equal(t, n.out[q][other]);
      int64_t elements = 0;
      const float *data = NULL;
      CHECK_OK(tpu_tensor_num_elements(t, &elements));
      assert_int_equal(elements, count[op]);
      CHECK_OK(tpu_tensor_data(t, (const void **)&data));
      if (r == 0)
        for (int i = 0; i < count[op]; ++i) assert_true(data[i] == want0[op][i]);
      CHECK_OK(tpu_tensor_release(t));
    }
  }
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_contracts__default_collective_deadline_is_5_minutes, release_system),
      cmocka_unit_test_teardown(test_contracts__default_job_name_is_localhost, release_system),
      cmocka_unit_test_teardown(test_contracts__default_mesh_shape, release_system),
      cmocka_unit_test_teardown(test_contracts__shutdown_waits_for_work_in_flight, release_system),
      cmocka_unit_test_teardown(test_contracts__release_shuts_down_and_frees, release_system),
      cmocka_unit_test_teardown(test_contracts__init_keeps_no_caller_pointer, release_system),
      cmocka_unit_test_teardown(test_contracts__options_fields_keep_their_offsets, release_system),
      cmocka_unit_test_teardown(test_contracts__steps_run_one_at_a_time_in_call_order, release_system),
      cmocka_unit_test_teardown(test_contracts__null_output_stays_null, release_system),
      cmocka_unit_test_teardown(test_contracts__rewrite_runs_on_core_0, release_system),
      cmocka_unit_test_teardown(test_contracts__context_fail_needs_an_error, release_system),
      cmocka_unit_test_teardown(test_contracts__joined_thread_is_pinned_like_the_worker, release_system),
      cmocka_unit_test_teardown(test_contracts__collective_outputs_are_new_and_inputs_only_read, release_system),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
