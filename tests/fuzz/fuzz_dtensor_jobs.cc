// DTensor's environment under libFuzzer (tests/fuzz/fuzz.mk): NUL-separated
// DTENSOR_JOBS, DTENSOR_CLIENT_ID and DTENSOR_JOB_NAME (a missing client id is
// unset; DTENSOR_JOBS is set even when empty, as DTensor counts that as one client).
#include "fuzz_resolver.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> f = fuzz::fields(data, size, 3);
  bool has_id = false;
  for (size_t i = 0; i < size; ++i) has_id |= data[i] == 0;
  fuzz::set_environment({{"DTENSOR_JOBS", &f[0]},
                         {"DTENSOR_CLIENT_ID", has_id ? &f[1] : nullptr},
                         {"DTENSOR_JOB_NAME", &f[2]}});
  for (int source : {TPU_RESOLVER_DTENSOR, TPU_RESOLVER_AUTO}) fuzz::resolve(fuzz::options(source));
  return 0;
}
