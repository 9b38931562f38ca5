/* One task of the multi-process tests (tests/check_cluster.sh starts several, under
 * tpurt launch or by hand with DTensor's environment). Every task runs the same
 * scenario; each prints "task T: SCENARIO ok" or what went wrong, and exits 0 only if
 * its checks held.
 *
 *   cluster_worker collectives     every collective, several dtypes and group
 *                                  assignments that span tasks, against references;
 *                                  the same topology bytes on every task, those
 *                                  tpu_initialize_tpu_system gave among them
 *   cluster_worker kv              the key-value store and barriers across tasks;
 *                                  tpu_shutdown_accelerator_system refused
 *   cluster_worker kill V          task V kills itself (SIGKILL) inside a step; the
 *                                  others must get TPU_UNAVAILABLE naming task V (and
 *                                  only it: no survivor may blame another survivor)
 *   cluster_worker quit V          task V shuts its system down instead of the step:
 *                                  the others get TPU_FAILED_PRECONDITION naming it
 *   cluster_worker stop V          task V stops itself (SIGSTOP): TPU_DEADLINE_EXCEEDED
 *   cluster_worker skip V          task V's replicas skip a collective:
 *                                  TPU_FAILED_PRECONDITION naming task V
 *   cluster_worker fail V          a replica of task V fails: every task gets its error,
 *                                  and the next step works
 *   cluster_worker mismatch V      task V's replicas call another collective (an
 *                                  all-gather; TEST_MISMATCH=max: an all-reduce with
 *                                  MAX instead of SUM; =shape: of one more element;
 *                                  =dtype: of int32): TPU_INVALID_ARGUMENT naming V
 * TEST_FAULT_COLLECTIVE=reduce_scatter: the collective the fault scenarios' tasks are
 * in when task V fails is a reduce-scatter instead of an all-reduce.
 * TEST_FAULT_ELEMENTS=N: the fault scenarios' all-reduces are of N float32 elements a
 * replica (default 1000).
 *   cluster_worker feed            infeed and outfeed queues of every replica: each task
 *                                  feeds its own, another task's replica is refused
 *   cluster_worker feed_cores      2 tasks of 2 cores, replicas of 2 cores split over
 *                                  the tasks: each core gets its piece of the infeed tuple
 *   cluster_worker model_parallel  8 cores in all, replicas of 2 and 4 cores (explicit
 *                                  device assignments, a replica's cores on one task
 *                                  or several): every group mode x every collective,
 *                                  partitioned inputs and outputs, against references;
 *                                  prints each participant's digest of its results
 *                                  and each output's, to compare with one process
 *   cluster_worker model_parallel_skip  a core on task 1 skips a collective, then
 *                                  calls it in another group mode, then every core
 *                                  permutes in a mode XLA has no permute for, then all
 *                                  of task 1's cores call another mode: every task gets
 *                                  TPU_FAILED_PRECONDITION, then TPU_INVALID_ARGUMENT,
 *                                  naming the core, the mode or the task
 *   cluster_worker embedding div|mod  embedding tables sharded DIV_DEFAULT or MOD over
 *                                  every core: several steps of lookups and updates,
 *                                  also by replicas of 2 cores spanning tasks
 *                                  (prints each core's activation digest per step
 *                                  and each shard's digest at the end, to compare with
 *                                  one process), failing steps that change no row
 *   cluster_worker init            only joins and leaves (tokens, garbage on the ports)
 *   cluster_worker soak STEPS      STEPS steps of checked all-reduces, 20 ms apart
 *   cluster_worker caller_threads V  steps on the tasks' own threads (caller_threads,
 *                                  tpu_step_join / tpu_step_leave): checked sums, then
 *                                  a step where task V's last core is never joined
 *                                  (every task names its replica), then steps again
 *   cluster_worker shard           tpu_shard and tpu_batch_parallel over every core
 *                                  (2 tasks of 2): every task gets the whole outputs,
 *                                  large ones too
 *                                  (uneven shards, other axes, stacked scalars, shard
 *                                  0's output from another task, replicas of 2 cores
 *                                  spanning tasks); a shard's NULL or mismatched output
 *                                  fails the step alike on every task (printed, to
 *                                  compare) and changes no embedding row; shards
 *                                  all on task 0 are refused on every task;
 *                                  tpu_rewrite: outputs on task 0 only, as replicate
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tpurt.h"

static int g_task, g_tasks, g_local, g_n;
/* The topology tpu_initialize_tpu_system gave. */
static tpu_topology *g_init_topology;

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}
static int g_failures;

#define EXPECT(cond, ...)                                        \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "task %d: %s:%d: ", g_task, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                              \
      fprintf(stderr, "\n");                                     \
      __sync_fetch_and_add(&g_failures, 1);                      \
    }                                                            \
  } while (0)

#define OK(call)                                                                     \
  do {                                                                               \
    tpu_status s_ = (call);                                                          \
    if (s_ != TPU_OK) {                                                              \
      fprintf(stderr, "task %d: %s:%d: %s: %s: %s\n", g_task, __FILE__, __LINE__, #call, \
              tpu_status_name(s_), tpu_last_error());                                \
      __sync_fetch_and_add(&g_failures, 1);                                          \
      return s_;                                                                     \
    }                                                                                \
  } while (0)

/* Replica r's input element i: small integers, so every sum is exact in float. */
static double value(int r, int64_t i) { return (double)((r + 1) * ((i % 13) + 1) % 97); }

static tpu_tensor *make(tpu_dtype dtype, int r, const int64_t *dims, int rank) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= dims[d];
  tpu_tensor *t = NULL, *f = NULL;
  float *data = malloc((size_t)(n ? n : 1) * sizeof *data);
  for (int64_t i = 0; i < n; i++) data[i] = (float)value(r, i);
  if (tpu_tensor_create(TPU_FLOAT, dims, rank, data, (size_t)n * sizeof *data, &f) != TPU_OK) abort();
  free(data);
  if (dtype == TPU_FLOAT) return f;
  if (tpu_tensor_cast(f, dtype, &t) != TPU_OK) abort();
  tpu_tensor_release(f);
  return t;
}

static const char *dname(tpu_dtype dtype) {
  const char *name = "?";
  tpu_dtype_name(dtype, &name);
  return name;
}

static double element(const tpu_tensor *t, int64_t i) {
  tpu_tensor *f = NULL;
  const void *p;
  if (tpu_tensor_cast(t, TPU_FLOAT, &f) != TPU_OK || tpu_tensor_data(f, &p) != TPU_OK) abort();
  double v = ((const float *)p)[i];
  tpu_tensor_release(f);
  return v;
}

/* Group assignments: every replica, and pairs {r, r + n/2} that span tasks. */
static tpu_group_assignment pairs_groups(int32_t *ids) {
  tpu_group_assignment g = {ids, g_n / 2, 2};
  for (int k = 0; k < g_n / 2; k++) {
    ids[2 * k] = k;
    ids[2 * k + 1] = k + g_n / 2;
  }
  return g;
}

static tpu_status check_all_reduce(tpu_replica_context *ctx, int r, tpu_dtype dtype,
                                   tpu_reduce_op op, int64_t count, int paired) {
  if (g_n % 2) paired = 0;
  int32_t ids[4096];
  tpu_group_assignment g = pairs_groups(ids);
  tpu_tensor *x = make(dtype, r, &count, 1), *y = NULL;
  OK(tpu_all_reduce(ctx, x, op, paired ? &g : NULL, &y, NULL));
  int members[2] = {r % (g_n / 2), r % (g_n / 2) + g_n / 2};
  int size = paired ? 2 : g_n;
  for (int64_t i = 0; i < count; i += (count > 100 ? count / 37 + 1 : 1)) {
    double want = op == TPU_REDUCE_PROD ? 1 : op == TPU_REDUCE_MIN ? 1e300 : op == TPU_REDUCE_MAX ? -1e300 : 0;
    for (int k = 0; k < size; k++) {
      double v = value(paired ? members[k] : k, i);
      if (op == TPU_REDUCE_SUM || op == TPU_REDUCE_MEAN) want += v;
      if (op == TPU_REDUCE_PROD) want *= v;
      if (op == TPU_REDUCE_MIN && v < want) want = v;
      if (op == TPU_REDUCE_MAX && v > want) want = v;
    }
    if (op == TPU_REDUCE_MEAN) want = dtype == TPU_INT32 ? (double)(int64_t)(want / size) : want / size;
    if (dtype == TPU_BFLOAT16) { /* the sum rounded once, as the runtime does */
      float f = (float)want, back;
      uint16_t b;
      tpu_float_to_bfloat16(&f, &b, 1);
      tpu_bfloat16_to_float(&b, &back, 1);
      want = back;
    }
    double got = element(y, i);
    EXPECT(got == want, "all_reduce %s op %d count %lld%s: replica %d element %lld is %g, want %g",
           dname(dtype), op, (long long)count, paired ? " paired" : "", r, (long long)i,
           got, want);
    if (got != want) break;
  }
  tpu_tensor_release(x);
  tpu_tensor_release(y);
  return TPU_OK;
}

/* Inputs whose float sums round differently in another order: magnitudes spread over
 * 2^-3..2^3 with 23 significant bits. */
static float fold_value(int r, int64_t i) {
  uint32_t h = (uint32_t)(r * 2654435761u) ^ (uint32_t)(i * 40503u + 977u);
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return ldexpf((float)(h & 0x7fffff) / (float)0x800000 + 0.5f, (int)(h >> 29) - 3);
}

/* *v rounded to bfloat16 or half (and back), as a tensor of that dtype holds it. */
static void round_to(tpu_dtype dtype, float *v) {
  uint16_t b;
  if (dtype == TPU_BFLOAT16) tpu_float_to_bfloat16(v, &b, 1), tpu_bfloat16_to_float(&b, v, 1);
  if (dtype == TPU_HALF) tpu_float_to_half(v, &b, 1), tpu_half_to_float(&b, v, 1);
}

/* Rows of `*size` members for a check: `row` first (NULL: one row of every replica,
 * and *size becomes g_n), then the other replicas in rows of the same size (size
 * divides g_n), written to ids (g_n entries). *mine and *pos: replica r's row and its
 * position in it. */
static tpu_group_assignment rows_from(const int32_t *row, int *size, int r, int32_t *ids,
                                      const int32_t **mine, int *pos) {
  int32_t all[4096];
  if (!row) {
    for (int k = 0; k < g_n; k++) all[k] = k;
    row = all;
    *size = g_n;
  }
  int used[4096] = {0}, nids = 0;
  for (int k = 0; k < *size; k++) ids[nids++] = row[k], used[row[k]] = 1;
  for (int q = 0; q < g_n; q++)
    if (!used[q]) ids[nids++] = q;
  int at = 0;
  for (int k = 0; k < g_n; k++)
    if (ids[k] == r) at = k;
  *mine = ids + at / *size * *size;
  *pos = at % *size;
  return (tpu_group_assignment){ids, g_n / *size, *size};
}

/* A tensor of `dtype` holding `data` (float32 values, cast). */
static tpu_tensor *tensor_from_floats(tpu_dtype dtype, const int64_t *dims, int rank, const float *data,
                                      int64_t n) {
  tpu_tensor *f = NULL, *x = NULL;
  if (tpu_tensor_create(TPU_FLOAT, dims, rank, data, (size_t)n * sizeof *data, &f) != TPU_OK) abort();
  if (dtype == TPU_FLOAT) return f;
  if (tpu_tensor_cast(f, dtype, &x) != TPU_OK) abort();
  tpu_tensor_release(f);
  return x;
}

/* An all-reduce (or, with scatter, a reduce_scatter along axis 0) of fold_value inputs
 * over one group `row` of `size` members (NULL: every replica), checked bit for bit
 * against the left fold in member order that one process computes: float32, or
 * bfloat16 and half accumulated in float32 and rounded once. */
static tpu_status check_fold(tpu_replica_context *ctx, int r, tpu_dtype dtype, tpu_reduce_op op,
                             int64_t count, const int32_t *row, int size, int scatter) {
  int32_t ids[4096];
  int pos;
  tpu_group_assignment g = rows_from(row, &size, r, ids, &row, &pos);
  float *data = malloc((size_t)count * sizeof *data);
  for (int64_t i = 0; i < count; i++) data[i] = fold_value(r, i);
  tpu_tensor *x = tensor_from_floats(dtype, &count, 1, data, count), *y = NULL;
  free(data);
  if (scatter) OK(tpu_reduce_scatter(ctx, x, op, 0, &g, &y, NULL));
  else OK(tpu_all_reduce(ctx, x, op, &g, &y, NULL));
  tpu_tensor *yf = NULL;
  const void *p;
  if (tpu_tensor_cast(y, TPU_FLOAT, &yf) != TPU_OK || tpu_tensor_data(yf, &p) != TPU_OK) abort();
  const int64_t out_count = scatter ? count / size : count, base = scatter ? pos * out_count : 0;
  /* TEST_REORDERED_FOLDS (tests/check_mpi.sh): MPI folds one member per task in its
   * own order, bfloat16 and half rounding each pair: within the error bound of a
   * reordered fold, 2 * size rounding units of the dtype times the sum of the
   * magnitudes (the product's for PROD), instead of bit for bit. */
  const int reordered = getenv("TEST_REORDERED_FOLDS") != NULL;
  const double unit = dtype == TPU_BFLOAT16 ? 0x1p-8 : dtype == TPU_HALF ? 0x1p-11 : 0x1p-24;
  for (int64_t j = 0; j < out_count; j++) {
    const int64_t i = base + j;
    float acc = 0;
    double magnitude = 0;
    for (int k = 0; k < size; k++) {
      float v = fold_value(row[k], i);
      round_to(dtype, &v);
      acc = k == 0 ? v : op == TPU_REDUCE_PROD ? acc * v : acc + v;
      magnitude += fabs(v);
    }
    if (op == TPU_REDUCE_MEAN) acc /= (float)size, magnitude /= size;
    if (op == TPU_REDUCE_PROD) magnitude = fabs(acc);
    round_to(dtype, &acc);
    float got = ((const float *)p)[j];
    EXPECT(reordered ? fabs((double)got - acc) <= 2 * size * unit * magnitude : memcmp(&got, &acc, sizeof acc) == 0,
           "%s %s op %d count %lld over %d members: replica %d element %lld is %.9g, want %.9g",
           scatter ? "reduce_scatter" : "all_reduce", dname(dtype), op, (long long)count, size, r,
           (long long)i, got, acc);
    if (memcmp(&got, &acc, sizeof acc) != 0) break;
  }
  tpu_tensor_release(yf);
  tpu_tensor_release(x);
  tpu_tensor_release(y);
  return TPU_OK;
}

/* A reduce_scatter of a [d0, d1] tensor along `axis` over groups of `size` members,
 * the first `row` (NULL: every replica) and the other replicas in rows of the same
 * size, checked against the fold in member order that one process computes:
 * fold_value inputs (bfloat16 accumulated in float32 and rounded once), or value()
 * for int32 (exact; MEAN truncates). TEST_REORDERED_FOLDS: floats within the bound
 * of a reordered fold, as check_fold. */
static tpu_status check_scatter(tpu_replica_context *ctx, int r, tpu_dtype dtype, tpu_reduce_op op, int axis,
                                int64_t d0, int64_t d1, const int32_t *row, int size) {
  int32_t ids[4096];
  int pos;
  tpu_group_assignment g = rows_from(row, &size, r, ids, &row, &pos);
  const int integer = dtype == TPU_INT32;
  const int64_t dims[2] = {d0, d1}, n = d0 * d1;
  float *data = malloc((size_t)n * sizeof *data);
  for (int64_t i = 0; i < n; i++) data[i] = integer ? (float)value(r, i) : fold_value(r, i);
  tpu_tensor *x = tensor_from_floats(dtype, dims, 2, data, n), *y = NULL, *yf = NULL;
  free(data);
  OK(tpu_reduce_scatter(ctx, x, op, axis, &g, &y, NULL));
  const int64_t o0 = axis == 0 ? d0 / size : d0, o1 = axis == 1 ? d1 / size : d1;
  int64_t got_dims[2] = {0, 0};
  size_t rank = 0;
  OK(tpu_tensor_dims(y, got_dims, 2, &rank));
  EXPECT(rank == 2 && got_dims[0] == o0 && got_dims[1] == o1, "reduce_scatter axis %d: result is [%lld, %lld]",
         axis, (long long)got_dims[0], (long long)got_dims[1]);
  const void *p;
  if (tpu_tensor_cast(y, TPU_FLOAT, &yf) != TPU_OK || tpu_tensor_data(yf, &p) != TPU_OK) abort();
  const int reordered = getenv("TEST_REORDERED_FOLDS") != NULL && !integer;
  const double unit = dtype == TPU_BFLOAT16 ? 0x1p-8 : 0x1p-24;
  for (int64_t j = 0; j < o0 * o1; j++) {
    const int64_t i0 = j / o1 + (axis == 0 ? pos * o0 : 0), i1 = j % o1 + (axis == 1 ? pos * o1 : 0);
    const int64_t i = i0 * d1 + i1;
    float acc = 0;
    double magnitude = 0, sum = 0;
    for (int k = 0; k < size; k++) {
      float v = integer ? (float)value(row[k], i) : fold_value(row[k], i);
      round_to(dtype, &v);
      acc = k == 0 ? v : acc + v;
      sum += v;
      magnitude += fabs(v);
    }
    if (op == TPU_REDUCE_MEAN) acc = integer ? (float)(int64_t)(sum / size) : acc / (float)size, magnitude /= size;
    round_to(dtype, &acc);
    float got = ((const float *)p)[j];
    EXPECT(reordered ? fabs((double)got - acc) <= 2 * size * unit * magnitude : memcmp(&got, &acc, sizeof acc) == 0,
           "reduce_scatter %s op %d axis %d of [%lld, %lld] over %d members: replica %d element %lld is %.9g, "
           "want %.9g",
           dname(dtype), op, axis, (long long)d0, (long long)d1, size, r, (long long)j, got, acc);
    if (reordered ? fabs((double)got - acc) > 2 * size * unit * magnitude : memcmp(&got, &acc, sizeof acc) != 0)
      break;
  }
  tpu_tensor_release(yf);
  tpu_tensor_release(x);
  tpu_tensor_release(y);
  return TPU_OK;
}

