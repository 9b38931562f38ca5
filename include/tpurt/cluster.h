/* tpurt/cluster.h: many tasks as one TPU system. Cluster resolution (TensorFlow's
 * TPUClusterResolver, TFConfigClusterResolver, SlurmClusterResolver, DTensor's
 * DTENSOR_* variables, Open MPI launches), the entry points that join the tasks
 * (initialize_tpu_system, DTensor's initialize_accelerator_system), and the
 * coordination service's key-value store and barriers.
 *
 * The model is multi-client SPMD, as in DTensor and multi-process JAX: every task
 * runs the same program, owns its local cores, and calls tpu_replicate with the
 * inputs of its own replicas; collectives span every task. Task 0 hosts the
 * coordination service; every task listens on its own address from the cluster spec.
 */
#ifndef TPURT_CLUSTER_H
#define TPURT_CLUSTER_H

#include "tpurt/common.h"
#include "tpurt/system.h"
#include "tpurt/topology.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Cluster resolution ------------------------------------------------------ */

/* A resolver is a snapshot: the environment is read once, by tpu_cluster_resolver_create
 * (TensorFlow's TFConfigClusterResolver re-reads TF_CONFIG on every access; create a
 * new resolver to re-read). Addresses are host:port with a port in [1, 65535], IPv6
 * as [addr]:port; a malformed one is TPU_INVALID_ARGUMENT naming it and the variable
 * or field it came from, and so is an address listed twice in one job. Launcher
 * variables set but empty count as unset, except DTENSOR_JOBS, DTENSOR_CLIENT_ID and
 * DTENSOR_JOB_NAME, which DTensor reads as given. */
typedef struct tpu_cluster_resolver tpu_cluster_resolver;

/* Where a resolver takes the cluster from. */
typedef TPU_ENUM(tpu_resolver_source) {
  /* DTENSOR_JOBS if set, else TF_CONFIG if it names a cluster (a malformed TF_CONFIG
   * is an error, not skipped), else a Slurm step (SLURM_JOB_ID), else an Open MPI
   * launch (OMPI_COMM_WORLD_SIZE), else the TPU name (options->tpu, then
   * KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS, TPU_NAME), else "local". */
  TPU_RESOLVER_AUTO = 0,
  /* TPUClusterResolver: options->tpu, else KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS, else
   * TPU_NAME. "local": this process alone. "grpc://h[:p][,grpc://h2[:p]...]": job
   * job_name (default "worker") of those endpoints, port 8470 by default, task 0.
   * Any other name is a Cloud TPU node: TPU_NOT_FOUND (tpurt has no Cloud TPU API).
   * Nothing set: TPU_INVALID_ARGUMENT "Please provide a TPU Name to connect to." */
  TPU_RESOLVER_TPU = 1,
  /* TFConfigClusterResolver: TF_CONFIG's cluster (jobs as lists of host:port, or as
   * objects index -> host:port for sparse jobs), task.type, task.index (absent: 0),
   * rpc_layer, session_master. Malformed JSON or a field of the wrong type is
   * TPU_INVALID_ARGUMENT naming it; so is a task that is not in the cluster, and a
   * cluster of more than 2^20 task slots (a sparse job counts up to its largest
   * index). No cluster (or TF_CONFIG unset) gives a local resolver. A cluster without
   * task.type resolves (job name "", master() ""), as in TensorFlow, but cannot start a
   * system. */
  TPU_RESOLVER_TF_CONFIG = 2,
  /* DTENSOR_JOBS (host:port per client, index = client id), DTENSOR_CLIENT_ID (default
   * 0; 0 <= id < clients), DTENSOR_JOB_NAME (default "localhost" for one client, else
   * "worker"; options->job_name wins; set but empty it is "", as DTensor's job_name(),
   * and cannot start a system). In local mode too the job names the system's devices. DTENSOR_NUM_CLIENTS is ignored, as DTensor
   * removed it. /bns/ entries and DTENSOR_USE_PARALLEL_EXECUTOR=pw (Pathways) are
   * TPU_UNIMPLEMENTED. One client is a one-task cluster, not local; DTENSOR_JOBS set
   * but empty is DTensor's local mode (one client, id 0, job "localhost"). */
  TPU_RESOLVER_DTENSOR = 3,
  /* SlurmClusterResolver: SLURM_PROCID, SLURM_STEP_NUM_TASKS (or SLURM_NTASKS),
   * SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST), SLURM_STEP_TASKS_PER_NODE (or
   * SLURM_TASKS_PER_NODE), SLURM_LOCALID (optional, checked). One job (job_name,
   * default "worker"); hosts in Slurm's order (its rank order, where TensorFlow
   * sorts them) with zero padding kept (n[01-02] is n01, n02); task i of a host
   * listens on port_base + i; task_id = SLURM_PROCID. The coordinator is the first
   * host at port 61440 + SLURM_JOB_ID % 4096, as JAX picks it. A host list expands
   * to at most 65536 hosts, each name at most 253 characters. */
  TPU_RESOLVER_SLURM = 4,
  /* OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK (required), _LOCAL_SIZE. Open MPI does
   * not tell a rank where the others run: TPURT_TASK_ADDRESSES (host:port, comma-
   * separated, in rank order) lists them; without it every rank must be on this host
   * (_LOCAL_SIZE == _SIZE) and rank i is 127.0.0.1:port_base + i. The coordinator:
   * options->coordinator_address, else TPURT_COORDINATOR_ADDRESS, else JAX's pick
   * from OMPI_MCA_orte_hnp_uri, else task 0. */
  TPU_RESOLVER_OPENMPI = 5
} tpu_resolver_source;

