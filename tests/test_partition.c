/* Spatial partitioning of a replica's inputs and outputs over its cores
 * (tpu_partition_spec; tpu_step_options.input_partitions / output_partitions), against
 * TensorFlow's rules:
 * - TPUEstimator's host-side split, tensorflow/python/tpu/tpu_feed.py:
 *   partition_or_replicate_on_host (greedy ceil pieces for sizes that do not divide),
 *   _PartitionedInfeedQueue.generate_enqueue_ops (tiles fed to logical cores in
 *   row-major order of the grid) and _check_input_partition_dims (dims >= 1, their
 *   product the cores per replica, one per dimension of the tensor);
 * - TPUPartitionedInputV2 / TPUPartitionedOutputV2's partition_dims,
 *   tensorflow/core/tpu/ops/tpu_partitioned_{input,output}_op.cc.
 * Tiles are checked against a naive reference that follows tpu_feed.py's algorithm
 * literally (split the list of pieces along each axis in turn, then flatten). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tpurt.h>

#include "test_util.h"

#define MAX_PARTICIPANTS 8
#define MAX_INPUTS 4

TEST_SYSTEM_FIXTURE

static void start(int cores) {
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = cores;
  o.collective_timeout_ms = time_limit_ms(20000);
  CHECK_OK(tpu_system_init(&o, &g_sys));
}

/* Participant r * k + c on system core r * k + c. */
static tpu_device_assignment *assignment(int replicas, int k) {
  tpu_topology *topo = NULL;
  CHECK_OK(tpu_system_topology(g_sys, &topo));
  int32_t coords[MAX_PARTICIPANTS * TPU_MESH_RANK];
  for (int p = 0; p < replicas * k; ++p) {
    size_t n = 0;
    CHECK_OK(tpu_topology_device_coordinates(topo, 0, p, &coords[p * TPU_MESH_RANK],
                                             TPU_MESH_RANK, &n));
  }
  tpu_device_assignment *da = NULL;
  CHECK_OK(tpu_device_assignment_create(topo, coords, replicas, k, &da));
  tpu_topology_release(topo);
  return da;
}

static tpu_partition_spec spec_of(int num_dims, const int *dims) {
  tpu_partition_spec s;
  memset(&s, 0, sizeof s);
  s.num_dims = num_dims;
  for (int d = 0; d < num_dims; ++d) s.partition_dims[d] = dims[d];
  return s;
}

static int64_t num_elements(const int64_t *dims, int rank) {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= dims[d];
  return n;
}

/* A float tensor whose element i is base + i. */
static tpu_tensor *iota(const int64_t *dims, int rank, float base) {
  const int64_t n = num_elements(dims, rank);
  float *v = malloc((size_t)(n ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; ++i) v[i] = base + (float)i;
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, rank, v, (size_t)n * sizeof(float), &t));
  free(v);
  return t;
}

static const float *floats_of(const tpu_tensor *t) {
  const void *p = NULL;
  CHECK_OK(tpu_tensor_data(t, &p));
  return p;
}

/* ---- The naive reference: tpu_feed.py's partition_or_replicate_on_host ---------- */

/* The piece sizes of a dimension of size n cut p ways, computed as tpu_feed.py does:
 * np.divmod(n, p); if the remainder is 0, p pieces of the quotient; otherwise
 * ceil_ratio = quotient + 1, [ceil_ratio] * (n // ceil_ratio) + [n % ceil_ratio], then
 * zeros up to p pieces. */
static void tf_piece_sizes(int64_t n, int p, int64_t *sizes) {
  const int64_t quotient = n / p, remainder = n % p;
  if (remainder == 0) {
    for (int i = 0; i < p; ++i) sizes[i] = quotient;
    return;
  }
  const int64_t ceil_ratio = quotient + 1;
  int i = 0;
  for (int64_t full = n / ceil_ratio; i < full; ++i) sizes[i] = ceil_ratio;
  sizes[i++] = n % ceil_ratio;
  for (; i < p; ++i) sizes[i] = 0;
}

typedef struct {
  int64_t start[TPU_MAX_RANK], size[TPU_MAX_RANK];
} box;

/* The tiles in tpu_feed.py's order: start from [tensor]; for each axis cut every piece
 * of the list along it, and flatten (nest.flatten), so the last axis varies fastest. */
static int tf_tiles(const int64_t *dims, int rank, const int *pd, box *out) {
  int n = 1;
  memset(&out[0], 0, sizeof out[0]);
  for (int d = 0; d < rank; ++d) out[0].size[d] = dims[d];
  for (int axis = 0; axis < rank; ++axis) {
    if (pd[axis] <= 1) continue;
    int64_t sizes[MAX_PARTICIPANTS];
    tf_piece_sizes(dims[axis], pd[axis], sizes);
    box next[MAX_PARTICIPANTS];
    int m = 0;
    for (int i = 0; i < n; ++i) {
      int64_t at = out[i].start[axis];
      for (int j = 0; j < pd[axis]; ++j) {
        next[m] = out[i];
        next[m].start[axis] = at;
        next[m].size[axis] = sizes[j];
        at += sizes[j];
        ++m;
      }
    }
    n = m;
    memcpy(out, next, sizeof(box) * (size_t)n);
  }
  return n;
}

/* Whether tile t is box b of the row-major float tensor of shape dims (element i of it
 * is base + i), element by element. */