/* Reduce-scatters of float32, int32 and bfloat16, SUM and MEAN: along axis 0, along
 * axis 1 with contiguous blocks ([1, n]) and strided ones, over every replica, pairs
 * {k, k + n/2} (one member per task on 2 tasks of 2 cores), one member per task in
 * task order, and members against task order. */
static tpu_status check_scatters(tpu_replica_context *ctx, int r) {
  const tpu_dtype types[] = {TPU_FLOAT, TPU_INT32, TPU_BFLOAT16};
  const tpu_reduce_op ops[] = {TPU_REDUCE_SUM, TPU_REDUCE_MEAN};
  int32_t reversed[4096], spread[4096], pair[2] = {0, g_n / 2};
  for (int k = 0; k < g_n; k++) reversed[k] = g_n - 1 - k;
  for (int t = 0; t < g_tasks; t++) spread[t] = t * g_local;
  for (int d = 0; d < 3; d++)
    for (int o = 0; o < 2; o++) {
      OK(check_scatter(ctx, r, types[d], ops[o], 0, (int64_t)g_n * 64, 33, NULL, 0));
      OK(check_scatter(ctx, r, types[d], ops[o], 1, 1, (int64_t)g_n * 5000, NULL, 0));
      OK(check_scatter(ctx, r, types[d], ops[o], 1, 3, (int64_t)g_n * 700, reversed, g_n));
      if (g_n % 2 == 0) OK(check_scatter(ctx, r, types[d], ops[o], 1, 1, 2 * 3001, pair, 2));
      if (g_tasks > 1 && g_n % g_tasks == 0)
        OK(check_scatter(ctx, r, types[d], ops[o], 0, (int64_t)g_tasks * 1000, 7, spread, g_tasks));
    }
  return TPU_OK;
}

/* An all-reduce above 4 KiB: the members on one task share one buffer (the data
 * pointers agree), and a member that writes through tpu_tensor_mutable_data gets a
 * copy of its own: the others still read the sum. */
static const void *g_result_data[4096];
static tpu_status check_shared_results(tpu_replica_context *ctx, int r) {
  int64_t count = 4096;
  tpu_tensor *x = make(TPU_FLOAT, r, &count, 1), *y = NULL;
  OK(tpu_all_reduce(ctx, x, TPU_REDUCE_SUM, NULL, &y, NULL));
  const void *p;
  OK(tpu_tensor_data(y, &p));
  g_result_data[r] = p;
  OK(tpu_barrier(ctx, NULL));
  const int first = g_task * g_local;
  EXPECT(g_result_data[r] == g_result_data[first],
         "replica %d's all-reduce result is not the buffer of replica %d on the same task", r, first);
  void *w;
  OK(tpu_tensor_mutable_data(y, &w));
  ((float *)w)[0] = (float)-r;
  OK(tpu_barrier(ctx, NULL));
  double want1 = 0;
  for (int k = 0; k < g_n; k++) want1 += value(k, 1);
  EXPECT(element(y, 0) == -r && element(y, 1) == want1,
         "replica %d after writing its shared result: element 0 %g (want %d), element 1 %g (want %g)",
         r, element(y, 0), -r, element(y, 1), want1);
  tpu_tensor_release(y);
  tpu_tensor_release(x);
  return TPU_OK;
}

static tpu_status check_others(tpu_replica_context *ctx, int r) {
  const int n = g_n;
  int64_t d2[2] = {3, 4};
  /* all_gather along axis 0: [n * 3, 4], member k's rows at k * 3. */
  tpu_tensor *x = make(TPU_INT32, r, d2, 2), *y = NULL;
  OK(tpu_all_gather(ctx, x, 0, NULL, &y, NULL));
  for (int k = 0; k < n; k++)
    for (int64_t i = 0; i < 12; i++)
      EXPECT(element(y, k * 12 + i) == value(k, i), "all_gather: replica %d row block %d", r, k);
  tpu_tensor_release(y);
  /* broadcast from the group's last member (another task's, for most replicas). */
  OK(tpu_broadcast(ctx, x, n - 1, NULL, &y, NULL));
  for (int64_t i = 0; i < 12; i++)
    EXPECT(element(y, i) == value(n - 1, i), "broadcast: replica %d element %lld", r, (long long)i);
  tpu_tensor_release(y);
  tpu_tensor_release(x);
  /* collective_permute: the ring r -> r + 1, across tasks. */
  int32_t pairs[2 * 4096];
  for (int k = 0; k < n; k++) {
    pairs[2 * k] = k;
    pairs[2 * k + 1] = (k + 1) % n;
  }
  int64_t len = 5;
  x = make(TPU_FLOAT, r, &len, 1);
  OK(tpu_collective_permute(ctx, x, pairs, n, &y, NULL));
  for (int64_t i = 0; i < len; i++)
    EXPECT(element(y, i) == value((r + n - 1) % n, i), "collective_permute: replica %d", r);
  tpu_tensor_release(y);
  /* Only r = 0 -> 1: everyone else gets zeros. */
  int32_t one[2] = {0, 1};
  OK(tpu_collective_permute(ctx, x, one, 1, &y, NULL));
  EXPECT(element(y, 0) == (r == 1 ? value(0, 0) : 0), "collective_permute one pair: replica %d", r);
  tpu_tensor_release(y);
  tpu_tensor_release(x);
  /* reduce_scatter of [n * 2] elements: replica r keeps elements [2r, 2r + 2) of the sum. */
  int64_t rs = 2 * n;
  x = make(TPU_FLOAT, r, &rs, 1);
  OK(tpu_reduce_scatter(ctx, x, TPU_REDUCE_SUM, 0, NULL, &y, NULL));
  for (int64_t i = 0; i < 2; i++) {
    double want = 0;
    for (int k = 0; k < n; k++) want += value(k, 2 * r + i);
    EXPECT(element(y, i) == want, "reduce_scatter: replica %d element %lld: %g, want %g", r,
           (long long)i, element(y, i), want);
  }
  tpu_tensor_release(y);
  tpu_tensor_release(x);
  /* all_to_all of [n, 3], split along 0 and concatenated along 0: replica r gets row r
   * of every member, in member order. */
  int64_t a2a[2] = {n, 3};
  x = make(TPU_INT32, r, a2a, 2);
  OK(tpu_all_to_all(ctx, x, 0, 0, n, NULL, &y, NULL));
  for (int k = 0; k < n; k++)
    for (int64_t j = 0; j < 3; j++)
      EXPECT(element(y, k * 3 + j) == value(k, r * 3 + j), "all_to_all: replica %d from %d", r, k);
  tpu_tensor_release(y);
  tpu_tensor_release(x);
  /* all_to_all of [2, 2n] split along 1 (blocks not contiguous in the input) and
   * concatenated along 0: replica r gets [2n, 2], rows 2k, 2k + 1 columns 2r, 2r + 1 of k. */
  int64_t cols[2] = {2, 2 * n};
  x = make(TPU_INT32, r, cols, 2);
  OK(tpu_all_to_all(ctx, x, 0, 1, n, NULL, &y, NULL));
  for (int k = 0; k < n; k++)
    for (int64_t i = 0; i < 2; i++)
      for (int64_t j = 0; j < 2; j++)
        EXPECT(element(y, (2 * k + i) * 2 + j) == value(k, i * 2 * n + 2 * r + j),
               "all_to_all split along 1: replica %d from %d", r, k);
  tpu_tensor_release(y);
  tpu_tensor_release(x);
  OK(tpu_barrier(ctx, NULL));
  return TPU_OK;
}

static tpu_status collectives_fn(tpu_replica_context *ctx, tpu_tensor *const *in, int nin,
                                 tpu_tensor **out, int nout, void *user) {
  (void)in, (void)nin, (void)out, (void)nout, (void)user;
  int r;
  OK(tpu_replica_context_replica_id(ctx, &r));
  const int64_t sizes[] = {1, 1000, 3 << 20}; /* one element; several frames of 1 MiB */
  for (int i = 0; i < 3; i++) {
    OK(check_all_reduce(ctx, r, TPU_FLOAT, TPU_REDUCE_SUM, sizes[i], 0));
    OK(check_all_reduce(ctx, r, TPU_FLOAT, TPU_REDUCE_SUM, sizes[i], 1));
  }
  OK(check_all_reduce(ctx, r, TPU_INT32, TPU_REDUCE_SUM, 1000, 0));
  OK(check_all_reduce(ctx, r, TPU_INT32, TPU_REDUCE_MAX, 1000, 1));
  OK(check_all_reduce(ctx, r, TPU_INT32, TPU_REDUCE_MIN, 1000, 0));
  OK(check_all_reduce(ctx, r, TPU_INT32, TPU_REDUCE_MEAN, 1000, 0));
  OK(check_all_reduce(ctx, r, TPU_FLOAT, TPU_REDUCE_MEAN, 1000, 1));
  OK(check_all_reduce(ctx, r, TPU_BFLOAT16, TPU_REDUCE_SUM, 1000, 0));
  OK(check_all_reduce(ctx, r, TPU_DOUBLE, TPU_REDUCE_PROD, 10, 1));
  /* Every numeric dtype: MIN and MAX; SUM where the sums (at most 96 per member) fit. */
  const tpu_dtype every[] = {TPU_FLOAT, TPU_DOUBLE, TPU_INT32, TPU_UINT8, TPU_INT16, TPU_INT8,
                             TPU_INT64, TPU_BFLOAT16, TPU_HALF, TPU_UINT32, TPU_UINT64};
  for (size_t d = 0; d < sizeof every / sizeof every[0]; d++) {
    OK(check_all_reduce(ctx, r, every[d], TPU_REDUCE_MAX, 333, 0));
    OK(check_all_reduce(ctx, r, every[d], TPU_REDUCE_MIN, 333, 1));
    if (every[d] != TPU_INT8 && every[d] != TPU_UINT8)
      OK(check_all_reduce(ctx, r, every[d], TPU_REDUCE_SUM, 333, d % 2));
  }
  /* Bit for bit in member order: each task's members in a run (the fold passes along
   * the tasks), the same reversed, and one member per task (inputs travel). */
  int32_t reversed[4096], spread[4096];
  for (int k = 0; k < g_n; k++) reversed[k] = g_n - 1 - k;
  for (int t = 0; t < g_tasks; t++) spread[t] = t * g_local;
  const int64_t fold_sizes[] = {1000, 100003, (1 << 20) + 5};
  for (int i = 0; i < 3; i++) {
    OK(check_fold(ctx, r, TPU_FLOAT, TPU_REDUCE_SUM, fold_sizes[i], NULL, 0, 0));
    OK(check_fold(ctx, r, TPU_FLOAT, TPU_REDUCE_SUM, fold_sizes[i], reversed, g_n, 0));
  }
  if (g_tasks > 1) OK(check_fold(ctx, r, TPU_FLOAT, TPU_REDUCE_SUM, 100003, spread, g_tasks, 0));
  /* Over shared memory, from 3 tasks and 128 KiB, rows of one member per task (or exact
   * partials) are staged through windows in chunks of 512 KiB: several chunks, an odd
   * tail, member order against task order, and 2-byte types. */
  int32_t spread_back[4096];
  for (int t = 0; t < g_tasks; t++) spread_back[t] = (g_tasks - 1 - t) * g_local + g_local - 1;
  if (g_tasks > 1) {
    OK(check_fold(ctx, r, TPU_FLOAT, TPU_REDUCE_SUM, (1 << 20) + 5, spread, g_tasks, 0));
    OK(check_fold(ctx, r, TPU_FLOAT, TPU_REDUCE_SUM, (1 << 20) + 5, spread_back, g_tasks, 0));
    OK(check_fold(ctx, r, TPU_FLOAT, TPU_REDUCE_MEAN, 300007, spread_back, g_tasks, 0));
    OK(check_fold(ctx, r, TPU_BFLOAT16, TPU_REDUCE_SUM, 300007, spread_back, g_tasks, 0));
    OK(check_fold(ctx, r, TPU_HALF, TPU_REDUCE_MEAN, 300007, spread, g_tasks, 0));
  }
  OK(check_all_reduce(ctx, r, TPU_INT32, TPU_REDUCE_SUM, (1 << 18) + 3, 0));
  OK(check_all_reduce(ctx, r, TPU_INT32, TPU_REDUCE_MAX, (1 << 18) + 3, 0));
  if (g_tasks >= 3 && g_local == 2 && g_n % 4 == 0) {
    /* Small rows whose tasks hold 2, 1 and 1 members: blocks of unequal size. */
    const int32_t uneven[4] = {0, 1, 2, 4};
    OK(check_fold(ctx, r, TPU_FLOAT, TPU_REDUCE_SUM, 1000, uneven, 4, 0));
  }
  OK(check_fold(ctx, r, TPU_FLOAT, TPU_REDUCE_MEAN, 100003, reversed, g_n, 0));
  OK(check_fold(ctx, r, TPU_FLOAT, TPU_REDUCE_PROD, 100003, NULL, 0, 0));
  OK(check_fold(ctx, r, TPU_BFLOAT16, TPU_REDUCE_SUM, 300007, NULL, 0, 0));
  OK(check_fold(ctx, r, TPU_HALF, TPU_REDUCE_MEAN, 300007, reversed, g_n, 0));
  OK(check_fold(ctx, r, TPU_FLOAT, TPU_REDUCE_SUM, (int64_t)g_n * 40000, reversed, g_n, 1));
  OK(check_scatters(ctx, r));
  OK(check_others(ctx, r));
  OK(check_shared_results(ctx, r));
  return TPU_OK;
}

static tpu_status identity_fn(tpu_replica_context *ctx, tpu_tensor *const *in, int nin,
                              tpu_tensor **out, int nout, void *user) {
  (void)nin, (void)nout, (void)user;
  return tpu_cross_replica_sum(ctx, in[0], NULL, &out[0], NULL);
}

static int scenario_collectives(tpu_system *system) {
  /* The same topology bytes on every task: task 0 compares everyone's. */
  char key[64];
  unsigned char mine[4096], theirs[4096];
  size_t len = 0, len2 = 0;
  if (tpu_system_serialized_topology(system, mine, sizeof mine, &len) != TPU_OK) return 1;
  snprintf(key, sizeof key, "test/topology/%d", g_task);
  if (tpu_kv_set(system, key, mine, len) != TPU_OK) return 1;
  if (g_task == 0)
    for (int t = 0; t < g_tasks; t++) {
      snprintf(key, sizeof key, "test/topology/%d", t);
      tpu_status s = tpu_kv_get(system, key, 30000, theirs, sizeof theirs, &len2);
      EXPECT(s == TPU_OK && len2 == len && !memcmp(mine, theirs, len),
             "task %d's topology differs from task 0's", t);
    }
  /* The topology init gave is the system's: the same bytes on every task. */
  len2 = 0;
  EXPECT(tpu_topology_serialize(g_init_topology, theirs, sizeof theirs, &len2) == TPU_OK &&
         len2 == len && !memcmp(mine, theirs, len), "init's topology differs from the system's");
  tpu_topology *topology = NULL;
  int tasks = 0, per = 0;
  tpu_system_topology(system, &topology);
  tpu_topology_num_tasks(topology, &tasks);
  tpu_topology_num_devices_per_task(topology, &per);
  tpu_topology_release(topology);
  EXPECT(tasks == g_tasks && per == g_local, "topology has %d tasks of %d devices", tasks, per);
  /* The default assignment puts replica r on task r / cores, as the steps do. */
  tpu_device_assignment *da = NULL;
  if (tpu_system_default_device_assignment(system, g_n, &da) == TPU_OK) {
    for (int r = 0; r < g_n; r++) {
      int task = -1;
      tpu_device_assignment_task(da, r, 0, &task);
      EXPECT(task == r / g_local, "default assignment: replica %d on task %d", r, task);
    }
    tpu_device_assignment_release(da);
  } else {
    EXPECT(0, "default assignment: %s", tpu_last_error());
  }
  /* One replica: it runs on task 0; the other tasks run nothing and still end the step. */
  int64_t one = 1;
  tpu_tensor *in = make(TPU_FLOAT, 0, &one, 1), *ins[1] = {in}, *outs[1] = {NULL};
  tpu_status s = tpu_replicate(system, identity_fn, NULL, 1, 1, ins, 1, outs, NULL);
  EXPECT(s == TPU_OK && (g_task == 0) == (outs[0] != NULL), "a one-replica step: %s: %s",
         tpu_status_name(s), tpu_last_error());
  tpu_tensor_release(outs[0]);
  tpu_tensor_release(in);
  s = tpu_replicate(system, collectives_fn, NULL, g_n, 0, NULL, 0, NULL, NULL);
  EXPECT(s == TPU_OK, "the step failed: %s: %s", tpu_status_name(s), tpu_last_error());
  /* Twice: the second step reuses the connections. */
  s = tpu_replicate(system, collectives_fn, NULL, g_n, 0, NULL, 0, NULL, NULL);
  EXPECT(s == TPU_OK, "the second step failed: %s: %s", tpu_status_name(s), tpu_last_error());
  return 0;
}

