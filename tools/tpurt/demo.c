/* tpurt demo: data-parallel SGD of a linear model, y = X w + b, with cross_replica_sum.
 *
 * The host makes a synthetic data set, shards its rows over the replicas and runs the
 * whole training loop in one tpu_replicate. Every step each replica computes its
 * local gradient and loss sums, one cross_replica_sum adds them over all replicas, and
 * every replica applies the same SGD update, so all keep identical weights. The
 * result is compared with the least-squares solution of the normal equations. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "demo.h"
#include "demo_checkpoint.h"

#define SAMPLES 4096
#define FEATURES 8
#define PARAMS (FEATURES + 1)   /* weights, then the bias */
#define SUMS (PARAMS + 1)       /* gradient sums, then the loss sum */
#define DEFAULT_STEPS 100
#define LEARNING_RATE 0.1f
#define DEFAULT_TOLERANCE 1e-3
/* --mesh's defaults: small enough for make test. */
#define MESH_STEPS 20
#define MESH_BATCH 64
#define MESH_HIDDEN 32
#define MESH_TOLERANCE 1e-5
/* --embedding's defaults: seconds, for make test. */
#define EMBEDDING_REPLICAS 4
#define EMBEDDING_STEPS 300
#define EMBEDDING_BATCH 256
#define EMBEDDING_TOLERANCE 1e-6

static const double true_weights[FEATURES] = {0.5, -1.25, 2.0, 0.75, -0.3, 1.5, -2.2, 0.1};
static const double true_bias = 0.7;

typedef struct demo_run {
  int from, to;             /* this tpu_replicate runs steps [from, to) */
  int reporter;             /* the replica that reports progress: this task's first */
  const demo_checkpoint *checkpoint;
  float (*params)[PARAMS];  /* [replicas]: each replica's model, kept between calls */
  float *losses;            /* [steps]: the loss before each update, from replica 0 */
} demo_run;

double demo_uniform(uint64_t *state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*state >> 11) / (double)(1ull << 52) - 1.0;
}

/* Standardized features (each column mean 0, variance 1) and y = X w* + b* + noise. */
static void make_data(float *x, float *y) {
  static double raw[SAMPLES][FEATURES];
  uint64_t state = 42;
  for (int i = 0; i < SAMPLES; i++)
    for (int f = 0; f < FEATURES; f++) raw[i][f] = demo_uniform(&state) * (f + 1) + f;
  for (int f = 0; f < FEATURES; f++) {
    double mean = 0, var = 0;
    for (int i = 0; i < SAMPLES; i++) mean += raw[i][f];
    mean /= SAMPLES;
    for (int i = 0; i < SAMPLES; i++) var += (raw[i][f] - mean) * (raw[i][f] - mean);
    double sd = sqrt(var / SAMPLES);
    for (int i = 0; i < SAMPLES; i++) x[i * FEATURES + f] = (float)((raw[i][f] - mean) / sd);
  }
  for (int i = 0; i < SAMPLES; i++) {
    double v = true_bias + 0.01 * demo_uniform(&state);
    for (int f = 0; f < FEATURES; f++) v += true_weights[f] * x[i * FEATURES + f];
    y[i] = (float)v;
  }
}

/* Least squares on the host: solves (A^T A) p = A^T y with A = [X 1] by Gaussian
 * elimination with partial pivoting, in double. */
static void solve_normal_equations(const float *x, const float *y, double *p) {
  double m[PARAMS][PARAMS + 1] = {{0}};
  for (int i = 0; i < SAMPLES; i++) {
    double a[PARAMS];
    for (int f = 0; f < FEATURES; f++) a[f] = x[i * FEATURES + f];
    a[FEATURES] = 1.0;
    for (int r = 0; r < PARAMS; r++) {
      for (int c = 0; c < PARAMS; c++) m[r][c] += a[r] * a[c];
      m[r][PARAMS] += a[r] * y[i];
    }
  }
  for (int col = 0; col < PARAMS; col++) {
    int pivot = col;
    for (int r = col + 1; r < PARAMS; r++)
      if (fabs(m[r][col]) > fabs(m[pivot][col])) pivot = r;
    for (int c = 0; c <= PARAMS; c++) {
      double t = m[col][c];
      m[col][c] = m[pivot][c];
      m[pivot][c] = t;
    }
    for (int r = col + 1; r < PARAMS; r++) {
      double factor = m[r][col] / m[col][col];
      for (int c = col; c <= PARAMS; c++) m[r][c] -= factor * m[col][c];
    }
  }
  for (int r = PARAMS - 1; r >= 0; r--) {
    double v = m[r][PARAMS];
    for (int c = r + 1; c < PARAMS; c++) v -= m[r][c] * p[c];
    p[r] = v / m[r][r];
  }
}