/* Zero/NULL means default in every field. */
typedef struct tpu_cluster_resolver_options {
  size_t struct_size;              /* sizeof(tpu_cluster_resolver_options) */
  int source;                      /* a tpu_resolver_source; 0 = AUTO */
  const char *tpu;                 /* TPU source: NULL/"" environment, "local",
                                      "grpc://host[:port][,grpc://...]" (port 8470) */
  const char *job_name;            /* NULL: the source's default ("worker"; DTensor's
                                      rules). TF_CONFIG takes task_type instead */
  const char *coordinator_name;    /* an extra job in the cluster spec ... */
  const char *coordinator_address; /* ... at this host:port (also the service's address).
                                      A name needs an address (tpurt starts no server
                                      for it); a local resolver ignores both */
  const char *task_type;           /* TF_CONFIG: overrides task.type */
  int task_id;                     /* TF_CONFIG: overrides task.index when >= 0; -1 = none.
                                      0 with task_type NULL also means none. */
  const char *rpc_layer;           /* overrides TF_CONFIG's rpc_layer, and the other
                                      sources' "grpc" (the TPU source always says grpc) */
  const char *environment;         /* the `environment` property; NULL = "" */
  int port_base;                   /* Slurm and Open MPI: 0 = 8888 */
} tpu_cluster_resolver_options;

#define TPU_CLUSTER_RESOLVER_OPTIONS_INIT \
  { sizeof(tpu_cluster_resolver_options), 0, NULL, NULL, NULL, NULL, NULL, -1, NULL, NULL, 0 }

/* Like TPU_CLUSTER_RESOLVER_OPTIONS_INIT: zeros, struct_size, task_id -1. */
TPU_API tpu_status tpu_cluster_resolver_options_init(tpu_cluster_resolver_options *options,
                                                     size_t struct_size);

/* Resolves the cluster now (options NULL: all defaults). Errors as TensorFlow raises
 * them: TPU_INVALID_ARGUMENT for malformed input (TF_CONFIG, host lists, a client id
 * out of range, duplicate addresses, missing launcher variables) naming the value;
 * TPU_NOT_FOUND for a Cloud TPU name, which needs a cloud API tpurt does not have,
 * naming the sources tried; TPU_UNIMPLEMENTED for Pathways and /bns/ addresses. */