static int scenario_kv(tpu_system *system) {
  char key[64], buf[64];
  size_t len = 0;
  snprintf(key, sizeof key, "kv/task%d", g_task);
  EXPECT(tpu_kv_set(system, key, "v", 1) == TPU_OK, "set %s", key);
  EXPECT(tpu_kv_set(system, key, "w", 1) == TPU_ALREADY_EXISTS, "second set of %s", key);
  for (int t = 0; t < g_tasks; t++) {
    snprintf(key, sizeof key, "//kv///task%d/", t); /* normalized to kv/task<t> */
    tpu_status s = tpu_kv_get(system, key, 30000, buf, sizeof buf, &len);
    EXPECT(s == TPU_OK && len == 1 && buf[0] == 'v', "get %s: %s", key, tpu_last_error());
  }
  EXPECT(tpu_kv_try_get(system, "kv/none", buf, sizeof buf, &len) == TPU_NOT_FOUND, "try_get");
  /* DTensor's shutdown is refused with several tasks; the system goes on (the barriers). */
  tpu_status refused = tpu_shutdown_accelerator_system(system);
  EXPECT(refused == TPU_FAILED_PRECONDITION && strstr(tpu_last_error(), "multi-client"),
         "shutdown_accelerator_system: %s: %s", tpu_status_name(refused), tpu_last_error());
  tpu_status s = tpu_kv_get(system, "kv/none", 200, buf, sizeof buf, &len);
  EXPECT(s == TPU_DEADLINE_EXCEEDED && strstr(tpu_last_error(), "kv/none"), "blocking get: %s",
         tpu_status_name(s));
  EXPECT(tpu_wait_at_barrier(system, "kv-done", 30000, NULL, 0) == TPU_OK, "barrier: %s",
         tpu_last_error());
  /* The last task arrives 1 s late at a 200 ms barrier of all: the others are told who is missing. */
  if (g_task == g_tasks - 1) {
    sleep_ms(1000);
    tpu_wait_at_barrier(system, "late", 200, NULL, 0);
  } else {
    s = tpu_wait_at_barrier(system, "late", 200, NULL, 0);
    snprintf(key, sizeof key, "task %d", g_tasks - 1);
    EXPECT(s == TPU_DEADLINE_EXCEEDED && strstr(tpu_last_error(), key),
           "late barrier: %s: %s", tpu_status_name(s), tpu_last_error());
  }
  /* A barrier of tasks 0 and 1 only; the reuse of an id. */
  int32_t two[2] = {0, 1};
  if (g_task < 2)
    for (int i = 0; i < 2; i++)
      EXPECT(tpu_wait_at_barrier(system, "pair", 30000, two, 2) == TPU_OK, "pair barrier: %s",
             tpu_last_error());
  EXPECT(tpu_wait_at_barrier(system, "end", 30000, NULL, 0) == TPU_OK, "end barrier: %s",
         tpu_last_error());
  return 0;
}

typedef struct fault {
  const char *kind;
  int victim;
} fault;

static int64_t fault_elements(void) {
  const char *n = getenv("TEST_FAULT_ELEMENTS");
  return n ? atoll(n) : 1000;
}

/* The collective the tasks are in when the victim fails: x's all-reduce, or with
 * TEST_FAULT_COLLECTIVE=reduce_scatter a reduce-scatter of 240 elements a replica;
 * for the victim of a mismatch, another collective. */
static tpu_status fault_collective(tpu_replica_context *ctx, const fault *f, int r, tpu_tensor *x) {
  tpu_tensor *y = NULL, *big = NULL;
  const char *which = getenv("TEST_FAULT_COLLECTIVE"), *other = getenv("TEST_MISMATCH");
  tpu_status s;
  if (!strcmp(f->kind, "mismatch") && g_task == f->victim) {
    int64_t len = fault_elements() + (other && !strcmp(other, "shape"));
    if (other && (!strcmp(other, "shape") || !strcmp(other, "dtype")))
      big = make(strcmp(other, "dtype") ? TPU_FLOAT : TPU_INT32, r, &len, 1);
    if (other && !strcmp(other, "max")) s = tpu_all_reduce(ctx, x, TPU_REDUCE_MAX, NULL, &y, NULL);
    else if (big) s = tpu_cross_replica_sum(ctx, big, NULL, &y, NULL);
    else s = tpu_all_gather(ctx, x, 0, NULL, &y, NULL);
  } else if (which && !strcmp(which, "reduce_scatter")) {
    int64_t len = 240 * (int64_t)g_n;
    big = make(TPU_FLOAT, r, &len, 1);
    s = tpu_reduce_scatter(ctx, big, TPU_REDUCE_SUM, 0, NULL, &y, NULL);
  } else {
    s = tpu_cross_replica_sum(ctx, x, NULL, &y, NULL);
  }
  tpu_tensor_release(y);
  tpu_tensor_release(big);
  return s;
}

static tpu_status fault_fn(tpu_replica_context *ctx, tpu_tensor *const *in, int nin,
                           tpu_tensor **out, int nout, void *user) {
  (void)in, (void)nin, (void)out, (void)nout;
  const fault *f = user;
  int r;
  OK(tpu_replica_context_replica_id(ctx, &r));
  int64_t len = fault_elements();
  tpu_tensor *x = make(TPU_FLOAT, r, &len, 1), *y = NULL;
  tpu_status s = tpu_cross_replica_sum(ctx, x, NULL, &y, NULL); /* one that works */
  tpu_tensor_release(y);
  y = NULL;  /* a failing call below leaves it alone */
  if (s == TPU_OK && g_task == f->victim && r == g_task * g_local) {
    if (!strcmp(f->kind, "kill")) raise(SIGKILL);
    if (!strcmp(f->kind, "stop")) raise(SIGSTOP);
    if (!strcmp(f->kind, "fail")) {
      tpu_tensor_release(x);
      return tpu_replica_context_fail(ctx, TPU_DATA_LOSS, "injected failure");
    }
  }
  if (s == TPU_OK && g_task == f->victim && !strcmp(f->kind, "skip")) {
    tpu_tensor_release(x);
    return TPU_OK;
  }
  if (s == TPU_OK) s = fault_collective(ctx, f, r, x);
  tpu_tensor_release(x);
  return s;
}

static int scenario_fault(tpu_system *system, const char *kind, int victim) {
  fault f = {kind, victim};
  if (!strcmp(kind, "quit") && g_task == victim) return 0; /* main shuts down */
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  tpu_status s = tpu_replicate(system, fault_fn, &f, g_n, 0, NULL, 0, NULL, NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double seconds = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
  const char *msg = tpu_last_error();
  char who[32];
  snprintf(who, sizeof who, "task %d", victim);
  printf("task %d: %s of task %d: %s after %.1f s: %s\n", g_task, kind, victim, tpu_status_name(s),
         seconds, msg);
  if (!strcmp(kind, "kill")) {
    EXPECT(s == TPU_UNAVAILABLE && strstr(msg, who), "want TPU_UNAVAILABLE naming %s", who);
    /* Only the calls that wait for other tasks return it: this task's own answer as before. */
    int cores = 0;
    tpu_topology *topology = NULL;
    tpu_tensor *t = NULL;
    int64_t two = 2;
    OK(tpu_system_num_cores(system, &cores));
    EXPECT(cores == g_local, "tpu_system_num_cores after the loss: %d, want %d", cores, g_local);
    OK(tpu_system_topology(system, &topology));
    OK(tpu_tensor_create(TPU_FLOAT, &two, 1, NULL, 0, &t));
    tpu_topology_release(topology);
    tpu_tensor_release(t);
    /* ... and every later step. */
    s = tpu_replicate(system, fault_fn, &(fault){"none", -1}, g_n, 0, NULL, 0, NULL, NULL);
    EXPECT(s == TPU_UNAVAILABLE && strstr(tpu_last_error(), who), "the step after the loss: %s: %s",
           tpu_status_name(s), tpu_last_error());
  } else if (!strcmp(kind, "quit"))
    EXPECT(s == TPU_FAILED_PRECONDITION && strstr(msg, who) && strstr(msg, "shut down"),
           "want TPU_FAILED_PRECONDITION naming %s, which shut down", who);
  else if (!strcmp(kind, "stop"))
    EXPECT(s == TPU_DEADLINE_EXCEEDED && strstr(msg, who), "want TPU_DEADLINE_EXCEEDED naming %s", who);
  else if (!strcmp(kind, "skip"))
    EXPECT((s == TPU_FAILED_PRECONDITION && strstr(msg, who)) ||
               (g_task == victim && s != TPU_OK),
           "want TPU_FAILED_PRECONDITION naming %s", who);
  else if (!strcmp(kind, "mismatch"))
    EXPECT(s == TPU_INVALID_ARGUMENT && (g_task == victim || strstr(msg, who)),
           "want TPU_INVALID_ARGUMENT naming %s", who);
  else if (!strcmp(kind, "fail")) {
    EXPECT(s == TPU_DATA_LOSS && strstr(msg, "injected failure"), "want the injected TPU_DATA_LOSS");
    fault none = {"none", -1};
    s = tpu_replicate(system, fault_fn, &none, g_n, 0, NULL, 0, NULL, NULL);
    EXPECT(s == TPU_OK, "the step after the failure: %s: %s", tpu_status_name(s), tpu_last_error());
  }
  return 0;
}

static tpu_status soak_fn(tpu_replica_context *ctx, tpu_tensor *const *in, int nin,
                          tpu_tensor **out, int nout, void *user) {
  (void)in, (void)nin, (void)out, (void)nout, (void)user;
  int r;
  OK(tpu_replica_context_replica_id(ctx, &r));
  return check_all_reduce(ctx, r, TPU_FLOAT, TPU_REDUCE_SUM, 4096, 0);
}

/* ---- feed: infeed and outfeed across tasks ---------------------------------------
 * Queues of every replica (g_n): each task enqueues infeed for its own replicas,
 * a step with infeed_queue sums every replica's tuple and each replica puts (sum, r)
 * on the outfeed, which its own task dequeues. A replica of another task is
 * TPU_INVALID_ARGUMENT on both queues, naming it and its task; so is a step whose
 * device assignment runs a replica on another task than the queue serves it from. */
static tpu_outfeed_queue *g_outfeed;

static tpu_status feed_fn(tpu_replica_context *ctx, tpu_tensor *const *in, int nin,
                          tpu_tensor **out, int nout, void *user) {
  (void)nout, (void)user;
  int r;
  OK(tpu_replica_context_replica_id(ctx, &r));
  tpu_tensor *sum = NULL, *id = NULL;
  OK(tpu_cross_replica_sum(ctx, in[nin - 1], NULL, &sum, NULL)); /* the infeed tuple's one element */
  int32_t r32 = r;
  OK(tpu_tensor_create(TPU_INT32, NULL, 0, &r32, sizeof r32, &id));
  tpu_tensor *tuple[2] = {sum, id};
  tpu_status s = tpu_outfeed_enqueue(ctx, g_outfeed, tuple, 2);
  out[0] = sum;
  tpu_tensor_release(id);
  return s;
}

static int scenario_feed(tpu_system *system) {
  tpu_dtype in_types[1] = {TPU_FLOAT}, out_types[2] = {TPU_FLOAT, TPU_INT32};
  tpu_shape vec = {1, {2}}, scalar = {0, {0}}, in_shapes[1] = {vec}, out_shapes[2] = {vec, scalar};
  tpu_infeed_queue *infeed = NULL;
  OK(tpu_infeed_queue_create(system, g_n, 1, in_types, in_shapes, 0, &infeed));
  OK(tpu_outfeed_queue_create(system, g_n, 2, out_types, out_shapes, 0, &g_outfeed));
  int64_t two = 2;
  const int steps = 2, first = g_task * g_local;
  for (int k = 0; k < steps; k++)
    for (int r = first; r < first + g_local; r++) {
      float v[2] = {(float)r, (float)k};
      tpu_tensor *t = NULL;
      OK(tpu_tensor_create(TPU_FLOAT, &two, 1, v, sizeof v, &t));
      OK(tpu_infeed_enqueue(infeed, r, &t, 1));
      tpu_tensor_release(t);
    }
  /* Another task's replica: refused on both queues, naming it and its task. */
  const int other = (first + g_local) % g_n, other_task = other / g_local;
  char who[64];
  snprintf(who, sizeof who, "replica %d runs on task %d", other, other_task);
  tpu_tensor *t = NULL, *pair[2] = {NULL, NULL};
  float z[2] = {0, 0};
  OK(tpu_tensor_create(TPU_FLOAT, &two, 1, z, sizeof z, &t));
  tpu_status s = tpu_infeed_enqueue(infeed, other, &t, 1);
  printf("task %d: infeed enqueue for replica %d: %s: %s\n", g_task, other, tpu_status_name(s), tpu_last_error());
  EXPECT(s == TPU_INVALID_ARGUMENT && strstr(tpu_last_error(), who), "want TPU_INVALID_ARGUMENT naming %s", who);
  tpu_tensor_release(t);
  s = tpu_outfeed_dequeue(g_outfeed, other, pair, 2);
  printf("task %d: outfeed dequeue for replica %d: %s: %s\n", g_task, other, tpu_status_name(s), tpu_last_error());
  EXPECT(s == TPU_INVALID_ARGUMENT && strstr(tpu_last_error(), who), "want TPU_INVALID_ARGUMENT naming %s", who);

  tpu_step_options o = TPU_STEP_OPTIONS_INIT;
  o.infeed_queue = infeed;
  tpu_tensor **outs = calloc((size_t)g_n, sizeof *outs);
  for (int k = 0; k < steps && !g_failures; k++) {
    s = tpu_replicate(system, feed_fn, NULL, g_n, 0, NULL, 1, outs, &o);
    EXPECT(s == TPU_OK, "feed step %d: %s: %s", k, tpu_status_name(s), tpu_last_error());
    /* Every replica's infeed summed: sum of r, and k * g_n. */
    const double want0 = (double)g_n * (g_n - 1) / 2, want1 = (double)k * g_n;
    for (int r = first; s == TPU_OK && r < first + g_local; r++) {
      EXPECT(outs[r] && element(outs[r], 0) == want0 && element(outs[r], 1) == want1,
             "step %d replica %d output", k, r);
      OK(tpu_outfeed_dequeue(g_outfeed, r, pair, 2));
      const void *id = NULL;
      tpu_tensor_data(pair[1], &id);
      EXPECT(element(pair[0], 0) == want0 && element(pair[0], 1) == want1 && *(const int32_t *)id == r,
             "step %d: replica %d's outfeed tuple", k, r);
      tpu_tensor_release(pair[0]);
      tpu_tensor_release(pair[1]);
    }
    for (int r = 0; r < g_n; r++) tpu_tensor_release(outs[r]), outs[r] = NULL;
  }
  /* A device assignment that runs each replica on another task than the queue's
   * (replica r on the core of replica n-1-r): the replica's dequeue names the mismatch. */
  tpu_device_assignment *da = NULL, *reversed = NULL;
  tpu_topology *topology = NULL;
  int32_t *cores = calloc((size_t)g_n * 4, sizeof *cores), *swapped = calloc((size_t)g_n * 4, sizeof *swapped);
  size_t count = 0;
  OK(tpu_system_default_device_assignment(system, g_n, &da));
  OK(tpu_device_assignment_core_assignment(da, cores, (size_t)g_n * 4, &count));
  for (int r = 0; r < g_n; r++) memcpy(&swapped[4 * r], &cores[4 * (g_n - 1 - r)], 4 * sizeof *cores);
  OK(tpu_device_assignment_topology(da, &topology));
  OK(tpu_device_assignment_create(topology, swapped, g_n, 1, &reversed));
  o.device_assignment = reversed;
  s = tpu_replicate(system, feed_fn, NULL, g_n, 0, NULL, 1, outs, &o);
  printf("task %d: feed step with the replicas on other tasks: %s: %s\n", g_task, tpu_status_name(s), tpu_last_error());
  EXPECT(s == TPU_INVALID_ARGUMENT && strstr(tpu_last_error(), "in this step, but the queue serves it from task"),
         "want TPU_INVALID_ARGUMENT naming the replica's task and the queue's");
  tpu_device_assignment_release(reversed);
  tpu_device_assignment_release(da);
  tpu_topology_release(topology);
  free(cores);
  free(swapped);
  free(outs);
  tpu_infeed_queue_release(infeed);
  tpu_outfeed_queue_release(g_outfeed);
  return 0;
}

/* ---- feed_cores: an infeed queue with replicas of 2 cores split over 2 tasks ------
 * 2 tasks of 2 cores, 2 replicas of 2 cores: replica r's logical core 0 on device r of
 * task 0 (the task that serves both replicas, r / 2), its logical core 1 on device r
 * of task 1. Task 0 enqueues (float32[4] = 10r + i cut along dimension 0, int32[2]
 * whole, shard dimension -1); logical core c must get 10r + 2c + {0, 1} and the whole
 * int32[2] = {r, 7}: TensorFlow's InfeedQueue sharding (tpu_sharding.py
 * get_sharded_shape) over the cores of a replica, which may run on other tasks. */
static tpu_status feed_cores_fn(tpu_replica_context *ctx, tpu_tensor *const *in, int nin,
                                tpu_tensor **out, int nout, void *user) {
  (void)out, (void)nout, (void)user;
  int r = -1, c = -1;
  OK(tpu_replica_context_replica_id(ctx, &r));
  OK(tpu_replica_context_logical_core(ctx, &c));
  int64_t d[2];
  size_t rank = 0;
  const void *a = NULL, *b = NULL;
  if (nin != 2 || tpu_tensor_dims(in[0], d, 2, &rank) != TPU_OK || rank != 1 || d[0] != 2 ||
      tpu_tensor_dims(in[1], d, 2, &rank) != TPU_OK || rank != 1 || d[0] != 2) {
    printf("task %d: replica %d core %d: wrong infeed shapes\n", g_task, r, c);
    return TPU_INTERNAL;
  }
  tpu_tensor_data(in[0], &a);
  tpu_tensor_data(in[1], &b);
  const float *f = a;
  const int32_t *i = b;
  if (f[0] != (float)(10 * r + 2 * c) || f[1] != (float)(10 * r + 2 * c + 1) || i[0] != r || i[1] != 7) {
    printf("task %d: replica %d core %d: got %g %g %d %d\n", g_task, r, c, f[0], f[1], i[0], i[1]);
    return TPU_INTERNAL;
  }
  printf("task %d: replica %d core %d: piece ok\n", g_task, r, c);
  return TPU_OK;
}

static int scenario_feed_cores(tpu_system *system) {
  EXPECT(g_tasks == 2 && g_local == 2, "feed_cores needs 2 tasks of 2 cores");
  if (g_failures) return 1;
  const tpu_dtype types[2] = {TPU_FLOAT, TPU_INT32};
  const tpu_shape shapes[2] = {{1, {4}}, {1, {2}}};
  tpu_infeed_queue *infeed = NULL;
  OK(tpu_infeed_queue_create(system, 2, 2, types, shapes, 0, &infeed));
  const int dims[2] = {0, -1};
  OK(tpu_infeed_queue_set_shard_dimensions(infeed, dims, 2));
  if (g_task == 0)
    for (int r = 0; r < 2; r++) {
      float v[4];
      for (int k = 0; k < 4; k++) v[k] = (float)(10 * r + k);
      int32_t w[2] = {r, 7};
      tpu_tensor *t[2] = {NULL, NULL};
      OK(tpu_tensor_create(TPU_FLOAT, shapes[0].dims, 1, v, sizeof v, &t[0]));
      OK(tpu_tensor_create(TPU_INT32, shapes[1].dims, 1, w, sizeof w, &t[1]));
      OK(tpu_infeed_enqueue(infeed, r, t, 2));
      tpu_tensor_release(t[0]);
      tpu_tensor_release(t[1]);
    }
  tpu_topology *topology = NULL;
  OK(tpu_system_topology(system, &topology));
  int32_t coords[2][2][4];
  for (int r = 0; r < 2; r++)
    for (int c = 0; c < 2; c++) OK(tpu_topology_device_coordinates(topology, c, r, coords[r][c], 4, &(size_t){0}));
  tpu_device_assignment *da = NULL;
  OK(tpu_device_assignment_create(topology, &coords[0][0][0], 2, 2, &da));
  tpu_step_options o = TPU_STEP_OPTIONS_INIT;
  o.device_assignment = da;
  o.infeed_queue = infeed;
  tpu_status s = tpu_replicate(system, feed_cores_fn, NULL, 2, 0, NULL, 0, NULL, &o);
  EXPECT(s == TPU_OK, "feed_cores step: %s: %s", tpu_status_name(s), tpu_last_error());
  tpu_device_assignment_release(da);
  tpu_topology_release(topology);
  tpu_infeed_queue_release(infeed);
  return 0;
}

/* ---- model_parallel: replicas of several cores, every group mode x every collective ----
 * Eight cores in all (2 tasks of 4, or one process of 8). Each layout is an explicit
 * device assignment: the cores of a replica on different tasks ("split") or on one
 * task, replicas in another order than the tasks ("local"). Every participant checks
 * each collective against a naive reference (float sums folded in member order: bit
 * for bit) and prints a digest of all its results, which tests/check_cluster.sh and
 * tests/check_mpi.sh compare with one process's. Then a step with a partitioned
 * input and outputs (mp_io). */
typedef struct mp_layout {
  const char *name;
  int replicas, cores;
  int global[8]; /* the global core of participant r * cores + c */
} mp_layout;

static const mp_layout g_mp_layouts[] = {
    {"k2-split", 4, 2, {0, 4, 1, 5, 2, 6, 3, 7}},  /* core 0 on task 0, core 1 on task 1 */
    {"k2-local", 4, 2, {4, 5, 6, 7, 0, 1, 2, 3}},  /* replicas 0, 1 on task 1 */
    {"k4-split", 2, 4, {0, 4, 1, 5, 2, 6, 3, 7}},  /* cores alternate between tasks */
    {"k4-local", 2, 4, {0, 1, 2, 3, 4, 5, 6, 7}},
    {"k4-one", 1, 4, {0, 4, 1, 5}}, /* one replica on both tasks: only its partitioned step */
};
static const char *const g_mode_names[] = {"CROSS_REPLICA", "CROSS_PARTITION",
                                           "CROSS_REPLICA_AND_PARTITION", "FLATTENED_ID"};

/* Participant p's input element i: fold_value of a seed no other participant has. */
static float mp_value(int p, int64_t i) { return fold_value(1000 + p, i); }

/* Element i of the sum of the members' inputs, folded left in member order. */
static float mp_fold(const int32_t *members, int size, int64_t i) {
  float acc = mp_value(members[0], i);
  for (int q = 1; q < size; q++) acc += mp_value(members[q], i);
  return acc;
}

static tpu_tensor *mp_input(int p, const int64_t *dims, int rank) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= dims[d];
  float *data = malloc((size_t)n * sizeof *data);
  for (int64_t i = 0; i < n; i++) data[i] = mp_value(p, i);
  tpu_tensor *t = tensor_from_floats(TPU_FLOAT, dims, rank, data, n);
  free(data);
  return t;
}

