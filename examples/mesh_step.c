/* mesh_step: 2 replicas ("batch") x 2 cores each ("model") on 4 cores. Each replica's
 * [4] vector is split over its 2 cores; each core sums its half, and one sum over the
 * mesh's "model" axis gives both cores their replica's total. */
#include <stdio.h>
#include <tpurt.h>

/* On failure: print the call, the status and the library's message; return the status. */
#define CHECK(call) do { tpu_status s_ = (call); if (s_ != TPU_OK) {                  \
    fprintf(stderr, "%s: %s: %s\n", #call, tpu_status_name(s_), tpu_last_error()); \
    return s_; } } while (0)

/* Runs once per (replica, logical core): inputs[0] is this core's half, user_data the mesh. */
static tpu_status step(tpu_replica_context *ctx, tpu_tensor *const *inputs, int num_inputs,
                       tpu_tensor **outputs, int num_outputs, void *user_data) {
  const char *model[] = {"model"};
  tpu_group_assignment groups;
  tpu_collective_options options = TPU_COLLECTIVE_OPTIONS_INIT;
  const void *data;
  int64_t one = 1;
  tpu_tensor *partial;
  (void)num_inputs, (void)num_outputs;
  CHECK(tpu_tensor_data(inputs[0], &data));
  const float *half = data, sum = half[0] + half[1];
  CHECK(tpu_tensor_create(TPU_FLOAT, &one, 1, &sum, sizeof sum, &partial));
  CHECK(tpu_mesh_axis_groups(user_data, model, 1, &groups, &options.group_mode));
  tpu_status status = tpu_cross_replica_sum(ctx, partial, &groups, &outputs[0], &options);
  CHECK(tpu_tensor_release(partial));
  return status;
}

int main(void) {
  tpu_system_options system_options = TPU_SYSTEM_OPTIONS_INIT;
  tpu_system *system;
  tpu_topology *topology;
  tpu_device_assignment *assignment;
  tpu_mesh *mesh;
  system_options.num_cores = 4;
  CHECK(tpu_system_init(&system_options, &system));
  CHECK(tpu_system_topology(system, &topology));
  int32_t two_cores[4] = {2, 1, 1, 1}; /* computation_shape: 2 cores per replica */
  CHECK(tpu_device_assignment_build(topology, two_cores, 4, NULL, 0, 2, TPU_DEVICE_ORDER_AUTO,
                                    &assignment));
  CHECK(tpu_topology_release(topology));
  const char *axes[] = {"batch", "model"};
  int64_t sizes[] = {2, 2}, dims[] = {4};
  CHECK(tpu_mesh_create(assignment, axes, sizes, 2, &mesh));
  tpu_tensor *inputs[2], *outputs[2];
  for (int r = 0; r < 2; r++) { /* replica r: [10r+1, 10r+2, 10r+3, 10r+4] */
    float x[4] = {10.f * r + 1, 10.f * r + 2, 10.f * r + 3, 10.f * r + 4};
    CHECK(tpu_tensor_create(TPU_FLOAT, dims, 1, x, sizeof x, &inputs[r]));
  }
  /* The input is cut in 2 along dimension 0; the output joins the cores' [1] totals. */
  tpu_partition_spec halves = {1, {2}};
  tpu_step_options options = TPU_STEP_OPTIONS_INIT;
  options.device_assignment = assignment;
  options.input_partitions = options.output_partitions = &halves;
  options.num_input_partitions = options.num_output_partitions = 1;
  CHECK(tpu_replicate(system, step, mesh, 2, 1, inputs, 1, outputs, &options));
  int wrong = 0;
  for (int r = 0; r < 2; r++) {
    const void *data;
    int64_t n;
    CHECK(tpu_tensor_num_elements(outputs[r], &n));
    CHECK(tpu_tensor_data(outputs[r], &data));
    const float *total = data, want = 40.f * r + 10;
    if (n != 2) { fprintf(stderr, "replica %d: %lld totals, want 2\n", r, (long long)n); return 1; }
    printf("replica %d: cores 0 and 1 got %g and %g (want %g)\n", r, total[0], total[1], want);
    wrong |= total[0] != want || total[1] != want;
    CHECK(tpu_tensor_release(inputs[r]));
    CHECK(tpu_tensor_release(outputs[r]));
  }
  CHECK(tpu_mesh_release(mesh));
  CHECK(tpu_device_assignment_release(assignment));
  CHECK(tpu_system_release(system));
  return wrong;
}