TPU_API tpu_status tpu_cluster_resolver_create(const tpu_cluster_resolver_options *options,
                                               tpu_cluster_resolver **out);
TPU_API tpu_status tpu_cluster_resolver_release(tpu_cluster_resolver *resolver);

/* The source that resolved it (never AUTO; AUTO's "local" is TPU_RESOLVER_TPU). */
TPU_API tpu_status tpu_cluster_resolver_source(const tpu_cluster_resolver *resolver, int *out);
/* The TPU name: "local", the grpc:// string, DTENSOR_JOBS for DTensor, and "TF_CONFIG",
 * "slurm" or "openmpi" for the others. */
TPU_API tpu_status tpu_cluster_resolver_tpu_name(const tpu_cluster_resolver *resolver, char *out,
                                                 size_t capacity, size_t *count);
/* cluster_spec() as JSON, compact with sorted keys: {"job": ["host:port", ...], ...}, a
 * sparse TF_CONFIG job as {"index": "host:port", ...}; "{}" when local. */
TPU_API tpu_status tpu_cluster_resolver_cluster_spec(const tpu_cluster_resolver *resolver,
                                                     char *out, size_t capacity, size_t *count);
/* The number of tasks of `job` (NULL: the resolver's job); TPU_NOT_FOUND for an
 * unknown job (every job when local). */
TPU_API tpu_status tpu_cluster_resolver_num_tasks(const tpu_cluster_resolver *resolver,
                                                  const char *job, int *out);
/* host:port of task `task_id` of `job` (NULL: the resolver's job); TPU_NOT_FOUND for
 * an unknown job or index. */
TPU_API tpu_status tpu_cluster_resolver_task_address(const tpu_cluster_resolver *resolver,
                                                     const char *job, int task_id, char *out,
                                                     size_t capacity, size_t *count);
/* master(task_type, task_id, rpc_layer): NULL/-1 mean the resolver's own. TF_CONFIG's
 * session_master verbatim if given; else "" when local, or when TF_CONFIG names no
 * task.type and task_type is NULL. TPU source: "grpc://" + the
 * task's address (rpc_layer ignored, as TensorFlow's TPUClusterResolver ignores it).
 * TF_CONFIG: "" for a cluster of one job with one
 * task; else rpc_layer + "://" + address, or the bare address when the rpc layer is
 * "". The others: as TF_CONFIG without session_master. A task not in the spec is
 * TPU_INVALID_ARGUMENT ("No such job in cluster", "No task with index"), as
 * TensorFlow's ClusterSpec.task_address raises ValueError. */
TPU_API tpu_status tpu_cluster_resolver_master(const tpu_cluster_resolver *resolver,
                                               const char *task_type, int task_id,
                                               const char *rpc_layer, char *out,
                                               size_t capacity, size_t *count);
/* get_master(): master() with the resolver's own task type, task id and rpc layer. */
TPU_API tpu_status tpu_cluster_resolver_get_master(const tpu_cluster_resolver *resolver,
                                                   char *out, size_t capacity, size_t *count);
/* get_job_name() (= task_type), task_id, rpc_layer and environment. */
TPU_API tpu_status tpu_cluster_resolver_job_name(const tpu_cluster_resolver *resolver, char *out,
                                                 size_t capacity, size_t *count);
TPU_API tpu_status tpu_cluster_resolver_task_id(const tpu_cluster_resolver *resolver, int *out);
TPU_API tpu_status tpu_cluster_resolver_rpc_layer(const tpu_cluster_resolver *resolver, char *out,
                                                  size_t capacity, size_t *count);
TPU_API tpu_status tpu_cluster_resolver_environment(const tpu_cluster_resolver *resolver,
                                                    char *out, size_t capacity, size_t *count);
/* The coordination service's host:port: coordinator_address when given, else the
 * source's choice (Slurm and Open MPI above), else task 0's address of the resolver's
 * job (TF_CONFIG: of "chief", else "worker", else the first job by name); "" when
 * local. */