/* The groups a check passes in `mode` (ids of the mode's kind: reversed pairs
 * {m-1-g, g}, or for flattened ids two rows of four across tasks), into ids. */
static tpu_group_assignment mp_groups(int mode, int R, int k, int32_t *ids) {
  static const int32_t flat[8] = {7, 2, 4, 1, 0, 5, 3, 6};
  if (mode == TPU_GROUP_MODE_FLATTENED_ID) {
    memcpy(ids, flat, sizeof flat);
    return (tpu_group_assignment){ids, 2, 4};
  }
  const int m = mode == TPU_GROUP_MODE_CROSS_PARTITION ? k : R;
  for (int g = 0; g < m / 2; g++) ids[2 * g] = m - 1 - g, ids[2 * g + 1] = g;
  return (tpu_group_assignment){ids, m / 2, 2};
}

/* Participant p's group among `groups` in `mode` (NULL: the mode's default), as
 * include/tpurt/collectives.h defines it: members (participant ids) and p's position. */
static int mp_my_group(int mode, const tpu_group_assignment *groups, int R, int k, int p, int32_t *members,
                       int *pos) {
  const int r = p / k, c = p % k, n = R * k;
  const int m = mode == TPU_GROUP_MODE_CROSS_PARTITION ? k : mode == TPU_GROUP_MODE_FLATTENED_ID ? n : R;
  int32_t all[8];
  for (int i = 0; i < m; i++) all[i] = i;
  const int32_t *ids = groups ? groups->replica_ids : all;
  const int ng = groups ? groups->num_groups : 1, gs = groups ? groups->group_size : m;
  const int mine = mode == TPU_GROUP_MODE_CROSS_PARTITION ? c : mode == TPU_GROUP_MODE_FLATTENED_ID ? p : r;
  for (int g = 0; g < ng; g++)
    for (int i = 0; i < gs; i++) {
      if (ids[g * gs + i] != mine) continue;
      int size = 0;
      for (int j = 0; j < gs; j++) {
        const int id = ids[g * gs + j];
        if (mode == TPU_GROUP_MODE_CROSS_REPLICA) members[size++] = id * k + c;
        else if (mode == TPU_GROUP_MODE_CROSS_PARTITION) members[size++] = r * k + id;
        else if (mode == TPU_GROUP_MODE_FLATTENED_ID) members[size++] = id;
        else
          for (int cc = 0; cc < k; cc++) members[size++] = id * k + cc;
      }
      *pos = mode == TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION ? i * k + c : i;
      return size;
    }
  abort(); /* every id is in one group */
}

