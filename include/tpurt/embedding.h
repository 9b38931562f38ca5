/* tpurt/embedding.h (1.4): TPU embeddings on the host.
 *
 * A system started with an embedding configuration (tpu_system_options.embedding_config,
 * a serialized tensorflow.tpu.TPUEmbeddingConfiguration) holds its tables: each
 * TableDescriptor becomes vocabulary_size x dimension float32 rows ("parameters") plus
 * the slot variables of its optimizer (OptimizationParameters, proto/
 * optimization_parameters.proto), sharded over every core of the system, all tasks
 * included, by the configuration's sharding_strategy. With S = the system's cores
 * (tasks x cores per task), V = vocabulary_size:
 *   DIV_DEFAULT: contiguous blocks; the first V % S shards hold ceil(V / S) rows, the
 *     rest floor(V / S) (tf.nn.embedding_lookup's "div"); shard s holds the rows from
 *     s * ceil(V/S) up to the block's end, or after the larger blocks.
 *   MOD: row i on shard i % S, as its row i / S there.
 * Shard s is global core s: task s / cores_per_task, core s % cores_per_task. Memory is
 * allocated at init; a table that does not fit is TPU_RESOURCE_EXHAUSTED naming it and
 * the bytes it needs. A table starts at zero, its slots at the optimizer's initial
 * values (tpu_embedding_variable_name, docs/EMBEDDING.md), until loaded.
 *
 * Features: the configuration's feature_descriptors in order, each looking up one table
 * with input_shape samples (their product; the activation is input_shape + [dimension]).
 * A configuration without feature_descriptors has TensorFlow's older form: each table's
 * num_features features, table by table, each of batch_size_per_tensor_core samples,
 * named "<table>/<i>".
 *
 * One step, as TensorFlow's raw embedding ops divide it, in every computation
 * (participant) of the step, each with its own batch:
 *   1. tpu_embedding_enqueue: the participant's sparse ids, per feature (COO or ragged),
 *      with the feature's combiner; local, once per step.
 *   2. tpu_embedding_recv_activations: one [samples..., dimension] tensor per enqueued
 *      feature, each sample the combination of its ids' rows.
 *   3. tpu_embedding_send_gradients: the gradients of those activations. The engine sums
 *      each row's gradients over the whole step (every participant, duplicate ids
 *      summed) and applies the table's optimizer once per touched row, where the row
 *      lives, when the step has succeeded on every task: a failed step changes no row.
 * recv_activations and send_gradients are collectives of the step (collectives.h):
 * every participant calls them, in the same order relative to the other collectives;
 * one that does not is named, at the latest at the deadline. Across tasks ids travel to the task
 * that holds their rows and rows back, over the step's transport; the results are
 * bit-identical to one process.
 *
 * Errors inside a step fail the step (the first error wins, collectives.h); every
 * check names the feature, table and value. Outside a step every function may be
 * called from any thread; load and retrieve wait for the step in flight.
 */
#ifndef TPURT_EMBEDDING_H
#define TPURT_EMBEDDING_H

#include "common.h"
#include "replicate.h"
#include "system.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A table's optimizer: OptimizationParameters' oneof field numbers. */
typedef TPU_ENUM(tpu_embedding_optimizer) {
  TPU_EMBEDDING_OPTIMIZER_ADAGRAD = 3,
  TPU_EMBEDDING_OPTIMIZER_SGD = 4,
  TPU_EMBEDDING_OPTIMIZER_FTRL = 5,
  TPU_EMBEDDING_OPTIMIZER_ADAM = 6,
  TPU_EMBEDDING_OPTIMIZER_MOMENTUM = 8,
  TPU_EMBEDDING_OPTIMIZER_RMS_PROP = 9,
  TPU_EMBEDDING_OPTIMIZER_CENTERED_RMS_PROP = 10,
  TPU_EMBEDDING_OPTIMIZER_ADADELTA = 12,
  TPU_EMBEDDING_OPTIMIZER_PROXIMAL_ADAGRAD = 14,
  TPU_EMBEDDING_OPTIMIZER_ADAGRAD_MOMENTUM = 26
} tpu_embedding_optimizer;

/* How a sample's rows combine (TensorFlow's combiners): SUM: sum of weight * row;
 * MEAN: that sum divided by the sum of the weights; SQRTN: divided by the square root
 * of the sum of the squared weights. A sample without ids gets zeros. A sample of one
 * id gets exactly weight * row, a -0.0 included (TensorFlow's segment_sum). */
typedef TPU_ENUM(tpu_embedding_combiner) {
  TPU_EMBEDDING_COMBINER_SUM = 0,
  TPU_EMBEDDING_COMBINER_MEAN = 1,
  TPU_EMBEDDING_COMBINER_SQRTN = 2
} tpu_embedding_combiner;

