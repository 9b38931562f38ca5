/* Infeed and outfeed: round trips (also with replicas on other cores), tuple checks,
 * creation checks, bounded waits, a step abort waking a blocked dequeue, and queues
 * after shutdown. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include <tpurt.h>

#include "test_util.h"

static tpu_system *g_sys;
static tpu_infeed_queue *g_in;
static tpu_outfeed_queue *g_out;

static int teardown(void **state) {
  (void)state;
  tpu_infeed_queue_release(g_in);
  tpu_outfeed_queue_release(g_out);
  tpu_system_release(g_sys);
  g_in = NULL;
  g_out = NULL;
  g_sys = NULL;
  return 0;
}

static void start(int cores, int64_t timeout_ms) {
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = cores;
  o.collective_timeout_ms = timeout_ms;
  o.close_on_failure = 0;
  tpu_status st = tpu_system_init(&o, &g_sys);
  if (st != TPU_OK) fail_msg("tpu_system_init: %s", tpu_last_error());
}

/* Tuples of (float32[2,3], int32 scalar). */
static const tpu_dtype kTypes[2] = {TPU_FLOAT, TPU_INT32};
static tpu_shape kShapes[2] = {{2, {2, 3}}, {0, {0}}};

static void make_tuple(float base, int32_t tag, tpu_tensor **t) {
  float v[6];
  for (int i = 0; i < 6; ++i) v[i] = base + (float)i;
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, kShapes[0].dims, 2, v, sizeof v, &t[0]));
  CHECK_OK(tpu_tensor_create(TPU_INT32, NULL, 0, &tag, sizeof tag, &t[1]));
}

static void release_tuple(tpu_tensor **t) {
  tpu_tensor_release(t[0]);
  tpu_tensor_release(t[1]);
}

static int replica_id(tpu_replica_context *ctx) {
  int r = -1;
  tpu_replica_context_replica_id(ctx, &r);
  return r;
}

/* Dequeues two tuples and sends back (sum of floats, tag * 10 + replica) per tuple. */
static tpu_status echo(tpu_replica_context *ctx, tpu_tensor *const *in, int ni, tpu_tensor **out,
                       int no, void *user) {
  for (int k = 0; k < 2; ++k) {
    tpu_tensor *t[2] = {NULL, NULL};
    tpu_status st = tpu_infeed_dequeue(ctx, g_in, t, 2);
    if (st != TPU_OK) return st;
    const void *f, *g;
    tpu_tensor_data(t[0], &f);
    tpu_tensor_data(t[1], &g);
    float sum = 0;
    for (int i = 0; i < 6; ++i) sum += ((const float *)f)[i];
    int32_t tag = *(const int32_t *)g * 10 + replica_id(ctx);
    release_tuple(t);
    float fs[6] = {sum};
    tpu_tensor *reply[2];
    tpu_tensor_create(TPU_FLOAT, kShapes[0].dims, 2, fs, sizeof fs, &reply[0]);
    tpu_tensor_create(TPU_INT32, NULL, 0, &tag, sizeof tag, &reply[1]);
    st = tpu_outfeed_enqueue(ctx, g_out, reply, 2);
    release_tuple(reply);
    if (st != TPU_OK) return st;
  }
  return TPU_OK;
}

/* Two tuples in and out for each of 2 replicas, run with `options`. */
static void round_trip(const tpu_step_options *options) {
  CHECK_OK(tpu_infeed_queue_create(g_sys, 2, 2, kTypes, kShapes, 0, &g_in));
  CHECK_OK(tpu_outfeed_queue_create(g_sys, 2, 2, kTypes, kShapes, 4, &g_out));
  for (int k = 0; k < 2; ++k)
    for (int r = 0; r < 2; ++r) {
      tpu_tensor *t[2];
      make_tuple((float)(10 * r + k), r * 2 + k, t);
      CHECK_OK(tpu_infeed_enqueue(g_in, r, t, 2));
      release_tuple(t); /* the queue holds its own references */
    }
  CHECK_OK(tpu_replicate(g_sys, echo, NULL, 2, 0, NULL, 0, NULL, options));
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 2; ++k) { /* FIFO order per replica */
      tpu_tensor *t[2];
      CHECK_OK(tpu_outfeed_dequeue(g_out, r, t, 2));
      const void *f, *g;
      tpu_tensor_data(t[0], &f);
      tpu_tensor_data(t[1], &g);
      assert_true(((const float *)f)[0] == 6 * (float)(10 * r + k) + 15);
      assert_int_equal(*(const int32_t *)g, (r * 2 + k) * 10 + r);
      release_tuple(t);
    }
  /* Released with tuples still queued: no leak (checked under ASan). */
  tpu_tensor *t[2];
  make_tuple(0, 0, t);
  CHECK_OK(tpu_infeed_enqueue(g_in, 1, t, 2));
  release_tuple(t);
}

