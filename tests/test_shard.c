/* tf.tpu.shard and batch_parallel: splitting inputs along axes, concatenating or
 * stacking outputs, shard 0's output when not gathered, and their errors. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include <tpurt.h>

#include "test_util.h"

static tpu_system *g_sys;

static int setup(void **state) {
  (void)state;
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = 4;
  o.close_on_failure = 0;
  return tpu_system_init(&o, &g_sys) == TPU_OK ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  tpu_system_release(g_sys);
  return 0;
}

/* A float tensor of `dims` holding 0, 1, 2, ... */
static tpu_tensor *iota(const int64_t *dims, int rank) {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  float v[64];
  for (int64_t i = 0; i < n; ++i) v[i] = (float)i;
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, rank, v, (size_t)n * 4, &t));
  return t;
}

static void expect_tensor(const tpu_tensor *t, const int64_t *dims, int rank, const float *want) {
  int r = -1;
  int64_t got[4], n = 0;
  CHECK_OK(tpu_tensor_rank(t, &r));
  assert_int_equal(r, rank);
  CHECK_OK(tpu_tensor_dims(t, got, 4, &(size_t){0}));
  for (int i = 0; i < rank; ++i) assert_int_equal(got[i], dims[i]);
  tpu_tensor_num_elements(t, &n);
  const float *p;
  tpu_tensor_data(t, (const void **)&p);
  for (int64_t i = 0; i < n; ++i)
    if (p[i] != want[i]) fail_msg("element %ld: %g != %g", (long)i, p[i], want[i]);
}

static int shard_id(tpu_replica_context *ctx) {
  int r = -1;
  tpu_replica_context_replica_id(ctx, &r);
  return r;
}

/* out[0] = in[0] * 10 + shard; out[1] = float scalar shard. */
static tpu_status scale_and_id(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                               tpu_tensor **out, int no, void *user) {
  int s = shard_id(ctx);
  int64_t dims[4], n = 0;
  int rank = 0;
  tpu_tensor_rank(in[0], &rank);
  tpu_tensor_dims(in[0], dims, 4, &(size_t){0});
  tpu_tensor_num_elements(in[0], &n);
  const void *p;
  tpu_tensor_data(in[0], &p);
  float v[64], id = (float)s;
  for (int64_t i = 0; i < n; ++i) v[i] = ((const float *)p)[i] * 10 + (float)s;
  if (tpu_tensor_create(TPU_FLOAT, dims, rank, v, (size_t)n * 4, &out[0]) != TPU_OK) return TPU_INTERNAL;
  if (no > 1 && tpu_tensor_create(TPU_FLOAT, NULL, 0, &id, 4, &out[1]) != TPU_OK) return TPU_INTERNAL;
  return TPU_OK;
}

static void test_shard__split_concat_and_stack(void **state) {
  const int64_t dims[2] = {4, 3};
  tpu_tensor *in = iota(dims, 2), *out[2];
  CHECK_OK(tpu_shard(g_sys, scale_and_id, NULL, 1, &in, 4, NULL, NULL, NULL, 2, out, NULL));
  float want[12];
  for (int i = 0; i < 12; ++i) want[i] = (float)i * 10 + (float)(i / 3);
  expect_tensor(out[0], dims, 2, want);
  const int64_t stacked[1] = {4};
  const float ids[4] = {0, 1, 2, 3};
  expect_tensor(out[1], stacked, 1, ids);
  tpu_tensor_release(out[0]);
  tpu_tensor_release(out[1]);

  /* Axis 1 in, axis -1 out: columns go to shards and come back in place. */
  const int in_axes[1] = {1}, out_axes[2] = {-1, 0};
  const int64_t wide[2] = {2, 4};
  tpu_tensor *w = iota(wide, 2);
  CHECK_OK(tpu_shard(g_sys, scale_and_id, NULL, 1, &w, 4, in_axes, NULL, out_axes, 2, out, NULL));
  for (int i = 0; i < 8; ++i) want[i] = (float)i * 10 + (float)(i % 4);
  expect_tensor(out[0], wide, 2, want);
  tpu_tensor_release(out[0]);
  tpu_tensor_release(out[1]);

  /* Not gathered: shard 0's value. */
  const int from_all[2] = {0, 1};
  CHECK_OK(tpu_shard(g_sys, scale_and_id, NULL, 1, &w, 4, in_axes, from_all, NULL, 2, out, NULL));
  const int64_t column[2] = {2, 1};
  const float shard0[2] = {0, 40};
  expect_tensor(out[0], column, 2, shard0);
  tpu_tensor_release(out[0]);
  tpu_tensor_release(out[1]);
  tpu_tensor_release(w);
  tpu_tensor_release(in);
}

