/* tpurt demo --embedding: a click-through-rate model trained with the embedding engine.
 *
 * Logistic regression over three categorical features and a few dense ones:
 *   logit = u_ad . e_ad + u_user . e_user + u_hist . e_hist + v . x + c
 * e_ad: the row of the clicked-on ad in table "ads" (SUM, COO ids); e_user: the user's
 * row in table "users" (MEAN, COO); e_hist: the user's weighted history of ads, 1 to
 * MAX_HISTORY ids of table "ads" again (SQRTN, ragged, weights). The tables train with
 * the engine's Adagrad (the configuration's OptimizationParameters); u, v and c with
 * plain SGD in the computation, the gradients summed over the replicas with
 * cross_replica_sum. Labels come from a known model of the same form: a sigmoid and a
 * Bernoulli draw, fixed seeds.
 *
 * One tpu_replicate per training step (the engine applies the tables' updates at the
 * step's end): every replica enqueues its slice of the batch, receives the
 * activations, computes the logits, the loss and both gradients, sends the
 * activations' gradients and sums the dense ones. The host then trains the same model
 * on one core, a plain single-threaded reference of the whole batch (TensorFlow's
 * combiners and Adagrad written out here), and compares every table row and slot this
 * task holds (tpu_embedding_retrieve) and the dense weights. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "demo.h"
#include "demo_checkpoint.h"

#define DIM 4          /* both tables' dimension */
#define DENSE 4        /* dense features */
#define ADS 256        /* vocabulary of "ads" */
#define USERS 128      /* vocabulary of "users" */
#define MAX_HISTORY 4  /* ids of the history feature per sample */
#define FEATURES 3     /* ad, user, history: the configuration's order */
#define PARAMS (FEATURES * DIM + DENSE + 1) /* u_ad, u_user, u_hist, v, c */
#define TABLE_LR 0.3f
#define DENSE_LR 1.0f
#define INITIAL_ACCUMULATOR 0.1f
#define EVAL_SAMPLES 8192

enum { TABLE_ADS, TABLE_USERS, TABLES };
static const int feature_table[FEATURES] = {TABLE_ADS, TABLE_USERS, TABLE_ADS};
static const int64_t vocabulary[TABLES] = {ADS, USERS};

/* Samples back to back; history ids ragged by hist_splits (global offsets). */
typedef struct ctr_data {
  int n;
  int64_t *ad, *user, *hist_splits, *hist;
  float *hist_w, *dense, *label;
} ctr_data;

/* A model: both tables (rows and Adagrad accumulators) and the dense weights. */
typedef struct ctr_model {
  float *table[TABLES], *acc[TABLES];
  float p[PARAMS];
} ctr_model;

typedef struct ctr_run {
  const ctr_data *data;
  int replicas, rows, batch, step; /* rows = batch / replicas per replica */
  float (*params)[PARAMS];         /* [replica]: its dense weights, kept between steps */
  int *ran;                        /* [replica]: 1 once it ran a step here */
  int reporter;                    /* the replica that records the loss (this task's first) */
  float *losses;                   /* [steps]: the batch's mean loss before the update */
  int64_t *iota;                   /* [rows]: 0, 1, ... the COO features' sample indices */
} ctr_run;

static double uniform01(uint64_t *s) { return (demo_uniform(s) + 1) / 2; }

/* A skewed id in [0, n): popular rows repeat, as in click logs. */
static int64_t skewed_id(uint64_t *s, int64_t n) {
  double u = uniform01(s);
  return (int64_t)(u * u * (double)n) % n;
}

static void fill(float *v, size_t n, double scale, uint64_t *s) {
  for (size_t i = 0; i < n; i++) v[i] = (float)(scale * demo_uniform(s));
}

/* TensorFlow's combiners, as the engine computes them (float, ids in order): out[DIM]
 * gets the weighted sum of rows / denominator; returns the denominator. */
