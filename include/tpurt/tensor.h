/* tpurt/tensor.h: dense tensors and bfloat16 / half conversion.
 *
 * A tensor is an immutable-shape, reference-counted handle over a row-major buffer.
 * Retain and release are thread-safe. tpu_tensor_retain adds a reference to the SAME
 * tensor: every holder of the handle sees what is written through it.
 *
 * Copy-on-write. Several handles may share one buffer: a reshape and its source, the
 * results that the members of a group receive from one all-reduce,
 * cross_replica_sum, all-gather or broadcast (unless the system was started with
 * private_collective_results), a piece of a sharded input. A buffer is "shared" while
 * more than one handle has its data in it (references to one handle count once).
 * tpu_tensor_data reads without copying; tpu_tensor_mutable_data first copies a
 * shared buffer into a private one of this handle, so a write through one handle
 * never shows through another. Once a handle's mutable pointer has been taken, that
 * handle never shares its buffer again: a later reshape of it copies.
 *
 * Threads: handles that share a buffer may be used from different threads freely,
 * written through mutable_data or read. One handle is one object: calling
 * tpu_tensor_mutable_data on it, or writing through its mutable pointer, while
 * another thread uses the same handle (reads its data, reshapes it, passes it to a
 * collective) is the caller's race.
 */
#ifndef TPURT_TENSOR_H
#define TPURT_TENSOR_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_tensor tpu_tensor;

/* A shape by value: `rank` dims; -1 in dims means "unknown" where a function says so.
 * rank == -1 means "no shape given" where a function says so. */
typedef struct tpu_shape {
  int rank;
  int64_t dims[TPU_MAX_RANK];
} tpu_shape;

/* Called once when the last reference to a wrapped buffer goes away. */
typedef void (*tpu_release_fn)(void *data, void *user_data);

/* Creates a tensor of `dtype` and shape dims[0..rank) (rank 0 = scalar; dims may be
 * NULL then) holding a copy of `data`, which must hold exactly the tensor's byte size
 * (`data_bytes`). data == NULL with data_bytes == 0 gives a zero-filled tensor.
 * Errors: TPU_INVALID_ARGUMENT for an unknown dtype, rank outside [0, TPU_MAX_RANK],
 * a negative dimension, an element count or byte size that overflows, or a
 * data_bytes that differs from the byte size; TPU_RESOURCE_EXHAUSTED when memory
 * runs out. *out holds one reference; the data is 64-byte aligned. */
TPU_API tpu_status tpu_tensor_create(tpu_dtype dtype, const int64_t *dims, int rank,
                                     const void *data, size_t data_bytes, tpu_tensor **out);

/* Like tpu_tensor_create but borrows `data` instead of copying it: the tensor points
 * at the caller's buffer, and `release(data, user_data)` (if not NULL) runs when no
 * handle uses it any more. data must not be NULL unless the byte size is 0. If this
 * call fails, release is not called. tpu_tensor_mutable_data on a wrapped tensor
 * returns the caller's buffer itself (writing into it is why one wraps), unless a
 * reshape of the tensor shares it: then it copies, like any shared buffer. Writes the
 * caller makes through its own pointer bypass copy-on-write and are seen by every
 * handle still using the buffer. */
TPU_API tpu_status tpu_tensor_wrap(tpu_dtype dtype, const int64_t *dims, int rank, void *data,
                                   size_t data_bytes, tpu_release_fn release, void *user_data,
                                   tpu_tensor **out);

/* Adds a reference. */
TPU_API tpu_status tpu_tensor_retain(tpu_tensor *tensor);

/* Drops a reference; the last one frees the tensor. NULL is accepted (no-op). */
TPU_API tpu_status tpu_tensor_release(tpu_tensor *tensor);

TPU_API tpu_status tpu_tensor_dtype(const tpu_tensor *tensor, tpu_dtype *out);
TPU_API tpu_status tpu_tensor_rank(const tpu_tensor *tensor, int *out);

/* The dimensions (rank of them) into out[0..capacity). */
TPU_API tpu_status tpu_tensor_dims(const tpu_tensor *tensor, int64_t *out, size_t capacity,
                                   size_t *count);

/* The size of dimension `axis`; negative axes count from the end (-1 = last). */
TPU_API tpu_status tpu_tensor_dim(const tpu_tensor *tensor, int axis, int64_t *out);

