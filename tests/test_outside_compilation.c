/* Outside compilation with tensors (tpu_outside_compilation_tensors): the replica's
 * tensors reach the host function borrowed, the host's tensors come back owned by the
 * replica, and a NULL output, a failing host function or bad counts are named errors
 * that leave the replica's outputs alone. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <string.h>

#include <tpurt.h>

#include "test_util.h"

TEST_SYSTEM_FIXTURE

#define REPLICAS 4

static void start(void) {
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = REPLICAS;
  o.collective_timeout_ms = time_limit_ms(20000);
  tpu_status st = tpu_system_init(&o, &g_sys);
  if (st != TPU_OK) fail_msg("tpu_system_init: %s: %s", tpu_status_name(st), tpu_last_error());
}

static tpu_tensor *float_vector(const float *v, int64_t n) {
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, &n, 1, v, (size_t)n * sizeof *v, &t));
  return t;
}

static float first(const tpu_tensor *t) {
  const void *p = NULL;
  CHECK_OK(tpu_tensor_data(t, &p));
  return p ? *(const float *)p : -1.0f;
}

/* What a host function does, chosen per test. */
typedef enum { SCALE, LEAVE_NULL, FAIL } host_mode;
typedef struct {
  host_mode mode;
  tpu_tensor *seen[REPLICAS]; /* the input handle each replica's call got */
} host_state;

/* SCALE: outputs (inputs[0] * 10, replica id as float). */
static tpu_status host(int replica, tpu_tensor *const *inputs, int num_inputs, tpu_tensor **outputs,
                       int num_outputs, void *user) {
  host_state *h = user;
  h->seen[replica] = inputs[0];
  if (num_inputs != 2 || num_outputs != 2) CHECK_FAIL("counts %d, %d", num_inputs, num_outputs);
  if (h->mode == FAIL) return tpu_set_last_error(TPU_NOT_FOUND, "KeyError: 'weights'");
  float v[3] = {first(inputs[0]) * 10, 0, 0}, id = (float)replica;
  outputs[0] = float_vector(v, 3);
  if (h->mode == LEAVE_NULL) return TPU_OK; /* output 1 stays NULL */
  outputs[1] = float_vector(&id, 1);
  return TPU_OK;
}

/* Each replica sends (its x, a second tensor) and returns what the host gave back. */
static tpu_status computation(tpu_replica_context *ctx, tpu_tensor *const *in, int ni, tpu_tensor **out,
                              int no, void *user) {
  tpu_tensor *sentinel = in[1];
  tpu_tensor *got[2] = {sentinel, sentinel};
  tpu_status st = tpu_outside_compilation_tensors(ctx, host, user, in, 2, got, 2);
  if (st != TPU_OK) {
    if (got[0] != sentinel || got[1] != sentinel) CHECK_FAIL("a failed call changed the outputs");
    return st;
  }
  out[0] = got[0];
  out[1] = got[1];
  return TPU_OK;
}

static void make_inputs(tpu_tensor **inputs) {
  for (int r = 0; r < REPLICAS; ++r) {
    float v[3] = {(float)r + 1, 0, 0};
    inputs[2 * r] = float_vector(v, 3);
    inputs[2 * r + 1] = float_vector(v, 1);
  }
}

static void release_all(tpu_tensor **t, int n) {
  for (int i = 0; i < n; ++i) tpu_tensor_release(t[i]);
}

static void test_outside_compilation__tensors_round_trip(void **state) {
  start();
  host_state h = {SCALE, {NULL}};
  tpu_tensor *inputs[2 * REPLICAS], *outputs[2 * REPLICAS] = {NULL};
  make_inputs(inputs);
  CHECK_OK(tpu_replicate(g_sys, computation, &h, REPLICAS, 2, inputs, 2, outputs, NULL));
  CHECK_NO_WORKER_FAILURES();
  for (int r = 0; r < REPLICAS; ++r) {
    assert_ptr_equal(h.seen[r], inputs[2 * r]); /* borrowed, not copied */
    assert_float_equal(first(outputs[2 * r]), 10.0f * (float)(r + 1), 0);
    assert_float_equal(first(outputs[2 * r + 1]), (float)r, 0);
  }
  release_all(outputs, 2 * REPLICAS);
  release_all(inputs, 2 * REPLICAS);
}

static void test_outside_compilation__null_output_and_failure_are_named(void **state) {
  start();
  tpu_tensor *inputs[2 * REPLICAS], *outputs[2 * REPLICAS] = {NULL};
  make_inputs(inputs);
  host_state h = {LEAVE_NULL, {NULL}};
  CHECK_ERROR(tpu_replicate(g_sys, computation, &h, REPLICAS, 2, inputs, 2, outputs, NULL),
              TPU_INVALID_ARGUMENT, "returned TPU_OK but left output 1 of 2 NULL");
  h.mode = FAIL;
  CHECK_ERROR(tpu_replicate(g_sys, computation, &h, REPLICAS, 2, inputs, 2, outputs, NULL),
              TPU_NOT_FOUND, ": KeyError: 'weights'");
  CHECK_NO_WORKER_FAILURES();
  for (int i = 0; i < 2 * REPLICAS; ++i) assert_null(outputs[i]);
  release_all(inputs, 2 * REPLICAS);
}

/* Argument checks, inside a replica. */
static tpu_status bad_arguments(tpu_replica_context *ctx, tpu_tensor *const *in, int ni, tpu_tensor **out,
                                int no, void *user) {
  tpu_tensor *with_null[2] = {in[0], NULL}, *got[2] = {NULL, NULL};
  CHECK_ERROR(tpu_outside_compilation_tensors(ctx, host, user, with_null, 2, got, 2),
              TPU_INVALID_ARGUMENT, "input 1 is NULL");
  CHECK_ERROR(tpu_outside_compilation_tensors(ctx, host, user, in, -1, got, 2), TPU_INVALID_ARGUMENT,
              "num_inputs is -1");
  CHECK_ERROR(tpu_outside_compilation_tensors(ctx, host, user, in, 2, got, -2), TPU_INVALID_ARGUMENT,
              "num_outputs is -2");
  CHECK(got[0] == NULL && got[1] == NULL);
  return TPU_OK;
}

static void test_outside_compilation__argument_checks(void **state) {
  start();
  host_state h = {SCALE, {NULL}};
  tpu_tensor *inputs[2 * REPLICAS];
  make_inputs(inputs);
  CHECK_OK(tpu_replicate(g_sys, bad_arguments, &h, REPLICAS, 2, inputs, 0, NULL, NULL));
  CHECK_NO_WORKER_FAILURES();
  release_all(inputs, 2 * REPLICAS);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_outside_compilation__tensors_round_trip, release_system),
      cmocka_unit_test_teardown(test_outside_compilation__null_output_and_failure_are_named, release_system),
      cmocka_unit_test_teardown(test_outside_compilation__argument_checks, release_system),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
