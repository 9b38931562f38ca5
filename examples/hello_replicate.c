/* hello_replicate: every core adds its replica's tensor with cross_replica_sum. */
#include <stdio.h>
#include <stdlib.h>
#include <tpurt.h>

/* On failure: print the call, the status and the library's message; return the status. */
#define CHECK(call)                                                                \
  do {                                                                             \
    tpu_status s_ = (call);                                                        \
    if (s_ != TPU_OK) {                                                            \
      fprintf(stderr, "%s: %s: %s\n", #call, tpu_status_name(s_), tpu_last_error()); \
      return s_;                                                                   \
    }                                                                              \
  } while (0)

/* Replica r contributes [r+1, 2(r+1), 3(r+1), 4(r+1)]. */
static tpu_status computation(tpu_replica_context *ctx, tpu_tensor *const *inputs,
                              int num_inputs, tpu_tensor **outputs, int num_outputs,
                              void *user_data) {
  int r, i;
  float values[4];
  int64_t dims[1] = {4};
  tpu_tensor *x;
  tpu_status status;
  (void)inputs, (void)num_inputs, (void)num_outputs, (void)user_data;
  CHECK(tpu_replica_context_replica_id(ctx, &r));
  for (i = 0; i < 4; i++) values[i] = (float)((r + 1) * (i + 1));
  CHECK(tpu_tensor_create(TPU_FLOAT, dims, 1, values, sizeof values, &x));
  status = tpu_cross_replica_sum(ctx, x, NULL, &outputs[0], NULL);
  CHECK(tpu_tensor_release(x));
  return status;
}

int main(void) {
  tpu_system *system;
  tpu_tensor **results;
  int n, r;
  CHECK(tpu_system_init(NULL, &system));
  CHECK(tpu_system_num_cores(system, &n));
  results = calloc((size_t)n, sizeof *results);
  CHECK(tpu_replicate(system, computation, NULL, n, 0, NULL, 1, results, NULL));
  for (r = 0; r < n; r++) {
    const void *data;
    const float *sum;
    CHECK(tpu_tensor_data(results[r], &data));
    sum = data;
    printf("replica %d: [%g, %g, %g, %g]\n", r, sum[0], sum[1], sum[2], sum[3]);
    CHECK(tpu_tensor_release(results[r]));
  }
  free(results);
  return tpu_system_release(system);
}