static void test_shard__batch_parallel(void **state) {
  const int64_t dims[2] = {8, 2};
  tpu_tensor *in = iota(dims, 2), *out;
  CHECK_OK(tpu_batch_parallel(g_sys, scale_and_id, NULL, 1, &in, 4, 1, &out, NULL));
  float want[16];
  for (int i = 0; i < 16; ++i) want[i] = (float)i * 10 + (float)(i / 4);
  expect_tensor(out, dims, 2, want);
  tpu_tensor_release(out);
  tpu_tensor_release(in);

  /* Two shards need a device assignment on four cores. */
  tpu_topology *topo = NULL;
  tpu_device_assignment *da = NULL;
  CHECK_OK(tpu_system_topology(g_sys, &topo));
  CHECK_OK(tpu_device_assignment_build(topo, NULL, 0, NULL, 0, 2, TPU_DEVICE_ORDER_AUTO, &da));
  const int64_t six[2] = {6, 2};
  in = iota(six, 2);
  CHECK_OK(tpu_batch_parallel(g_sys, scale_and_id, NULL, 1, &in, 2, 1, &out, STEP_OPTIONS(da, NULL, 0)));
  for (int i = 0; i < 12; ++i) want[i] = (float)i * 10 + (float)(i / 6);
  expect_tensor(out, six, 2, want);
  tpu_tensor_release(out);
  CHECK_ERROR(tpu_batch_parallel(g_sys, scale_and_id, NULL, 1, &in, 4, 1, &out, NULL),
               TPU_INVALID_ARGUMENT, "size 6 is not divisible by 4");
  assert_null(out);
  tpu_tensor_release(in);
  tpu_device_assignment_release(da);
  tpu_topology_release(topo);

  /* Rows of 64 bytes: the pieces share the input's buffer. */
  const int64_t rows[2] = {4, 16};
  in = iota(rows, 2);
  CHECK_OK(tpu_batch_parallel(g_sys, scale_and_id, NULL, 1, &in, 4, 1, &out, NULL));
  float big[64];
  for (int i = 0; i < 64; ++i) big[i] = (float)i * 10 + (float)(i / 16);
  expect_tensor(out, rows, 2, big);
  tpu_tensor_release(out);
  tpu_tensor_release(in);
}

/* Scalar outputs (issue 29, 3.1). TensorFlow's split_compile_and_shard (tpu.py), which
 * batch_parallel calls with every output gathered, stacks an output whose shape has
 * rank 0 (array_ops.stack, whatever output_shard_axes says) and concatenates the
 * others; a scalar not gathered from all shards is shard 0's. The docstrings' "Inputs
 * and outputs of the computation must be at least rank-1 Tensors" is not enforced
 * for outputs there, so tpurt stacks too (docs/DEVIATIONS.md, "Steps and infeed"). */