static void test_feed__round_trip(void **state) {
  start(2, 0);
  round_trip(NULL);
}

/* One task serves all its replicas, whichever of its cores a device assignment runs
 * them on (the queue's task check concerns tasks only). */
static void test_feed__replicas_on_other_cores(void **state) {
  start(2, 0);
  tpu_device_assignment *da = NULL, *swapped = NULL;
  tpu_topology *topology = NULL;
  int32_t cores[8], other[8];
  size_t count = 0;
  CHECK_OK(tpu_system_default_device_assignment(g_sys, 2, &da));
  CHECK_OK(tpu_device_assignment_core_assignment(da, cores, 8, &count));
  memcpy(other, cores + 4, sizeof cores / 2);
  memcpy(other + 4, cores, sizeof cores / 2);
  CHECK_OK(tpu_device_assignment_topology(da, &topology));
  CHECK_OK(tpu_device_assignment_create(topology, other, 2, 1, &swapped));
  round_trip(STEP_OPTIONS(swapped, NULL, 0));
  int core = -1;
  CHECK_OK(tpu_device_assignment_tpu_ordinal(swapped, 0, 0, &core));
  assert_int_equal(core, 1);
  tpu_device_assignment_release(swapped);
  tpu_device_assignment_release(da);
  tpu_topology_release(topology);
}

static void test_feed__tuple_checks(void **state) {
  start(2, 200);
  CHECK_OK(tpu_infeed_queue_create(g_sys, 1, 2, kTypes, kShapes, 1, &g_in));
  tpu_tensor *t[2], *bad;
  make_tuple(1, 7, t);
  int64_t dims[2] = {2, 3};
  CHECK_OK(tpu_tensor_create(TPU_INT32, dims, 2, NULL, 0, &bad));
  tpu_tensor *wrong_type[2] = {bad, t[1]};
  CHECK_ERROR(tpu_infeed_enqueue(g_in, 0, wrong_type, 2), TPU_INVALID_ARGUMENT,
               "infeed tuple element 0: expected float32[2,3], got int32[2,3]");
  tpu_tensor *wrong_shape[2] = {t[0], t[0]}; /* element 1 wrong, element 0 fine */
  CHECK_ERROR(tpu_infeed_enqueue(g_in, 0, wrong_shape, 2), TPU_INVALID_ARGUMENT,
               "infeed tuple element 1: expected int32[], got float32[2,3]");
  CHECK_ERROR(tpu_infeed_enqueue(g_in, 0, t, 1), TPU_INVALID_ARGUMENT,
               "infeed tuple has 1 elements but the queue's tuples have 2");
  CHECK_ERROR(tpu_infeed_enqueue(g_in, 1, t, 2), TPU_INVALID_ARGUMENT, "replica 1 is out of range");
  tpu_tensor *with_null[2] = {t[0], NULL};
  CHECK_ERROR(tpu_infeed_enqueue(g_in, 0, with_null, 2), TPU_INVALID_ARGUMENT,
               "infeed tuple element 1 is NULL");
  /* Nothing was enqueued by the rejected calls: the one slot is still free. */
  CHECK_OK(tpu_infeed_enqueue(g_in, 0, t, 2));
  double t0 = now();
  CHECK_ERROR(tpu_infeed_enqueue(g_in, 0, t, 2), TPU_DEADLINE_EXCEEDED, "stayed full");
  double waited = now() - t0;
  assert_true(waited >= 0.19 && waited < time_limit(3.0));
  release_tuple(t);
  tpu_tensor_release(bad);
}

