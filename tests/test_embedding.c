/* TPU embeddings on the host (issue 20), in one process, from the header alone
 * (tpurt/embedding.h): every promise checked against a naive reference written here.
 * - sharding: tpu_embedding_row_owner against tf.nn.embedding_lookup's partition
 *   strategies "div" and "mod", on 1, 3, 4 and 8 cores, vocabularies that do not divide;
 * - the configuration as the system reports it (names, shapes, the older form);
 * - load / retrieve: whole tables, row ranges, slot variables, bad ranges and counts,
 *   and from inside a computation;
 * - lookups with every combiner, weights, COO and ragged input, empty samples and
 *   duplicates, then SGD and Adagrad (dynamic learning rate) over all replicas;
 * - every bad input: a named error and the tables exactly as they were;
 * - a failed step changes no row; several cores per replica; a participant that skips
 *   the collective is named;
 * - hostile JSON to tpu_embedding_config_from_json and its bytes to tpu_system_init. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tpurt.h>

#include "test_util.h"

TEST_SYSTEM_FIXTURE

#define MAXP 8    /* participants of a step */
#define MAXF 4    /* features of a configuration */
#define MAXT 3    /* tables */
#define MAXIDS 32 /* ids of one feature in one participant's batch */
#define MAXACT 64 /* floats of one feature's activation */

/* ---- systems ------------------------------------------------------------------- */

static unsigned char g_cfg[16384];

/* The configuration bytes of `json` in g_cfg. */
static size_t config_bytes(const char *json) {
  size_t n = 0;
  tpu_status st = tpu_embedding_config_from_json(json, g_cfg, sizeof g_cfg, &n);
  if (st != TPU_OK)
    fail_msg("tpu_embedding_config_from_json: %s: %s\n%s", tpu_status_name(st), tpu_last_error(), json);
  return n;
}

static tpu_system_options options_for(int cores, const char *json) {
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = cores;
  o.collective_timeout_ms = time_limit_ms(20000); /* a hang fails instead of waiting */
  if (json != NULL) {
    o.embedding_config_len = config_bytes(json);
    o.embedding_config = g_cfg;
  }
  return o;
}

static tpu_system *start(int cores, const char *json) {
  release_system(NULL);
  tpu_system_options o = options_for(cores, json);
  tpu_status st = tpu_system_init(&o, &g_sys);
  if (st != TPU_OK) fail_msg("tpu_system_init: %s: %s\n%s", tpu_status_name(st), tpu_last_error(), json);
  return g_sys;
}

/* init fails with `code` and a message holding every fragment (NULL-terminated). */
static void expect_init_error(int cores, const char *json, tpu_status code, const char *const *fragments) {
  release_system(NULL);
  tpu_system_options o = options_for(cores, json);
  tpu_system *s = NULL;
  tpu_clear_last_error();
  tpu_status st = tpu_system_init(&o, &s);
  if (st == TPU_OK) tpu_system_release(s); /* the next case needs the one live system */
  if (st != code) fail_msg("init gave %s \"%s\", expected %s\n%s", tpu_status_name(st), tpu_last_error(),
                           tpu_status_name(code), json);
  for (const char *const *f = fragments; *f; ++f)
    if (!strstr(tpu_last_error(), *f)) fail_msg("init's message \"%s\" lacks \"%s\"", tpu_last_error(), *f);
  assert_null(s);
}

/* The message holds every fragment (NULL-terminated). */
static int names_all(const char *message, const char *const *fragments) {
  for (const char *const *f = fragments; f && *f; ++f)
    if (!strstr(message, *f)) return 0;
  return 1;
}

static int near(float got, float want) {
  return fabsf(got - want) <= 1e-5f * (1.0f + fabsf(want));
}

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static uint32_t rng(void) { /* xorshift64: reproducible */
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 32);
}
/* A float in [-2, 2) with few significant bits. */
static float rnd(void) { return (float)((int)(rng() % 64) - 32) / 16.0f; }

/* ---- the reference --------------------------------------------------------------- */

typedef struct {
  int num_tables, num_features;
  int64_t vocab[MAXT];
  int dim[MAXT];
  int adagrad[MAXT];  /* else SGD */
  float lr[MAXT];     /* constant learning rate, or */
  int tag[MAXT];      /* the dynamic tag, -1 for none */
  float *w[MAXT];     /* vocab x dim parameters */
  float *acc[MAXT];   /* Adagrad's accumulators */
  int table_of[MAXF];
  int64_t samples[MAXF];
} model;

static void model_free(model *m) {
  for (int t = 0; t < m->num_tables; ++t) free(m->w[t]), free(m->acc[t]), m->w[t] = m->acc[t] = NULL;
}

/* The system's tables get non-trivial rows (and accumulators); the model the same. */
static void load_random(tpu_system *s, model *m) {
  for (int t = 0; t < m->num_tables; ++t) {
    size_t n = (size_t)m->vocab[t] * m->dim[t];
    m->w[t] = malloc(n * sizeof(float));
    m->acc[t] = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; ++i) m->w[t][i] = rnd(), m->acc[t][i] = 0.5f + (float)(rng() % 8) / 8.0f;
    CHECK_OK(tpu_embedding_load(s, t, 0, 0, m->vocab[t], m->w[t], n));
    if (m->adagrad[t]) CHECK_OK(tpu_embedding_load(s, t, 1, 0, m->vocab[t], m->acc[t], n));
  }
}

/* One participant's input: its feature batches with their storage. */
typedef struct {
  int n;
  tpu_embedding_feature_batch b[MAXF];
  int64_t ids[MAXF][MAXIDS], samples[MAXF][MAXIDS], splits[MAXF][MAXIDS + 1];
  float weights[MAXF][MAXIDS];
} batch;

static tpu_embedding_feature_batch *add_coo(batch *in, int feature, tpu_embedding_combiner c, size_t n,
                                            const int64_t *ids, const int64_t *samples, const float *weights) {
  int i = in->n++;
  tpu_embedding_feature_batch *b = &in->b[i];
  memcpy(in->ids[i], ids, n * sizeof *ids);
  memcpy(in->samples[i], samples, n * sizeof *samples);
  if (weights) memcpy(in->weights[i], weights, n * sizeof *weights);
  *b = (tpu_embedding_feature_batch){feature, in->ids[i], n, in->samples[i], NULL, 0,
                                     weights ? in->weights[i] : NULL, c};
  return b;
}

static tpu_embedding_feature_batch *add_ragged(batch *in, int feature, tpu_embedding_combiner c,
                                               size_t num_splits, const int64_t *splits, const int64_t *ids,
                                               const float *weights) {
  int i = in->n++;
  tpu_embedding_feature_batch *b = &in->b[i];
  size_t n = (size_t)splits[num_splits - 1];
  memcpy(in->ids[i], ids, n * sizeof *ids);
  memcpy(in->splits[i], splits, num_splits * sizeof *splits);
  if (weights) memcpy(in->weights[i], weights, n * sizeof *weights);
  *b = (tpu_embedding_feature_batch){feature, in->ids[i], n, NULL, in->splits[i], num_splits,
                                     weights ? in->weights[i] : NULL, c};
  return b;
}

/* Id k's sample in the batch. */
static int64_t sample_of(const tpu_embedding_feature_batch *b, size_t k) {
  if (b->sample_indices) return b->sample_indices[k];
  int64_t s = 0;
  while (b->row_splits[s + 1] <= (int64_t)k) ++s;
  return s;
}

static float weight_of(const tpu_embedding_feature_batch *b, size_t k) {
  return b->weights ? b->weights[k] : 1.0f;
}

/* Per sample: 1 (SUM), the sum of the weights (MEAN), the root of the sum of their
 * squares (SQRTN). */
static void denominators(const model *m, const tpu_embedding_feature_batch *b, float *d) {
  const int64_t S = m->samples[b->feature];
  for (int64_t s = 0; s < S; ++s) d[s] = b->combiner == TPU_EMBEDDING_COMBINER_SUM ? 1.0f : 0.0f;
  for (size_t k = 0; k < b->num_ids; ++k) {
    float w = weight_of(b, k);
    if (b->combiner == TPU_EMBEDDING_COMBINER_MEAN) d[sample_of(b, k)] += w;
    if (b->combiner == TPU_EMBEDDING_COMBINER_SQRTN) d[sample_of(b, k)] += w * w;
  }
  if (b->combiner == TPU_EMBEDDING_COMBINER_SQRTN)
    for (int64_t s = 0; s < S; ++s) d[s] = sqrtf(d[s]);
}

/* tf.nn.embedding_lookup_sparse: each sample the combination of its ids' rows. */
static void ref_activation(const model *m, const tpu_embedding_feature_batch *b, float *out) {
  const int t = m->table_of[b->feature], D = m->dim[t];
  const int64_t S = m->samples[b->feature];
  float d[MAXACT];
  memset(out, 0, sizeof(float) * S * D);
  for (size_t k = 0; k < b->num_ids; ++k)
    for (int j = 0; j < D; ++j) out[sample_of(b, k) * D + j] += weight_of(b, k) * m->w[t][b->ids[k] * D + j];
  denominators(m, b, d);
  for (int64_t s = 0; s < S; ++s)
    for (int j = 0; j < D; ++j) out[s * D + j] = d[s] == 0 ? 0.0f : out[s * D + j] / d[s];
}

/* One step's update: each row's gradient summed over every participant (the gradient
 * of id k of sample s is g[s] / denominator[s] * weight[k]), then the optimizer once
 * per touched row. grads[p][f] are participant p's gradients of feature f. */
static void ref_step(model *m, const batch *in, int P, float (*grads)[MAXF][MAXACT], const float *rates) {
  for (int t = 0; t < m->num_tables; ++t) {
    const int D = m->dim[t];
    const size_t n = (size_t)m->vocab[t] * D;
    float *sum = calloc(n, sizeof(float)), *part = calloc(n, sizeof(float));
    char *touched = calloc((size_t)m->vocab[t], 1), *mine = calloc((size_t)m->vocab[t], 1);
    for (int p = 0; p < P; ++p) {
      memset(part, 0, n * sizeof(float));
      memset(mine, 0, (size_t)m->vocab[t]);
      for (int f = 0; f < m->num_features; ++f) { /* feature order, as the engine sums */
        if (m->table_of[f] != t) continue;
        for (int i = 0; i < in[p].n; ++i) {
          const tpu_embedding_feature_batch *b = &in[p].b[i];
          if (b->feature != f) continue;
          float d[MAXACT];
          denominators(m, b, d);
          for (size_t k = 0; k < b->num_ids; ++k) {
            const int64_t s = sample_of(b, k), row = b->ids[k];
            mine[row] = touched[row] = 1;
            if (d[s] == 0) continue;
            for (int j = 0; j < D; ++j) part[row * D + j] += grads[p][f][s * D + j] / d[s] * weight_of(b, k);
          }
        }
      }
      for (int64_t row = 0; row < m->vocab[t]; ++row)
        if (mine[row])
          for (int j = 0; j < D; ++j) sum[row * D + j] += part[row * D + j];
    }
    const float lr = m->tag[t] >= 0 ? rates[m->tag[t]] : m->lr[t];
    for (int64_t row = 0; row < m->vocab[t]; ++row) {
      if (!touched[row]) continue;
      for (int j = 0; j < D; ++j) {
        const size_t i = (size_t)row * D + j;
        const float g = sum[i];
        if (m->adagrad[t]) {
          m->acc[t][i] += g * g;
          m->w[t][i] -= lr * g / sqrtf(m->acc[t][i]);
        } else {
          m->w[t][i] -= lr * g;
        }
      }
    }
    free(sum), free(part), free(touched), free(mine);
  }
}

/* Every table's parameters (and accumulators) equal the model's. */
static void expect_model(tpu_system *s, const model *m, const char *when) {
  for (int t = 0; t < m->num_tables; ++t) {
    const size_t n = (size_t)m->vocab[t] * m->dim[t];
    float *got = malloc(n * sizeof(float));
    for (int v = 0; v < (m->adagrad[t] ? 2 : 1); ++v) {
      size_t count = 0;
      CHECK_OK(tpu_embedding_retrieve(s, t, v, 0, m->vocab[t], got, n, &count));
      assert_int_equal(count, n);
      const float *want = v == 0 ? m->w[t] : m->acc[t];
      for (size_t i = 0; i < n; ++i)
        if (!near(got[i], want[i]))
          fail_msg("%s: table %d variable %d row %zu [%zu]: %.9g, expected %.9g", when, t, v, i / m->dim[t],
                   i % m->dim[t], got[i], want[i]);
    }
    free(got);
  }
}

/* Every variable of every table, back to back. */
static float *snapshot(tpu_system *s, size_t *total) {
  int nt = 0;
  CHECK_OK(tpu_embedding_num_tables(s, &nt));
  float *all = NULL;
  *total = 0;
  for (int t = 0; t < nt; ++t) {
    int nv = 0;
    int64_t V = 0;
    int32_t D = 0;
    CHECK_OK(tpu_embedding_table_num_variables(s, t, &nv));
    CHECK_OK(tpu_embedding_table_shape(s, t, &V, &D));
    for (int v = 0; v < nv; ++v) {
      size_t n = (size_t)V * D, count = 0;
      all = realloc(all, (*total + n) * sizeof(float));
      CHECK_OK(tpu_embedding_retrieve(s, t, v, 0, V, all + *total, n, &count));
      assert_int_equal(count, n);
      *total += n;
    }
  }
  return all;
}

