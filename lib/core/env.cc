#include "core/env.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>

#include "core/cpus.h"
#include "core/status.h"

namespace tpurt {
namespace {

int64_t online_cores() { return std::min<int64_t>(online_cpus(), kMaxCores); }
int64_t default_yield_ns() { return 20000; }
// 256 MiB: an 8-replica 16 MiB all-reduce, the benchmarks' steady state, frees 8
// outputs of 20 MiB (the size class of 16 MiB plus the header) per call, 160 MiB;
// keeping them makes its calls fault-free. A block larger or rarer than that is
// worth one mmap and its page faults next to the work done with it.
int64_t default_tensor_cache_mb() { return 256; }
// Joining a cluster waits for the slowest task to start: 5 minutes.
int64_t default_init_timeout_ms() { return 300000; }
// A closed connection is a lost task at once; heartbeats only catch a task that is
// stopped or whose host vanished. XLA's 10 s timeout, but a beat every second (not
// every 5 s): ten beats must go missing, not two, and a beat costs a few bytes.
int64_t default_heartbeat_interval_ms() { return 1000; }
int64_t default_heartbeat_timeout_ms() { return 10000; }
int64_t default_shutdown_barrier_timeout_ms() { return 60000; }
// 0: the shared-memory transport sizes its rings by the cluster (net/shm_segment.cc).
int64_t default_shm_ring_bytes() { return 0; }

const EnvVarInfo kVars[] = {
    {"TPURT_NUM_CORES", 1, kMaxCores, online_cores, false, false,
     "by tpu_system_init when options->num_cores is 0, and by cluster resolvers"},
    {"TPURT_YIELD_NS", 0, 1000000000, default_yield_ns, true, false,
     "once, by the first wait of a collective"},
    {"TPURT_TENSOR_CACHE_MB", 0, int64_t(1) << 20, default_tensor_cache_mb, true, false,
     "once, by the first freed tensor buffer"},
    {"TPURT_INIT_TIMEOUT_MS", 1, int64_t(1) << 40, default_init_timeout_ms, false, false,
     "when a task joins a cluster"},
    {"TPURT_HEARTBEAT_INTERVAL_MS", 1, int64_t(1) << 40, default_heartbeat_interval_ms, false, false,
     "when a task joins a cluster"},
    {"TPURT_HEARTBEAT_TIMEOUT_MS", 1, int64_t(1) << 40, default_heartbeat_timeout_ms, false, false,
     "when a task joins a cluster"},
    {"TPURT_SHUTDOWN_BARRIER_TIMEOUT_MS", 1, int64_t(1) << 40, default_shutdown_barrier_timeout_ms,
     false, false, "when a task joins a cluster"},
    {"TPURT_SHM_RING_BYTES", 4096, int64_t(64) << 20, default_shm_ring_bytes, false, true,
     "when tasks on one host connect over shared memory"},
};
static_assert(sizeof kVars / sizeof kVars[0] == static_cast<size_t>(EnvVar::kCount),
              "one entry per EnvVar");

// Parses the current value; *bad gets the text of a value that does not parse.
int64_t read_var(EnvVar var, const char** bad) {
  const EnvVarInfo& info = env_info(var);
  const char* text = std::getenv(info.name);
  *bad = nullptr;
  if (text == nullptr || *text == '\0') return info.fallback();
  uint64_t v;
  if (parse_decimal(text, static_cast<uint64_t>(info.min), static_cast<uint64_t>(info.max), &v) &&
      (!info.power_of_two || (v & (v - 1)) == 0))
    return static_cast<int64_t>(v);
  *bad = text;
  return info.fallback();
}

}  // namespace

bool parse_decimal(const char* text, uint64_t min, uint64_t max, uint64_t* out) {
  if (*text == '\0') return false;
  uint64_t v = 0;
  for (const char* p = text; *p; ++p) {
    if (*p < '0' || *p > '9') return false;
    const uint64_t digit = static_cast<uint64_t>(*p - '0');
    if (v > (max - digit) / 10) return false;  // above max, and no overflow
    v = v * 10 + digit;
  }
  if (v < min) return false;
  *out = v;
  return true;
}

const EnvVarInfo& env_info(EnvVar var) { return kVars[static_cast<int>(var)]; }

int64_t env_value(EnvVar var) {
  const char* bad;
  int64_t v = read_var(var, &bad);
  if (bad) {
    const EnvVarInfo& info = env_info(var);
    invalid_argument("environment variable ", info.name, "='", bad, "' is not a decimal integer",
                     info.power_of_two ? " power of two" : "", " in [", info.min, ", ", info.max,
                     "] (read ", info.read_by, ")");
  }
  return v;
}

int64_t env_value_cached(EnvVar var) {
  static const auto values = [] {
    std::array<int64_t, static_cast<size_t>(EnvVar::kCount)> v;
    for (size_t i = 0; i < v.size(); ++i) {
      const char* bad;
      v[i] = read_var(static_cast<EnvVar>(i), &bad);
    }
    return v;
  }();
  return values[static_cast<int>(var)];
}

int64_t env_effective(EnvVar var) {
  int64_t current = env_value(var);
  return env_info(var).read_once ? env_value_cached(var) : current;
}

void check_environment() {
  for (int i = 0; i < static_cast<int>(EnvVar::kCount); ++i) env_value(static_cast<EnvVar>(i));
  env_transport();
}

namespace {
const char* const kTransportWords[] = {"auto", "tcp", "shm", "mpi"};
}  // namespace

const char* transport_choice_name(TransportChoice choice) {
  return kTransportWords[static_cast<int>(choice)];
}

TransportChoice env_transport() {
  const char* text = std::getenv("TPURT_TRANSPORT");
  if (text == nullptr || *text == '\0') return TransportChoice::kAuto;
  for (int i = 0; i < 4; ++i)
    if (std::strcmp(text, kTransportWords[i]) == 0) return static_cast<TransportChoice>(i);
  invalid_argument("environment variable TPURT_TRANSPORT='", text,
                   "' is not one of auto, tcp, shm, mpi");
}

}  // namespace tpurt