static void test_feed__creation_checks(void **state) {
  start(2, 0);
  tpu_dtype types[2] = {TPU_FLOAT, TPU_INT8};
  CHECK_ERROR(tpu_infeed_queue_create(g_sys, 2, 2, types, kShapes, 0, &g_in), TPU_INVALID_ARGUMENT,
               "element 1: int8 (6) is not a supported TPU infeed type");
  types[1] = TPU_UINT32;
  tpu_shape shapes[2] = {{1, {-1}}, {0, {0}}};
  CHECK_ERROR(tpu_outfeed_queue_create(g_sys, 2, 2, types, shapes, 0, &g_out),
               TPU_INVALID_ARGUMENT, "element 0: dimension 0 is -1");
  shapes[0].rank = TPU_MAX_RANK + 1;
  CHECK_ERROR(tpu_infeed_queue_create(g_sys, 2, 2, types, shapes, 0, &g_in), TPU_INVALID_ARGUMENT,
               "rank 17");
  CHECK_ERROR(tpu_infeed_queue_create(g_sys, 2, 2, kTypes, kShapes, -1, &g_in),
               TPU_INVALID_ARGUMENT, "capacity");
  CHECK_ERROR(tpu_infeed_queue_create(g_sys, 3, 2, kTypes, kShapes, 0, &g_in),
               TPU_INVALID_ARGUMENT, "num_replicas is 3");
  CHECK_ERROR(tpu_infeed_queue_create(g_sys, 2, 0, kTypes, kShapes, 0, &g_in),
               TPU_INVALID_ARGUMENT, "num_elements");
  assert_null(g_in);
  assert_null(g_out);
}

static atomic_int g_dequeue_status;

static tpu_status dequeue_one(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                              tpu_tensor **out, int no, void *user) {
  int failing = *(int *)user;
  if (replica_id(ctx) == failing) {
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    return tpu_replica_context_fail(ctx, TPU_DATA_LOSS, "bad batch");
  }
  tpu_tensor *t[2] = {NULL, NULL};
  tpu_status st = tpu_infeed_dequeue(ctx, g_in, t, 2);
  atomic_store(&g_dequeue_status, (int)st);
  release_tuple(t);
  return st;
}

static void test_feed__deadlines(void **state) {
  start(2, 200);
  CHECK_OK(tpu_infeed_queue_create(g_sys, 2, 2, kTypes, kShapes, 0, &g_in));
  CHECK_OK(tpu_outfeed_queue_create(g_sys, 2, 2, kTypes, kShapes, 0, &g_out));
  tpu_tensor *t[2];
  double t0 = now();
  CHECK_ERROR(tpu_outfeed_dequeue(g_out, 1, t, 2), TPU_DEADLINE_EXCEEDED,
               "outfeed dequeue for replica 1 timed out after 200 ms");
  assert_true(now() - t0 >= 0.19);
  int nobody = -1;
  CHECK_ERROR(tpu_replicate(g_sys, dequeue_one, &nobody, 2, 0, NULL, 0, NULL, NULL),
               TPU_DEADLINE_EXCEEDED, "infeed dequeue for replica");
}

/* A FIFO holds at most `capacity` tuples: a full one blocks the enqueue until the
 * system's deadline, and nothing is added. */
static void test_feed__full_fifo_blocks_until_the_deadline(void **state) {
  start(2, 200);
  CHECK_OK(tpu_infeed_queue_create(g_sys, 2, 2, kTypes, kShapes, 1, &g_in));
  tpu_tensor *t[2];
  make_tuple(0, 0, t);
  CHECK_OK(tpu_infeed_enqueue(g_in, 0, t, 2));
  double t0 = now();
  CHECK_ERROR(tpu_infeed_enqueue(g_in, 0, t, 2), TPU_DEADLINE_EXCEEDED, "infeed");
  assert_true(now() - t0 >= 0.19);
  CHECK_OK(tpu_infeed_enqueue(g_in, 1, t, 2)); /* another replica's FIFO is not full */
  release_tuple(t);
}

static void test_feed__abort_wakes_dequeue(void **state) {
  start(2, time_limit_ms(10000)); /* far beyond the test: only the abort can end the wait */
  CHECK_OK(tpu_infeed_queue_create(g_sys, 2, 2, kTypes, kShapes, 0, &g_in));
  int failing = 1;
  double t0 = now();
  CHECK_ERROR(tpu_replicate(g_sys, dequeue_one, &failing, 2, 0, NULL, 0, NULL, NULL),
               TPU_DATA_LOSS, "replica 1: bad batch");
  assert_true(now() - t0 < time_limit(2.0));
  assert_int_equal(g_dequeue_status, TPU_ABORTED);
}

