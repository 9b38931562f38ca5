/* The options structs of steps and collectives: struct_size rules, TensorFlow's
 * POWER_OF_TWO padding, the per-step and per-call deadlines, and the infeed_queue
 * argument of tf.tpu.replicate / shard. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

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

static tpu_tensor *vector(int64_t n, float base) {
  float v[64];
  for (int64_t i = 0; i < n; ++i) v[i] = base + (float)i;
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, &n, 1, v, (size_t)n * sizeof(float), &t));
  return t;
}

/* Field by field: padding bytes of a struct initialised by a macro are unspecified. */
static void expect_default_step_options(const tpu_step_options *o) {
  assert_int_equal(o->struct_size, sizeof *o);
  assert_null(o->device_assignment);
  assert_null(o->maximum_shapes);
  assert_int_equal(o->num_maximum_shapes, 0);
  assert_int_equal(o->padding_spec, TPU_PADDING_AUTO);
  assert_int_equal(o->collective_timeout_ms, 0);
  assert_null(o->infeed_queue);
}

static tpu_status nothing(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                          tpu_tensor **out, int no, void *user) {
  return TPU_OK;
}

/* Records what each replica received: input count and the first input's length. */
typedef struct {
  int num_inputs[8];
  int64_t length[8];
  float values[8][8]; /* the last input's first values */
} received;

static tpu_status record(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                         tpu_tensor **out, int no, void *user) {
  received *r = user;
  int id = 0;
  tpu_replica_context_replica_id(ctx, &id);
  r->num_inputs[id] = ni;
  int64_t n = 0;
  if (tpu_tensor_dim(in[0], 0, &n) != TPU_OK) return TPU_INTERNAL;
  r->length[id] = n;
  const void *p = NULL;
  int64_t count = 0;
  tpu_tensor_num_elements(in[ni - 1], &count);
  if (tpu_tensor_data(in[ni - 1], &p) != TPU_OK) return TPU_INTERNAL;
  for (int64_t i = 0; i < count && i < 8; ++i) r->values[id][i] = ((const float *)p)[i];
  return TPU_OK;
}

static void test_step_options__struct_size_rules(void **state) {
  start(2, 0);
  tpu_step_options o;
  memset(&o, 0xAB, sizeof o);
  CHECK_OK(tpu_step_options_init(&o, sizeof o));
  const tpu_step_options macro = TPU_STEP_OPTIONS_INIT;
  tpu_step_options zeroed;
  memset(&zeroed, 0, sizeof zeroed);
  zeroed.struct_size = sizeof zeroed;
  expect_default_step_options(&o);
  expect_default_step_options(&macro);
  expect_default_step_options(&zeroed);
  CHECK_OK(tpu_replicate(g_sys, nothing, NULL, 2, 0, NULL, 0, NULL, &zeroed));

  /* Larger than this library knows: rejected, naming the size. */
  struct {
    tpu_step_options o;
    char tail[16];
  } big;
  memset(&big, 0, sizeof big);
  big.o.struct_size = sizeof big;
  CHECK_ERROR(tpu_replicate(g_sys, nothing, NULL, 2, 0, NULL, 0, NULL, &big.o),
               TPU_INVALID_ARGUMENT, "tpu_step_options.struct_size is");
  CHECK_ERROR(tpu_step_options_init(&big.o, sizeof big), TPU_INVALID_ARGUMENT, "struct_size");
  CHECK_ERROR(tpu_step_options_init(&o, 3), TPU_INVALID_ARGUMENT, "struct_size is 3");

  /* Smaller than 1.0's: rejected too (every caller has at least that much). */
  o.struct_size = sizeof(size_t);
  CHECK_ERROR(tpu_replicate(g_sys, nothing, NULL, 2, 0, NULL, 0, NULL, &o),
               TPU_INVALID_ARGUMENT, "struct_size");

  tpu_collective_options co;
  memset(&co, 0xAB, sizeof co);
  CHECK_OK(tpu_collective_options_init(&co, sizeof co));
  const tpu_collective_options cmacro = TPU_COLLECTIVE_OPTIONS_INIT;
  assert_int_equal(co.struct_size, cmacro.struct_size);
  assert_int_equal(co.timeout_ms, 0);
  assert_int_equal(cmacro.timeout_ms, 0);
  CHECK_ERROR(tpu_collective_options_init(&co, sizeof co + 8), TPU_INVALID_ARGUMENT, "struct_size");

  /* Bad field values name the field. */
  o = macro;
  o.padding_spec = 2;
  CHECK_ERROR(tpu_replicate(g_sys, nothing, NULL, 2, 0, NULL, 0, NULL, &o),
               TPU_INVALID_ARGUMENT, "padding_spec is 2");
  o = macro;
  o.collective_timeout_ms = -5;
  CHECK_ERROR(tpu_replicate(g_sys, nothing, NULL, 2, 0, NULL, 0, NULL, &o),
               TPU_INVALID_ARGUMENT, "collective_timeout_ms is -5");
  o = macro;
  o.num_maximum_shapes = 1;
  CHECK_ERROR(tpu_replicate(g_sys, nothing, NULL, 2, 0, NULL, 0, NULL, &o),
               TPU_INVALID_ARGUMENT, "maximum_shapes is NULL but num_maximum_shapes is 1");
}

