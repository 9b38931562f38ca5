/* tpurt/topology.h: the mesh of cores, device assignment and group assignment.
 *
 * Semantics are TensorFlow's tf.tpu.experimental.Topology and DeviceAssignment.
 * Coordinates always have 4 entries (x, y, z, core). Topology and device assignment
 * handles are immutable after creation and safe to share between threads.
 */
#ifndef TPURT_TOPOLOGY_H
#define TPURT_TOPOLOGY_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The mesh rank tpurt uses: (x, y, z, core). */
#define TPU_MESH_RANK 4

typedef struct tpu_topology tpu_topology;
typedef struct tpu_device_assignment tpu_device_assignment;

/* ---- Topology --------------------------------------------------------------- */

/* Builds a topology from a mesh shape of `mesh_rank` (must be 4) positive entries and
 * device_coordinates[num_tasks][devices_per_task][4] (flattened). Every coordinate
 * must lie inside the mesh and appear once. Errors: TPU_INVALID_ARGUMENT naming the
 * task, device and coordinate at fault. *out is the caller's. */
TPU_API tpu_status tpu_topology_create(const int32_t *mesh_shape, int mesh_rank,
                                       const int32_t *device_coordinates, int num_tasks,
                                       int devices_per_task, tpu_topology **out);

/* Parses serialized tensorflow.tpu.TopologyProto bytes (untrusted input is fine:
 * bad bytes give TPU_INVALID_ARGUMENT with the reason). Unknown fields are ignored. */
TPU_API tpu_status tpu_topology_parse(const void *bytes, size_t len, tpu_topology **out);

/* Serializes as TensorFlow does (fields 1-4, plus 5 when a hardware feature was
 * parsed); a topology parsed from bytes gives back those bytes unchanged.
 * out == NULL with capacity == 0 queries the size into *count. */
TPU_API tpu_status tpu_topology_serialize(const tpu_topology *topology, void *out, size_t capacity,
                                          size_t *count);

TPU_API tpu_status tpu_topology_release(tpu_topology *topology);

/* The mesh sizes (TPU_MESH_RANK of them) into out[0..capacity). */
TPU_API tpu_status tpu_topology_mesh_shape(const tpu_topology *topology, int32_t *out,
                                           size_t capacity, size_t *count);
TPU_API tpu_status tpu_topology_mesh_rank(const tpu_topology *topology, int *out);
TPU_API tpu_status tpu_topology_num_tasks(const tpu_topology *topology, int *out);
TPU_API tpu_status tpu_topology_num_devices_per_task(const tpu_topology *topology, int *out);

/* The coordinates (TPU_MESH_RANK entries) of device `device` of task `task`. */
TPU_API tpu_status tpu_topology_device_coordinates(const tpu_topology *topology, int task,
                                                   int device, int32_t *out, size_t capacity,
                                                   size_t *count);

/* The task / device ordinal within its task at coords[0..num_coords) (num_coords
 * must be TPU_MESH_RANK). Coordinates outside the mesh: TPU_INVALID_ARGUMENT; a
 * position no device occupies: TPU_NOT_FOUND. */
TPU_API tpu_status tpu_topology_task_ordinal_at_coordinates(const tpu_topology *topology,
                                                            const int32_t *coords,
                                                            size_t num_coords, int *out);
TPU_API tpu_status tpu_topology_device_ordinal_at_coordinates(const tpu_topology *topology,
                                                              const int32_t *coords,
                                                              size_t num_coords, int *out);

/* Mesh positions without a device, in row-major order (x slowest, core fastest). */
TPU_API tpu_status tpu_topology_num_missing_devices(const tpu_topology *topology, int *out);
TPU_API tpu_status tpu_topology_missing_device(const tpu_topology *topology, int index,
                                               int32_t *out, size_t capacity, size_t *count);

/* "/job:J/task:T/device:TPU:D" for the device at coords (job NULL: "/task:T/..."). */
TPU_API tpu_status tpu_topology_tpu_device_name(const tpu_topology *topology,
                                                const int32_t *coords, size_t num_coords,
                                                const char *job,
                                                char *out, size_t capacity, size_t *count);
/* "/job:J/task:T/device:CPU:0", the host of the device at coords. */
TPU_API tpu_status tpu_topology_cpu_device_name(const tpu_topology *topology,
                                                const int32_t *coords, size_t num_coords,
                                                const char *job,
                                                char *out, size_t capacity, size_t *count);

/* The TPUHardwareFeature (field 5): embedding feature (0 UNSUPPORTED, 1 V1, 2 V2) and
 * embedding devices per chip; both 0 when the topology has none. */
TPU_API tpu_status tpu_topology_hardware_feature(const tpu_topology *topology,
                                                 int *embedding_feature,
                                                 int *num_embedding_devices_per_chip);

/* The fully qualified TensorFlow name "/job:J/replica:0/task:T/device:TYPE:D"
 * (device_type "TPU" or "CPU"). */
TPU_API tpu_status tpu_device_name(const char *job, int task, const char *device_type,
                                   int device, char *out, size_t capacity, size_t *count);

/* tf.tpu.core(n): "device:TPU_REPLICATED_CORE:n". */
TPU_API tpu_status tpu_core(int n, char *out, size_t capacity, size_t *count);