static void expect_unchanged(tpu_system *s, const float *before, size_t n, const char *what) {
  size_t m = 0;
  float *after = snapshot(s, &m);
  assert_int_equal(m, n);
  if (memcmp(before, after, n * sizeof(float)) != 0) fail_msg("%s changed the tables", what);
  free(after);
}

/* ---- steps ------------------------------------------------------------------------ */

typedef struct plan plan;
enum { AT_NONE, AT_ENQUEUE, AT_RECV, AT_SEND };
/* A participant's part of the step in place of the usual one (enqueue, activations,
 * gradients); returns the computation's status. */
typedef tpu_status (*misbehaviour)(tpu_replica_context *ctx, plan *pl, int p);

struct plan {
  const model *m;
  int k; /* cores per replica: participant p = replica * k + logical core */
  batch in[MAXP];
  float grad[MAXP][MAXF][MAXACT];
  float rates[MAXP][2];
  int num_rates;
  int recv, send; /* whether the usual part asks for activations and sends gradients */
  float act[MAXP][MAXF][MAXACT];
  int got[MAXP][MAXF];
  misbehaviour bad;
  int bad_participant; /* -1: every participant */
  int fail_at;                /* AT_*: where the misbehaving participant's call fails */
  const char *const *expect;  /* with a message naming these */
  tpu_status expect_code;
  int quiet;                  /* the step fails: the others' errors are expected */
  int num_acts, num_grads;    /* what recv_activations and send_gradients are given */
  void *user;                 /* for a misbehaviour */
};

static int participant_of(tpu_replica_context *ctx, const plan *pl) {
  int r = 0, c = 0;
  CHECK_OK(tpu_replica_context_replica_id(ctx, &r));
  CHECK_OK(tpu_replica_context_logical_core(ctx, &c));
  return r * pl->k + c;
}

/* The status of participant p's call at `stage`: the expected error if the plan puts
 * one there, else TPU_OK unless the step is one that fails (quiet). */
static tpu_status checked(plan *pl, int p, int stage, tpu_status st, const char *call) {
  if (pl->fail_at == stage && (pl->bad_participant < 0 || pl->bad_participant == p)) {
    if (st != pl->expect_code || !names_all(tpu_last_error(), pl->expect)) {
      char want[256] = "";
      for (const char *const *f = pl->expect; f && *f; ++f)
        snprintf(want + strlen(want), sizeof want - strlen(want), " \"%s\"", *f);
      CHECK_FAIL("participant %d: %s gave %s \"%s\"; expected %s naming%s", p, call, tpu_status_name(st),
                 tpu_last_error(), tpu_status_name(pl->expect_code), want);
    }
    return st == TPU_OK ? TPU_INTERNAL : st;
  }
  if (st != TPU_OK && !pl->quiet)
    CHECK_FAIL("participant %d: %s: %s: %s", p, call, tpu_status_name(st), tpu_last_error());
  return st;
}

static tpu_status do_enqueue(tpu_replica_context *ctx, plan *pl, int p) {
  return checked(pl, p, AT_ENQUEUE, tpu_embedding_enqueue(ctx, pl->in[p].b, pl->in[p].n), "enqueue");
}

static int enqueued(const plan *pl, int p, int f) {
  for (int i = 0; i < pl->in[p].n; ++i)
    if (pl->in[p].b[i].feature == f) return 1;
  return 0;
}

static tpu_status do_recv(tpu_replica_context *ctx, plan *pl, int p) {
  tpu_system *sys = NULL;
  CHECK_OK(tpu_replica_context_system(ctx, &sys));
  CHECK(sys == g_sys);
  tpu_tensor *acts[MAXF];
  tpu_status st = checked(pl, p, AT_RECV, tpu_embedding_recv_activations(ctx, acts, pl->num_acts),
                          "recv_activations");
  if (st != TPU_OK) return st;
  for (int f = 0; f < pl->m->num_features; ++f) {
    if (!enqueued(pl, p, f)) {
      CHECK(acts[f] == NULL);
      continue;
    }
    int64_t want[8], got[8];
    size_t wn = 0, gn = 0;
    CHECK_OK(tpu_embedding_feature_shape(sys, f, want, 8, &wn));
    CHECK_OK(tpu_tensor_dims(acts[f], got, 8, &gn));
    CHECK(wn == gn && memcmp(want, got, wn * sizeof *got) == 0);
    tpu_dtype dt;
    CHECK_OK(tpu_tensor_dtype(acts[f], &dt));
    CHECK(dt == TPU_FLOAT);
    const void *data = NULL;
    size_t bytes = 0;
    CHECK_OK(tpu_tensor_data(acts[f], &data));
    CHECK_OK(tpu_tensor_byte_size(acts[f], &bytes));
    CHECK(bytes <= sizeof pl->act[p][f]);
    if (bytes <= sizeof pl->act[p][f]) memcpy(pl->act[p][f], data, bytes);
    pl->got[p][f] = 1;
    tpu_tensor_release(acts[f]);
  }
  return TPU_OK;
}

/* The gradient tensors of participant p: NULL for the features it did not enqueue. */
static void make_grads(tpu_replica_context *ctx, plan *pl, int p, tpu_tensor **g) {
  tpu_system *sys = NULL;
  CHECK_OK(tpu_replica_context_system(ctx, &sys));
  for (int f = 0; f < pl->m->num_features; ++f) {
    g[f] = NULL;
    if (!enqueued(pl, p, f)) continue;
    int64_t dims[8];
    size_t rank = 0;
    CHECK_OK(tpu_embedding_feature_shape(sys, f, dims, 8, &rank));
    const int t = pl->m->table_of[f];
    CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, (int)rank, pl->grad[p][f],
                               sizeof(float) * pl->m->samples[f] * pl->m->dim[t], &g[f]));
  }
}

static void release_all(tpu_tensor **t, int n) {
  for (int i = 0; i < n; ++i) tpu_tensor_release(t[i]);
}

static tpu_status send_these(tpu_replica_context *ctx, plan *pl, int p, tpu_tensor **g) {
  return checked(pl, p, AT_SEND,
                 tpu_embedding_send_gradients(ctx, g, pl->num_grads, pl->rates[p], pl->num_rates),
                 "send_gradients");
}

static tpu_status do_send(tpu_replica_context *ctx, plan *pl, int p) {
  tpu_tensor *g[MAXF];
  make_grads(ctx, pl, p, g);
  tpu_status st = send_these(ctx, pl, p, g);
  release_all(g, pl->m->num_features);
  return st;
}

static tpu_status usual(tpu_replica_context *ctx, plan *pl, int p) {
  tpu_status st = do_enqueue(ctx, pl, p);
  if (st == TPU_OK && pl->recv) st = do_recv(ctx, pl, p);
  if (st == TPU_OK && pl->send) st = do_send(ctx, pl, p);
  return st;
}

static tpu_status run_plan(tpu_replica_context *ctx, tpu_tensor *const *in, int ni, tpu_tensor **out, int no,
                           void *user) {
  (void)in, (void)ni, (void)out, (void)no;
  plan *pl = user;
  const int p = participant_of(ctx, pl);
  if (pl->bad && (pl->bad_participant < 0 || pl->bad_participant == p)) return pl->bad(ctx, pl, p);
  return usual(ctx, pl, p);
}

static tpu_status run(tpu_system *s, plan *pl, int replicas, const tpu_step_options *o) {
  return tpu_replicate(s, run_plan, pl, replicas, 0, NULL, 0, NULL, o);
}

/* Every participant's activations equal the reference's. */
static void expect_activations(const plan *pl, int P) {
  for (int p = 0; p < P; ++p)
    for (int i = 0; i < pl->in[p].n; ++i) {
      const tpu_embedding_feature_batch *b = &pl->in[p].b[i];
      const int f = b->feature, D = pl->m->dim[pl->m->table_of[f]];
      float want[MAXACT];
      ref_activation(pl->m, b, want);
      assert_true(pl->got[p][f]);
      for (int64_t j = 0; j < pl->m->samples[f] * D; ++j)
        if (!near(pl->act[p][f][j], want[j]))
          fail_msg("participant %d feature %d sample %lld [%d]: %.9g, expected %.9g", p, f, (long long)(j / D),
                   (int)(j % D), pl->act[p][f][j], want[j]);
    }
}

/* Random gradients for every participant's features. */
static void random_grads(plan *pl) {
  for (int p = 0; p < MAXP; ++p)
    for (int f = 0; f < MAXF; ++f)
      for (int j = 0; j < MAXACT; ++j) pl->grad[p][f][j] = rnd();
}

/* ---- sharding --------------------------------------------------------------------- */

/* tf.nn.embedding_lookup's partition_strategy, written out: "mod" puts id on shard
 * id % S as its row id / S; "div" gives shard s the next ceil(V/S) ids if s < V % S,
 * else floor(V/S). */
static void tf_owner(int64_t V, int S, int mod, int64_t id, int *shard, int64_t *row) {
  if (mod) {
    *shard = (int)(id % S), *row = id / S;
    return;
  }
  int64_t first = 0;
  for (int s = 0; s < S; ++s) {
    int64_t size = V / S + (s < V % S ? 1 : 0);
    if (id < first + size) {
      *shard = s, *row = id - first;
      return;
    }
    first += size;
  }
  fail_msg("id %lld beyond %lld", (long long)id, (long long)V);
}

static void test_embedding__sharding(void **state) {
  (void)state;
  static const int64_t vocab[] = {1, 3, 10, 17, 8, 24};
  const int nv = sizeof vocab / sizeof vocab[0];
  static const int cores[] = {1, 3, 4, 8};
  for (int ci = 0; ci < 4; ++ci)
    for (int mod = 0; mod < 2; ++mod) {
      char json[2048];
      int at = snprintf(json, sizeof json, "{\"table_descriptor\": [");
      for (int i = 0; i < nv; ++i)
        at += snprintf(json + at, sizeof json - at,
                       "%s{\"name\": \"t%d\", \"vocabulary_size\": %lld, \"dimension\": 2, "
                       "\"optimization_parameters\": {\"learning_rate\": {\"constant\": 0.1}, "
                       "\"stochastic_gradient_descent\": {}}}",
                       i ? ", " : "", i, (long long)vocab[i]);
      snprintf(json + at, sizeof json - at, "], \"sharding_strategy\": \"%s\"}", mod ? "MOD" : "DIV_DEFAULT");
      tpu_system *s = start(cores[ci], json);
      for (int t = 0; t < nv; ++t) {
        int core = -1;
        int64_t row = -1;
        for (int64_t id = 0; id < vocab[t]; ++id) {
          int want_core;
          int64_t want_row;
          tf_owner(vocab[t], cores[ci], mod, id, &want_core, &want_row);
          CHECK_OK(tpu_embedding_row_owner(s, t, id, &core, &row));
          if (core != want_core || row != want_row)
            fail_msg("%s, %d cores, V %lld, id %lld: core %d row %lld, expected core %d row %lld",
                     mod ? "MOD" : "DIV", cores[ci], (long long)vocab[t], (long long)id, core, (long long)row,
                     want_core, (long long)want_row);
        }
        /* Whatever the layout, the table reads back what was loaded, whole and by row. */
        float in[48], out[48], one[2];
        size_t n = 0;
        for (int64_t i = 0; i < vocab[t] * 2; ++i) in[i] = rnd();
        CHECK_OK(tpu_embedding_load(s, t, 0, 0, vocab[t], in, (size_t)vocab[t] * 2));
        CHECK_OK(tpu_embedding_retrieve(s, t, 0, 0, vocab[t], out, 48, &n));
        assert_int_equal(n, vocab[t] * 2);
        assert_memory_equal(in, out, n * sizeof(float));
        for (int64_t id = 0; id < vocab[t]; ++id) {
          CHECK_OK(tpu_embedding_retrieve(s, t, 0, id, 1, one, 2, &n));
          assert_memory_equal(one, in + id * 2, sizeof one);
        }
        CHECK_ERROR(tpu_embedding_row_owner(s, t, vocab[t], &core, &row), TPU_OUT_OF_RANGE, "row");
        CHECK_ERROR(tpu_embedding_row_owner(s, t, -1, &core, &row), TPU_OUT_OF_RANGE, "-1");
      }
      CHECK_ERROR(tpu_embedding_row_owner(s, nv, 0, &(int){0}, &(int64_t){0}), TPU_OUT_OF_RANGE, "table");
    }
}

/* ---- the configuration most tests use ------------------------------------------- */

/* ta: SGD at 0.5; tb: Adagrad at the dynamic rate of tag 0, accumulators from 0.25.
 * fa: 4 samples of ta; fb: [2, 3] samples of ta; fc: 5 samples of tb. */
static const char kMain[] =
    "{\"table_descriptor\": ["
    " {\"name\": \"ta\", \"vocabulary_size\": 10, \"dimension\": 3, \"optimization_parameters\":"
    "  {\"learning_rate\": {\"constant\": 0.5}, \"stochastic_gradient_descent\": {}}},"
    " {\"name\": \"tb\", \"vocabulary_size\": \"7\", \"dimension\": 2, \"optimizationParameters\":"
    "  {\"learningRate\": {\"dynamic\": {\"tag\": 0}}, \"adagrad\": {\"initialAccumulator\": 0.25}}}],"
    " \"feature_descriptor\": ["
    "  {\"name\": \"fa\", \"table_id\": 0, \"input_shape\": [4]},"
    "  {\"name\": \"fb\", \"tableId\": 0, \"inputShape\": [2, 3]},"
    "  {\"name\": \"fc\", \"table_id\": 1, \"input_shape\": [5]}],"
    " \"mode\": \"%s\", \"sharding_strategy\": \"%s\"}";

