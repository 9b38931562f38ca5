/* tpurt demo --mesh R,K: a two-layer MLP trained with both axes of a named mesh,
 * ("batch", R) x ("model", K), Megatron-style tensor parallelism over "model" and data
 * parallelism over "batch".
 *
 * Participant (replica r, logical core c) sits at mesh coordinates (r, c). It holds
 * columns [c*H/K, (c+1)*H/K) of W1 [D, H] and the same rows of W2 [H, O], and trains
 * on rows [r*B/R, (r+1)*B/R) of the batch. A step:
 *   Z = X W1_c, A = relu(Z), Y = sum over "model" of A W2_c      (cross_replica_sum)
 *   dY = 2 (Y - T) / rows; dW2_c = A^T dY; dZ = (dY W2_c^T) * (Z > 0); dW1_c = X^T dZ
 *   dX = sum over "model" of dZ W1_c^T                            (cross_replica_sum)
 *   gradients (and the loss) averaged over "batch" in one all-reduce (MEAN), then SGD.
 * The groups of both axes come from tpu_mesh_axis_groups. The host runs the same
 * training on one core (full W1, W2 and batch) and compares the weights and the last
 * step's input gradient. Local sums accumulate in double and are stored as float. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo.h"

#define FEATURES 16 /* D */
#define OUTPUTS 4   /* O */
#define LEARNING_RATE 0.05f
#define MAX_CORES 4096

typedef struct mesh_run {
  int R, K, rows, hidden, steps, slice; /* slice = hidden / K */
  const float *x, *t, *w1, *w2;         /* host data: X [B, D], T [B, O], W1 [D, H], W2 [H, O] */
  tpu_group_assignment model, batch;    /* the axes' groups (flattened ids) */
  int model_mode, batch_mode;
  /* per participant f = r*K + c, written by its computation: */
  float **w1_out, **w2_out; /* [f]: W1_c [D, slice], W2_c [slice, O] after training */
  float **dx_out;           /* [f]: the last step's dX [rows, D] */
  double *step_us;          /* [f][steps] */
  float *losses;            /* [steps]: the batch-mean loss, from participant 0 */
  int *ran;                 /* [f]: 1 once its computation finished */
} mesh_run;

/* Synthetic data from a fixed seed: X uniform, T a fixed nonlinear map of X, and a
 * small random initialisation of W1 and W2. */
static void make_data(int batch, int hidden, float *x, float *t, float *w1, float *w2) {
  uint64_t s = 7;
  for (int i = 0; i < batch * FEATURES; i++) x[i] = (float)demo_uniform(&s);
  for (int i = 0; i < batch; i++)
    for (int o = 0; o < OUTPUTS; o++) {
      double v = 0;
      for (int d = 0; d < FEATURES; d++) v += sin((o + 1) * 0.3 * (d + 1)) * x[i * FEATURES + d];
      t[i * OUTPUTS + o] = (float)tanh(v);
    }
  for (int i = 0; i < FEATURES * hidden; i++) w1[i] = (float)(demo_uniform(&s) / sqrt(FEATURES));
  for (int i = 0; i < hidden * OUTPUTS; i++) w2[i] = (float)(demo_uniform(&s) / sqrt(hidden));
}

/* out[n, m] = a[n, k] b[k, m] (b_t: b is stored [m, k]); a, b row-major with row
 * strides lda, ldb; accumulation in double. */
static void matmul(const float *a, int lda, const float *b, int ldb, int b_t, float *out,
                   int n, int k, int m) {
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++) {
      double acc = 0;
      for (int l = 0; l < k; l++)
        acc += (double)a[i * lda + l] * (b_t ? b[j * ldb + l] : b[l * ldb + j]);
      out[i * m + j] = (float)acc;
    }
}

/* out[k, m] = a^T b for a [n, k], b [n, m]. */
static void matmul_at(const float *a, int lda, const float *b, int ldb, float *out, int n, int k,
                      int m) {
  for (int i = 0; i < k; i++)
    for (int j = 0; j < m; j++) {
      double acc = 0;
      for (int l = 0; l < n; l++) acc += (double)a[l * lda + i] * b[l * ldb + j];
      out[i * m + j] = (float)acc;
    }
}

/* One step's math for `rows` rows and a slice of `width` hidden units: W1 columns
 * (stride ld1), W2 rows. Fills the partial output and the activations; the backward
 * half (after the caller summed Y) is grads(). */