/* One input of sizes a (replica 0) and b (replica 1) with maximum -1 or `given`. */
static int64_t padded_length(int64_t a, int64_t b, int64_t given, int padding_spec) {
  received r;
  memset(&r, 0, sizeof r);
  tpu_tensor *in[2] = {vector(a, 1), vector(b, 1)};
  tpu_shape max = {1, {given}};
  tpu_step_options o = TPU_STEP_OPTIONS_INIT;
  o.maximum_shapes = &max;
  o.num_maximum_shapes = 1;
  o.padding_spec = padding_spec;
  CHECK_OK(tpu_replicate(g_sys, record, &r, 2, 1, in, 0, NULL, &o));
  tpu_tensor_release(in[0]);
  tpu_tensor_release(in[1]);
  assert_int_equal(r.length[0], r.length[1]);
  assert_int_equal(r.num_inputs[0], 2); /* the input and its real size */
  return r.length[0];
}

/* TensorFlow: an unknown maximum pads to max(largest, 2), rounded up to a power of
 * two under POWER_OF_TWO; a given maximum is used as it is (at least 2). */
static void test_step_options__power_of_two_padding(void **state) {
  start(2, 0);
  assert_int_equal(padded_length(3, 5, -1, TPU_PADDING_AUTO), 5);
  assert_int_equal(padded_length(3, 5, -1, TPU_PADDING_POWER_OF_TWO), 8);
  assert_int_equal(padded_length(5, 8, -1, TPU_PADDING_POWER_OF_TWO), 8);
  assert_int_equal(padded_length(9, 3, -1, TPU_PADDING_POWER_OF_TWO), 16);
  assert_int_equal(padded_length(0, 1, -1, TPU_PADDING_POWER_OF_TWO), 2);
  assert_int_equal(padded_length(33, 40, -1, TPU_PADDING_POWER_OF_TWO), 64);
  assert_int_equal(padded_length(3, 5, 6, TPU_PADDING_POWER_OF_TWO), 6);
  assert_int_equal(padded_length(3, 5, 6, TPU_PADDING_AUTO), 6);
}

static tpu_status late_replica_one(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                   tpu_tensor **out, int no, void *user) {
  int id = 0;
  tpu_replica_context_replica_id(ctx, &id);
  if (id == 1) sleep_ms(*(int *)user);
  return tpu_barrier(ctx, NULL);
}

/* The step's deadline overrides the system's (60 s here). */
static void test_step_options__step_deadline(void **state) {
  start(2, 60000);
  tpu_step_options o = TPU_STEP_OPTIONS_INIT;
  o.collective_timeout_ms = time_limit_ms(300);
  int late = (int)time_limit_ms(500);
  const double t0 = now();
  char want[64];
  snprintf(want, sizeof want, "timed out after %lld ms waiting for replicas [1]",
           (long long)o.collective_timeout_ms);
  CHECK_ERROR(tpu_replicate(g_sys, late_replica_one, &late, 2, 0, NULL, 0, NULL, &o),
               TPU_DEADLINE_EXCEEDED, want);
  assert_true(now() - t0 < 30.0); /* far from the system's 60 s */
  /* The late replica returned within the step's grace; the next step runs. */
  late = 0;
  CHECK_OK(tpu_replicate(g_sys, late_replica_one, &late, 2, 0, NULL, 0, NULL, NULL));
}

typedef struct {
  int64_t timeout_ms;
  int late_ms;
  tpu_status status[2];
  char message[2][256];
} call_deadline;