static const char *main_json(const char *mode, const char *sharding) {
  static char buf[2048];
  snprintf(buf, sizeof buf, kMain, mode, sharding);
  return buf;
}

static model main_model(void) {
  model m = {.num_tables = 2, .num_features = 3, .vocab = {10, 7}, .dim = {3, 2}, .adagrad = {0, 1},
             .lr = {0.5f, 0}, .tag = {-1, 0}, .table_of = {0, 0, 1}, .samples = {4, 6, 5}};
  return m;
}

/* Participant p's batch: COO with unsorted and interleaved sample indices and an empty
 * sample (fa), ragged with empty samples and duplicates (fb), COO without weights
 * (fc, which the fourth participant leaves out); the combiners rotate. */
static void main_batch(batch *in, int p) {
  memset(in, 0, sizeof *in);
  const int64_t fa_ids[6] = {p % 10, 3, 7, 3, 9, 0}, fa_s[6] = {2, 0, 2, 1, 0, 2};
  const float fa_w[6] = {0.5f, 1, 2, 1.5f, 0.25f, 1 + 0.25f * p};
  add_coo(in, 0, (tpu_embedding_combiner)(p % 3), 6, fa_ids, fa_s, fa_w);
  const int64_t fb_split[7] = {0, 2, 2, 5, 6, 6, 8}, fb_ids[8] = {1, 1, 4, 9, 1, 2, 8, (p * 3) % 10};
  const float fb_w[8] = {2, 0.5f, 1, 1, 3, 0.75f, 1.25f, 1};
  add_ragged(in, 1, (tpu_embedding_combiner)((p + 1) % 3), 7, fb_split, fb_ids, p % 2 ? fb_w : NULL);
  if (p % 4 != 3) {
    const int64_t fc_ids[4] = {6, p % 7, 6, 0}, fc_s[4] = {4, 4, 0, 1};
    add_coo(in, 2, (tpu_embedding_combiner)((p + 2) % 3), 4, fc_ids, fc_s, NULL);
  }
}

static void main_plan(plan *pl, const model *m, int P, int k, float rate) {
  memset(pl, 0, sizeof *pl);
  pl->m = m;
  pl->k = k;
  pl->recv = pl->send = 1;
  pl->num_rates = 1;
  pl->bad_participant = -1;
  pl->num_acts = pl->num_grads = m->num_features;
  for (int p = 0; p < P; ++p) main_batch(&pl->in[p], p), pl->rates[p][0] = rate;
  random_grads(pl);
}

/* One good step of the main plan: activations and the update against the model. */
static void good_step(tpu_system *s, model *m, int P, int k, float rate, const tpu_step_options *o,
                      const char *what) {
  static plan pl;
  main_plan(&pl, m, P, k, rate);
  CHECK_OK(run(s, &pl, P / k, o));
  CHECK_NO_WORKER_FAILURES();
  expect_activations(&pl, P);
  ref_step(m, pl.in, P, pl.grad, pl.rates[0]);
  expect_model(s, m, what);
}

/* ---- the configuration as the system reports it ----------------------------------- */

static void expect_name(tpu_status (*fn)(const tpu_system *, int, char *, size_t, size_t *), int i,
                          const char *want) {
  char buf[64];
  size_t n = 0;
  CHECK_OK(fn(g_sys, i, NULL, 0, &n));
  assert_int_equal(n, strlen(want));
  CHECK_OK(fn(g_sys, i, buf, sizeof buf, &n));
  assert_string_equal(buf, want);
}

static void test_embedding__queries(void **state) {
  (void)state;
  tpu_system *s = start(4, main_json("TRAINING", "MOD"));
  int n = 0;
  tpu_embedding_mode mode;
  CHECK_OK(tpu_embedding_mode_of(s, &mode));
  assert_int_equal(mode, TPU_EMBEDDING_MODE_TRAINING);
  CHECK_OK(tpu_embedding_num_tables(s, &n));
  assert_int_equal(n, 2);
  CHECK_OK(tpu_embedding_table_index(s, "tb", &n));
  assert_int_equal(n, 1);
  CHECK_ERROR(tpu_embedding_table_index(s, "zz", &n), TPU_NOT_FOUND, "'zz'");
  expect_name(tpu_embedding_table_name, 0, "ta");
  expect_name(tpu_embedding_table_name, 1, "tb");
  int64_t V = 0;
  int32_t D = 0;
  CHECK_OK(tpu_embedding_table_shape(s, 1, &V, &D));
  assert_true(V == 7 && D == 2);
  tpu_embedding_optimizer opt;
  CHECK_OK(tpu_embedding_table_optimizer(s, 0, &opt));
  assert_int_equal(opt, TPU_EMBEDDING_OPTIMIZER_SGD);
  CHECK_OK(tpu_embedding_table_optimizer(s, 1, &opt));
  assert_int_equal(opt, TPU_EMBEDDING_OPTIMIZER_ADAGRAD);
  CHECK_OK(tpu_embedding_table_num_variables(s, 0, &n));
  assert_int_equal(n, 1);
  CHECK_OK(tpu_embedding_table_num_variables(s, 1, &n));
  assert_int_equal(n, 2);
  char buf[64];
  size_t len = 0;
  CHECK_OK(tpu_embedding_variable_name(s, 1, 0, buf, sizeof buf, &len));
  assert_string_equal(buf, "parameters");
  CHECK_OK(tpu_embedding_variable_name(s, 1, 1, buf, sizeof buf, &len));
  assert_string_equal(buf, "accumulators");
  CHECK_ERROR(tpu_embedding_variable_name(s, 0, 1, buf, sizeof buf, &len), TPU_OUT_OF_RANGE,
              "variable 1 is outside [0, 1)");
  CHECK_ERROR(tpu_embedding_variable_name(s, 1, -1, buf, sizeof buf, &len), TPU_OUT_OF_RANGE, "-1");
  CHECK_ERROR(tpu_embedding_table_name(s, 0, buf, 2, &len), TPU_OUT_OF_RANGE, "");
  CHECK_ERROR(tpu_embedding_table_shape(s, 2, &V, &D), TPU_OUT_OF_RANGE, "table 2 is outside [0, 2)");
  CHECK_ERROR(tpu_embedding_table_optimizer(s, -1, &opt), TPU_OUT_OF_RANGE, "-1");

  CHECK_OK(tpu_embedding_num_features(s, &n));
  assert_int_equal(n, 3);
  CHECK_OK(tpu_embedding_feature_index(s, "fb", &n));
  assert_int_equal(n, 1);
  CHECK_ERROR(tpu_embedding_feature_index(s, "nope", &n), TPU_NOT_FOUND, "'nope'");
  expect_name(tpu_embedding_feature_name, 2, "fc");
  CHECK_OK(tpu_embedding_feature_table(s, 2, &n));
  assert_int_equal(n, 1);
  int64_t shape[4];
  CHECK_OK(tpu_embedding_feature_shape(s, 1, NULL, 0, &len));
  assert_int_equal(len, 3);
  CHECK_ERROR(tpu_embedding_feature_shape(s, 1, shape, 2, &len), TPU_OUT_OF_RANGE, "");
  CHECK_OK(tpu_embedding_feature_shape(s, 1, shape, 4, &len));
  assert_true(len == 3 && shape[0] == 2 && shape[1] == 3 && shape[2] == 3);
  CHECK_ERROR(tpu_embedding_feature_table(s, 3, &n), TPU_OUT_OF_RANGE, "feature 3 is outside [0, 3)");
  CHECK_ERROR(tpu_embedding_feature_name(s, -1, buf, sizeof buf, &len), TPU_OUT_OF_RANGE, "-1");

  /* TensorFlow's older form: num_features per table, batch_size_per_tensor_core each. */
  s = start(2, "{\"table_descriptor\": [{\"name\": \"old\", \"vocabulary_size\": 5, \"dimension\": 4,"
               " \"num_features\": 2, \"optimization_parameters\": {\"learning_rate\": {\"constant\": 1},"
               " \"stochastic_gradient_descent\": {}}}], \"batch_size_per_tensor_core\": 3}");
  CHECK_OK(tpu_embedding_num_features(s, &n));
  assert_int_equal(n, 2);
  expect_name(tpu_embedding_feature_name, 0, "old/0");
  expect_name(tpu_embedding_feature_name, 1, "old/1");
  CHECK_OK(tpu_embedding_feature_shape(s, 1, shape, 4, &len));
  assert_true(len == 2 && shape[0] == 3 && shape[1] == 4);
  CHECK_OK(tpu_embedding_mode_of(s, &mode));
  assert_int_equal(mode, TPU_EMBEDDING_MODE_UNSPECIFIED);

  /* Without a configuration: nothing, and every index is out of range. */
  s = start(2, NULL);
  CHECK_OK(tpu_embedding_num_tables(s, &n));
  assert_int_equal(n, 0);
  CHECK_OK(tpu_embedding_num_features(s, &n));
  assert_int_equal(n, 0);
  CHECK_OK(tpu_embedding_mode_of(s, &mode));
  assert_int_equal(mode, TPU_EMBEDDING_MODE_UNSPECIFIED);
  CHECK_ERROR(tpu_embedding_table_index(s, "ta", &n), TPU_NOT_FOUND, "'ta'");
  CHECK_ERROR(tpu_embedding_table_shape(s, 0, &V, &D), TPU_OUT_OF_RANGE, "0");
  CHECK_ERROR(tpu_embedding_row_owner(s, 0, 0, &n, &V), TPU_OUT_OF_RANGE, "0");
  CHECK_ERROR(tpu_embedding_feature_table(s, 0, &n), TPU_OUT_OF_RANGE, "0");
  float f = 0;
  CHECK_ERROR(tpu_embedding_load(s, 0, 0, 0, 0, &f, 0), TPU_OUT_OF_RANGE, "0");
  CHECK_ERROR(tpu_embedding_retrieve(s, 0, 0, 0, 0, &f, 1, &len), TPU_OUT_OF_RANGE, "0");
}

/* ---- load and retrieve ------------------------------------------------------------- */

static tpu_status load_inside(tpu_replica_context *ctx, tpu_tensor *const *in, int ni, tpu_tensor **out,
                              int no, void *user) {
  (void)in, (void)ni, (void)out, (void)no, (void)user;
  tpu_system *s = NULL;
  CHECK_OK(tpu_replica_context_system(ctx, &s));
  float v[3] = {1, 2, 3};
  size_t n = 0;
  CHECK_ERROR(tpu_embedding_load(s, 0, 0, 0, 1, v, 3), TPU_FAILED_PRECONDITION, "");
  CHECK_ERROR(tpu_embedding_retrieve(s, 0, 0, 0, 1, v, 3, &n), TPU_FAILED_PRECONDITION, "");
  return TPU_OK;
}