/* ---- Device assignment ------------------------------------------------------ */

typedef TPU_ENUM(tpu_device_order_mode) {
  TPU_DEVICE_ORDER_AUTO = 0,
  TPU_DEVICE_ORDER_RING = 1,
  TPU_DEVICE_ORDER_MESH = 2
} tpu_device_order_mode;

/* TensorFlow's device_assignment(topology, computation_shape, computation_stride,
 * num_replicas, device_order_mode), exactly: the greedy replica layout, the ring
 * order for full replication, and the degraded path for missing devices.
 * computation_shape / computation_stride may be NULL (all ones); otherwise their
 * lengths must be 4. num_replicas may be 0 (an empty assignment).
 * Errors: TPU_INVALID_ARGUMENT with TensorFlow's reason (shape not [4], not
 * positive, footprint does not fit, too many replicas, RING incompatible, and the
 * degraded path's conditions). */
TPU_API tpu_status tpu_device_assignment_build(const tpu_topology *topology,
                                               const int32_t *computation_shape,
                                               int computation_shape_len,
                                               const int32_t *computation_stride,
                                               int computation_stride_len, int num_replicas,
                                               tpu_device_order_mode mode,
                                               tpu_device_assignment **out);

/* An explicit assignment: core_assignment[num_replicas][num_cores_per_replica][4].
 * Every coordinate must name a device of the topology, and no device twice. */
TPU_API tpu_status tpu_device_assignment_create(const tpu_topology *topology,
                                                const int32_t *core_assignment,
                                                int num_replicas, int num_cores_per_replica,
                                                tpu_device_assignment **out);

TPU_API tpu_status tpu_device_assignment_release(tpu_device_assignment *assignment);

/* A new handle to the topology the assignment refers to (release it). */
TPU_API tpu_status tpu_device_assignment_topology(const tpu_device_assignment *assignment,
                                                  tpu_topology **out);
TPU_API tpu_status tpu_device_assignment_num_replicas(const tpu_device_assignment *assignment,
                                                      int *out);
TPU_API tpu_status tpu_device_assignment_num_cores_per_replica(
    const tpu_device_assignment *assignment, int *out);

/* core_assignment[num_replicas][num_cores_per_replica][4], flattened, into
 * out[0..capacity). */
TPU_API tpu_status tpu_device_assignment_core_assignment(const tpu_device_assignment *assignment,
                                                         int32_t *out, size_t capacity,
                                                         size_t *count);

/* Lookups for (replica, logical_core); indices outside the assignment:
 * TPU_OUT_OF_RANGE naming the index and the bound. The coordinates have
 * TPU_MESH_RANK entries. */
TPU_API tpu_status tpu_device_assignment_coordinates(const tpu_device_assignment *assignment,
                                                     int replica, int logical_core,
                                                     int32_t *out, size_t capacity,
                                                     size_t *count);
TPU_API tpu_status tpu_device_assignment_task(const tpu_device_assignment *assignment,
                                              int replica, int logical_core, int *out);
TPU_API tpu_status tpu_device_assignment_tpu_ordinal(const tpu_device_assignment *assignment,
                                                     int replica, int logical_core, int *out);
/* "/job:J/task:T/device:TPU:D" (job NULL: no job part). */
TPU_API tpu_status tpu_device_assignment_tpu_device(const tpu_device_assignment *assignment,
                                                    int replica, int logical_core,
                                                    const char *job, char *out, size_t capacity,
                                                    size_t *count);
/* "/job:J/task:T/device:CPU:0" (job NULL: no job part). */
TPU_API tpu_status tpu_device_assignment_host_device(const tpu_device_assignment *assignment,
                                                     int replica, int logical_core,
                                                     const char *job, char *out, size_t capacity,
                                                     size_t *count);

/* The ascending replica ids whose `logical_core` lives on `task`, into
 * out[0..capacity). No such replica — including a task or logical core beyond the
 * assignment, as TensorFlow raises one error for both — gives TPU_NOT_FOUND ("Can
 * not find any replica in task: T contains logical_core: C"). */
TPU_API tpu_status tpu_device_assignment_lookup_replicas(const tpu_device_assignment *assignment,
                                                         int task, int logical_core, int *out,
                                                         size_t capacity, size_t *count);

/* ---- Group assignment ------------------------------------------------------- */

/* replica_ids[num_groups][group_size] (flattened): row g lists the replica ids of
 * group g. Collectives take a pointer to one; NULL means one group of all replicas.
 * Groups of different sizes: group_size TPU_GROUP_SIZE_RAGGED (tpurt/collectives.h). */
typedef struct tpu_group_assignment {
  const int32_t *replica_ids;
  int num_groups;
  int group_size;
} tpu_group_assignment;

/* Checks a group assignment for `num_replicas` replicas: at least one group, equal
 * positive group sizes, every id in [0, num_replicas) exactly once. Rows of
 * different lengths (group_size TPU_GROUP_SIZE_RAGGED, tpurt/collectives.h) are valid
 * when each length is positive. Errors: TPU_INVALID_ARGUMENT naming the offending id
 * and group. */
TPU_API tpu_status tpu_group_assignment_validate(const tpu_group_assignment *groups,
                                                 int num_replicas);

#ifdef __cplusplus
}
#endif

#endif /* TPURT_TOPOLOGY_H */
