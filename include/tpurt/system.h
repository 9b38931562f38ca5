/* tpurt/system.h: a TPU system, its logical cores and its topology.
 *
 * A system owns L logical cores, each a persistent worker thread named
 * "tpurt-core-N". One system may be live in a process at a time (like DTensor's
 * initialize_accelerator_system): a second tpu_system_init while one is live gives
 * TPU_ALREADY_EXISTS. After tpu_system_shutdown a new one may be initialised.
 */
#ifndef TPURT_SYSTEM_H
#define TPURT_SYSTEM_H

#include "common.h"
#include "topology.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_system tpu_system;

/* Default collective deadline: 5 minutes. */
#define TPU_DEFAULT_COLLECTIVE_TIMEOUT_MS 300000

/* Where the worker threads run (tpu_system_options.pin_threads). "Usable CPUs" are
 * those in the process's affinity mask (taskset, cpusets), in ascending order. */
typedef TPU_ENUM(tpu_thread_pinning) {
  /* Pin only when cores outnumber the usable CPUs: core N on usable CPU N mod C.
   * Replicas move in lockstep, so a step runs at the pace of its most crowded CPU;
   * an even, fixed split keeps it fast. */
  TPU_PIN_AUTO = 0,
  TPU_PIN_ALWAYS = 1, /* core N on usable CPU N mod C, whatever the counts */
  TPU_PIN_NEVER = 2   /* leave placement to the OS scheduler */
} tpu_thread_pinning;

/* Zero means default in every field: a struct filled with {sizeof o} and zeros
 * behaves exactly like TPU_SYSTEM_OPTIONS_INIT. */
typedef struct tpu_system_options {
  size_t struct_size;           /* sizeof(tpu_system_options) */
  int num_cores;                /* 0: environment TPURT_NUM_CORES, else the usable CPUs */
  int32_t mesh_shape[4];        /* all 0: [num_cores, 1, 1, 1]; else its product = num_cores */
  const char *job_name;         /* NULL: "localhost" */
  const char *device_type;      /* NULL: "TPU"; or "CPU" (case-insensitive) */
  int pin_threads;              /* a tpu_thread_pinning; 0 = TPU_PIN_AUTO */
  int64_t collective_timeout_ms; /* 0: TPU_DEFAULT_COLLECTIVE_TIMEOUT_MS; else > 0;
                                    INT64_MAX (any value past the clock's range): none */
  int close_on_failure;         /* 0 (default): a failed step leaves the system open, as
                                   TF2 does; nonzero: any failed step closes it, like
                                   compilation_failure_closes_chips. */
  const void *embedding_config; /* serialized TPUEmbeddingConfiguration, or NULL */
  size_t embedding_config_len;
  /* 0 (default): the members of a group (those on one task, when the system spans
   * several) share one buffer for the result of an all-reduce, cross_replica_sum,
   * all-gather or broadcast (copy-on-write, see tensor.h), written once. Nonzero: every member gets a private copy, as before
   * shared results (for comparison; each copy costs a write of the whole result). */
  int private_collective_results;
  /* (1.4) NULL (default): the environment's TPURT_TRACE, and no trace when it is unset
   * or empty. Else the file that receives a trace of every step in Chrome's
   * trace-event JSON (Perfetto and chrome://tracing open it; docs/TRACING.md): one
   * process per task, one thread per participant. "%t" in the path becomes the task
   * id; without it, a system of several tasks writes "<stem>.task<T><ext>". The file
   * is truncated at init (TPU_INVALID_ARGUMENT naming it when it cannot be written)
   * and complete once the system is shut down. */
  const char *trace_path;
} tpu_system_options;

#define TPU_SYSTEM_OPTIONS_INIT \
  { sizeof(tpu_system_options), 0, {0, 0, 0, 0}, NULL, NULL, 0, 0, 0, NULL, 0, 0, NULL }

/* Fills *options with the defaults (zeros) and struct_size. For bindings that cannot
 * use the macro. struct_size is the caller's sizeof: at least the first release's
 * size, at most this library's (TPU_INVALID_ARGUMENT naming both otherwise). */
TPU_API tpu_status tpu_system_options_init(tpu_system_options *options, size_t struct_size);

/* Starts a system: validates the options (TPU_INVALID_ARGUMENT naming the field),
 * starts one worker per logical core, and builds the topology: one task, devices
 * laid out on the mesh with core fastest, then x, y, z. options may be NULL
 * (defaults). Errors: TPU_ALREADY_EXISTS if a system is live; TPU_INVALID_ARGUMENT
 * for bad options or embedding configuration bytes, and for any TPURT_* environment
 * variable that tpu_environment_variable lists, and TPURT_TRANSPORT, whose value is
 * bad (not a decimal integer in its range, naming it and its value), whether or not
 * this system reads it. *out is the caller's; free it with tpu_system_release. */