static void test_shard__scalar_outputs_are_stacked(void **state) {
  const int64_t dims[2] = {8, 2};
  tpu_tensor *in = iota(dims, 2), *out[2];
  CHECK_OK(tpu_batch_parallel(g_sys, scale_and_id, NULL, 1, &in, 4, 2, out, NULL));
  const int64_t stacked[1] = {4};
  const float ids[4] = {0, 1, 2, 3};
  expect_tensor(out[1], stacked, 1, ids);
  tpu_tensor_release(out[0]);
  tpu_tensor_release(out[1]);
  /* An output axis of 1 for the scalar: stacked all the same. */
  const int out_axes[2] = {0, 1};
  CHECK_OK(tpu_shard(g_sys, scale_and_id, NULL, 1, &in, 4, NULL, NULL, out_axes, 2, out, NULL));
  expect_tensor(out[1], stacked, 1, ids);
  tpu_tensor_release(out[0]);
  tpu_tensor_release(out[1]);
  /* Not gathered: shard 0's scalar, rank 0. */
  const int from_all[2] = {1, 0};
  CHECK_OK(tpu_shard(g_sys, scale_and_id, NULL, 1, &in, 4, NULL, from_all, NULL, 2, out, NULL));
  const float zero[1] = {0};
  expect_tensor(out[1], NULL, 0, zero);
  tpu_tensor_release(out[0]);
  tpu_tensor_release(out[1]);
  tpu_tensor_release(in);
}

static void test_shard__input_errors(void **state) {
  const int64_t dims[1] = {5};
  tpu_tensor *in = iota(dims, 1), *out = (tpu_tensor *)&dims;
  CHECK_ERROR(tpu_shard(g_sys, scale_and_id, NULL, 1, &in, 4, NULL, NULL, NULL, 1, &out, NULL),
               TPU_INVALID_ARGUMENT, "input 0 (float32[5]) cannot be split into 4 shards along axis 0: size 5 is not divisible by 4");
  assert_null(out);
  CHECK_ERROR(tpu_shard(g_sys, scale_and_id, NULL, 1, &in, 0, NULL, NULL, NULL, 1, &out, NULL),
               TPU_INVALID_ARGUMENT, "num_shards must be a positive integer");
  const int bad_axis[1] = {1};
  CHECK_ERROR(tpu_shard(g_sys, scale_and_id, NULL, 1, &in, 1, bad_axis, NULL, NULL, 1, &out, NULL),
               TPU_INVALID_ARGUMENT, "input_shard_axes[0] = 1 is out of range");
  tpu_tensor_release(in);
  float x = 1;
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, NULL, 0, &x, 4, &in));
  CHECK_ERROR(tpu_shard(g_sys, scale_and_id, NULL, 1, &in, 1, NULL, NULL, NULL, 1, &out, NULL),
               TPU_INVALID_ARGUMENT, "is a scalar");
  tpu_tensor_release(in);
  in = NULL;
  CHECK_ERROR(tpu_shard(g_sys, scale_and_id, NULL, 1, &in, 1, NULL, NULL, NULL, 1, &out, NULL),
               TPU_INVALID_ARGUMENT, "input 0 is NULL");
  CHECK_ERROR(tpu_shard(g_sys, scale_and_id, NULL, 0, NULL, 3, NULL, NULL, NULL, 0, NULL, NULL),
               TPU_INVALID_ARGUMENT, "'num_replicas' must be equal to 1 or 4");
}

/* Shard s returns a [s+1] vector as output 0 (mismatched across shards unless
 * concatenated along 0), a [2, s+1] matrix as output 1, and leaves output 2 NULL. */
static tpu_status ragged(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                         tpu_tensor **out, int no, void *user) {
  int s = shard_id(ctx);
  int64_t d0[1] = {s + 1}, d1[2] = {2, s + 1};
  if (tpu_tensor_create(TPU_FLOAT, d0, 1, NULL, 0, &out[0]) != TPU_OK) return TPU_INTERNAL;
  if (tpu_tensor_create(TPU_FLOAT, d1, 2, NULL, 0, &out[1]) != TPU_OK) return TPU_INTERNAL;
  return TPU_OK;
}