static void test_embedding__load_retrieve(void **state) {
  (void)state;
  tpu_system *s = start(3, main_json("TRAINING", "DIV_DEFAULT"));
  float got[64], v[64];
  size_t n = 0;
  /* A fresh table is zeros, its slots the optimizer's initial values. */
  CHECK_OK(tpu_embedding_retrieve(s, 0, 0, 0, 10, NULL, 0, &n));
  assert_int_equal(n, 30);
  CHECK_OK(tpu_embedding_retrieve(s, 0, 0, 0, 10, got, 64, &n));
  for (int i = 0; i < 30; ++i) assert_true(got[i] == 0.0f);
  CHECK_OK(tpu_embedding_retrieve(s, 1, 1, 0, 7, got, 64, &n));
  assert_int_equal(n, 14);
  for (int i = 0; i < 14; ++i) assert_true(got[i] == 0.25f);
  CHECK_OK(tpu_embedding_retrieve(s, 1, 0, 0, 7, got, 64, &n));
  for (int i = 0; i < 14; ++i) assert_true(got[i] == 0.0f);

  /* Rows [3, 6) of ta; the rest stays zero. A range reads back what it covers. */
  for (int i = 0; i < 9; ++i) v[i] = 1.5f + (float)i;
  CHECK_OK(tpu_embedding_load(s, 0, 0, 3, 3, v, 9));
  CHECK_OK(tpu_embedding_retrieve(s, 0, 0, 0, 10, got, 30, &n));
  for (int i = 0; i < 30; ++i) assert_true(got[i] == (i >= 9 && i < 18 ? v[i - 9] : 0.0f));
  CHECK_OK(tpu_embedding_retrieve(s, 0, 0, 5, 2, got, 6, &n));
  assert_int_equal(n, 6);
  for (int i = 0; i < 6; ++i) assert_true(got[i] == (i < 3 ? v[6 + i] : 0.0f));
  /* The accumulators, by range: the last row. */
  v[0] = 7, v[1] = 8;
  CHECK_OK(tpu_embedding_load(s, 1, 1, 6, 1, v, 2));
  CHECK_OK(tpu_embedding_retrieve(s, 1, 1, 0, 7, got, 14, &n));
  for (int i = 0; i < 14; ++i) assert_true(got[i] == (i == 12 ? 7.0f : i == 13 ? 8.0f : 0.25f));
  /* An empty range at the end is a range. */
  CHECK_OK(tpu_embedding_load(s, 0, 0, 10, 0, v, 0));
  CHECK_OK(tpu_embedding_retrieve(s, 0, 0, 10, 0, got, 0, &n));
  assert_int_equal(n, 0);

  size_t total = 0;
  float *before = snapshot(s, &total);
  CHECK_ERROR(tpu_embedding_load(s, 0, 0, -1, 2, v, 6), TPU_OUT_OF_RANGE, "-1");
  CHECK_ERROR(tpu_embedding_load(s, 0, 0, 8, 3, v, 9), TPU_OUT_OF_RANGE, "10");
  CHECK_ERROR(tpu_embedding_load(s, 0, 0, 11, 0, v, 0), TPU_OUT_OF_RANGE, "11");
  CHECK_ERROR(tpu_embedding_load(s, 0, 0, 0, -1, v, 0), TPU_OUT_OF_RANGE, "-1");
  CHECK_ERROR(tpu_embedding_load(s, 0, 0, INT64_MAX, 2, v, 6), TPU_OUT_OF_RANGE, "");
  CHECK_ERROR(tpu_embedding_load(s, 0, 0, 2, INT64_MAX, v, 6), TPU_OUT_OF_RANGE, "");
  CHECK_ERROR(tpu_embedding_load(s, 0, 1, 0, 1, v, 3), TPU_OUT_OF_RANGE, "variable 1");
  CHECK_ERROR(tpu_embedding_load(s, 1, 2, 0, 1, v, 2), TPU_OUT_OF_RANGE, "variable 2");
  CHECK_ERROR(tpu_embedding_load(s, 2, 0, 0, 1, v, 2), TPU_OUT_OF_RANGE, "2");
  CHECK_ERROR(tpu_embedding_load(s, 0, 0, 0, 3, v, 8), TPU_INVALID_ARGUMENT, "8");
  CHECK_ERROR(tpu_embedding_load(s, 0, 0, 0, 3, v, 10), TPU_INVALID_ARGUMENT, "10");
  CHECK_ERROR(tpu_embedding_load(s, 1, 1, 0, 1, v, 3), TPU_INVALID_ARGUMENT, "3");
  CHECK_ERROR(tpu_embedding_retrieve(s, 0, 0, 9, 2, got, 64, &n), TPU_OUT_OF_RANGE, "9");
  CHECK_ERROR(tpu_embedding_retrieve(s, 0, 0, -2, 1, got, 64, &n), TPU_OUT_OF_RANGE, "-2");
  CHECK_ERROR(tpu_embedding_retrieve(s, 0, 1, 0, 1, got, 64, &n), TPU_OUT_OF_RANGE, "variable 1");
  CHECK_ERROR(tpu_embedding_retrieve(s, 0, 0, 0, 3, got, 8, &n), TPU_OUT_OF_RANGE, "");
  assert_int_equal(n, 9); /* the out-array rule: the count needed */
  expect_unchanged(s, before, total, "refused loads");

  CHECK_OK(tpu_replicate(s, load_inside, NULL, 3, 0, NULL, 0, NULL, NULL));
  CHECK_NO_WORKER_FAILURES();
  expect_unchanged(s, before, total, "loads from inside a computation");
  free(before);
}

/* ---- lookups and updates ------------------------------------------------------------ */

/* Four and eight replicas, two steps (the second looks up what the first wrote), every
 * combiner, both input forms, SGD and Adagrad at a dynamic rate; DIV and MOD. */
static void test_embedding__lookup_and_update(void **state) {
  (void)state;
  for (int mod = 0; mod < 4; ++mod) {
    /* 4 cores, then 8 (more cores than tb's 7 rows: empty shards). */
    const int P = mod < 2 ? 4 : 8;
    tpu_system *s = start(P, main_json(mod % 2 ? "UNSPECIFIED" : "TRAINING", mod % 2 ? "MOD" : "DIV_DEFAULT"));
    model m = main_model();
    load_random(s, &m);
    expect_model(s, &m, "after load");
    good_step(s, &m, P, 1, 0.3f, NULL, "after step 1");
    good_step(s, &m, P, 1, 0.125f, NULL, "after step 2");
    /* One replica of the four-core system. */
    good_step(s, &m, 1, 1, 0.5f, NULL, "after a one-replica step");
    model_free(&m);
  }
}

/* A step in which nobody sends gradients changes nothing. */
static void test_embedding__lookup_only_changes_nothing(void **state) {
  (void)state;
  tpu_system *s = start(2, main_json("TRAINING", "MOD"));
  model m = main_model();
  load_random(s, &m);
  static plan pl;
  main_plan(&pl, &m, 2, 1, 0.3f);
  pl.send = 0;
  CHECK_OK(run(s, &pl, 2, NULL));
  CHECK_NO_WORKER_FAILURES();
  expect_activations(&pl, 2);
  expect_model(s, &m, "after a step without gradients");
  model_free(&m);
}

/* Several cores per replica: every (replica, core) enqueues its own batch and counts
 * as a participant. */
static void test_embedding__cores_per_replica(void **state) {
  (void)state;
  tpu_system *s = start(4, main_json("TRAINING", "DIV_DEFAULT"));
  tpu_topology *topo = NULL;
  CHECK_OK(tpu_system_topology(s, &topo));
  int32_t coords[4][4];
  for (int p = 0; p < 4; ++p) CHECK_OK(tpu_topology_device_coordinates(topo, 0, p, coords[p], 4, &(size_t){0}));
  /* The identity, and a placement in reverse: participants count in (replica, logical
   * core) order whatever core runs them. */
  int32_t reversed[4][4];
  for (int p = 0; p < 4; ++p) memcpy(reversed[p], coords[3 - p], sizeof reversed[p]);
  tpu_device_assignment *da = NULL, *rev = NULL;
  CHECK_OK(tpu_device_assignment_create(topo, &coords[0][0], 2, 2, &da));
  CHECK_OK(tpu_device_assignment_create(topo, &reversed[0][0], 2, 2, &rev));
  tpu_topology_release(topo);
  model m = main_model();
  load_random(s, &m);
  tpu_step_options o = TPU_STEP_OPTIONS_INIT;
  o.device_assignment = da;
  good_step(s, &m, 4, 2, 0.25f, &o, "2 replicas x 2 cores");
  o.device_assignment = rev;
  good_step(s, &m, 4, 2, 0.5f, &o, "2 replicas x 2 cores, placed in reverse");
  tpu_device_assignment_release(da);
  tpu_device_assignment_release(rev);
  model_free(&m);
}

/* Edge cases of the combiners: an enqueue of no features, a feature without ids,
 * MEAN over weights that sum to zero (div_no_nan: zeros, and no gradient), negative
 * weights under SQRTN. */
static tpu_status nothing_enqueued(tpu_replica_context *ctx, plan *pl, int p) {
  CHECK_OK(tpu_embedding_enqueue(ctx, NULL, 0));
  tpu_tensor *acts[MAXF] = {NULL};
  CHECK_OK(tpu_embedding_recv_activations(ctx, acts, pl->m->num_features));
  for (int f = 0; f < pl->m->num_features; ++f) CHECK(acts[f] == NULL);
  tpu_tensor *g[MAXF] = {NULL};
  CHECK_OK(tpu_embedding_send_gradients(ctx, g, pl->m->num_features, pl->rates[p], pl->num_rates));
  return TPU_OK;
}

static void test_embedding__combiner_edges(void **state) {
  (void)state;
  tpu_system *s = start(2, main_json("TRAINING", "MOD"));
  model m = main_model();
  load_random(s, &m);
  static plan pl;
  main_plan(&pl, &m, 2, 1, 0.3f);
  pl.bad = nothing_enqueued;
  CHECK_OK(run(s, &pl, 2, NULL));
  CHECK_NO_WORKER_FAILURES();
  expect_model(s, &m, "a step without ids");

  main_plan(&pl, &m, 2, 1, 0.3f);
  for (int p = 0; p < 2; ++p) {
    batch *in = &pl.in[p];
    memset(in, 0, sizeof *in);
    /* fa: no ids at all (neither form given). */
    add_coo(in, 0, TPU_EMBEDDING_COMBINER_MEAN, 0, NULL, NULL, NULL)->sample_indices = NULL;
    /* fb: sample 0's weights cancel under MEAN; the others are ordinary. */
    const int64_t split[7] = {0, 2, 3, 3, 4, 4, 5}, ids[5] = {2, 5, 5, 8, 2};
    const float w[5] = {1.5f, -1.5f, 2, 0.5f, -3};
    add_ragged(in, 1, p ? TPU_EMBEDDING_COMBINER_MEAN : TPU_EMBEDDING_COMBINER_SQRTN, 7, split, ids, w);
    /* fc: negative weights, every sample from one id repeated. */
    const int64_t cids[5] = {4, 4, 4, 1, 1}, cs[5] = {3, 3, 3, 0, 2};
    const float cw[5] = {-1, 0.5f, -0.25f, -2, 1};
    add_coo(in, 2, p ? TPU_EMBEDDING_COMBINER_SQRTN : TPU_EMBEDDING_COMBINER_MEAN, 5, cids, cs, cw);
  }
  CHECK_OK(run(s, &pl, 2, NULL));
  CHECK_NO_WORKER_FAILURES();
  expect_activations(&pl, 2);
  for (int j = 0; j < 4 * 3; ++j) assert_true(pl.act[0][0][j] == 0.0f); /* fa: zeros */
  ref_step(&m, pl.in, 2, pl.grad, pl.rates[0]);
  expect_model(s, &m, "combiner edges");
  model_free(&m);
}

/* TensorFlow's older form in a step: features "<table>/<i>" of batch_size_per_tensor_core
 * samples each, both on one table. */
static void test_embedding__older_form_step(void **state) {
  (void)state;
  tpu_system *s = start(3, "{\"table_descriptor\": [{\"name\": \"old\", \"vocabulary_size\": 5, \"dimension\": 4,"
                           " \"num_features\": 2, \"optimization_parameters\": {\"learning_rate\": {\"constant\": 0.75},"
                           " \"stochastic_gradient_descent\": {}}}], \"batch_size_per_tensor_core\": 3}");
  model m = {.num_tables = 1, .num_features = 2, .vocab = {5}, .dim = {4}, .lr = {0.75f}, .tag = {-1},
             .table_of = {0, 0}, .samples = {3, 3}};
  load_random(s, &m);
  static plan pl;
  memset(&pl, 0, sizeof pl);
  pl.m = &m;
  pl.k = 1;
  pl.recv = pl.send = 1;
  pl.bad_participant = -1;
  pl.num_acts = pl.num_grads = 2;
  for (int p = 0; p < 3; ++p) {
    const int64_t ids[4] = {p, 4, 0, 4}, sm[4] = {2, 2, 0, 1}, split[4] = {0, 1, 1, 4};
    add_coo(&pl.in[p], 1, TPU_EMBEDDING_COMBINER_SQRTN, 4, ids, sm, NULL);
    add_ragged(&pl.in[p], 0, TPU_EMBEDDING_COMBINER_MEAN, 4, split, ids, NULL);
  }
  random_grads(&pl);
  CHECK_OK(run(s, &pl, 3, NULL));
  CHECK_NO_WORKER_FAILURES();
  expect_activations(&pl, 3);
  ref_step(&m, pl.in, 3, pl.grad, NULL);
  expect_model(s, &m, "the older form");
  model_free(&m);
}

/* Load and retrieve wait for the step in flight: a load issued while a step that
 * updates row 0 runs lands after the step's update, never under it. */
typedef struct {
  plan *pl;
  atomic_int entered;
  tpu_status status;
} slow_step;

static tpu_status enqueue_then_wait(tpu_replica_context *ctx, plan *pl, int p) {
  slow_step *ss = (slow_step *)pl->user;
  atomic_fetch_add(&ss->entered, 1);
  struct timespec pause = {0, 100 * 1000 * 1000};
  nanosleep(&pause, NULL); /* room for the host's load to come in during the step */
  return usual(ctx, pl, p);
}

static void *run_slow(void *arg) {
  slow_step *ss = arg;
  ss->status = run(g_sys, ss->pl, 2, NULL);
  return NULL;
}

static void test_embedding__load_waits_for_the_step(void **state) {
  (void)state;
  tpu_system *s = start(2, main_json("TRAINING", "DIV_DEFAULT"));
  model m = main_model();
  load_random(s, &m);
  static plan pl;
  main_plan(&pl, &m, 2, 1, 0.3f);
  slow_step ss = {&pl, 0, TPU_OK};
  pl.user = &ss;
  pl.bad = enqueue_then_wait;
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, run_slow, &ss), 0);
  while (atomic_load(&ss.entered) == 0) {
    struct timespec ms = {0, 1000 * 1000};
    nanosleep(&ms, NULL);
  }
  const float loaded[3] = {100, 200, 300};
  CHECK_OK(tpu_embedding_load(s, 0, 0, 3, 1, loaded, 3)); /* row 3 of ta: every replica's fa touches it */
  float row[3];
  size_t n = 0;
  CHECK_OK(tpu_embedding_retrieve(s, 0, 0, 3, 1, row, 3, &n));
  assert_int_equal(pthread_join(th, NULL), 0);
  CHECK_OK(ss.status);
  CHECK_NO_WORKER_FAILURES();
  assert_memory_equal(row, loaded, sizeof row);
  ref_step(&m, pl.in, 2, pl.grad, pl.rates[0]);
  memcpy(m.w[0] + 9, loaded, sizeof loaded);
  expect_model(s, &m, "a load during a step");
  model_free(&m);
}

