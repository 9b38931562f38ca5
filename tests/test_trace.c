/* Traces (tpu_system_options.trace_path, TPURT_TRACE): a replicated step with a
 * cross_replica_sum written as Chrome trace-event JSON, read back with jansson: the
 * events and their fields, one tid per participant, a failed step's verdict, the late
 * replica waiting least, the environment variable, and a path that cannot be written. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tpurt.h>

#include "test_util.h"

#define REPLICAS 4
#define ELEMENTS 16
#define LATE_REPLICA 2

TEST_SYSTEM_FIXTURE

static char g_path[64];

static int make_path(void **state) {
  (void)state;
  snprintf(g_path, sizeof g_path, "/tmp/tpurt-trace-test-%d.json", (int)getpid());
  return 0;
}

static int remove_path(void **state) {
  release_system(state);
  /* TRACE_TEST_KEEP: tests/check_trace.sh reads the late replica's trace. */
  const char *keep = getenv("TRACE_TEST_KEEP");
  if (keep && *keep) rename(g_path, keep);
  else unlink(g_path);
  return 0;
}

static void start(const char *trace_path) {
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = REPLICAS;
  o.collective_timeout_ms = 20000;
  o.trace_path = trace_path;
  CHECK_OK(tpu_system_init(&o, &g_sys));
}

typedef struct {
  int late_replica; /* -1: none; else it sleeps before its collectives */
  int failing_replica;
} step_args;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Two cross_replica_sums of ELEMENTS floats. */
static tpu_status summing(tpu_replica_context *ctx, tpu_tensor *const *in, int ni, tpu_tensor **out,
                          int no, void *user) {
  const step_args *a = user;
  int r = -1;
  tpu_replica_context_replica_id(ctx, &r);
  if (r == a->failing_replica) return tpu_replica_context_fail(ctx, TPU_INVALID_ARGUMENT, "replica fails on purpose");
  if (r == a->late_replica) sleep_ms(150);
  float v[ELEMENTS];
  for (int i = 0; i < ELEMENTS; ++i) v[i] = (float)r;
  int64_t n = ELEMENTS;
  for (int k = 0; k < 2; ++k) {
    tpu_tensor *x = NULL, *y = NULL;
    tpu_status s = tpu_tensor_create(TPU_FLOAT, &n, 1, v, sizeof v, &x);
    if (s == TPU_OK) s = tpu_cross_replica_sum(ctx, x, NULL, &y, NULL);
    tpu_tensor_release(x);
    tpu_tensor_release(y);
    if (s != TPU_OK) return s;
  }
  return TPU_OK;
}

static tpu_status run_step(int late, int failing) {
  step_args a = {late, failing};
  return tpu_replicate(g_sys, summing, &a, REPLICAS, 0, NULL, 0, NULL, NULL);
}

/* The trace written so far: the system is shut down first, so the file is complete. */
static json_t *load(void) {
  CHECK_OK(tpu_system_shutdown(g_sys));
  json_error_t err;
  json_t *root = json_load_file(g_path, 0, &err);
  if (root == NULL) fail_msg("%s: %s (line %d)", g_path, err.text, err.line);
  assert_true(json_is_array(root));
  return root;
}

static const char *str(json_t *e, const char *key) { return json_string_value(json_object_get(e, key)); }
static json_t *arg(json_t *e, const char *key) { return json_object_get(json_object_get(e, "args"), key); }

static void test_trace__replicate_with_cross_replica_sum(void **state) {
  start(g_path);
  CHECK_OK(run_step(-1, -1));
  CHECK_OK(run_step(-1, -1));
  json_t *root = load();
  int named[REPLICAS + 1] = {0}, computations[REPLICAS + 1] = {0}, sums[REPLICAS + 1] = {0};
  int steps = 0;
  size_t i;
  json_t *e;
  json_array_foreach(root, i, e) {
    const char *ph = str(e, "ph"), *name = str(e, "name");
    assert_non_null(ph);
    assert_non_null(name);
    assert_int_equal(json_integer_value(json_object_get(e, "pid")), 0);
    json_int_t tid = json_integer_value(json_object_get(e, "tid"));
    assert_true(tid >= 0 && tid <= REPLICAS);
    if (!strcmp(ph, "M")) {
      if (!strcmp(name, "thread_name") && tid > 0) {
        char want[32];
        snprintf(want, sizeof want, "replica %d", (int)tid - 1);
        assert_string_equal(json_string_value(arg(e, "name")), want);
        named[tid]++;
      }
      continue;
    }
    /* Complete events only (no B/E to balance), and instants. */
    assert_true(!strcmp(ph, "X") || !strcmp(ph, "i"));
    assert_true(json_number_value(json_object_get(e, "ts")) > 0);
    if (!strcmp(ph, "X")) assert_true(json_number_value(json_object_get(e, "dur")) >= 0);
    if (!strcmp(name, "step")) {
      assert_int_equal(tid, 0);
      assert_string_equal(json_string_value(arg(e, "verdict")), "OK");
      assert_int_equal(json_integer_value(arg(e, "step")), ++steps);
    } else if (!strcmp(name, "computation")) {
      assert_string_equal(json_string_value(arg(e, "status")), "OK");
      computations[tid]++;
    } else if (!strcmp(name, "all_reduce")) {
      assert_string_equal(str(e, "cat"), "collective");
      assert_int_equal(json_integer_value(arg(e, "bytes")), ELEMENTS * sizeof(float));
      assert_string_equal(json_string_value(arg(e, "group")), "all");
      assert_string_equal(json_string_value(arg(e, "algorithm")), "in-process");
      assert_string_equal(json_string_value(arg(e, "transport")), "none");
      const double wait = json_number_value(arg(e, "wait_us")), move = json_number_value(arg(e, "move_us"));
      const double dur = json_number_value(json_object_get(e, "dur"));
      assert_true(wait >= 0 && move >= 0);
      assert_true(wait + move <= dur + 0.01 && wait + move >= dur - 0.01);
      assert_int_equal(json_integer_value(arg(e, "seq")), sums[tid] % 2 + 1);
      sums[tid]++;
    }
  }
  assert_int_equal(steps, 2);
  for (int t = 1; t <= REPLICAS; ++t) {
    assert_int_equal(named[t], 1); /* one thread per participant, named once */
    assert_int_equal(computations[t], 2);
    assert_int_equal(sums[t], 4);
  }
  json_decref(root);
}