TPU_API tpu_status tpu_cluster_resolver_coordinator_address(const tpu_cluster_resolver *resolver,
                                                            char *out, size_t capacity,
                                                            size_t *count);
/* num_accelerators(): the logical cores of each task, as tpu_system_init would give
 * them: TPURT_NUM_CORES (read at each call; a bad value is TPU_INVALID_ARGUMENT),
 * else its default. */
TPU_API tpu_status tpu_cluster_resolver_num_accelerators(const tpu_cluster_resolver *resolver,
                                                         int *out);
/* num_accelerators(task_type, task_id): the logical cores of that task (NULL/-1: the
 * resolver's own). The task must be in the spec: TPU_INVALID_ARGUMENT as master()
 * (a local resolver has only its own task and ignores both). Every task of a system has
 * the same cores (tpu_initialize_tpu_system refuses others, as TPUClusterResolver
 * checks), so the count is the one tpu_cluster_resolver_num_accelerators gives; no
 * task is contacted. */
TPU_API tpu_status tpu_cluster_resolver_task_num_accelerators(
    const tpu_cluster_resolver *resolver, const char *task_type, int task_id, int *out);
/* The context manager: enter and exit nest; exit without enter is
 * TPU_FAILED_PRECONDITION. */
TPU_API tpu_status tpu_cluster_resolver_enter(tpu_cluster_resolver *resolver);
TPU_API tpu_status tpu_cluster_resolver_exit(tpu_cluster_resolver *resolver);

/* ---- Joining the tasks ------------------------------------------------------- */

/* How the tasks join. Zero means default in every field; the defaults can also be
 * set by the environment (TPURT_INIT_TIMEOUT_MS, TPURT_HEARTBEAT_INTERVAL_MS,
 * TPURT_HEARTBEAT_TIMEOUT_MS, TPURT_CLUSTER_TOKEN). */
typedef struct tpu_cluster_options {
  size_t struct_size;                  /* sizeof(tpu_cluster_options) */
  int64_t init_timeout_ms;             /* 0: 300000. Connecting and registering */
  int64_t heartbeat_interval_ms;       /* 0: 1000 */
  int64_t heartbeat_timeout_ms;        /* 0: 10000, as XLA's coordination service */
  int64_t shutdown_barrier_timeout_ms; /* 0: 60000; every task waits for the others */
  const char *token;                   /* NULL: TPURT_CLUSTER_TOKEN; "" no authentication */
} tpu_cluster_options;

#define TPU_CLUSTER_OPTIONS_INIT { sizeof(tpu_cluster_options), 0, 0, 0, 0, NULL }

TPU_API tpu_status tpu_cluster_options_init(tpu_cluster_options *options, size_t struct_size);

/* tf.tpu.experimental.initialize_tpu_system(cluster_resolver): joins this task to
 * the resolver's cluster (NULL: a resolver with default options) and starts its
 * part of the system; returns when every task has registered and the global
 * topology is known. A local resolver gives a one-task system, as tpu_system_init.
 * system_options: this task's cores and step behaviour (NULL: defaults); every task
 * must have the same number of cores. *topology (may be NULL) gets the global
 * topology, byte-identical on every task. Errors: TPU_DEADLINE_EXCEEDED naming the
 * tasks that did not register; TPU_UNAUTHENTICATED for a token mismatch;
 * TPU_INVALID_ARGUMENT for a cluster this task is not part of. */
TPU_API tpu_status tpu_initialize_tpu_system(const tpu_cluster_resolver *resolver,
                                             const tpu_system_options *system_options,
                                             const tpu_cluster_options *cluster_options,
                                             tpu_system **system, tpu_topology **topology);