/* ---- modes ------------------------------------------------------------------------- */

static tpu_status send_refused(tpu_replica_context *ctx, plan *pl, int p) {
  tpu_status st = usual(ctx, pl, p);
  if (st != TPU_OK) return st;
  tpu_tensor *g[MAXF];
  make_grads(ctx, pl, p, g);
  CHECK_ERROR(tpu_embedding_send_gradients(ctx, g, pl->num_grads, pl->rates[p], pl->num_rates),
              TPU_FAILED_PRECONDITION, "INFERENCE");
  release_all(g, pl->m->num_features);
  return TPU_OK;
}

static tpu_status recv_refused(tpu_replica_context *ctx, plan *pl, int p) {
  tpu_status st = do_enqueue(ctx, pl, p);
  if (st != TPU_OK) return st;
  tpu_tensor *acts[MAXF];
  CHECK_ERROR(tpu_embedding_recv_activations(ctx, acts, pl->m->num_features), TPU_FAILED_PRECONDITION,
              "BACKWARD_PASS_ONLY");
  return do_send(ctx, pl, p);
}

static void test_embedding__modes(void **state) {
  (void)state;
  tpu_system *s = start(2, main_json("INFERENCE", "DIV_DEFAULT"));
  tpu_embedding_mode mode;
  CHECK_OK(tpu_embedding_mode_of(s, &mode));
  assert_int_equal(mode, TPU_EMBEDDING_MODE_INFERENCE);
  model m = main_model();
  load_random(s, &m);
  static plan pl;
  main_plan(&pl, &m, 2, 1, 0.3f);
  pl.send = 0;
  pl.bad = send_refused;
  CHECK_OK(run(s, &pl, 2, NULL));
  CHECK_NO_WORKER_FAILURES();
  expect_activations(&pl, 2);
  expect_model(s, &m, "INFERENCE");
  model_free(&m);

  s = start(2, main_json("BACKWARD_PASS_ONLY", "MOD"));
  m = main_model();
  load_random(s, &m);
  main_plan(&pl, &m, 2, 1, 0.3f);
  pl.bad = recv_refused;
  CHECK_OK(run(s, &pl, 2, NULL));
  CHECK_NO_WORKER_FAILURES();
  ref_step(&m, pl.in, 2, pl.grad, pl.rates[0]);
  expect_model(s, &m, "BACKWARD_PASS_ONLY");
  model_free(&m);
}

/* ---- bad input ----------------------------------------------------------------------- */

static tpu_status enqueue_twice(tpu_replica_context *ctx, plan *pl, int p) {
  tpu_status st = tpu_embedding_enqueue(ctx, pl->in[p].b, pl->in[p].n);
  if (st != TPU_OK) return checked(pl, p, AT_NONE, st, "the first enqueue");
  return do_enqueue(ctx, pl, p);
}

static tpu_status recv_first(tpu_replica_context *ctx, plan *pl, int p) {
  tpu_status st = do_recv(ctx, pl, p);
  return st != TPU_OK ? st : usual(ctx, pl, p);
}

static tpu_status send_first(tpu_replica_context *ctx, plan *pl, int p) {
  tpu_tensor *g[MAXF] = {NULL};
  return send_these(ctx, pl, p, g);
}

/* Gradients where gradients[f0] is replaced by `bad` (or NULL). */
static tpu_status send_replaced(tpu_replica_context *ctx, plan *pl, int p, int f0, tpu_tensor *bad) {
  tpu_status st = do_enqueue(ctx, pl, p);
  if (st == TPU_OK) st = do_recv(ctx, pl, p);
  if (st != TPU_OK) return st;
  tpu_tensor *g[MAXF];
  make_grads(ctx, pl, p, g);
  tpu_tensor_release(g[f0]);
  g[f0] = bad;
  st = send_these(ctx, pl, p, g);
  release_all(g, pl->m->num_features);
  return st;
}

static tpu_status send_wrong_shape(tpu_replica_context *ctx, plan *pl, int p) {
  const int64_t dims[2] = {4, 2}; /* fa's is [4, 3] */
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 2, pl->grad[p][0], sizeof(float) * 8, &t));
  return send_replaced(ctx, pl, p, 0, t);
}

static tpu_status send_flat(tpu_replica_context *ctx, plan *pl, int p) {
  const int64_t dims[2] = {6, 3}; /* fb's is [2, 3, 3]: same size, other rank */
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 2, pl->grad[p][1], sizeof(float) * 18, &t));
  return send_replaced(ctx, pl, p, 1, t);
}

static tpu_status send_wrong_dtype(tpu_replica_context *ctx, plan *pl, int p) {
  const int64_t dims[2] = {4, 3};
  const int32_t zeros[12] = {0};
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(TPU_INT32, dims, 2, zeros, sizeof zeros, &t));
  return send_replaced(ctx, pl, p, 0, t);
}

static tpu_status send_missing(tpu_replica_context *ctx, plan *pl, int p) {
  return send_replaced(ctx, pl, p, 1, NULL);
}

/* fc is left out of the enqueue, but its gradient is sent. */
static tpu_status send_unenqueued(tpu_replica_context *ctx, plan *pl, int p) {
  const int64_t dims[2] = {5, 2};
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 2, pl->grad[p][2], sizeof(float) * 10, &t));
  return send_replaced(ctx, pl, p, 2, t);
}

static tpu_status recv_twice(tpu_replica_context *ctx, plan *pl, int p) {
  tpu_tensor *acts[MAXF] = {NULL};
  tpu_status st = do_enqueue(ctx, pl, p);
  if (st == TPU_OK) st = tpu_embedding_recv_activations(ctx, acts, pl->num_acts);
  if (st != TPU_OK) return checked(pl, p, AT_NONE, st, "the first recv_activations");
  release_all(acts, pl->m->num_features);
  return do_recv(ctx, pl, p);
}

/* Every participant asks for its activations only once its gradients are sent (a
 * second ask after both would be "twice"): the update may have begun. */
static tpu_status recv_after_send(tpu_replica_context *ctx, plan *pl, int p) {
  tpu_status st = do_enqueue(ctx, pl, p);
  if (st == TPU_OK) st = do_send(ctx, pl, p);
  return st != TPU_OK ? st : do_recv(ctx, pl, p);
}

/* A participant that enqueues but skips its activations: the others' recv_activations
 * is a collective it does not join. */
static tpu_status skip_recv(tpu_replica_context *ctx, plan *pl, int p) {
  tpu_status st = do_enqueue(ctx, pl, p);
  return st != TPU_OK ? st : do_send(ctx, pl, p);
}

static tpu_status send_twice(tpu_replica_context *ctx, plan *pl, int p) {
  tpu_tensor *g[MAXF];
  tpu_status st = do_enqueue(ctx, pl, p);
  if (st == TPU_OK) st = do_recv(ctx, pl, p);
  if (st != TPU_OK) return st;
  make_grads(ctx, pl, p, g);
  st = tpu_embedding_send_gradients(ctx, g, pl->num_grads, pl->rates[p], pl->num_rates);
  if (st == TPU_OK) st = send_these(ctx, pl, p, g);
  else st = checked(pl, p, AT_NONE, st, "the first send_gradients");
  release_all(g, pl->m->num_features);
  return st;
}

/* Everything went well, then the computation fails. */
static tpu_status fail_after_send(tpu_replica_context *ctx, plan *pl, int p) {
  tpu_status st = usual(ctx, pl, p);
  if (st != TPU_OK) return st;
  return tpu_replica_context_fail(ctx, TPU_ABORTED, "participant fails after send_gradients on purpose");
}

typedef struct {
  const char *what;
  int who;       /* the misbehaving participant, -1 every one */
  int fail_at;   /* AT_* */
  tpu_status code;
  const char *names[5]; /* NULL-terminated */
} bad_case;

static const bad_case kBad[] = {
    {"an id past the vocabulary", 0, AT_ENQUEUE, TPU_INVALID_ARGUMENT, {"'fa'", "'ta'", "id 10"}},
    {"a negative id", 1, AT_ENQUEUE, TPU_INVALID_ARGUMENT, {"'fc'", "'tb'", "id -1"}},
    {"a NaN weight", 0, AT_ENQUEUE, TPU_INVALID_ARGUMENT, {"'fa'", "'ta'", "weights[1]"}},
    {"an infinite weight", 1, AT_ENQUEUE, TPU_INVALID_ARGUMENT, {"'fb'", "'ta'", "weights[3]"}},
    {"a sample index past the batch", 0, AT_ENQUEUE, TPU_INVALID_ARGUMENT, {"'fa'", "'ta'", "sample index 4"}},
    {"a negative sample index", -1, AT_ENQUEUE, TPU_INVALID_ARGUMENT, {"'fc'", "'tb'", "sample index -1"}},
    {"a feature the configuration does not name", 0, AT_ENQUEUE, TPU_INVALID_ARGUMENT, {"feature 3"}},
    {"a negative feature index", 1, AT_ENQUEUE, TPU_INVALID_ARGUMENT, {"feature -1"}},
    {"a ragged batch of 5 samples for 6", 0, AT_ENQUEUE, TPU_INVALID_ARGUMENT, {"'fb'", "'ta'", "5 samples"}},
    {"decreasing row splits", 0, AT_ENQUEUE, TPU_INVALID_ARGUMENT, {"'fb'", "'ta'", "row_splits[3]"}},
    {"row splits not from 0", 0, AT_ENQUEUE, TPU_INVALID_ARGUMENT, {"'fb'", "'ta'", "row_splits[0] is 1"}},
    {"row splits not up to num_ids", 0, AT_ENQUEUE, TPU_INVALID_ARGUMENT, {"'fb'", "'ta'", "7"}},
    {"both sample indices and row splits", 0, AT_ENQUEUE, TPU_INVALID_ARGUMENT, {"'fa'", "'ta'", "both"}},
    {"neither sample indices nor row splits", 0, AT_ENQUEUE, TPU_INVALID_ARGUMENT, {"'fa'", "'ta'", "neither"}},
    {"an unknown combiner", 1, AT_ENQUEUE, TPU_INVALID_ARGUMENT, {"'fa'", "'ta'", "combiner 7"}},
    {"a feature twice in one enqueue", 0, AT_ENQUEUE, TPU_INVALID_ARGUMENT, {"'fa'", "twice"}},
    {"two enqueues in one step", 1, AT_ENQUEUE, TPU_INVALID_ARGUMENT, {"second", "replica 1"}},
    {"activations before the enqueue", 0, AT_RECV, TPU_INVALID_ARGUMENT, {"replica 0", "before"}},
    {"the wrong activation count", 0, AT_RECV, TPU_INVALID_ARGUMENT, {"num_activations is 2", "3"}},
    {"gradients before the enqueue", 1, AT_SEND, TPU_INVALID_ARGUMENT, {"replica 1", "before"}},
    {"gradients of the wrong shape", 0, AT_SEND, TPU_INVALID_ARGUMENT, {"'fa'", "'ta'", "[4,3]"}},
    {"gradients of the wrong rank", 1, AT_SEND, TPU_INVALID_ARGUMENT, {"'fb'", "'ta'", "[2,3,3]"}},
    {"gradients of the wrong dtype", 0, AT_SEND, TPU_INVALID_ARGUMENT, {"'fa'", "'ta'", "float32"}},
    {"no gradient for an enqueued feature", 1, AT_SEND, TPU_INVALID_ARGUMENT, {"gradients[1]", "'fb'", "'ta'"}},
    {"a gradient for a feature not enqueued", 0, AT_SEND, TPU_INVALID_ARGUMENT,
     {"gradients[2]", "'fc'", "'tb'", "not enqueued"}},
    {"the wrong gradient count", 0, AT_SEND, TPU_INVALID_ARGUMENT, {"num_gradients is 4", "3"}},
    {"no learning rate", -1, AT_SEND, TPU_INVALID_ARGUMENT, {"0 learning rates", "1"}},
    {"two learning rates", -1, AT_SEND, TPU_INVALID_ARGUMENT, {"2 learning rates", "1"}},
    {"a NaN learning rate", -1, AT_SEND, TPU_INVALID_ARGUMENT, {"learning rate 0", "nan"}},
    {"a replica that disagrees on the learning rate", 1, AT_SEND, TPU_INVALID_ARGUMENT, {"disagree", "0.75"}},
    {"gradients sent twice", 0, AT_SEND, TPU_INVALID_ARGUMENT, {"replica 0", "twice"}},
    {"a replica failing after its gradients", 1, AT_NONE, TPU_ABORTED, {"replica 1", "on purpose"}},
    {"activations twice", 0, AT_RECV, TPU_INVALID_ARGUMENT, {"replica 0", "activations twice"}},
    {"activations after the gradients", -1, AT_RECV, TPU_INVALID_ARGUMENT, {"after sending its gradients"}},
    {"a participant skipping its activations", 1, AT_SEND, TPU_INVALID_ARGUMENT,
     {"replica 1", "without having asked for its activations"}},
};

/* Sets the plan up for case i (a mutation of the misbehaving participant's input, or
 * a misbehaviour). */
