// Binding-support layer (../tpurt_binding.hpp): one feature's embedding ids
// (EmbeddingFeatureBatch) and embeddingConfigFromJson.
#ifndef TPURT_BINDING_SUPPORT_EMBEDDING_HPP
#define TPURT_BINDING_SUPPORT_EMBEDDING_HPP

#include "common.hpp"

namespace tpurt {

// One feature's ids for ReplicaContext::embeddingEnqueue (tpu_embedding_feature_batch):
// COO with sampleIndices, or ragged with rowSplits; neither only for a feature without
// ids. Empty weights: every weight 1.
class EmbeddingFeatureBatch {
 public:
  int feature = 0;
  std::vector<long long> ids;
  std::vector<long long> sampleIndices;
  std::vector<long long> rowSplits;
  std::vector<float> weights;
  EmbeddingCombiner combiner = EmbeddingCombiner::Sum;
  // Array forms of the setters: one copy from the language's array, not one call per element.
  void assignIds(const long long* data, size_t count) { ids.assign(data, data + count); }
  void assignSampleIndices(const long long* data, size_t count) { sampleIndices.assign(data, data + count); }
  void assignRowSplits(const long long* data, size_t count) { rowSplits.assign(data, data + count); }
  void assignWeights(const float* data, size_t count) { weights.assign(data, data + count); }
};

// tpu_embedding_config_from_json: serialized TPUEmbeddingConfiguration bytes for
// SystemOptions::embeddingConfig.
inline std::vector<uint8_t> embeddingConfigFromJson(const std::string& json) {
  return detail::read_bytes([&](uint8_t* o, size_t c, size_t* n) {
    return tpu_embedding_config_from_json(json.c_str(), o, c, n);
  });
}

}  // namespace tpurt

#endif  // TPURT_BINDING_SUPPORT_EMBEDDING_HPP
