// Slurm's lists under libFuzzer (tests/fuzz/fuzz.mk): NUL-separated
// SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NUM_TASKS, SLURM_PROCID,
// SLURM_JOB_ID and SLURM_LOCALID. The two lists go to their expanders directly (which
// must stay within kMaxHosts), then all of it to the Slurm resolver.
#include <cstdlib>

#include "cluster/hostlist.h"
#include "fuzz_resolver.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> f = fuzz::fields(data, size, 6);
  try {
    if (tpurt::expand_hostlist(f[0], "SLURM_STEP_NODELIST").size() > tpurt::kMaxHosts) std::abort();
  } catch (const tpurt::Error&) {
  }
  try {
    if (tpurt::expand_tasks_per_node(f[1], "SLURM_STEP_TASKS_PER_NODE").size() > tpurt::kMaxHosts)
      std::abort();
  } catch (const tpurt::Error&) {
  }
  fuzz::set_environment({{"SLURM_STEP_NODELIST", &f[0]},
                         {"SLURM_STEP_TASKS_PER_NODE", &f[1]},
                         {"SLURM_STEP_NUM_TASKS", &f[2]},
                         {"SLURM_PROCID", &f[3]},
                         {"SLURM_JOB_ID", &f[4]},
                         {"SLURM_LOCALID", f[5].empty() ? nullptr : &f[5]}});
  fuzz::resolve(fuzz::options(TPU_RESOLVER_SLURM));
  return 0;
}
