// The environment variables the library reads, and the one strict parser they share.
// Every variable holds a decimal integer in a documented range; anything else (a
// sign, spaces, a suffix, overflow) is rejected with a message naming the variable
// and its value. Set but empty counts as unset.
#pragma once

#include <cstdint>

namespace tpurt {

// Largest core count a system accepts (TPURT_NUM_CORES and options->num_cores).
constexpr int64_t kMaxCores = 4096;

enum class EnvVar {
  kNumCores,
  kYieldNs,
  kTensorCacheMb,
  kInitTimeoutMs,
  kHeartbeatIntervalMs,
  kHeartbeatTimeoutMs,
  kShutdownBarrierTimeoutMs,
  kShmRingBytes,
  kCount
};

// One row of the table of variables: its name, what its parser accepts (decimal
// digits in [min, max], a power of two if so marked), its default, and where it is
// read. tpu_system_init checks every row, whatever the system uses.
struct EnvVarInfo {
  const char* name;
  int64_t min, max;
  int64_t (*fallback)();  // the value when unset
  // Read once, at first use, by a hot path (else read where it is used, each time).
  bool read_once;
  bool power_of_two;  // the value must also be a power of two
  const char* read_by;  // where the library reads it, for people
};

// Decimal digits only, within [min, max]; false for anything else (a sign, spaces, a
// suffix, overflow). The one parser of numbers from the environment and peers' text.
bool parse_decimal(const char* text, uint64_t min, uint64_t max, uint64_t* out);

const EnvVarInfo& env_info(EnvVar var);

// The variable's current value, or its fallback when unset or empty. A bad value
// throws Error(TPU_INVALID_ARGUMENT) naming the variable, its value and the range.
int64_t env_value(EnvVar var);

// For hot paths: the value read once, at the first call. A bad value gives the
// fallback here, since a hot path cannot report it; tpu_system_init reports it
// (check_environment), so no step runs with it unnoticed.
int64_t env_value_cached(EnvVar var);

// The value the library works with: the cached one for variables read once, the
// current one otherwise. Throws like env_value for a bad current value.
int64_t env_effective(EnvVar var);

// Throws for the first variable of the table (and TPURT_TRANSPORT) with a bad value,
// whether or not this system will read it: tpu_system_init calls it, so a bad
// TPURT_* fails every init, not only the one that happens to use it.
void check_environment();

// TPURT_TRANSPORT: the data plane between a cluster's tasks. One of the words
// auto, tcp, shm, mpi (unset or empty: auto); anything else throws
// TPU_INVALID_ARGUMENT naming the value. check_environment checks it too.
enum class TransportChoice { kAuto, kTcp, kShm, kMpi };
TransportChoice env_transport();
const char* transport_choice_name(TransportChoice choice);

}  // namespace tpurt
