// C API: TPU embeddings on the host (tpurt/embedding.h) over lib/embedding/engine.h.
#include "embedding/config_json.h"
#include "embedding/engine.h"

#include <cmath>

#include "capi/api.h"
#include "capi/handles.h"
#include "runtime/replica_context.h"

using namespace tpurt;
using embedding::Engine;

namespace {

const System& live(const tpu_system* handle) {
  const System& s = system_of(handle);
  s.check_live();
  return s;
}

// The engine, or TPU_OUT_OF_RANGE for an index into a system without tables.
const Engine& engine_for_index(const tpu_system* handle, const char* what, int index) {
  const Engine* e = live(handle).embedding();
  if (e == nullptr)
    fail(TPU_OUT_OF_RANGE, what, " ", index, " is outside [0, 0): the system has no embedding configuration");
  return *e;
}

embedding::Caller caller(const tpu_replica_context* ctx) {
  return {ctx->participant, ctx->embedding_step, &ctx->late, &ctx->late_reason};
}

Engine& step_engine(const tpu_replica_context* ctx) {
  require_not_null(ctx, "ctx");
  step_communicator(ctx);  // inside its computation, and not given up on
  Engine* e = ctx->system->embedding();
  if (e == nullptr)
    fail(TPU_FAILED_PRECONDITION, "the system has no embedding configuration ",
         "(tpu_system_options.embedding_config)");
  return *e;
}

void check_name(const char* name) {
  require_not_null(name, "name");
}

}  // namespace

TPU_EXPORT tpu_status tpu_embedding_mode_of(const tpu_system* system, tpu_embedding_mode* out) {
  return guarded([&] {
    const Engine* e = live(system).embedding();
    require_not_null(out, "out");
    *out = e ? e->config().mode : TPU_EMBEDDING_MODE_UNSPECIFIED;
  });
}

TPU_EXPORT tpu_status tpu_embedding_num_tables(const tpu_system* system, int* out) {
  return guarded([&] {
    const Engine* e = live(system).embedding();
    require_not_null(out, "out");
    *out = e ? static_cast<int>(e->config().tables.size()) : 0;
  });
}

TPU_EXPORT tpu_status tpu_embedding_table_index(const tpu_system* system, const char* name, int* out) {
  return guarded([&] {
    const Engine* e = live(system).embedding();
    check_name(name);
    require_not_null(out, "out");
    const int i = e ? e->config().table_index(name) : -1;
    if (i < 0) fail(TPU_NOT_FOUND, "no embedding table is named '", name, "'");
    *out = i;
  });
}

TPU_EXPORT tpu_status tpu_embedding_table_name(const tpu_system* system, int table, char* out,
                                               size_t capacity, size_t* count) {
  return guarded([&] {
    copy_string_out(engine_for_index(system, "table", table).table(table).name, out, capacity, count,
                    "the table name");
  });
}

TPU_EXPORT tpu_status tpu_embedding_table_shape(const tpu_system* system, int table,
                                                int64_t* vocabulary_size, int32_t* dimension) {
  return guarded([&] {
    const embedding::TableSpec& t = engine_for_index(system, "table", table).table(table);
    require_not_null(vocabulary_size, "vocabulary_size");
    require_not_null(dimension, "dimension");
    *vocabulary_size = t.vocabulary_size;
    *dimension = t.dimension;
  });
}

TPU_EXPORT tpu_status tpu_embedding_table_optimizer(const tpu_system* system, int table,
                                                    tpu_embedding_optimizer* out) {
  return guarded([&] {
    const embedding::TableSpec& t = engine_for_index(system, "table", table).table(table);
    require_not_null(out, "out");
    *out = t.optimizer->kind();
  });
}

TPU_EXPORT tpu_status tpu_embedding_table_num_variables(const tpu_system* system, int table, int* out) {
  return guarded([&] {
    const embedding::TableSpec& t = engine_for_index(system, "table", table).table(table);
    require_not_null(out, "out");
    *out = 1 + static_cast<int>(t.optimizer->slot_names().size());
  });
}

TPU_EXPORT tpu_status tpu_embedding_variable_name(const tpu_system* system, int table, int variable,
                                                  char* out, size_t capacity, size_t* count) {
  return guarded([&] {
    const embedding::TableSpec& t = engine_for_index(system, "table", table).table(table);
    const auto& slots = t.optimizer->slot_names();
    const int n = 1 + static_cast<int>(slots.size());
    if (variable < 0 || variable >= n)
      fail(TPU_OUT_OF_RANGE, "variable ", variable, " is outside [0, ", n, ") for table '", t.name, "'");
    copy_string_out(variable == 0 ? std::string("parameters") : slots[variable - 1], out, capacity, count,
                    "the variable name");
  });
}

TPU_EXPORT tpu_status tpu_embedding_row_owner(const tpu_system* system, int table, int64_t row, int* core,
                                              int64_t* shard_row) {
  return guarded([&] {
    const Engine& e = engine_for_index(system, "table", table);
    require_not_null(core, "core");
    require_not_null(shard_row, "shard_row");
    e.row_owner(table, row, core, shard_row);
  });
}

