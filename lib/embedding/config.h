// The embedding configuration as the engine uses it: tables with their optimizers,
// features, and where each row lives (the sharding over every core of the system).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "embedding/optimizer.h"
#include "tpurt/embedding.h"

namespace tpurt {
namespace embedding {

// TPUEmbeddingConfiguration.ShardingStrategy over `shards` shards.
class ShardMap {
 public:
  ShardMap(int64_t vocabulary_size, int64_t shards, bool mod);
  int64_t shards() const { return shards_; }
  bool mod() const { return mod_; }
  int64_t shard_of(int64_t row) const {
    if (mod_) return row % shards_;
    return row < split_ ? row / big_ : extra_ + (row - split_) / small_;
  }
  int64_t shard_row(int64_t row) const {
    if (mod_) return row / shards_;
    return row < split_ ? row % big_ : (row - split_) % small_;
  }
  int64_t rows_in(int64_t shard) const;
  // The largest shard's row count.
  int64_t max_rows() const { return big_; }

 private:
  int64_t vocabulary_size_, shards_;
  bool mod_;
  int64_t big_, small_, extra_, split_;  // DIV: extra_ shards of big_ rows up to row split_
};

struct TableSpec {
  std::string name;
  int64_t vocabulary_size = 0;
  int32_t dimension = 0;
  std::unique_ptr<Optimizer> optimizer;
  ShardMap shards;
};

struct FeatureSpec {
  std::string name;
  int table = 0;
  std::vector<int64_t> input_shape;  // the activation is input_shape + [dimension]
  int64_t samples = 0;               // the product of input_shape
};

struct Config {
  // Parses and validates serialized TPUEmbeddingConfiguration bytes (validated by
  // validate_embedding_config first) for a system of `shards` cores in all.
  static std::unique_ptr<Config> parse(const std::string& bytes, int64_t shards);

  tpu_embedding_mode mode = TPU_EMBEDDING_MODE_UNSPECIFIED;
  bool mod_sharding = false;
  std::vector<TableSpec> tables;
  std::vector<FeatureSpec> features;
  int num_dynamic_tags = 0;  // the learning rates send_gradients takes

  int table_index(const std::string& name) const;    // -1 if none
  int feature_index(const std::string& name) const;  // -1 if none
};

}  // namespace embedding
}  // namespace tpurt