static void forward(const float *x, int rows, const float *w1, int ld1, const float *w2,
                    int width, float *z, float *y_part) {
  matmul(x, FEATURES, w1, ld1, 0, z, rows, FEATURES, width);
  float *a = z + (size_t)rows * width; /* A after Z */
  for (int i = 0; i < rows * width; i++) a[i] = z[i] > 0 ? z[i] : 0;
  matmul(a, width, w2, OUTPUTS, 0, y_part, rows, width, OUTPUTS);
}

/* dY -> dW2 [width, O], dW1 [D, width], and dX's part [rows, D]; loss_sum gets
 * sum((Y - T)^2). dy must hold Y on entry. */
static void backward(const float *x, const float *t, int rows, const float *w1, int ld1,
                     const float *w2, int width, const float *z, float *dy, float *dw1,
                     float *dw2, float *dx_part, double *loss_sum) {
  const float *a = z + (size_t)rows * width;
  double loss = 0;
  for (int i = 0; i < rows * OUTPUTS; i++) {
    double e = (double)dy[i] - t[i];
    loss += e * e;
    dy[i] = (float)(2.0 * e / rows);
  }
  *loss_sum = loss;
  matmul_at(a, width, dy, OUTPUTS, dw2, rows, width, OUTPUTS);
  float *dz = xcalloc((size_t)rows * width, sizeof *dz);
  matmul(dy, OUTPUTS, w2, OUTPUTS, 1, dz, rows, OUTPUTS, width);
  for (int i = 0; i < rows * width; i++)
    if (!(z[i] > 0)) dz[i] = 0;
  matmul_at(x, FEATURES, dz, width, dw1, rows, FEATURES, width);
  matmul(dz, width, w1, ld1, 1, dx_part, rows, width, FEATURES);
  free(dz);
}

/* An all-reduce of n floats in place over `groups`. */
static tpu_status reduce_over(tpu_replica_context *ctx, float *v, int64_t n, tpu_reduce_op op,
                              const tpu_group_assignment *groups, int mode) {
  tpu_collective_options options = TPU_COLLECTIVE_OPTIONS_INIT;
  options.group_mode = mode;
  tpu_tensor *in = NULL, *out = NULL;
  const void *p;
  RETURN_IF_ERROR(tpu_tensor_wrap(TPU_FLOAT, &n, 1, v, (size_t)n * sizeof *v, NULL, NULL, &in));
  tpu_status status = op == TPU_REDUCE_SUM
                          ? tpu_cross_replica_sum(ctx, in, groups, &out, &options)
                          : tpu_all_reduce(ctx, in, op, groups, &out, &options);
  if (status == TPU_OK) status = tpu_tensor_data(out, &p);
  if (status == TPU_OK) memcpy(v, p, (size_t)n * sizeof *v);
  return first_error(status, first_error(tpu_tensor_release(out), tpu_tensor_release(in)));
}

