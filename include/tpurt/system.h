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

typedef struct tpu_system_options {
  size_t struct_size;           /* sizeof(tpu_system_options) */
  int num_cores;                /* 0: environment TPURT_NUM_CORES, else the online CPUs */
  int32_t mesh_shape[4];        /* all 0: [num_cores, 1, 1, 1]; else its product = num_cores */
  const char *job_name;         /* NULL: "localhost" */
  const char *device_type;      /* NULL: "TPU"; or "CPU" (case-insensitive) */
  int pin_threads;              /* a tpu_thread_pinning; default TPU_PIN_AUTO */
  int64_t collective_timeout_ms; /* 0: TPU_DEFAULT_COLLECTIVE_TIMEOUT_MS; must be > 0 */
  int close_on_failure;         /* nonzero: a failed step closes the system
                                   (compilation_failure_closes_chips); default 1 */
  const void *embedding_config; /* serialized TPUEmbeddingConfiguration, or NULL */
  size_t embedding_config_len;
  /* 0 (default): the members of a group share one buffer for the result of an
   * all-reduce, cross_replica_sum, all-gather or broadcast (copy-on-write, see
   * tensor.h), written once. Nonzero: every member gets a private copy, as before
   * shared results (for comparison; each copy costs a write of the whole result). */
  int private_collective_results;
} tpu_system_options;

#define TPU_SYSTEM_OPTIONS_INIT \
  { sizeof(tpu_system_options), 0, {0, 0, 0, 0}, NULL, NULL, 0, 0, 1, NULL, 0, 0 }

/* Fills *options with the defaults; struct_size is the caller's sizeof. For bindings
 * that cannot use the macro. */
TPU_API tpu_status tpu_system_options_init(tpu_system_options *options, size_t struct_size);

/* Starts a system: validates the options (TPU_INVALID_ARGUMENT naming the field),
 * starts one worker per logical core, and builds the topology: one task, devices
 * laid out on the mesh with core fastest, then x, y, z. options may be NULL
 * (defaults). Errors: TPU_ALREADY_EXISTS if a system is live; TPU_INVALID_ARGUMENT
 * for bad options or embedding configuration bytes. *out is the caller's; free it
 * with tpu_system_release. */
TPU_API tpu_status tpu_system_init(const tpu_system_options *options, tpu_system **out);

/* tf.tpu.initialize_system: like tpu_system_init, and also writes the serialized
 * TopologyProto into buf (size query: buf NULL, cap 0 still starts the system). */
TPU_API tpu_status tpu_initialize_system(const tpu_system_options *options, tpu_system **out,
                                         void *buf, size_t cap, size_t *len);

/* Waits for work in flight, stops and joins the workers. Idempotent. Afterwards
 * every call on the system but release gives TPU_FAILED_PRECONDITION. Must not be
 * called from inside a computation (TPU_FAILED_PRECONDITION). */
TPU_API tpu_status tpu_system_shutdown(tpu_system *system);

/* Shuts the system down if needed and frees it. NULL is accepted. */
TPU_API tpu_status tpu_system_release(tpu_system *system);

TPU_API tpu_status tpu_system_num_cores(const tpu_system *system, int *out);

/* A new handle to the system's topology (release it). */
TPU_API tpu_status tpu_system_topology(const tpu_system *system, tpu_topology **out);

/* The serialized TopologyProto, exactly as TensorFlow's initialize_system returns it. */
TPU_API tpu_status tpu_system_serialized_topology(const tpu_system *system, void *buf,
                                                  size_t cap, size_t *len);

/* The job name and device type ("TPU" or "CPU") the system was started with. */
TPU_API tpu_status tpu_system_job_name(const tpu_system *system, char *buf, size_t cap,
                                       size_t *len);
TPU_API tpu_status tpu_system_device_type(const tpu_system *system, char *buf, size_t cap,
                                          size_t *len);

/* The embedding configuration bytes given at init (len 0 if none). */
TPU_API tpu_status tpu_system_embedding_config(const tpu_system *system, void *buf, size_t cap,
                                               size_t *len);

/* The device assignment tpu_replicate uses when given none: one core per replica,
 * replica i on device i. num_replicas must be 1 or the number of cores. */
TPU_API tpu_status tpu_system_default_device_assignment(const tpu_system *system,
                                                        int num_replicas,
                                                        tpu_device_assignment **out);

/* Nonzero once the system is shut down or closed by a failed step. */
TPU_API tpu_status tpu_system_is_closed(const tpu_system *system, int *out);

#ifdef __cplusplus
}
#endif

#endif /* TPURT_SYSTEM_H */
