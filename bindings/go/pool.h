/* The Go side of the replica pool (bindings/replica_pool.hpp), declared for pool.go's
 * cgo preamble. Pointers travel as uintptr_t: a tpurt::TpuSystem*, a
 * tpurt::ReplicaPool*, a tpurt::ReplicaPool::Seat*, a tpurt::ReplicaContext*. */
#ifndef TPURT_GO_POOL_H
#define TPURT_GO_POOL_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
enum { TPURTGO_RUN = 0, TPURTGO_STOP = 1, TPURTGO_ENDED = 2 }; /* tpurt::ReplicaPool::Seat's turns */
typedef struct tpurtgo_turn {
  int turn; /* TPURTGO_RUN, TPURTGO_STOP or TPURTGO_ENDED */
  uintptr_t ctx;
  int64_t key;
  int num_inputs, num_outputs;
  int replica_id, logical_core; /* the participant's, so Go asks no cgo call for them */
} tpurtgo_turn;
/* A pool over `cores` cores of the system (0, and *code and message set, on failure). */
uintptr_t tpurtgo_pool_new(uintptr_t system, int cores, int* code, char* message, int capacity);
/* Stops the pool's goroutines (their joins are cancelled); returns once none joins. */
void tpurtgo_pool_stop(uintptr_t pool);
void tpurtgo_pool_free(uintptr_t pool);
/* The first join error since the last call (0: none), and the cores to serve again. */
int tpurtgo_pool_take_ended(uintptr_t pool, char* message, int capacity, int* cores, int max_cores, int* num_cores);
/* The calling thread's seat at `core`. */
uintptr_t tpurtgo_seat(uintptr_t pool, int core);
/* Leaves the seat's participant with `status`, then joins for the next: one crossing. */
void tpurtgo_next(uintptr_t seat, int status, tpurtgo_turn* out);
/* Fails the seat's participant with `message` and leaves (a goroutine that called
 * runtime.Goexit inside it). */
void tpurtgo_abandon(uintptr_t seat, int code, const char* message);
/* Frees the seat: the thread gets its CPUs back. */
void tpurtgo_seat_free(uintptr_t seat);
/* A step's status; message (malloc'd, the caller frees it) only when code is not 0. */
typedef struct tpurtgo_status {
  int code;
  char* message;
} tpurtgo_status;
/* Replicate's plain step (tpurt::replicate_joined) on the pool: one cgo call. inputs
 * and outputs are tpurt::Tensor* (outputs new, numReplicas * numOutputs). */
tpurtgo_status tpurtgo_replicate_joined(uintptr_t system, int64_t key, int num_replicas, int num_inputs,
                                        const uintptr_t* inputs, int num_outputs, uintptr_t* outputs,
                                        int64_t collective_timeout_ms);
#ifdef __cplusplus
}
#endif
#endif