/* One cross_replica_sum of the local sums: `sums` becomes the global sums. */
static tpu_status all_sum(tpu_replica_context *ctx, float *sums) {
  int64_t dims[1] = {SUMS};
  tpu_tensor *local = NULL, *global = NULL;
  const void *p;
  RETURN_IF_ERROR(tpu_tensor_create(TPU_FLOAT, dims, 1, sums, SUMS * sizeof(float), &local));
  tpu_status status = tpu_cross_replica_sum(ctx, local, NULL, &global, NULL);
  if (status == TPU_OK) status = tpu_tensor_data(global, &p);
  if (status == TPU_OK) memcpy(sums, p, SUMS * sizeof(float));
  return first_error(status, first_error(tpu_tensor_release(global), tpu_tensor_release(local)));
}

/* The training loop of one replica: inputs are its rows of X [rows, FEATURES] and y,
 * padded to the largest shard when shards differ; then inputs[2] holds the real rows. */
static tpu_status train(tpu_replica_context *ctx, tpu_tensor *const *inputs, int num_inputs,
                        tpu_tensor **outputs, int num_outputs, void *user_data) {
  (void)outputs, (void)num_outputs;
  demo_run *run = user_data;
  int k;
  int64_t rows;
  const void *xp, *yp;
  RETURN_IF_ERROR(tpu_replica_context_replica_id(ctx, &k));
  RETURN_IF_ERROR(tpu_tensor_dim(inputs[0], 0, &rows));
  if (num_inputs > 2) {
    const void *real;
    RETURN_IF_ERROR(tpu_tensor_data(inputs[2], &real));
    rows = *(const int32_t *)real;
  }
  RETURN_IF_ERROR(tpu_tensor_data(inputs[0], &xp));
  RETURN_IF_ERROR(tpu_tensor_data(inputs[1], &yp));
  const float *x = xp, *y = yp;
  float *params = run->params[k];

  for (int step = run->from; step < run->to; step++) {
    float sums[SUMS] = {0};
    for (int64_t i = 0; i < rows; i++) {
      const float *xi = x + i * FEATURES;
      float err = params[FEATURES] - y[i];
      for (int f = 0; f < FEATURES; f++) err += params[f] * xi[f];
      for (int f = 0; f < FEATURES; f++) sums[f] += err * xi[f];
      sums[FEATURES] += err;
      sums[PARAMS] += err * err;
    }
    RETURN_IF_ERROR(all_sum(ctx, sums));
    /* d/dp of mean((Ap - y)^2) = 2/N * sum(err * a) over the global batch. */
    for (int j = 0; j < PARAMS; j++) params[j] -= LEARNING_RATE * 2.0f * sums[j] / SAMPLES;
    if (k == 0) run->losses[step] = sums[PARAMS] / SAMPLES;
    if (k == run->reporter) demo_step_done(run->checkpoint, step);
  }
  return TPU_OK;
}