static void setup_bad(plan *pl, int i) {
  const bad_case *c = &kBad[i];
  pl->bad_participant = c->who;
  pl->fail_at = c->fail_at;
  pl->expect = c->names;
  pl->expect_code = c->code;
  pl->quiet = 1;
  const int P = 2;
  for (int p = 0; p < P; ++p) {
    if (c->who >= 0 && p != c->who) continue;
    batch *in = &pl->in[p];
    tpu_embedding_feature_batch *fa = &in->b[0], *fb = &in->b[1];
    switch (i) {
      case 0: in->ids[0][2] = 10; break;
      case 1: in->ids[2][3] = -1; break;
      case 2: in->weights[0][1] = NAN; break;
      case 3: in->weights[1][3] = INFINITY; break; /* replica 1's fb has weights */
      case 4: in->samples[0][5] = 4; break;
      case 5: in->samples[2][0] = -1; break;
      case 6: fb->feature = 3; break;
      case 7: fa->feature = -1; break;
      case 8: fb->num_row_splits = 6, in->splits[1][5] = 8; break;
      case 9: in->splits[1][3] = 1; break;
      case 10: in->splits[1][0] = 1; break;
      case 11: fb->num_ids = 7; break;
      case 12: fa->row_splits = in->splits[1]; break;
      case 13: fa->sample_indices = NULL; break;
      case 14: fa->combiner = (tpu_embedding_combiner)7; break;
      case 15: fb->feature = 0; break;
      case 16: pl->bad = enqueue_twice; break;
      case 17: pl->bad = recv_first; break;
      case 18: pl->num_acts = 2; break; /* every participant: it is checked before the collective */
      case 19: pl->bad = send_first; break;
      case 20: pl->bad = send_wrong_shape; break;
      case 21: pl->bad = send_flat; break;
      case 22: pl->bad = send_wrong_dtype; break;
      case 23: pl->bad = send_missing; break;
      case 24: in->n = 2, pl->bad = send_unenqueued; break;
      case 25: pl->num_grads = 4; break;
      case 26: pl->num_rates = 0; break;
      case 27: pl->num_rates = 2, pl->rates[p][1] = 0.5f; break;
      case 28: pl->rates[p][0] = NAN; break;
      case 29: pl->rates[p][0] = 0.75f; break;
      case 30: pl->bad = send_twice; break;
      case 31: pl->bad = fail_after_send; break;
      case 32: pl->bad = recv_twice; break;
      case 33: pl->bad = recv_after_send; break;
      case 34: pl->bad = skip_recv; break;
      default: fail_msg("no case %d", i);
    }
  }
}

/* Every bad input fails the step with the named error, and every variable of every
 * table is exactly as before; then a good step still works. */
static void test_embedding__bad_input_changes_nothing(void **state) {
  (void)state;
  tpu_system *s = start(2, main_json("TRAINING", "MOD"));
  model m = main_model();
  load_random(s, &m);
  size_t total = 0;
  float *before = snapshot(s, &total);
  static plan pl;
  for (int i = 0; i < (int)(sizeof kBad / sizeof kBad[0]); ++i) {
    main_plan(&pl, &m, 2, 1, 0.3f);
    setup_bad(&pl, i);
    tpu_clear_last_error();
    tpu_status st = run(s, &pl, 2, NULL);
    if (tpurt_test_take_worker_failures_() != 0) fail_msg("case %d (%s): a check failed in a computation", i,
                                                        kBad[i].what);
    if (st != kBad[i].code || !names_all(tpu_last_error(), kBad[i].names))
      fail_msg("case %d (%s): the step gave %s \"%s\"", i, kBad[i].what, tpu_status_name(st), tpu_last_error());
    char what[128];
    snprintf(what, sizeof what, "case %d (%s)", i, kBad[i].what);
    expect_unchanged(s, before, total, what);
  }
  free(before);
  good_step(s, &m, 2, 1, 0.3f, NULL, "a good step after the bad ones");
  model_free(&m);
}

/* ---- the collectives ------------------------------------------------------------------ */

/* Replica 1 takes its activations but never sends gradients: the others' call is
 * a collective it misses, so the step ends at the deadline naming it. */
static tpu_status skip_send(tpu_replica_context *ctx, plan *pl, int p) {
  tpu_status st = do_enqueue(ctx, pl, p);
  if (st == TPU_OK) st = do_recv(ctx, pl, p);
  return st;
}

/* Replica 1 skips send_gradients, then finishes (named at once) or stays busy past
 * the deadline (named at the deadline) and sends its gradients late, into a step that
 * is over; either way nothing changes, then or later. */
static tpu_status skip_send_and_linger(tpu_replica_context *ctx, plan *pl, int p) {
  tpu_status st = skip_send(ctx, pl, p);
  struct timespec pause = {0, 600 * 1000 * 1000}; /* well past the 100 ms deadline */
  nanosleep(&pause, NULL);
  if (st == TPU_OK && do_send(ctx, pl, p) == TPU_OK) CHECK_FAIL("a late send_gradients succeeded");
  return st;
}

static void test_embedding__skipped_send_is_named(void **state) {
  (void)state;
  tpu_system *s = start(3, main_json("TRAINING", "DIV_DEFAULT"));
  model m = main_model();
  load_random(s, &m);
  size_t total = 0;
  float *before = snapshot(s, &total);
  static plan pl;
  for (int linger = 0; linger < 2; ++linger) {
    main_plan(&pl, &m, 3, 1, 0.3f);
    pl.bad = linger ? skip_send_and_linger : skip_send;
    pl.bad_participant = 1;
    pl.quiet = 1;
    tpu_step_options o = TPU_STEP_OPTIONS_INIT;
    o.collective_timeout_ms = linger ? 100 : time_limit_ms(300);
    tpu_clear_last_error();
    tpu_status st = run(s, &pl, 3, &o);
    CHECK_NO_WORKER_FAILURES();
    if (st == TPU_OK || !strstr(tpu_last_error(), "replica 1") ||
        (linger && st != TPU_DEADLINE_EXCEEDED))
      fail_msg("the step gave %s \"%s\"; expected an error naming replica 1", tpu_status_name(st),
               tpu_last_error());
    expect_unchanged(s, before, total, "a step with a skipped send_gradients");
  }
  free(before);
  good_step(s, &m, 3, 1, 0.5f, NULL, "a good step after the skipped one");
  model_free(&m);
}

/* ---- participants that overrun their steps ------------------------------------------ */

enum { GOOD, FAIL_AFTER_SEND, LATE_AFTER_SEND, LATE_BEFORE_SEND, NUM_KINDS };

