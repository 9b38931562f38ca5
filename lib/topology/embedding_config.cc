#include "topology/embedding_config.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>

#include "core/proto_enums.h"
#include "core/status.h"
#include "tpu_embedding_configuration.pb-c.h"

namespace tpurt {

namespace {

using Config = Tensorflow__Tpu__TPUEmbeddingConfiguration;

struct ConfigDeleter {
  void operator()(Config* c) const {
    tensorflow__tpu__tpuembedding_configuration__free_unpacked(c, nullptr);
  }
};

void check_non_negative(const char* field, int32_t value) {
  if (value < 0)
    invalid_argument("TPUEmbeddingConfiguration ", field, " must be >= 0; got ", value);
}

}  // namespace

void validate_embedding_config(const void* bytes, size_t len) {
  if (bytes == nullptr && len != 0) invalid_argument("argument 'bytes' is NULL but len is ", len);
  static const uint8_t kEmpty = 0;
  const uint8_t* data = len ? static_cast<const uint8_t*>(bytes) : &kEmpty;
  std::unique_ptr<Config, ConfigDeleter> c(
      tensorflow__tpu__tpuembedding_configuration__unpack(nullptr, len, data));
  if (!c)
    invalid_argument("bytes are not a serialized tensorflow.tpu.TPUEmbeddingConfiguration (", len,
                     " bytes)");
  check_proto_enums(&c->base);  // mode and sharding_strategy

  if (c->n_table_descriptor == 0)
    invalid_argument("TPUEmbeddingConfiguration has no table_descriptor");
  std::unordered_map<std::string, size_t> names;
  for (size_t i = 0; i < c->n_table_descriptor; ++i) {
    const auto* t = c->table_descriptor[i];
    const std::string name = t->name ? t->name : "";
    if (name.empty()) invalid_argument("table_descriptor ", i, " has an empty name");
    auto [it, fresh] = names.emplace(name, i);
    if (!fresh)
      invalid_argument("table_descriptor ", i, " has the name '", name, "' of table_descriptor ",
                       it->second);
    if (t->vocabulary_size <= 0)
      invalid_argument("table '", name, "' has vocabulary_size ", t->vocabulary_size,
                       "; it must be positive");
    if (t->dimension <= 0)
      invalid_argument("table '", name, "' has dimension ", t->dimension, "; it must be positive");
    if (t->num_features < 0)
      invalid_argument("table '", name, "' has num_features ", t->num_features,
                       "; it must be >= 0");
  }

  check_non_negative("batch_size_per_tensor_core", c->batch_size_per_tensor_core);
  check_non_negative("num_hosts", c->num_hosts);
  check_non_negative("num_tensor_cores", c->num_tensor_cores);

  for (size_t i = 0; i < c->n_feature_descriptor; ++i) {
    const auto* f = c->feature_descriptor[i];
    const std::string label = str_cat("feature_descriptor ", i, " '", f->name ? f->name : "", "'");
    if (f->table_id < 0 || static_cast<size_t>(f->table_id) >= c->n_table_descriptor)
      invalid_argument(label, " has table_id ", f->table_id, " outside [0, ", c->n_table_descriptor,
                       ")");
    for (size_t d = 0; d < f->n_input_shape; ++d)
      if (f->input_shape[d] < 0)
        invalid_argument(label, " has input_shape dimension ", d, " = ", f->input_shape[d],
                         "; it must be >= 0");
  }

  if (c->spmd_sharding != nullptr && c->spmd_sharding->num_cores_per_replica < 0)
    invalid_argument(
        "TPUEmbeddingConfiguration spmd_sharding.num_cores_per_replica must be >= 0; got ",
        c->spmd_sharding->num_cores_per_replica);
}

}  // namespace tpurt