static tpu_status train(tpu_replica_context *ctx, tpu_tensor *const *inputs, int num_inputs,
                        tpu_tensor **outputs, int num_outputs, void *user_data) {
  (void)inputs, (void)num_inputs, (void)outputs, (void)num_outputs;
  const mesh_run *run = user_data;
  int r, c;
  RETURN_IF_ERROR(tpu_replica_context_replica_id(ctx, &r));
  RETURN_IF_ERROR(tpu_replica_context_logical_core(ctx, &c));
  const int f = r * run->K + c, rows = run->rows, w = run->slice, H = run->hidden;
  const float *x = run->x + (size_t)r * rows * FEATURES, *t = run->t + (size_t)r * rows * OUTPUTS;
  float *w1 = run->w1_out[f], *w2 = run->w2_out[f], *dx = run->dx_out[f];
  for (int d = 0; d < FEATURES; d++) /* this core's columns of W1 and rows of W2 */
    memcpy(w1 + d * w, run->w1 + (size_t)d * H + (size_t)c * w, (size_t)w * sizeof *w1);
  memcpy(w2, run->w2 + (size_t)c * w * OUTPUTS, (size_t)w * OUTPUTS * sizeof *w2);
  /* One buffer for the batch all-reduce: dW1_c, dW2_c, then the loss. */
  const int64_t n_grad = (int64_t)FEATURES * w + (int64_t)w * OUTPUTS + 1;
  float *z = xcalloc((size_t)rows * w * 2, sizeof *z), *y = xcalloc((size_t)rows * OUTPUTS, sizeof *y);
  float *grad = xcalloc((size_t)n_grad, sizeof *grad);
  tpu_status status = tpu_barrier(ctx, NULL); /* time the steps from a common start */
  for (int s = 0; s < run->steps && status == TPU_OK; s++) {
    double t0 = now_seconds(), loss;
    forward(x, rows, w1, w, w2, w, z, y);
    status = reduce_over(ctx, y, (int64_t)rows * OUTPUTS, TPU_REDUCE_SUM, &run->model,
                         run->model_mode);
    if (status != TPU_OK) break;
    float *dw1 = grad, *dw2 = grad + FEATURES * w;
    backward(x, t, rows, w1, w, w2, w, z, y, dw1, dw2, dx, &loss);
    grad[n_grad - 1] = (float)(loss / rows / OUTPUTS); /* the same on a replica's cores */
    status = reduce_over(ctx, dx, (int64_t)rows * FEATURES, TPU_REDUCE_SUM, &run->model,
                         run->model_mode);
    if (status == TPU_OK)
      status = reduce_over(ctx, grad, n_grad, TPU_REDUCE_MEAN, &run->batch, run->batch_mode);
    if (status != TPU_OK) break;
    for (int i = 0; i < FEATURES * w; i++) w1[i] -= LEARNING_RATE * dw1[i];
    for (int i = 0; i < w * OUTPUTS; i++) w2[i] -= LEARNING_RATE * dw2[i];
    if (f == 0) run->losses[s] = grad[n_grad - 1];
    run->step_us[(size_t)f * run->steps + s] = (now_seconds() - t0) * 1e6;
  }
  if (status == TPU_OK) run->ran[f] = 1;
  free(z);
  free(y);
  free(grad);
  return status;
}

/* The same training on one core: full W1, W2 and batch. Its gradient, of the mean
 * loss over the batch, is what the mean of the replicas' gradients equals. */
static void train_reference(const mesh_run *run, float *w1, float *w2, float *dx) {
  const int B = run->rows * run->R, H = run->hidden;
  memcpy(w1, run->w1, (size_t)FEATURES * H * sizeof *w1);
  memcpy(w2, run->w2, (size_t)H * OUTPUTS * sizeof *w2);
  float *z = xcalloc((size_t)B * H * 2, sizeof *z), *y = xcalloc((size_t)B * OUTPUTS, sizeof *y);
  float *dw1 = xcalloc((size_t)FEATURES * H, sizeof *dw1), *dw2 = xcalloc((size_t)H * OUTPUTS, sizeof *dw2);
  for (int s = 0; s < run->steps; s++) {
    double loss;
    forward(run->x, B, w1, H, w2, H, z, y);
    backward(run->x, run->t, B, w1, H, w2, H, z, y, dw1, dw2, dx, &loss);
    for (int i = 0; i < FEATURES * H; i++) w1[i] -= LEARNING_RATE * dw1[i];
    for (int i = 0; i < H * OUTPUTS; i++) w2[i] -= LEARNING_RATE * dw2[i];
  }
  free(z);
  free(y);
  free(dw1);
  free(dw2);
}

/* max |a - b| / max |b|, the relative distance in the max norm; NaN sticks. */
static double rel_diff(double max_abs, double scale) { return max_abs / (scale > 0 ? scale : 1); }

static void track(double got, double want, double *max_abs, double *scale) {
  double d = fabs(got - want);
  if (!(d <= *max_abs) && !isnan(*max_abs)) *max_abs = d;
  if (fabs(want) > *scale) *scale = fabs(want);
}

/* The groups of one named axis: the mesh's. */
static void axis_groups(const tpu_mesh *mesh, const char *axis, tpu_group_assignment *groups,
                        int *mode) {
  const char *axes[1] = {axis};
  CHECK_DOING(tpu_mesh_axis_groups(mesh, axes, 1, groups, mode), "reading the mesh's groups");
}

