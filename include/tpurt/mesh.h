/* tpurt/mesh.h (1.3): meshes with named axes, as DTensor's and JAX's Mesh.
 *
 * A mesh lays the participants of a device assignment, (replica r, logical core c)
 * with flattened id r * k + c (k = cores per replica), over a grid of named axes in
 * row-major order: the participant at mesh coordinates (i0, ..., in-1) has flattened
 * id i0 * (s1 * ... * sn-1) + ... + in-1. So with axes ("batch", R) and ("model", k)
 * "model" runs over the cores of a replica and "batch" over the replicas.
 *
 * A mesh is immutable; every function may be called from any thread. It keeps its own
 * reference to the device assignment.
 */
#ifndef TPURT_MESH_H
#define TPURT_MESH_H

#include "common.h"
#include "topology.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_mesh tpu_mesh;

/* A mesh over `assignment`'s participants. axis_names[num_axes], axis_sizes[num_axes]:
 * TensorFlow's Mesh rules (DTensor's Mesh::GetMesh): at least one axis; names
 * non-NULL, non-empty, unique, and not one of DTensor's reserved "unsharded", "match"
 * and "any"; every size >= 1; the product of the sizes equals num_replicas *
 * num_cores_per_replica. Errors: TPU_INVALID_ARGUMENT naming the axis, name or size
 * (a wrong product names it and the assignment's replicas x cores). *out is the
 * caller's (tpu_mesh_release). */
TPU_API tpu_status tpu_mesh_create(const tpu_device_assignment *assignment,
                                   const char *const *axis_names, const int64_t *axis_sizes,
                                   int num_axes, tpu_mesh **out);

/* A mesh over every core of `topology`, one replica per core (DTensor's mesh of all
 * TPU devices): the device assignment is tpu_device_assignment_build(topology, NULL,
 * 0, NULL, 0, product of the sizes, TPU_DEVICE_ORDER_AUTO), with TensorFlow's errors. */
TPU_API tpu_status tpu_mesh_create_from_topology(const tpu_topology *topology,
                                                 const char *const *axis_names,
                                                 const int64_t *axis_sizes, int num_axes,
                                                 tpu_mesh **out);

TPU_API tpu_status tpu_mesh_release(tpu_mesh *mesh);

/* A new handle to the mesh's device assignment (release it): pass it in
 * tpu_step_options.device_assignment to run a step over the mesh. */
TPU_API tpu_status tpu_mesh_device_assignment(const tpu_mesh *mesh,
                                              tpu_device_assignment **out);
TPU_API tpu_status tpu_mesh_num_axes(const tpu_mesh *mesh, int *out);
/* The size of the mesh: num_replicas * num_cores_per_replica. */
TPU_API tpu_status tpu_mesh_size(const tpu_mesh *mesh, int64_t *out);
/* Axis `axis` in [0, num_axes) (TPU_OUT_OF_RANGE otherwise): its name (the out-array
 * rule of docs/ABI.md) and size. */
TPU_API tpu_status tpu_mesh_axis_name(const tpu_mesh *mesh, int axis, char *out,
                                      size_t capacity, size_t *count);
TPU_API tpu_status tpu_mesh_axis_size(const tpu_mesh *mesh, int axis, int64_t *out);
/* The index of the axis called `name`; TPU_NOT_FOUND naming it and the mesh's axes. */
TPU_API tpu_status tpu_mesh_axis_index(const tpu_mesh *mesh, const char *name, int *out);
/* The mesh coordinates of participant (replica, logical_core), num_axes of them
 * (out-array rule); indices outside the assignment: TPU_OUT_OF_RANGE. */
TPU_API tpu_status tpu_mesh_coordinates(const tpu_mesh *mesh, int replica, int logical_core,
                                        int64_t *out, size_t capacity, size_t *count);

/* The groups of a collective over the named axes axes[num_axes] (each a distinct axis
 * of the mesh, at least one): participants that differ only in those axes form one
 * group, ordered row-major over the named axes in the order given; groups come in
 * ascending order of their first member. *groups receives
 * num_groups, group_size and replica_ids, which point into storage the mesh owns
 * (valid until tpu_mesh_release); *group_mode receives the tpu_group_mode to pass in
 * tpu_collective_options.group_mode (TPU_GROUP_MODE_FLATTENED_ID). So "sum over the
 * model axis" is this call and one tpu_cross_replica_sum. Errors: TPU_INVALID_ARGUMENT
 * for an empty or repeated axis list, TPU_NOT_FOUND for a name the mesh lacks. */
TPU_API tpu_status tpu_mesh_axis_groups(const tpu_mesh *mesh, const char *const *axes,
                                        int num_axes, tpu_group_assignment *groups,
                                        int *group_mode);

#ifdef __cplusplus
}
#endif

#endif /* TPURT_MESH_H */
