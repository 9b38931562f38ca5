/* Inputs and checks of tpurt bench. Inputs are small integers (the participant at
 * position r of its group, element i: (r+1) + i%7; for PROD a 2 wherever (i+r)%7 == 0,
 * else 1), so every expected result
 * is exact and the same for each i%7: a table of BENCH_PERIOD values per source. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define DECODE_CHUNK 1024

static const tpu_dtype bench_dtypes[] = {TPU_FLOAT, TPU_DOUBLE, TPU_BFLOAT16, TPU_HALF,
                                         TPU_INT8,  TPU_INT16,  TPU_INT32,    TPU_INT64,
                                         TPU_UINT8, TPU_UINT32, TPU_UINT64};

static const struct {
  const char *alias;
  tpu_dtype dtype;
} dtype_aliases[] = {{"float", TPU_FLOAT},     {"f32", TPU_FLOAT}, {"double", TPU_DOUBLE},
                     {"f64", TPU_DOUBLE},      {"bf16", TPU_BFLOAT16}, {"half", TPU_HALF},
                     {"f16", TPU_HALF}};

/* Indexed by tpu_reduce_op. */
static const char *const op_names[] = {"sum", "prod", "min", "max", "mean"};

int bench_parse_dtype(const char *name, tpu_dtype *out) {
  for (size_t i = 0; i < sizeof bench_dtypes / sizeof bench_dtypes[0]; i++) {
    const char *canonical;
    CHECK(tpu_dtype_name(bench_dtypes[i], &canonical));
    if (!strcmp(name, canonical)) return *out = bench_dtypes[i], 1;
  }
  for (size_t i = 0; i < sizeof dtype_aliases / sizeof dtype_aliases[0]; i++)
    if (!strcmp(name, dtype_aliases[i].alias)) return *out = dtype_aliases[i].dtype, 1;
  return 0;
}

int bench_parse_op(const char *name, tpu_reduce_op *out) {
  for (int i = 0; i < (int)(sizeof op_names / sizeof op_names[0]); i++)
    if (!strcmp(name, op_names[i])) return *out = (tpu_reduce_op)i, 1;
  return 0;
}

static int is_floating(tpu_dtype dtype) {
  return dtype == TPU_FLOAT || dtype == TPU_DOUBLE || dtype == TPU_BFLOAT16 || dtype == TPU_HALF;
}

/* Stores v as one element of `dtype`; integers wrap as the library's integer sums do. */
static void encode(tpu_dtype dtype, double v, void *dst) {
  int64_t i = is_floating(dtype) ? 0 : (int64_t)v;
  float f = (float)v;
  uint16_t h;
  switch (dtype) {
    case TPU_FLOAT: memcpy(dst, &f, sizeof f); break;
    case TPU_DOUBLE: memcpy(dst, &v, sizeof v); break;
    case TPU_BFLOAT16: CHECK(tpu_float_to_bfloat16(&f, &h, 1)); memcpy(dst, &h, sizeof h); break;
    case TPU_HALF: CHECK(tpu_float_to_half(&f, &h, 1)); memcpy(dst, &h, sizeof h); break;
    case TPU_INT8: *(int8_t *)dst = (int8_t)i; break;
    case TPU_INT16: { int16_t x = (int16_t)i; memcpy(dst, &x, sizeof x); } break;
    case TPU_INT32: { int32_t x = (int32_t)i; memcpy(dst, &x, sizeof x); } break;
    case TPU_INT64: memcpy(dst, &i, sizeof i); break;
    case TPU_UINT8: *(uint8_t *)dst = (uint8_t)i; break;
    case TPU_UINT32: { uint32_t x = (uint32_t)i; memcpy(dst, &x, sizeof x); } break;
    case TPU_UINT64: { uint64_t x = (uint64_t)i; memcpy(dst, &x, sizeof x); } break;
    default: abort(); /* bench_parse_dtype admits no other dtype */
  }
}

/* Reads n (<= DECODE_CHUNK) elements of `dtype` as doubles. */
static tpu_status decode(tpu_dtype dtype, const void *src, size_t n, double *dst) {
  float tmp[DECODE_CHUNK];
  if (dtype == TPU_BFLOAT16 || dtype == TPU_HALF) {
    RETURN_IF_ERROR(dtype == TPU_BFLOAT16 ? tpu_bfloat16_to_float(src, tmp, n)
                                          : tpu_half_to_float(src, tmp, n));
    src = tmp;
    dtype = TPU_FLOAT;
  }
#define DECODE_AS(type)                                                     \
  for (size_t j = 0; j < n; j++) dst[j] = (double)((const type *)src)[j]; \
  break
  switch (dtype) {
    case TPU_FLOAT: DECODE_AS(float);
    case TPU_DOUBLE: DECODE_AS(double);
    case TPU_INT8: DECODE_AS(int8_t);
    case TPU_INT16: DECODE_AS(int16_t);
    case TPU_INT32: DECODE_AS(int32_t);
    case TPU_INT64: DECODE_AS(int64_t);
    case TPU_UINT8: DECODE_AS(uint8_t);
    case TPU_UINT32: DECODE_AS(uint32_t);
    case TPU_UINT64: DECODE_AS(uint64_t);
    default: abort();
  }
#undef DECODE_AS
  return TPU_OK;
}

/* v as `dtype` holds it. */
static double quantize(tpu_dtype dtype, double v) {
  unsigned char buf[sizeof(double)];
  double out;
  encode(dtype, v, buf);
  CHECK(decode(dtype, buf, 1, &out));
  return out;
}

