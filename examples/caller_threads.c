/* caller_threads: the replicas run on this program's own threads, not the library's
 * (tpu_step_options.caller_threads). A pool of one thread per core loops
 * tpu_step_join -> computation -> tpu_step_leave; the main thread runs steps, then
 * shuts the system down, which ends the pool (TPU_CANCELLED), and releases it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <tpurt.h>

#define CHECK(call)                                                                \
  do {                                                                             \
    tpu_status s_ = (call);                                                        \
    if (s_ != TPU_OK) {                                                            \
      fprintf(stderr, "%s: %s: %s\n", #call, tpu_status_name(s_), tpu_last_error()); \
      return s_;                                                                   \
    }                                                                              \
  } while (0)

typedef struct pool_thread {
  tpu_system *system;
  int core;
  int steps; /* how many participants it ran */
  pthread_t thread;
} pool_thread;

/* The computation, as a worker would call it: out[0] = sum over replicas of in[0]. */
static tpu_status sum(tpu_replica_context *ctx, tpu_tensor *const *inputs, int num_inputs,
                      tpu_tensor **outputs, int num_outputs, void *user_data) {
  (void)num_inputs, (void)num_outputs, (void)user_data;
  return tpu_cross_replica_sum(ctx, inputs[0], NULL, &outputs[0], NULL);
}

static void *serve_core(void *arg) {
  pool_thread *t = arg;
  for (;;) {
    tpu_joined_step j = TPU_JOINED_STEP_INIT;
    tpu_tensor *outputs[1] = {NULL};
    tpu_status status = tpu_step_join(t->system, t->core, -1, &j); /* waits for a step */
    if (status == TPU_CANCELLED || status == TPU_FAILED_PRECONDITION) break; /* shut down */
    if (status != TPU_OK) {
      fprintf(stderr, "core %d: tpu_step_join: %s\n", t->core, tpu_last_error());
      break;
    }
    /* j.computation is the step's (NULL here: this thread knows what to run). */
    status = sum(j.ctx, j.inputs, j.num_inputs, outputs, j.num_outputs, j.user_data);
    /* Hands the outputs over (released by the runtime if the step fails). */
    if (tpu_step_leave(j.ctx, status, outputs, j.num_outputs) != TPU_OK)
      fprintf(stderr, "core %d: tpu_step_leave: %s\n", t->core, tpu_last_error());
    t->steps++;
  }
  return NULL;
}

int main(void) {
  tpu_system *system;
  int n, r, c, step;
  tpu_status status = TPU_OK;
  tpu_step_options options = TPU_STEP_OPTIONS_INIT;
  CHECK(tpu_system_init(NULL, &system));
  CHECK(tpu_system_num_cores(system, &n));
  pool_thread *pool = calloc((size_t)n, sizeof *pool);
  tpu_tensor **inputs = calloc((size_t)n, sizeof *inputs), **results = calloc((size_t)n, sizeof *results);
  for (c = 0; c < n; c++) {
    pool[c].system = system;
    pool[c].core = c;
    if (pthread_create(&pool[c].thread, NULL, serve_core, &pool[c]) != 0) return 1;
  }
  options.caller_threads = 1;
  for (step = 0; step < 3 && status == TPU_OK; step++) {
    for (r = 0; r < n; r++) {
      float v[2] = {(float)(r + 1), (float)(10 * step)};
      int64_t dims[1] = {2};
      CHECK(tpu_tensor_create(TPU_FLOAT, dims, 1, v, sizeof v, &inputs[r]));
    }
    /* NULL computation: the joined threads run the replicas. */
    status = tpu_replicate(system, NULL, NULL, n, 1, inputs, 1, results, &options);
    if (status != TPU_OK) fprintf(stderr, "tpu_replicate: %s\n", tpu_last_error());
    for (r = 0; r < n; r++) {
      if (status == TPU_OK && r == n - 1) {
        const void *data;
        CHECK(tpu_tensor_data(results[r], &data));
        printf("step %d, replica %d: [%g, %g]\n", step, r, ((const float *)data)[0],
               ((const float *)data)[1]);
      }
      tpu_tensor_release(results[r]);
      tpu_tensor_release(inputs[r]);
    }
  }
  /* Ends the pool: each thread's tpu_step_join returns TPU_CANCELLED. */
  CHECK(tpu_system_shutdown(system));
  for (c = 0; c < n; c++) {
    pthread_join(pool[c].thread, NULL);
    if (pool[c].steps != 3) status = TPU_INTERNAL;
  }
  printf("%d threads ran %d steps each\n", n, pool[0].steps);
  free(pool);
  free(inputs);
  free(results);
  tpu_system_release(system);
  return status == TPU_OK ? 0 : 1;
}
