// tpu_embedding_config_from_json's text under libFuzzer (tests/fuzz/fuzz.mk): the JSON
// to protobuf conversion, then the engine's parse of what it produced.
#include <cstdint>
#include <string>

#include "core/status.h"
#include "embedding/config.h"
#include "embedding/config_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);  // NUL-terminated
  try {
    tpurt::embedding::Config::parse(tpurt::embedding::config_from_json(text.c_str()), 3);
  } catch (const tpurt::Error&) {
  }
  return 0;
}