static float combine(const float *table, const int64_t *ids, const float *w, int64_t n,
                     tpu_embedding_combiner combiner, float *out) {
  float d = combiner == TPU_EMBEDDING_COMBINER_SUM ? 1.0f : 0.0f;
  memset(out, 0, DIM * sizeof *out);
  for (int64_t k = 0; k < n; k++) {
    float wk = w ? w[k] : 1.0f;
    for (int j = 0; j < DIM; j++) out[j] += wk * table[ids[k] * DIM + j];
    if (combiner == TPU_EMBEDDING_COMBINER_MEAN) d += wk;
    if (combiner == TPU_EMBEDDING_COMBINER_SQRTN) d += wk * wk;
  }
  if (combiner == TPU_EMBEDDING_COMBINER_SQRTN) d = sqrtf(d);
  if (d != 1.0f)
    for (int j = 0; j < DIM; j++) out[j] = d == 0.0f ? 0.0f : out[j] / d;
  return d;
}

static const tpu_embedding_combiner combiners[FEATURES] = {
    TPU_EMBEDDING_COMBINER_SUM, TPU_EMBEDDING_COMBINER_MEAN, TPU_EMBEDDING_COMBINER_SQRTN};

/* Sample i's ids of feature f: pointer, count and weights. */
static const int64_t *ids_of(const ctr_data *d, int f, int i, int64_t *n, const float **w) {
  *w = NULL;
  *n = 1;
  if (f == 0) return &d->ad[i];
  if (f == 1) return &d->user[i];
  *n = d->hist_splits[i + 1] - d->hist_splits[i];
  *w = d->hist_w + d->hist_splits[i];
  return d->hist + d->hist_splits[i];
}

/* The logit of one sample from its activations act[f][DIM] and dense features. */
static double logit_of(const float *p, float act[FEATURES][DIM], const float *x) {
  double z = p[PARAMS - 1];
  for (int f = 0; f < FEATURES; f++)
    for (int j = 0; j < DIM; j++) z += (double)p[f * DIM + j] * act[f][j];
  for (int j = 0; j < DENSE; j++) z += (double)p[FEATURES * DIM + j] * x[j];
  return z;
}

static double sigmoid(double z) { return 1 / (1 + exp(-z)); }

/* -log p(y | z), stable for large |z|. */
static double log_loss(double z, float y) {
  double m = z > 0 ? z : 0;
  return m - z * y + log(exp(-m) + exp(z - m));
}

static void model_logit_all(const ctr_model *m, const ctr_data *d, double *z) {
  for (int i = 0; i < d->n; i++) {
    float act[FEATURES][DIM];
    for (int f = 0; f < FEATURES; f++) {
      int64_t n;
      const float *w;
      const int64_t *ids = ids_of(d, f, i, &n, &w);
      combine(m->table[feature_table[f]], ids, w, n, combiners[f], act[f]);
    }
    z[i] = logit_of(m->p, act, d->dense + (size_t)i * DENSE);
  }
}

/* n samples; labels drawn from `truth` when given. */
static void make_data(ctr_data *d, int n, uint64_t seed, const ctr_model *truth) {
  uint64_t s = seed;
  d->n = n;
  d->ad = xcalloc((size_t)n, sizeof *d->ad);
  d->user = xcalloc((size_t)n, sizeof *d->user);
  d->hist_splits = xcalloc((size_t)n + 1, sizeof *d->hist_splits);
  d->hist = xcalloc((size_t)n * MAX_HISTORY, sizeof *d->hist);
  d->hist_w = xcalloc((size_t)n * MAX_HISTORY, sizeof *d->hist_w);
  d->dense = xcalloc((size_t)n * DENSE, sizeof *d->dense);
  d->label = xcalloc((size_t)n, sizeof *d->label);
  for (int i = 0; i < n; i++) {
    d->ad[i] = skewed_id(&s, ADS);
    d->user[i] = skewed_id(&s, USERS);
    int64_t k = 1 + (int64_t)(uniform01(&s) * MAX_HISTORY) % MAX_HISTORY, at = d->hist_splits[i];
    for (int64_t j = 0; j < k; j++) {
      d->hist[at + j] = skewed_id(&s, ADS);
      d->hist_w[at + j] = (float)(0.25 + uniform01(&s)); /* e.g. recency */
    }
    d->hist_splits[i + 1] = at + k;
    fill(d->dense + (size_t)i * DENSE, DENSE, 1.0, &s);
  }
  double *z = xcalloc((size_t)n, sizeof *z);
  model_logit_all(truth, d, z);
  uint64_t coin = seed ^ 0x9e3779b97f4a7c15ull; /* the Bernoulli draws' own stream */
  for (int i = 0; i < n; i++) d->label[i] = uniform01(&coin) < sigmoid(z[i]) ? 1.0f : 0.0f;
  free(z);
}

