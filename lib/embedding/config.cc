#include "embedding/config.h"

#include <set>

#include "core/checked.h"
#include "core/status.h"
#include "topology/embedding_config.h"
#include "tpu_embedding_configuration.pb-c.h"

namespace tpurt {
namespace embedding {

namespace {

using ConfigProto = Tensorflow__Tpu__TPUEmbeddingConfiguration;

struct ConfigDeleter {
  void operator()(ConfigProto* c) const { tensorflow__tpu__tpuembedding_configuration__free_unpacked(c, nullptr); }
};

int64_t samples_of(const std::vector<int64_t>& shape, const std::string& feature) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0) invalid_argument("feature '", feature, "' has input_shape dimension ", d, "; it must be positive");
    if (n > INT64_MAX / d) invalid_argument("feature '", feature, "' has more than 2^63 samples");
    n *= d;
  }
  return n;
}

}  // namespace

// tf.nn.embedding_lookup's "div": the first V % S shards hold one row more.
ShardMap::ShardMap(int64_t vocabulary_size, int64_t shards, bool mod)
    : vocabulary_size_(vocabulary_size), shards_(shards), mod_(mod) {
  small_ = vocabulary_size / shards;
  extra_ = vocabulary_size % shards;
  big_ = small_ + (extra_ > 0 ? 1 : 0);
  split_ = extra_ * big_;
  if (small_ == 0) small_ = 1;  // never divided by: every row is below split_
}

int64_t ShardMap::rows_in(int64_t shard) const {
  const int64_t base = vocabulary_size_ / shards_, extra = vocabulary_size_ % shards_;
  return base + (shard < extra ? 1 : 0);  // the same count for DIV and MOD
}

std::unique_ptr<Config> Config::parse(const std::string& bytes, int64_t shards) {
  validate_embedding_config(bytes.data(), bytes.size());
  static const uint8_t kEmpty = 0;
  std::unique_ptr<ConfigProto, ConfigDeleter> c(tensorflow__tpu__tpuembedding_configuration__unpack(
      nullptr, bytes.size(), bytes.empty() ? &kEmpty : reinterpret_cast<const uint8_t*>(bytes.data())));
  if (!c) invalid_argument("the embedding configuration does not parse");
  auto config = std::make_unique<Config>();
  config->mode = static_cast<tpu_embedding_mode>(c->mode);
  config->mod_sharding = c->sharding_strategy == TENSORFLOW__TPU__TPUEMBEDDING_CONFIGURATION__SHARDING_STRATEGY__MOD;
  std::set<int> tags;
  for (size_t i = 0; i < c->n_table_descriptor; ++i) {
    const auto* t = c->table_descriptor[i];
    TableSpec spec{t->name, t->vocabulary_size, t->dimension, nullptr,
                   ShardMap(t->vocabulary_size, shards, config->mod_sharding)};
    checked_mul(t->vocabulary_size, int64_t{t->dimension} * 4, "table '", spec.name, "': its bytes, ",
                t->vocabulary_size, " rows of dimension ", t->dimension, ",");
    spec.optimizer = Optimizer::parse(t->optimization_parameters.data, t->optimization_parameters.len, spec.name);
    if (spec.optimizer->dynamic_tag() >= 0) tags.insert(spec.optimizer->dynamic_tag());
    config->tables.push_back(std::move(spec));
  }
  // DynamicLearningRate: every tag in [0, number of distinct tags) is used.
  int expected = 0;
  for (int tag : tags) {
    if (tag != expected)
      invalid_argument("dynamic learning rate tag ", expected, " is unused while tag ", tag,
                       " is: the tags must be 0, 1, ... without gaps");
    ++expected;
  }
  config->num_dynamic_tags = expected;

  if (c->n_feature_descriptor > 0) {
    for (size_t i = 0; i < c->n_feature_descriptor; ++i) {
      const auto* f = c->feature_descriptor[i];
      FeatureSpec spec;
      spec.name = f->name && f->name[0] ? f->name : str_cat("feature_", i);
      spec.table = f->table_id;
      for (size_t d = 0; d < f->n_input_shape; ++d) spec.input_shape.push_back(f->input_shape[d]);
      if (spec.input_shape.empty()) {
        if (c->batch_size_per_tensor_core <= 0)
          invalid_argument("feature '", spec.name, "' has no input_shape and the configuration no ",
                           "batch_size_per_tensor_core");
        spec.input_shape.push_back(c->batch_size_per_tensor_core);
      }
      spec.samples = samples_of(spec.input_shape, spec.name);
      config->features.push_back(std::move(spec));
    }
  } else {
    // TensorFlow's older form: num_features per table, batch_size_per_tensor_core each.
    for (size_t t = 0; t < c->n_table_descriptor; ++t) {
      for (int32_t i = 0; i < c->table_descriptor[t]->num_features; ++i) {
        FeatureSpec spec;
        spec.name = str_cat(config->tables[t].name, "/", i);
        spec.table = static_cast<int>(t);
        if (c->batch_size_per_tensor_core <= 0)
          invalid_argument("table '", config->tables[t].name, "' has features but the configuration has ",
                           "batch_size_per_tensor_core ", c->batch_size_per_tensor_core,
                           " and no feature_descriptor");
        spec.input_shape.push_back(c->batch_size_per_tensor_core);
        spec.samples = c->batch_size_per_tensor_core;
        config->features.push_back(std::move(spec));
      }
    }
  }
  std::set<std::string> names;
  for (const FeatureSpec& f : config->features)
    if (!names.insert(f.name).second) invalid_argument("two features are named '", f.name, "'");
  return config;
}

int Config::table_index(const std::string& name) const {
  for (size_t i = 0; i < tables.size(); ++i)
    if (tables[i].name == name) return static_cast<int>(i);
  return -1;
}

int Config::feature_index(const std::string& name) const {
  for (size_t i = 0; i < features.size(); ++i)
    if (features[i].name == name) return static_cast<int>(i);
  return -1;
}

}  // namespace embedding
}  // namespace tpurt
