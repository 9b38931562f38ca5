// A checkpoint's manifest.json under libFuzzer (tests/fuzz/fuzz.mk): the parse that
// restore and tpu_checkpoint_latest run on a file anyone may have written. What parses
// must write back to JSON that parses to the same text.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "checkpoint/manifest.h"
#include "core/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tpurt::checkpoint;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const std::string once = manifest_to_json(parse_manifest(text, "fuzz"));
    if (manifest_to_json(parse_manifest(once, "again")) != once) std::abort();
  } catch (const tpurt::Error&) {
  }
  return 0;
}
