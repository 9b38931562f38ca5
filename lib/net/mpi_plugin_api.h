/* The C interface between libtpurt and its MPI plugin (libtpurt_mpi.so, make mpi).
 * libtpurt is built with hidden symbols and its own C++ runtime objects, so nothing
 * C++ crosses this boundary: plain structs, function pointers, tpu_status codes and
 * messages written into the caller's buffers. The plugin exports one function,
 * TPURT_MPI_PLUGIN_ENTRY, returning its table; the loader checks struct_size and
 * version before using a field. Fields are only ever appended within a version: a
 * table of at least TPURT_MPI_PLUGIN_BASE_SIZE bytes has every field up to abort, and
 * a later field is there when struct_size covers it (TPURT_MPI_PLUGIN_HAS).
 *
 * One thread at a time calls into a handle (MPI is initialised with at least
 * MPI_THREAD_SERIALIZED); the calling thread may change between calls. */
#ifndef TPURT_NET_MPI_PLUGIN_API_H_
#define TPURT_NET_MPI_PLUGIN_API_H_

#include <stddef.h>
#include <stdint.h>

#include "tpurt/collectives.h"
#include "tpurt/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPURT_MPI_PLUGIN_VERSION 1u
#define TPURT_MPI_PLUGIN_ENTRY "tpurt_mpi_plugin_v1"

typedef struct tpurt_mpi_handle tpurt_mpi_handle;

/* One transfer to or from a peer task (net::Send / net::Recv). Transfers between two
 * tasks are matched in the order each side lists them. */
typedef struct tpurt_mpi_transfer {
  int32_t peer;
  uint32_t tag;
  void *data; /* read only for a send */
  uint64_t bytes;
} tpurt_mpi_transfer;

/* How a wait is bounded and watched. check() is called between polls and returns
 * nonzero when the wait must stop (the caller keeps why: the call then returns
 * TPU_CANCELLED with an empty message). name() writes a task's description
 * ("task 1 (replicas 2, 3)") for messages. */
typedef struct tpurt_mpi_wait {
  int64_t deadline_ns; /* CLOCK_MONOTONIC */
  int (*check)(void *ctx);
  void (*name)(void *ctx, int task, char *buf, size_t size);
  void *ctx;
} tpurt_mpi_wait;

/* How a step ended on one task (net::StepOutcome). */
typedef struct tpurt_mpi_outcome {
  int32_t code;
  int32_t origin_replica;
  char *message; /* NUL-terminated; for a peer's outcome, the caller's buffer */
  size_t message_size;
} tpurt_mpi_outcome;

