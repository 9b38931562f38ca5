// The CPUs this process may run on. Spin-or-yield decisions and worker placement
// follow the affinity mask (taskset, cgroup cpusets), not the machine's CPU count:
// two threads spinning on one allowed CPU would stall each other.
#pragma once

#include <vector>

namespace tpurt {

// CPUs the kernel has online (sysconf), cached.
int online_cpus();
// Ids of the CPUs in this thread's affinity mask, ascending; never empty.
std::vector<int> usable_cpus();
int num_usable_cpus();

// Where each of num_threads workers runs: an empty vector leaves placement to the
// OS; otherwise worker i is pinned to cpu[i]. `mode` is a tpu_thread_pinning.
std::vector<int> worker_placement(int mode, int num_threads);

}  // namespace tpurt
