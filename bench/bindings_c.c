/* The C baseline of the bindings' overhead benchmark (bench/bindings.sh): on an
 * 8-core system, 8 replicas run (a) an empty step and (b) a step in which each
 * replica sums a 1 MiB float32 input with cross_replica_sum and returns the result.
 * 20 warm-up steps, then each step timed alone; prints the medians in microseconds
 * as "c empty_step_us X" and "c crs_1mib_us X", the format every language prints.
 * With JOINED=1 in the environment the same steps also run on 8 C threads that joined
 * the cores (tpu_step_join, the mode the bindings use), printed as "c-joined ...". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <tpurt.h>

#define REPLICAS 8
#define FLOATS (1 << 18)
#define WARMUP 20

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static tpu_status empty(tpu_replica_context *ctx, tpu_tensor *const *in, int ni, tpu_tensor **out,
                        int no, void *user) {
  return TPU_OK;
}

static tpu_status sum(tpu_replica_context *ctx, tpu_tensor *const *in, int ni, tpu_tensor **out,
                      int no, void *user) {
  return tpu_cross_replica_sum(ctx, in[0], NULL, &out[0], NULL);
}

static tpu_system *g_sys;

/* A joined thread: runs whatever computation each step hands its core, until shutdown. */
static void *serve_core(void *arg) {
  int core = (int)(long)arg;
  for (;;) {
    tpu_joined_step j = TPU_JOINED_STEP_INIT;
    if (tpu_step_join(g_sys, core, -1, &j) != TPU_OK) return NULL;
    tpu_tensor *out[1] = {0};
    tpu_status st = j.computation(j.ctx, j.inputs, j.num_inputs, out, j.num_outputs, j.user_data);
    tpu_step_leave(j.ctx, st, out, j.num_outputs);
  }
}

static int g_caller_threads;

static void check(tpu_status st, const char *what) {
  if (st != TPU_OK) {
    fprintf(stderr, "bindings_c: %s: %s: %s\n", what, tpu_status_name(st), tpu_last_error());
    exit(1);
  }
}

/* Median of `steps` timed steps of fn (after WARMUP untimed ones). */
static double median_step_us(tpu_system *sys, tpu_computation_fn fn, int num_inputs,
                             tpu_tensor *const *inputs, int steps) {
  tpu_tensor *outputs[REPLICAS] = {0};
  double *t = malloc(sizeof *t * (size_t)steps);
  for (int i = 0; i < WARMUP + steps; ++i) {
    double t0 = now_us();
    tpu_step_options so = TPU_STEP_OPTIONS_INIT;
    so.caller_threads = g_caller_threads;
    check(tpu_replicate(sys, fn, NULL, REPLICAS, num_inputs, inputs, num_inputs, outputs, &so),
          "tpu_replicate");
    if (i >= WARMUP) t[i - WARMUP] = now_us() - t0;
    for (int r = 0; r < num_inputs * REPLICAS; ++r) tpu_tensor_release(outputs[r]);
  }
  qsort(t, (size_t)steps, sizeof *t, cmp_double);
  double m = t[steps / 2];
  free(t);
  return m;
}

int main(int argc, char **argv) {
  int empty_steps = argc > 1 ? atoi(argv[1]) : 2000, sum_steps = argc > 2 ? atoi(argv[2]) : 200;
  if (empty_steps < 1 || sum_steps < 1) {
    fprintf(stderr, "usage: bindings_c [EMPTY_STEPS [SUM_STEPS]]\n");
    return 2;
  }
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = REPLICAS;
  tpu_system *sys = NULL;
  check(tpu_system_init(&o, &sys), "tpu_system_init");
  tpu_tensor *inputs[REPLICAS];
  float *data = calloc(FLOATS, sizeof *data);
  int64_t dims[1] = {FLOATS};
  for (int r = 0; r < REPLICAS; ++r) {
    for (int i = 0; i < FLOATS; ++i) data[i] = (float)(r + i % 7);
    check(tpu_tensor_create(TPU_FLOAT, dims, 1, data, sizeof *data * FLOATS, &inputs[r]),
          "tpu_tensor_create");
  }
  printf("c empty_step_us %.2f\n", median_step_us(sys, empty, 0, NULL, empty_steps));
  printf("c crs_1mib_us %.2f\n", median_step_us(sys, sum, 1, inputs, sum_steps));
  const char *joined = getenv("JOINED");
  pthread_t threads[REPLICAS];
  if (joined && atoi(joined)) {
    g_sys = sys;
    for (long c = 0; c < REPLICAS; ++c) pthread_create(&threads[c], NULL, serve_core, (void *)c);
    g_caller_threads = 1;
    printf("c-joined empty_step_us %.2f\n", median_step_us(sys, empty, 0, NULL, empty_steps));
    printf("c-joined crs_1mib_us %.2f\n", median_step_us(sys, sum, 1, inputs, sum_steps));
    check(tpu_system_shutdown(sys), "tpu_system_shutdown");  /* the joined threads return */
    for (int c = 0; c < REPLICAS; ++c) pthread_join(threads[c], NULL);
  }
  for (int r = 0; r < REPLICAS; ++r) tpu_tensor_release(inputs[r]);
  free(data);
  check(tpu_system_release(sys), "tpu_system_release");
  return 0;
}
