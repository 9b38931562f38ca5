#include "core/cpus.h"

#include <sched.h>
#include <unistd.h>

#include "tpurt/system.h"

namespace tpurt {

int online_cpus() {
  static const int n = [] {
    long v = sysconf(_SC_NPROCESSORS_ONLN);
    return v > 0 ? static_cast<int>(v) : 1;
  }();
  return n;
}

std::vector<int> usable_cpus() {
  std::vector<int> ids;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) ids.push_back(c);
  if (ids.empty())
    for (int c = 0; c < online_cpus(); ++c) ids.push_back(c);
  return ids;
}

int num_usable_cpus() { return static_cast<int>(usable_cpus().size()); }

std::vector<int> worker_placement(int mode, int num_threads) {
  std::vector<int> cpus = usable_cpus();
  const int n = static_cast<int>(cpus.size());
  // Replicas of a step move in lockstep, so a step is as fast as its most crowded
  // CPU; left to the OS, 8 yielding workers on 2 CPUs drift into 5/3 or 6/2 splits.
  bool pin = mode == TPU_PIN_ALWAYS || (mode == TPU_PIN_AUTO && num_threads > n);
  std::vector<int> placement;
  if (!pin) return placement;
  for (int i = 0; i < num_threads; ++i) placement.push_back(cpus[i % n]);
  return placement;
}

}  // namespace tpurt
