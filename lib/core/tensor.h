// The tensor behind the tpu_tensor handle: shape, dtype and a pointer into a Buffer,
// the reference-counted storage that several handles may share (reshape views,
// split pieces, the members of a collective's group). Sharing is copy-on-write:
// mutable_data gives a handle a private buffer before it may be written.
#pragma once

#include <atomic>
#include <cstdint>
#include <ostream>
#include <string>

#include "core/handle.h"
#include "tpurt/tensor.h"

namespace tpurt {

// Storage. A new tensor's handle, its Buffer and its data are one block (one
// allocation); a view's handle is a small block of its own.
struct Buffer {
  std::atomic<int32_t> users;  // handles whose data lie here; > 1 means shared
  // The block lives while users > 0 (one hold) and while a handle inside it lives
  // (another), so a handle that moved to a private copy keeps its memory.
  std::atomic<int32_t> holds;
  void* data;
  tpu_release_fn release;  // borrowed data (wrap): runs when the last user goes
  void* release_user_data;
  void* block;
  size_t block_bytes;
};

}  // namespace tpurt

struct tpu_tensor {
  // Set by init_tensor (placement new, also of a recycled block), poisoned by
  // ~tpu_tensor in release: a released handle passed back is detected.
  tpurt::HandleMark<tpu_tensor> mark;
  std::atomic<int32_t> refs;
  tpu_dtype dtype;
  int rank;
  // Its own block's size (a view), or 0: the handle lives in the block of the buffer
  // it was created with, which it keeps alive (one hold) even after moving off it.
  uint32_t block_bytes;
  int64_t dims[TPU_MAX_RANK];
  int64_t num_elements;
  size_t byte_size;
  void* data;              // inside buffer (a split piece may start past its start)
  tpurt::Buffer* buffer;
  bool writable;           // mutable_data was called: never share this buffer again
};

namespace tpurt {

using Tensor = tpu_tensor;

// The largest byte size of one tensor (2^48).
constexpr size_t kMaxTensorBytes = size_t{1} << 48;

// Checks dtype, rank and dims; returns the element count and byte size. Throws
// TPU_INVALID_ARGUMENT naming the problem (negative dims, overflow, ...).
void check_shape(tpu_dtype dtype, const int64_t* dims, int rank, int64_t* num_elements,
                 size_t* byte_size);

// A new zero-filled tensor (refs = 1) with a buffer of its own. Throws on bad shape or
// out of memory.
Tensor* new_tensor(tpu_dtype dtype, const int64_t* dims, int rank);
// Same, without zero-filling (the caller writes every byte).
Tensor* new_tensor_uninitialized(tpu_dtype dtype, const int64_t* dims, int rank);
// Same, with t's dtype and shape (checked when t was made).
Tensor* new_tensor_like(const Tensor* t);

// A tensor over the caller's `data` (tpu_tensor_wrap): release(data, user_data) runs
// when no handle uses the data any more.
Tensor* wrap_tensor(tpu_dtype dtype, const int64_t* dims, int rank, void* data,
                    tpu_release_fn release, void* user_data);

// A new handle with shape dims[0..rank) over t's bytes from byte_offset on (the shape
// must fit). Shares t's buffer, unless t is writable: then the bytes are copied, so
// writes through t's stable mutable pointer never show through the new handle.
Tensor* share(const Tensor* t, const int64_t* dims, int rank, size_t byte_offset);

// The handle's data for writing: first copied into a private buffer if another
// handle shares it. Marks t writable. Not safe against concurrent use of t itself.
void* mutable_data(Tensor* t);

void retain(Tensor* t);
void release(Tensor* t);

// Whether t's shape is dims[0..rank).
inline bool has_shape(const Tensor* t, const int64_t* dims, int rank) {
  if (t->rank != rank) return false;
  for (int i = 0; i < rank; ++i)
    if (t->dims[i] != dims[i]) return false;
  return true;
}

// "float32[2,3]"
std::string describe(const Tensor* t);
std::string shape_string(const int64_t* dims, int rank);
// Streams as "[2,3]": for messages that are built only when they are needed.
struct ShapeText {
  const int64_t* dims;
  int rank;
};
std::ostream& operator<<(std::ostream& os, ShapeText s);

}  // namespace tpurt