static void test_shard__output_errors(void **state) {
  tpu_tensor *out[3];
  int from_all[3] = {1, 0, 0};
  int axes[3] = {0, 0, 0};
  /* Ragged along the concatenation axis is fine; a NULL output not gathered stays NULL. */
  CHECK_OK(tpu_shard(g_sys, ragged, NULL, 0, NULL, 4, NULL, from_all, axes, 3, out, NULL));
  int64_t n = 0;
  tpu_tensor_num_elements(out[0], &n);
  assert_int_equal(n, 1 + 2 + 3 + 4);
  assert_null(out[2]);
  tpu_tensor_release(out[0]);
  tpu_tensor_release(out[1]);

  from_all[1] = 1;
  CHECK_ERROR(tpu_shard(g_sys, ragged, NULL, 0, NULL, 4, NULL, from_all, axes, 2, out, NULL),
               TPU_INVALID_ARGUMENT, "shards have mismatched output shapes");
  assert_null(out[0]);
  assert_null(out[1]);
  axes[1] = 1; /* concatenating the ragged axis works */
  CHECK_OK(tpu_shard(g_sys, ragged, NULL, 0, NULL, 4, NULL, from_all, axes, 2, out, NULL));
  tpu_tensor_release(out[0]);
  tpu_tensor_release(out[1]);
  axes[1] = 2;
  CHECK_ERROR(tpu_shard(g_sys, ragged, NULL, 0, NULL, 4, NULL, from_all, axes, 2, out, NULL),
               TPU_INVALID_ARGUMENT, "output_shard_axes[1] = 2 is out of range");
  from_all[2] = 1;
  axes[1] = 1;
  CHECK_ERROR(tpu_shard(g_sys, ragged, NULL, 0, NULL, 4, NULL, from_all, axes, 3, out, NULL),
               TPU_INVALID_ARGUMENT, "shard 0 left output 2 NULL");
}

/* Shard g_bad_shard leaves output 0 NULL (g_bad == 1) or makes it int32 (g_bad == 2);
 * the others give float32 [1] {shard}. */
static int g_bad_shard = -1, g_bad;
static tpu_status one_bad(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                          tpu_tensor **out, int no, void *user) {
  int s = shard_id(ctx);
  const int64_t d[1] = {1};
  float v = (float)s;
  int32_t i = s;
  if (s == g_bad_shard && g_bad == 1) return TPU_OK;
  if (s == g_bad_shard && g_bad == 2) return tpu_tensor_create(TPU_INT32, d, 1, &i, 4, &out[0]);
  return tpu_tensor_create(TPU_FLOAT, d, 1, &v, 4, &out[0]);
}

/* The checks on the outputs fail the step itself, on behalf of the shard at fault
 * ("replica S: ..."), whichever participant finds it; the next step works. */
static void test_shard__output_checks_fail_the_step(void **state) {
  tpu_tensor *out = (tpu_tensor *)&g_bad;
  for (int bad = 0; bad < 4; ++bad) {
    g_bad_shard = bad, g_bad = 1;
    char says[128];
    snprintf(says, sizeof says, "replica %d: shard %d left output 0 NULL; outputs gathered from all shards must be tensors", bad, bad);
    CHECK_ERROR(tpu_shard(g_sys, one_bad, NULL, 0, NULL, 4, NULL, NULL, NULL, 1, &out, NULL),
                TPU_INVALID_ARGUMENT, says);
    assert_null(out);
  }
  g_bad_shard = 2, g_bad = 2;
  CHECK_ERROR(tpu_shard(g_sys, one_bad, NULL, 0, NULL, 4, NULL, NULL, NULL, 1, &out, NULL),
              TPU_INVALID_ARGUMENT,
              "replica 2: shards have mismatched output shapes: shard 0 output 0 is float32[1] but shard 2's is int32[1]");
  assert_null(out);
  /* Not gathered: shard 2's int32 and shard 1's NULL do not matter. */
  const int from_all[1] = {0};
  CHECK_OK(tpu_shard(g_sys, one_bad, NULL, 0, NULL, 4, NULL, from_all, NULL, 1, &out, NULL));
  const int64_t one[1] = {1};
  const float zero[1] = {0};
  expect_tensor(out, one, 1, zero);
  tpu_tensor_release(out);
  g_bad_shard = -1;
  const int axes[1] = {1};
  CHECK_ERROR(tpu_shard(g_sys, one_bad, NULL, 0, NULL, 4, NULL, NULL, axes, 1, &out, NULL),
              TPU_INVALID_ARGUMENT, "replica 0: output 0: output_shard_axes[0] = 1 is out of range");
  CHECK_OK(tpu_shard(g_sys, one_bad, NULL, 0, NULL, 4, NULL, NULL, NULL, 1, &out, NULL));
  const int64_t four[1] = {4};
  const float ids[4] = {0, 1, 2, 3};
  expect_tensor(out, four, 1, ids);
  tpu_tensor_release(out);
}