static void sleep_ms_(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* The misbehaving participant of a step: fails once its rows are updated, returns past
 * the deadline once they are, or sends its gradients past the deadline, into a step
 * that is over. */
static tpu_status overrun(tpu_replica_context *ctx, plan *pl, int p) {
  const int kind = *(const int *)pl->user;
  if (kind == LATE_BEFORE_SEND) {
    tpu_status st = do_enqueue(ctx, pl, p);
    if (st == TPU_OK) st = do_recv(ctx, pl, p);
    sleep_ms_(150 + 10 * (p % 4)); /* past the deadline and the caller's 50 ms sleep slices */
    if (st == TPU_OK && do_send(ctx, pl, p) == TPU_OK) CHECK_FAIL("a send_gradients past the deadline succeeded");
    return st;
  }
  tpu_status st = usual(ctx, pl, p);
  if (kind == FAIL_AFTER_SEND) return st == TPU_OK ? tpu_replica_context_fail(ctx, TPU_INTERNAL, "after send") : st;
  if (kind == LATE_AFTER_SEND) sleep_ms_(150 + 10 * (p % 4)); /* past the deadline and the caller's 50 ms sleep slices */
  return st;
}

/* More participants than CPUs, a deadline of 20 ms, and every step but the good ones
 * failing after (or while) its rows are updated, or on a core still late: each step
 * keeps all its updates or none, whatever its late participants do after it ended, and
 * a step never sees another's state. The tables equal the reference of the steps that
 * succeeded. (Run it under ThreadSanitizer: make test SANITIZE=thread.) */
static void test_embedding__overrunning_participants_stress(void **state) {
  (void)state;
  enum { P = 8, STEPS = 48 };
  static const int pattern[6] = {GOOD, FAIL_AFTER_SEND, GOOD, LATE_AFTER_SEND, GOOD, LATE_BEFORE_SEND};
  tpu_system *s = start(P, main_json("TRAINING", "MOD"));
  model m = main_model();
  load_random(s, &m);
  static plan plans[STEPS]; /* a late participant still reads its own step's plan */
  static int kinds[STEPS];
  int ok = 0, failed = 0, bad = 0;
  for (int i = 0; i < STEPS; ++i) {
    plan *pl = &plans[i];
    main_plan(pl, &m, P, 1, 0.25f);
    kinds[i] = pattern[i % 6];
    pl->user = &kinds[i];
    pl->bad = kinds[i] == GOOD ? NULL : overrun;
    pl->bad_participant = (i * 3) % P;
    pl->quiet = 1;
    tpu_step_options o = TPU_STEP_OPTIONS_INIT;
    o.collective_timeout_ms = 20;
    const tpu_status st = run(s, pl, P, &o);
    bad += kinds[i] != GOOD;
    if (st == TPU_OK) {
      if (kinds[i] != GOOD) fail_msg("step %d (kind %d) succeeded; its participant %d failed or overran", i,
                                     kinds[i], pl->bad_participant);
      ref_step(&m, pl->in, P, pl->grad, pl->rates[0]);
      ++ok;
    } else {
      ++failed;
    }
    /* Every other round the next step starts while the late participant still runs
     * (it fails on its busy core); in the others it finds the core free. */
    if (kinds[i] != GOOD && (i / 6) % 2) sleep_ms_(250);
    if (i % 8 == 7) expect_model(s, &m, "between the overrun steps");
  }
  sleep_ms_(250); /* the last late participants return */
  expect_model(s, &m, "after the overrun steps");
  print_message("%d steps kept their updates, %d failed and kept none\n", ok, failed);
  assert_true(failed >= bad);
  assert_true(ok > 0);
  model_free(&m);
}

/* ---- configurations tpu_system_init refuses ------------------------------------------------ */

static void test_embedding__init_refuses(void **state) {
  (void)state;
#define TABLE(name, vocab, dim, opt)                                                                    \
  "{\"table_descriptor\": [{\"name\": \"" name "\", \"vocabulary_size\": " vocab ", \"dimension\": " dim \
  ", \"optimization_parameters\": {\"learning_rate\": {\"constant\": 0.1}, " opt "}}]}"
  expect_init_error(1, TABLE("zero", "4", "0", "\"adagrad\": {}"), TPU_INVALID_ARGUMENT,
                    (const char *const[]){"'zero'", "dimension 0", NULL});
  expect_init_error(1, TABLE("neg", "-3", "4", "\"adagrad\": {}"), TPU_INVALID_ARGUMENT,
                    (const char *const[]){"'neg'", "vocabulary_size -3", NULL});
  /* 2^62 rows of 8 floats: more bytes than int64 holds. */
  expect_init_error(1, TABLE("wide", "4611686018427387904", "8", "\"stochastic_gradient_descent\": {}"),
                    TPU_INVALID_ARGUMENT, (const char *const[]){"'wide'", "4611686018427387904", NULL});
  expect_init_error(4, TABLE("wide", "9223372036854775807", "1", "\"adagrad\": {}"), TPU_INVALID_ARGUMENT,
                    (const char *const[]){"'wide'", NULL});
  /* 2^40 rows of 1024 floats fit int64 but no machine: 2^52 bytes. */
  expect_init_error(1, TABLE("huge", "1099511627776", "1024", "\"stochastic_gradient_descent\": {}"),
                    TPU_RESOURCE_EXHAUSTED, (const char *const[]){"'huge'", "4503599627370496", NULL});
  expect_init_error(1, TABLE("y", "4", "2", "\"online_yogi\": {}"), TPU_UNIMPLEMENTED,
                    (const char *const[]){"'y'", NULL});
  expect_init_error(1, TABLE("none", "4", "2", "\"weight_decay_factor\": 0"), TPU_INVALID_ARGUMENT,
                    (const char *const[]){"'none'", NULL});
  /* A learning rate that is no number would write NaN into every touched row (the
   * dynamic ones are refused at send_gradients). */
  expect_init_error(1,
                    "{\"table_descriptor\": [{\"name\": \"nan\", \"vocabulary_size\": 4, \"dimension\": 2, "
                    "\"optimization_parameters\": {\"learning_rate\": {\"constant\": \"NaN\"}, \"adagrad\": {}}}]}",
                    TPU_INVALID_ARGUMENT, (const char *const[]){"'nan'", "learning rate", NULL});
  expect_init_error(1,
                    "{\"table_descriptor\": [{\"name\": \"inf\", \"vocabulary_size\": 4, \"dimension\": 2, "
                    "\"optimization_parameters\": {\"learning_rate\": {\"constant\": \"-Infinity\"}, "
                    "\"stochastic_gradient_descent\": {}}}]}",
                    TPU_INVALID_ARGUMENT, (const char *const[]){"'inf'", "learning rate", NULL});
  /* Dynamic tags are 0, 1, ... without gaps. */
  expect_init_error(
      1,
      "{\"table_descriptor\": [{\"name\": \"t\", \"vocabulary_size\": 4, \"dimension\": 2, "
      "\"optimization_parameters\": {\"learning_rate\": {\"dynamic\": {\"tag\": 1}}, \"adagrad\": {}}}]}",
      TPU_INVALID_ARGUMENT, (const char *const[]){"tag", NULL});
  expect_init_error(
      1,
      "{\"table_descriptor\": [{\"name\": \"t\", \"vocabulary_size\": 4, \"dimension\": 2, "
      "\"optimization_parameters\": {\"learning_rate\": {\"constant\": 1}, \"adagrad\": {}}}],"
      " \"feature_descriptor\": [{\"name\": \"f\", \"table_id\": 1, \"input_shape\": [2]}]}",
      TPU_INVALID_ARGUMENT, (const char *const[]){"table_id 1", NULL});
  expect_init_error(
      1,
      "{\"table_descriptor\": [{\"name\": \"t\", \"vocabulary_size\": 4, \"dimension\": 2, "
      "\"optimization_parameters\": {\"learning_rate\": {\"constant\": 1}, \"adagrad\": {}}}],"
      " \"feature_descriptor\": [{\"name\": \"f\", \"table_id\": 0, \"input_shape\": [2, 0]}]}",
      TPU_INVALID_ARGUMENT, (const char *const[]){"'f'", NULL});
#undef TABLE
}

/* ---- hostile JSON ------------------------------------------------------------------------ */

/* tpu_embedding_config_from_json either gives bytes or TPU_INVALID_ARGUMENT with a
 * message; sanitizer builds catch anything worse. Returns the status. */
static tpu_status from_json(const char *json, size_t *n) {
  tpu_clear_last_error();
  tpu_status st = tpu_embedding_config_from_json(json, g_cfg, sizeof g_cfg, n);
  if (st == TPU_OUT_OF_RANGE) return st; /* more bytes than g_cfg: the out-array rule */
  if (st != TPU_OK && (st != TPU_INVALID_ARGUMENT || tpu_last_error()[0] == '\0'))
    fail_msg("from_json gave %s \"%s\" for\n%.300s", tpu_status_name(st), tpu_last_error(), json);
  return st;
}

/* Bytes from JSON into a one-core system: it starts, or fails with a message and one
 * of the codes init documents. */
static tpu_status init_with(const void *bytes, size_t n) {
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = 1;
  o.embedding_config = n ? bytes : "";
  o.embedding_config_len = n;
  tpu_system *s = NULL;
  tpu_clear_last_error();
  tpu_status st = tpu_system_init(&o, &s);
  if (st == TPU_OK) {
    CHECK_OK(tpu_system_release(s));
  } else {
    if ((st != TPU_INVALID_ARGUMENT && st != TPU_UNIMPLEMENTED && st != TPU_RESOURCE_EXHAUSTED) ||
        tpu_last_error()[0] == '\0')
      fail_msg("%zu bytes: %s \"%s\"", n, tpu_status_name(st), tpu_last_error());
    assert_null(s);
  }
  return st;
}

static const char kAlphabet[] = "{}[]\":,.-+eE0123456789 \\tfnaluexyzTRAINGMOD\x01\x7f\xc3\xff";

/* Up to 3 edits of `base` into out: replace, insert or delete a character. */
static void mutate(const char *base, char *out, size_t cap) {
  size_t n = strlen(base);
  memcpy(out, base, n + 1);
  int edits = 1 + (int)(rng() % 3);
  for (int e = 0; e < edits && n > 0 && n + 2 < cap; ++e) {
    size_t at = rng() % n;
    char c = kAlphabet[rng() % (sizeof kAlphabet - 1)];
    switch (rng() % 3) {
      case 0: out[at] = c; break;
      case 1: memmove(out + at + 1, out + at, n - at + 1), out[at] = c, ++n; break;
      default: memmove(out + at, out + at + 1, n - at), --n; break;
    }
  }
}

static void test_embedding__config_from_json_fuzz(void **state) {
  (void)state;
  const char *base = main_json("TRAINING", "MOD");
  size_t n = 0;
  int ok = 0, bad = 0;
  static char buf[1 << 18];
  /* Every truncation. */
  for (size_t len = 0; len < strlen(base); ++len) {
    memcpy(buf, base, len);
    buf[len] = '\0';
    from_json(buf, &n) == TPU_OK ? ++ok : ++bad;
  }
  assert_int_equal(ok, 0); /* no prefix is a whole object */
  /* Random edits, and what init makes of the bytes that come out. */
  int started = 0, refused = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    mutate(base, buf, sizeof buf);
    if (from_json(buf, &n) != TPU_OK) {
      ++bad;
      continue;
    }
    ++ok;
    init_with(g_cfg, n) == TPU_OK ? ++started : ++refused;
  }
  /* Digits only: valid JSON of other sizes, table ids, shapes and tags. */
  for (int iter = 0; iter < 500; ++iter) {
    strcpy(buf, base);
    for (int e = 0; e < 3; ++e) {
      char *d = buf + rng() % strlen(buf);
      while (*d && (*d < '0' || *d > '9')) ++d;
      if (*d) *d = (char)('0' + rng() % 10);
    }
    if (from_json(buf, &n) != TPU_OK) {
      ++bad;
      continue;
    }
    ++ok;
    init_with(g_cfg, n) == TPU_OK ? ++started : ++refused;
  }
  if (!(ok > 300 && bad > 50 && started > 100 && refused > 20))
    fail_msg("the edits reached too little: %d parsed (%d started, %d refused), %d not", ok, started, refused, bad);

  /* Deep nesting, anywhere a value goes. */
  static const char *const opens[] = {"[", "{\"a\":", "{\"table_descriptor\": [", "{\"x\": {\"y\": "};
  for (int i = 0; i < 4; ++i) {
    size_t at = 0, one = strlen(opens[i]);
    while (at + one < 200000) memcpy(buf + at, opens[i], one), at += one;
    buf[at] = '\0';
    from_json(buf, &n);
    assert_int_equal(from_json(buf, &n), TPU_INVALID_ARGUMENT);
  }
  {
    size_t at = (size_t)snprintf(buf, sizeof buf, "{\"table_descriptor\": [{\"optimization_parameters\": ");
    for (int i = 0; i < 20000; ++i) memcpy(buf + at, "{\"adagrad\": ", 12), at += 12;
    for (int i = 0; i < 20000; ++i) buf[at++] = '}';
    strcpy(buf + at, "}]}");
    assert_int_equal(from_json(buf, &n), TPU_INVALID_ARGUMENT);
  }

  /* Numbers out of range, and values of the wrong type: refused, naming the path (or,
   * for what is not JSON at all, saying so). */
  static const struct {
    const char *field, *value;
  } wrong[] = {
      {"vocabulary_size", "1e999"},
      {"vocabulary_size", "99999999999999999999999"},
      {"vocabulary_size", "-9223372036854775809"},
      {"vocabulary_size", "1.5"},
      {"vocabulary_size", "\"12abc\""},
      {"vocabulary_size", "\"\""},
      {"vocabulary_size", "true"},
      {"vocabulary_size", "[10]"},
      {"vocabulary_size", "{}"},
      {"dimension", "2147483648"},
      {"dimension", "-2147483649"},
      {"dimension", "\"3\\u0000\""},
      {"dimension", "NaN"},
      {"dimension", "Infinity"},
      {"dimension", "0x10"},
      {"dimension", "01"},
      {"dimension", "2.5"},
      {"name", "5"},
      {"name", "[\"ta\"]"},
      {"name", "\"\\ud800\""},
      {"name", "\"\\q\""},
      {"optimization_parameters", "\"adagrad\""},
      {"optimization_parameters", "[]"},
      {"optimization_parameters", "{\"learning_rate\": {\"constant\": \"fast\"}, \"adagrad\": {}}"},
      {"optimization_parameters", "{\"learning_rate\": {\"dynamic\": {\"tag\": 4294967296}}, \"adagrad\": {}}"},
      {"optimization_parameters", "{\"adagrad\": {\"initial_accumulator\": true}}"},
      {"optimization_parameters", "{\"no_such_optimizer\": {}}"},
      /* A float beyond float's range (proto3 JSON refuses it; it would be infinity). */
      {"optimization_parameters", "{\"learning_rate\": {\"constant\": 1e39}, \"adagrad\": {}}"},
      {"optimization_parameters", "{\"learning_rate\": {\"constant\": -3.5e38}, \"adagrad\": {}}"},
      /* Two fields of one oneof (proto3 JSON refuses it; the last one would win). */
      {"optimization_parameters", "{\"adagrad\": {}, \"stochastic_gradient_descent\": {}}"},
      {"optimization_parameters", "{\"learning_rate\": {\"constant\": 1, \"dynamic\": {}}, \"adagrad\": {}}"},
  };
  static const char *const fields[] = {"name", "vocabulary_size", "dimension", "optimization_parameters"};
  static const char *const fine[] = {"\"t\"", "4", "2", "{\"adagrad\": {}}"};
  for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; ++i) {
    int at = snprintf(buf, sizeof buf, "{\"table_descriptor\": [{");
    for (int f = 0; f < 4; ++f)
      at += snprintf(buf + at, sizeof buf - at, "%s\"%s\": %s", f ? ", " : "", fields[f],
                     strcmp(fields[f], wrong[i].field) ? fine[f] : wrong[i].value);
    snprintf(buf + at, sizeof buf - at, "}]}");
    char path[128];
    snprintf(path, sizeof path, "table_descriptor[0].%s", wrong[i].field);
    if (from_json(buf, &n) != TPU_INVALID_ARGUMENT ||
        (!strstr(tpu_last_error(), path) && !strstr(tpu_last_error(), "not JSON")))
      fail_msg("%s: %s gave \"%s\"", wrong[i].field, wrong[i].value, tpu_last_error());
  }
  /* Whole documents of the wrong shape: refused, or bytes init then judges. */
  static const char *const whole[] = {
      "", " ", "null", "[]", "\"x\"", "{", "}", "{}}", "{\"table_descriptor\": {}}",
      "{\"table_descriptor\": \"x\"}", "{\"table_descriptor\": [1]}", "{\"mode\": \"NOPE\"}",
      "{\"mode\": 7.5}", "{\"sharding_strategy\": []}", "{\"feature_descriptor\": [{\"input_shape\": [1, \"a\"]}]}",
      "{\"feature_descriptor\": [{\"input_shape\": 3}]}", "{\"batch_size_per_tensor_core\": -1e3}",
      "{\"table_descriptor\": []} trailing", "{\"a\" 1}", "{\"a\": 1,}", "{'a': 1}", "\xff\xfe{}",
  };
  for (size_t i = 0; i < sizeof whole / sizeof whole[0]; ++i)
    if (from_json(whole[i], &n) == TPU_OK) init_with(g_cfg, n);
  /* The out-array rule: a size query, too small a buffer. */
  size_t need = 0;
  CHECK_OK(tpu_embedding_config_from_json(base, NULL, 0, &need));
  assert_true(need > 0);
  CHECK_ERROR(tpu_embedding_config_from_json(base, g_cfg, need - 1, &n), TPU_OUT_OF_RANGE, "");
  CHECK_OK(tpu_embedding_config_from_json(base, g_cfg, need, &n));
  assert_int_equal(n, need);
}

/* Mutated configuration bytes of a configuration that uses every part the engine
 * reads (two tables, Adagrad, dynamic rates, features of rank 2), into init. */
static void test_embedding__config_bytes_fuzz(void **state) {
  (void)state;
  const size_t n = config_bytes(main_json("TRAINING", "MOD"));
  unsigned char valid[4096], b[4096];
  assert_true(n < sizeof valid / 2);
  memcpy(valid, g_cfg, n);
  int started = 0, refused = 0;
  for (size_t len = 0; len <= n; ++len) init_with(valid, len) == TPU_OK ? ++started : ++refused;
  for (int iter = 0; iter < 1500; ++iter) {
    size_t len = n;
    memcpy(b, valid, n);
    int edits = 1 + (int)(rng() % 3);
    for (int e = 0; e < edits && len > 0; ++e) {
      size_t at = rng() % len;
      switch (rng() % 4) {
        case 0: b[at] ^= (unsigned char)(1u << (rng() % 8)); break;
        case 1: b[at] = (unsigned char)rng(); break;
        case 2: len = at; break;
        default: /* a slice repeated: fields given twice */
          if (len + (len - at) < sizeof b) memcpy(b + len, b + at, len - at), len += len - at;
          break;
      }
    }
    init_with(b, len) == TPU_OK ? ++started : ++refused;
  }
  assert_true(started > 50 && refused > 50);
}

/* ---- one-replica steps on one small table (issue 29) ---------------------------------- */

/* One replica enqueues one feature (ragged), keeps its activation, and sends `grad`
 * (NULL: no gradients sent, the mode must allow it). */
typedef struct {
  const int64_t *ids, *splits;
  size_t num_ids, num_splits;
  tpu_embedding_combiner combiner;
  const float *grad; /* samples x dim */
  size_t grad_len;
  int64_t samples;
  float act[16];
} tiny_step;