static void free_data(ctr_data *d) {
  free(d->ad), free(d->user), free(d->hist_splits), free(d->hist), free(d->hist_w);
  free(d->dense), free(d->label);
}

static void model_alloc(ctr_model *m) {
  for (int t = 0; t < TABLES; t++) {
    m->table[t] = xcalloc((size_t)vocabulary[t] * DIM, sizeof(float));
    m->acc[t] = xcalloc((size_t)vocabulary[t] * DIM, sizeof(float));
    for (int64_t i = 0; i < vocabulary[t] * DIM; i++) m->acc[t][i] = INITIAL_ACCUMULATOR;
  }
  memset(m->p, 0, sizeof m->p);
}

static void model_copy(ctr_model *to, const ctr_model *from) {
  for (int t = 0; t < TABLES; t++) {
    memcpy(to->table[t], from->table[t], (size_t)vocabulary[t] * DIM * sizeof(float));
    memcpy(to->acc[t], from->acc[t], (size_t)vocabulary[t] * DIM * sizeof(float));
  }
  memcpy(to->p, from->p, sizeof to->p);
}

static void model_free(ctr_model *m) {
  for (int t = 0; t < TABLES; t++) free(m->table[t]), free(m->acc[t]);
}

/* One replica's step: its slice of the batch through the engine and the dense model. */
static tpu_status ctr_step(tpu_replica_context *ctx, tpu_tensor *const *inputs, int num_inputs,
                           tpu_tensor **outputs, int num_outputs, void *user_data) {
  (void)inputs, (void)num_inputs, (void)outputs, (void)num_outputs;
  ctr_run *run = user_data;
  const ctr_data *d = run->data;
  int r;
  RETURN_IF_ERROR(tpu_replica_context_replica_id(ctx, &r));
  const int b = run->rows, first = run->step * run->batch + r * b;
  float *p = run->params[r];
  int64_t *splits = xcalloc((size_t)b + 1, sizeof *splits);
  for (int i = 0; i <= b; i++) splits[i] = d->hist_splits[first + i] - d->hist_splits[first];
  const int64_t h0 = d->hist_splits[first];
  tpu_embedding_feature_batch batch[FEATURES] = {
      {.feature = 0, .ids = d->ad + first, .num_ids = (size_t)b, .sample_indices = run->iota,
       .combiner = combiners[0]},
      {.feature = 1, .ids = d->user + first, .num_ids = (size_t)b, .sample_indices = run->iota,
       .combiner = combiners[1]},
      {.feature = 2, .ids = d->hist + h0, .num_ids = (size_t)splits[b], .row_splits = splits,
       .num_row_splits = (size_t)b + 1, .weights = d->hist_w + h0, .combiner = combiners[2]}};
  tpu_tensor *act[FEATURES] = {NULL}, *grad[FEATURES] = {NULL}, *sums_in = NULL, *sums_out = NULL;
  float *g[FEATURES] = {NULL};
  const float *a[FEATURES];
  double local[PARAMS + 1] = {0}; /* the dense gradient's sums, then the loss's */
  float sums[PARAMS + 1];
  const int64_t dims[2] = {b, DIM}, n_sums = PARAMS + 1;
  tpu_status status = tpu_embedding_enqueue(ctx, batch, FEATURES);
  if (status == TPU_OK) status = tpu_embedding_recv_activations(ctx, act, FEATURES);
  for (int f = 0; f < FEATURES && status == TPU_OK; f++) {
    status = tpu_tensor_data(act[f], (const void **)&a[f]);
    g[f] = xcalloc((size_t)b * DIM, sizeof *g[f]);
  }
  for (int i = 0; i < b && status == TPU_OK; i++) {
    float ai[FEATURES][DIM];
    for (int f = 0; f < FEATURES; f++) memcpy(ai[f], a[f] + (size_t)i * DIM, sizeof ai[f]);
    const float *x = d->dense + (size_t)(first + i) * DENSE;
    double z = logit_of(p, ai, x), y = d->label[first + i];
    double dz = (sigmoid(z) - y) / run->batch; /* of the mean loss over the whole batch */
    local[PARAMS] += log_loss(z, (float)y) / run->batch;
    for (int f = 0; f < FEATURES; f++)
      for (int j = 0; j < DIM; j++) {
        local[f * DIM + j] += dz * ai[f][j];
        g[f][(size_t)i * DIM + j] = (float)(dz * p[f * DIM + j]);
      }
    for (int j = 0; j < DENSE; j++) local[FEATURES * DIM + j] += dz * x[j];
    local[PARAMS - 1] += dz;
  }
  for (int f = 0; f < FEATURES && status == TPU_OK; f++)
    status = tpu_tensor_wrap(TPU_FLOAT, dims, 2, g[f], (size_t)b * DIM * sizeof(float), NULL,
                             NULL, &grad[f]);
  if (status == TPU_OK) status = tpu_embedding_send_gradients(ctx, grad, FEATURES, NULL, 0);
  for (int k = 0; k <= PARAMS; k++) sums[k] = (float)local[k];
  if (status == TPU_OK)
    status = tpu_tensor_wrap(TPU_FLOAT, &n_sums, 1, sums, sizeof sums, NULL, NULL, &sums_in);
  if (status == TPU_OK) status = tpu_cross_replica_sum(ctx, sums_in, NULL, &sums_out, NULL);
  const void *total = NULL;
  if (status == TPU_OK) status = tpu_tensor_data(sums_out, &total);
  if (status == TPU_OK) {
    const float *t = total;
    for (int k = 0; k < PARAMS; k++) p[k] -= DENSE_LR * t[k];
    if (r == run->reporter) run->losses[run->step] = t[PARAMS];
    run->ran[r] = 1;
  }
  for (int f = 0; f < FEATURES; f++) {
    status = first_error(status, first_error(tpu_tensor_release(act[f]), tpu_tensor_release(grad[f])));
    free(g[f]);
  }
  status = first_error(status, first_error(tpu_tensor_release(sums_in), tpu_tensor_release(sums_out)));
  free(splits);
  return status;
}