/* TPUEmbeddingConfiguration.Mode. UNSPECIFIED and TRAINING take activations and
 * gradients; INFERENCE refuses gradients, BACKWARD_PASS_ONLY activations
 * (TPU_FAILED_PRECONDITION naming the mode). */
typedef TPU_ENUM(tpu_embedding_mode) {
  TPU_EMBEDDING_MODE_UNSPECIFIED = 0,
  TPU_EMBEDDING_MODE_INFERENCE = 1,
  TPU_EMBEDDING_MODE_TRAINING = 2,
  TPU_EMBEDDING_MODE_BACKWARD_PASS_ONLY = 3
} tpu_embedding_mode;

/* One feature's ids for one participant's batch of `samples` (the feature's sample
 * count). Exactly one of sample_indices and row_splits is given, except that a
 * feature with no ids may give neither:
 *   COO (EnqueueTPUEmbeddingSparseTensorBatch): sample_indices[num_ids], the sample
 *     in [0, samples) of each id, in any order;
 *   ragged (EnqueueTPUEmbeddingRaggedTensorBatch): row_splits[samples + 1], from 0 to
 *     num_ids and nondecreasing; sample b owns ids[row_splits[b] .. row_splits[b+1]).
 * ids are in [0, vocabulary_size) of the feature's table; weights[num_ids] or NULL
 * (every weight 1). A sample's rows combine in the order its ids are given. */
typedef struct tpu_embedding_feature_batch {
  int feature; /* index into the configuration's features */
  const int64_t *ids;
  size_t num_ids;
  const int64_t *sample_indices;
  const int64_t *row_splits;
  size_t num_row_splits;
  const float *weights;
  tpu_embedding_combiner combiner;
} tpu_embedding_feature_batch;

/* ---- Writing a configuration without protobuf ------------------------------------
 * A serialized TPUEmbeddingConfiguration (for tpu_system_options.embedding_config) from
 * its JSON form, proto3's JSON mapping: field names as in the .proto or lowerCamelCase,
 * enums by name or number, 64-bit integers as numbers or strings, a wrapper
 * (google.protobuf.FloatValue: ClippingLimits' lower and upper) as its bare value
 * ("lower": -1.5) or as {"value": -1.5}, null for a field left unset, and each table's
 * optimization_parameters as an OptimizationParameters object, for example
 *   {"table_descriptor": [{"name": "video", "vocabulary_size": 1000, "dimension": 16,
 *     "optimization_parameters": {"learning_rate": {"constant": 0.1}, "adagrad": {}}}],
 *    "feature_descriptor": [{"name": "watched", "table_id": 0, "input_shape": [128]}],
 *    "mode": "TRAINING"}
 * The bytes follow the out-array rule (count in bytes). TPU_INVALID_ARGUMENT naming the
 * path of what is wrong ("table_descriptor[0].dimension: expected an integer"); the
 * result is not validated further (tpu_system_init does that). */
TPU_API tpu_status tpu_embedding_config_from_json(const char *json, void *out, size_t capacity,
                                                  size_t *count);

/* ---- The configuration as the system holds it ------------------------------------
 * Without an embedding configuration there are 0 tables and features, and the
 * functions below that name a table or feature give TPU_OUT_OF_RANGE. Indices outside
 * [0, count) are TPU_OUT_OF_RANGE naming the index and the count. */

TPU_API tpu_status tpu_embedding_mode_of(const tpu_system *system, tpu_embedding_mode *out);
TPU_API tpu_status tpu_embedding_num_tables(const tpu_system *system, int *out);
/* The index of the table called `name`; TPU_NOT_FOUND naming it. */
TPU_API tpu_status tpu_embedding_table_index(const tpu_system *system, const char *name,
                                             int *out);
TPU_API tpu_status tpu_embedding_table_name(const tpu_system *system, int table, char *out,
                                            size_t capacity, size_t *count);
TPU_API tpu_status tpu_embedding_table_shape(const tpu_system *system, int table,
                                             int64_t *vocabulary_size, int32_t *dimension);
TPU_API tpu_status tpu_embedding_table_optimizer(const tpu_system *system, int table,
                                                 tpu_embedding_optimizer *out);
/* A table's variables: 0 is "parameters" (the rows), then the optimizer's slots with
 * TensorFlow's names (Load/RetrieveTPUEmbedding*Parameters' arguments, for example
 * "accumulators" for Adagrad, "momenta" and "velocities" for Adam). */
TPU_API tpu_status tpu_embedding_table_num_variables(const tpu_system *system, int table,
                                                     int *out);
