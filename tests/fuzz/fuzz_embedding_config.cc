// TPUEmbeddingConfiguration bytes under libFuzzer (tests/fuzz/fuzz.mk):
// validate_embedding_config, as tpu_embedding_config_validate calls it.
#include <cstdint>

#include "core/status.h"
#include "topology/embedding_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tpurt::validate_embedding_config(data, size);
  } catch (const tpurt::Error&) {
  }
  return 0;
}