/* The same training on one core: the whole batch at once, each row's gradient summed
 * over it, then Adagrad (a += g^2; w -= lr g / sqrt(a)) on the rows it touched. */
static void train_reference(ctr_model *m, const ctr_data *d, int batch, int steps) {
  float *grad[TABLES];
  char *touched[TABLES];
  for (int t = 0; t < TABLES; t++) {
    grad[t] = xcalloc((size_t)vocabulary[t] * DIM, sizeof(float));
    touched[t] = xcalloc((size_t)vocabulary[t], 1);
  }
  for (int s = 0; s < steps; s++) {
    double sums[PARAMS] = {0};
    for (int t = 0; t < TABLES; t++) {
      memset(grad[t], 0, (size_t)vocabulary[t] * DIM * sizeof(float));
      memset(touched[t], 0, (size_t)vocabulary[t]);
    }
    float (*act)[FEATURES][DIM] = xcalloc((size_t)batch, sizeof *act);
    float *den = xcalloc((size_t)batch * FEATURES, sizeof *den);
    float *dz_f = xcalloc((size_t)batch * FEATURES * DIM, sizeof *dz_f); /* d loss / d act */
    for (int i = 0; i < batch; i++) {
      const int at = s * batch + i;
      for (int f = 0; f < FEATURES; f++) {
        int64_t n;
        const float *w;
        const int64_t *ids = ids_of(d, f, at, &n, &w);
        den[i * FEATURES + f] = combine(m->table[feature_table[f]], ids, w, n, combiners[f], act[i][f]);
      }
      const float *x = d->dense + (size_t)at * DENSE;
      double dz = (sigmoid(logit_of(m->p, act[i], x)) - d->label[at]) / batch;
      for (int f = 0; f < FEATURES; f++)
        for (int j = 0; j < DIM; j++) {
          sums[f * DIM + j] += dz * act[i][f][j];
          dz_f[((size_t)i * FEATURES + f) * DIM + j] = (float)(dz * m->p[f * DIM + j]);
        }
      for (int j = 0; j < DENSE; j++) sums[FEATURES * DIM + j] += dz * x[j];
      sums[PARAMS - 1] += dz;
    }
    /* The rows' gradients, feature by feature as the engine sums them. */
    for (int f = 0; f < FEATURES; f++) {
      const int t = feature_table[f];
      for (int i = 0; i < batch; i++) {
        int64_t n;
        const float *w;
        const int64_t *ids = ids_of(d, f, s * batch + i, &n, &w);
        const float dn = den[i * FEATURES + f];
        if (dn == 0.0f) continue;
        for (int64_t k = 0; k < n; k++) {
          const float wk = w ? w[k] : 1.0f;
          for (int j = 0; j < DIM; j++)
            grad[t][ids[k] * DIM + j] += dz_f[((size_t)i * FEATURES + f) * DIM + j] / dn * wk;
          touched[t][ids[k]] = 1;
        }
      }
    }
    for (int t = 0; t < TABLES; t++)
      for (int64_t row = 0; row < vocabulary[t]; row++) {
        if (!touched[t][row]) continue;
        for (int j = 0; j < DIM; j++) {
          const size_t e = (size_t)row * DIM + j;
          const float gj = grad[t][e];
          m->acc[t][e] += gj * gj;
          m->table[t][e] -= TABLE_LR * gj / sqrtf(m->acc[t][e]);
        }
      }
    for (int k = 0; k < PARAMS; k++) m->p[k] -= DENSE_LR * (float)sums[k];
    free(act), free(den), free(dz_f);
  }
  for (int t = 0; t < TABLES; t++) free(grad[t]), free(touched[t]);
}