typedef struct tpurt_mpi_plugin {
  uint32_t struct_size; /* sizeof(tpurt_mpi_plugin) of the plugin's build */
  uint32_t version;     /* TPURT_MPI_PLUGIN_VERSION */

  /* The MPI library's version line, for messages and tpurt info. */
  const char *(*library_version)(void);

  /* Joins MPI (initialising it unless the program did) as rank task_id of
   * num_tasks. TPU_FAILED_PRECONDITION with why when MPI's world does not match. */
  tpu_status (*open)(int num_tasks, int task_id, tpurt_mpi_handle **out, char *why, size_t why_size);
  /* Releases the handle. MPI is finalised when the process exits, and only if open
   * initialised it (a program may start another TPU system; MPI cannot restart). */
  void (*close)(tpurt_mpi_handle *h);

  tpu_status (*begin_step)(tpurt_mpi_handle *h, uint64_t step, char *err, size_t err_size);
  /* Runs the sends and receives of collective seq (digest: its descriptor) until all
   * are done, wait says otherwise, or a peer ends the step without them. */
  tpu_status (*exchange)(tpurt_mpi_handle *h, uint64_t seq, uint64_t digest,
                         const tpurt_mpi_transfer *sends, size_t num_sends,
                         const tpurt_mpi_transfer *recvs, size_t num_recvs,
                         const tpurt_mpi_wait *wait, char *err, size_t err_size);
  /* Whether all_reduce takes dtype and op. */
  int (*can_all_reduce)(tpurt_mpi_handle *h, tpu_dtype dtype, tpu_reduce_op op);
  /* out = op over the tasks `tasks` (sorted, this one among them) of each one's
   * `in`, count elements; MEAN divides the sum by divisor. in and out do not alias. */
  tpu_status (*all_reduce)(tpurt_mpi_handle *h, uint64_t seq, uint64_t digest,
                           const int32_t *tasks, size_t num_tasks, tpu_dtype dtype,
                           tpu_reduce_op op, const void *in, void *out, uint64_t count,
                           int32_t divisor, const tpurt_mpi_wait *wait, char *err, size_t err_size);
  /* Tells every peer `mine` and learns theirs, bounded by timeout_ms (and wait's
   * check). *failed: a peer reported a failure, written to *remote. */
  tpu_status (*end_step)(tpurt_mpi_handle *h, const tpurt_mpi_outcome *mine, int64_t timeout_ms,
                         const tpurt_mpi_wait *wait, tpurt_mpi_outcome *remote, int *failed,
                         char *err, size_t err_size);
  /* Nonzero when an MPI operation of a failed wait is still in flight: MPI cannot
   * cancel it, so the process must end with abort() before its buffers are reused.
   * 1: only sends, which peers that end the step drain (end_step waits for that);
   * 2: a receive or a collective, which nothing completes. */
  int (*doomed)(tpurt_mpi_handle *h);
  /* MPI_Abort of every rank with errorcode. Does not return. */
  void (*abort)(tpurt_mpi_handle *h, int errorcode);

  /* Appended (struct_size covers it when the plugin has it). out (block elements) =
   * block i of op over the tasks `tasks` of each one's `in` (num_tasks blocks of
   * block elements, back to back), i this task's position in tasks; MEAN divides the
   * sum by divisor. Takes the dtypes and ops all_reduce takes. in and out do not alias. */
  tpu_status (*reduce_scatter)(tpurt_mpi_handle *h, uint64_t seq, uint64_t digest,
                               const int32_t *tasks, size_t num_tasks, tpu_dtype dtype,
                               tpu_reduce_op op, const void *in, void *out, uint64_t block,
                               int32_t divisor, const tpurt_mpi_wait *wait, char *err,
                               size_t err_size);

  /* Appended. A round of the vote on collective seq (ClusterCommunicator's ballots:
   * round 0, then, when they differ, round 1): sends and receives as exchange's, each
   * transfer's tag its round, on tags of their own (never matched with a collective's
   * data, which the vote leaves alone). A peer whose end of the step came saying that
   * it never sent this round (it ended the step without voting) is passed over:
   * skipped[i] = 1 for receive i from it, else 0. Bounded as exchange (deadline,
   * check); a peer that does not vote by the deadline is named. */
  tpu_status (*vote)(tpurt_mpi_handle *h, uint64_t seq, const tpurt_mpi_transfer *sends,
                     size_t num_sends, const tpurt_mpi_transfer *recvs, size_t num_recvs,
                     const tpurt_mpi_wait *wait, int32_t *skipped, char *err, size_t err_size);
  /* Appended with vote. Whether peer's end of this step has come (1, with its outcome
   * in *out; message: the caller's buffer) or not (0). */
  int (*peer_end)(tpurt_mpi_handle *h, int32_t peer, tpurt_mpi_outcome *out);
} tpurt_mpi_plugin;

/* The size of the first table of this version: every field up to abort. */
#define TPURT_MPI_PLUGIN_BASE_SIZE (offsetof(tpurt_mpi_plugin, abort) + sizeof(void (*)(void)))
/* Whether the plugin's table `api` has the appended field `field`. */
#define TPURT_MPI_PLUGIN_HAS(api, field) \
  ((api)->struct_size >= offsetof(tpurt_mpi_plugin, field) + sizeof((api)->field) && (api)->field != NULL)

typedef const tpurt_mpi_plugin *(*tpurt_mpi_plugin_entry)(void);

#ifdef __cplusplus
}
#endif

#endif /* TPURT_NET_MPI_PLUGIN_API_H_ */
