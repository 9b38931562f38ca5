// Go's entry points into the one replica pool (bindings/replica_pool.hpp): each is one
// cgo call; the loop and the upcall are pool.go's.
#include "pool.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "replica_pool.hpp"

namespace {
using tpurt::ReplicaPool;
static_assert(TPURTGO_RUN == ReplicaPool::Seat::kRun && TPURTGO_STOP == ReplicaPool::Seat::kStop &&
                  TPURTGO_ENDED == ReplicaPool::Seat::kEnded,
              "pool.h's turns are the seat's");

void copy_message(const char* what, char* out, int capacity) {
  if (capacity <= 0) return;
  std::strncpy(out, what, static_cast<size_t>(capacity) - 1);
  out[capacity - 1] = '\0';
}
}  // namespace

extern "C" uintptr_t tpurtgo_pool_new(uintptr_t system, int cores, int* code, char* message, int capacity) {
  try {
    tpu_system* handle = reinterpret_cast<tpurt::TpuSystem*>(system)->handle();
    return reinterpret_cast<uintptr_t>(new ReplicaPool(handle, cores));
  } catch (const tpurt::Error& e) {
    *code = e.code() ? e.code() : TPU_UNKNOWN;
    copy_message(e.what(), message, capacity);
  } catch (const std::exception& e) {
    *code = TPU_INTERNAL;
    copy_message(e.what(), message, capacity);
  }
  return 0;
}

extern "C" void tpurtgo_pool_stop(uintptr_t pool) { reinterpret_cast<ReplicaPool*>(pool)->stop(); }

extern "C" void tpurtgo_pool_free(uintptr_t pool) { delete reinterpret_cast<ReplicaPool*>(pool); }

extern "C" int tpurtgo_pool_take_ended(uintptr_t pool, char* message, int capacity, int* cores, int max_cores,
                                       int* num_cores) {
  std::string why;
  std::vector<int> ended;
  const int code = reinterpret_cast<ReplicaPool*>(pool)->takeEnded(&why, &ended);
  *num_cores = 0;
  for (int c : ended)
    if (*num_cores < max_cores) cores[(*num_cores)++] = c;
  copy_message(why.c_str(), message, capacity);
  return code;
}

// 0 for a core out of the pool's range (pool.go never asks for one).
extern "C" uintptr_t tpurtgo_seat(uintptr_t pool, int core) {
  try {
    return reinterpret_cast<uintptr_t>(reinterpret_cast<ReplicaPool*>(pool)->seat(core));
  } catch (...) {
    return 0;
  }
}

extern "C" void tpurtgo_next(uintptr_t seat, int status, tpurtgo_turn* out) {
  auto* s = reinterpret_cast<ReplicaPool::Seat*>(seat);
  out->turn = s->next(status);
  if (out->turn != ReplicaPool::Seat::kRun) return;
  out->ctx = reinterpret_cast<uintptr_t>(&s->context());
  out->key = s->key();
  out->num_inputs = s->numInputs();
  out->num_outputs = s->numOutputs();
  out->replica_id = s->context().replicaId();
  out->logical_core = s->context().logicalCore();
}

extern "C" void tpurtgo_abandon(uintptr_t seat, int code, const char* message) {
  reinterpret_cast<ReplicaPool::Seat*>(seat)->abandon(code, message);
}

extern "C" void tpurtgo_seat_free(uintptr_t seat) { delete reinterpret_cast<ReplicaPool::Seat*>(seat); }

extern "C" tpurtgo_status tpurtgo_replicate_joined(uintptr_t system, int64_t key, int num_replicas, int num_inputs,
                                                   const uintptr_t* inputs, int num_outputs, uintptr_t* outputs,
                                                   int64_t collective_timeout_ms) {
  static_assert(sizeof(uintptr_t) == sizeof(tpurt::Tensor*), "Go passes tensors as uintptr_t");
  tpurtgo_status result{0, nullptr};
  try {
    tpu_system* handle = reinterpret_cast<tpurt::TpuSystem*>(system)->handle();
    result.code = tpurt::replicate_joined(handle, key, num_replicas, num_inputs,
                                          reinterpret_cast<tpurt::Tensor* const*>(inputs), num_outputs,
                                          reinterpret_cast<tpurt::Tensor**>(outputs), collective_timeout_ms);
    if (result.code != TPU_OK) result.message = strdup(tpu_last_error());
  } catch (const tpurt::Error& e) {
    result.code = e.code() ? e.code() : TPU_UNKNOWN;
    result.message = strdup(e.what());
  } catch (const std::exception& e) {
    result.code = TPU_INTERNAL;
    result.message = strdup(e.what());
  }
  return result;
}