static void test_feed__after_shutdown(void **state) {
  start(2, 0);
  CHECK_OK(tpu_infeed_queue_create(g_sys, 2, 2, kTypes, kShapes, 0, &g_in));
  CHECK_OK(tpu_outfeed_queue_create(g_sys, 2, 2, kTypes, kShapes, 0, &g_out));
  CHECK_OK(tpu_system_shutdown(g_sys));
  tpu_tensor *t[2];
  make_tuple(0, 0, t);
  CHECK_ERROR(tpu_infeed_enqueue(g_in, 0, t, 2), TPU_FAILED_PRECONDITION, "shut down");
  release_tuple(t);
  CHECK_ERROR(tpu_outfeed_dequeue(g_out, 0, t, 2), TPU_FAILED_PRECONDITION, "shut down");
  tpu_infeed_queue *q = NULL;
  CHECK_ERROR(tpu_infeed_queue_create(g_sys, 2, 2, kTypes, kShapes, 0, &q),
               TPU_FAILED_PRECONDITION, "shut down");
}

/* ---- several cores per replica (issue 29, 3.2) ----------------------------------
 * TensorFlow: tpu_sharding.py's ShardingPolicy.get_sharded_shape cuts element e of a
 * tuple number_of_shards equal ways along its shard dimension (default 0,
 * _DEFAULT_SHARD_DIMENSION), failing with "cannot be sharded N ways along dimension d"
 * or "does not contain shard_dimension d"; tpu_feed.py's InfeedQueue.set_shard_dimensions
 * sets the dimension per element, and _PartitionedInfeedQueue feeds logical core c of a
 * replica its piece c (partition_or_replicate_on_host), or the whole element to every
 * core when its dims are None (tpurt: shard dimension -1). */

/* A step that feeds g_in to its replicas, as TensorFlow's infeed_queue argument. */
#define FEED_OPTIONS(da)                                                                    \
  (&(tpu_step_options){.struct_size = sizeof(tpu_step_options), .device_assignment = (da), \
                       .infeed_queue = g_in})

/* R replicas of k cores, participant r * k + c on device r * k + c of task 0. */
static tpu_device_assignment *cores_per_replica(int R, int k) {
  tpu_topology *topo = NULL;
  CHECK_OK(tpu_system_topology(g_sys, &topo));
  int32_t coords[8][4];
  for (int p = 0; p < R * k; ++p)
    CHECK_OK(tpu_topology_device_coordinates(topo, 0, p, coords[p], 4, &(size_t){0}));
  tpu_device_assignment *da = NULL;
  CHECK_OK(tpu_device_assignment_create(topo, &coords[0][0], R, k, &da));
  tpu_topology_release(topo);
  return da;
}

/* What each participant (replica * 2 + logical core) found in its three elements. */
static struct {
  int64_t dims[3][2];
  size_t rank[3];
  float a[4], c[4];
  int32_t b[3];
  atomic_int runs;
} g_seen[4];

static tpu_status record_pieces(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                tpu_tensor **out, int no, void *user) {
  int r = -1, c = -1;
  tpu_replica_context_replica_id(ctx, &r);
  tpu_replica_context_logical_core(ctx, &c);
  if (ni != 3 || r < 0 || r > 1 || c < 0 || c > 1) return TPU_INTERNAL;
  const int p = r * 2 + c;
  for (int e = 0; e < 3; ++e)
    if (tpu_tensor_dims(in[e], g_seen[p].dims[e], 2, &g_seen[p].rank[e]) != TPU_OK) return TPU_INTERNAL;
  const void *d;
  tpu_tensor_data(in[0], &d);
  memcpy(g_seen[p].a, d, sizeof g_seen[p].a);
  tpu_tensor_data(in[1], &d);
  memcpy(g_seen[p].b, d, sizeof g_seen[p].b);
  tpu_tensor_data(in[2], &d);
  memcpy(g_seen[p].c, d, sizeof g_seen[p].c);
  atomic_fetch_add(&g_seen[p].runs, 1);
  return TPU_OK;
}

/* Elements float32[4,2] (dimension 0), int32[3] (-1: whole), float32[2,4]
 * (dimension 1), over 2 replicas of 2 cores: core c gets rows 2c, 2c+1 of the first,
 * the whole second, and columns 2c, 2c+1 of the third. */
