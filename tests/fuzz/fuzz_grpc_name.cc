// The TPU source's names under libFuzzer (tests/fuzz/fuzz.mk): the input up to its
// first NUL is the name ("local", "grpc://host:port,grpc://..."), given as
// options->tpu and as TPU_NAME; the next fields are options->job_name and
// options->coordinator_address (with a coordinator job named "coordinator").
#include "fuzz_resolver.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> f = fuzz::fields(data, size, 3);
  fuzz::set_environment({});
  tpu_cluster_resolver_options o = fuzz::options(TPU_RESOLVER_TPU);
  o.tpu = f[0].c_str();
  o.job_name = fuzz::or_null(f[1]);
  o.coordinator_address = fuzz::or_null(f[2]);
  if (o.coordinator_address != nullptr) o.coordinator_name = "coordinator";
  fuzz::resolve(o);
  fuzz::set_environment({{"TPU_NAME", &f[0]}});
  fuzz::resolve(fuzz::options(TPU_RESOLVER_AUTO));
  return 0;
}