static const char demo_usage[] =
    "usage: tpurt demo [options]\n"
    "Data-parallel linear regression: every SGD step sums the replicas' gradients with\n"
    "cross_replica_sum; the trained weights are compared with the least-squares solution.\n"
    "\n"
    "  -r, --replicas R     replicas = logical cores (default: TPURT_NUM_CORES, else the\n"
    "                       online CPUs)\n"
    "  -s, --steps S        SGD steps (default 100)\n"
    "  --check              exit 1 unless the weights are within the tolerance of the\n"
    "                       least-squares solution (without it, the distance is reported)\n"
    "  -t, --tolerance T    the tolerance of --check (default 1e-3); implies --check\n"
    "  -h, --help           this text\n"
    "  --checkpoint DIR     resume from DIR's newest complete checkpoint (the weights and\n"
    "                       the step; none: from step 0) and save one there every\n"
    "                       --checkpoint-every steps and after the last (docs/LAUNCH.md)\n"
    "  --checkpoint-every S the steps between checkpoints (default 10; needs --checkpoint)\n"
    "Replicas that end with different weights always fail (exit 1).\n"
    "\n"
    "  --mesh R,K           instead: a two-layer MLP on the mesh (\"batch\", R) x\n"
    "                       (\"model\", K) of R replicas of K cores, the hidden layer\n"
    "                       split over \"model\" (Megatron-style), the batch over\n"
    "                       \"batch\"; prints the step time and always checks the\n"
    "                       weights and input gradient against the same training on\n"
    "                       one core (relative max-norm distance, -t, default 1e-5).\n"
    "                       R*K cores: in one process, or over tpurt launch's tasks\n"
    "                       (R*K/N cores each unless TPURT_NUM_CORES says)\n"
    "  --batch B            --mesh: the global batch, a multiple of R (default 64)\n"
    "  --hidden H           --mesh: hidden units, a multiple of K (default 32)\n"
    "\n"
    "  --embedding          instead: a click-through-rate model, logistic regression over\n"
    "                       embeddings of 3 categorical features (2 tables, Adagrad in\n"
    "                       the embedding engine) and 4 dense ones (SGD over\n"
    "                       cross_replica_sum), on data of a known model; prints the loss\n"
    "                       and the AUC, and always checks every table row and slot this\n"
    "                       task holds and the dense weights against the same training\n"
    "                       on one core (relative max-norm distance, -t, default 1e-6).\n"
    "                       -r replicas (default 4, over tpurt launch's tasks: R/N each\n"
    "                       unless TPURT_NUM_CORES says), -s steps (default 300),\n"
    "                       --batch: the global batch, a multiple of R (default 256).\n"
    "                       Under tpurt launch without -r: one replica per core of every\n"
    "                       task, so that a restart on fewer tasks keeps the batch\n"
    "                       (pick one that every replica count divides, e.g. 240).\n"
    "                       --checkpoint as above: the tables, their slots and the dense\n"
    "                       weights\n";

enum { OPT_CHECK = 256, OPT_MESH, OPT_BATCH, OPT_HIDDEN, OPT_EMBEDDING, OPT_CHECKPOINT,
       OPT_CHECKPOINT_EVERY };
#define DEFAULT_CHECKPOINT_EVERY 10

