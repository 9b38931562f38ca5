/* Collectives: every operation against a naive reference computed independently
 * here, over dtypes, replica counts (including 1 and non-powers of two), group
 * assignments and sizes (inline, record and in-place paths); every error path;
 * and the step after an error. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tpurt.h>

#include "test_util.h"

#define MAX_REPLICAS 8

/* The test's system, released by the teardown even when an assertion jumps out. */
TEST_SYSTEM_FIXTURE

static tpu_system *start_system_pinned(int cores, int64_t timeout_ms, int pinning) {
  release_system(NULL);
  tpu_system_options opts = TPU_SYSTEM_OPTIONS_INIT;
  opts.num_cores = cores;
  opts.pin_threads = pinning;
  opts.collective_timeout_ms = timeout_ms;
  opts.close_on_failure = 0;
  tpu_system *sys = NULL;
  tpu_status st = tpu_system_init(&opts, &sys);
  if (st != TPU_OK) fail_msg("tpu_system_init: %s: %s", tpu_status_name(st), tpu_last_error());
  g_sys = sys;
  return sys;
}

static tpu_system *start_system(int cores, int64_t timeout_ms) {
  return start_system_pinned(cores, timeout_ms, TPU_PIN_AUTO);
}

/* ---- element access as double / int64, independent of the library ---------- */

static int is_float(tpu_dtype d) {
  return d == TPU_FLOAT || d == TPU_DOUBLE || d == TPU_BFLOAT16 || d == TPU_HALF;
}

static size_t esize(tpu_dtype d) {
  size_t s = 0;
  CHECK_OK(tpu_dtype_size(d, &s));
  return s;
}

static float bf16_to_f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint16_t f_to_bf16(float f) { /* reference RNE, NaN not used here */
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* half via the library's exact conversions (tested exhaustively elsewhere) */
static float half_to_f(uint16_t h) {
  float f;
  CHECK_OK(tpu_half_to_float(&h, &f, 1));
  return f;
}

static uint16_t f_to_half(float f) {
  uint16_t h;
  CHECK_OK(tpu_float_to_half(&f, &h, 1));
  return h;
}

/* Wraps v to the dtype's width, as the integer arithmetic of that type does. */
static int64_t wrap_i(tpu_dtype d, int64_t v) {
  switch (d) {
    case TPU_INT8: return (int8_t)v;
    case TPU_UINT8: return (uint8_t)v;
    case TPU_INT16: return (int16_t)v;
    case TPU_INT32: return (int32_t)v;
    case TPU_UINT32: return (uint32_t)v;
    case TPU_BOOL: return v != 0;
    default: return v;
  }
}

static void set_value(tpu_dtype d, void *p, int64_t i, int64_t v) {
  switch (d) {
    case TPU_FLOAT: ((float *)p)[i] = (float)v; break;
    case TPU_DOUBLE: ((double *)p)[i] = (double)v; break;
    case TPU_BFLOAT16: ((uint16_t *)p)[i] = f_to_bf16((float)v); break;
    case TPU_HALF: ((uint16_t *)p)[i] = f_to_half((float)v); break;
    case TPU_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
    case TPU_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case TPU_INT16: ((int16_t *)p)[i] = (int16_t)v; break;
    case TPU_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case TPU_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case TPU_INT64: ((int64_t *)p)[i] = v; break;
    case TPU_UINT64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    case TPU_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    case TPU_COMPLEX64: ((float *)p)[2 * i] = (float)v; ((float *)p)[2 * i + 1] = (float)(-v); break;
  }
}

/* Replica r's element i: small integers, so float sums are exact. Unsigned types
 * and bool get non-negative values. */
static int64_t input_value(tpu_dtype d, int r, int64_t i) {
  int64_t v = (r * 7 + i * 3) % 11 - 5;
  if (d == TPU_UINT8 || d == TPU_UINT32 || d == TPU_UINT64) v += 5;
  if (d == TPU_BOOL) v = ((r + i) % 3) != 0;
  return v;
}

static tpu_tensor *make_input(tpu_dtype d, int r, const int64_t *dims, int rank) {
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(d, dims, rank, NULL, 0, &t));
  void *data;
  int64_t n;
  tpu_tensor_mutable_data(t, &data);
  tpu_tensor_num_elements(t, &n);
  for (int64_t i = 0; i < n; ++i) set_value(d, data, i, input_value(d, r, i));
  return t;
}

/* The reduction of element i over the replicas in members[0..g), in member order,
 * as the dtype computes it. Writes the expected element into `expect` at index 0. */
static void reference_reduce(tpu_dtype d, tpu_reduce_op op, const int32_t *members, int g,
                             int64_t i, void *expect) {
  if (is_float(d)) {
    /* float32 and double: exact for these small integers; bf16/half accumulate in
     * float32 and round once. */
    double acc = 0;
    for (int k = 0; k < g; ++k) {
      double v = (double)input_value(d, members[k], i);
      if (d == TPU_BFLOAT16) v = bf16_to_f(f_to_bf16((float)v));
      if (d == TPU_HALF) v = half_to_f(f_to_half((float)v));
      if (k == 0) { acc = v; continue; }
      switch (op) {
        case TPU_REDUCE_SUM: case TPU_REDUCE_MEAN: acc = d == TPU_DOUBLE ? acc + v : (float)(acc + v); break;
        case TPU_REDUCE_PROD: acc = d == TPU_DOUBLE ? acc * v : (float)(acc * v); break;
        case TPU_REDUCE_MIN: acc = v < acc ? v : acc; break;
        case TPU_REDUCE_MAX: acc = v > acc ? v : acc; break;
      }
    }
    if (op == TPU_REDUCE_MEAN) acc = d == TPU_DOUBLE ? acc / g : (float)(acc / g);
    switch (d) {
      case TPU_FLOAT: *(float *)expect = (float)acc; break;
      case TPU_DOUBLE: *(double *)expect = acc; break;
      case TPU_BFLOAT16: *(uint16_t *)expect = f_to_bf16((float)acc); break;
      default: *(uint16_t *)expect = f_to_half((float)acc); break;
    }
    return;
  }
  if (d == TPU_COMPLEX64) {
    float re = 0, im = 0;
    for (int k = 0; k < g; ++k) {
      int64_t v = input_value(d, members[k], i);
      float vr = (float)v, vi = (float)(-v); /* as set_value writes it: no -0.0f */
      if (k == 0) { re = vr; im = vi; continue; }
      if (op == TPU_REDUCE_PROD) {
        float nr = re * vr - im * vi, ni = re * vi + im * vr;
        re = nr; im = ni;
      } else {
        re += vr; im += vi;
      }
    }
    if (op == TPU_REDUCE_MEAN) { re /= g; im /= g; }
    ((float *)expect)[0] = re;
    ((float *)expect)[1] = im;
    return;
  }
  int64_t acc = 0;
  for (int k = 0; k < g; ++k) {
    int64_t v = input_value(d, members[k], i);
    if (k == 0) { acc = v; continue; }
    switch (op) {
      case TPU_REDUCE_MEAN: acc += v; break; /* the mean of the values: no wrapping */
      case TPU_REDUCE_SUM: acc = wrap_i(d, (int64_t)((uint64_t)acc + (uint64_t)v)); break;
      case TPU_REDUCE_PROD: acc = wrap_i(d, (int64_t)((uint64_t)acc * (uint64_t)v)); break;
      case TPU_REDUCE_MIN: acc = d == TPU_BOOL ? (acc && v) : (v < acc ? v : acc); break;
      case TPU_REDUCE_MAX: acc = d == TPU_BOOL ? (acc || v) : (v > acc ? v : acc); break;
    }
  }
  if (op == TPU_REDUCE_MEAN) acc /= g; /* truncates toward zero */
  set_value(d, expect, 0, acc);
}

/* ---- a generic collective case -------------------------------------------- */

typedef enum { OP_ALL_REDUCE, OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_ALL_TO_ALL, OP_PERMUTE, OP_BROADCAST } op_kind;