/* The area under the ROC curve of scores z against labels y (ties count half). */
static double auc(const double *z, const float *y, int n) {
  /* (score, index) pairs in score order: compare_doubles sees the score. */
  double (*pairs)[2] = xcalloc((size_t)n, sizeof *pairs);
  for (int i = 0; i < n; i++) pairs[i][0] = z[i], pairs[i][1] = i;
  qsort(pairs, (size_t)n, sizeof *pairs, compare_doubles);
  double pos = 0, neg = 0, rank_sum = 0;
  for (int i = 0; i < n;) {
    int j = i;
    while (j < n && pairs[j][0] == pairs[i][0]) j++;
    double mid = (i + j + 1) / 2.0; /* the ranks i+1..j share their mean */
    for (int k = i; k < j; k++)
      if (y[(int)pairs[k][1]] > 0.5f) rank_sum += mid, pos++;
      else neg++;
    i = j;
  }
  free(pairs);
  return pos && neg ? (rank_sum - pos * (pos + 1) / 2) / (pos * neg) : NAN;
}

/* The accuracy of thresholding z at 0 against y, and the mean log loss. */
static void accuracy_and_loss(const double *z, const float *y, int n, double *accuracy,
                              double *loss) {
  int right = 0;
  double sum = 0;
  for (int i = 0; i < n; i++) {
    right += (z[i] > 0) == (y[i] > 0.5f);
    sum += log_loss(z[i], y[i]);
  }
  *accuracy = (double)right / n;
  *loss = sum / n;
}

