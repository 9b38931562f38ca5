/* tpurt/checkpoint.h (1.4): checkpoints of the whole system.
 *
 * A checkpoint holds every embedding table's rows and optimizer slots (embedding.h),
 * the named dense tensors the caller hands in (replicated weights: task 0's copy is
 * saved) and a step number. Save and restore are collectives over every task of the
 * system: each task calls them with the same directory and step, in the same order
 * relative to each other. The directory must be one that every task sees (the same
 * path on a shared file system, or one host).
 *
 * On disk (docs/CHECKPOINT.md): `dir/ckpt-<step>/` holds one shard file per task and
 * table (the rows of the task's cores, every variable), the dense tensors' file and
 * manifest.json, a JSON manifest naming the tables, dimensions, sharding, optimizer,
 * slot names, dtype, step, tasks and cores, and the size and SHA-256 of every file.
 * Every file is written under a temporary name, synced and renamed, and the directory
 * synced; task 0 writes the manifest last, once every task has written and synced its
 * shards. A checkpoint is complete when its manifest is: a crash at any moment leaves
 * the previous complete checkpoint usable, and a directory without a valid manifest
 * is ignored.
 *
 * Restore reshards: a checkpoint saved by any number of tasks and cores, with either
 * sharding (DIV or MOD), restores onto any other; each task reads the rows it now
 * holds from the shard files that hold them, bit for bit. Everything is validated on
 * every task (manifest, configuration, file sizes, checksums) and the tasks agree
 * before any row is loaded: a refused restore changes no table on any task.
 *
 * Waits are bounded by options->timeout_ms; a task that does not arrive is named.
 * Save and restore wait for the step in flight and may not be called from inside a
 * computation (TPU_FAILED_PRECONDITION).
 */
#ifndef TPURT_CHECKPOINT_H
#define TPURT_CHECKPOINT_H

#include "common.h"
#include "system.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_checkpoint_options {
  size_t struct_size; /* sizeof(tpu_checkpoint_options) */
  int64_t timeout_ms; /* 0: the system's collective timeout; the wait for the other tasks */
  int keep;           /* save: complete checkpoints kept, the newest; 0 keeps every one */
} tpu_checkpoint_options;

#define TPU_CHECKPOINT_OPTIONS_INIT { sizeof(tpu_checkpoint_options), 0, 0 }

/* Fills *options with the defaults (zeros) and struct_size (at least the 1.4 size:
 * TPU_INVALID_ARGUMENT naming it otherwise). */
TPU_API tpu_status tpu_checkpoint_options_init(tpu_checkpoint_options *options,
                                               size_t struct_size);

/* Saves the system's tables, tensors[num_tensors] named names[num_tensors] (non-NULL,
 * non-empty, unique; any dtype and shape) and step (>= 0) into dir/ckpt-<step>/,
 * creating dir if needed. Every task passes its tensors; task 0's are written.
 * Returns when the checkpoint is complete on every task. options may be NULL.
 * Errors: TPU_INVALID_ARGUMENT naming the argument (a negative step, a NULL or
 * duplicate name, a NULL tensor, a negative timeout or keep); TPU_ALREADY_EXISTS when
 * dir holds a complete checkpoint of that step; the I/O error naming the file
 * (TPU_PERMISSION_DENIED, TPU_RESOURCE_EXHAUSTED for a full disk, else
 * TPU_UNAVAILABLE); TPU_DEADLINE_EXCEEDED naming a task that did not finish its
 * shards within the timeout; a failure on another task, naming it, on every task.
 * A failed save leaves no manifest: the previous complete checkpoint stays the
 * newest. With keep > 0, task 0 then removes the complete checkpoints older than the
 * newest `keep` ones, and incomplete directories older than this one. */
TPU_API tpu_status tpu_checkpoint_save(tpu_system *system, const char *dir, int64_t step,
                                       const char *const *names,
                                       tpu_tensor *const *tensors, int num_tensors,
                                       const tpu_checkpoint_options *options);

/* The step of the newest complete checkpoint in dir (the highest ckpt-<step>/ whose
 * manifest is valid). TPU_NOT_FOUND naming dir when it holds none or does not exist;
 * TPU_INVALID_ARGUMENT for a NULL argument. Reads the manifests only (restore checks
 * the shard files). Not a collective. */
TPU_API tpu_status tpu_checkpoint_latest(const char *dir, int64_t *step);

/* Restores dir/ckpt-<step>/ (step -1: the newest complete checkpoint) into the
 * system's tables, and into tensors[i] a new tensor (the caller's) of the checkpoint's
 * tensor names[i], on every task; *restored_step gets the step (may be NULL).
 * names and tensors may be NULL when num_tensors is 0. options->keep is unused.
 * Errors, each naming the file, table or value, with nothing loaded on any task:
 * TPU_NOT_FOUND (no such checkpoint, no complete one, a tensor name the checkpoint
 * lacks); TPU_DATA_LOSS (a manifest that does not parse, a shard file missing,
 * truncated or longer, a checksum that differs); TPU_FAILED_PRECONDITION (a
 * checkpoint of another configuration: a table missing or extra, another vocabulary
 * size, dimension, optimizer, slot names or dtype; a table's sharding may differ);
 * TPU_DEADLINE_EXCEEDED naming a task that did not arrive; another task's refusal,
 * naming it. The outputs are written only on success. */
TPU_API tpu_status tpu_checkpoint_restore(tpu_system *system, const char *dir, int64_t step,
                                          const char *const *names, tpu_tensor **tensors,
                                          int num_tensors, int64_t *restored_step,
                                          const tpu_checkpoint_options *options);

#ifdef __cplusplus
}
#endif

#endif /* TPURT_CHECKPOINT_H */
