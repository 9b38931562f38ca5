// TPUEmbeddingConfiguration bytes under libFuzzer (tests/fuzz/fuzz.mk): what
// tpu_system_init does with them before allocating tables, validate_embedding_config
// and the engine's parse (tables, features, each table's OptimizationParameters).
#include <cstdint>
#include <string>

#include "core/status.h"
#include "embedding/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tpurt::embedding::Config::parse(std::string(reinterpret_cast<const char*>(data), size), 4);
  } catch (const tpurt::Error&) {
  }
  return 0;
}