int demo_mesh(const demo_mesh_options *opt) {
  const int R = opt->replicas, K = opt->cores_per_replica, H = opt->hidden;
  if ((int64_t)R * K > MAX_CORES)
    usage_error("demo", "--mesh %d,%d: %lld cores, more than %d", R, K, (long long)R * K,
                MAX_CORES);
  if (H % K)
    usage_error("demo", "--hidden %d is not a multiple of the %d cores of the \"model\" axis",
                H, K);
  if (opt->batch % R)
    usage_error("demo", "--batch %d is not a multiple of the %d replicas of the \"batch\" axis",
                opt->batch, R);
  /* Cores per process: R*K in one process; under tpurt launch -n T, R*K/T each; an
   * explicit TPURT_NUM_CORES (tpurt launch --cores-per-task) wins. */
  const char *launched = getenv("TPURT_LAUNCH_TASKS");
  int want = R * K;
  if (getenv("TPURT_NUM_CORES")) want = 0;
  else if (launched && atoi(launched) > 0 && want % atoi(launched) == 0) want /= atoi(launched);
  tpu_system *system = start_system(want, NULL, TPU_PIN_AUTO);
  int cores, tasks, task, local;
  CHECK(tpu_system_num_tasks(system, &tasks));
  CHECK(tpu_system_task_id(system, &task));
  CHECK(tpu_system_num_cores(system, &local));
  tpu_device_assignment *assignment = assign_replicas(system, K, "demo", &cores);
  if (cores != R * K)
    usage_error("demo", "--mesh %d,%d needs %d cores; the system has %d (%d task(s) of %d)", R,
                K, R * K, cores, tasks, local);
  const char *names[2] = {"batch", "model"};
  const int64_t sizes[2] = {R, K};
  tpu_mesh *mesh = NULL;
  CHECK_DOING(tpu_mesh_create(assignment, names, sizes, 2, &mesh), "building the mesh");

  const int B = opt->batch, P = R * K;
  float *x = xcalloc((size_t)B * FEATURES, sizeof *x), *t = xcalloc((size_t)B * OUTPUTS, sizeof *t);
  float *w1 = xcalloc((size_t)FEATURES * H, sizeof *w1), *w2 = xcalloc((size_t)H * OUTPUTS, sizeof *w2);
  make_data(B, H, x, t, w1, w2);
  mesh_run run = {.R = R, .K = K, .rows = B / R, .hidden = H, .steps = opt->steps,
                  .slice = H / K, .x = x, .t = t, .w1 = w1, .w2 = w2};
  axis_groups(mesh, "model", &run.model, &run.model_mode);
  axis_groups(mesh, "batch", &run.batch, &run.batch_mode);
  run.w1_out = xcalloc((size_t)P, sizeof *run.w1_out);
  run.w2_out = xcalloc((size_t)P, sizeof *run.w2_out);
  run.dx_out = xcalloc((size_t)P, sizeof *run.dx_out);
  for (int f = 0; f < P; f++) {
    run.w1_out[f] = xcalloc((size_t)FEATURES * run.slice, sizeof(float));
    run.w2_out[f] = xcalloc((size_t)run.slice * OUTPUTS, sizeof(float));
    run.dx_out[f] = xcalloc((size_t)run.rows * FEATURES, sizeof(float));
  }
  run.step_us = xcalloc((size_t)P * opt->steps, sizeof *run.step_us);
  run.losses = xcalloc((size_t)opt->steps, sizeof *run.losses);
  run.ran = xcalloc((size_t)P, sizeof *run.ran);

  printf("tpurt demo --mesh %d,%d: two-layer MLP (%d -> %d -> %d, relu), batch %d, %d SGD steps\n"
         "mesh (\"batch\", %d) x (\"model\", %d): each core holds %d hidden units (W1 columns,\n"
         "W2 rows) and %d rows; per step a cross_replica_sum of the partial outputs and of the\n"
         "input gradient over \"model\", and a MEAN all-reduce of the gradients over \"batch\"\n",
         R, K, FEATURES, H, OUTPUTS, B, opt->steps, R, K, run.slice, run.rows);
  if (tasks > 1) printf("task %d of %d holds %d core(s)\n", task, tasks, local);

  tpu_device_assignment *mesh_assignment = NULL; /* the mesh's own, for the step */
  CHECK(tpu_mesh_device_assignment(mesh, &mesh_assignment));
  tpu_step_options options = TPU_STEP_OPTIONS_INIT;
  options.device_assignment = mesh_assignment;
  double t0 = now_seconds();
  CHECK(tpu_replicate(system, train, &run, R, 0, NULL, 0, NULL, &options));
  double elapsed = now_seconds() - t0;

  /* Step time: per step the slowest of this task's cores, then the median over steps. */
  double *per_step = xcalloc((size_t)opt->steps, sizeof *per_step);
  int mine = 0;
  for (int f = 0; f < P; f++) {
    if (!run.ran[f]) continue; /* another task's core */
    mine++;
    for (int s = 0; s < opt->steps; s++)
      if (run.step_us[(size_t)f * opt->steps + s] > per_step[s])
        per_step[s] = run.step_us[(size_t)f * opt->steps + s];
  }
  qsort(per_step, (size_t)opt->steps, sizeof *per_step, compare_doubles);
  if (run.ran[0]) {
    int every = opt->steps >= 5 ? opt->steps / 5 : 1;
    printf("\n%6s  %12s\n", "step", "loss (MSE)");
    for (int s = 0; s < opt->steps; s++)
      if (s % every == 0 || s == opt->steps - 1) printf("%6d  %12.6f\n", s, run.losses[s]);
  }
  printf("\nstep time: median %.1f us over %d steps (slowest of this task's %d cores); "
         "%.1f ms in all\n", per_step[opt->steps / 2], opt->steps, mine, elapsed * 1e3);

  /* Against one core: this task's cores' slices of W1, W2 and of the last dX. */
  float *ref_w1 = xcalloc((size_t)FEATURES * H, sizeof *ref_w1);
  float *ref_w2 = xcalloc((size_t)H * OUTPUTS, sizeof *ref_w2);
  float *ref_dx = xcalloc((size_t)B * FEATURES, sizeof *ref_dx);
  train_reference(&run, ref_w1, ref_w2, ref_dx);
  double abs_w = 0, scale_w = 0, abs_dx = 0, scale_dx = 0;
  int agree = 1;
  for (int f = 0; f < P; f++) {
    if (!run.ran[f]) continue;
    int r = f / K, c = f % K, w = run.slice;
    for (int d = 0; d < FEATURES; d++)
      for (int j = 0; j < w; j++)
        track(run.w1_out[f][d * w + j], ref_w1[d * H + c * w + j], &abs_w, &scale_w);
    for (int i = 0; i < w * OUTPUTS; i++)
      track(run.w2_out[f][i], ref_w2[(size_t)c * w * OUTPUTS + i], &abs_w, &scale_w);
    for (int i = 0; i < run.rows * FEATURES; i++)
      /* A replica's dX is of its own mean loss, R times the batch's. */
      track(run.dx_out[f][i] / (double)R, ref_dx[(size_t)r * run.rows * FEATURES + i], &abs_dx,
            &scale_dx);
    /* Every replica of this task holds the same slice bit for bit as its first one. */
    for (int g = c; g < f; g += K)
      if (run.ran[g]) {
        agree &= !memcmp(run.w1_out[f], run.w1_out[g], (size_t)FEATURES * w * sizeof(float));
        agree &= !memcmp(run.w2_out[f], run.w2_out[g], (size_t)w * OUTPUTS * sizeof(float));
        break;
      }
  }
  double rw = rel_diff(abs_w, scale_w), rdx = rel_diff(abs_dx, scale_dx);
  int close = rw <= opt->tolerance && rdx <= opt->tolerance;
  printf("against one core (same initialisation and data order): weights max |diff| / max |w|"
         " = %.2e,\ninput gradient %.2e: %s the tolerance %.0e\n", rw, rdx,
         close ? "within" : "OUTSIDE", opt->tolerance);
  printf("replicas hold identical weight slices: %s\n", agree ? "yes" : "NO");

  CHECK(tpu_device_assignment_release(mesh_assignment));
  CHECK(tpu_mesh_release(mesh));
  CHECK(tpu_device_assignment_release(assignment));
  CHECK(tpu_system_release(system));
  for (int f = 0; f < P; f++) {
    free(run.w1_out[f]);
    free(run.w2_out[f]);
    free(run.dx_out[f]);
  }
  free(run.w1_out), free(run.w2_out), free(run.dx_out), free(run.step_us), free(run.losses);
  free(run.ran), free(per_step), free(ref_w1), free(ref_w2), free(ref_dx);
  free(x), free(t), free(w1), free(w2);
  int ok = close && agree && mine > 0;
  printf("demo: %s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