TPU_API tpu_status tpu_embedding_variable_name(const tpu_system *system, int table,
                                               int variable, char *out, size_t capacity,
                                               size_t *count);
/* Where `row` of `table` lives: the global core holding its shard (task core /
 * cores_per_task) and its row in that shard. A row outside [0, vocabulary_size) is
 * TPU_OUT_OF_RANGE. */
TPU_API tpu_status tpu_embedding_row_owner(const tpu_system *system, int table, int64_t row,
                                           int *core, int64_t *shard_row);

TPU_API tpu_status tpu_embedding_num_features(const tpu_system *system, int *out);
TPU_API tpu_status tpu_embedding_feature_index(const tpu_system *system, const char *name,
                                               int *out);
TPU_API tpu_status tpu_embedding_feature_name(const tpu_system *system, int feature,
                                              char *out, size_t capacity, size_t *count);
TPU_API tpu_status tpu_embedding_feature_table(const tpu_system *system, int feature,
                                               int *table);
/* The shape of the feature's activation, input_shape + [dimension] (out-array rule);
 * its sample count is the product of all but the last. */
TPU_API tpu_status tpu_embedding_feature_shape(const tpu_system *system, int feature,
                                               int64_t *out, size_t capacity, size_t *count);

/* ---- Loading and retrieving (Load/RetrieveTPUEmbedding*Parameters) ----------------
 * Rows [first_row, first_row + num_rows) of one variable of a table, row-major,
 * num_rows * dimension floats. In a multi-task system each task holds its shards
 * only: load writes the rows held here and skips the others (every task loads the
 * same values, as TensorFlow's per-host load ops do), retrieve fills the rows held
 * here and leaves the others in `out` as they were (tpu_embedding_row_owner says
 * which). TPU_FAILED_PRECONDITION from inside a computation; a range outside
 * [0, vocabulary_size) is TPU_OUT_OF_RANGE; a value count other than num_rows *
 * dimension is TPU_INVALID_ARGUMENT. Waits for the step in flight. */
TPU_API tpu_status tpu_embedding_load(tpu_system *system, int table, int variable,
                                      int64_t first_row, int64_t num_rows,
                                      const float *values, size_t num_values);
TPU_API tpu_status tpu_embedding_retrieve(tpu_system *system, int table, int variable,
                                          int64_t first_row, int64_t num_rows, float *out,
                                          size_t capacity, size_t *count);

/* ---- One step, from inside a computation ----------------------------------------- */

/* The participant's sparse input for this step: features[num_features], each feature
 * at most once (any subset of the configuration's). Once per participant per step.
 * TPU_INVALID_ARGUMENT, naming feature, table and value: a feature index outside the
 * configuration, a feature given twice, a second enqueue in the step, an id outside
 * [0, vocabulary_size), a sample index outside [0, samples), row splits that are not
 * samples + 1 nondecreasing offsets from 0 to num_ids, both or neither of
 * sample_indices and row_splits (with ids), an unknown combiner, a non-finite weight. */
TPU_API tpu_status tpu_embedding_enqueue(tpu_replica_context *ctx,
                                         const tpu_embedding_feature_batch *features,
                                         int num_features);

/* The activations of this participant's batch: activations[num_activations], with
 * num_activations the configuration's feature count; entry f is a new float32 tensor
 * of tpu_embedding_feature_shape(f) for an enqueued feature (the caller's), NULL for
 * a feature not enqueued. Before the participant's enqueue, twice, or after its
 * send_gradients: TPU_INVALID_ARGUMENT. A collective (every participant calls it once
 * per step it enqueues in; send_gradients names one that skipped it). */
TPU_API tpu_status tpu_embedding_recv_activations(tpu_replica_context *ctx,
                                                  tpu_tensor **activations,
                                                  int num_activations);

/* The gradients of this participant's activations: gradients[num_gradients], with
 * num_gradients the feature count; entry f is a float32 tensor of the feature's
 * activation shape for every enqueued feature and NULL for the others (gradients of a
 * feature not enqueued, of another shape or dtype: TPU_INVALID_ARGUMENT).
 * learning_rates[num_learning_rates]: the dynamic learning rates by tag (LearningRate.
 * dynamic.tag), exactly as many as the configuration's distinct tags (0 if none); every
 * participant gives the same. Applied when the step succeeds on every task. INFERENCE
 * mode: TPU_FAILED_PRECONDITION. A collective (every participant calls it once, after
 * its enqueue). */
TPU_API tpu_status tpu_embedding_send_gradients(tpu_replica_context *ctx,
                                                tpu_tensor *const *gradients,
                                                int num_gradients,
                                                const float *learning_rates,
                                                int num_learning_rates);

#ifdef __cplusplus
}
#endif

#endif /* TPURT_EMBEDDING_H */
