// Memory for large tensors. Fresh large allocations are mmapped and every first
// touch of a page faults (measured: a 16 MiB all-reduce spent 80% of its time in
// page faults), so freed large blocks are kept, by size class, for reuse, up to
// TPURT_TENSOR_CACHE_MB resident; beyond it, up to a quarter of the memory, as pages
// the kernel may take back under memory pressure (MADV_FREE), reused without faults
// until it does. tpu_tensor_cache_trim gives both back.
#pragma once

#include <cstddef>

namespace tpurt {

// Blocks below this come from the ordinary heap.
constexpr size_t kLargeBlock = 256 * 1024;

// Rounds a large request up to its size class (4 classes per power of two).
size_t block_class(size_t bytes);

// A block of at least `bytes` (a size class), 64-byte aligned, or nullptr.
// *block_bytes receives the size to pass back to free_block.
void* alloc_block(size_t bytes, size_t* block_bytes);
void free_block(void* p, size_t block_bytes);

// Unmaps cached large blocks (resident and lazy), largest first, until at most
// keep_bytes remain cached; returns the bytes unmapped.
size_t trim_block_cache(size_t keep_bytes);

// Small blocks (< kLargeBlock), 64-byte aligned, recycled through a per-thread free
// list (aligned_alloc + free cost 0.1 us, a tenth of a small collective's budget).
// *block_bytes receives the size to pass back to free_small.
void* alloc_small(size_t bytes, size_t* block_bytes);
void free_small(void* p, size_t block_bytes);

}  // namespace tpurt