typedef struct {
  op_kind kind;
  tpu_dtype dtype;
  tpu_reduce_op op;
  int rank;
  int64_t dims[4];
  int axis, axis2;  /* gather/scatter axis; all-to-all split (axis) and concat (axis2) */
  int root;
  const tpu_group_assignment *groups;
  const int32_t *pairs;
  int num_pairs;
  int replicas;
  long wrong[MAX_REPLICAS];
  tpu_status status[MAX_REPLICAS];
} coll_case;

/* The group (members, size, position) of replica r. */
static int group_of(const coll_case *c, int r, const int32_t **members, int *pos) {
  static int32_t all[MAX_REPLICAS] = {0, 1, 2, 3, 4, 5, 6, 7};
  if (c->groups == NULL) {
    *members = all;
    *pos = r;
    return c->replicas;
  }
  for (int g = 0; g < c->groups->num_groups; ++g)
    for (int k = 0; k < c->groups->group_size; ++k)
      if (c->groups->replica_ids[g * c->groups->group_size + k] == r) {
        *members = c->groups->replica_ids + g * c->groups->group_size;
        *pos = k;
        return c->groups->group_size;
      }
  CHECK_FAIL("replica %d in no group", r); /* runs on a worker */
  return 0;
}

static void unravel(int64_t flat, const int64_t *dims, int rank, int64_t *idx) {
  for (int a = rank - 1; a >= 0; --a) {
    idx[a] = flat % dims[a];
    flat /= dims[a];
  }
}

static int64_t ravel(const int64_t *idx, const int64_t *dims, int rank) {
  int64_t f = 0;
  for (int a = 0; a < rank; ++a) f = f * dims[a] + idx[a];
  return f;
}

/* Checks replica r's output element by element; returns the number of wrong ones. */
static long check_output(const coll_case *c, int r, const tpu_tensor *out) {
  const int32_t *members = NULL;
  int pos = 0;
  int g = group_of(c, r, &members, &pos);
  if (g == 0) return 1;
  size_t es = esize(c->dtype);
  int64_t odims[4];
  int orank = 0;
  tpu_tensor_rank(out, &orank);
  CHECK(orank == c->rank); /* runs on a worker */
  if (orank != c->rank) return 1;
  tpu_tensor_dims(out, odims, 4, &(size_t){0});
  int64_t n = 1;
  for (int a = 0; a < orank; ++a) n *= odims[a];
  const void *data;
  tpu_tensor_data(out, &data);
  unsigned char expect[16];
  long wrong = 0;
  for (int64_t f = 0; f < n; ++f) {
    int64_t idx[4] = {0};
    unravel(f, odims, orank, idx);
    switch (c->kind) {
      case OP_ALL_REDUCE: reference_reduce(c->dtype, c->op, members, g, f, expect); break;
      case OP_REDUCE_SCATTER: {
        int64_t in_idx[4];
        memcpy(in_idx, idx, sizeof in_idx);
        in_idx[c->axis] += pos * odims[c->axis];
        reference_reduce(c->dtype, c->op, members, g, ravel(in_idx, c->dims, c->rank), expect);
        break;
      }
      case OP_ALL_GATHER: {
        int64_t blk = c->dims[c->axis], src = members[idx[c->axis] / blk];
        idx[c->axis] %= blk;
        set_value(c->dtype, expect, 0, input_value(c->dtype, (int)src, ravel(idx, c->dims, c->rank)));
        break;
      }
      case OP_ALL_TO_ALL: {
        int split = c->axis, concat = c->axis2;
        int64_t bs = c->dims[split] / g;
        int64_t bc = split == concat ? bs : c->dims[concat];
        int64_t j = idx[concat] / bc; /* which member's block */
        int64_t in_idx[4];
        memcpy(in_idx, idx, sizeof in_idx);
        in_idx[concat] = idx[concat] % bc;
        in_idx[split] = (split == concat ? in_idx[split] : idx[split]) + pos * bs;
        set_value(c->dtype, expect, 0, input_value(c->dtype, members[j], ravel(in_idx, c->dims, c->rank)));
        break;
      }
      case OP_PERMUTE: {
        int src = -1;
        for (int p = 0; p < c->num_pairs; ++p)
          if (c->pairs[2 * p + 1] == r) src = c->pairs[2 * p];
        if (src < 0) memset(expect, 0, es);
        else set_value(c->dtype, expect, 0, input_value(c->dtype, src, f));
        break;
      }
      case OP_BROADCAST:
        set_value(c->dtype, expect, 0, input_value(c->dtype, members[c->root], f));
        break;
    }
    if (memcmp((const char *)data + f * es, expect, es) != 0) ++wrong;
  }
  return wrong;
}

static tpu_status run_collective(tpu_replica_context *ctx, const coll_case *c, tpu_tensor *x,
                                 tpu_tensor **out) {
  switch (c->kind) {
    case OP_ALL_REDUCE:
      return c->op == TPU_REDUCE_SUM && (c->dtype == TPU_FLOAT)
                 ? tpu_cross_replica_sum(ctx, x, c->groups, out, NULL)
                 : tpu_all_reduce(ctx, x, c->op, c->groups, out, NULL);
    case OP_ALL_GATHER: return tpu_all_gather(ctx, x, c->axis, c->groups, out, NULL);
    case OP_REDUCE_SCATTER: return tpu_reduce_scatter(ctx, x, c->op, c->axis, c->groups, out, NULL);
    case OP_ALL_TO_ALL: {
      int g = c->groups ? c->groups->group_size : c->replicas;
      return tpu_all_to_all(ctx, x, c->axis2, c->axis, g, c->groups, out, NULL);
    }
    case OP_PERMUTE: return tpu_collective_permute(ctx, x, c->pairs, c->num_pairs, out, NULL);
    case OP_BROADCAST: return tpu_broadcast(ctx, x, c->root, c->groups, out, NULL);
  }
  return TPU_INTERNAL;
}

static tpu_status case_computation(tpu_replica_context *ctx, tpu_tensor *const *inputs, int ni,
                                   tpu_tensor **outputs, int no, void *user_data) {
  coll_case *c = user_data;
  int r;
  tpu_replica_context_replica_id(ctx, &r);
  tpu_tensor *x = make_input(c->dtype, r, c->dims, c->rank);
  tpu_tensor *out = NULL;
  tpu_status st = run_collective(ctx, c, x, &out);
  c->status[r] = st;
  if (st == TPU_OK) {
    c->wrong[r] = check_output(c, r, out);
    tpu_tensor_release(out);
  }
  tpu_tensor_release(x);
  return st;
}

/* A case on a vector of `count` elements. */
static coll_case vector_case(op_kind kind, tpu_dtype dtype, tpu_reduce_op op, int64_t count,
                             int replicas) {
  coll_case c = {0};
  c.kind = kind;
  c.dtype = dtype;
  c.op = op;
  c.rank = 1;
  c.dims[0] = count;
  c.replicas = replicas;
  return c;
}

static void run_case(tpu_system *sys, coll_case *c) {
  memset(c->wrong, 0, sizeof c->wrong);
  tpu_status st = tpu_replicate(sys, case_computation, c, c->replicas, 0, NULL, 0, NULL, NULL);
  CHECK_NO_WORKER_FAILURES();
  if (st != TPU_OK) fail_msg("kind %d dtype %d replicas %d: %s: %s", c->kind, c->dtype, c->replicas,
                             tpu_status_name(st), tpu_last_error());
  for (int r = 0; r < c->replicas; ++r)
    if (c->wrong[r]) fail_msg("kind %d dtype %d op %d replicas %d dims0 %lld: replica %d has %ld wrong elements",
                              c->kind, c->dtype, c->op, c->replicas, (long long)c->dims[0], r, c->wrong[r]);
}

static const tpu_dtype kAllDtypes[] = {TPU_FLOAT, TPU_DOUBLE, TPU_INT32, TPU_UINT8, TPU_INT16, TPU_INT8,
                                       TPU_COMPLEX64, TPU_INT64, TPU_BOOL, TPU_BFLOAT16, TPU_HALF,
                                       TPU_UINT32, TPU_UINT64};
