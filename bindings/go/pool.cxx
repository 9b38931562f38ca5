// The pool's one crossing per step (pool.go): leave the participant a pool goroutine
// ran, then join its core for the next, in a single cgo call.
#include <pthread.h>
#include <sched.h>

#include <cstring>

#include "pool.h"
#include "tpurt_binding.hpp"

namespace {
void leave(uintptr_t step, int status) {
  if (step == 0) return;
  auto* joined = reinterpret_cast<tpurt::JoinedStep*>(step);
  try {
    if (!joined->hasLeft()) joined->leave(static_cast<tpurt::Status>(status));
  } catch (...) {
    // The participant has ended either way (tpu_step_leave fails it on a wrong count).
  }
  delete joined;
}
}  // namespace

extern "C" void tpurtgo_leave_join(uintptr_t system, uintptr_t step, int status, int core,
                                   int64_t timeout_ms, tpurtgo_joined* out) {
  leave(step, status);
  out->step = 0;
  out->ctx = 0;
  out->code = 0;
  out->message[0] = '\0';
  try {
    tpurt::JoinedStep* joined = reinterpret_cast<tpurt::TpuSystem*>(system)->stepJoin(core, timeout_ms);
    out->step = reinterpret_cast<uintptr_t>(joined);
    out->ctx = reinterpret_cast<uintptr_t>(&joined->context());
    out->key = joined->userData();
    out->num_inputs = joined->numInputs();
    out->num_outputs = joined->numOutputs();
  } catch (const tpurt::Error& e) {
    out->code = e.code() ? e.code() : TPU_UNKNOWN;
    std::strncpy(out->message, e.what(), sizeof out->message - 1);
    out->message[sizeof out->message - 1] = '\0';
  } catch (...) {
    out->code = TPU_INTERNAL;
    std::strncpy(out->message, "tpu_step_join threw a non-standard exception", sizeof out->message - 1);
  }
}

extern "C" void tpurtgo_leave(uintptr_t step, int status) { leave(step, status); }

// Pinned as the library pins its workers (lib/core/cpus.cc): round-robin over the
// usable CPUs when the cores outnumber them. Replicas move in lockstep, and left to
// the OS, 8 yielding threads on 2 CPUs drift into 5/3 or 6/2 splits.
static thread_local cpu_set_t t_unpinned;
static thread_local bool t_pinned = false;

extern "C" void tpurtgo_pin(int core, int cores) {
  cpu_set_t usable;
  if (sched_getaffinity(0, sizeof usable, &usable) != 0) return;
  const int n = CPU_COUNT(&usable);
  if (n == 0 || cores <= n) return;
  int k = core % n, cpu = -1;
  for (int c = 0; c < CPU_SETSIZE && cpu < 0; ++c)
    if (CPU_ISSET(c, &usable) && k-- == 0) cpu = c;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0) {  // best effort
    t_unpinned = usable;
    t_pinned = true;
  }
}

extern "C" void tpurtgo_unpin(void) {
  if (!t_pinned) return;
  pthread_setaffinity_np(pthread_self(), sizeof t_unpinned, &t_unpinned);
  t_pinned = false;
}