/* FNV-1a over bytes: equal digests for bit-for-bit equal results. */
static uint64_t digest_bytes(uint64_t h, const void *p, size_t bytes) {
  for (size_t i = 0; i < bytes; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
  return h;
}

static uint64_t mp_digest(uint64_t h, const tpu_tensor *t) {
  const void *p = NULL;
  size_t bytes = 0;
  if (tpu_tensor_data(t, &p) != TPU_OK || tpu_tensor_byte_size(t, &bytes) != TPU_OK) abort();
  return digest_bytes(h, p, bytes);
}

/* y[j] == want_expr (of j) bit for bit for j < n; names the first difference with the
 * caller's lay, mode, r and c. */
#define MP_CHECK(what, y, n, want_expr)                                                          \
  do {                                                                                           \
    const void *d_ = NULL;                                                                       \
    tpu_tensor_data((y), &d_);                                                                   \
    for (int64_t j = 0; j < (n); j++) {                                                          \
      const float want_ = (want_expr), got_ = ((const float *)d_)[j];                            \
      if (memcmp(&got_, &want_, sizeof got_) != 0) {                                             \
        EXPECT(0, "%s %s %s: replica %d core %d element %lld is %.9g, want %.9g", lay->name,     \
               g_mode_names[mode], what, r, c, (long long)j, got_, want_);                       \
        break;                                                                                   \
      }                                                                                          \
    }                                                                                            \
  } while (0)

/* Every collective in one group mode; *h accumulates the results' digest. */
static tpu_status mp_mode(tpu_replica_context *ctx, const mp_layout *lay, int mode, int r, int c, uint64_t *h) {
  const int k = lay->cores, R = lay->replicas, n = R * k, p = r * k + c;
  tpu_collective_options o = TPU_COLLECTIVE_OPTIONS_INIT;
  o.group_mode = mode;
  int32_t ids[8], members[8];
  int pos = 0;
  tpu_group_assignment g = mp_groups(mode, R, k, ids);
  const int size = mp_my_group(mode, &g, R, k, p, members, &pos);
  tpu_tensor *x, *y = NULL;
  /* all_reduce SUM: small (inputs gathered) and above 64 KiB (folds along tasks, slices). */
  const int64_t counts[2] = {1000, 30011};
  for (int s = 0; s < 2; s++) {
    x = mp_input(p, &counts[s], 1);
    OK(tpu_all_reduce(ctx, x, TPU_REDUCE_SUM, &g, &y, &o));
    MP_CHECK("all_reduce", y, counts[s], mp_fold(members, size, j));
    *h = mp_digest(*h, y);
    tpu_tensor_release(x), tpu_tensor_release(y), y = NULL;
  }
  /* cross_replica_sum with the mode's default group (every id of its kind). */
  int32_t dmembers[8];
  int dpos = 0;
  const int dsize = mp_my_group(mode, NULL, R, k, p, dmembers, &dpos);
  const int64_t small = 37;
  x = mp_input(p, &small, 1);
  OK(tpu_cross_replica_sum(ctx, x, NULL, &y, &o));
  MP_CHECK("cross_replica_sum (default groups)", y, small, mp_fold(dmembers, dsize, j));
  *h = mp_digest(*h, y);
  tpu_tensor_release(x), tpu_tensor_release(y), y = NULL;
  /* all_gather of [2, 3] along 0: member q's rows at 2q. */
  const int64_t d23[2] = {2, 3};
  x = mp_input(p, d23, 2);
  OK(tpu_all_gather(ctx, x, 0, &g, &y, &o));
  MP_CHECK("all_gather", y, 6 * size, mp_value(members[j / 6], j % 6));
  *h = mp_digest(*h, y);
  tpu_tensor_release(y), y = NULL;
  /* broadcast from the group's last member. */
  OK(tpu_broadcast(ctx, x, size - 1, &g, &y, &o));
  MP_CHECK("broadcast", y, 6, mp_value(members[size - 1], j));
  *h = mp_digest(*h, y);
  tpu_tensor_release(x), tpu_tensor_release(y), y = NULL;
  /* reduce_scatter of [size * 5] along 0: block pos of the member-order fold. */
  const int64_t rs = 5 * (int64_t)size;
  x = mp_input(p, &rs, 1);
  OK(tpu_reduce_scatter(ctx, x, TPU_REDUCE_SUM, 0, &g, &y, &o));
  MP_CHECK("reduce_scatter", y, 5, mp_fold(members, size, pos * 5 + j));
  *h = mp_digest(*h, y);
  tpu_tensor_release(x), tpu_tensor_release(y), y = NULL;
  /* all_to_all of [size, 3], split and concatenated along 0: row pos of every member. */
  const int64_t a2a[2] = {size, 3};
  x = mp_input(p, a2a, 2);
  OK(tpu_all_to_all(ctx, x, 0, 0, size, &g, &y, &o));
  MP_CHECK("all_to_all", y, 3 * size, mp_value(members[j / 3], pos * 3 + j % 3));
  *h = mp_digest(*h, y);
  tpu_tensor_release(y), y = NULL;
  /* collective_permute in the mode's ids: replicas r -> r + 1 (per core), cores
   * c -> c + 1 but the last (core 0 gets zeros), flattened p -> p + 3. XLA has no
   * CROSS_REPLICA_AND_PARTITION permute (model_parallel_skip checks its error). */
  int32_t pairs[16];
  int np = 0, from = -1;
  if (mode == TPU_GROUP_MODE_CROSS_REPLICA) {
    for (int q = 0; q < R; q++) pairs[2 * np] = q, pairs[2 * np + 1] = (q + 1) % R, np++;
    from = ((r + R - 1) % R) * k + c;
  } else if (mode == TPU_GROUP_MODE_CROSS_PARTITION) {
    for (int q = 0; q + 1 < k; q++) pairs[2 * np] = q, pairs[2 * np + 1] = q + 1, np++;
    from = c > 0 ? p - 1 : -1;
  } else if (mode == TPU_GROUP_MODE_FLATTENED_ID) {
    for (int q = 0; q < n; q++) pairs[2 * np] = q, pairs[2 * np + 1] = (q + 3) % n, np++;
    from = (p + n - 3) % n;
  }
  if (mode != TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION) {
    OK(tpu_collective_permute(ctx, x, pairs, np, &y, &o));
    MP_CHECK("collective_permute", y, 3 * size, from < 0 ? 0.0f : mp_value(from, j));
    *h = mp_digest(*h, y);
    tpu_tensor_release(y), y = NULL;
  }
  tpu_tensor_release(x);
  /* Groups of different sizes (issue 29; XLA's verifier allows them for all-reduce,
   * CheckReplicaGroups in xla/service/hlo_verifier.cc), where the mode has at least
   * four ids: {{m-1, 0, 1}, {2, ..., m-2}} in the mode's ids, rows preceded by their
   * lengths. all_reduce small and large, and broadcast from position 0. */
  const int m = mode == TPU_GROUP_MODE_CROSS_PARTITION ? k : mode == TPU_GROUP_MODE_FLATTENED_ID ? n : R;
  if (m >= 4) {
    int32_t rag[10], rmembers[8];
    int at = 0, rpos = 0, rsize = 0;
    rag[at++] = 3, rag[at++] = m - 1, rag[at++] = 0, rag[at++] = 1;
    rag[at++] = m - 3;
    for (int q = 2; q <= m - 2; q++) rag[at++] = q;
    const tpu_group_assignment rg = {rag, 2, TPU_GROUP_SIZE_RAGGED};
    /* p's group, as mp_my_group finds it in the uniform form of each row. */
    const int rows[2][2] = {{1, 3}, {5, m - 3}};
    for (int row = 0; row < 2 && rsize == 0; row++) {
      const tpu_group_assignment one = {rag + rows[row][0], 1, rows[row][1]};
      const int mine = mode == TPU_GROUP_MODE_CROSS_PARTITION ? c : mode == TPU_GROUP_MODE_FLATTENED_ID ? p : r;
      for (int i = 0; i < rows[row][1]; i++)
        if (rag[rows[row][0] + i] == mine) {
          /* mp_my_group over this row alone (the other ids are in the other row). */
          const int kk = mode == TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION ? k : 1;
          for (int j = 0; j < rows[row][1]; j++) {
            const int id = one.replica_ids[j];
            if (mode == TPU_GROUP_MODE_CROSS_REPLICA) rmembers[rsize++] = id * k + c;
            else if (mode == TPU_GROUP_MODE_CROSS_PARTITION) rmembers[rsize++] = r * k + id;
            else if (mode == TPU_GROUP_MODE_FLATTENED_ID) rmembers[rsize++] = id;
            else
              for (int cc = 0; cc < kk; cc++) rmembers[rsize++] = id * k + cc;
          }
          rpos = mode == TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION ? i * k + c : i;
        }
    }
    EXPECT(rsize > 0, "%s %s: participant %d is in no ragged group", lay->name, g_mode_names[mode], p);
    (void)rpos;
    for (int s = 0; s < 2; s++) {
      x = mp_input(p, &counts[s], 1);
      OK(tpu_all_reduce(ctx, x, TPU_REDUCE_SUM, &rg, &y, &o));
      MP_CHECK("all_reduce (groups of different sizes)", y, counts[s], mp_fold(rmembers, rsize, j));
      *h = mp_digest(*h, y);
      tpu_tensor_release(y), y = NULL;
      OK(tpu_broadcast(ctx, x, 0, &rg, &y, &o));
      MP_CHECK("broadcast (groups of different sizes)", y, counts[s], mp_value(rmembers[0], j));
      *h = mp_digest(*h, y);
      tpu_tensor_release(x), tpu_tensor_release(y), y = NULL;
    }
  }
  OK(tpu_barrier(ctx, &o));
  return TPU_OK;
}

static tpu_status mp_fn(tpu_replica_context *ctx, tpu_tensor *const *in, int nin, tpu_tensor **out, int nout,
                        void *user) {
  (void)in, (void)nin, (void)out, (void)nout;
  const mp_layout *lay = user;
  int r, c, k;
  OK(tpu_replica_context_replica_id(ctx, &r));
  OK(tpu_replica_context_logical_core(ctx, &c));
  OK(tpu_replica_context_num_cores_per_replica(ctx, &k));
  EXPECT(k == lay->cores, "%s: %d cores per replica, want %d", lay->name, k, lay->cores);
  uint64_t h = 1469598103934665603ull;
  for (int mode = 0; mode < 4; mode++) OK(mp_mode(ctx, lay, mode, r, c, &h));
  printf("task %d: model_parallel %s replica %d core %d digest %016llx\n", g_task, lay->name, r, c,
         (unsigned long long)h);
  return TPU_OK;
}

/* A device assignment of replicas x cores participants, participant q on global core
 * global[q] (the default assignment of all g_n cores puts replica g on global core g),
 * checked: each on task global[q] / g_local. `name` labels the checks. */
static tpu_device_assignment *assignment_on(tpu_system *system, const char *name, const int *global, int replicas,
                                            int cores) {
  tpu_device_assignment *da = NULL, *out = NULL;
  tpu_topology *topology = NULL;
  int32_t coords[64 * 4], layout[64 * 4];
  size_t count = 0;
  if (g_n > 64 || tpu_system_default_device_assignment(system, g_n, &da) != TPU_OK ||
      tpu_device_assignment_core_assignment(da, coords, (size_t)g_n * 4, &count) != TPU_OK ||
      count != (size_t)g_n * 4 || tpu_device_assignment_topology(da, &topology) != TPU_OK)
    abort();
  const int n = replicas * cores;
  for (int q = 0; q < n; q++) memcpy(&layout[4 * q], &coords[4 * global[q]], 4 * sizeof *coords);
  tpu_status s = tpu_device_assignment_create(topology, layout, replicas, cores, &out);
  EXPECT(s == TPU_OK, "%s: tpu_device_assignment_create: %s", name, tpu_last_error());
  for (int q = 0; s == TPU_OK && q < n; q++) {
    int task = -1;
    tpu_device_assignment_task(out, q / cores, q % cores, &task);
    EXPECT(task == global[q] / g_local, "%s: replica %d core %d on task %d", name, q / cores, q % cores, task);
  }
  tpu_device_assignment_release(da);
  tpu_topology_release(topology);
  return out;
}

static tpu_device_assignment *mp_assignment(tpu_system *system, const mp_layout *lay) {
  return assignment_on(system, lay->name, lay->global, lay->replicas, lay->cores);
}

/* Partitioned inputs and outputs: replica r's input is [4, 6] of mp_value(100 + r),
 * cut [2, k / 2] over its cores; core c returns its tile plus c, as output 0 (logical
 * core 0's) and output 1 (assembled from every core's tile). */
static tpu_status mp_io_fn(tpu_replica_context *ctx, tpu_tensor *const *in, int nin, tpu_tensor **out,
                           int nout, void *user) {
  (void)nin, (void)nout, (void)user;
  int c;
  OK(tpu_replica_context_logical_core(ctx, &c));
  int64_t dims[2] = {0, 0};
  size_t rank = 0, bytes = 0;
  const void *p = NULL;
  OK(tpu_tensor_dims(in[0], dims, 2, &rank));
  OK(tpu_tensor_data(in[0], &p));
  OK(tpu_tensor_byte_size(in[0], &bytes));
  float *v = malloc(bytes ? bytes : 1);
  for (size_t i = 0; i < bytes / sizeof *v; i++) v[i] = ((const float *)p)[i] + (float)c;
  OK(tpu_tensor_create(TPU_FLOAT, dims, (int)rank, v, bytes, &out[0]));
  OK(tpu_tensor_create(TPU_FLOAT, dims, (int)rank, v, bytes, &out[1]));
  free(v);
  return TPU_OK;
}

/* The io step of one layout: checks every output this task gets (output 1 assembled
 * from tiles that, in the split layouts, come from both tasks) against the cut and
 * the assembly done by hand, and prints its digest. */
static void mp_io(tpu_system *system, const mp_layout *lay, tpu_step_options *o) {
  const int R = lay->replicas, k = lay->cores, q = k / 2;
  const int64_t dims[2] = {4, 6};
  tpu_tensor *ins[8] = {NULL}, *outs[16] = {NULL};
  for (int r = 0; r < R; r++) {
    float v[24];
    for (int i = 0; i < 24; i++) v[i] = mp_value(100 + r, i);
    if (tpu_tensor_create(TPU_FLOAT, dims, 2, v, sizeof v, &ins[r]) != TPU_OK) abort();
  }
  const tpu_partition_spec cut = {2, {2, q}}, whole = {0, {0}};
  const tpu_partition_spec out_specs[2] = {whole, cut};
  o->input_partitions = &cut;
  o->num_input_partitions = 1;
  o->output_partitions = out_specs;
  o->num_output_partitions = 2;
  tpu_status s = tpu_replicate(system, mp_io_fn, NULL, R, 1, ins, 2, outs, o);
  EXPECT(s == TPU_OK, "%s: the io step failed: %s: %s", lay->name, tpu_status_name(s), tpu_last_error());
  for (int r = 0; s == TPU_OK && r < R; r++)
    for (int out = 0; out < 2; out++) {
      const tpu_tensor *y = outs[r * 2 + out];
      if (y == NULL) continue; /* logical core 0 runs on another task */
      const int64_t rows = out ? 4 : 2, cols = out ? 6 : 6 / q;
      const void *d = NULL;
      tpu_tensor_data(y, &d);
      for (int64_t i = 0; i < rows * cols; i++) {
        const int64_t row = i / cols, col = i % cols;
        const int core = (int)(row / 2) * q + (int)(col / (6 / q));
        const float want = mp_value(100 + r, row * 6 + col) + (float)(out ? core : 0);
        const float got = ((const float *)d)[i];
        if (memcmp(&got, &want, sizeof got) != 0) {
          EXPECT(0, "%s io: replica %d output %d element %lld is %.9g, want %.9g", lay->name, r, out,
                 (long long)i, got, want);
          break;
        }
      }
      printf("task %d: model_parallel_io %s replica %d output %d digest %016llx\n", g_task, lay->name, r, out,
             (unsigned long long)mp_digest(1469598103934665603ull, y));
    }
  for (int i = 0; i < 16; i++) tpu_tensor_release(outs[i]);
  for (int r = 0; r < R; r++) tpu_tensor_release(ins[r]);
  o->input_partitions = NULL, o->num_input_partitions = 0;
  o->output_partitions = NULL, o->num_output_partitions = 0;
}

static int scenario_model_parallel(tpu_system *system) {
  if (g_n != 8) {
    EXPECT(0, "model_parallel needs 8 cores in all, not %d", g_n);
    return 1;
  }
  tpu_step_options o = TPU_STEP_OPTIONS_INIT;
  for (size_t l = 0; l < sizeof g_mp_layouts / sizeof g_mp_layouts[0]; l++) {
    const mp_layout *lay = &g_mp_layouts[l];
    tpu_device_assignment *da = mp_assignment(system, lay);
    if (!da) return 1;
    o.device_assignment = da;
    if (lay->replicas > 1) { /* the group tables assume several replicas */
      tpu_status s = tpu_replicate(system, mp_fn, (void *)lay, lay->replicas, 0, NULL, 0, NULL, &o);
      EXPECT(s == TPU_OK, "%s: the step failed: %s: %s", lay->name, tpu_status_name(s), tpu_last_error());
    }
    mp_io(system, lay, &o);
    tpu_device_assignment_release(da);
  }
  return 0;
}

/* In the k4-split layout (cores 1 and 3 of each replica on task 1, 0 and 2 on task
 * 0), replica 1 core 1 skips a cross-partition all-reduce of its replica's four cores,
 * or calls it in another group mode; every core permutes in CROSS_REPLICA_AND_PARTITION;
 * every core of task 1 calls the all-reduce in another mode: every task gets
 * TPU_FAILED_PRECONDITION or TPU_INVALID_ARGUMENT naming "replica 1 core 1", the mode,
 * or the other task by its cores; then the next step works. (Two members a task: point
 * to point, even over MPI, so nothing is left in flight.) */
enum { MP_NO_FAULT, MP_SKIP, MP_OTHER_MODE, MP_TASK_OTHER_MODE, MP_PERMUTE_MODE };

static tpu_status mp_fault_fn(tpu_replica_context *ctx, tpu_tensor *const *in, int nin, tpu_tensor **out,
                              int nout, void *user) {
  (void)in, (void)nin, (void)out, (void)nout;
  const int fault = *(const int *)user;
  int r, c;
  OK(tpu_replica_context_replica_id(ctx, &r));
  OK(tpu_replica_context_logical_core(ctx, &c));
  const int victim = r == 1 && c == 1;
  tpu_collective_options o = TPU_COLLECTIVE_OPTIONS_INIT;
  o.group_mode = TPU_GROUP_MODE_CROSS_PARTITION;
  const int64_t len = 100;
  tpu_tensor *x = mp_input(r * 4 + c, &len, 1), *y = NULL;
  tpu_status s = tpu_cross_replica_sum(ctx, x, NULL, &y, &o); /* one that works */
  tpu_tensor_release(y), y = NULL;
  if ((victim && fault == MP_OTHER_MODE) || (c % 2 == 1 && fault == MP_TASK_OTHER_MODE))
    o.group_mode = TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION;
  const int32_t pairs[2] = {0, 1};
  if (s == TPU_OK && fault == MP_PERMUTE_MODE) {
    o.group_mode = TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION;
    s = tpu_collective_permute(ctx, x, pairs, 1, &y, &o);
  } else if (s == TPU_OK && !(victim && fault == MP_SKIP)) {
    s = tpu_cross_replica_sum(ctx, x, NULL, &y, &o);
  }
  tpu_tensor_release(y);
  tpu_tensor_release(x);
  return s;
}

static int scenario_model_parallel_skip(tpu_system *system) {
  if (g_n != 8) {
    EXPECT(0, "model_parallel_skip needs 8 cores in all, not %d", g_n);
    return 1;
  }
  tpu_step_options o = TPU_STEP_OPTIONS_INIT;
  tpu_device_assignment *da = mp_assignment(system, &g_mp_layouts[2]);
  if (!da) return 1;
  o.device_assignment = da;
  const int faults[4] = {MP_SKIP, MP_OTHER_MODE, MP_PERMUTE_MODE, MP_TASK_OTHER_MODE}, none = MP_NO_FAULT;
  const char *fault_names[4] = {"skip", "other mode", "permute mode", "task other mode"};
  const tpu_status want[4] = {TPU_FAILED_PRECONDITION, TPU_INVALID_ARGUMENT, TPU_INVALID_ARGUMENT,
                              TPU_INVALID_ARGUMENT};
  /* Across tasks, each names the other by its cores. */
  const char *says[4] = {"replica 1 core 1 finished its computation", "replica 1 core 1 called",
                         "collective_permute has no group mode CROSS_REPLICA_AND_PARTITION",
                         g_task == 0 ? "task 1 (replica 0 core 1, replica 0 core 3, replica 1 core 1, replica 1 core 3)"
                                     : "task 0 (replica 0 core 0, replica 0 core 2, replica 1 core 0, replica 1 core 2)"};
  for (int f = 0; f < (g_tasks > 1 ? 4 : 3); f++) {
    tpu_status s = tpu_replicate(system, mp_fault_fn, (void *)&faults[f], 2, 0, NULL, 0, NULL, &o);
    const char *msg = tpu_last_error();
    printf("task %d: model_parallel_skip %s: %s: %s\n", g_task, fault_names[f], tpu_status_name(s),
           msg);
    EXPECT(s == want[f] && strstr(msg, says[f]), "want %s naming '%s'", tpu_status_name(want[f]), says[f]);
    s = tpu_replicate(system, mp_fault_fn, (void *)&none, 2, 0, NULL, 0, NULL, &o);
    EXPECT(s == TPU_OK, "the step after the fault: %s: %s", tpu_status_name(s), tpu_last_error());
  }
  tpu_device_assignment_release(da);
  return 0;
}

/* ---- embedding: tables sharded over every core of every task ----------------------
 * Five tables (Adagrad, SGD, Adagrad, SGD of 3 rows, fewer than the cores, non-lazy
 * Adam) sharded DIV_DEFAULT or MOD (argv[2]) over every core of the system, six features on
 * them (two on one table, "tag" left out by every third participant): COO and ragged, with
 * and without weights, combiners SUM, MEAN and SQRTN in turn, empty samples, and ids
 * repeated within a sample, a replica, across replicas and across tasks; then replicas
 * of 2 cores spanning tasks, in an order that is not the tasks'. Each step prints every
 * participant's digest of its activations; at the end each task prints the
 * digest of every shard it holds, per table and variable (its rows in order): a run
 * across tasks must print what one process of as many cores prints. "tags" takes a
 * dynamic learning rate. Between the steps: a replica failing after its gradients, one
 * enqueueing an id out of range, one giving another learning rate, and (across tasks)
 * a step without a computation on a task that holds shards (looking up its rows, or
 * only others' with a table updating every row): each the named error, no
 * row changed on any task, and the next step works; a step without ids works. */
enum { EMB_FEATURES = 6, EMB_TAG = 3, EMB_MAX_IDS = 64 };
enum { EMB_NO_FAULT, EMB_FAIL_AFTER_GRADIENTS, EMB_BAD_ID, EMB_OTHER_RATE, EMB_EMPTY };
static const int g_emb_ragged[EMB_FEATURES] = {0, 1, 0, 1, 1, 0}, g_emb_weighted[EMB_FEATURES] = {0, 1, 1, 0, 1, 0};
static int64_t g_emb_samples[EMB_FEATURES], g_emb_vocabulary[EMB_FEATURES];
static const char *g_emb_strategy;

/* The configuration of this scenario, serialized, for tpu_system_options. */
static int emb_config(const char *strategy, char *out, size_t capacity, size_t *count) {
  char json[2048];
  snprintf(json, sizeof json,
           "{\"sharding_strategy\": \"%s\", \"mode\": \"TRAINING\", \"table_descriptor\": ["
           "{\"name\": \"users\", \"vocabulary_size\": 37, \"dimension\": 4, \"optimization_parameters\":"
           " {\"learning_rate\": {\"constant\": 0.1}, \"adagrad\": {\"initial_accumulator\": 0.1}}},"
           "{\"name\": \"items\", \"vocabulary_size\": \"50\", \"dimension\": 8, \"optimization_parameters\":"
           " {\"learning_rate\": {\"constant\": 0.05}, \"stochastic_gradient_descent\": {}}},"
           "{\"name\": \"tags\", \"vocabulary_size\": 23, \"dimension\": 3, \"optimization_parameters\":"
           " {\"learning_rate\": {\"dynamic\": {\"tag\": 0}}, \"adagrad\": {\"initial_accumulator\": 0.5}}},"
           "{\"name\": \"flags\", \"vocabulary_size\": 3, \"dimension\": 2, \"optimization_parameters\":"
           " {\"learning_rate\": {\"constant\": 0.5}, \"stochastic_gradient_descent\": {}}},"
           "{\"name\": \"dense\", \"vocabulary_size\": 8, \"dimension\": 2, \"optimization_parameters\":"
           " {\"learning_rate\": {\"constant\": 0.01}, \"adam\": {\"beta1\": 0.9, \"beta2\": 0.999,"
           " \"epsilon\": 1e-8, \"use_non_lazy_adam\": true}}}],"
           "\"feature_descriptor\": [{\"name\": \"user\", \"table_id\": 0, \"input_shape\": [4]},"
           " {\"name\": \"item\", \"table_id\": 1, \"input_shape\": [3]},"
           " {\"name\": \"history\", \"table_id\": 1, \"input_shape\": [2, 2]},"
           " {\"name\": \"tag\", \"table_id\": 2, \"input_shape\": [5]},"
           " {\"name\": \"flag\", \"table_id\": 3, \"input_shape\": [3]},"
           " {\"name\": \"dense\", \"table_id\": 4, \"input_shape\": [2]}]}",
           !strcmp(strategy, "mod") ? "MOD" : "DIV_DEFAULT");
  tpu_status s = tpu_embedding_config_from_json(json, out, capacity, count);
  if (s != TPU_OK) printf("task ?: embedding configuration: %s: %s\n", tpu_status_name(s), tpu_last_error());
  return s == TPU_OK && *count <= capacity ? 0 : 1;
}

static uint32_t emb_hash(int a, int b, int c, int d) {
  uint32_t h = (uint32_t)a * 2654435761u ^ ((uint32_t)b * 40503u + 977u) ^ (uint32_t)c * 0x9e3779b9u ^
               (uint32_t)d * 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return h;
}

typedef struct emb_batch {
  int64_t ids[EMB_MAX_IDS], sample[EMB_MAX_IDS], splits[EMB_MAX_IDS];
  float weights[EMB_MAX_IDS];
} emb_batch;

/* Replica r's ids of feature f at step k: sample s has (s + r + k + f) % 4 ids (none
 * for some), the first and third one of the ids 0..3 that every replica looks up (so
 * twice in one sample), the second anywhere in the table; COO lists the samples
 * backwards. */
static void emb_make(int k, int r, int f, emb_batch *b, tpu_embedding_feature_batch *fb) {
  const int64_t S = g_emb_samples[f], V = g_emb_vocabulary[f];
  const int ragged = g_emb_ragged[f];
  size_t n = 0;
  b->splits[0] = 0;
  for (int64_t i = 0; i < S; i++) {
    const int64_t s = ragged ? i : S - 1 - i;
    const int count = (int)((s + r + k + f) % 4);
    for (int j = 0; j < count; j++) {
      const uint32_t h = emb_hash(k, r, f * 16 + (int)s, j);
      b->ids[n] = j == 1 ? (int64_t)(h % (uint32_t)V) : (k + s) % 4 % V;
      b->sample[n] = s;
      b->weights[n] = 0.5f + (float)((h >> 8) & 0xffff) / 65536.0f * 1.5f;
      n++;
    }
    b->splits[i + 1] = (int64_t)n;
  }
  memset(fb, 0, sizeof *fb);
  fb->feature = f;
  fb->ids = b->ids;
  fb->num_ids = n;
  if (ragged) fb->row_splits = b->splits, fb->num_row_splits = (size_t)S + 1;
  else fb->sample_indices = b->sample;
  fb->weights = g_emb_weighted[f] ? b->weights : NULL;
  fb->combiner = (tpu_embedding_combiner)((f + k) % 3);
}

typedef struct emb_step {
  int k, fault, print;
} emb_step;

/* The learning rate of "tags" (dynamic, tag 0) at step k. */
static float emb_rate(int k) { return 0.2f + 0.05f * (float)k; }

/* One participant's step: enqueue (all features, but "tag" for every third
 * participant; none in an EMB_EMPTY step), activations (digested), gradients that
 * depend on them. */
static tpu_status emb_fn(tpu_replica_context *ctx, tpu_tensor *const *in, int nin, tpu_tensor **out, int nout,
                         void *user) {
  (void)in, (void)nin, (void)out, (void)nout;
  const emb_step *st = user;
  int r, c, k;
  OK(tpu_replica_context_replica_id(ctx, &r));
  OK(tpu_replica_context_logical_core(ctx, &c));
  OK(tpu_replica_context_num_cores_per_replica(ctx, &k));
  const int p = r * k + c, victim = p == g_n - 1; /* each core its own batch */
  emb_batch b[EMB_FEATURES];
  tpu_embedding_feature_batch fb[EMB_FEATURES];
  int enqueued[EMB_FEATURES], n = 0;
  for (int f = 0; f < EMB_FEATURES; f++) {
    enqueued[f] = st->fault != EMB_EMPTY && !(f == EMB_TAG && (p + st->k) % 3 == 0);
    if (enqueued[f]) emb_make(st->k, p, f, &b[f], &fb[n++]);
  }
  if (st->fault == EMB_BAD_ID && victim) b[0].ids[fb[0].num_ids - 1] = g_emb_vocabulary[0];
  tpu_tensor *act[EMB_FEATURES] = {NULL}, *grad[EMB_FEATURES] = {NULL};
  tpu_status s = tpu_embedding_enqueue(ctx, fb, n);
  if (s == TPU_OK) s = tpu_embedding_recv_activations(ctx, act, EMB_FEATURES);
  uint64_t h = 1469598103934665603ull;
  for (int f = 0; s == TPU_OK && f < EMB_FEATURES; f++) {
    EXPECT((act[f] != NULL) == enqueued[f], "step %d participant %d: activation %d is %s", st->k, p, f,
           act[f] ? "there" : "NULL");
    if (!act[f]) continue;
    h = mp_digest(h, act[f]);
    int64_t dims[4];
    size_t rank = 0, bytes = 0;
    const void *a = NULL;
    OK(tpu_tensor_dims(act[f], dims, 4, &rank));
    OK(tpu_tensor_data(act[f], &a));
    OK(tpu_tensor_byte_size(act[f], &bytes));
    float g[EMB_MAX_IDS * 8];
    for (size_t i = 0; i < bytes / sizeof(float); i++)
      g[i] = 0.25f * ((const float *)a)[i] + (float)(emb_hash(st->k, p, f, (int)i) & 0xffff) / 65536.0f - 0.5f;
    OK(tpu_tensor_create(TPU_FLOAT, dims, (int)rank, g, bytes, &grad[f]));
  }
  if (s == TPU_OK && st->print)
    printf("task %d: embedding %s step %d replica %d core %d digest %016llx\n", g_task, g_emb_strategy, st->k, r,
           c, (unsigned long long)h);
  const float rate = emb_rate(st->k) + (st->fault == EMB_OTHER_RATE && victim ? 1.0f : 0.0f);
  if (s == TPU_OK) s = tpu_embedding_send_gradients(ctx, grad, EMB_FEATURES, &rate, 1);
  for (int f = 0; f < EMB_FEATURES; f++) tpu_tensor_release(act[f]), tpu_tensor_release(grad[f]);
  if (s == TPU_OK && st->fault == EMB_FAIL_AFTER_GRADIENTS && victim)
    return tpu_replica_context_fail(ctx, TPU_DATA_LOSS, "injected embedding failure");
  return s;
}

/* A step whose replicas all run on task 0: each looks up row g_emb_lonely_id of
 * "users", and sends its gradients (zeros) if user is not NULL. */
static int64_t g_emb_lonely_id;
static tpu_status emb_lonely_fn(tpu_replica_context *ctx, tpu_tensor *const *in, int nin, tpu_tensor **out,
                                int nout, void *user) {
  (void)in, (void)nin, (void)out, (void)nout, (void)user;
  const int64_t sample = 0;
  tpu_embedding_feature_batch fb;
  memset(&fb, 0, sizeof fb);
  fb.feature = 0;
  fb.ids = &g_emb_lonely_id;
  fb.num_ids = 1;
  fb.sample_indices = &sample;
  tpu_tensor *act[EMB_FEATURES] = {NULL};
  tpu_status s = tpu_embedding_enqueue(ctx, &fb, 1);
  if (s == TPU_OK) s = tpu_embedding_recv_activations(ctx, act, EMB_FEATURES);
  if (s == TPU_OK && user) {
    const float rate = emb_rate(0);
    tpu_tensor *grad[EMB_FEATURES] = {NULL};
    int64_t dims[4];
    size_t rank = 0, bytes = 0;
    OK(tpu_tensor_dims(act[0], dims, 4, &rank));
    OK(tpu_tensor_byte_size(act[0], &bytes));
    float *zeros = calloc(1, bytes);
    OK(tpu_tensor_create(TPU_FLOAT, dims, (int)rank, zeros, bytes, &grad[0]));
    free(zeros);
    s = tpu_embedding_send_gradients(ctx, grad, EMB_FEATURES, &rate, 1);
    tpu_tensor_release(grad[0]);
  }
  for (int f = 0; f < EMB_FEATURES; f++) tpu_tensor_release(act[f]);
  return s;
}

/* Every shard this task holds, per table and variable: the digest of its rows in row
 * order, printed if `print`; returns the digest of them all. Retrieve must leave the
 * rows held elsewhere as they were, and the rows of a shard are its rows 0, 1, ... */
static uint64_t emb_tables_digest(tpu_system *system, int print) {
  uint64_t all = 1469598103934665603ull;
  int tables = 0;
  if (tpu_embedding_num_tables(system, &tables) != TPU_OK) abort();
  for (int t = 0; t < tables; t++) {
    int64_t V = 0;
    int32_t dim = 0;
    int nv = 0;
    char tname[64];
    size_t count = 0;
    if (tpu_embedding_table_shape(system, t, &V, &dim) != TPU_OK ||
        tpu_embedding_table_num_variables(system, t, &nv) != TPU_OK ||
        tpu_embedding_table_name(system, t, tname, sizeof tname, &count) != TPU_OK)
      abort();
    float *rows = malloc((size_t)(V * dim) * sizeof *rows);
    int *owner = malloc((size_t)V * sizeof *owner);
    int64_t next[4096] = {0};
    for (int64_t row = 0; row < V; row++) {
      int64_t shard_row = -1;
      if (tpu_embedding_row_owner(system, t, row, &owner[row], &shard_row) != TPU_OK) abort();
      EXPECT(owner[row] >= 0 && owner[row] < g_n && shard_row == next[owner[row]],
             "table %s row %lld: core %d row %lld, want that core's row %lld", tname, (long long)row, owner[row],
             (long long)shard_row, (long long)(owner[row] >= 0 && owner[row] < g_n ? next[owner[row]] : -1));
      if (owner[row] >= 0 && owner[row] < g_n) next[owner[row]]++;
    }
    for (int v = 0; v < nv; v++) {
      char vname[64];
      if (tpu_embedding_variable_name(system, t, v, vname, sizeof vname, &count) != TPU_OK) abort();
      for (int64_t i = 0; i < V * dim; i++) rows[i] = -12345.0f;
      tpu_status s = tpu_embedding_retrieve(system, t, v, 0, V, rows, (size_t)(V * dim), &count);
      EXPECT(s == TPU_OK && count == (size_t)(V * dim), "retrieve %s/%s: %s: %s", tname, vname,
             tpu_status_name(s), tpu_last_error());
      for (int64_t row = 0; row < V; row++)
        if (owner[row] / g_local != g_task)
          EXPECT(rows[row * dim] == -12345.0f, "retrieve %s/%s wrote row %lld, held by core %d", tname, vname,
                 (long long)row, owner[row]);
      for (int core = g_task * g_local; core < (g_task + 1) * g_local; core++) {
        uint64_t h = 1469598103934665603ull;
        for (int64_t row = 0; row < V; row++)
          if (owner[row] == core) h = digest_bytes(h, rows + row * dim, (size_t)dim * sizeof *rows);
        if (print)
          printf("task %d: embedding %s table %s variable %s shard %d digest %016llx\n", g_task, g_emb_strategy,
                 tname, vname, core, (unsigned long long)h);
        all = digest_bytes(all, &h, sizeof h);
      }
    }
    free(owner);
    free(rows);
  }
  return all;
}

/* A step that must fail: its status, the error naming `says`, and no row changed. */
static void emb_failing_step(const char *what, tpu_status want, const char *says, tpu_status s) {
  const char *msg = tpu_last_error();
  printf("task %d: embedding %s: %s: %s\n", g_task, what, tpu_status_name(s), msg);
  EXPECT(s == want && strstr(msg, says), "embedding %s: want %s naming '%s'", what, tpu_status_name(want), says);
}

static int scenario_embedding(tpu_system *system) {
  const char *want_names[EMB_FEATURES] = {"user", "item", "history", "tag", "flag", "dense"};
  int nf = 0;
  OK(tpu_embedding_num_features(system, &nf));
  EXPECT(nf == EMB_FEATURES, "%d features, want %d", nf, EMB_FEATURES);
  if (nf != EMB_FEATURES) return 1;
  for (int f = 0; f < EMB_FEATURES; f++) {
    char name[32];
    size_t count = 0, rank = 0;
    int t = 0;
    int32_t dim = 0;
    int64_t shape[4];
    OK(tpu_embedding_feature_name(system, f, name, sizeof name, &count));
    EXPECT(!strcmp(name, want_names[f]), "feature %d is '%s', want '%s'", f, name, want_names[f]);
    OK(tpu_embedding_feature_table(system, f, &t));
    OK(tpu_embedding_table_shape(system, t, &g_emb_vocabulary[f], &dim));
    OK(tpu_embedding_feature_shape(system, f, shape, 4, &rank));
    g_emb_samples[f] = 1;
    for (size_t d = 0; d + 1 < rank; d++) g_emb_samples[f] *= shape[d];
    EXPECT(g_emb_samples[f] * 3 < EMB_MAX_IDS && g_emb_samples[f] * dim <= EMB_MAX_IDS * 8,
           "feature %d is too large for the scenario", f);
  }
  /* Every task loads the same rows (each keeps its own); the slots keep their initial
   * values. */
  int tables = 0;
  OK(tpu_embedding_num_tables(system, &tables));
  for (int t = 0; t < tables; t++) {
    int64_t V = 0;
    int32_t dim = 0;
    OK(tpu_embedding_table_shape(system, t, &V, &dim));
    float *v = malloc((size_t)(V * dim) * sizeof *v);
    for (int64_t i = 0; i < V * dim; i++) v[i] = fold_value(2000 + t, i) - 1.0f;
    OK(tpu_embedding_load(system, t, 0, 0, V, v, (size_t)(V * dim)));
    free(v);
  }
  char victim[32];
  snprintf(victim, sizeof victim, "replica %d: ", g_n - 1);
  emb_step st = {0, EMB_NO_FAULT, 1};
  for (int k = 0; k < 6; k++) {
    st.k = k;
    if (k == 4) {
      /* A replica on the last task fails after sending its gradients, then another
       * enqueues an id out of range: every task gets its error, no row changes. */
      const uint64_t before = emb_tables_digest(system, 0);
      emb_step fault = {k, EMB_FAIL_AFTER_GRADIENTS, 0};
      tpu_status s = tpu_replicate(system, emb_fn, &fault, g_n, 0, NULL, 0, NULL, NULL);
      emb_failing_step("failure after gradients", TPU_DATA_LOSS, "injected embedding failure", s);
      EXPECT(strstr(tpu_last_error(), victim), "the error does not name '%s'", victim);
      EXPECT(emb_tables_digest(system, 0) == before, "a step that failed after its gradients changed rows");
      fault.fault = EMB_BAD_ID;
      s = tpu_replicate(system, emb_fn, &fault, g_n, 0, NULL, 0, NULL, NULL);
      char says[96];
      snprintf(says, sizeof says, "feature 'user' (table 'users'): id %lld", (long long)g_emb_vocabulary[0]);
      emb_failing_step("id out of range", TPU_INVALID_ARGUMENT, says, s);
      EXPECT(strstr(tpu_last_error(), victim), "the error does not name '%s'", victim);
      EXPECT(emb_tables_digest(system, 0) == before, "a step with an id out of range changed rows");
      fault.fault = EMB_OTHER_RATE;
      s = tpu_replicate(system, emb_fn, &fault, g_n, 0, NULL, 0, NULL, NULL);
      snprintf(says, sizeof says, "replica %d gives %g", g_n - 1, emb_rate(k) + 1.0f);
      emb_failing_step("another learning rate", TPU_INVALID_ARGUMENT, says, s);
      EXPECT(strstr(tpu_last_error(), "disagree on dynamic learning rate 0"), "the error does not name tag 0");
      EXPECT(emb_tables_digest(system, 0) == before, "a step whose replicas disagree on a learning rate changed rows");
      /* A step without ids: no activations; only "dense" (non-lazy) changes. */
      fault.fault = EMB_EMPTY;
      s = tpu_replicate(system, emb_fn, &fault, g_n, 0, NULL, 0, NULL, NULL);
      EXPECT(s == TPU_OK, "a step without ids: %s: %s", tpu_status_name(s), tpu_last_error());
    }
    if (k == 5 && g_tasks > 1) {
      /* Task 1 holds shards of "users" but runs none of this step's replicas (all on
       * task 0's cores); the replicas look up a row of task 1. */
      const uint64_t before = emb_tables_digest(system, 0);
      int task0[64];
      for (int q = 0; q < g_local; q++) task0[q] = q;
      tpu_device_assignment *da = assignment_on(system, "task 0 only", task0, g_local, 1);
      if (!da) return 1;
      g_emb_lonely_id = -1;
      for (int64_t row = 0; row < g_emb_vocabulary[0] && g_emb_lonely_id < 0; row++) {
        int core = 0;
        int64_t shard_row = 0;
        OK(tpu_embedding_row_owner(system, 0, row, &core, &shard_row));
        if (core / g_local == 1) g_emb_lonely_id = row;
      }
      tpu_step_options o = TPU_STEP_OPTIONS_INIT;
      o.device_assignment = da;
      tpu_status s = tpu_replicate(system, emb_lonely_fn, NULL, g_local, 0, NULL, 0, NULL, &o);
      emb_failing_step("no computation on task 1", TPU_FAILED_PRECONDITION,
                       "task 1 holds shards of embedding table 'users' but runs no computation of this step", s);
      EXPECT(emb_tables_digest(system, 0) == before, "a step without a computation on task 1 changed rows");
      /* Only rows of task 0 looked up, but "dense" (non-lazy Adam) updates every row,
       * task 1's too, which no computation of the step serves. */
      for (int64_t row = 0; row < g_emb_vocabulary[0]; row++) {
        int core = 0;
        int64_t shard_row = 0;
        OK(tpu_embedding_row_owner(system, 0, row, &core, &shard_row));
        if (core / g_local == 0) g_emb_lonely_id = row;
      }
      static const int send_gradients = 1;
      s = tpu_replicate(system, emb_lonely_fn, (void *)&send_gradients, g_local, 0, NULL, 0, NULL, &o);
      emb_failing_step("no computation on task 1, every row updated", TPU_FAILED_PRECONDITION,
                       "task 1 holds shards of embedding table 'dense', whose optimizer updates every row, but runs "
                       "no computation of this step",
                       s);
      EXPECT(emb_tables_digest(system, 0) == before, "a step without a computation on task 1 changed rows");
      tpu_device_assignment_release(da);
    }
    tpu_status s = tpu_replicate(system, emb_fn, &st, g_n, 0, NULL, 0, NULL, NULL);
    EXPECT(s == TPU_OK, "embedding step %d: %s: %s", k, tpu_status_name(s), tpu_last_error());
  }
  /* Replicas of 2 cores, each core with its own batch: participant q on global core
   * split[q], so each replica spans tasks and the participants' order is not the
   * tasks'; two steps, the second looking up what the first updated. */
  if (g_n == 4) {
    const int split[4] = {3, 0, 1, 2};
    tpu_device_assignment *da = assignment_on(system, "embedding k2", split, 2, 2);
    if (!da) return 1;
    tpu_step_options o = TPU_STEP_OPTIONS_INIT;
    o.device_assignment = da;
    for (st.k = 6; st.k < 8; st.k++) {
      tpu_status s = tpu_replicate(system, emb_fn, &st, 2, 0, NULL, 0, NULL, &o);
      EXPECT(s == TPU_OK, "embedding step %d of replicas of 2 cores: %s: %s", st.k, tpu_status_name(s),
             tpu_last_error());
    }
    tpu_device_assignment_release(da);
  }
  emb_tables_digest(system, 1);
  return 0;
}

/* ---- caller_threads: each task's own threads run its replicas --------------------
 * One thread per local core loops tpu_step_join (50 ms) -> cross_replica_sum of its
 * input -> tpu_step_leave, until told to stop. */
typedef struct ct_thread {
  tpu_system *system;
  int core;
  pthread_t tid;
  volatile int stop, running;
  int served;
} ct_thread;

static void *ct_main(void *arg) {
  ct_thread *t = arg;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (!__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE)) {
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (t1.tv_sec - t0.tv_sec > 120) break; /* bounded: the script's timeout is longer */
    tpu_joined_step j = TPU_JOINED_STEP_INIT;
    tpu_status s = tpu_step_join(t->system, t->core, 50, &j);
    if (s == TPU_DEADLINE_EXCEEDED) continue;
    if (s != TPU_OK) {
      EXPECT(0, "core %d: tpu_step_join: %s: %s", t->core, tpu_status_name(s), tpu_last_error());
      break;
    }
    tpu_tensor *out = NULL;
    s = j.num_inputs == 1 && j.num_outputs == 1 && j.computation == NULL
            ? tpu_cross_replica_sum(j.ctx, j.inputs[0], NULL, &out, NULL)
            : tpu_replica_context_fail(j.ctx, TPU_INTERNAL, "unexpected joined step");
    s = tpu_step_leave(j.ctx, s, &out, 1);
    EXPECT(s == TPU_OK, "core %d: tpu_step_leave: %s", t->core, tpu_last_error());
    t->served++;
  }
  return NULL;
}