#define NUM_DTYPES (sizeof kAllDtypes / sizeof kAllDtypes[0])

static int op_allowed(tpu_dtype d, tpu_reduce_op op) {
  if (d == TPU_BOOL) return op == TPU_REDUCE_MIN || op == TPU_REDUCE_MAX;
  if (d == TPU_COMPLEX64) return op != TPU_REDUCE_MIN && op != TPU_REDUCE_MAX;
  return 1;
}

/* Element counts that exercise the line (<= 48 B), record (<= 4 KiB) and in-place
 * paths, with sizes that do not divide evenly among replicas. */
static const int64_t kSizes[] = {1, 5, 333, 70001};

static void test_collectives__all_reduce_every_dtype_op_and_replica_count(void **state) {
  (void)state;
  const int replica_counts[] = {1, 2, 3, 5, 8};
  for (size_t rc = 0; rc < sizeof replica_counts / sizeof replica_counts[0]; ++rc) {
    int n = replica_counts[rc];
    tpu_system *sys = start_system(n, time_limit_ms(20000));
    for (size_t di = 0; di < NUM_DTYPES; ++di)
      for (int op = TPU_REDUCE_SUM; op <= TPU_REDUCE_MEAN; ++op) {
        if (!op_allowed(kAllDtypes[di], (tpu_reduce_op)op)) continue;
        for (size_t si = 0; si < sizeof kSizes / sizeof kSizes[0]; ++si) {
          coll_case c = vector_case(OP_ALL_REDUCE, kAllDtypes[di], (tpu_reduce_op)op, kSizes[si], n);
          run_case(sys, &c);
        }
      }
    release_system(NULL);
  }
}

static void test_collectives__all_reduce_groups(void **state) {
  (void)state;
  tpu_system *sys = start_system(6, time_limit_ms(20000));
  const int32_t pairs_ids[] = {0, 3, 1, 4, 2, 5};
  const int32_t thirds_ids[] = {5, 1, 0, 2, 4, 3};
  tpu_group_assignment pairs = {pairs_ids, 3, 2}, thirds = {thirds_ids, 2, 3};
  const tpu_group_assignment *groups[] = {&pairs, &thirds};
  for (int gi = 0; gi < 2; ++gi)
    for (size_t si = 0; si < sizeof kSizes / sizeof kSizes[0]; ++si) {
      coll_case c = vector_case(OP_ALL_REDUCE, gi ? TPU_BFLOAT16 : TPU_FLOAT, TPU_REDUCE_SUM,
                                kSizes[si], 6);
      c.groups = groups[gi];
      run_case(sys, &c);
    }
  release_system(NULL);
}

static void test_collectives__large_all_reduce_streaming_path(void **state) {
  (void)state;
  tpu_system *sys = start_system(2, time_limit_ms(60000));
  /* 9 MiB per replica: outputs total > 16 MiB */
  coll_case c = vector_case(OP_ALL_REDUCE, TPU_FLOAT, TPU_REDUCE_SUM, (9 << 20) / 4 + 13, 2);
  run_case(sys, &c);
  release_system(NULL);
}

static void test_collectives__all_gather_reduce_scatter_all_to_all(void **state) {
  (void)state;
  const int replica_counts[] = {1, 3, 4};
  const tpu_dtype dtypes[] = {TPU_FLOAT, TPU_INT8, TPU_COMPLEX64, TPU_HALF};
  for (size_t rc = 0; rc < 3; ++rc) {
    int n = replica_counts[rc];
    tpu_system *sys = start_system(n, time_limit_ms(20000));
    for (size_t di = 0; di < sizeof dtypes / sizeof dtypes[0]; ++di)
      for (int big = 0; big < 2; ++big)
        for (int axis = 0; axis < 3; ++axis) {
          coll_case c = {0};
          c.dtype = dtypes[di];
          c.rank = 3;
          c.dims[0] = 2 * n;
          c.dims[1] = big ? 60 * n : 3 * n;
          c.dims[2] = axis == 2 ? 2 * n : n + 1; /* n + 1: an axis that need not divide */
          c.replicas = n;
          c.axis = axis;
          c.kind = OP_ALL_GATHER;
          run_case(sys, &c);
          c.kind = OP_REDUCE_SCATTER;
          c.op = dtypes[di] == TPU_COMPLEX64 ? TPU_REDUCE_SUM : TPU_REDUCE_MAX;
          run_case(sys, &c);
          for (int axis2 = 0; axis2 < 3; ++axis2) {
            c.kind = OP_ALL_TO_ALL;
            c.axis2 = axis2;
            run_case(sys, &c);
          }
        }
    release_system(NULL);
  }
}

static void test_collectives__grouped_gather_and_all_to_all(void **state) {
  (void)state;
  tpu_system *sys = start_system(4, time_limit_ms(20000));
  const int32_t ids[] = {3, 0, 2, 1};
  tpu_group_assignment groups = {ids, 2, 2};
  coll_case c = {0};
  c.dtype = TPU_INT32;
  c.rank = 2;
  c.dims[0] = 4;
  c.dims[1] = 6;
  c.groups = &groups;
  c.replicas = 4;
  c.kind = OP_ALL_GATHER;
  c.axis = 1;
  run_case(sys, &c);
  c.kind = OP_ALL_TO_ALL;
  c.axis = 0;
  c.axis2 = 1;
  run_case(sys, &c);
  c.kind = OP_REDUCE_SCATTER;
  c.op = TPU_REDUCE_SUM;
  c.axis = 0;
  run_case(sys, &c);
  c.kind = OP_BROADCAST;
  c.root = 1;
  run_case(sys, &c);
  release_system(NULL);
}

static void test_collectives__permute_and_broadcast(void **state) {
  (void)state;
  tpu_system *sys = start_system(4, time_limit_ms(20000));
  const int32_t chain[] = {0, 1, 1, 2, 2, 3}; /* TF's example: [0, A, B, C] */
  const int32_t ring[] = {0, 1, 1, 2, 2, 3, 3, 0};
  const int64_t sizes[] = {3, 5000};
  for (int s = 0; s < 2; ++s) {
    coll_case c = vector_case(OP_PERMUTE, TPU_DOUBLE, TPU_REDUCE_SUM, sizes[s], 4);
    c.pairs = chain;
    c.num_pairs = 3;
    run_case(sys, &c);
    c.pairs = ring;
    c.num_pairs = 4;
    run_case(sys, &c);
    c.pairs = NULL;
    c.num_pairs = 0; /* nobody receives: all zeros */
    run_case(sys, &c);
    c.kind = OP_BROADCAST;
    c.root = 2;
    run_case(sys, &c);
  }
  release_system(NULL);
}

/* ---- error paths ----------------------------------------------------------- */

/* `message` is "replica N: <want>" for a replica N of the step: the replica is
 * named once, at the front. */
static void expect_replica_message(const char *message, const char *want) {
  int replica = -1, prefix = 0;
  if (sscanf(message, "replica %d: %n", &replica, &prefix) != 1 || prefix == 0 || replica < 0 ||
      replica >= 4 || strcmp(message + prefix, want) != 0)
    fail_msg("message \"%s\" is not \"replica N: %s\"", message, want);
}


typedef struct {
  int mode;
  int stuck_ms; /* how long replica 3 sleeps before its collective in STUCK_REPLICA */
  tpu_status status[MAX_REPLICAS];
  char message[MAX_REPLICAS][512];
  char first[MAX_REPLICAS][512]; /* BAD_GROUPS_ONE_THEN_BARRIER: the first collective's */
} err_case;

enum {
  MISMATCH_DTYPE, MISMATCH_SHAPE, MISMATCH_OP, MISMATCH_GROUPS, MISMATCH_KIND,
  SKIP_COLLECTIVE, STUCK_REPLICA, FAILING_REPLICA, BAD_GROUPS, BAD_AXIS, BAD_PAIRS, BF16_SCOPE_MISMATCH,
  BAD_GROUPS_ONE, BAD_GROUPS_ONE_SWALLOWED, BAD_GROUPS_ONE_THEN_BARRIER,
  COMPLEX_MAX, BOOL_SUM, SCATTER_NOT_DIVISIBLE, SPLIT_COUNT_NOT_GROUP_SIZE
};

