// Validation of a serialized tensorflow.tpu.TPUEmbeddingConfiguration.
#pragma once

#include <cstddef>

namespace tpurt {

// Throws TPU_INVALID_ARGUMENT for bytes that do not parse and for contents that make
// no sense (no table, empty or duplicate table name, non-positive vocabulary_size or
// dimension, a feature's table_id outside the tables, negative counts, unknown enum
// values), naming the table or feature and the value.
void validate_embedding_config(const void* bytes, size_t len);

}  // namespace tpurt