static void check_tile(const tpu_tensor *t, const int64_t *dims, int rank, const box *b,
                       float base, const char *what, int core) {
  int r = -1;
  CHECK_OK(tpu_tensor_rank(t, &r));
  if (r != rank) {
    CHECK_FAIL("%s core %d: rank %d, expected %d", what, core, r, rank);
    return;
  }
  int64_t got[TPU_MAX_RANK];
  size_t count = 0;
  CHECK_OK(tpu_tensor_dims(t, got, TPU_MAX_RANK, &count));
  for (int d = 0; d < rank; ++d)
    if (got[d] != b->size[d]) {
      CHECK_FAIL("%s core %d: dimension %d is %lld, expected %lld", what, core, d,
                 (long long)got[d], (long long)b->size[d]);
      return;
    }
  const int64_t n = num_elements(b->size, rank);
  const float *v = floats_of(t);
  int64_t idx[TPU_MAX_RANK] = {0};
  for (int64_t e = 0; e < n; ++e) {
    int64_t src = 0;
    for (int d = 0; d < rank; ++d) src = src * dims[d] + b->start[d] + idx[d];
    if (v[e] != base + (float)src) {
      CHECK_FAIL("%s core %d: element %lld is %g, expected %g", what, core, (long long)e,
                 (double)v[e], (double)(base + (float)src));
      return;
    }
    for (int d = rank - 1; d >= 0 && ++idx[d] == b->size[d]; --d) idx[d] = 0;
  }
}

/* ---- A computation that records what each participant got, and echoes it -------- */

typedef struct {
  tpu_tensor *seen[MAX_PARTICIPANTS][MAX_INPUTS]; /* retained */
  int num_seen[MAX_PARTICIPANTS];
  atomic_int runs;
} record;

static int participant(tpu_replica_context *ctx, int *replica, int *core) {
  int k = 0;
  CHECK_OK(tpu_replica_context_replica_id(ctx, replica));
  CHECK_OK(tpu_replica_context_logical_core(ctx, core));
  CHECK_OK(tpu_replica_context_num_cores_per_replica(ctx, &k));
  return *replica * k + *core;
}

/* Records its inputs; output o is input o. */
static tpu_status echo(tpu_replica_context *ctx, tpu_tensor *const *inputs, int num_inputs,
                       tpu_tensor **outputs, int num_outputs, void *user_data) {
  record *rec = user_data;
  int r, c;
  const int p = participant(ctx, &r, &c);
  atomic_fetch_add(&rec->runs, 1);
  if (p < 0 || p >= MAX_PARTICIPANTS || num_inputs > MAX_INPUTS)
    return tpu_replica_context_fail(ctx, TPU_INTERNAL, "participant or inputs out of range");
  rec->num_seen[p] = num_inputs;
  for (int i = 0; i < num_inputs; ++i) {
    tpu_tensor_retain(inputs[i]);
    rec->seen[p][i] = inputs[i];
  }
  for (int o = 0; o < num_outputs; ++o) {
    tpu_tensor_retain(inputs[o]);
    outputs[o] = inputs[o];
  }
  return TPU_OK;
}

static void clear_record(record *rec) {
  for (int p = 0; p < MAX_PARTICIPANTS; ++p)
    for (int i = 0; i < MAX_INPUTS; ++i) tpu_tensor_release(rec->seen[p][i]);
  memset(rec, 0, sizeof *rec);
}

static void release_all(tpu_tensor **t, int n) {
  for (int i = 0; i < n; ++i) {
    tpu_tensor_release(t[i]);
    t[i] = NULL;
  }
}

static tpu_step_options partition_options(const tpu_device_assignment *da,
                                          const tpu_partition_spec *in, size_t num_in,
                                          const tpu_partition_spec *out, size_t num_out) {
  tpu_step_options o = TPU_STEP_OPTIONS_INIT;
  o.device_assignment = da;
  o.input_partitions = in;
  o.num_input_partitions = in ? num_in : 0;
  o.output_partitions = out;
  o.num_output_partitions = out ? num_out : 0;
  return o;
}

/* Input and output 0 of every replica partitioned by pd (shape dims): every core's
 * tile against tpu_feed.py's, and the assembled output against the input. Replica
 * r's input is iota + 1000 r. */
static void check_round_trip(int replicas, int k, const int64_t *dims, int rank,
                             const int *pd) {
  tpu_device_assignment *da = assignment(replicas, k);
  const tpu_partition_spec spec = spec_of(rank, pd);
  tpu_tensor *in[MAX_PARTICIPANTS] = {NULL}, *out[MAX_PARTICIPANTS] = {NULL};
  for (int r = 0; r < replicas; ++r) in[r] = iota(dims, rank, 1000.0f * (float)r);
  record rec;
  memset(&rec, 0, sizeof rec);
  const tpu_step_options o = partition_options(da, &spec, 1, &spec, 1);
  CHECK_OK(tpu_replicate(g_sys, echo, &rec, replicas, 1, in, 1, out, &o));
  CHECK_NO_WORKER_FAILURES();
  assert_int_equal(atomic_load(&rec.runs), replicas * k);
  box tiles[MAX_PARTICIPANTS];
  assert_int_equal(tf_tiles(dims, rank, pd, tiles), k);
  char what[128];
  for (int r = 0; r < replicas; ++r) {
    snprintf(what, sizeof what, "rank %d grid [%d,%d,%d] replica %d", rank, pd[0],
             rank > 1 ? pd[1] : 0, rank > 2 ? pd[2] : 0, r);
    for (int c = 0; c < k; ++c) {
      assert_int_equal(rec.num_seen[r * k + c], 1);
      check_tile(rec.seen[r * k + c][0], dims, rank, &tiles[c], 1000.0f * (float)r, what, c);
    }
    /* Assembled: the whole input again. */
    box whole;
    memset(&whole, 0, sizeof whole);
    for (int d = 0; d < rank; ++d) whole.size[d] = dims[d];
    check_tile(out[r], dims, rank, &whole, 1000.0f * (float)r, what, -1);
  }
  CHECK_NO_WORKER_FAILURES();
  clear_record(&rec);
  release_all(in, replicas);
  release_all(out, replicas);
  tpu_device_assignment_release(da);
}

/* ---- Cases ----------------------------------------------------------------------- */