static tpu_status err_computation(tpu_replica_context *ctx, tpu_tensor *const *inputs, int ni,
                                  tpu_tensor **outputs, int no, void *user_data) {
  err_case *e = user_data;
  int r;
  tpu_replica_context_replica_id(ctx, &r);
  int64_t dims[1] = {r == 2 && e->mode == MISMATCH_SHAPE ? 5 : 4};
  tpu_dtype d = r == 2 && e->mode == MISMATCH_DTYPE ? TPU_INT32 : TPU_FLOAT;
  tpu_tensor *x = make_input(d, r, dims, 1), *out = NULL;
  tpu_status st = TPU_OK;
  const int32_t ids_a[] = {0, 1, 2, 3}, ids_b[] = {1, 0, 2, 3};
  tpu_group_assignment ga = {ids_a, 2, 2}, gb = {ids_b, 2, 2};
  switch (e->mode) {
    case MISMATCH_OP:
      st = tpu_all_reduce(ctx, x, r == 3 ? TPU_REDUCE_MAX : TPU_REDUCE_SUM, NULL, &out, NULL);
      break;
    case MISMATCH_GROUPS: st = tpu_cross_replica_sum(ctx, x, r == 1 ? &gb : &ga, &out, NULL); break;
    case MISMATCH_KIND:
      st = r == 0 ? tpu_broadcast(ctx, x, 0, NULL, &out, NULL) : tpu_cross_replica_sum(ctx, x, NULL, &out, NULL);
      break;
    case SKIP_COLLECTIVE:
      if (r != 1) st = tpu_cross_replica_sum(ctx, x, NULL, &out, NULL);
      break;
    case STUCK_REPLICA:
      if (r == 3) {
        struct timespec ts = {e->stuck_ms / 1000, (e->stuck_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
      }
      st = tpu_cross_replica_sum(ctx, x, NULL, &out, NULL);
      break;
    case FAILING_REPLICA:
      if (r == 2) {
        st = tpu_replica_context_fail(ctx, TPU_INTERNAL, "the model diverged");
      } else {
        st = tpu_cross_replica_sum(ctx, x, NULL, &out, NULL);
        if (st == TPU_OK) { tpu_tensor_release(out); out = NULL; st = tpu_cross_replica_sum(ctx, x, NULL, &out, NULL); }
      }
      break;
    case BAD_GROUPS: {
      const int32_t dup[] = {0, 1, 1, 3};
      tpu_group_assignment bad = {dup, 2, 2};
      st = tpu_cross_replica_sum(ctx, x, &bad, &out, NULL);
      break;
    }
    case BAD_GROUPS_ONE:
    case BAD_GROUPS_ONE_SWALLOWED: {
      /* Only replica 2 passes bad groups; it returns last, so the others, failed by its
       * error, record theirs first. */
      const int32_t dup[] = {0, 1, 1, 3};
      tpu_group_assignment bad = {dup, 2, 2};
      st = tpu_cross_replica_sum(ctx, x, r == 2 ? &bad : NULL, &out, NULL);
      if (r == 2) {
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
        if (e->mode == BAD_GROUPS_ONE_SWALLOWED) {
          snprintf(e->message[r], sizeof e->message[r], "%s", tpu_last_error());
          e->status[r] = st;
          tpu_tensor_release(x);
          return TPU_OK;
        }
      }
      break;
    }
    case BAD_GROUPS_ONE_THEN_BARRIER: {
      /* Only replica 2 passes groups, which leave it out; every replica then goes on
       * to a barrier, as a computation that checks its status only at the end does. */
      const int32_t three[] = {0, 1, 3};
      tpu_group_assignment leaves_2 = {three, 1, 3};
      st = tpu_cross_replica_sum(ctx, x, r == 2 ? &leaves_2 : NULL, &out, NULL);
      snprintf(e->first[r], sizeof e->first[r], "%s", st == TPU_OK ? "" : tpu_last_error());
      if (r == 2) {
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL); /* the others reach the barrier first */
      }
      st = tpu_barrier(ctx, NULL);
      break;
    }
    case BAD_AXIS: st = tpu_all_gather(ctx, x, r == 0 ? 3 : 0, NULL, &out, NULL); break;
    case BAD_PAIRS: {
      const int32_t pairs[] = {0, 1, 2, 1};
      st = tpu_collective_permute(ctx, x, pairs, 2, &out, NULL);
      break;
    }
    case COMPLEX_MAX:
    case BOOL_SUM: {
      tpu_tensor_release(x);
      x = make_input(e->mode == BOOL_SUM ? TPU_BOOL : TPU_COMPLEX64, r, dims, 1);
      st = tpu_all_reduce(ctx, x, e->mode == BOOL_SUM ? TPU_REDUCE_SUM : TPU_REDUCE_MAX, NULL, &out, NULL);
      break;
    }
    case SCATTER_NOT_DIVISIBLE: {
      const int64_t six[1] = {6};
      tpu_tensor_release(x);
      x = make_input(TPU_FLOAT, r, six, 1);
      st = tpu_reduce_scatter(ctx, x, TPU_REDUCE_SUM, 0, NULL, &out, NULL);
      break;
    }
    case SPLIT_COUNT_NOT_GROUP_SIZE: st = tpu_all_to_all(ctx, x, 0, 0, 2, NULL, &out, NULL); break;
    case BF16_SCOPE_MISMATCH:
      if (r == 0) tpu_bfloat16_scope_enter(ctx);
      st = tpu_cross_replica_sum(ctx, x, NULL, &out, NULL);
      if (r == 0) tpu_bfloat16_scope_exit(ctx);
      break;
    default:
      st = tpu_cross_replica_sum(ctx, x, NULL, &out, NULL);
  }
  e->status[r] = st;
  snprintf(e->message[r], sizeof e->message[r], "%s", st == TPU_OK ? "" : tpu_last_error());
  tpu_tensor_release(out);
  tpu_tensor_release(x);
  return st;
}

/* Runs a 4-replica step in `mode`. */
static tpu_status run_error_step(tpu_system *sys, int mode, err_case *e) {
  int stuck_ms = e->stuck_ms;
  memset(e, 0, sizeof *e);
  e->mode = mode;
  e->stuck_ms = stuck_ms;
  return tpu_replicate(sys, err_computation, e, 4, 0, NULL, 0, NULL, NULL);
}

/* The step in `mode` fails with `want` and a message containing `needle`; then a
 * correct step runs. */
#define CHECK_STEP_ERROR(sys, mode, want, needle, e)               \
  do {                                                             \
    CHECK_ERROR(run_error_step((sys), (mode), (e)), want, needle); \
    run_ok_step(sys);                                              \
  } while (0)

static void run_ok_step(tpu_system *sys) {
  coll_case ok = {0};
  ok.kind = OP_ALL_REDUCE;
  ok.dtype = TPU_FLOAT;
  ok.op = TPU_REDUCE_SUM;
  ok.rank = 1;
  ok.dims[0] = 100;
  ok.replicas = 4;
  run_case(sys, &ok);
}

static void test_collectives__mismatches_fail_every_participant(void **state) {
  (void)state;
  tpu_system *sys = start_system(4, time_limit_ms(10000));
  err_case e;
  CHECK_STEP_ERROR(sys, MISMATCH_DTYPE, TPU_INVALID_ARGUMENT, "replica 2 called all_reduce int32[4]", &e);
  for (int r = 0; r < 4; ++r) assert_int_equal(e.status[r], TPU_INVALID_ARGUMENT);
  CHECK_STEP_ERROR(sys, MISMATCH_SHAPE, TPU_INVALID_ARGUMENT, "replica 2 called all_reduce float32[5]", &e);
  for (int r = 0; r < 4; ++r) assert_int_equal(e.status[r], TPU_INVALID_ARGUMENT);
  CHECK_STEP_ERROR(sys, MISMATCH_OP, TPU_INVALID_ARGUMENT, "replica 3", &e);
  for (int r = 0; r < 4; ++r) assert_non_null(strstr(e.message[r], "op=max"));
  CHECK_STEP_ERROR(sys, MISMATCH_GROUPS, TPU_INVALID_ARGUMENT, "replica 1", &e);
  CHECK_STEP_ERROR(sys, MISMATCH_KIND, TPU_INVALID_ARGUMENT, "replica 0 called broadcast", &e);
  CHECK_STEP_ERROR(sys, BF16_SCOPE_MISMATCH, TPU_INVALID_ARGUMENT, "replica 0", &e);
  release_system(NULL);
}

static void test_collectives__missing_and_stuck_replicas(void **state) {
  (void)state;
  tpu_system *sys = start_system(4, 300);
  err_case e = {0};
  /* A replica that finishes without the collective is named at once. */
  CHECK_STEP_ERROR(sys, SKIP_COLLECTIVE, TPU_FAILED_PRECONDITION, "replica 1 finished its computation without joining", &e);
  CHECK_OK(e.status[1]);
  /* A replica that arrives after the deadline but returns within the grace period
   * after the failure: the others time out naming it, and the system goes on. */
  e.stuck_ms = 450;
  CHECK_STEP_ERROR(sys, STUCK_REPLICA, TPU_DEADLINE_EXCEEDED, "waiting for replicas [3]", &e);
  assert_int_equal(e.status[0], TPU_DEADLINE_EXCEEDED);
  assert_int_equal(e.status[3], TPU_DEADLINE_EXCEEDED);

  /* A replica late past the grace period too: the caller still gets the deadline
   * error in bounded time, and a step that needs its core fails once it has waited
   * the deadline for it. */
  sys = start_system(4, 100);
  /* The late replica still writes its status when it wakes: give it a case that
   * outlives this test and that nothing else touches. */
  static err_case late;
  late.stuck_ms = 1500;
  assert_int_equal(run_error_step(sys, STUCK_REPLICA, &late), TPU_DEADLINE_EXCEEDED);
  assert_non_null(strstr(tpu_last_error(), "waiting for replicas [3]"));
  assert_non_null(strstr(tpu_last_error(), "(replica 3 did not return within 100 ms of the failure)"));
  assert_int_equal(run_error_step(sys, MISMATCH_DTYPE, &e), TPU_UNAVAILABLE);
  assert_non_null(strstr(tpu_last_error(), "core 3 (still running replica 3 of an earlier step"));
  release_system(NULL);
}

static void test_collectives__failing_replica_aborts_the_others(void **state) {
  (void)state;
  tpu_system *sys = start_system(4, time_limit_ms(60000)); /* a long deadline: release must not wait for it */
  err_case e;
  CHECK_STEP_ERROR(sys, FAILING_REPLICA, TPU_INTERNAL, "replica 2: the model diverged", &e);
  for (int r = 0; r < 4; ++r)
    if (r != 2) {
      assert_int_equal(e.status[r], TPU_ABORTED);
      assert_non_null(strstr(e.message[r], "replica 2 failed"));
    }
  release_system(NULL);
}

/* The failing replica's own later collectives give it its own message, not its own
 * name before it: the step's message names it once ("replica 2: replica 2 is in no
 * group", not "replica 2: replica 2: ..."). The others' name it as the one that failed. */
static void test_collectives__error_messages_name_the_failing_replica_once(void **state) {
  (void)state;
  tpu_system *sys = start_system(4, time_limit_ms(10000));
  err_case e;
  const char *raw = "replica 2 is in no group (group_assignment has 1 groups of 3 for 4 replicas)";
  char step[256], others[256];
  snprintf(step, sizeof step, "replica 2: %s", raw);
  snprintf(others, sizeof others, "replica 2 failed (INVALID_ARGUMENT): %s", raw);
  CHECK_STEP_ERROR(sys, BAD_GROUPS_ONE_THEN_BARRIER, TPU_INVALID_ARGUMENT, raw, &e);
  assert_string_equal(tpu_last_error(), step);
  for (int r = 0; r < 4; ++r) {
    assert_int_equal(e.status[r], TPU_INVALID_ARGUMENT);
    assert_string_equal(e.first[r], r == 2 ? raw : others);
    assert_string_equal(e.message[r], r == 2 ? raw : others);
  }
  release_system(NULL);
}

static void test_collectives__bad_arguments(void **state) {
  (void)state;
  tpu_system *sys = start_system(4, time_limit_ms(10000));
  err_case e;
  /* Every replica finds the duplicate; the step names one of them, once. */
  const char *dup = "replica 1 appears twice in group_assignment (group 0 and group 1)";
  CHECK_STEP_ERROR(sys, BAD_GROUPS, TPU_INVALID_ARGUMENT, dup, &e);
  expect_replica_message(tpu_last_error(), dup);
  for (int r = 0; r < 4; ++r) assert_int_equal(e.status[r], TPU_INVALID_ARGUMENT);
  /* Only replica 2 passes them: the step names replica 2 ("replica 2: ..."), even when
   * the others fail first and even when replica 2 returns OK; the others get "replica 2
   * failed (INVALID_ARGUMENT): ...", which does not read as if they were replica 2. */
  char want[256], others[256];
  snprintf(want, sizeof want, "replica 2: %s", dup);
  snprintf(others, sizeof others, "replica 2 failed (INVALID_ARGUMENT): %s", dup);
  for (int mode = BAD_GROUPS_ONE; mode <= BAD_GROUPS_ONE_SWALLOWED; ++mode) {
    CHECK_STEP_ERROR(sys, mode, TPU_INVALID_ARGUMENT, dup, &e);
    assert_string_equal(tpu_last_error(), want);
    for (int r = 0; r < 4; ++r) {
      assert_int_equal(e.status[r], TPU_INVALID_ARGUMENT);
      assert_string_equal(e.message[r], r == 2 ? dup : others);
    }
  }
  CHECK_STEP_ERROR(sys, BAD_AXIS, TPU_INVALID_ARGUMENT, "axis 3 is out of range", &e);
  CHECK_STEP_ERROR(sys, BAD_PAIRS, TPU_INVALID_ARGUMENT, "Target 1 appears more than once", &e);
  release_system(NULL);
}

/* What the operations refuse (collectives.h): MIN/MAX of complex64, bool other than
 * MIN and MAX, a scatter axis the group size does not divide, and a split_count other
 * than the group size; every replica gets the error. */
static void test_collectives__refused_reductions_and_splits(void **state) {
  (void)state;
  tpu_system *sys = start_system(4, time_limit_ms(10000));
  err_case e;
  const struct {
    int mode;
    const char *want;
  } cases[] = {
      {COMPLEX_MAX, "complex64 tensors have no MIN or MAX"},
      {BOOL_SUM, "bool tensors can only be reduced with MIN (and) or MAX (or)"},
      {SCATTER_NOT_DIVISIBLE, "(6) is not divisible by the group size 4"},
      {SPLIT_COUNT_NOT_GROUP_SIZE, "split_count 2 must equal the group size 4"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    CHECK_STEP_ERROR(sys, cases[i].mode, TPU_INVALID_ARGUMENT, cases[i].want, &e);
    for (int r = 0; r < 4; ++r) assert_int_equal(e.status[r], TPU_INVALID_ARGUMENT);
  }
  release_system(NULL);
}

/* ---- integer MEAN ------------------------------------------------------------ */

typedef struct {
  tpu_dtype dtype;
  int64_t value[MAX_REPLICAS]; /* replica r's scalar (uint64 by its bits) */
  tpu_status status[MAX_REPLICAS];
  int64_t result[MAX_REPLICAS];
} mean_case;

/* Each replica all-reduces a scalar with MEAN. No cmocka assertions here: this runs
 * on the replicas' threads. */
static tpu_status mean_computation(tpu_replica_context *ctx, tpu_tensor *const *inputs, int ni,
                                   tpu_tensor **outputs, int no, void *user_data) {
  mean_case *m = user_data;
  int r = 0;
  size_t es = 0;
  tpu_replica_context_replica_id(ctx, &r);
  tpu_dtype_size(m->dtype, &es);
  unsigned char v[8];
  set_value(m->dtype, v, 0, m->value[r]);
  tpu_tensor *x = NULL, *out = NULL;
  tpu_status st = tpu_tensor_create(m->dtype, NULL, 0, v, es, &x);
  if (st == TPU_OK) st = tpu_all_reduce(ctx, x, TPU_REDUCE_MEAN, NULL, &out, NULL);
  if (st == TPU_OK) {
    const void *data = NULL;
    tpu_tensor_data(out, &data);
    m->result[r] = 0;
    switch (m->dtype) { /* read back as the dtype's own type */
      case TPU_INT8: m->result[r] = *(int8_t *)data; break;
      case TPU_UINT8: m->result[r] = *(uint8_t *)data; break;
      case TPU_INT16: m->result[r] = *(int16_t *)data; break;
      case TPU_INT32: m->result[r] = *(int32_t *)data; break;
      case TPU_UINT32: m->result[r] = *(uint32_t *)data; break;
      default: memcpy(&m->result[r], data, 8); break;
    }
  }
  m->status[r] = st;
  tpu_tensor_release(out);
  tpu_tensor_release(x);
  return st;
}

/* The integer mean is the mean of the values, truncated toward zero: the sum must
 * not wrap first (seven uint8 102s once gave 29). */
static void test_collectives__integer_mean_does_not_wrap(void **state) {
  (void)state;
  tpu_system *sys = start_system(7, 20000);
  const struct {
    tpu_dtype dtype;
    int64_t first, rest, want;
  } cases[] = {
      {TPU_UINT8, 102, 102, 102},
      {TPU_INT8, -100, -100, -100},
      {TPU_INT16, -10, 0, -1}, /* -10/7 = -1.43: toward zero, not -2 */
      {TPU_INT16, 10, 0, 1},
      {TPU_INT32, INT32_MAX, INT32_MAX, INT32_MAX},
      {TPU_UINT32, 4000000000, 4000000000, 4000000000},
      {TPU_INT64, INT64_MAX, INT64_MAX, INT64_MAX},
      {TPU_INT64, INT64_MIN, INT64_MIN, INT64_MIN},
      {TPU_UINT64, -1, -1, -1}, /* UINT64_MAX by its bits */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    mean_case m;
    memset(&m, 0, sizeof m);
    m.dtype = cases[i].dtype;
    for (int r = 0; r < 7; ++r) m.value[r] = r == 0 ? cases[i].first : cases[i].rest;
    tpu_status st = tpu_replicate(sys, mean_computation, &m, 7, 0, NULL, 0, NULL, NULL);
    if (st != TPU_OK) fail_msg("case %zu: %s: %s", i, tpu_status_name(st), tpu_last_error());
    for (int r = 0; r < 7; ++r)
      if (m.result[r] != cases[i].want)
        fail_msg("case %zu (dtype %d): replica %d got %lld, want %lld", i, cases[i].dtype, r,
                 (long long)m.result[r], (long long)cases[i].want);
  }
  release_system(NULL);
}

/* ---- output sizes that overflow ---------------------------------------------- */

enum { GATHER_DIM_OVERFLOW, GATHER_AXIS0_OF_EMPTY, GATHER_COUNT_OVERFLOW, ALL_TO_ALL_OVERFLOW,
       SCATTER_EMPTY_HUGE };

typedef struct {
  int mode;
  tpu_status status[MAX_REPLICAS];
  char message[MAX_REPLICAS][256];
  int64_t dims[MAX_REPLICAS][3];
} size_case;

#define HUGE_DIM (INT64_C(1) << 62)

static tpu_status size_computation(tpu_replica_context *ctx, tpu_tensor *const *inputs, int ni,
                                   tpu_tensor **outputs, int no, void *user_data) {
  size_case *c = user_data;
  int r = 0;
  tpu_replica_context_replica_id(ctx, &r);
  const int64_t empty_huge[2] = {0, HUGE_DIM};     /* 0 elements: a valid shape */
  const int64_t count_edge[3] = {3, INT64_C(1) << 61, 0}; /* 3 * 2^61 still fits */
  const int64_t empty_huge3[3] = {0, HUGE_DIM, HUGE_DIM};
  const int64_t *dims = c->mode == GATHER_COUNT_OVERFLOW ? count_edge
                        : c->mode == SCATTER_EMPTY_HUGE  ? empty_huge3
                                                         : empty_huge;
  const int rank = c->mode == GATHER_COUNT_OVERFLOW || c->mode == SCATTER_EMPTY_HUGE ? 3 : 2;
  tpu_tensor *x = NULL, *out = NULL;
  tpu_status st = tpu_tensor_create(TPU_INT8, dims, rank, NULL, 0, &x);
  if (st == TPU_OK) {
    switch (c->mode) {
      case GATHER_DIM_OVERFLOW: st = tpu_all_gather(ctx, x, 1, NULL, &out, NULL); break;
      case GATHER_AXIS0_OF_EMPTY: st = tpu_all_gather(ctx, x, 0, NULL, &out, NULL); break;
      case GATHER_COUNT_OVERFLOW: st = tpu_all_gather(ctx, x, 0, NULL, &out, NULL); break;
      case ALL_TO_ALL_OVERFLOW: st = tpu_all_to_all(ctx, x, 1, 0, 4, NULL, &out, NULL); break;
      default: st = tpu_reduce_scatter(ctx, x, TPU_REDUCE_SUM, 0, NULL, &out, NULL); break;
    }
  }
  c->status[r] = st;
  snprintf(c->message[r], sizeof c->message[r], "%s", st == TPU_OK ? "" : tpu_last_error());
  if (st == TPU_OK) tpu_tensor_dims(out, c->dims[r], 3, &(size_t){0});
  tpu_tensor_release(out);
  tpu_tensor_release(x);
  return st;
}

static void test_collectives__output_size_overflow(void **state) {
  (void)state;
  tpu_system *sys = start_system(4, 10000);
  size_case c;
  const struct {
    int mode;
    const char *want; /* NULL: succeeds */
  } cases[] = {
      {GATHER_DIM_OVERFLOW,
       "dimension 1 of all_gather's output (4 x int8[0,4611686018427387904]) overflows: "
       "4611686018427387904 * 4 is more than 9223372036854775807"},
      {GATHER_AXIS0_OF_EMPTY, NULL},
      {GATHER_COUNT_OVERFLOW,
       "the element count of shape [12,2305843009213693952,0] overflows: 12 * "
       "2305843009213693952 is more than 9223372036854775807"},
      {ALL_TO_ALL_OVERFLOW,
       "dimension 1 of all_to_all's output (int8[0,4611686018427387904] split 4 ways along 0 and "
       "concatenated along 1) overflows: 4611686018427387904 * 4 is more than 9223372036854775807"},
      {SCATTER_EMPTY_HUGE, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    memset(&c, 0, sizeof c);
    c.mode = cases[i].mode;
    tpu_status st = tpu_replicate(sys, size_computation, &c, 4, 0, NULL, 0, NULL, NULL);
    if (cases[i].want == NULL) {
      if (st != TPU_OK) fail_msg("mode %d: %s", c.mode, tpu_last_error());
      continue;
    }
    assert_int_equal(st, TPU_INVALID_ARGUMENT);
    expect_replica_message(tpu_last_error(), cases[i].want);
    for (int r = 0; r < 4; ++r) assert_int_equal(c.status[r], TPU_INVALID_ARGUMENT);
  }
  /* The empty outputs keep their huge dimensions. */
  c.mode = GATHER_AXIS0_OF_EMPTY;
  CHECK_OK(tpu_replicate(sys, size_computation, &c, 4, 0, NULL, 0, NULL, NULL));
  assert_true(c.dims[3][0] == 0 && c.dims[3][1] == HUGE_DIM);
  c.mode = SCATTER_EMPTY_HUGE;
  CHECK_OK(tpu_replicate(sys, size_computation, &c, 4, 0, NULL, 0, NULL, NULL));
  assert_true(c.dims[2][0] == 0 && c.dims[2][1] == HUGE_DIM && c.dims[2][2] == HUGE_DIM);
  release_system(NULL);
}

/* ---- bfloat16 scope ---------------------------------------------------------- */

typedef struct {
  float result[4][64];
  tpu_status status[4];
} bf16_case;

static float bf16_input(int r, int i) { return 1.0f + 0.001953125f * (float)(r * 37 + i) + 1e-4f * (float)i; }

static tpu_status bf16_computation(tpu_replica_context *ctx, tpu_tensor *const *inputs, int ni,
                                   tpu_tensor **outputs, int no, void *user_data) {
  bf16_case *b = user_data;
  int r;
  tpu_replica_context_replica_id(ctx, &r);
  float v[64];
  for (int i = 0; i < 64; ++i) v[i] = bf16_input(r, i);
  int64_t dims[1] = {64};
  tpu_tensor *x = NULL, *out = NULL;
  tpu_tensor_create(TPU_FLOAT, dims, 1, v, sizeof v, &x);
  tpu_bfloat16_scope_enter(ctx);
  b->status[r] = tpu_cross_replica_sum(ctx, x, NULL, &out, NULL);
  tpu_bfloat16_scope_exit(ctx);
  if (b->status[r] == TPU_OK) {
    tpu_dtype d;
    tpu_tensor_dtype(out, &d);
    if (d != TPU_FLOAT) b->status[r] = TPU_INTERNAL;
    const void *data;
    tpu_tensor_data(out, &data);
    memcpy(b->result[r], data, sizeof v);
  }
  tpu_tensor_release(out);
  tpu_tensor_release(x);
  return b->status[r];
}

static void test_collectives__bfloat16_scope_numbers(void **state) {
  (void)state;
  tpu_system *sys = start_system(4, time_limit_ms(10000));
  bf16_case b;
  memset(&b, 0, sizeof b);
  CHECK_OK(tpu_replicate(sys, bf16_computation, &b, 4, 0, NULL, 0, NULL, NULL));
  int differs_from_f32 = 0;
  for (int i = 0; i < 64; ++i) {
    float acc = 0, exact = 0;
    for (int r = 0; r < 4; ++r) {
      acc += bf16_to_f(f_to_bf16(bf16_input(r, i)));
      exact += bf16_input(r, i);
    }
    float want = bf16_to_f(f_to_bf16(acc));
    for (int r = 0; r < 4; ++r) assert_true(b.result[r][i] == want);
    differs_from_f32 += want != exact;
    assert_true(fabsf(want - exact) <= fabsf(exact) * 0.01f);
  }
  assert_true(differs_from_f32 > 0); /* the scope really changed the arithmetic */
  release_system(NULL);
}

/* The scope nests per replica: after two enters and one exit all-reduce,
 * cross_replica_sum and reduce-scatter still travel as bfloat16 (float32 results);
 * after the second exit they are float32 sums again. */
typedef struct {
  float inner[3][4][64], outer[4][64];
  tpu_status status[4];
} bf16_nest;

static tpu_status bf16_nest_computation(tpu_replica_context *ctx, tpu_tensor *const *inputs, int ni,
                                        tpu_tensor **outputs, int no, void *user_data) {
  bf16_nest *b = user_data;
  int r;
  tpu_replica_context_replica_id(ctx, &r);
  float v[4 * 64];
  for (int j = 0; j < 4 * 64; ++j) v[j] = bf16_input(r, j % 64);
  const int64_t dims[1] = {64}, four[1] = {4 * 64};
  tpu_tensor *x = NULL, *x4 = NULL, *out[3] = {NULL};
  tpu_status st = tpu_tensor_create(TPU_FLOAT, dims, 1, v, 64 * sizeof(float), &x);
  if (st == TPU_OK) st = tpu_tensor_create(TPU_FLOAT, four, 1, v, sizeof v, &x4);
  if (st == TPU_OK) st = tpu_bfloat16_scope_enter(ctx);
  if (st == TPU_OK) st = tpu_bfloat16_scope_enter(ctx);
  if (st == TPU_OK) st = tpu_bfloat16_scope_exit(ctx);
  if (st == TPU_OK) st = tpu_cross_replica_sum(ctx, x, NULL, &out[0], NULL);
  if (st == TPU_OK) st = tpu_all_reduce(ctx, x, TPU_REDUCE_SUM, NULL, &out[1], NULL);
  if (st == TPU_OK) st = tpu_reduce_scatter(ctx, x4, TPU_REDUCE_SUM, 0, NULL, &out[2], NULL);
  for (int k = 0; k < 3 && st == TPU_OK; ++k) {
    tpu_dtype d;
    const void *data = NULL;
    st = tpu_tensor_dtype(out[k], &d);
    if (st == TPU_OK && d != TPU_FLOAT) st = TPU_INTERNAL;
    if (st == TPU_OK) st = tpu_tensor_data(out[k], &data);
    if (st == TPU_OK) memcpy(b->inner[k][r], data, 64 * sizeof(float));
    tpu_tensor_release(out[k]);
    out[k] = NULL;
  }
  if (st == TPU_OK) st = tpu_bfloat16_scope_exit(ctx);
  if (st == TPU_OK) st = tpu_cross_replica_sum(ctx, x, NULL, &out[0], NULL);
  const void *data = NULL;
  if (st == TPU_OK) st = tpu_tensor_data(out[0], &data);
  if (st == TPU_OK) memcpy(b->outer[r], data, 64 * sizeof(float));
  tpu_tensor_release(out[0]);
  tpu_tensor_release(x4);
  tpu_tensor_release(x);
  b->status[r] = st;
  return st;
}

static void test_collectives__bfloat16_scope_nests(void **state) {
  (void)state;
  tpu_system *sys = start_system(4, time_limit_ms(10000));
  static bf16_nest b;
  memset(&b, 0, sizeof b);
  CHECK_OK(tpu_replicate(sys, bf16_nest_computation, &b, 4, 0, NULL, 0, NULL, NULL));
  int differs = 0;
  for (int i = 0; i < 64; ++i) {
    float acc = 0, exact = 0;
    for (int r = 0; r < 4; ++r) {
      acc += bf16_to_f(f_to_bf16(bf16_input(r, i)));
      exact += bf16_input(r, i);
    }
    const float want = bf16_to_f(f_to_bf16(acc));
    for (int r = 0; r < 4; ++r) {
      for (int k = 0; k < 3; ++k)
        if (b.inner[k][r][i] != want)
          fail_msg("nested scope, collective %d, replica %d [%d]: %.9g, expected %.9g", k, r, i,
                   b.inner[k][r][i], want);
      /* float32 again: any summation order, but not the bfloat16 result */
      if (fabsf(b.outer[r][i] - exact) > 1e-6f * exact)
        fail_msg("after the scope, replica %d [%d]: %.9g, expected %.9g", r, i, b.outer[r][i], exact);
      differs += b.outer[r][i] != want;
    }
  }
  assert_true(differs > 0);
  release_system(NULL);
}

/* ---- many steps ------------------------------------------------------------ */

/* Waiting differs with placement (spinning, yielding, spinning while every thread
 * pinned to the same CPU waits too): the results must not. */
static void test_collectives__every_placement(void **state) {
  (void)state;
  const int modes[] = {TPU_PIN_AUTO, TPU_PIN_ALWAYS, TPU_PIN_NEVER};
  const int replica_counts[] = {2, 5, 8};
  const op_kind kinds[] = {OP_ALL_REDUCE, OP_ALL_GATHER};
  for (size_t m = 0; m < sizeof modes / sizeof modes[0]; ++m)
    for (size_t rc = 0; rc < sizeof replica_counts / sizeof replica_counts[0]; ++rc) {
      int n = replica_counts[rc];
      tpu_system *sys = start_system_pinned(n, time_limit_ms(20000), modes[m]);
      for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; ++k)
        for (size_t si = 0; si < sizeof kSizes / sizeof kSizes[0]; ++si) {
          coll_case c = vector_case(kinds[k], TPU_FLOAT, TPU_REDUCE_SUM, kSizes[si], n);
          run_case(sys, &c);
        }
      release_system(NULL);
    }
}

static void test_collectives__thousand_random_steps(void **state) {
  (void)state;
  tpu_system *sys = start_system(3, time_limit_ms(20000));
  unsigned seed = 12345;
  for (int step = 0; step < 1000; ++step) {
    seed = seed * 1103515245u + 12345u;
    coll_case c = vector_case((op_kind)((seed >> 8) % 3), (seed >> 12) % 2 ? TPU_FLOAT : TPU_INT32,
                              TPU_REDUCE_SUM, 3 * (1 + (seed >> 16) % 3000), 3);
    run_case(sys, &c);
  }
  release_system(NULL);
}

/* One array of groups, rewritten in place between three calls of one step: the
 * second call's sums follow the new groups, and the third (an id twice) is refused.
 * The library keeps a thread's last groups to skip checking them again; it must
 * compare what the array holds, not where it is. */
typedef struct {
  int mode, cores_per_replica;
  float first[8], second[8];
  tpu_status third[8];
} rewritten_case;

static tpu_status rewritten_groups_computation(tpu_replica_context *ctx, tpu_tensor *const *inputs, int ni,
                                               tpu_tensor **outputs, int no, void *user_data) {
  rewritten_case *c = user_data;
  int r = 0, core = 0;
  tpu_replica_context_replica_id(ctx, &r);
  tpu_replica_context_logical_core(ctx, &core);
  const int me = r * c->cores_per_replica + core;
  /* ids are replicas (cross-replica) or a replica's cores (cross-partition): 4 of them */
  int32_t ids[4] = {0, 1, 2, 3};
  tpu_group_assignment g = {ids, 2, 2};
  tpu_collective_options o = TPU_COLLECTIVE_OPTIONS_INIT;
  o.group_mode = c->mode;
  const float v = (float)(1 << (c->mode == TPU_GROUP_MODE_CROSS_PARTITION ? core : r));
  tpu_tensor *x = NULL, *out = NULL;
  tpu_status st = tpu_tensor_create(TPU_FLOAT, NULL, 0, &v, sizeof v, &x);
  const void *data = NULL;
  if (st == TPU_OK) st = tpu_all_reduce(ctx, x, TPU_REDUCE_SUM, &g, &out, &o);
  if (st == TPU_OK && tpu_tensor_data(out, &data) == TPU_OK) c->first[me] = *(const float *)data;
  tpu_tensor_release(out);
  out = NULL;
  ids[1] = 2, ids[2] = 1; /* {{0,2},{1,3}} */
  if (st == TPU_OK) st = tpu_all_reduce(ctx, x, TPU_REDUCE_SUM, &g, &out, &o);
  if (st == TPU_OK && tpu_tensor_data(out, &data) == TPU_OK) c->second[me] = *(const float *)data;
  tpu_tensor_release(out);
  out = NULL;
  ids[1] = 0; /* {{0,0},{1,3}}: 0 twice, 2 nowhere */
  if (st == TPU_OK) st = c->third[me] = tpu_all_reduce(ctx, x, TPU_REDUCE_SUM, &g, &out, &o);
  tpu_tensor_release(out);
  tpu_tensor_release(x);
  return st;
}

static void test_collectives__groups_rewritten_between_calls(void **state) {
  (void)state;
  const struct {
    int mode, replicas, cores_per_replica;
  } cases[] = {{TPU_GROUP_MODE_CROSS_REPLICA, 4, 1}, {TPU_GROUP_MODE_CROSS_PARTITION, 2, 4}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    tpu_system *sys = start_system(8, time_limit_ms(20000));
    rewritten_case c = {cases[i].mode, cases[i].cores_per_replica, {0}, {0}, {0}};
    tpu_topology *topo = NULL;
    CHECK_OK(tpu_system_topology(sys, &topo));
    int32_t coords[8][4];
    for (int p = 0; p < 8; ++p) CHECK_OK(tpu_topology_device_coordinates(topo, 0, p, coords[p], 4, &(size_t){0}));
    tpu_device_assignment *da = NULL;
    CHECK_OK(tpu_device_assignment_create(topo, &coords[0][0], cases[i].replicas, cases[i].cores_per_replica, &da));
    tpu_topology_release(topo);
    tpu_step_options so = TPU_STEP_OPTIONS_INIT;
    so.device_assignment = da;
    /* the step fails: the third call is refused on every participant */
    tpu_status st = tpu_replicate(sys, rewritten_groups_computation, &c, cases[i].replicas, 0, NULL, 0, NULL, &so);
    assert_int_equal(st, TPU_INVALID_ARGUMENT);
    const int n = cases[i].replicas * cases[i].cores_per_replica;
    for (int p = 0; p < n; ++p) {
      const int id = cases[i].mode == TPU_GROUP_MODE_CROSS_PARTITION ? p % 4 : p;
      /* values 1,2,4,8 by id: {{0,1},{2,3}} gives 3 or 12, {{0,2},{1,3}} 5 or 10 */
      assert_float_equal(c.first[p], id < 2 ? 3.0f : 12.0f, 0.0f);
      assert_float_equal(c.second[p], id == 0 || id == 2 ? 5.0f : 10.0f, 0.0f);
      assert_int_equal(c.third[p], TPU_INVALID_ARGUMENT);
    }
    tpu_device_assignment_release(da);
    release_system(NULL);
  }
}

static void test_collectives__outside_a_computation(void **state) {
  (void)state;
  tpu_tensor *x = NULL, *out = NULL;
  int64_t dims[1] = {2};
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 1, NULL, 0, &x));
  assert_int_equal(tpu_cross_replica_sum(NULL, x, NULL, &out, NULL), TPU_INVALID_ARGUMENT);
  assert_non_null(strstr(tpu_last_error(), "ctx"));
  assert_int_equal(tpu_barrier(NULL, NULL), TPU_INVALID_ARGUMENT);
  tpu_tensor_release(x);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_collectives__all_reduce_every_dtype_op_and_replica_count, release_system),
      cmocka_unit_test_teardown(test_collectives__all_reduce_groups, release_system),
      cmocka_unit_test_teardown(test_collectives__large_all_reduce_streaming_path, release_system),
      cmocka_unit_test_teardown(test_collectives__all_gather_reduce_scatter_all_to_all, release_system),
      cmocka_unit_test_teardown(test_collectives__grouped_gather_and_all_to_all, release_system),
      cmocka_unit_test_teardown(test_collectives__permute_and_broadcast, release_system),
      cmocka_unit_test_teardown(test_collectives__mismatches_fail_every_participant, release_system),
      cmocka_unit_test_teardown(test_collectives__missing_and_stuck_replicas, release_system),
      cmocka_unit_test_teardown(test_collectives__failing_replica_aborts_the_others, release_system),
      cmocka_unit_test_teardown(test_collectives__bad_arguments, release_system),
      cmocka_unit_test_teardown(test_collectives__refused_reductions_and_splits, release_system),
      cmocka_unit_test_teardown(test_collectives__error_messages_name_the_failing_replica_once, release_system),
      cmocka_unit_test_teardown(test_collectives__integer_mean_does_not_wrap, release_system),
      cmocka_unit_test_teardown(test_collectives__output_size_overflow, release_system),
      cmocka_unit_test_teardown(test_collectives__bfloat16_scope_numbers, release_system),
      cmocka_unit_test_teardown(test_collectives__bfloat16_scope_nests, release_system),
      cmocka_unit_test_teardown(test_collectives__every_placement, release_system),
      cmocka_unit_test_teardown(test_collectives__thousand_random_steps, release_system),
      cmocka_unit_test_teardown(test_collectives__groups_rewritten_between_calls, release_system),
      cmocka_unit_test_teardown(test_collectives__outside_a_computation, release_system),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