static void track(double got, double want, double *max_abs, double *scale) {
  double d = fabs(got - want);
  if (!(d <= *max_abs) && !isnan(*max_abs)) *max_abs = d;
  if (fabs(want) > *scale) *scale = fabs(want);
}

/* The configuration: two tables with Adagrad, three features of `rows` samples. */
static char *config_json(int rows) {
  char *json = xcalloc(2048, 1);
  snprintf(json, 2048,
           "{\"table_descriptor\": ["
           "{\"name\": \"ads\", \"vocabulary_size\": %d, \"dimension\": %d,"
           " \"optimization_parameters\": {\"learning_rate\": {\"constant\": %g},"
           " \"adagrad\": {\"initial_accumulator\": %g}}},"
           "{\"name\": \"users\", \"vocabulary_size\": %d, \"dimension\": %d,"
           " \"optimization_parameters\": {\"learning_rate\": {\"constant\": %g},"
           " \"adagrad\": {\"initial_accumulator\": %g}}}],"
           " \"feature_descriptor\": ["
           "{\"name\": \"ad\", \"table_id\": 0, \"input_shape\": [%d]},"
           "{\"name\": \"user\", \"table_id\": 1, \"input_shape\": [%d]},"
           "{\"name\": \"history\", \"table_id\": 0, \"input_shape\": [%d]}],"
           " \"mode\": \"TRAINING\"}",
           ADS, DIM, (double)TABLE_LR, (double)INITIAL_ACCUMULATOR, USERS, DIM,
           (double)TABLE_LR, (double)INITIAL_ACCUMULATOR, rows, rows, rows);
  return json;
}

/* Under tpurt launch without -r: one replica per core of every task, the cores being
 * what the system will take (TPURT_NUM_CORES, else the online CPUs); 0 otherwise. */
static int replicas_of_launch(void) {
  const char *launched = getenv("TPURT_LAUNCH_TASKS"), *cores = getenv("TPURT_NUM_CORES");
  long local = cores ? atol(cores) : sysconf(_SC_NPROCESSORS_ONLN);
  return launched && atoi(launched) > 0 && local > 0 ? atoi(launched) * (int)local : 0;
}