TPU_EXPORT tpu_status tpu_embedding_num_features(const tpu_system* system, int* out) {
  return guarded([&] {
    const Engine* e = live(system).embedding();
    require_not_null(out, "out");
    *out = e ? static_cast<int>(e->config().features.size()) : 0;
  });
}

TPU_EXPORT tpu_status tpu_embedding_feature_index(const tpu_system* system, const char* name, int* out) {
  return guarded([&] {
    const Engine* e = live(system).embedding();
    check_name(name);
    require_not_null(out, "out");
    const int i = e ? e->config().feature_index(name) : -1;
    if (i < 0) fail(TPU_NOT_FOUND, "no embedding feature is named '", name, "'");
    *out = i;
  });
}

TPU_EXPORT tpu_status tpu_embedding_feature_name(const tpu_system* system, int feature, char* out,
                                                 size_t capacity, size_t* count) {
  return guarded([&] {
    copy_string_out(engine_for_index(system, "feature", feature).feature(feature).name, out, capacity, count,
                    "the feature name");
  });
}

TPU_EXPORT tpu_status tpu_embedding_feature_table(const tpu_system* system, int feature, int* table) {
  return guarded([&] {
    const embedding::FeatureSpec& f = engine_for_index(system, "feature", feature).feature(feature);
    require_not_null(table, "table");
    *table = f.table;
  });
}

TPU_EXPORT tpu_status tpu_embedding_feature_shape(const tpu_system* system, int feature, int64_t* out,
                                                  size_t capacity, size_t* count) {
  return guarded([&] {
    const Engine& e = engine_for_index(system, "feature", feature);
    const embedding::FeatureSpec& f = e.feature(feature);
    std::vector<int64_t> shape = f.input_shape;
    shape.push_back(e.config().tables[f.table].dimension);
    copy_array_out(shape.data(), shape.size(), out, capacity, count, "the activation shape");
  });
}

TPU_EXPORT tpu_status tpu_embedding_load(tpu_system* system, int table, int variable, int64_t first_row,
                                         int64_t num_rows, const float* values, size_t num_values) {
  return guarded([&] {
    System& s = system_of(system);
    if (values == nullptr && num_values != 0)
      invalid_argument("argument 'values' is NULL but num_values is ", num_values);
    s.between_steps([&] {
      Engine& e = const_cast<Engine&>(engine_for_index(system, "table", table));
      e.load(table, variable, first_row, num_rows, values, num_values);
    });
  });
}

TPU_EXPORT tpu_status tpu_embedding_retrieve(tpu_system* system, int table, int variable, int64_t first_row,
                                             int64_t num_rows, float* out, size_t capacity, size_t* count) {
  return guarded([&] {
    System& s = system_of(system);
    s.between_steps([&] {
      const Engine& e = engine_for_index(system, "table", table);
      const embedding::TableSpec& t = e.table(table);
      if (num_rows < 0 || first_row < 0 || first_row > t.vocabulary_size ||
          num_rows > t.vocabulary_size - first_row)
        fail(TPU_OUT_OF_RANGE, "rows [", first_row, ", ", first_row, " + ", num_rows, ") are outside table '",
             t.name, "''s [0, ", t.vocabulary_size, ")");
      check_out_array(out, capacity, count, static_cast<size_t>(num_rows) * t.dimension, 0, "the rows");
      if (out != nullptr) e.retrieve(table, variable, first_row, num_rows, out);
    });
  });
}

TPU_EXPORT tpu_status tpu_embedding_enqueue(tpu_replica_context* ctx, const tpu_embedding_feature_batch* features,
                                            int num_features) {
  return guarded([&] {
    Engine& e = step_engine(ctx);
    if (features == nullptr && num_features != 0)
      invalid_argument("argument 'features' is NULL but num_features is ", num_features);
    if (num_features < 0) invalid_argument("num_features is ", num_features, "; it must be >= 0");
    e.enqueue(caller(ctx), features, num_features);
  });
}

TPU_EXPORT tpu_status tpu_embedding_recv_activations(tpu_replica_context* ctx, tpu_tensor** activations,
                                                     int num_activations) {
  return guarded([&] {
    Engine& e = step_engine(ctx);
    if (num_activations != 0) require_not_null(activations, "activations");
    e.recv_activations(caller(ctx), *ctx->comm, activations, num_activations);
  });
}

TPU_EXPORT tpu_status tpu_embedding_send_gradients(tpu_replica_context* ctx, tpu_tensor* const* gradients,
                                                   int num_gradients, const float* learning_rates,
                                                   int num_learning_rates) {
  return guarded([&] {
    Engine& e = step_engine(ctx);
    if (num_gradients != 0) require_not_null(gradients, "gradients");
    if (learning_rates == nullptr && num_learning_rates != 0)
      invalid_argument("argument 'learning_rates' is NULL but num_learning_rates is ", num_learning_rates);
    e.send_gradients(caller(ctx), *ctx->comm, gradients, num_gradients, learning_rates, num_learning_rates);
  });
}

TPU_EXPORT tpu_status tpu_embedding_config_from_json(const char* json, void* out, size_t capacity, size_t* count) {
  return guarded([&] {
    require_not_null(json, "json");
    copy_bytes_out(embedding::config_from_json(json), out, capacity, count, "the configuration bytes");
  });
}