static void test_feed__cores_of_a_replica_split_the_tuple(void **state) {
  start(4, 0);
  memset(g_seen, 0, sizeof g_seen);
  const tpu_dtype types[3] = {TPU_FLOAT, TPU_INT32, TPU_FLOAT};
  const tpu_shape shapes[3] = {{2, {4, 2}}, {1, {3}}, {2, {2, 4}}};
  CHECK_OK(tpu_infeed_queue_create(g_sys, 2, 3, types, shapes, 0, &g_in));
  const int dims[3] = {0, -1, 1};
  CHECK_OK(tpu_infeed_queue_set_shard_dimensions(g_in, dims, 3));
  for (int r = 0; r < 2; ++r) {
    float v[8];
    for (int i = 0; i < 8; ++i) v[i] = (float)(100 * r + i);
    int32_t b[3] = {r, 10 + r, 20 + r};
    tpu_tensor *t[3];
    CHECK_OK(tpu_tensor_create(TPU_FLOAT, shapes[0].dims, 2, v, sizeof v, &t[0]));
    CHECK_OK(tpu_tensor_create(TPU_INT32, shapes[1].dims, 1, b, sizeof b, &t[1]));
    CHECK_OK(tpu_tensor_create(TPU_FLOAT, shapes[2].dims, 2, v, sizeof v, &t[2]));
    CHECK_OK(tpu_infeed_enqueue(g_in, r, t, 3));
    for (int e = 0; e < 3; ++e) tpu_tensor_release(t[e]);
  }
  tpu_device_assignment *da = cores_per_replica(2, 2);
  CHECK_OK(tpu_replicate(g_sys, record_pieces, NULL, 2, 0, NULL, 0, NULL, FEED_OPTIONS(da)));
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 2; ++c) {
      const int p = r * 2 + c;
      assert_int_equal(atomic_load(&g_seen[p].runs), 1);
      assert_int_equal(g_seen[p].rank[0], 2);
      assert_int_equal(g_seen[p].dims[0][0], 2);
      assert_int_equal(g_seen[p].dims[0][1], 2);
      assert_int_equal(g_seen[p].rank[1], 1);
      assert_int_equal(g_seen[p].dims[1][0], 3);
      assert_int_equal(g_seen[p].rank[2], 2);
      assert_int_equal(g_seen[p].dims[2][0], 2);
      assert_int_equal(g_seen[p].dims[2][1], 2);
      for (int i = 0; i < 4; ++i) /* rows 2c, 2c+1 of [4,2]: elements 4c .. 4c+3 */
        assert_true(g_seen[p].a[i] == (float)(100 * r + 4 * c + i));
      for (int i = 0; i < 3; ++i) assert_int_equal(g_seen[p].b[i], 10 * i + r);
      for (int row = 0; row < 2; ++row) /* columns 2c, 2c+1 of [2,4] */
        for (int col = 0; col < 2; ++col)
          assert_true(g_seen[p].c[row * 2 + col] == (float)(100 * r + row * 4 + 2 * c + col));
    }
  tpu_device_assignment_release(da);
}

/* With (float32[2,3] along 0, int32 scalar whole) over 2 cores: [1,3] and [] on every core. */
static tpu_status check_piece_shapes(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                     tpu_tensor **out, int no, void *user) {
  int64_t d[2];
  size_t rank = 0;
  if (ni != 2) return TPU_INTERNAL;
  if (tpu_tensor_dims(in[0], d, 2, &rank) != TPU_OK || rank != 2 || d[0] != 1 || d[1] != 3)
    return TPU_INTERNAL;
  if (tpu_tensor_dims(in[1], d, 2, &rank) != TPU_OK || rank != 0) return TPU_INTERNAL;
  return TPU_OK;
}

/* TensorFlow's sharding checks, before the step runs (nothing dequeued), and
 * set_shard_dimensions' own. */