static void ct_start(ct_thread *t, tpu_system *system, int core) {
  memset(t, 0, sizeof *t);
  t->system = system;
  t->core = core;
  t->running = pthread_create(&t->tid, NULL, ct_main, t) == 0;
  EXPECT(t->running, "pthread_create");
}

static void ct_stop(ct_thread *t) {
  if (!t->running) return;
  __atomic_store_n(&t->stop, 1, __ATOMIC_RELEASE);
  pthread_join(t->tid, NULL);
  t->running = 0;
}

/* One step over every replica: the sum of every replica's input on each local one. */
static tpu_status ct_step(tpu_system *system, int64_t timeout_ms) {
  int64_t len = 257;
  tpu_tensor *in[4096], *out[4096];
  for (int r = 0; r < g_n; r++) {
    in[r] = make(TPU_FLOAT, r, &len, 1);
    out[r] = NULL;
  }
  tpu_step_options o = TPU_STEP_OPTIONS_INIT;
  o.caller_threads = 1;
  o.collective_timeout_ms = timeout_ms;
  tpu_status s = tpu_replicate(system, NULL, NULL, g_n, 1, in, 1, out, &o);
  for (int r = 0; s == TPU_OK && r < g_n; r++) {
    int local = r / g_local == g_task;
    EXPECT(local == (out[r] != NULL), "replica %d's output on task %d", r, g_task);
    for (int64_t i = 0; local && out[r] && i < len; i += 17) {
      double want = 0;
      for (int q = 0; q < g_n; q++) want += value(q, i);
      EXPECT(element(out[r], i) == want, "replica %d element %lld: %g, want %g", r, (long long)i,
             element(out[r], i), want);
    }
  }
  for (int r = 0; r < g_n; r++) {
    tpu_tensor_release(in[r]);
    tpu_tensor_release(out[r]);
  }
  return s;
}