TPU_API tpu_status tpu_tensor_num_elements(const tpu_tensor *tensor, int64_t *out);
TPU_API tpu_status tpu_tensor_byte_size(const tpu_tensor *tensor, size_t *out);

/* The tensor's data, read-only (borrowed): valid while a reference is held and until
 * tpu_tensor_mutable_data is called on this handle. Never copies. A zero-size tensor
 * may give NULL. */
TPU_API tpu_status tpu_tensor_data(const tpu_tensor *tensor, const void **out);

/* The tensor's data, writable. If the buffer is shared with another handle, it is
 * first copied into a buffer private to this handle (TPU_RESOURCE_EXHAUSTED if memory
 * runs out; the tensor is then unchanged). The pointer stays the same for every later
 * call on this handle until the handle is released, and writes through it are never
 * seen by other handles (not even by reshapes made later, which copy). */
TPU_API tpu_status tpu_tensor_mutable_data(tpu_tensor *tensor, void **out);

/* A new tensor with `tensor`'s data and shape dims[0..rank). The element counts must
 * agree (TPU_INVALID_ARGUMENT naming both otherwise). One dimension may be -1 and is
 * then inferred. The two share the buffer (copy-on-write: a write through either
 * after tpu_tensor_mutable_data is not seen by the other), except when the mutable
 * pointer of `tensor` has been taken: then the data are copied. */
TPU_API tpu_status tpu_tensor_reshape(const tpu_tensor *tensor, const int64_t *dims, int rank,
                                      tpu_tensor **out);

/* A new tensor with the elements of `tensor` converted to `dtype` (float32, double,
 * bfloat16, half and the integer types; bool and complex64 only to themselves).
 * float32 -> bfloat16/half rounds to nearest even, as TensorFlow does. Floats to
 * integers truncate toward zero; a value beyond the integer type's range (infinities
 * included) gives its minimum or maximum, and NaN gives 0, as TensorFlow's Cast does
 * on GPU. (On CPU TensorFlow leaves these cases to the hardware, which on x86 gives
 * -2147483648 for NaN, inf and 3e9 as int32, and wraps int8 and int16.) */
TPU_API tpu_status tpu_tensor_cast(const tpu_tensor *tensor, tpu_dtype dtype, tpu_tensor **out);

/* Buffer conversions, exactly as TensorFlow converts: float32 -> bfloat16 / half
 * rounds to nearest, ties to even; NaN stays a quiet NaN with its sign
 * (bfloat16 0x7FC0 / 0xFFC0, half 0x7E00 / 0xFE00); overflow gives +-inf. The
 * reverse directions are exact. `in` and `out` must not overlap; count may be 0
 * (then the pointers may be NULL). */
TPU_API tpu_status tpu_float_to_bfloat16(const float *in, uint16_t *out, size_t count);
TPU_API tpu_status tpu_bfloat16_to_float(const uint16_t *in, float *out, size_t count);
TPU_API tpu_status tpu_float_to_half(const float *in, uint16_t *out, size_t count);
TPU_API tpu_status tpu_half_to_float(const uint16_t *in, float *out, size_t count);

/* The buffers of freed tensors of 256 KiB and more (rounded up to a size class, four
 * per power of two) are kept for reuse, since a fresh buffer page-faults on every first
 * touch: up to TPURT_TENSOR_CACHE_MB MiB (default 256) resident, and beyond that up to
 * a quarter of the machine's physical memory (at most 256 buffers, the oldest given back
 * first) as pages the kernel may take back under memory pressure (MADV_FREE), reused
 * without a fault until it does. So at most TPURT_TENSOR_CACHE_MB MiB plus a quarter
 * of the memory is cached; TPURT_TENSOR_CACHE_MB=0 keeps nothing.
 * This gives cached buffers of both kinds back to the system, largest first, until at
 * most keep_bytes remain cached (0: all of them), as malloc_trim does with its pad;
 * *released receives the bytes given back (so it may exceed TPURT_TENSOR_CACHE_MB).
 * Live tensors are not affected. */
TPU_API tpu_status tpu_tensor_cache_trim(size_t keep_bytes, size_t *released);

#ifdef __cplusplus
}
#endif

#endif /* TPURT_TENSOR_H */