static tpu_status timed_barrier(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                tpu_tensor **out, int no, void *user) {
  call_deadline *c = user;
  int id = 0;
  tpu_replica_context_replica_id(ctx, &id);
  if (id == 1) sleep_ms(c->late_ms);
  tpu_collective_options o = TPU_COLLECTIVE_OPTIONS_INIT;
  o.timeout_ms = c->timeout_ms;
  c->status[id] = tpu_barrier(ctx, &o);
  snprintf(c->message[id], sizeof c->message[id], "%s", tpu_last_error());
  return c->status[id];
}

/* A call's own timeout applies to the replica that gives it. */
static void test_step_options__collective_deadline(void **state) {
  start(2, 60000);
  call_deadline c;
  memset(&c, 0, sizeof c);
  c.timeout_ms = time_limit_ms(200);
  c.late_ms = (int)time_limit_ms(400);
  char want[64];
  snprintf(want, sizeof want, "timed out after %lld ms", (long long)c.timeout_ms);
  CHECK_ERROR(tpu_replicate(g_sys, timed_barrier, &c, 2, 0, NULL, 0, NULL, NULL),
               TPU_DEADLINE_EXCEEDED, want);
  assert_int_equal(c.status[0], TPU_DEADLINE_EXCEEDED);
  assert_non_null(strstr(c.message[0], "waiting for replicas [1]"));

  memset(&c, 0, sizeof c);
  c.timeout_ms = -1;
  CHECK_ERROR(tpu_replicate(g_sys, timed_barrier, &c, 2, 0, NULL, 0, NULL, NULL),
               TPU_INVALID_ARGUMENT, "options->timeout_ms is -1");

  memset(&c, 0, sizeof c); /* 0: the step's deadline; both arrive */
  CHECK_OK(tpu_replicate(g_sys, timed_barrier, &c, 2, 0, NULL, 0, NULL, NULL));
}

/* TensorFlow's infeed_queue: each replica gets its dequeued tuple after its inputs. */
static void test_step_options__infeed_queue(void **state) {
  start(4, 0);
  const tpu_dtype dtypes[1] = {TPU_FLOAT};
  const tpu_shape shapes[1] = {{1, {3}}};
  tpu_infeed_queue *q = NULL;
  CHECK_OK(tpu_infeed_queue_create(g_sys, 4, 1, dtypes, shapes, 0, &q));
  for (int r = 0; r < 4; ++r) {
    tpu_tensor *t = vector(3, 100.0f * (float)r);
    CHECK_OK(tpu_infeed_enqueue(q, r, &t, 1));
    tpu_tensor_release(t);
  }
  tpu_tensor *in[4] = {vector(2, 0), vector(2, 1), vector(2, 2), vector(2, 3)};
  tpu_step_options o = TPU_STEP_OPTIONS_INIT;
  o.infeed_queue = q;
  received r;
  memset(&r, 0, sizeof r);
  CHECK_OK(tpu_replicate(g_sys, record, &r, 4, 1, in, 0, NULL, &o));
  for (int k = 0; k < 4; ++k) {
    assert_int_equal(r.num_inputs[k], 2);
    assert_int_equal(r.length[k], 2);
    for (int i = 0; i < 3; ++i) assert_true(r.values[k][i] == 100.0f * (float)k + (float)i);
  }

  /* An empty FIFO waits for the step's deadline (not the system's 5 minutes), then
   * names the replica. */
  o.collective_timeout_ms = 200;
  const double t0 = now();
  CHECK_ERROR(tpu_replicate(g_sys, record, &r, 4, 1, in, 0, NULL, &o), TPU_DEADLINE_EXCEEDED,
              "dequeue for replica");
  assert_true(now() - t0 < time_limit(10.0));

  /* Not with maximum_shapes (TensorFlow: dynamic shapes and infeed do not mix). */
  tpu_shape max = {1, {-1}};
  o.maximum_shapes = &max;
  o.num_maximum_shapes = 1;
  CHECK_ERROR(tpu_replicate(g_sys, record, &r, 4, 1, in, 0, NULL, &o), TPU_INVALID_ARGUMENT,
               "Dynamic input shapes are not supported with infeed queues");
  /* The queue's replica count must be the step's. */
  o.maximum_shapes = NULL;
  o.num_maximum_shapes = 0;
  CHECK_ERROR(tpu_replicate(g_sys, record, &r, 1, 1, in, 0, NULL, &o), TPU_INVALID_ARGUMENT,
               "created for 4 replicas but the step has 1");

  /* batch_parallel gets it too: each shard its own tuple. */
  for (int k = 0; k < 4; ++k) {
    tpu_tensor *t = vector(3, (float)k);
    CHECK_OK(tpu_infeed_enqueue(q, k, &t, 1));
    tpu_tensor_release(t);
  }
  o.collective_timeout_ms = 0;
  tpu_tensor *batch = vector(8, 0);
  memset(&r, 0, sizeof r);
  CHECK_OK(tpu_batch_parallel(g_sys, record, &r, 1, &batch, 4, 0, NULL, &o));
  for (int k = 0; k < 4; ++k) {
    assert_int_equal(r.length[k], 2);
    assert_true(r.values[k][0] == (float)k);
  }
  tpu_tensor_release(batch);
  for (int k = 0; k < 4; ++k) tpu_tensor_release(in[k]);
  tpu_infeed_queue_release(q);
}