TPU_API tpu_status tpu_system_init(const tpu_system_options *options, tpu_system **out);

/* tf.tpu.initialize_system: like tpu_system_init, and also writes the serialized
 * TopologyProto into topology[0..capacity) (a size query, topology NULL and
 * capacity 0, still starts the system). Nothing is started unless the call succeeds. */
TPU_API tpu_status tpu_initialize_system(const tpu_system_options *options, tpu_system **out,
                                         void *topology, size_t capacity, size_t *count);

/* Waits for work in flight, stops and joins the workers. Idempotent: a second call
 * (a shut-down system) returns TPU_OK, or TPU_DEADLINE_EXCEEDED while a late
 * computation still runs (below). Afterwards every other call on the system but
 * release gives TPU_FAILED_PRECONDITION. Must not be
 * called from inside a computation (TPU_FAILED_PRECONDITION).
 * Late computations (replicate.h) get up to the collective deadline to return; one
 * still running then gives TPU_DEADLINE_EXCEEDED naming it: the system is shut down
 * all the same, but that computation's thread and user_data stay in use until it
 * returns. Each call waits again, so TPU_OK means no computation is running. */
TPU_API tpu_status tpu_system_shutdown(tpu_system *system);

/* Shuts the system down if needed, as tpu_system_shutdown (same wait and status),
 * and frees it whatever the status. NULL is accepted. From inside a computation it
 * is refused (TPU_FAILED_PRECONDITION) and the handle stays valid. */
TPU_API tpu_status tpu_system_release(tpu_system *system);

TPU_API tpu_status tpu_system_num_cores(const tpu_system *system, int *out);

/* A new handle to the system's topology (release it). */
TPU_API tpu_status tpu_system_topology(const tpu_system *system, tpu_topology **out);

/* The serialized TopologyProto, exactly as TensorFlow's initialize_system returns it. */
TPU_API tpu_status tpu_system_serialized_topology(const tpu_system *system, void *out,
                                                  size_t capacity, size_t *count);

/* The job name and device type ("TPU" or "CPU") the system was started with. */
TPU_API tpu_status tpu_system_job_name(const tpu_system *system, char *out, size_t capacity,
                                       size_t *count);
TPU_API tpu_status tpu_system_device_type(const tpu_system *system, char *out, size_t capacity,
                                          size_t *count);

/* The data plane between the system's tasks, as `tpurt info` reports it: "none" (one
 * task: its replicas share this process's memory), "tcp", "shm" (tasks on one host,
 * through shared memory), "shm+tcp" (shared memory within a host, TCP between hosts)
 * or "mpi" (the MPI plugin). Other names may be added. */
TPU_API tpu_status tpu_system_transport(const tpu_system *system, char *out, size_t capacity,
                                        size_t *count);
/* Why that transport was chosen: one sentence for people (TPURT_TRANSPORT, the
 * launcher found, the hosts of the tasks...); its wording is not part of the ABI. */
TPU_API tpu_status tpu_system_transport_reason(const tpu_system *system, char *out,
                                               size_t capacity, size_t *count);

/* The embedding configuration bytes given at init (len 0 if none). */
TPU_API tpu_status tpu_system_embedding_config(const tpu_system *system, void *out, size_t capacity,
                                               size_t *count);

/* The device assignment tpu_replicate uses when given none: one core per replica,
 * replica i on device i. num_replicas must be 1 or the number of cores. */
TPU_API tpu_status tpu_system_default_device_assignment(const tpu_system *system,
                                                        int num_replicas,
                                                        tpu_device_assignment **out);

/* Nonzero once the system is shut down or closed by a failed step. */
TPU_API tpu_status tpu_system_is_closed(const tpu_system *system, int *out);

/* The environment variables the library reads, by index from 0: *name gets the
 * variable's name (a static string) and *value the value the library works with (the
 * variable's, or the default when it is unset or empty). TPU_OUT_OF_RANGE past the
 * last one; TPU_INVALID_ARGUMENT naming the variable and its value when it is not a
 * decimal integer in its range (tpu_system_init rejects such a value likewise). */
TPU_API tpu_status tpu_environment_variable(int index, const char **name, int64_t *value);

#ifdef __cplusplus
}
#endif

#endif /* TPURT_SYSTEM_H */