/* Shards of 2 cores: a shard's output is its logical core 0's. Core 1 of every shard
 * leaves its output NULL (fine); core 0 of shard g_bad_shard too (the step fails). */
static tpu_status core0_only(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                             tpu_tensor **out, int no, void *user) {
  int s = shard_id(ctx), c = -1;
  tpu_replica_context_logical_core(ctx, &c);
  const int64_t d[1] = {1};
  float v = (float)s;
  if (c != 0 || s == g_bad_shard) return TPU_OK;
  return tpu_tensor_create(TPU_FLOAT, d, 1, &v, 4, &out[0]);
}

static void test_shard__output_checks_with_cores_per_replica(void **state) {
  /* Participant r * 2 + c on core r * 2 + c. */
  tpu_topology *topo = NULL;
  tpu_device_assignment *da = NULL;
  CHECK_OK(tpu_system_topology(g_sys, &topo));
  int32_t coords[4 * TPU_MESH_RANK];
  for (int p = 0; p < 4; ++p)
    CHECK_OK(tpu_topology_device_coordinates(topo, 0, p, &coords[p * TPU_MESH_RANK], TPU_MESH_RANK, &(size_t){0}));
  CHECK_OK(tpu_device_assignment_create(topo, coords, 2, 2, &da));
  tpu_tensor *out = NULL;
  g_bad_shard = -1;
  CHECK_OK(tpu_shard(g_sys, core0_only, NULL, 0, NULL, 2, NULL, NULL, NULL, 1, &out, STEP_OPTIONS(da, NULL, 0)));
  const int64_t two[1] = {2};
  const float ids[2] = {0, 1};
  expect_tensor(out, two, 1, ids);
  tpu_tensor_release(out);
  g_bad_shard = 1;
  CHECK_ERROR(tpu_shard(g_sys, core0_only, NULL, 0, NULL, 2, NULL, NULL, NULL, 1, &out, STEP_OPTIONS(da, NULL, 0)),
              TPU_INVALID_ARGUMENT, "replica 1 core 0: shard 1 left output 0 NULL");
  assert_null(out);
  g_bad_shard = -1;
  tpu_device_assignment_release(da);
  tpu_topology_release(topo);
}

/* Each shard looks up row `shard` of an SGD table, sends gradients of ones and returns
 * its activation; shard g_bad_shard returns NULL instead. */
static tpu_status emb_shard(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                            tpu_tensor **out, int no, void *user) {
  int s = shard_id(ctx);
  int64_t id = s, sample = 0;
  tpu_embedding_feature_batch fb;
  memset(&fb, 0, sizeof fb);
  fb.feature = 0;
  fb.ids = &id;
  fb.num_ids = 1;
  fb.sample_indices = &sample;
  tpu_tensor *act = NULL, *grad = NULL;
  tpu_status st = tpu_embedding_enqueue(ctx, &fb, 1);
  if (st == TPU_OK) st = tpu_embedding_recv_activations(ctx, &act, 1);
  if (st != TPU_OK) return st;
  int64_t dims[4];
  size_t rank = 0, bytes = 0;
  tpu_tensor_dims(act, dims, 4, &rank);
  tpu_tensor_byte_size(act, &bytes);
  float ones[16];
  for (int i = 0; i < 16; ++i) ones[i] = 1;
  st = tpu_tensor_create(TPU_FLOAT, dims, (int)rank, ones, bytes, &grad);
  if (st == TPU_OK) st = tpu_embedding_send_gradients(ctx, &grad, 1, NULL, 0);
  tpu_tensor_release(grad);
  if (st == TPU_OK && s != g_bad_shard) out[0] = act;
  else tpu_tensor_release(act);
  return st;
}

