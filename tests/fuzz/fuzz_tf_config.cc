// TF_CONFIG under libFuzzer (tests/fuzz/fuzz.mk): the input up to its first NUL is
// TF_CONFIG; the fields after it, when present, are options->task_type and
// options->rpc_layer. Resolved as the TF_CONFIG source and as AUTO (which parses it
// to see whether it names a cluster, and forgets it when not).
#include "fuzz_resolver.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> f = fuzz::fields(data, size, 3);
  fuzz::set_environment({{"TF_CONFIG", &f[0]}});
  for (int source : {TPU_RESOLVER_TF_CONFIG, TPU_RESOLVER_AUTO}) {
    tpu_cluster_resolver_options o = fuzz::options(source);
    o.task_type = fuzz::or_null(f[1]);
    o.rpc_layer = fuzz::or_null(f[2]);
    fuzz::resolve(o);
  }
  return 0;
}