int demo_embedding(const demo_embedding_options *opt) {
  const int follow = !opt->replicas_given && replicas_of_launch() > 0;
  const int R = follow ? replicas_of_launch() : opt->replicas, B = opt->batch, steps = opt->steps;
  if (B % R)
    usage_error("demo", "--batch %d is not a multiple of the %d replicas%s", B, R,
                follow ? " (one per core of every task: choose a batch every count divides)" : "");
  /* Cores per process: R in one process; under tpurt launch -n T, R/T each; an explicit
   * TPURT_NUM_CORES (tpurt launch --cores-per-task) wins, as do the default cores when
   * the replicas follow the tasks. */
  const char *launched = getenv("TPURT_LAUNCH_TASKS");
  int want = R;
  if (getenv("TPURT_NUM_CORES") || follow) want = 0;
  else if (launched && atoi(launched) > 0 && R % atoi(launched) == 0) want /= atoi(launched);
  char *json = config_json(B / R);
  tpu_system *system = start_embedding_system(want, json, TPU_PIN_AUTO);
  free(json);
  int tasks, task, local;
  CHECK(tpu_system_num_tasks(system, &tasks));
  CHECK(tpu_system_task_id(system, &task));
  CHECK(tpu_system_num_cores(system, &local));
  if (local * tasks != R)
    usage_error("demo", "--replicas %d: the system has %d cores (%d task(s) of %d)", R,
                local * tasks, tasks, local);

  /* The known model, the data it labels, and the trained model's start. */
  ctr_model truth, start, ref;
  model_alloc(&truth), model_alloc(&start), model_alloc(&ref);
  uint64_t s = 20;
  for (int t = 0; t < TABLES; t++) {
    fill(truth.table[t], (size_t)vocabulary[t] * DIM, 1.0, &s);
    fill(start.table[t], (size_t)vocabulary[t] * DIM, 0.1, &s);
  }
  fill(truth.p, PARAMS, 1.0, &s);
  fill(start.p, FEATURES * DIM, 0.5, &s); /* u != 0, or no table would ever move */
  ctr_data train, eval;
  make_data(&train, B * steps, 1, &truth);
  make_data(&eval, EVAL_SAMPLES, 2, &truth);

  ctr_run run = {.data = &train, .replicas = R, .rows = B / R, .batch = B,
                 .reporter = task * local};
  run.params = xcalloc((size_t)R, sizeof *run.params);
  run.ran = xcalloc((size_t)R, sizeof *run.ran);
  /* From the newest checkpoint (tables, slots, dense weights, step), else from start. */
  demo_checkpoint ckpt;
  demo_checkpoint_setup(&ckpt, system, opt->checkpoint_dir, opt->checkpoint_every);
  int resume = (int)demo_restore(system, &ckpt, "dense", run.params[0], PARAMS);
  if (!resume) {
    memcpy(run.params[0], start.p, sizeof start.p);
    for (int t = 0; t < TABLES; t++) {
      CHECK_DOING(tpu_embedding_load(system, t, 0, 0, vocabulary[t], start.table[t],
                                     (size_t)vocabulary[t] * DIM), "loading a table");
      CHECK_DOING(tpu_embedding_load(system, t, 1, 0, vocabulary[t], start.acc[t],
                                     (size_t)vocabulary[t] * DIM), "loading the accumulators");
    }
  }
  for (int r = 1; r < R; r++) memcpy(run.params[r], run.params[0], sizeof start.p);
  if (resume > steps) resume = steps;
  /* This task's replicas hold the restored weights even if no step is left to run. */
  for (int r = task * local; r < task * local + local && resume > 0; r++) run.ran[r] = 1;
  run.losses = xcalloc((size_t)steps, sizeof *run.losses);
  run.iota = xcalloc((size_t)run.rows, sizeof *run.iota);
  for (int i = 0; i < run.rows; i++) run.iota[i] = i;

  printf("tpurt demo --embedding: click-through-rate logistic regression, %d replicas,\n"
         "batch %d (%d each), %d steps; features ad (table ads %dx%d, SUM), user (users %dx%d,\n"
         "MEAN), history (ads, 1-%d weighted ids, SQRTN) and %d dense; Adagrad (lr %g) on the\n"
         "tables in the engine, SGD (lr %g) on the dense weights over cross_replica_sum\n",
         R, B, run.rows, steps, ADS, DIM, USERS, DIM, MAX_HISTORY, DENSE, (double)TABLE_LR,
         (double)DENSE_LR);
  if (tasks > 1) printf("task %d of %d runs replicas %d to %d\n", task, tasks, task * local,
                        task * local + local - 1);
  double t0 = now_seconds();
  for (run.step = resume; run.step < steps; run.step++) {
    CHECK_DOING(tpu_replicate(system, ctr_step, &run, R, 0, NULL, 0, NULL, NULL),
                "running a training step");
    demo_step_done(&ckpt, run.step);
    demo_maybe_save(system, &ckpt, run.step + 1, steps, "dense", run.params[task * local], PARAMS);
  }
  double elapsed = now_seconds() - t0;

  int every = steps >= 5 ? steps / 5 : 1;
  printf("\n%6s  %12s\n", "step", "loss");
  for (int st = resume; st < steps; st++)
    if (st % every == 0 || st == steps - 1) printf("%6d  %12.6f\n", st, run.losses[st]);
  printf("\n%d steps in %.1f ms (%.2f ms a step)\n", steps - resume, elapsed * 1e3,
         elapsed * 1e3 / (steps > resume ? steps - resume : 1));

  /* Against one core: every row and slot held here, and this task's dense weights. */
  model_copy(&ref, &start);
  train_reference(&ref, &train, B, steps);
  double abs_t = 0, scale_t = 0, abs_p = 0, scale_p = 0;
  int64_t held = 0, untouched_ok = 1;
  for (int t = 0; t < TABLES; t++) {
    const size_t n = (size_t)vocabulary[t] * DIM;
    float *got = xcalloc(n, sizeof *got);
    for (int v = 0; v < 2; v++) {
      const float *want = v ? ref.acc[t] : ref.table[t];
      for (size_t i = 0; i < n; i++) got[i] = NAN; /* rows held elsewhere stay NaN */
      size_t count;
      CHECK_DOING(tpu_embedding_retrieve(system, t, v, 0, vocabulary[t], got, n, &count),
                  "retrieving a table");
      for (int64_t row = 0; row < vocabulary[t]; row++) {
        int core;
        int64_t shard_row;
        CHECK(tpu_embedding_row_owner(system, t, row, &core, &shard_row));
        const int here = core / local == task;
        for (int j = 0; j < DIM; j++) {
          const float x = got[row * DIM + j];
          if (here) track(x, want[row * DIM + j], &abs_t, &scale_t);
          else untouched_ok &= isnan(x);
        }
        held += here && v == 0;
      }
    }
    free(got);
  }
  int agree = 1, mine = 0;
  for (int r = 0; r < R; r++) {
    if (!run.ran[r]) continue;
    mine++;
    for (int k = 0; k < PARAMS; k++) track(run.params[r][k], ref.p[k], &abs_p, &scale_p);
    agree &= !memcmp(run.params[r], run.params[task * local], sizeof run.params[r]);
  }
  const double rt = abs_t / (scale_t > 0 ? scale_t : 1), rp = abs_p / (scale_p > 0 ? scale_p : 1);
  const int close = rt <= opt->tolerance && rp <= opt->tolerance;
  printf("against one core (a single-threaded reference of the whole batch): tables and\n"
         "accumulators (%lld rows held here) max |diff| / max |w| = %.2e, dense weights %.2e:\n"
         "%s the tolerance %.0e\n", (long long)held, rt, rp, close ? "within" : "OUTSIDE",
         opt->tolerance);
  printf("replicas hold identical dense weights: %s\n", agree ? "yes" : "NO");
  if (tasks > 1)
    printf("rows held by other tasks left as they were by retrieve: %s\n", untouched_ok ? "yes" : "NO");

  /* The trained model (the reference's, which the check above ties to the engine's) on
   * fresh samples of the known model, beside the known model itself. */
  double *z = xcalloc((size_t)EVAL_SAMPLES, sizeof *z), acc, loss;
  printf("\non %d fresh samples of the known model: %8s %8s %8s\n", EVAL_SAMPLES, "AUC",
         "accuracy", "loss");
  const ctr_model *models[3] = {&start, &ref, &truth};
  const char *names[3] = {"untrained", "trained", "known model"};
  double aucs[3];
  for (int k = 0; k < 3; k++) {
    model_logit_all(models[k], &eval, z);
    aucs[k] = auc(z, eval.label, EVAL_SAMPLES);
    accuracy_and_loss(z, eval.label, EVAL_SAMPLES, &acc, &loss);
    printf("%45s: %8.4f %8.4f %8.4f\n", names[k], aucs[k], acc, loss);
  }
  free(z);

  CHECK(tpu_system_release(system));
  model_free(&truth), model_free(&start), model_free(&ref);
  free_data(&train), free_data(&eval);
  free(run.params), free(run.ran), free(run.losses), free(run.iota);
  const int ok = close && agree && untouched_ok && mine > 0 && held > 0;
  printf("demo: %s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
