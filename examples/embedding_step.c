/* embedding_step: one table of 6 rows x 2 sharded over 2 cores, trained by SGD for one
 * step. Replica r looks up a batch of two samples: {r, 5} and {5}, averaged. Both
 * replicas send a gradient of 1 everywhere; row 5, touched three times, moves most. */
#include <stdio.h>
#include <tpurt.h>

#define CHECK(call) do { tpu_status s_ = (call); if (s_ != TPU_OK) {                  \
    fprintf(stderr, "%s: %s: %s\n", #call, tpu_status_name(s_), tpu_last_error()); \
    return s_; } } while (0)

static const char config[] =
    "{\"table_descriptor\": [{\"name\": \"items\", \"vocabulary_size\": 6, \"dimension\": 2,"
    "   \"optimization_parameters\": {\"learning_rate\": {\"constant\": 0.5},"
    "                                 \"stochastic_gradient_descent\": {}}}],"
    " \"feature_descriptor\": [{\"name\": \"clicked\", \"table_id\": 0, \"input_shape\": [2]}],"
    " \"mode\": \"TRAINING\"}";

static tpu_status step(tpu_replica_context *ctx, tpu_tensor *const *inputs, int num_inputs,
                       tpu_tensor **outputs, int num_outputs, void *user_data) {
  int replica;
  (void)inputs, (void)num_inputs, (void)num_outputs, (void)user_data;
  CHECK(tpu_replica_context_replica_id(ctx, &replica));
  const int64_t ids[3] = {replica, 5, 5}, splits[3] = {0, 2, 3};
  tpu_embedding_feature_batch clicked = {.feature = 0, .ids = ids, .num_ids = 3,
                                         .row_splits = splits, .num_row_splits = 3,
                                         .combiner = TPU_EMBEDDING_COMBINER_MEAN};
  CHECK(tpu_embedding_enqueue(ctx, &clicked, 1));
  CHECK(tpu_embedding_recv_activations(ctx, &outputs[0], 1)); /* [2 samples, 2] */
  const float ones[4] = {1, 1, 1, 1};
  const int64_t dims[2] = {2, 2};
  tpu_tensor *gradient;
  CHECK(tpu_tensor_create(TPU_FLOAT, dims, 2, ones, sizeof ones, &gradient));
  tpu_status status = tpu_embedding_send_gradients(ctx, &gradient, 1, NULL, 0);
  CHECK(tpu_tensor_release(gradient));
  return status;
}

int main(void) {
  unsigned char bytes[512];
  size_t len;
  CHECK(tpu_embedding_config_from_json(config, bytes, sizeof bytes, &len));
  tpu_system_options options = TPU_SYSTEM_OPTIONS_INIT;
  options.num_cores = 2;
  options.embedding_config = bytes;
  options.embedding_config_len = len;
  tpu_system *system;
  CHECK(tpu_system_init(&options, &system));
  const float rows[12] = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5}; /* row i is (i, i) */
  CHECK(tpu_embedding_load(system, 0, 0, 0, 6, rows, 12));

  tpu_tensor *activations[2];
  CHECK(tpu_replicate(system, step, NULL, 2, 0, NULL, 1, activations, NULL));
  for (int r = 0; r < 2; ++r) {
    const void *data;
    CHECK(tpu_tensor_data(activations[r], &data));
    const float *a = data;
    printf("replica %d: samples %g and %g\n", r, a[0], a[2]);
    CHECK(tpu_tensor_release(activations[r]));
  }
  float trained[12];
  CHECK(tpu_embedding_retrieve(system, 0, 0, 0, 6, trained, 12, &len));
  for (int i = 0; i < 6; ++i) {
    int core;
    int64_t shard_row;
    CHECK(tpu_embedding_row_owner(system, 0, i, &core, &shard_row));
    printf("row %d (core %d): %g\n", i, core, trained[2 * i]);
  }
  return tpu_system_release(system);
}