/* TensorFlow's own examples. */
static void test_partition__tensorflow_examples(void **state) {
  (void)state;
  start(8);
  /* tpu_feed.py, _PartitionedInfeedQueue.generate_enqueue_ops: [[A, B, C, D],
   * [E, F, G, H]] with input_partition_dims [2, 4] is "partitioned and flattened into
   * [A, B, C, D, E, F, G, H] and fed into the logical core ids [0, 1, 2, 3, 4, 5, 6,
   * 7] respectively". */
  {
    tpu_device_assignment *da = assignment(1, 8);
    const int64_t dims[2] = {2, 4};
    tpu_tensor *in = iota(dims, 2, 0.0f), *out = NULL;
    const int pd[2] = {2, 4};
    const tpu_partition_spec spec = spec_of(2, pd);
    record rec;
    memset(&rec, 0, sizeof rec);
    const tpu_step_options o = partition_options(da, &spec, 1, NULL, 0);
    CHECK_OK(tpu_replicate(g_sys, echo, &rec, 1, 1, &in, 1, &out, &o));
    CHECK_NO_WORKER_FAILURES();
    for (int c = 0; c < 8; ++c) {
      int64_t n = 0;
      CHECK_OK(tpu_tensor_num_elements(rec.seen[c][0], &n));
      assert_int_equal(n, 1);
      assert_true(floats_of(rec.seen[c][0])[0] == (float)c); /* A = 0, ..., H = 7 */
    }
    /* Unpartitioned output: logical core 0's, A. */
    int64_t n = 0;
    CHECK_OK(tpu_tensor_num_elements(out, &n));
    assert_int_equal(n, 1);
    assert_true(floats_of(out)[0] == 0.0f);
    clear_record(&rec);
    tpu_tensor_release(in);
    tpu_tensor_release(out);
    tpu_device_assignment_release(da);
  }
  /* tpu_feed.py, partition_or_replicate_on_host: shape (5, 14) with dims (2, 4); 5 % 2
   * and 14 % 4 do not divide, so both are cut greedily with ceil_ratio pieces: 5 ->
   * 3, 2 and 14 -> 4, 4, 4, 2. (The comment there lists other tile shapes; its code,
   * which TPUEstimator runs, gives these.) */
  {
    const int64_t dims[2] = {5, 14};
    const int pd[2] = {2, 4};
    box tiles[8];
    assert_int_equal(tf_tiles(dims, 2, pd, tiles), 8);
    const int64_t expect[8][2] = {{3, 4}, {3, 4}, {3, 4}, {3, 2},
                                  {2, 4}, {2, 4}, {2, 4}, {2, 2}};
    for (int c = 0; c < 8; ++c) {
      assert_int_equal(tiles[c].size[0], expect[c][0]);
      assert_int_equal(tiles[c].size[1], expect[c][1]);
    }
    check_round_trip(1, 8, dims, 2, pd);
  }
  /* A size that leaves empty pieces: 5 cut 4 ways is 2, 2, 1, 0. */
  {
    int64_t sizes[4];
    tf_piece_sizes(5, 4, sizes);
    assert_int_equal(sizes[0], 2);
    assert_int_equal(sizes[1], 2);
    assert_int_equal(sizes[2], 1);
    assert_int_equal(sizes[3], 0);
    const int64_t dims[1] = {5};
    const int pd[1] = {4};
    check_round_trip(2, 4, dims, 1, pd);
  }
}

/* Every rank from 1 to 3, grids over one and several dimensions at once, sizes that
 * divide and sizes that do not (with empty tiles), for k = 2 and k = 4. */