static int cmd_demo(int argc, char **argv) {
  static const struct option longopts[] = {{"replicas", required_argument, NULL, 'r'},
                                           {"steps", required_argument, NULL, 's'},
                                           {"check", no_argument, NULL, OPT_CHECK},
                                           {"tolerance", required_argument, NULL, 't'},
                                           {"help", no_argument, NULL, 'h'},
                                           {"mesh", required_argument, NULL, OPT_MESH},
                                           {"batch", required_argument, NULL, OPT_BATCH},
                                           {"hidden", required_argument, NULL, OPT_HIDDEN},
                                           {"embedding", no_argument, NULL, OPT_EMBEDDING},
                                           {"checkpoint", required_argument, NULL, OPT_CHECKPOINT},
                                           {"checkpoint-every", required_argument, NULL,
                                            OPT_CHECKPOINT_EVERY},
                                           {NULL, 0, NULL, 0}};
  int replicas = 0, steps = 0, check = 0, mesh = 0, tolerance_given = 0, embedding = 0,
      batch_given = 0, every = 0;
  const char *checkpoint_dir = NULL;
  double tolerance = DEFAULT_TOLERANCE;
  demo_mesh_options mesh_options = {.batch = MESH_BATCH, .hidden = MESH_HIDDEN};
  for (int c; (c = next_option("demo", argc, argv, "r:s:t:h", longopts)) != -1;) {
    switch (c) {
      case 'r': replicas = (int)parse_long("demo", "--replicas", optarg, 1, SAMPLES); break;
      case 's': steps = (int)parse_long("demo", "--steps", optarg, 1, 1000000); break;
      case OPT_CHECK: check = 1; break;
      case 't':
        tolerance = parse_double("demo", "--tolerance", optarg);
        check = 1;
        tolerance_given = 1;
        break;
      case OPT_MESH: {
        int32_t rk[2];
        parse_int_list("demo", "--mesh", optarg, rk, 2);
        mesh_options.replicas = rk[0];
        mesh_options.cores_per_replica = rk[1];
        mesh = 1;
        break;
      }
      case OPT_BATCH:
        mesh_options.batch = (int)parse_long("demo", "--batch", optarg, 1, 1 << 20);
        batch_given = 1;
        break;
      case OPT_EMBEDDING: embedding = 1; break;
      case OPT_CHECKPOINT:
        if (!optarg[0]) usage_error("demo", "--checkpoint: an empty directory name");
        checkpoint_dir = optarg;
        break;
      case OPT_CHECKPOINT_EVERY:
        every = (int)parse_long("demo", "--checkpoint-every", optarg, 1, 1000000);
        break;
      case OPT_HIDDEN:
        mesh_options.hidden = (int)parse_long("demo", "--hidden", optarg, 1, 1 << 16);
        break;
      case 'h': return print_usage(demo_usage);
    }
  }
  if (every && !checkpoint_dir) usage_error("demo", "--checkpoint-every: only with --checkpoint DIR");
  if (!every) every = DEFAULT_CHECKPOINT_EVERY;
  if (mesh && checkpoint_dir) usage_error("demo", "--checkpoint: not with --mesh");
  if (embedding) {
    if (mesh) usage_error("demo", "--embedding and --mesh: one demo at a time");
    if (mesh_options.hidden != MESH_HIDDEN) usage_error("demo", "--hidden: only with --mesh R,K");
    demo_embedding_options e = {.replicas = replicas ? replicas : EMBEDDING_REPLICAS,
                                .steps = steps ? steps : EMBEDDING_STEPS,
                                .batch = batch_given ? mesh_options.batch : EMBEDDING_BATCH,
                                .tolerance = tolerance_given ? tolerance : EMBEDDING_TOLERANCE,
                                .replicas_given = replicas != 0,
                                .checkpoint_dir = checkpoint_dir, .checkpoint_every = every};
    return demo_embedding(&e);
  }
  if (mesh) {
    if (replicas) usage_error("demo", "--replicas: --mesh R,K sets the replicas");
    mesh_options.steps = steps ? steps : MESH_STEPS;
    mesh_options.tolerance = tolerance_given ? tolerance : MESH_TOLERANCE;
    return demo_mesh(&mesh_options);
  }
  if (mesh_options.batch != MESH_BATCH || mesh_options.hidden != MESH_HIDDEN)
    usage_error("demo", "--batch and --hidden: only with --mesh R,K or --embedding");
  if (!steps) steps = DEFAULT_STEPS;

  static float x[SAMPLES * FEATURES], y[SAMPLES];
  double exact[PARAMS];
  make_data(x, y);
  solve_normal_equations(x, y, exact);

  tpu_system *system = start_system(replicas, NULL, TPU_PIN_AUTO);
  /* Under tpurt launch every task runs this program: the replicas are the cores of all
   * tasks, and each task runs (and reports) its own. */
  int local, tasks, task;
  CHECK(tpu_system_num_cores(system, &local));
  CHECK(tpu_system_num_tasks(system, &tasks));
  CHECK(tpu_system_task_id(system, &task));
  const int n = local * tasks, first = task * local;
  demo_checkpoint ckpt;
  demo_checkpoint_setup(&ckpt, system, checkpoint_dir, every);
  demo_run run = {.reporter = first, .checkpoint = &ckpt,
                  .params = xcalloc((size_t)n, sizeof *run.params),
                  .losses = xcalloc((size_t)steps, sizeof *run.losses)};
  /* The weights and the step from the newest checkpoint; every replica starts there. */
  int resume = (int)demo_restore(system, &ckpt, "weights", run.params[0], PARAMS);
  for (int r = 1; r < n; r++) memcpy(run.params[r], run.params[0], sizeof run.params[r]);
  if (resume > steps) resume = steps;
  tpu_tensor **inputs = xcalloc((size_t)n * 2, sizeof *inputs);
  /* Replica r borrows rows [r*N/n, (r+1)*N/n): shards differ by at most one row. */
  for (int r = 0; r < n; r++) {
    int64_t begin = (int64_t)r * SAMPLES / n, rows = (int64_t)(r + 1) * SAMPLES / n - begin;
    int64_t xdims[2] = {rows, FEATURES};
    CHECK(tpu_tensor_wrap(TPU_FLOAT, xdims, 2, x + begin * FEATURES,
                          (size_t)rows * FEATURES * sizeof(float), NULL, NULL, &inputs[2 * r]));
    CHECK(tpu_tensor_wrap(TPU_FLOAT, &rows, 1, y + begin, (size_t)rows * sizeof(float), NULL,
                          NULL, &inputs[2 * r + 1]));
  }
  char shard[32];
  if (SAMPLES % n)
    snprintf(shard, sizeof shard, "%d-%d", SAMPLES / n, SAMPLES / n + 1);
  else
    snprintf(shard, sizeof shard, "%d", SAMPLES / n);
  printf("tpurt demo: linear regression, %d samples x %d features, sharded over %d replicas\n"
         "(%s rows each); %d SGD steps, learning rate %g, one cross_replica_sum per step\n",
         SAMPLES, FEATURES, n, shard, steps, LEARNING_RATE);
  if (tasks > 1) printf("task %d of %d runs replicas %d to %d\n", task, tasks, first, first + local - 1);
  printf("\n");

  double t0 = now_seconds();
  /* Uneven shards are padded with zero rows, as tf.tpu.replicate's maximum_shapes does;
   * the computation gets the real row count as an extra input. */
  tpu_shape max_shapes[2] = {{2, {-1, FEATURES}}, {1, {-1}}};
  tpu_step_options options = TPU_STEP_OPTIONS_INIT;
  options.maximum_shapes = max_shapes;
  options.num_maximum_shapes = 2;
  /* One tpu_replicate per span between checkpoints: the weights stay in run.params. */
  for (run.from = resume; run.from < steps; run.from = run.to) {
    run.to = checkpoint_dir && steps - run.from > every - run.from % every
                 ? run.from + every - run.from % every
                 : steps;
    CHECK(tpu_replicate(system, train, &run, n, 2, inputs, 0, NULL, &options));
    demo_maybe_save(system, &ckpt, run.to, steps, "weights", run.params[first], PARAMS);
  }
  double elapsed = now_seconds() - t0;

  int print_every = steps >= 10 ? steps / 10 : 1;
  if (task == 0) { /* replica 0, which records the loss, is task 0's */
    printf("%6s  %14s\n", "step", "loss (MSE)");
    for (int s = resume; s < steps; s++)
      if (s % print_every == 0 || s == steps - 1) printf("%6d  %14.8f\n", s, run.losses[s]);
  }
  printf("\ntrained in %.1f ms (one tpu_replicate step of %d replicas)\n\n", elapsed * 1e3, n);

  int agree = 1;
  for (int r = first + 1; r < first + local; r++)
    agree &= !memcmp(run.params[r], run.params[first], sizeof run.params[0]);
  double max_diff = 0;
  printf("%-8s  %12s  %12s  %10s\n", "param", "trained", "closed form", "|diff|");
  for (int j = 0; j < PARAMS; j++) {
    char name[16] = "b";
    if (j < FEATURES) snprintf(name, sizeof name, "w[%d]", j);
    double diff = fabs(run.params[first][j] - exact[j]);
    if (!(diff <= max_diff)) max_diff = diff;  /* NaN sticks */
    printf("%-8s  %12.6f  %12.6f  %10.2e\n", name, run.params[first][j], exact[j], diff);
  }
  int converged = max_diff <= tolerance;
  printf("\nreplicas hold identical weights: %s\n", agree ? "yes" : "NO");
  printf("max |diff| = %.2e: %s the tolerance %.0e%s\n", max_diff,
         converged ? "within" : "outside", tolerance,
         converged || check ? "" : " (more --steps converge further)");

  for (int i = 0; i < 2 * n; i++) CHECK(tpu_tensor_release(inputs[i]));
  CHECK(tpu_system_release(system));
  free(inputs);
  free(run.losses);
  free(run.params);
  int ok = agree && (converged || !check);
  printf("demo: %s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}

const tool_command demo_command = {"demo",
                                   "data-parallel linear regression with cross_replica_sum",
                                   demo_usage, cmd_demo};
