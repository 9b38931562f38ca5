/* The pool's C helpers (pool.cxx), declared for pool.go's cgo preamble. Pointers
 * travel as uintptr_t: a tpurt::TpuSystem*, a tpurt::JoinedStep*, its ReplicaContext*. */
#ifndef TPURT_GO_POOL_H
#define TPURT_GO_POOL_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
typedef struct tpurtgo_joined {
  uintptr_t step; /* 0 when the join failed */
  uintptr_t ctx;
  int64_t key;
  int num_inputs, num_outputs;
  int code; /* the join's tpu_status */
  char message[200];
} tpurtgo_joined;
/* Leaves `step` (0: none) with `status` and frees it, then joins `core`. */
void tpurtgo_leave_join(uintptr_t system, uintptr_t step, int status, int core, int64_t timeout_ms,
                        tpurtgo_joined* out);
/* Leaves `step` with `status` and frees it. */
void tpurtgo_leave(uintptr_t step, int status);
/* Pins the calling thread for `core` of `cores` when the cores outnumber the usable
 * CPUs (as the library's workers); unpin restores the thread's CPUs before it goes
 * back to the Go scheduler. */
void tpurtgo_pin(int core, int cores);
void tpurtgo_unpin(void);
#ifdef __cplusplus
}
#endif
#endif