/* maximum_shapes is tpu_replicate's alone. */
static void test_step_options__maximum_shapes_only_for_replicate(void **state) {
  start(2, 0);
  tpu_tensor *x = vector(4, 0);
  tpu_shape max = {1, {-1}};
  tpu_step_options o = TPU_STEP_OPTIONS_INIT;
  o.maximum_shapes = &max;
  o.num_maximum_shapes = 1;
  CHECK_ERROR(tpu_shard(g_sys, nothing, NULL, 1, &x, 2, NULL, NULL, NULL, 0, NULL, &o),
               TPU_INVALID_ARGUMENT, "maximum_shapes applies to tpu_replicate only");
  CHECK_ERROR(tpu_rewrite(g_sys, nothing, NULL, 1, &x, 0, NULL, &o), TPU_INVALID_ARGUMENT,
               "maximum_shapes applies to tpu_replicate only");
  o.num_maximum_shapes = 2;
  tpu_tensor *in[2] = {x, x};
  CHECK_ERROR(tpu_replicate(g_sys, nothing, NULL, 2, 1, in, 0, NULL, &o), TPU_INVALID_ARGUMENT,
               "num_maximum_shapes is 2");
  tpu_tensor_release(x);
}

/* Spec §1.3: a device assignment for another topology is rejected; one built on an
 * equal topology (parsed from the system's bytes) is accepted. */
static void test_step_options__foreign_topology(void **state) {
  start(4, 0);
  const int32_t mesh[4] = {2, 1, 1, 2};
  const int32_t coords[16] = {0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 1};
  tpu_topology *other = NULL;
  tpu_device_assignment *da = NULL;
  CHECK_OK(tpu_topology_create(mesh, 4, coords, 1, 4, &other));
  CHECK_OK(tpu_device_assignment_build(other, NULL, 0, NULL, 0, 4, TPU_DEVICE_ORDER_AUTO, &da));
  CHECK_ERROR(tpu_replicate(g_sys, nothing, NULL, 4, 0, NULL, 0, NULL, STEP_OPTIONS(da, NULL, 0)),
              TPU_INVALID_ARGUMENT,
              "built for another topology (mesh [2, 1, 1, 2], 1 task of 4 devices) than this "
              "system's (mesh [4, 1, 1, 1], 1 task of 4 devices)");
  tpu_device_assignment_release(da);
  tpu_topology_release(other);

  unsigned char bytes[256];
  size_t len = 0;
  CHECK_OK(tpu_system_serialized_topology(g_sys, bytes, sizeof bytes, &len));
  tpu_topology *same = NULL;
  CHECK_OK(tpu_topology_parse(bytes, len, &same));
  CHECK_OK(tpu_device_assignment_build(same, NULL, 0, NULL, 0, 4, TPU_DEVICE_ORDER_AUTO, &da));
  CHECK_OK(tpu_replicate(g_sys, nothing, NULL, 4, 0, NULL, 0, NULL, STEP_OPTIONS(da, NULL, 0)));
  tpu_device_assignment_release(da);
  tpu_topology_release(same);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_step_options__struct_size_rules, release_system),
      cmocka_unit_test_teardown(test_step_options__power_of_two_padding, release_system),
      cmocka_unit_test_teardown(test_step_options__step_deadline, release_system),
      cmocka_unit_test_teardown(test_step_options__collective_deadline, release_system),
      cmocka_unit_test_teardown(test_step_options__infeed_queue, release_system),
      cmocka_unit_test_teardown(test_step_options__maximum_shapes_only_for_replicate, release_system),
      cmocka_unit_test_teardown(test_step_options__foreign_topology, release_system),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