/* DTensor's initialize_accelerator_system: resolves from DTENSOR_* (local mode
 * when DTENSOR_JOBS is unset). device_type: NULL for the preferred ("TPU"), else
 * "CPU", "GPU" or "TPU" (case-insensitive; GPU is TPU_INVALID_ARGUMENT: there are
 * none). enable_coordination_service: nonzero as DTensor's default; zero is
 * TPU_INVALID_ARGUMENT when DTENSOR_JOBS names more than one client (tpurt joins
 * tasks only through the service). num_logical_cpu_devices: 0 for the default, else this
 * task's logical cores. experimental_reset_context: shuts down a live system of
 * this process first. The device type chosen ("CPU" or "TPU") is copied to
 * device_type_out (may be NULL with capacity 0). */
TPU_API tpu_status tpu_initialize_accelerator_system(const char *device_type,
                                                     int enable_coordination_service,
                                                     int num_logical_cpu_devices,
                                                     int experimental_reset_context,
                                                     tpu_system **system, char *device_type_out,
                                                     size_t capacity, size_t *count);
/* DTensor's alias initialize_multi_client (its other alias, initialize_tpu_system,
 * would clash with tf.tpu's, above). */
TPU_API tpu_status tpu_initialize_multi_client(const char *device_type,
                                               int enable_coordination_service,
                                               int num_logical_cpu_devices,
                                               int experimental_reset_context,
                                               tpu_system **system, char *device_type_out,
                                               size_t capacity, size_t *count);
/* DTensor's shutdown_accelerator_system: shuts down a system started by
 * tpu_initialize_accelerator_system, as tpu_system_shutdown does; a second call is
 * TPU_FAILED_PRECONDITION ("not initialized"). It does not release the handle: as for
 * every handle, its one releaser is tpu_system_release, which the caller still calls
 * (then the handle is gone). With more than one task it is TPU_FAILED_PRECONDITION,
 * as in DTensor's multi-client mode: use tpu_system_shutdown, which every task calls
 * and which waits at the shutdown barrier. */
TPU_API tpu_status tpu_shutdown_accelerator_system(tpu_system *system);

/* This task's id and the number of tasks (1 and 0 for a one-task system). */
TPU_API tpu_status tpu_system_num_tasks(const tpu_system *system, int *out);
TPU_API tpu_status tpu_system_task_id(const tpu_system *system, int *out);

/* ---- Key-value store and barriers (the coordination service) ------------------ */

/* Keys are normalized as XLA's are ("///a//b/" is "a/b"); an empty key is invalid.
 * A one-task system keeps the store in process. */
/* Sets key to value (value_len bytes); TPU_ALREADY_EXISTS if the key is set. */
TPU_API tpu_status tpu_kv_set(tpu_system *system, const char *key, const void *value,
                              size_t value_len);
/* Waits up to timeout_ms (> 0) for key: TPU_DEADLINE_EXCEEDED naming it. The value
 * follows the out-array rule (bytes). */
TPU_API tpu_status tpu_kv_get(tpu_system *system, const char *key, int64_t timeout_ms, void *out,
                              size_t capacity, size_t *count);
/* Does not wait: TPU_NOT_FOUND when the key is not set. */
TPU_API tpu_status tpu_kv_try_get(tpu_system *system, const char *key, void *out,
                                  size_t capacity, size_t *count);
/* Removes key and every key under key/. Removing nothing is not an error. */
TPU_API tpu_status tpu_kv_delete(tpu_system *system, const char *key);
/* Waits until every listed task (tasks NULL with num_tasks 0: all) has reached the
 * barrier `id`, up to timeout_ms (> 0): TPU_DEADLINE_EXCEEDED names the tasks that
 * did not arrive; TPU_UNAVAILABLE names a lost one. Tasks that disagree on the list
 * get TPU_INVALID_ARGUMENT. An id may be reused once every participant has passed it. */
TPU_API tpu_status tpu_wait_at_barrier(tpu_system *system, const char *id, int64_t timeout_ms,
                                       const int32_t *tasks, int num_tasks);

#ifdef __cplusplus
}
#endif

#endif /* TPURT_CLUSTER_H */