static void test_trace__failed_step_has_its_verdict(void **state) {
  start(g_path);
  CHECK_ERROR(run_step(-1, 1), TPU_INVALID_ARGUMENT, "fails on purpose");
  json_t *root = load();
  int verdicts = 0;
  size_t i;
  json_t *e;
  json_array_foreach(root, i, e) {
    if (strcmp(str(e, "name"), "step") != 0) continue;
    assert_string_equal(json_string_value(arg(e, "verdict")), "INVALID_ARGUMENT");
    assert_non_null(strstr(json_string_value(arg(e, "message")), "replica 1"));
    verdicts++;
  }
  assert_int_equal(verdicts, 1);
  json_decref(root);
}

/* The late replica comes last to its first collective: it waits least there, and
 * every other replica waits at least most of its sleep. */
static void test_trace__late_replica_waits_least(void **state) {
  start(g_path);
  CHECK_OK(run_step(LATE_REPLICA, -1));
  json_t *root = load();
  double wait[REPLICAS] = {0};
  int seen = 0;
  size_t i;
  json_t *e;
  json_array_foreach(root, i, e) {
    if (strcmp(str(e, "name"), "all_reduce") != 0 || json_integer_value(arg(e, "seq")) != 1) continue;
    wait[json_integer_value(json_object_get(e, "tid")) - 1] = json_number_value(arg(e, "wait_us"));
    seen++;
  }
  assert_int_equal(seen, REPLICAS);
  for (int r = 0; r < REPLICAS; ++r) {
    if (r == LATE_REPLICA) continue;
    assert_true(wait[r] > wait[LATE_REPLICA]);
    assert_true(wait[r] >= 100000); /* of the 150 ms */
  }
  json_decref(root);
}

static void test_trace__environment_variable(void **state) {
  FILE *old = fopen(g_path, "w"); /* what was there goes: the file is truncated */
  assert_non_null(old);
  fputs("not a trace {", old);
  fclose(old);
  setenv("TPURT_TRACE", g_path, 1);
  start(NULL);
  unsetenv("TPURT_TRACE");
  CHECK_OK(run_step(-1, -1));
  json_t *root = load();
  assert_true(json_array_size(root) > REPLICAS * 3);
  json_decref(root);
}

static void test_trace__unwritable_path_is_refused(void **state) {
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = 2;
  o.trace_path = "/nonexistent-dir/trace.json";
  CHECK_ERROR(tpu_system_init(&o, &g_sys), TPU_INVALID_ARGUMENT, "/nonexistent-dir/trace.json");
  /* Nothing stays live: a system starts at once afterwards, untraced. */
  o.trace_path = NULL;
  CHECK_OK(tpu_system_init(&o, &g_sys));
}

/* A caller built against the header before trace_path passes the shorter struct. */
static void test_trace__options_without_the_field(void **state) {
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.struct_size = offsetof(tpu_system_options, trace_path);
  o.num_cores = 2;
  o.trace_path = "/nonexistent-dir/ignored.json"; /* past its struct: never read */
  CHECK_OK(tpu_system_init(&o, &g_sys));
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_trace__replicate_with_cross_replica_sum, make_path, remove_path),
      cmocka_unit_test_setup_teardown(test_trace__failed_step_has_its_verdict, make_path, remove_path),
      cmocka_unit_test_setup_teardown(test_trace__late_replica_waits_least, make_path, remove_path),
      cmocka_unit_test_setup_teardown(test_trace__environment_variable, make_path, remove_path),
      cmocka_unit_test_setup_teardown(test_trace__unwritable_path_is_refused, make_path, remove_path),
      cmocka_unit_test_setup_teardown(test_trace__options_without_the_field, make_path, remove_path),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
