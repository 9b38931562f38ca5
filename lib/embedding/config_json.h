// tpu_embedding_config_from_json: proto3 JSON of a TPUEmbeddingConfiguration (with each
// table's optimization_parameters as an object) to its serialized bytes, through
// protobuf-c's descriptors.
#pragma once

#include <string>

namespace tpurt {
namespace embedding {

// TPU_INVALID_ARGUMENT naming the path of what is wrong.
std::string config_from_json(const char* json);

}  // namespace embedding
}  // namespace tpurt