static void test_feed__shard_dimension_checks(void **state) {
  start(4, 500);
  CHECK_OK(tpu_infeed_queue_create(g_sys, 2, 2, kTypes, kShapes, 0, &g_in)); /* [2,3], [] */
  const int bad_range[2] = {0, -2};
  CHECK_ERROR(tpu_infeed_queue_set_shard_dimensions(g_in, bad_range, 2), TPU_INVALID_ARGUMENT,
              "infeed tuple element 1: shard dimension -2 is outside [-1, ");
  const int dims[2] = {0, -1};
  CHECK_ERROR(tpu_infeed_queue_set_shard_dimensions(g_in, dims, 1), TPU_INVALID_ARGUMENT,
              "shard_dimensions has 1 entries, but must have one per tuple element (2)");
  CHECK_ERROR(tpu_infeed_queue_set_shard_dimensions(g_in, NULL, 2), TPU_INVALID_ARGUMENT,
              "shard_dimensions");
  tpu_tensor *t[2];
  make_tuple(1, 7, t);
  for (int r = 0; r < 2; ++r) CHECK_OK(tpu_infeed_enqueue(g_in, r, t, 2));
  release_tuple(t);
  tpu_device_assignment *da = cores_per_replica(2, 2);
  /* The default (dimension 0 for every element): the int32 scalar has no dimension 0. */
  CHECK_ERROR(tpu_replicate(g_sys, record_pieces, NULL, 2, 0, NULL, 0, NULL, FEED_OPTIONS(da)),
              TPU_INVALID_ARGUMENT, "infeed tuple element 1: shape [] does not contain shard dimension 0");
  /* [2,3] along dimension 1: 3 is not a multiple of 2. */
  const int odd[2] = {1, -1};
  CHECK_OK(tpu_infeed_queue_set_shard_dimensions(g_in, odd, 2));
  CHECK_ERROR(tpu_replicate(g_sys, record_pieces, NULL, 2, 0, NULL, 0, NULL, FEED_OPTIONS(da)),
              TPU_INVALID_ARGUMENT, "infeed tuple element 0: shape [2,3] cannot be sharded 2 ways along dimension 1");
  /* Nothing was dequeued: with dimension 0 the step runs and takes the tuples. */
  CHECK_OK(tpu_infeed_queue_set_shard_dimensions(g_in, dims, 2));
  CHECK_OK(tpu_replicate(g_sys, check_piece_shapes, NULL, 2, 0, NULL, 0, NULL, FEED_OPTIONS(da)));
  tpu_device_assignment_release(da);
}

/* An empty FIFO with 2 cores per replica: logical core 0's dequeue times out after the
 * step's deadline and the step fails as one with that error (the other cores, waiting
 * for the tuple with a longer bound, are woken by it), as with one core per replica. */
static void test_feed__cores_of_a_replica_empty_fifo_fails_the_step(void **state) {
  start(4, 0);
  CHECK_OK(tpu_infeed_queue_create(g_sys, 2, 2, kTypes, kShapes, 0, &g_in));
  const int dims[2] = {0, -1};
  CHECK_OK(tpu_infeed_queue_set_shard_dimensions(g_in, dims, 2));
  tpu_device_assignment *da = cores_per_replica(2, 2);
  tpu_step_options o = *FEED_OPTIONS(da);
  o.collective_timeout_ms = 200;
  double t0 = now();
  CHECK_ERROR(tpu_replicate(g_sys, check_piece_shapes, NULL, 2, 0, NULL, 0, NULL, &o), TPU_DEADLINE_EXCEEDED,
              "core 0: infeed dequeue for replica ");
  assert_non_null(strstr(tpu_last_error(), "stayed empty"));
  assert_true(now() - t0 < time_limit(3.0));
  /* The system runs the next step: a tuple for each replica. */
  tpu_tensor *t[2];
  make_tuple(1, 7, t);
  for (int r = 0; r < 2; ++r) CHECK_OK(tpu_infeed_enqueue(g_in, r, t, 2));
  release_tuple(t);
  CHECK_OK(tpu_replicate(g_sys, check_piece_shapes, NULL, 2, 0, NULL, 0, NULL, FEED_OPTIONS(da)));
  tpu_device_assignment_release(da);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_feed__round_trip, teardown),
      cmocka_unit_test_teardown(test_feed__replicas_on_other_cores, teardown),
      cmocka_unit_test_teardown(test_feed__tuple_checks, teardown),
      cmocka_unit_test_teardown(test_feed__creation_checks, teardown),
      cmocka_unit_test_teardown(test_feed__deadlines, teardown),
      cmocka_unit_test_teardown(test_feed__full_fifo_blocks_until_the_deadline, teardown),
      cmocka_unit_test_teardown(test_feed__abort_wakes_dequeue, teardown),
      cmocka_unit_test_teardown(test_feed__after_shutdown, teardown),
      cmocka_unit_test_teardown(test_feed__cores_of_a_replica_split_the_tuple, teardown),
      cmocka_unit_test_teardown(test_feed__shard_dimension_checks, teardown),
      cmocka_unit_test_teardown(test_feed__cores_of_a_replica_empty_fifo_fails_the_step, teardown),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