static int scenario_caller_threads(tpu_system *system, int victim) {
  ct_thread threads[64];
  if (g_local > 64) return 1;
  for (int c = 0; c < g_local; c++) ct_start(&threads[c], system, c);
  for (int i = 0; i < 20; i++) {
    tpu_status s = ct_step(system, 0);
    EXPECT(s == TPU_OK, "step %d: %s: %s", i, tpu_status_name(s), tpu_last_error());
  }
  /* Task V's last core loses its thread: every task names the replica that never came. */
  const int core = g_local - 1, replica = victim * g_local + core;
  if (g_task == victim) ct_stop(&threads[core]);
  EXPECT(tpu_wait_at_barrier(system, "caller_threads/unjoined", 30000, NULL, 0) == TPU_OK,
         "barrier: %s", tpu_last_error());
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  tpu_status s = ct_step(system, g_task == victim ? 1000 : 5000);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double seconds = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
  const char *msg = tpu_last_error();
  /* Task V gives up on its core after 1 s; the others' collectives wait 5 s, so that
   * V's abort, naming the replica, reaches them first. */
  char who[64];
  snprintf(who, sizeof who, "replica %d (core %d) never started", replica, core);
  printf("task %d: caller_threads unjoined core %d of task %d: %s after %.1f s: %s\n", g_task, core,
         victim, tpu_status_name(s), seconds, msg);
  /* On task V the join deadline and its other core's collective deadline (both 1 s)
   * race: when the collective's comes first, every task's verdict is its timeout,
   * "waiting for replicas [R]", which names the replica too. */
  char waiting[64];
  snprintf(waiting, sizeof waiting, "waiting for replicas [%d]", replica);
  EXPECT(s == TPU_DEADLINE_EXCEEDED && (strstr(msg, who) || strstr(msg, waiting)),
         "want TPU_DEADLINE_EXCEEDED naming %s", who);
  EXPECT(seconds < 20, "the step took %.1f s with a 1 s (and 5 s) deadline", seconds);
  if (g_task == victim) ct_start(&threads[core], system, core);
  for (int i = 0; i < 5; i++) {
    s = ct_step(system, 0);
    EXPECT(s == TPU_OK, "step %d after the unjoined core: %s: %s", i, tpu_status_name(s), tpu_last_error());
  }
  for (int c = 0; c < g_local; c++) ct_stop(&threads[c]);
  return 0;
}

/* ---- shard: tpu_shard and tpu_batch_parallel across tasks ---------------------------
 * Every task returns the whole outputs, whichever task ran each shard. Shard s (of n)
 * of sh_fn returns, from input x (a [rows, 3] piece):
 *   0: x * 10 + s                                  (batch_parallel's output)
 *   1: [s + 1, 2], element (i, j) = 100 s + 10 i + j  (uneven along axis 0)
 *   2: [2, s + 1], element (i, j) = 100 s + 10 i + j  (uneven along axis -1 = 1)
 *   3: the int32 scalar 7 s + 1                     (stacked)
 *   4: [3] {1000 s, 1000 s + 1, 1000 s + 2}          (not gathered: shard 0's)
 * Participants of logical core 1 (replicas of 2 cores) return 0.5 everywhere instead:
 * a shard's output is its logical core 0's. g_sh_bad_shard's output g_sh_bad_output is
 * NULL (g_sh_bad 1) or int32 (2). */
static int g_sh_bad_shard = -1, g_sh_bad_output, g_sh_bad;
static tpu_status sh_fn(tpu_replica_context *ctx, tpu_tensor *const *in, int nin, tpu_tensor **out, int nout,
                        void *user) {
  int s = 0, c = 0;
  OK(tpu_replica_context_replica_id(ctx, &s));
  OK(tpu_replica_context_logical_core(ctx, &c));
  float v[64];
  int64_t dims[2];
  for (int o = 0; o < nout; o++) {
    if (s == g_sh_bad_shard && o == g_sh_bad_output && c == 0) {
      if (g_sh_bad == 1) continue;
      const int32_t i = s;
      OK(tpu_tensor_create(TPU_INT32, NULL, 0, &i, 4, &out[o]));
      continue;
    }
    if (o == 0) {
      int64_t n = 0;
      size_t rank = 0;
      const void *p = NULL;
      OK(tpu_tensor_dims(in[0], dims, 2, &rank));
      OK(tpu_tensor_num_elements(in[0], &n));
      OK(tpu_tensor_data(in[0], &p));
      for (int64_t i = 0; i < n; i++) v[i] = c ? 0.5f : ((const float *)p)[i] * 10 + (float)s;
      OK(tpu_tensor_create(TPU_FLOAT, dims, (int)rank, v, (size_t)n * 4, &out[o]));
    } else if (o == 1 || o == 2) {
      dims[0] = o == 1 ? s + 1 : 2;
      dims[1] = o == 1 ? 2 : s + 1;
      for (int64_t i = 0; i < dims[0]; i++)
        for (int64_t j = 0; j < dims[1]; j++) v[i * dims[1] + j] = c ? 0.5f : (float)(100 * s + 10 * i + j);
      OK(tpu_tensor_create(TPU_FLOAT, dims, 2, v, (size_t)(dims[0] * dims[1]) * 4, &out[o]));
    } else if (o == 3) {
      const int32_t i = c ? -1 : 7 * s + 1;
      OK(tpu_tensor_create(TPU_INT32, NULL, 0, &i, 4, &out[o]));
    } else {
      dims[0] = 3;
      for (int i = 0; i < 3; i++) v[i] = c ? 0.5f : (float)(1000 * s + i);
      OK(tpu_tensor_create(TPU_FLOAT, dims, 1, v, 12, &out[o]));
    }
  }
  return TPU_OK;
}

/* t has dtype `dtype`, dims[0..rank) and element i == want(i). */
static int sh_expect(const char *what, const tpu_tensor *t, tpu_dtype dtype, const int64_t *dims, int rank,
                     double (*want)(int64_t i, const int64_t *dims, int n), int n) {
  if (!t) {
    EXPECT(0, "%s: NULL", what);
    return 1;
  }
  tpu_dtype dt;
  int64_t got[4], count = 0;
  size_t r = 0;
  const void *p = NULL;
  tpu_tensor_dtype(t, &dt);
  tpu_tensor_dims(t, got, 4, &r);
  tpu_tensor_num_elements(t, &count);
  tpu_tensor_data(t, &p);
  int bad = dt != dtype || (int)r != rank;
  for (int d = 0; !bad && d < rank; d++) bad = got[d] != dims[d];
  EXPECT(!bad, "%s: dtype %d rank %d, want dtype %d rank %d (dims %lld, %lld)", what, (int)dt, (int)r, (int)dtype, rank,
         (long long)(r > 0 ? got[0] : -1), (long long)(r > 1 ? got[1] : -1));
  for (int64_t i = 0; !bad && i < count; i++) {
    const double g = dtype == TPU_INT32 ? ((const int32_t *)p)[i] : ((const float *)p)[i], w = want(i, dims, n);
    if (g != w) {
      EXPECT(0, "%s: element %lld is %g, want %g", what, (long long)i, g, w);
      bad = 1;
    }
  }
  return bad;
}

/* The whole outputs of sh_fn over n shards (input element i = i, [rows, 3]). */
static double sh_want0(int64_t i, const int64_t *dims, int n) { return (double)i * 10 + (double)(i / 3 / (dims[0] / n)); }
static double sh_want1(int64_t i, const int64_t *dims, int n) {
  /* rows of shard s start at s (s + 1) / 2 */
  int64_t row = i / 2, s = 0;
  while ((s + 1) * (s + 2) / 2 <= row) s++;
  return (double)(100 * s + 10 * (row - s * (s + 1) / 2) + i % 2);
}
static double sh_want2(int64_t i, const int64_t *dims, int n) {
  int64_t row = i / dims[1], col = i % dims[1], s = 0;
  while ((s + 1) * (s + 2) / 2 <= col) s++;
  return (double)(100 * s + 10 * row + (col - s * (s + 1) / 2));
}
static double sh_want3(int64_t i, const int64_t *dims, int n) { return (double)(7 * i + 1); }
static double sh_want4(int64_t i, const int64_t *dims, int n) { return (double)i; }

static tpu_tensor *sh_input(int64_t rows) {
  const int64_t dims[2] = {rows, 3};
  float v[64];
  for (int64_t i = 0; i < rows * 3; i++) v[i] = (float)i;
  tpu_tensor *t = NULL;
  if (tpu_tensor_create(TPU_FLOAT, dims, 2, v, (size_t)(rows * 3) * 4, &t) != TPU_OK) abort();
  return t;
}

/* One tpu_shard of sh_fn over n shards (options o), every output checked. */
static void sh_check_all(tpu_system *system, const char *what, int n, const tpu_step_options *o) {
  tpu_tensor *in = sh_input(2 * n), *out[5] = {NULL};
  const int from_all[5] = {1, 1, 1, 1, 0}, axes[5] = {0, 0, -1, 0, 0};
  tpu_status s = tpu_shard(system, sh_fn, NULL, 1, &in, n, NULL, from_all, axes, 5, out, o);
  EXPECT(s == TPU_OK, "%s: %s: %s", what, tpu_status_name(s), tpu_last_error());
  if (s == TPU_OK) {
    char label[96];
    const int64_t d0[2] = {2 * n, 3}, d1[2] = {n * (n + 1) / 2, 2}, d2[2] = {2, n * (n + 1) / 2}, d3[1] = {n},
                  d4[1] = {3};
    snprintf(label, sizeof label, "%s output 0", what);
    sh_expect(label, out[0], TPU_FLOAT, d0, 2, sh_want0, n);
    snprintf(label, sizeof label, "%s output 1 (uneven, axis 0)", what);
    sh_expect(label, out[1], TPU_FLOAT, d1, 2, sh_want1, n);
    snprintf(label, sizeof label, "%s output 2 (uneven, axis -1)", what);
    sh_expect(label, out[2], TPU_FLOAT, d2, 2, sh_want2, n);
    snprintf(label, sizeof label, "%s output 3 (stacked scalars)", what);
    sh_expect(label, out[3], TPU_INT32, d3, 1, sh_want3, n);
    snprintf(label, sizeof label, "%s output 4 (shard 0's)", what);
    sh_expect(label, out[4], TPU_FLOAT, d4, 1, sh_want4, n);
  }
  for (int i = 0; i < 5; i++) tpu_tensor_release(out[i]);
  tpu_tensor_release(in);
}

/* Each shard looks up row `shard` of table 0 (SGD), sends gradients of ones, and
 * returns its activation (NULL for g_sh_bad_shard). */
static tpu_status sh_emb_fn(tpu_replica_context *ctx, tpu_tensor *const *in, int nin, tpu_tensor **out, int nout,
                            void *user) {
  int s = 0;
  OK(tpu_replica_context_replica_id(ctx, &s));
  int64_t id = s, sample = 0;
  tpu_embedding_feature_batch fb;
  memset(&fb, 0, sizeof fb);
  fb.feature = 0;
  fb.ids = &id;
  fb.num_ids = 1;
  fb.sample_indices = &sample;
  tpu_tensor *act = NULL, *grad = NULL;
  OK(tpu_embedding_enqueue(ctx, &fb, 1));
  OK(tpu_embedding_recv_activations(ctx, &act, 1));
  int64_t dims[4];
  size_t rank = 0, bytes = 0;
  OK(tpu_tensor_dims(act, dims, 4, &rank));
  OK(tpu_tensor_byte_size(act, &bytes));
  float ones[16];
  for (int i = 0; i < 16; i++) ones[i] = 1;
  OK(tpu_tensor_create(TPU_FLOAT, dims, (int)rank, ones, bytes, &grad));
  tpu_status st = tpu_embedding_send_gradients(ctx, &grad, 1, NULL, 0);
  tpu_tensor_release(grad);
  if (st == TPU_OK && s != g_sh_bad_shard) out[0] = act;
  else tpu_tensor_release(act);
  return st;
}

