#include "core/tensor.h"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

#include "core/block_cache.h"
#include "core/checked.h"
#include "core/dtype.h"
#include "core/status.h"

namespace tpurt {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
constexpr size_t kTensorBytes = round_up(sizeof(Tensor));
constexpr size_t kBufferBytes = round_up(sizeof(Buffer));
// The header of a new tensor is no larger than the handle alone was before buffers
// were separate (a 256-byte class block holds it).
static_assert(kTensorBytes + kBufferBytes <= 4 * kAlign, "tensor header grew");
// The magic word first (core/handle.h).
static_assert(offsetof(Tensor, mark) == 0, "the tensor's magic word must come first");

// The buffer whose block holds a handle created with it (block_bytes == 0).
Buffer* home_of(Tensor* t) { return reinterpret_cast<Buffer*>(reinterpret_cast<char*>(t) + kTensorBytes); }

// Large blocks come from the block cache (no page faults once warm), small ones from
// the per-thread lists; both 64-byte aligned.
void* alloc_any(size_t header, size_t data_bytes, size_t* block_bytes) {
  if (data_bytes > SIZE_MAX - header - kAlign)
    fail(TPU_RESOURCE_EXHAUSTED, "tensor of ", data_bytes, " bytes is too large");
  size_t total = round_up(header + data_bytes);
  void* mem = total >= kLargeBlock ? alloc_block(total, block_bytes) : alloc_small(total, block_bytes);
  if (mem == nullptr) fail(TPU_RESOURCE_EXHAUSTED, "out of memory allocating a tensor of ", data_bytes, " bytes");
  return mem;
}

void free_any(void* block, size_t block_bytes) {
  if (block_bytes >= kLargeBlock) free_block(block, block_bytes);
  else free_small(block, block_bytes);
}

Buffer* init_buffer(void* at, void* block, size_t block_bytes, void* data, int32_t holds) {
  Buffer* b = new (at) Buffer;
  b->users.store(1, std::memory_order_relaxed);
  b->holds.store(holds, std::memory_order_relaxed);
  b->data = data;
  b->release = nullptr;
  b->release_user_data = nullptr;
  b->block = block;
  b->block_bytes = block_bytes;
  return b;
}

Tensor* init_tensor(void* at, tpu_dtype dtype, const int64_t* dims, int rank, int64_t n,
                    size_t bytes, void* data, Buffer* buffer, uint32_t block_bytes) {
  Tensor* t = new (at) Tensor;
  t->refs.store(1, std::memory_order_relaxed);
  t->dtype = dtype;
  t->rank = rank;
  for (int i = 0; i < rank; ++i) t->dims[i] = dims[i];
  t->num_elements = n;
  t->byte_size = bytes;
  t->data = data;
  t->buffer = buffer;
  t->block_bytes = block_bytes;
  t->writable = false;
  return t;
}

// One block: the handle, its Buffer, then (unless borrowed) the data; the shape is
// checked (n elements, bytes).
Tensor* allocate_checked(tpu_dtype dtype, const int64_t* dims, int rank, int64_t n, size_t bytes,
                         bool with_data) {
  size_t block_bytes;
  char* mem = static_cast<char*>(alloc_any(kTensorBytes + kBufferBytes, with_data ? bytes : 0, &block_bytes));
  void* data = with_data ? mem + kTensorBytes + kBufferBytes : nullptr;
  Buffer* b = init_buffer(mem + kTensorBytes, mem, block_bytes, data, 2);
  return init_tensor(mem, dtype, dims, rank, n, bytes, data, b, 0);
}

Tensor* allocate(tpu_dtype dtype, const int64_t* dims, int rank, bool with_data) {
  int64_t n;
  size_t bytes;
  check_shape(dtype, dims, rank, &n, &bytes);
  return allocate_checked(dtype, dims, rank, n, bytes, with_data);
}

void free_buffer(Buffer* b) {
  void* block = b->block;
  size_t block_bytes = b->block_bytes;
  b->~Buffer();
  free_any(block, block_bytes);
}

void drop_hold(Buffer* b) {
  if (b->holds.fetch_sub(1, std::memory_order_acq_rel) == 1) free_buffer(b);
}

void drop_use(Buffer* b) {
  if (b->users.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (b->release) b->release(b->data, b->release_user_data);
  drop_hold(b);
}

}  // namespace

void check_shape(tpu_dtype dtype, const int64_t* dims, int rank, int64_t* num_elements,
                 size_t* byte_size) {
  size_t elem = checked_dtype_size(dtype);
  if (rank < 0 || rank > TPU_MAX_RANK) invalid_argument("rank ", rank, " is outside [0, ", TPU_MAX_RANK, "]");
  if (rank > 0 && dims == nullptr) invalid_argument("argument 'dims' is NULL but rank is ", rank);
  // As TensorFlow's TensorShape: the running product must fit, so [0, 2^62, 2^62]
  // (0 elements) is a shape and [2^62, 2^62, 0] is not.
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] < 0) invalid_argument("dimension ", i, " is negative (", dims[i], ")");
    n = checked_mul(n, dims[i], "the element count of shape ", ShapeText{dims, rank});
  }
  const size_t bytes = checked_mul(static_cast<size_t>(n), elem, "the byte size of ",
                                   dtype_name(dtype), ShapeText{dims, rank});
  if (bytes > kMaxTensorBytes)
    invalid_argument("the byte size of ", dtype_name(dtype), ShapeText{dims, rank}, " is ", bytes,
                     ", more than the ", kMaxTensorBytes, " a tensor may have");
  *num_elements = n;
  *byte_size = bytes;
}