/* A shard's NULL output fails the step before the embedding engine keeps its updates:
 * no row changes; without it the same step updates them. */
static void test_shard__failed_output_check_changes_no_embedding_row(void **state) {
  static const char json[] =
      "{\"mode\": \"TRAINING\", \"table_descriptor\": [{\"name\": \"t\", \"vocabulary_size\": 4,"
      " \"dimension\": 2, \"optimization_parameters\": {\"learning_rate\": {\"constant\": 0.5},"
      " \"stochastic_gradient_descent\": {}}}],"
      " \"feature_descriptor\": [{\"name\": \"f\", \"table_id\": 0, \"input_shape\": [1]}]}";
  static char cfg[4096];
  size_t len = 0;
  CHECK_OK(tpu_embedding_config_from_json(json, cfg, sizeof cfg, &len));
  tpu_system_release(g_sys);
  g_sys = NULL;
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = 4;
  o.close_on_failure = 0;
  o.embedding_config = cfg;
  o.embedding_config_len = len;
  CHECK_OK(tpu_system_init(&o, &g_sys));
  const float rows[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  float got[8];
  size_t count = 0;
  CHECK_OK(tpu_embedding_load(g_sys, 0, 0, 0, 4, rows, 8));
  tpu_tensor *out = NULL;
  g_bad_shard = 1;
  CHECK_ERROR(tpu_shard(g_sys, emb_shard, NULL, 0, NULL, 4, NULL, NULL, NULL, 1, &out, NULL),
              TPU_INVALID_ARGUMENT, "shard 1 left output 0 NULL");
  assert_null(out);
  CHECK_OK(tpu_embedding_retrieve(g_sys, 0, 0, 0, 4, got, 8, &count));
  for (int i = 0; i < 8; ++i)
    if (got[i] != rows[i]) fail_msg("row %d [%d] is %g, was %g: the failed step changed it", i / 2, i % 2, got[i], rows[i]);
  CHECK_ERROR(tpu_shard(g_sys, emb_shard, NULL, 0, NULL, 4, NULL, NULL, NULL, 1, &out, NULL),
              TPU_INVALID_ARGUMENT, "replica 1: shard 1 left output 0 NULL");
  g_bad_shard = -1;
  CHECK_OK(tpu_shard(g_sys, emb_shard, NULL, 0, NULL, 4, NULL, NULL, NULL, 1, &out, NULL));
  const int64_t dims[2] = {4, 2};
  expect_tensor(out, dims, 2, rows); /* the activations: the rows before the update */
  tpu_tensor_release(out);
  CHECK_OK(tpu_embedding_retrieve(g_sys, 0, 0, 0, 4, got, 8, &count));
  for (int i = 0; i < 8; ++i)
    if (got[i] != rows[i] - 0.5f) fail_msg("row %d [%d] is %g, want %g", i / 2, i % 2, got[i], rows[i] - 0.5f);
  /* The other cases' system. */
  tpu_system_release(g_sys);
  g_sys = NULL;
  setup(NULL);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shard__split_concat_and_stack),
      cmocka_unit_test(test_shard__batch_parallel),
      cmocka_unit_test(test_shard__scalar_outputs_are_stacked),
      cmocka_unit_test(test_shard__input_errors),
      cmocka_unit_test(test_shard__output_errors),
      cmocka_unit_test(test_shard__output_checks_fail_the_step),
      cmocka_unit_test(test_shard__output_checks_with_cores_per_replica),
      cmocka_unit_test(test_shard__failed_output_check_changes_no_embedding_row),
  };
  return RUN_TESTS(argc, argv, tests, setup, teardown);
}