static double pattern_value(tpu_reduce_op op, int r, int q) {
  if (op == TPU_REDUCE_PROD) return (q + r) % BENCH_PERIOD == 0 ? 2.0 : 1.0;
  return (double)(r + 1 + q);
}

/* The exact reduction over n replicas of residue q, as the library defines it:
 * integer sums wrap, and an integer MEAN truncates the wrapped sum toward zero. */
static double reduction(const bench_config *cfg, int q) {
  int n = cfg->group_size;
  double acc = pattern_value(cfg->op, 0, q);
  for (int r = 1; r < n; r++) {
    double v = pattern_value(cfg->op, r, q);
    switch (cfg->op) {
      case TPU_REDUCE_PROD: acc *= v; break;
      case TPU_REDUCE_MIN: acc = fmin(acc, v); break;
      case TPU_REDUCE_MAX: acc = fmax(acc, v); break;
      default: acc += v; break;
    }
  }
  if (cfg->op == TPU_REDUCE_MEAN)
    acc = is_floating(cfg->dtype) ? acc / n : trunc(quantize(cfg->dtype, acc) / n);
  return quantize(cfg->dtype, acc);
}

void bench_data_init(bench_data *data, const bench_config *cfg) {
  int n = cfg->group_size;
  data->patterns = xcalloc((size_t)n * BENCH_PERIOD, cfg->elem_size);
  data->expected = xcalloc((size_t)(n + 1) * BENCH_PERIOD, sizeof(double));
  for (int q = 0; q < BENCH_PERIOD; q++) {
    data->expected[q] = reduction(cfg, q);
    for (int r = 0; r < n; r++) {
      double v = pattern_value(cfg->op, r, q);
      encode(cfg->dtype, v, data->patterns + ((size_t)r * BENCH_PERIOD + q) * cfg->elem_size);
      data->expected[(size_t)(r + 1) * BENCH_PERIOD + q] = quantize(cfg->dtype, v);
    }
  }
}

void bench_data_free(bench_data *data) {
  free(data->patterns);
  free(data->expected);
}

tpu_status bench_make_input(const bench_config *cfg, const bench_data *data, int k, size_t count,
                            tpu_tensor **out) {
  int64_t dims[1] = {(int64_t)count};
  tpu_tensor *x = NULL;
  void *p;
  RETURN_IF_ERROR(tpu_tensor_create(cfg->dtype, dims, 1, NULL, 0, &x));
  tpu_status status = tpu_tensor_mutable_data(x, &p);
  if (status != TPU_OK) return first_error(status, tpu_tensor_release(x));
  /* One period, then copies of the filled prefix: its length stays a multiple of the
   * period, so element i keeps value i % BENCH_PERIOD. */
  size_t es = cfg->elem_size;
  size_t filled = count < BENCH_PERIOD ? count : BENCH_PERIOD;
  memcpy(p, data->patterns + (size_t)k * BENCH_PERIOD * es, filled * es);
  while (filled < count) {
    size_t n = filled < count - filled ? filled : count - filled;
    memcpy((unsigned char *)p + filled * es, p, n * es);
    filled += n;
  }
  *out = x;
  return TPU_OK;
}

tpu_status bench_count_wrong(const bench_config *cfg, const bench_data *data, int k,
                             size_t count, const tpu_tensor *output, int64_t *wrong) {
  const bench_collective *coll = cfg->coll;
  int n = cfg->group_size;
  size_t out_count = coll->gathers ? count * n : coll->scatters ? count / n : count;
  int segments = coll->per_replica_segments ? n : 1;
  size_t seg_len = out_count / segments, es = cfg->elem_size;
  int64_t got_count;
  const void *p;
  RETURN_IF_ERROR(tpu_tensor_num_elements(output, &got_count));
  if ((size_t)got_count != out_count) {  /* a wrong shape makes every element wrong */
    *wrong = (int64_t)out_count;
    return TPU_OK;
  }
  RETURN_IF_ERROR(tpu_tensor_data(output, &p));

  /* A float MEAN may divide by n or multiply by 1/n: allow two units in the last place. */
  double tol = 0;
  if (cfg->op == TPU_REDUCE_MEAN && coll->reduces) {
    switch (cfg->dtype) {
      case TPU_FLOAT: tol = 2 * FLT_EPSILON; break;
      case TPU_DOUBLE: tol = 2 * DBL_EPSILON; break;
      case TPU_BFLOAT16: tol = 2 * 0x1p-7; break;
      case TPU_HALF: tol = 2 * 0x1p-10; break;
      default: break;
    }
  }
  double buf[DECODE_CHUNK];
  int64_t bad = 0;
  for (int seg = 0; seg < segments; seg++) {
    int src;
    size_t start;
    coll->source(n, k, seg, seg_len, &src, &start);
    const double *want = data->expected + (size_t)(src + 1) * BENCH_PERIOD;
    int q = (int)(start % BENCH_PERIOD);
    for (size_t off = 0; off < seg_len; off += DECODE_CHUNK) {
      size_t m = seg_len - off < DECODE_CHUNK ? seg_len - off : DECODE_CHUNK;
      RETURN_IF_ERROR(decode(cfg->dtype, (const unsigned char *)p + (seg * seg_len + off) * es,
                             m, buf));
      for (size_t j = 0; j < m; j++) {
        if (buf[j] != want[q] && !(fabs(buf[j] - want[q]) <= tol * fabs(want[q]))) bad++;
        if (++q == BENCH_PERIOD) q = 0;
      }
    }
  }
  *wrong = bad;
  return TPU_OK;
}