Tensor* new_tensor(tpu_dtype dtype, const int64_t* dims, int rank) {
  Tensor* t = allocate(dtype, dims, rank, true);
  if (t->byte_size) std::memset(t->data, 0, t->byte_size);
  return t;
}

Tensor* new_tensor_uninitialized(tpu_dtype dtype, const int64_t* dims, int rank) {
  return allocate(dtype, dims, rank, true);
}

Tensor* new_tensor_like(const Tensor* t) {
  return allocate_checked(t->dtype, t->dims, t->rank, t->num_elements, t->byte_size, true);
}

Tensor* wrap_tensor(tpu_dtype dtype, const int64_t* dims, int rank, void* data,
                    tpu_release_fn release, void* user_data) {
  Tensor* t = allocate(dtype, dims, rank, false);
  t->data = t->buffer->data = data;
  t->buffer->release = release;
  t->buffer->release_user_data = user_data;
  return t;
}

Tensor* share(const Tensor* t, const int64_t* dims, int rank, size_t byte_offset) {
  int64_t n;
  size_t bytes;
  check_shape(t->dtype, dims, rank, &n, &bytes);
  if (byte_offset > t->byte_size || bytes > t->byte_size - byte_offset)
    fail(TPU_INTERNAL, "a ", shape_string(dims, rank), " view at byte ", byte_offset, " does not fit in ", describe(t));
  const char* from = static_cast<const char*>(t->data) + byte_offset;
  if (t->writable) {
    Tensor* copy = new_tensor_uninitialized(t->dtype, dims, rank);
    if (bytes) std::memcpy(copy->data, from, bytes);
    return copy;
  }
  size_t block_bytes;
  void* mem = alloc_small(kTensorBytes, &block_bytes);
  if (mem == nullptr) fail(TPU_RESOURCE_EXHAUSTED, "out of memory allocating a tensor handle");
  t->buffer->users.fetch_add(1, std::memory_order_relaxed);  // t holds a use: it stays alive
  return init_tensor(mem, t->dtype, dims, rank, n, bytes, const_cast<char*>(from), t->buffer,
                     static_cast<uint32_t>(block_bytes));
}

void* mutable_data(Tensor* t) {
  Buffer* old = t->buffer;
  // Acquire: a sharer's reads happen before its release, so a count of 1 means that
  // nobody reads the data any more.
  if (t->byte_size && old->users.load(std::memory_order_acquire) > 1) {
    size_t block_bytes;
    char* mem = static_cast<char*>(alloc_any(kBufferBytes, t->byte_size, &block_bytes));
    Buffer* b = init_buffer(mem, mem, block_bytes, mem + kBufferBytes, 1);
    std::memcpy(b->data, t->data, t->byte_size);
    t->buffer = b;
    t->data = b->data;
    drop_use(old);
  }
  t->writable = true;
  return t->data;
}

void retain(Tensor* t) { t->refs.fetch_add(1, std::memory_order_relaxed); }

void release(Tensor* t) {
  if (t == nullptr) return;
  if (t->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  Buffer* buffer = t->buffer;
  Buffer* home = t->block_bytes ? nullptr : home_of(t);
  const size_t block_bytes = t->block_bytes;
  t->~Tensor();
  if (home == buffer && buffer->users.load(std::memory_order_acquire) == 1) {
    // The common case, a tensor alone in its own block: no other handle can reach the
    // buffer, so both holds are this handle's and the block goes at once.
    if (buffer->release) buffer->release(buffer->data, buffer->release_user_data);
    free_buffer(buffer);
    return;
  }
  if (home == nullptr) free_small(t, block_bytes);
  drop_use(buffer);
  if (home) drop_hold(home);
}

std::ostream& operator<<(std::ostream& os, ShapeText s) {
  os << '[';
  for (int i = 0; i < s.rank; ++i) os << (i ? "," : "") << s.dims[i];
  return os << ']';
}

std::string shape_string(const int64_t* dims, int rank) { return str_cat(ShapeText{dims, rank}); }

std::string describe(const Tensor* t) {
  return str_cat(dtype_name(t->dtype), shape_string(t->dims, t->rank));
}

}  // namespace tpurt