static void test_partition__every_rank_and_grid(void **state) {
  (void)state;
  start(8);
  static const struct {
    int k, rank;
    int64_t dims[3];
    int pd[3];
  } cases[] = {
      {2, 1, {8}, {2}},           {2, 1, {7}, {2}},           {4, 1, {3}, {4}},
      {4, 1, {0}, {4}},           {2, 2, {4, 6}, {2, 1}},     {2, 2, {3, 5}, {1, 2}},
      {4, 2, {6, 5}, {2, 2}},     {4, 2, {3, 7}, {1, 4}},     {4, 2, {5, 1}, {4, 1}},
      {4, 2, {1, 1}, {2, 2}},     {2, 3, {3, 4, 5}, {1, 1, 2}}, {4, 3, {3, 5, 4}, {2, 2, 1}},
      {4, 3, {4, 3, 5}, {1, 2, 2}}, {4, 3, {5, 2, 3}, {2, 1, 2}}, {4, 3, {2, 9, 2}, {1, 4, 1}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
    check_round_trip(8 / cases[i].k, cases[i].k, cases[i].dims, cases[i].rank, cases[i].pd);
}

/* Several inputs at once, each with its own spec or none, and the outputs each
 * assembled or core 0's. */
static void test_partition__mixed_inputs_and_outputs(void **state) {
  (void)state;
  start(8);
  tpu_device_assignment *da = assignment(2, 4);
  const int64_t a_dims[2] = {4, 6}, b_dims[1] = {3}, c_dims[3] = {2, 5, 3};
  const int pa[2] = {2, 2}, pc[3] = {1, 1, 4};
  tpu_partition_spec specs[3];
  specs[0] = spec_of(2, pa);
  specs[1] = spec_of(0, NULL); /* whole to every core */
  specs[2] = spec_of(3, pc);
  tpu_tensor *in[6], *out[6] = {NULL};
  for (int r = 0; r < 2; ++r) {
    in[r * 3 + 0] = iota(a_dims, 2, 1000.0f * (float)r);
    in[r * 3 + 1] = iota(b_dims, 1, 1000.0f * (float)r);
    in[r * 3 + 2] = iota(c_dims, 3, 1000.0f * (float)r);
  }
  record rec;
  memset(&rec, 0, sizeof rec);
  /* Output 0 assembled, 1 core 0's (here the whole input on every core), 2 core 0's
   * (its tile only). */
  tpu_partition_spec out_specs[3] = {specs[0], spec_of(0, NULL), spec_of(0, NULL)};
  const tpu_step_options o = partition_options(da, specs, 3, out_specs, 3);
  CHECK_OK(tpu_replicate(g_sys, echo, &rec, 2, 3, in, 3, out, &o));
  CHECK_NO_WORKER_FAILURES();
  box ta[4], tc[4], wb, wa;
  assert_int_equal(tf_tiles(a_dims, 2, pa, ta), 4);
  assert_int_equal(tf_tiles(c_dims, 3, pc, tc), 4);
  memset(&wb, 0, sizeof wb);
  wb.size[0] = 3;
  memset(&wa, 0, sizeof wa);
  wa.size[0] = 4;
  wa.size[1] = 6;
  for (int r = 0; r < 2; ++r) {
    const float base = 1000.0f * (float)r;
    for (int c = 0; c < 4; ++c) {
      check_tile(rec.seen[r * 4 + c][0], a_dims, 2, &ta[c], base, "input 0", c);
      check_tile(rec.seen[r * 4 + c][1], b_dims, 1, &wb, base, "input 1", c);
      check_tile(rec.seen[r * 4 + c][2], c_dims, 3, &tc[c], base, "input 2", c);
    }
    check_tile(out[r * 3 + 0], a_dims, 2, &wa, base, "output 0", -1);
    check_tile(out[r * 3 + 1], b_dims, 1, &wb, base, "output 1", -1);
    check_tile(out[r * 3 + 2], c_dims, 3, &tc[0], base, "output 2", -1);
  }
  CHECK_NO_WORKER_FAILURES();
  clear_record(&rec);
  release_all(in, 6);
  release_all(out, 6);
  tpu_device_assignment_release(da);
}

/* An unpartitioned input: every core gets a handle of its own on the caller's buffer
 * (no copy), and a write through one (tpu_tensor_mutable_data) is seen neither by
 * another core nor by the caller. */
typedef struct {
  atomic_int written;
  const void *data_before[2];
  const tpu_tensor *handle[2];
  float seen_after[2];
} cow_state;

static tpu_status write_on_core_1(tpu_replica_context *ctx, tpu_tensor *const *inputs,
                                  int num_inputs, tpu_tensor **outputs, int num_outputs,
                                  void *user_data) {
  (void)num_inputs;
  (void)outputs;
  (void)num_outputs;
  cow_state *s = user_data;
  int r, c;
  participant(ctx, &r, &c);
  if (c < 0 || c > 1) return tpu_replica_context_fail(ctx, TPU_INTERNAL, "core out of range");
  s->handle[c] = inputs[0];
  CHECK_OK(tpu_tensor_data(inputs[0], &s->data_before[c]));
  if (c == 1) {
    void *w = NULL;
    CHECK_OK(tpu_tensor_mutable_data(inputs[0], &w));
    for (int i = 0; i < 4; ++i) ((float *)w)[i] = -1.0f;
    s->seen_after[1] = floats_of(inputs[0])[0];
    atomic_store(&s->written, 1);
  } else {
    /* Wait (bounded) for core 1's write, so that a shared buffer would show it. */
    for (int i = 0; i < 20000 && !atomic_load(&s->written); ++i) {
      struct timespec ts = {0, 1000000L};
      nanosleep(&ts, NULL);
    }
    s->seen_after[0] = floats_of(inputs[0])[0];
  }
  return TPU_OK;
}

static void test_partition__shared_input_copy_on_write(void **state) {
  (void)state;
  start(8);
  tpu_device_assignment *da = assignment(1, 2);
  const int64_t dims[1] = {4};
  tpu_tensor *in = iota(dims, 1, 5.0f);
  const void *caller_data = floats_of(in);
  cow_state s;
  memset(&s, 0, sizeof s);
  /* No input_partitions at all, then an explicit num_dims 0: both mean whole. */
  for (int explicit_spec = 0; explicit_spec < 2; ++explicit_spec) {
    memset(&s, 0, sizeof s);
    const tpu_partition_spec whole = spec_of(0, NULL);
    const tpu_step_options o = partition_options(da, explicit_spec ? &whole : NULL, 1, NULL, 0);
    CHECK_OK(tpu_replicate(g_sys, write_on_core_1, &s, 1, 1, &in, 0, NULL, &o));
    CHECK_NO_WORKER_FAILURES();
    assert_int_equal(atomic_load(&s.written), 1);
    /* One buffer: both cores read the caller's bytes in place, through handles of
     * their own. */
    assert_ptr_equal(s.data_before[0], caller_data);
    assert_ptr_equal(s.data_before[1], caller_data);
    assert_ptr_not_equal(s.handle[0], s.handle[1]);
    assert_ptr_not_equal(s.handle[0], in);
    /* Copy-on-write: core 1 saw its write, core 0 and the caller did not. */
    assert_true(s.seen_after[1] == -1.0f);
    assert_true(s.seen_after[0] == 5.0f);
    assert_ptr_equal(floats_of(in), caller_data);
    for (int i = 0; i < 4; ++i) assert_true(floats_of(in)[i] == 5.0f + (float)i);
  }
  /* A caller that wrote through its handle keeps its buffer to itself: the cores
   * share one copy of it. */
  void *w = NULL;
  CHECK_OK(tpu_tensor_mutable_data(in, &w));
  memset(&s, 0, sizeof s);
  const tpu_step_options o = partition_options(da, NULL, 0, NULL, 0);
  CHECK_OK(tpu_replicate(g_sys, write_on_core_1, &s, 1, 1, &in, 0, NULL, &o));
  CHECK_NO_WORKER_FAILURES();
  assert_ptr_equal(s.data_before[0], s.data_before[1]);
  assert_ptr_not_equal(s.data_before[0], caller_data);
  assert_true(s.seen_after[1] == -1.0f);
  assert_true(s.seen_after[0] == 5.0f);
  for (int i = 0; i < 4; ++i) assert_true(floats_of(in)[i] == 5.0f + (float)i);
  tpu_tensor_release(in);
  tpu_device_assignment_release(da);
}

/* An unpartitioned output is logical core 0's; the other cores' are released. */
static tpu_status core_scalar(tpu_replica_context *ctx, tpu_tensor *const *inputs,
                              int num_inputs, tpu_tensor **outputs, int num_outputs,
                              void *user_data) {
  (void)inputs;
  (void)num_inputs;
  atomic_fetch_add((atomic_int *)user_data, 1);
  int r, c;
  participant(ctx, &r, &c);
  for (int o = 0; o < num_outputs; ++o) {
    const int32_t v = 100 * r + 10 * c + o;
    CHECK_OK(tpu_tensor_create(TPU_INT32, NULL, 0, &v, sizeof v, &outputs[o]));
  }
  return TPU_OK;
}

static void test_partition__output_from_core_zero(void **state) {
  (void)state;
  start(8);
  for (int k = 2; k <= 4; k *= 2) {
    const int replicas = 8 / k;
    tpu_device_assignment *da = assignment(replicas, k);
    tpu_tensor *out[MAX_PARTICIPANTS * 2] = {NULL};
    const tpu_partition_spec whole[2] = {spec_of(0, NULL), spec_of(0, NULL)};
    for (int explicit_spec = 0; explicit_spec < 2; ++explicit_spec) {
      atomic_int runs = 0;
      const tpu_step_options o = partition_options(da, NULL, 0, explicit_spec ? whole : NULL, 2);
      CHECK_OK(tpu_replicate(g_sys, core_scalar, &runs, replicas, 0, NULL, 2, out, &o));
      CHECK_NO_WORKER_FAILURES();
      assert_int_equal(atomic_load(&runs), 8);
      for (int r = 0; r < replicas; ++r)
        for (int oi = 0; oi < 2; ++oi) {
          const void *p = NULL;
          CHECK_OK(tpu_tensor_data(out[r * 2 + oi], &p));
          assert_int_equal(*(const int32_t *)p, 100 * r + oi); /* logical core 0 */
        }
      release_all(out, replicas * 2);
    }
    tpu_device_assignment_release(da);
  }
}

/* One core per replica: a spec is then all ones and changes nothing; the step runs
 * on the caller's handles and hands the computation's outputs back as they are. */
static void test_partition__one_core_passes_tensors_through(void **state) {
  (void)state;
  start(4);
  const int64_t dims[2] = {3, 2};
  tpu_tensor *in[4], *out[4] = {NULL};
  for (int r = 0; r < 4; ++r) in[r] = iota(dims, 2, (float)r);
  const int ones[2] = {1, 1};
  const tpu_partition_spec spec = spec_of(2, ones), whole = spec_of(0, NULL);
  tpu_device_assignment *da = assignment(4, 1);
  const tpu_device_assignment *das[2] = {NULL, da};
  for (int with_da = 0; with_da < 2; ++with_da)
    for (int variant = 0; variant < 3; ++variant) {
      const tpu_partition_spec *s = variant == 0 ? NULL : variant == 1 ? &spec : &whole;
      record rec;
      memset(&rec, 0, sizeof rec);
      const tpu_step_options o = partition_options(das[with_da], s, 1, s, 1);
      CHECK_OK(tpu_replicate(g_sys, echo, &rec, 4, 1, in, 1, out, &o));
      CHECK_NO_WORKER_FAILURES();
      for (int r = 0; r < 4; ++r) {
        assert_ptr_equal(rec.seen[r][0], in[r]); /* no copy, no new handle */
        assert_ptr_equal(out[r], in[r]);         /* echo's output, untouched */
      }
      clear_record(&rec);
      release_all(out, 4);
    }
  release_all(in, 4);
  tpu_device_assignment_release(da);
}

/* maximum_shapes pads first, then input_partitions cuts the padded input; the padded
 * sizes' int32 inputs go whole to every core. */
static void test_partition__padding_then_partitioning(void **state) {
  (void)state;
  start(8);
  tpu_device_assignment *da = assignment(2, 4);
  const int64_t d0[1] = {5}, d1[1] = {3};
  tpu_tensor *in[2] = {iota(d0, 1, 0.0f), iota(d1, 1, 100.0f)}, *out[2] = {NULL};
  tpu_shape max;
  memset(&max, 0, sizeof max);
  max.rank = 1;
  max.dims[0] = 8;
  const int four[1] = {4};
  const tpu_partition_spec spec = spec_of(1, four);
  tpu_step_options o = partition_options(da, &spec, 1, &spec, 1);
  o.maximum_shapes = &max;
  o.num_maximum_shapes = 1;
  record rec;
  memset(&rec, 0, sizeof rec);
  CHECK_OK(tpu_replicate(g_sys, echo, &rec, 2, 1, in, 1, out, &o));
  CHECK_NO_WORKER_FAILURES();
  for (int r = 0; r < 2; ++r) {
    const int32_t real = r == 0 ? 5 : 3;
    for (int c = 0; c < 4; ++c) {
      const int p = r * 4 + c;
      assert_int_equal(rec.num_seen[p], 2);
      /* [8] cut 4 ways: elements 2c and 2c+1, zero past the real size. */
      const float *v = floats_of(rec.seen[p][0]);
      for (int e = 0; e < 2; ++e) {
        const int i = 2 * c + e;
        const float expect = i < real ? (float)(r == 0 ? i : 100 + i) : 0.0f;
        assert_true(v[e] == expect);
      }
      int rank = -1;
      CHECK_OK(tpu_tensor_rank(rec.seen[p][1], &rank));
      assert_int_equal(rank, 0);
      const void *sz = NULL;
      CHECK_OK(tpu_tensor_data(rec.seen[p][1], &sz));
      assert_int_equal(*(const int32_t *)sz, real);
    }
    int64_t n = 0;
    CHECK_OK(tpu_tensor_num_elements(out[r], &n));
    assert_int_equal(n, 8); /* the padded input, assembled */
  }
  clear_record(&rec);
  release_all(in, 2);
  release_all(out, 2);
  tpu_device_assignment_release(da);
}

/* tpu_rewrite and tpu_shard / tpu_batch_parallel take the same options. */
static void test_partition__rewrite_and_shard(void **state) {
  (void)state;
  start(8);
  const int64_t dims[2] = {6, 5};
  const int pd[2] = {2, 2};
  const tpu_partition_spec spec = spec_of(2, pd);
  box tiles[4];
  assert_int_equal(tf_tiles(dims, 2, pd, tiles), 4);
  /* rewrite: one replica of 4 cores. */
  tpu_device_assignment *da = assignment(1, 4);
  tpu_tensor *in = iota(dims, 2, 0.0f), *out = NULL;
  record rec;
  memset(&rec, 0, sizeof rec);
  tpu_step_options o = partition_options(da, &spec, 1, &spec, 1);
  CHECK_OK(tpu_rewrite(g_sys, echo, &rec, 1, &in, 1, &out, &o));
  CHECK_NO_WORKER_FAILURES();
  for (int c = 0; c < 4; ++c) check_tile(rec.seen[c][0], dims, 2, &tiles[c], 0.0f, "rewrite", c);
  box whole;
  memset(&whole, 0, sizeof whole);
  whole.size[0] = 6;
  whole.size[1] = 5;
  check_tile(out, dims, 2, &whole, 0.0f, "rewrite output", -1);
  CHECK_NO_WORKER_FAILURES();
  clear_record(&rec);
  tpu_tensor_release(out);
  out = NULL;
  tpu_device_assignment_release(da);
  /* shard: [12, 5] into 2 shards along 0, each [6, 5] cut over its 4 cores; the shards'
   * assembled outputs concatenated back. */
  da = assignment(2, 4);
  const int64_t big_dims[2] = {12, 5};
  tpu_tensor *big = iota(big_dims, 2, 0.0f);
  o = partition_options(da, &spec, 1, &spec, 1);
  CHECK_OK(tpu_batch_parallel(g_sys, echo, &rec, 1, &big, 2, 1, &out, &o));
  CHECK_NO_WORKER_FAILURES();
  for (int s = 0; s < 2; ++s)
    for (int c = 0; c < 4; ++c)
      check_tile(rec.seen[s * 4 + c][0], dims, 2, &tiles[c], 30.0f * (float)s, "shard", c);
  memset(&whole, 0, sizeof whole);
  whole.size[0] = 12;
  whole.size[1] = 5;
  check_tile(out, big_dims, 2, &whole, 0.0f, "batch_parallel output", -1);
  CHECK_NO_WORKER_FAILURES();
  clear_record(&rec);
  tpu_tensor_release(out);
  tpu_tensor_release(big);
  tpu_tensor_release(in);
  tpu_device_assignment_release(da);
}

/* Bad specs, each named: TPU_INVALID_ARGUMENT before anything runs. */
static void test_partition__bad_specs(void **state) {
  (void)state;
  start(8);
  tpu_device_assignment *da4 = assignment(1, 4), *da1 = assignment(1, 1);
  const int64_t dims[2] = {4, 4};
  tpu_tensor *in[2] = {iota(dims, 2, 0.0f), iota(dims, 2, 0.0f)}, *out[2] = {NULL};
  record rec;
  memset(&rec, 0, sizeof rec);
  const int d22[2] = {2, 2}, d24[2] = {2, 4}, d20[2] = {2, 0}, dneg[2] = {-2, -2},
            d221[3] = {2, 2, 1}, d41[2] = {4, 1}, d21[2] = {2, 1};
  tpu_partition_spec two[2] = {spec_of(2, d22), spec_of(2, d22)};
  tpu_step_options o;
#define BAD(options, num_in, fragment)                                                    \
  do {                                                                                    \
    o = (options);                                                                        \
    CHECK_ERROR(tpu_replicate(g_sys, echo, &rec, 1, (num_in), in, 1, out, &o),             \
                TPU_INVALID_ARGUMENT, fragment);                                          \
    assert_null(out[0]);                                                                  \
  } while (0)
  /* Counts. */
  BAD(partition_options(da4, two, 2, NULL, 0), 1,
      "options->num_input_partitions is 2; input_partitions needs one entry per input (1)");
  o = partition_options(da4, NULL, 0, NULL, 0);
  o.num_input_partitions = 1;
  BAD(o, 1, "options->input_partitions is NULL but num_input_partitions is 1");
  BAD(partition_options(da4, two, 1, two, 2), 1,
      "options->num_output_partitions is 2; output_partitions needs one entry per output (1)");
  o = partition_options(da4, NULL, 0, NULL, 0);
  o.num_output_partitions = 3;
  BAD(o, 1, "options->output_partitions is NULL but num_output_partitions is 3");
  /* num_dims. */
  tpu_partition_spec s = spec_of(2, d22);
  s.num_dims = TPU_MAX_RANK + 1;
  char msg[128];
  snprintf(msg, sizeof msg, "input_partitions[0].num_dims is %d; it must be in [0, %d]",
           TPU_MAX_RANK + 1, TPU_MAX_RANK);
  BAD(partition_options(da4, &s, 1, NULL, 0), 1, msg);
  s.num_dims = -1;
  BAD(partition_options(da4, &s, 1, NULL, 0), 1, "input_partitions[0].num_dims is -1");
  s = spec_of(3, d221);
  BAD(partition_options(da4, &s, 1, NULL, 0), 1,
      "input_partitions[0] has 3 partition dimensions [2,2,1] but input 0 is float32[4,4] of "
      "rank 2; they must be equal");
  /* Counts below 1. */
  s = spec_of(2, d20);
  BAD(partition_options(da4, &s, 1, NULL, 0), 1,
      "input_partitions[0].partition_dims[1] is 0; every partition dimension must be >= 1");
  s = spec_of(2, dneg);
  BAD(partition_options(da4, &s, 1, NULL, 0), 1, "input_partitions[0].partition_dims[0] is -2");
  /* The product must be the cores per replica. */
  s = spec_of(2, d24);
  BAD(partition_options(da4, &s, 1, NULL, 0), 1,
      "the product of input_partitions[0].partition_dims [2,4] is 8 but must equal the cores "
      "per replica (4)");
  s = spec_of(2, d21);
  BAD(partition_options(da4, &s, 1, NULL, 0), 1,
      "the product of input_partitions[0].partition_dims [2,1] is 2 but must equal the cores "
      "per replica (4)");
  /* The second input named. */
  tpu_partition_spec mixed[2] = {spec_of(2, d22), spec_of(2, d41)};
  mixed[1].partition_dims[0] = 3;
  BAD(partition_options(da4, mixed, 2, NULL, 0), 2,
      "the product of input_partitions[1].partition_dims [3,1] is 3");
  s = spec_of(2, d20);
  BAD(partition_options(da4, NULL, 0, &s, 1), 1, "output_partitions[0].partition_dims[1] is 0");
  s = spec_of(2, d24);
  BAD(partition_options(da4, NULL, 0, &s, 1), 1,
      "the product of output_partitions[0].partition_dims [2,4] is 8 but must equal the cores "
      "per replica (4)");
  /* One core per replica (with or without an assignment): product 1. */
  s = spec_of(2, d21);
  BAD(partition_options(da1, &s, 1, NULL, 0), 1,
      "the product of input_partitions[0].partition_dims [2,1] is 2 but must equal the cores "
      "per replica (1)");
  BAD(partition_options(NULL, NULL, 0, &s, 1), 1,
      "the product of output_partitions[0].partition_dims [2,1] is 2 but must equal the cores "
      "per replica (1)");
  /* A product that overflows. */
  const int huge[3] = {1 << 30, 1 << 30, 1 << 30};
  s = spec_of(3, huge);
  s.num_dims = 2;
  BAD(partition_options(da4, &s, 1, NULL, 0), 1, "is 1152921504606846976 but must equal");
  s = spec_of(3, huge);
  s.num_dims = 3;
  for (int d = 0; d < 3; ++d) s.partition_dims[d] = 1 << 30;
  BAD(partition_options(da4, &s, 1, NULL, 0), 1, "is more than 2^63 but must equal");
#undef BAD
  assert_int_equal(atomic_load(&rec.runs), 0);
  release_all(in, 2);
  tpu_device_assignment_release(da4);
  tpu_device_assignment_release(da1);
}

/* Output tiles that cannot be assembled, found after the step: TPU_INVALID_ARGUMENT
 * naming the output and the cores; no output is returned. */
typedef struct {
  int mode;
} bad_tiles;

static tpu_status odd_tiles(tpu_replica_context *ctx, tpu_tensor *const *inputs,
                            int num_inputs, tpu_tensor **outputs, int num_outputs,
                            void *user_data) {
  (void)inputs;
  (void)num_inputs;
  (void)num_outputs;
  const bad_tiles *b = user_data;
  int r, c;
  participant(ctx, &r, &c);
  int64_t dims[2] = {2, 3};
  tpu_dtype dtype = TPU_FLOAT;
  int rank = 2;
  switch (b->mode) {
    case 0: dims[0] = c == 3 ? 3 : 2; break;  /* core 3 differs from core 2 in dim 0 */
    case 1: dims[1] = c == 2 ? 4 : 3; break;  /* core 2 differs from core 0 in dim 1 */
    case 2: if (c == 1) dtype = TPU_INT32; break;
    case 3: if (c == 2) rank = 1; break;
    case 4: if (c == 1) return TPU_OK; break; /* leaves its output NULL */
    case 6: return TPU_OK;
    default: break;
  }
  CHECK_OK(tpu_tensor_create(dtype, dims, rank, NULL, 0, &outputs[0]));
  return TPU_OK;
}

static void test_partition__bad_output_tiles(void **state) {
  (void)state;
  start(8);
  tpu_device_assignment *da = assignment(2, 4);
  const int d22[2] = {2, 2};
  const tpu_partition_spec spec = spec_of(2, d22);
  const tpu_step_options o = partition_options(da, NULL, 0, &spec, 1);
  tpu_tensor *out[2] = {NULL};
  static const char *const fragments[] = {
      "replica 0 output 0: logical cores 2 and 3 give tiles float32[2,3] and float32[3,3], "
      "which differ in dimension 0; tiles in one row of the partition grid [2,2] (here along "
      "dimension 1) must agree in every other dimension",
      "replica 0 output 0: logical cores 0 and 2 give tiles float32[2,3] and float32[2,4], "
      "which differ in dimension 1",
      "replica 0 output 0: logical core 0's tile is float32[2,3] but logical core 1's is "
      "int32[2,3]; the tiles of a partitioned output must have one dtype",
      "replica 0 logical core 2 output 0 is float32[2] of rank 1 but output_partitions[0] has "
      "2 partition dimensions [2,2]",
      "replica 0 logical core 1 left output 0 NULL; a partitioned output (output_partitions[0]) "
      "needs a tile from every core",
  };
  for (int mode = 0; mode < 5; ++mode) {
    bad_tiles b = {mode};
    CHECK_ERROR(tpu_replicate(g_sys, odd_tiles, &b, 2, 0, NULL, 1, out, &o),
                TPU_INVALID_ARGUMENT, fragments[mode]);
    assert_null(out[0]);
    assert_null(out[1]);
  }
  tpu_device_assignment_release(da);
  /* One core: an all-ones spec still needs an output of its rank, and a tensor. */
  const int ones[2] = {1, 1}, one[1] = {1};
  const tpu_partition_spec rank2 = spec_of(2, ones), rank1 = spec_of(1, one);
  bad_tiles good = {5}, none = {6};
  tpu_step_options o1 = partition_options(NULL, NULL, 0, &rank1, 1);
  CHECK_ERROR(tpu_replicate(g_sys, odd_tiles, &good, 1, 0, NULL, 1, out, &o1), TPU_INVALID_ARGUMENT,
              "replica 0 logical core 0 output 0 is float32[2,3] of rank 2 but "
              "output_partitions[0] has 1 partition dimensions [1]");
  assert_null(out[0]);
  o1 = partition_options(NULL, NULL, 0, &rank2, 1);
  CHECK_ERROR(tpu_replicate(g_sys, odd_tiles, &none, 1, 0, NULL, 1, out, &o1), TPU_INVALID_ARGUMENT,
              "replica 0 logical core 0 left output 0 NULL");
  assert_null(out[0]);
  CHECK_OK(tpu_replicate(g_sys, odd_tiles, &good, 1, 0, NULL, 1, out, &o1));
  tpu_tensor_release(out[0]);
}

/* Tiles of uneven sizes assemble as long as each row agrees. */
static tpu_status uneven_tiles(tpu_replica_context *ctx, tpu_tensor *const *inputs,
                               int num_inputs, tpu_tensor **outputs, int num_outputs,
                               void *user_data) {
  (void)inputs;
  (void)num_inputs;
  (void)num_outputs;
  (void)user_data;
  int r, c;
  participant(ctx, &r, &c);
  /* Grid [2,2] of a [3,4] tensor: rows 2 and 1, columns 3 and 1. */
  const int64_t rows[2] = {2, 1}, cols[2] = {3, 1}, row0[2] = {0, 2}, col0[2] = {0, 3};
  const int64_t dims[2] = {rows[c / 2], cols[c % 2]};
  float v[6];
  for (int i = 0; i < dims[0]; ++i)
    for (int j = 0; j < dims[1]; ++j)
      v[i * dims[1] + j] = (float)((row0[c / 2] + i) * 4 + col0[c % 2] + j + 100 * r);
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 2, v, (size_t)(dims[0] * dims[1]) * sizeof(float),
                             &outputs[0]));
  return TPU_OK;
}