static tpu_status tiny_run(tpu_replica_context *ctx, tpu_tensor *const *in, int ni, tpu_tensor **out, int no,
                           void *user) {
  (void)in, (void)ni, (void)out, (void)no;
  tiny_step *t = user;
  tpu_embedding_feature_batch b = {0};
  b.feature = 0;
  b.ids = t->ids;
  b.num_ids = t->num_ids;
  b.row_splits = t->splits;
  b.num_row_splits = t->num_splits;
  b.combiner = t->combiner;
  tpu_status st = tpu_embedding_enqueue(ctx, &b, 1);
  if (st != TPU_OK) return st;
  tpu_tensor *act = NULL;
  if ((st = tpu_embedding_recv_activations(ctx, &act, 1)) != TPU_OK) return st;
  const void *data = NULL;
  size_t bytes = 0;
  CHECK_OK(tpu_tensor_data(act, &data));
  CHECK_OK(tpu_tensor_byte_size(act, &bytes));
  CHECK(bytes <= sizeof t->act);
  memcpy(t->act, data, bytes < sizeof t->act ? bytes : sizeof t->act);
  tpu_tensor_release(act);
  if (t->grad == NULL) return TPU_OK;
  const int64_t dims[2] = {t->samples, (int64_t)(t->grad_len / (size_t)t->samples)};
  tpu_tensor *g = NULL;
  if ((st = tpu_tensor_create(TPU_FLOAT, dims, 2, t->grad, t->grad_len * sizeof(float), &g)) != TPU_OK) return st;
  st = tpu_embedding_send_gradients(ctx, &g, 1, NULL, 0);
  tpu_tensor_release(g);
  return st;
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Weight decay through a step, the smallest case of issue 29: a 1x1 SGD table, lr 0.1,
 * weight_decay_factor 0.01, row 0.5, gradient 0.1. TensorFlow's rule (the proto's
 * weight_decay_factor: "see weight_decay_optimizers.py", where
 * DecoupledWeightDecayExtension._decay_weights_op decays the variable before the
 * optimizer's update runs on it): 0.5 - 0.01*0.5 = 0.495, then 0.495 - 0.1*0.1 = 0.485;
 * under multiply_weight_decay_factor_by_learning_rate the factor is 0.01*0.1. */
static void test_embedding__weight_decay_step(void **state) {
  (void)state;
  for (int by_lr = 0; by_lr < 2; ++by_lr) {
    char json[512];
    snprintf(json, sizeof json,
             "{\"table_descriptor\": [{\"name\": \"t\", \"vocabulary_size\": 1, \"dimension\": 1,"
             " \"optimization_parameters\": {\"learning_rate\": {\"constant\": 0.1},"
             " \"weight_decay_factor\": 0.01, \"multiply_weight_decay_factor_by_learning_rate\": %s,"
             " \"stochastic_gradient_descent\": {}}}],"
             " \"feature_descriptor\": [{\"name\": \"f\", \"table_id\": 0, \"input_shape\": [1]}],"
             " \"mode\": \"TRAINING\"}",
             by_lr ? "true" : "false");
    tpu_system *s = start(1, json);
    const float row = 0.5f;
    CHECK_OK(tpu_embedding_load(s, 0, 0, 0, 1, &row, 1));
    const int64_t ids[1] = {0}, splits[2] = {0, 1};
    const float grad[1] = {0.1f};
    tiny_step t = {ids, splits, 1, 2, TPU_EMBEDDING_COMBINER_SUM, grad, 1, 1, {0}};
    CHECK_OK(tpu_replicate(s, tiny_run, &t, 1, 0, NULL, 0, NULL, NULL));
    float got = 0;
    size_t n = 0;
    CHECK_OK(tpu_embedding_retrieve(s, 0, 0, 0, 1, &got, 1, &n));
    const float d = by_lr ? 0.01f * 0.1f : 0.01f;
    float want = 0.5f - d * 0.5f;
    want = want - 0.1f * 0.1f;
    if (!same_bits(got, want) || fabsf(got - (by_lr ? 0.4895f : 0.485f)) > 1e-6f)
      fail_msg("by_lr %d: row %.9g, expected %.9g", by_lr, got, want);
  }
}

/* A row holding -0.0 looked up alone keeps its sign. TensorFlow's combiner
 * (embedding_ops.embedding_lookup_sparse: rows times weights, then math_ops.segment_sum)
 * runs SegmentReductionOp (tensorflow/core/kernels/segment_reduction_ops_impl.h), which
 * copies a one-element segment (`out_slice = in_slice`) and reduces longer ones with
 * Eigen's SumReducer from +0 in order: -0.0 alone stays -0.0 (and so under MEAN and
 * SQRTN, divided by 1), -0.0 + -0.0 summed from +0 is +0.0. */
static void test_embedding__negative_zero_row(void **state) {
  (void)state;
  tpu_system *s = start(1,
                        "{\"table_descriptor\": [{\"name\": \"t\", \"vocabulary_size\": 3, \"dimension\": 2,"
                        " \"optimization_parameters\": {\"learning_rate\": {\"constant\": 0.1},"
                        " \"stochastic_gradient_descent\": {}}}],"
                        " \"feature_descriptor\": [{\"name\": \"f\", \"table_id\": 0, \"input_shape\": [3]}],"
                        " \"mode\": \"INFERENCE\"}");
  const float rows[6] = {-0.0f, -0.0f, -0.0f, 1.5f, 0.0f, -0.0f};
  CHECK_OK(tpu_embedding_load(s, 0, 0, 0, 3, rows, 6));
  /* Sample 0: row 0 alone. Sample 1: rows 0 and 0. Sample 2: row 2 alone. */
  const int64_t ids[4] = {0, 0, 0, 2}, splits[4] = {0, 1, 3, 4};
  for (int c = TPU_EMBEDDING_COMBINER_SUM; c <= TPU_EMBEDDING_COMBINER_SQRTN; ++c) {
    tiny_step t = {ids, splits, 4, 4, (tpu_embedding_combiner)c, NULL, 0, 3, {0}};
    CHECK_OK(tpu_replicate(s, tiny_run, &t, 1, 0, NULL, 0, NULL, NULL));
    const float want[6] = {-0.0f, -0.0f, 0.0f, 0.0f, 0.0f, -0.0f};
    for (int j = 0; j < 6; ++j)
      if (!same_bits(t.act[j], want[j]))
        fail_msg("combiner %d, activation[%d] = %g (sign %d), expected %g (sign %d)", c, j, t.act[j],
                 signbit(t.act[j]) != 0, want[j], signbit(want[j]) != 0);
  }
}

/* proto3 JSON writes a google.protobuf wrapper (here ClippingLimits' FloatValue lower and
 * upper, the configuration's wrapper fields) as its bare value; the object form
 * {"value": x} is read too. Both give the same bytes, "NaN"/"Infinity" strings and
 * integers included, and the limits reach the optimizer. */
static void test_embedding__config_json_wrappers(void **state) {
  (void)state;
  static const char *const kFmt =
      "{\"table_descriptor\": [{\"name\": \"t\", \"vocabulary_size\": 2, \"dimension\": 1,"
      " \"optimization_parameters\": {\"learning_rate\": {\"constant\": 1},"
      " \"clipping_limits\": {\"lower\": %s, \"upper\": %s},"
      " \"gradient_clipping_limits\": {\"lower\": %s, \"upper\": %s},"
      " \"stochastic_gradient_descent\": {}}}],"
      " \"feature_descriptor\": [{\"name\": \"f\", \"table_id\": 0, \"input_shape\": [1]}]}";
  static const char *const pairs[][2] = {
      /* bare, object */
      {"-1.5", "{\"value\": -1.5}"},
      {"0.25", "{\"value\": 0.25}"},
      {"-2", "{\"value\": -2}"},
      {"3", "{\"value\": 3}"},
      {"\"-Infinity\"", "{\"value\": \"-Infinity\"}"},
      {"0", "{\"value\": 0}"},
  };
  const size_t np = sizeof pairs / sizeof pairs[0];
  static unsigned char bare[2048], object[2048];
  char json[1024];
  size_t nb = 0, no = 0;
  for (size_t i = 0; i < np; ++i) {
    /* Each of the four wrapper fields in turn written bare, the others as objects. */
    for (int field = 0; field < 4; ++field) {
      const char *v[4];
      for (int k = 0; k < 4; ++k) v[k] = pairs[(i + k) % np][k == field ? 0 : 1];
      snprintf(json, sizeof json, kFmt, v[0], v[1], v[2], v[3]);
      CHECK_OK(tpu_embedding_config_from_json(json, bare, sizeof bare, &nb));
      for (int k = 0; k < 4; ++k) v[k] = pairs[(i + k) % np][1];
      snprintf(json, sizeof json, kFmt, v[0], v[1], v[2], v[3]);
      CHECK_OK(tpu_embedding_config_from_json(json, object, sizeof object, &no));
      if (nb != no || memcmp(bare, object, nb) != 0)
        fail_msg("pair %zu, field %d: the bare form gives other bytes than {\"value\": ...}", i, field);
    }
  }
  /* The limits work: weights in [-1.5, 0.25], gradients in [-2, 3]. SGD, lr 1: row 0 = 0
   * with gradient -10 -> clipped to -2 -> w = 2 -> clipped to 0.25; row 1 = 0 with
   * gradient 10 -> 3 -> w = -3 -> -1.5. Written bare, null for unset. */
  snprintf(json, sizeof json, kFmt, "-1.5", "0.25", "-2", "3");
  tpu_system *s = start(1, json);
  const int64_t ids[2] = {0, 1};
  const int64_t splits[2] = {0, 1};
  const float g0[1] = {-10.0f}, g1[1] = {10.0f};
  tiny_step t0 = {ids, splits, 1, 2, TPU_EMBEDDING_COMBINER_SUM, g0, 1, 1, {0}};
  CHECK_OK(tpu_replicate(s, tiny_run, &t0, 1, 0, NULL, 0, NULL, NULL));
  tiny_step t1 = {ids + 1, splits, 1, 2, TPU_EMBEDDING_COMBINER_SUM, g1, 1, 1, {0}};
  CHECK_OK(tpu_replicate(s, tiny_run, &t1, 1, 0, NULL, 0, NULL, NULL));
  float got[2];
  size_t n = 0;
  CHECK_OK(tpu_embedding_retrieve(s, 0, 0, 0, 2, got, 2, &n));
  if (got[0] != 0.25f || got[1] != -1.5f) fail_msg("rows %g %g, expected 0.25 -1.5", got[0], got[1]);
  /* null is an unset wrapper: unbounded on that side. */
  snprintf(json, sizeof json, kFmt, "null", "{\"value\": 0.25}", "null", "null");
  CHECK_OK(tpu_embedding_config_from_json(json, bare, sizeof bare, &nb));
  snprintf(json, sizeof json, kFmt, "null", "0.25", "null", "null");
  CHECK_OK(tpu_embedding_config_from_json(json, object, sizeof object, &no));
  assert_true(nb == no && memcmp(bare, object, nb) == 0);
  /* A wrong type is refused with its path and what was there, in either form. */
  static const struct {
    const char *value, *message;
  } wrong[] = {
      {"\"low\"", "table_descriptor[0].optimization_parameters.clipping_limits.lower: expected a number, got a string"},
      {"true", "table_descriptor[0].optimization_parameters.clipping_limits.lower: expected a number, got a boolean"},
      {"[1]", "table_descriptor[0].optimization_parameters.clipping_limits.lower: expected a number, got a list"},
      {"1e39", "table_descriptor[0].optimization_parameters.clipping_limits.lower: 1e+39 is outside float's range"},
      {"{\"value\": \"low\"}",
       "table_descriptor[0].optimization_parameters.clipping_limits.lower.value: expected a number, got a string"},
      {"{\"value\": 1, \"v\": 2}",
       "table_descriptor[0].optimization_parameters.clipping_limits.lower.v: tensorflow.tpu.FloatValue has no such field"},
  };
  for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; ++i) {
    snprintf(json, sizeof json, kFmt, wrong[i].value, "1", "null", "null");
    tpu_clear_last_error();
    tpu_status st = tpu_embedding_config_from_json(json, bare, sizeof bare, &nb);
    if (st != TPU_INVALID_ARGUMENT || strcmp(tpu_last_error(), wrong[i].message) != 0)
      fail_msg("%s gave %s \"%s\", expected \"%s\"", wrong[i].value, tpu_status_name(st), tpu_last_error(),
               wrong[i].message);
  }
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_embedding__sharding, release_system),
      cmocka_unit_test_teardown(test_embedding__queries, release_system),
      cmocka_unit_test_teardown(test_embedding__load_retrieve, release_system),
      cmocka_unit_test_teardown(test_embedding__lookup_and_update, release_system),
      cmocka_unit_test_teardown(test_embedding__lookup_only_changes_nothing, release_system),
      cmocka_unit_test_teardown(test_embedding__cores_per_replica, release_system),
      cmocka_unit_test_teardown(test_embedding__combiner_edges, release_system),
      cmocka_unit_test_teardown(test_embedding__older_form_step, release_system),
      cmocka_unit_test_teardown(test_embedding__load_waits_for_the_step, release_system),
      cmocka_unit_test_teardown(test_embedding__modes, release_system),
      cmocka_unit_test_teardown(test_embedding__bad_input_changes_nothing, release_system),
      cmocka_unit_test_teardown(test_embedding__skipped_send_is_named, release_system),
      cmocka_unit_test_teardown(test_embedding__overrunning_participants_stress, release_system),
      cmocka_unit_test_teardown(test_embedding__init_refuses, release_system),
      cmocka_unit_test_teardown(test_embedding__config_from_json_fuzz, release_system),
      cmocka_unit_test_teardown(test_embedding__config_bytes_fuzz, release_system),
      cmocka_unit_test_teardown(test_embedding__weight_decay_step, release_system),
      cmocka_unit_test_teardown(test_embedding__negative_zero_row, release_system),
      cmocka_unit_test_teardown(test_embedding__config_json_wrappers, release_system),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