/* Rows 0..g_n-1 of table 0 as this task holds them (others' left at -1). */
static void sh_rows(tpu_system *system, float *rows) {
  size_t count = 0;
  for (int i = 0; i < g_n * 2; i++) rows[i] = -1;
  tpu_status s = tpu_embedding_retrieve(system, 0, 0, 0, g_n, rows, (size_t)g_n * 2, &count);
  EXPECT(s == TPU_OK, "retrieve: %s: %s", tpu_status_name(s), tpu_last_error());
}

static double sh_want_loaded(int64_t i, const int64_t *dims, int n) { return (double)(i + 1); }

/* Large outputs (past the collectives' inline sizes): shard s returns its piece x of
 * [rows, 8] as x * 2 + s, plus the first s + 1 rows of it (uneven). */
static tpu_status sh_big_fn(tpu_replica_context *ctx, tpu_tensor *const *in, int nin, tpu_tensor **out, int nout,
                            void *user) {
  int s = 0;
  OK(tpu_replica_context_replica_id(ctx, &s));
  int64_t dims[2], n = 0;
  size_t rank = 0;
  const void *p = NULL;
  OK(tpu_tensor_dims(in[0], dims, 2, &rank));
  OK(tpu_tensor_num_elements(in[0], &n));
  OK(tpu_tensor_data(in[0], &p));
  float *v = malloc((size_t)n * sizeof *v);
  for (int64_t i = 0; i < n; i++) v[i] = ((const float *)p)[i] * 2 + (float)s;
  tpu_status st = tpu_tensor_create(TPU_FLOAT, dims, 2, v, (size_t)n * 4, &out[0]);
  dims[0] = s + 1;
  if (st == TPU_OK) st = tpu_tensor_create(TPU_FLOAT, dims, 2, v, (size_t)(dims[0] * dims[1]) * 4, &out[1]);
  free(v);
  return st;
}

static void sh_check_big(tpu_system *system, int n) {
  const int64_t rows = 2048 * n, dims[2] = {rows, 8};
  float *x = malloc((size_t)(rows * 8) * sizeof *x);
  for (int64_t i = 0; i < rows * 8; i++) x[i] = (float)(i % 1000);
  tpu_tensor *in = NULL, *out[2] = {NULL, NULL};
  if (tpu_tensor_create(TPU_FLOAT, dims, 2, x, (size_t)(rows * 8) * 4, &in) != TPU_OK) abort();
  tpu_status s = tpu_batch_parallel(system, sh_big_fn, NULL, 1, &in, n, 2, out, NULL);
  EXPECT(s == TPU_OK, "large outputs: %s: %s", tpu_status_name(s), tpu_last_error());
  if (s == TPU_OK) {
    const float *a = NULL, *b = NULL;
    int64_t na = 0, nb = 0;
    tpu_tensor_data(out[0], (const void **)&a);
    tpu_tensor_data(out[1], (const void **)&b);
    tpu_tensor_num_elements(out[0], &na);
    tpu_tensor_num_elements(out[1], &nb);
    EXPECT(na == rows * 8 && nb == (int64_t)n * (n + 1) / 2 * 8, "large outputs: %lld and %lld elements", (long long)na,
           (long long)nb);
    int bad = 0;
    for (int64_t i = 0; na == rows * 8 && i < na && !bad; i++)
      if (a[i] != x[i] * 2 + (float)(i / 8 / 2048)) {
        EXPECT(0, "large output 0: element %lld", (long long)i);
        bad = 1;
      }
    int64_t at = 0;
    for (int sh = 0; nb == (int64_t)n * (n + 1) / 2 * 8 && sh < n && !bad; sh++)
      for (int64_t i = 0; i < (sh + 1) * 8 && !bad; i++, at++)
        if (b[at] != x[sh * 2048 * 8 + i] * 2 + (float)sh) {
          EXPECT(0, "large output 1: element %lld", (long long)at);
          bad = 1;
        }
  }
  tpu_tensor_release(out[0]);
  tpu_tensor_release(out[1]);
  tpu_tensor_release(in);
  free(x);
}

static int scenario_shard(tpu_system *system) {
  const int n = g_n;
  sh_check_big(system, n);
  /* batch_parallel: output 0 of sh_fn only. */
  tpu_tensor *in = sh_input(2 * n), *out = NULL;
  tpu_status s = tpu_batch_parallel(system, sh_fn, NULL, 1, &in, n, 1, &out, NULL);
  EXPECT(s == TPU_OK, "batch_parallel: %s: %s", tpu_status_name(s), tpu_last_error());
  const int64_t d0[2] = {2 * n, 3};
  if (s == TPU_OK) sh_expect("batch_parallel", out, TPU_FLOAT, d0, 2, sh_want0, n);
  tpu_tensor_release(out);
  tpu_tensor_release(in);
  /* Every kind of output, three steps in a row. */
  for (int k = 0; k < 3; k++) sh_check_all(system, "shard", n, NULL);
  /* Shards in reverse: shard 0 (and its output 4) on the last task. */
  int global[64];
  for (int q = 0; q < n; q++) global[q] = n - 1 - q;
  tpu_device_assignment *da = assignment_on(system, "shards reversed", global, n, 1);
  if (!da) return 1;
  tpu_step_options o = TPU_STEP_OPTIONS_INIT;
  o.device_assignment = da;
  sh_check_all(system, "shard reversed", n, &o);
  tpu_device_assignment_release(da);
  /* Replicas of 2 cores spanning tasks: shard s on global cores s and s + n / 2. */
  if (n % 2 == 0 && g_tasks > 1) {
    for (int q = 0; q < n; q++) global[q] = q % 2 ? q / 2 + n / 2 : q / 2;
    da = assignment_on(system, "shards of 2 cores", global, n / 2, 2);
    if (!da) return 1;
    o.device_assignment = da;
    sh_check_all(system, "shards of 2 cores", n / 2, &o);
    tpu_device_assignment_release(da);
  }
  /* tpu_rewrite keeps tpu_replicate's rule: its one replica's outputs on the task that
   * runs it (task 0), NULL on the others, and the step succeeds everywhere. */
  in = sh_input(2);
  out = NULL;
  s = tpu_rewrite(system, sh_fn, NULL, 1, &in, 1, &out, NULL);
  EXPECT(s == TPU_OK, "rewrite: %s: %s", tpu_status_name(s), tpu_last_error());
  const int64_t d2[2] = {2, 3};
  if (s == TPU_OK && g_task == 0) sh_expect("rewrite", out, TPU_FLOAT, d2, 2, sh_want0, 1);
  if (s == TPU_OK && g_task != 0) EXPECT(out == NULL, "rewrite: an output on task %d, which runs no replica", g_task);
  tpu_tensor_release(out);
  tpu_tensor_release(in);
  /* Every shard on task 0: the last task could not receive the outputs. Every task
   * refuses the call alike, before the step. */
  if (g_tasks > 1) {
    for (int q = 0; q < g_local; q++) global[q] = q;
    da = assignment_on(system, "shards on task 0", global, g_local, 1);
    if (!da) return 1;
    o.device_assignment = da;
    in = sh_input(2 * g_local);
    out = NULL;
    s = tpu_batch_parallel(system, sh_fn, NULL, 1, &in, g_local, 1, &out, &o);
    printf("task %d: shard nowhere: %s: %s\n", g_task, tpu_status_name(s), tpu_last_error());
    EXPECT(s == TPU_INVALID_ARGUMENT && strstr(tpu_last_error(), "runs none of the"),
           "shards on task 0 only: want INVALID_ARGUMENT naming the task without a shard");
    EXPECT(out == NULL, "shards on task 0 only: output set on failure");
    tpu_tensor_release(in);
    tpu_device_assignment_release(da);
    sh_check_all(system, "shard after a refused call", n, NULL);
  }
  /* A shard of the last task leaves output 0 NULL, then one of task 0 returns output 1
   * as int32: the step fails on every task with the same error (printed, compared by
   * the script), and the next step works. */
  const struct {
    const char *name;
    int shard, output, bad;
    const char *says;
  } faults[] = {{"null", n - 1, 0, 1, "left output 0 NULL"},
                {"mismatch", 1, 1, 2, "shards have mismatched output shapes: shard 0 output 1 is float32[1,2]"}};
  for (int f = 0; f < 2; f++) {
    g_sh_bad_shard = faults[f].shard, g_sh_bad_output = faults[f].output, g_sh_bad = faults[f].bad;
    tpu_tensor *outs[5] = {NULL};
    in = sh_input(2 * n);
    const int from_all[5] = {1, 1, 1, 1, 0}, axes[5] = {0, 0, -1, 0, 0};
    s = tpu_shard(system, sh_fn, NULL, 1, &in, n, NULL, from_all, axes, 5, outs, NULL);
    printf("task %d: shard %s: %s: %s\n", g_task, faults[f].name, tpu_status_name(s), tpu_last_error());
    char says[32];
    snprintf(says, sizeof says, "replica %d: ", faults[f].shard);
    EXPECT(s == TPU_INVALID_ARGUMENT && strstr(tpu_last_error(), says) && strstr(tpu_last_error(), faults[f].says),
           "shard %s: want INVALID_ARGUMENT '%s...%s'", faults[f].name, says, faults[f].says);
    for (int i = 0; i < 5; i++) EXPECT(outs[i] == NULL, "shard %s: output %d set on failure", faults[f].name, i);
    tpu_tensor_release(in);
    g_sh_bad_shard = -1;
    sh_check_all(system, "shard after a failed step", n, NULL);
  }
  /* Embedding rows: a step that fails on its outputs changes none; the same step
   * without the fault updates them. */
  float before[128], after[128];
  float loaded[128];
  for (int i = 0; i < 2 * n; i++) loaded[i] = (float)(i + 1);
  OK(tpu_embedding_load(system, 0, 0, 0, n, loaded, (size_t)n * 2));
  sh_rows(system, before);
  g_sh_bad_shard = n - 1;
  s = tpu_shard(system, sh_emb_fn, NULL, 0, NULL, n, NULL, NULL, NULL, 1, &out, NULL);
  printf("task %d: shard embedding null: %s: %s\n", g_task, tpu_status_name(s), tpu_last_error());
  EXPECT(s == TPU_INVALID_ARGUMENT && strstr(tpu_last_error(), "left output 0 NULL"),
         "embedding step with a NULL output: want INVALID_ARGUMENT");
  sh_rows(system, after);
  EXPECT(!memcmp(before, after, sizeof(float) * 2 * n), "the failed step changed embedding rows");
  g_sh_bad_shard = -1;
  out = NULL;
  s = tpu_shard(system, sh_emb_fn, NULL, 0, NULL, n, NULL, NULL, NULL, 1, &out, NULL);
  EXPECT(s == TPU_OK, "embedding step: %s: %s", tpu_status_name(s), tpu_last_error());
  if (s == TPU_OK) {
    const int64_t dims[2] = {n, 2};
    sh_expect("embedding activations (the rows before the update)", out, TPU_FLOAT, dims, 2, sh_want_loaded, n);
  }
  tpu_tensor_release(out);
  sh_rows(system, after);
  for (int i = 0; i < 2 * n; i++)
    EXPECT(after[i] == (before[i] == -1 ? -1 : before[i] - 0.5f), "row %d [%d] is %g after the step, was %g", i / 2,
           i % 2, after[i], before[i]);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: cluster_worker collectives|kv|feed|model_parallel|model_parallel_skip|"
                    "embedding div|mod|caller_threads V|shard|kill V|"
                    "quit V|stop V|skip V|fail V|mismatch V|init|soak N\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *scenario = argv[1];
  tpu_system *system = NULL;
  tpu_system_options options = TPU_SYSTEM_OPTIONS_INIT;
  const char *timeout = getenv("TEST_COLLECTIVE_TIMEOUT_MS"); /* the fault tests' bound */
  if (timeout) options.collective_timeout_ms = atoll(timeout);
  static char emb_bytes[4096];
  if (!strcmp(scenario, "embedding")) {
    g_emb_strategy = argc > 2 ? argv[2] : "div";
    if (strcmp(g_emb_strategy, "div") != 0 && strcmp(g_emb_strategy, "mod") != 0) {
      fprintf(stderr, "cluster_worker embedding: sharding '%s' is neither div nor mod\n", g_emb_strategy);
      return 2;
    }
    size_t len = 0;
    if (emb_config(g_emb_strategy, emb_bytes, sizeof emb_bytes, &len)) return 3;
    options.embedding_config = emb_bytes;
    options.embedding_config_len = len;
  }
  if (!strcmp(scenario, "shard")) {
    size_t len = 0;
    tpu_status st = tpu_embedding_config_from_json(
        "{\"mode\": \"TRAINING\", \"table_descriptor\": [{\"name\": \"t\", \"vocabulary_size\": 64,"
        " \"dimension\": 2, \"optimization_parameters\": {\"learning_rate\": {\"constant\": 0.5},"
        " \"stochastic_gradient_descent\": {}}}],"
        " \"feature_descriptor\": [{\"name\": \"f\", \"table_id\": 0, \"input_shape\": [1]}]}",
        emb_bytes, sizeof emb_bytes, &len);
    if (st != TPU_OK) {
      printf("shard: embedding configuration: %s: %s\n", tpu_status_name(st), tpu_last_error());
      return 3;
    }
    options.embedding_config = emb_bytes;
    options.embedding_config_len = len;
  }
  tpu_status s = tpu_initialize_tpu_system(NULL, &options, NULL, &system, &g_init_topology);
  if (s != TPU_OK) {
    printf("init: %s: %s\n", tpu_status_name(s), tpu_last_error());
    return 3;
  }
  tpu_system_task_id(system, &g_task);
  tpu_system_num_tasks(system, &g_tasks);
  tpu_system_num_cores(system, &g_local);
  g_n = g_local * g_tasks;
  /* The data plane the tasks chose: what TPURT_TRANSPORT asked for, if anything. */
  char transport[16], reason[512];
  size_t count;
  OK(tpu_system_transport(system, transport, sizeof transport, &count));
  OK(tpu_system_transport_reason(system, reason, sizeof reason, &count));
  printf("task %d: transport %s (%s)\n", g_task, transport, reason);
  const char *asked = getenv("TPURT_TRANSPORT");
  if (asked && *asked && strcmp(asked, "auto") != 0)
    EXPECT(strcmp(asked, transport) == 0, "TPURT_TRANSPORT=%s but the transport is %s", asked, transport);
  const char *launched = getenv("TPURT_LAUNCH_TASKS");
  if (launched) EXPECT(atoi(launched) == g_tasks, "%d tasks, launched %s", g_tasks, launched);
  int rc = 0;
  if (!strcmp(scenario, "collectives")) rc = scenario_collectives(system);
  else if (!strcmp(scenario, "kv")) rc = scenario_kv(system);
  else if (!strcmp(scenario, "init")) rc = 0;
  else if (!strcmp(scenario, "feed")) rc = scenario_feed(system);
  else if (!strcmp(scenario, "feed_cores")) rc = scenario_feed_cores(system);
  else if (!strcmp(scenario, "model_parallel")) rc = scenario_model_parallel(system);
  else if (!strcmp(scenario, "model_parallel_skip")) rc = scenario_model_parallel_skip(system);
  else if (!strcmp(scenario, "embedding")) rc = scenario_embedding(system);
  else if (!strcmp(scenario, "shard")) rc = scenario_shard(system);
  else if (!strcmp(scenario, "caller_threads")) rc = scenario_caller_threads(system, argc > 2 ? atoi(argv[2]) : 0);
  else if (!strcmp(scenario, "soak")) {
    int steps = argc > 2 ? atoi(argv[2]) : 100;
    for (int i = 0; i < steps && !g_failures; i++) {
      s = tpu_replicate(system, soak_fn, NULL, g_n, 0, NULL, 0, NULL, NULL);
      EXPECT(s == TPU_OK, "soak step %d: %s: %s", i, tpu_status_name(s), tpu_last_error());
      sleep_ms(20);
    }
  } else if (argc > 2) {
    rc = scenario_fault(system, scenario, atoi(argv[2]));
  } else {
    fprintf(stderr, "cluster_worker: unknown scenario '%s'\n", scenario);
    return 2;
  }
  s = tpu_system_shutdown(system);
  /* A stopped task misses the shutdown barrier; a killed task 0 takes the service. */
  const int barrier_may_fail = !strcmp(scenario, "stop") ||
                               (!strcmp(scenario, "kill") && argc > 2 && atoi(argv[2]) == 0);
  if (s != TPU_OK && !barrier_may_fail)
    EXPECT(0, "shutdown: %s: %s", tpu_status_name(s), tpu_last_error());
  tpu_system_release(system);
  tpu_topology_release(g_init_topology);
  if (rc || g_failures) {
    printf("task %d: %s FAILED (%d checks)\n", g_task, scenario, g_failures);
    return 1;
  }
  printf("task %d: %s ok\n", g_task, scenario);
  return 0;
}