static void test_partition__assembles_uneven_tiles(void **state) {
  (void)state;
  start(8);
  tpu_device_assignment *da = assignment(2, 4);
  const int d22[2] = {2, 2};
  const tpu_partition_spec spec = spec_of(2, d22);
  const tpu_step_options o = partition_options(da, NULL, 0, &spec, 1);
  tpu_tensor *out[2] = {NULL};
  CHECK_OK(tpu_replicate(g_sys, uneven_tiles, NULL, 2, 0, NULL, 1, out, &o));
  CHECK_NO_WORKER_FAILURES();
  const int64_t dims[2] = {3, 4};
  box whole;
  memset(&whole, 0, sizeof whole);
  whole.size[0] = 3;
  whole.size[1] = 4;
  for (int r = 0; r < 2; ++r) check_tile(out[r], dims, 2, &whole, 100.0f * (float)r, "uneven", -1);
  CHECK_NO_WORKER_FAILURES();
  release_all(out, 2);
  tpu_device_assignment_release(da);
}

/* An infeed queue with several cores per replica cuts each element over the cores
 * (test_feed covers the pieces); a float32[2] cannot be cut 4 ways along dimension 0
 * (tpu_sharding.py's get_sharded_shape): refused before anything runs. */
static void test_partition__infeed_with_several_cores(void **state) {
  (void)state;
  start(8);
  tpu_device_assignment *da = assignment(2, 4);
  const tpu_dtype dtype = TPU_FLOAT;
  tpu_shape shape;
  memset(&shape, 0, sizeof shape);
  shape.rank = 1;
  shape.dims[0] = 2;
  tpu_infeed_queue *q = NULL;
  CHECK_OK(tpu_infeed_queue_create(g_sys, 2, 1, &dtype, &shape, 0, &q));
  tpu_step_options o = partition_options(da, NULL, 0, NULL, 0);
  o.infeed_queue = q;
  record rec;
  memset(&rec, 0, sizeof rec);
  CHECK_ERROR(tpu_replicate(g_sys, echo, &rec, 2, 0, NULL, 0, NULL, &o), TPU_INVALID_ARGUMENT,
              "infeed tuple element 0: shape [2] cannot be sharded 4 ways along dimension 0");
  assert_int_equal(atomic_load(&rec.runs), 0);
  tpu_infeed_queue_release(q);
  tpu_device_assignment_release(da);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_partition__tensorflow_examples, release_system),
      cmocka_unit_test_teardown(test_partition__every_rank_and_grid, release_system),
      cmocka_unit_test_teardown(test_partition__mixed_inputs_and_outputs, release_system),
      cmocka_unit_test_teardown(test_partition__shared_input_copy_on_write, release_system),
      cmocka_unit_test_teardown(test_partition__output_from_core_zero, release_system),
      cmocka_unit_test_teardown(test_partition__one_core_passes_tensors_through, release_system),
      cmocka_unit_test_teardown(test_partition__padding_then_partitioning, release_system),
      cmocka_unit_test_teardown(test_partition__rewrite_and_shard, release_system),
      cmocka_unit_test_teardown(test_partition__bad_specs, release_system),
      cmocka_unit_test_teardown(test_partition__bad_output_tiles, release_system),
      cmocka_unit_test_teardown(test_partition__assembles_uneven_tiles, release_system),
      cmocka_unit_test_teardown(test_partition__infeed_with_several_cores, release_system),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
