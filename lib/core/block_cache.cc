#include "core/block_cache.h"

#include "core/env.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <utility>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace tpurt {
namespace {

// How many bytes of freed blocks the cache keeps (TPURT_TENSOR_CACHE_MB; the
// default and its reason are in core/env.cc).
size_t cache_limit() {
  static const size_t limit = static_cast<size_t>(env_value_cached(EnvVar::kTensorCacheMb)) << 20;
  return limit;
}

// Bytes of freed blocks kept lazily beyond cache_limit(): their pages are given to
// the kernel to take back (MADV_FREE) whenever memory runs short, and until it does,
// reusing one costs no page fault. A quarter of the machine's memory, and none when
// the cache is off. (Fresh pages cost 1.1-1.4 s per 320 MiB on the 2-CPU test VM,
// 40-80x rewriting them: a 256 MiB all-reduce with private results needs 8 such
// blocks per call, 2.5 GiB, far beyond the resident limit.)
size_t lazy_limit() {
  static const size_t limit = [] {
    if (cache_limit() == 0) return size_t(0);
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) / 4 : size_t(0);
  }();
  return limit;
}
// At most this many lazy blocks: finding one is a linear search.
constexpr size_t kMaxLazyBlocks = 256;

struct Block {
  void* p;
  size_t bytes;
};

struct Cache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_by_class;  // resident
  size_t cached_bytes = 0;
  std::vector<Block> lazy;  // oldest first
  size_t lazy_bytes = 0;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: tensors may be freed during exit
  return *c;
}

// Per-thread lists of free small blocks, by power-of-two class from 256 bytes.
constexpr int kSmallClasses = 6;      // 256 B .. 8 KiB
constexpr size_t kSmallMin = 256;
constexpr int kSmallPerClass = 32;

struct SmallCache {
  void* blocks[kSmallClasses][kSmallPerClass];
  int count[kSmallClasses] = {0};
  bool alive = true;
};

// The thread's cache: a plain pointer, so that reaching it takes one TLS lookup and no
// initialisation guard (a thread_local object with a destructor takes two and one).
thread_local SmallCache* t_small = nullptr;
// Stands for a thread's cache once it is gone: blocks freed during the thread's exit
// go back to the heap.
SmallCache g_gone_cache{{}, {0}, false};

// Frees the thread's cache when the thread exits.
struct SmallCacheOwner {
  ~SmallCacheOwner() {
    SmallCache* c = t_small;
    if (c == nullptr || c == &g_gone_cache) return;
    for (int k = 0; k < kSmallClasses; ++k)
      for (int i = 0; i < c->count[k]; ++i) std::free(c->blocks[k][i]);
    t_small = &g_gone_cache;
    delete c;
  }
};

SmallCache* thread_cache() {
  SmallCache* c = t_small;
  if (c != nullptr) return c;
  static thread_local SmallCacheOwner owner;  // constructed here, once per thread
  (void)owner;
  c = new (std::nothrow) SmallCache;
  t_small = c != nullptr ? c : &g_gone_cache;
  return t_small;
}

int small_class(size_t bytes, size_t* class_bytes) {
  size_t size = kSmallMin;
  int c = 0;
  while (size < bytes) size <<= 1, ++c;
  *class_bytes = size;
  return c < kSmallClasses ? c : -1;
}

// A fresh mapping of `size` bytes (a size class), or nullptr.
void* map_block(size_t size) {
  constexpr size_t kHugePage = size_t(2) << 20;
  if (size < kHugePage) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
  }
  // Huge pages (fewer faults, fewer TLB misses) back only 2 MiB-aligned 2 MiB spans: a
  // 4 MiB block mapped anywhere gets one, not two (MPI all-reduce at 4 MiB: 1.45x slower
  // unaligned, docs/MPI.md). Map a huge page more, keep the aligned part.
  char* raw = static_cast<char*>(
      mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (raw == MAP_FAILED) return nullptr;
  char* p = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(raw) + kHugePage - 1) & ~(kHugePage - 1));
  if (p > raw) munmap(raw, static_cast<size_t>(p - raw));
  const size_t tail = static_cast<size_t>(raw + size + kHugePage - (p + size));
  if (tail > 0) munmap(p + size, tail);
  madvise(p, size, MADV_HUGEPAGE);
  return p;
}

}  // namespace

void* alloc_small(size_t bytes, size_t* block_bytes) {
  size_t size;
  int c = small_class(bytes, &size);
  if (c < 0) {
    *block_bytes = (bytes + 63) / 64 * 64;
    return std::aligned_alloc(64, *block_bytes);
  }
  *block_bytes = size;
  SmallCache& cache = *thread_cache();
  if (cache.alive && cache.count[c] > 0) return cache.blocks[c][--cache.count[c]];
  return std::aligned_alloc(64, size);
}

void free_small(void* p, size_t block_bytes) {
  size_t size;
  int c = small_class(block_bytes, &size);
  SmallCache& cache = *thread_cache();
  if (c >= 0 && size == block_bytes && cache.alive && cache.count[c] < kSmallPerClass) {
    cache.blocks[c][cache.count[c]++] = p;
    return;
  }
  std::free(p);
}

size_t block_class(size_t bytes) {
  if (bytes < kLargeBlock) return bytes;
  int k = 63 - __builtin_clzll(bytes);
  size_t step = size_t(1) << (k - 2);
  return (bytes + step - 1) / step * step;
}

void* alloc_block(size_t bytes, size_t* block_bytes) {
  size_t size = block_class(bytes);
  *block_bytes = size;
  {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.free_by_class.find(size);
    if (it != c.free_by_class.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.cached_bytes -= size;
      return p;
    }
    for (size_t i = c.lazy.size(); i-- > 0;) {  // the most recently freed first
      if (c.lazy[i].bytes != size) continue;
      void* p = c.lazy[i].p;
      c.lazy.erase(c.lazy.begin() + static_cast<std::ptrdiff_t>(i));
      c.lazy_bytes -= size;
      return p;
    }
  }
  void* p = map_block(size);
  // The address space may be full of cached blocks (RLIMIT_AS): give them back, retry.
  if (p == nullptr && trim_block_cache(0) > 0) p = map_block(size);
  return p;
}

void free_block(void* p, size_t block_bytes) {
  Cache& c = cache();
  std::vector<Block> evicted;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.cached_bytes + block_bytes <= cache_limit()) {
      c.free_by_class[block_bytes].push_back(p);
      c.cached_bytes += block_bytes;
      return;
    }
    if (block_bytes <= lazy_limit()) {
      // Room by evicting the oldest: a steady state reuses the recent sizes.
      size_t drop = 0;
      while (drop < c.lazy.size() &&
             (c.lazy_bytes + block_bytes > lazy_limit() || c.lazy.size() - drop >= kMaxLazyBlocks)) {
        c.lazy_bytes -= c.lazy[drop].bytes;
        evicted.push_back(c.lazy[drop++]);
      }
      c.lazy.erase(c.lazy.begin(), c.lazy.begin() + static_cast<std::ptrdiff_t>(drop));
      // Under the lock (0.2 ms for 320 MiB): listed, another thread may take and write it.
      if (madvise(p, block_bytes, MADV_FREE) == 0) {
        c.lazy.push_back({p, block_bytes});
        c.lazy_bytes += block_bytes;
        p = nullptr;
      }
    }
  }
  for (const Block& b : evicted) munmap(b.p, b.bytes);  // outside the lock: munmap may be slow
  if (p != nullptr) munmap(p, block_bytes);
}

size_t trim_block_cache(size_t keep_bytes) {
  std::vector<std::pair<void*, size_t>> released;
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    // Largest classes first: the fewest unmaps for the bytes, and the small blocks
    // stay for the calls that come most often.
    // Lazy blocks count as cached and go first within a class.
    std::vector<size_t> classes;
    for (const auto& entry : c.free_by_class) classes.push_back(entry.first);
    for (const Block& b : c.lazy) classes.push_back(b.bytes);
    std::sort(classes.rbegin(), classes.rend());
    classes.erase(std::unique(classes.begin(), classes.end()), classes.end());
    for (size_t size : classes) {
      for (size_t i = c.lazy.size(); i-- > 0 && c.cached_bytes + c.lazy_bytes > keep_bytes;) {
        if (c.lazy[i].bytes != size) continue;
        released.emplace_back(c.lazy[i].p, size);
        c.lazy.erase(c.lazy.begin() + static_cast<std::ptrdiff_t>(i));
        c.lazy_bytes -= size;
      }
      std::vector<void*>& blocks = c.free_by_class[size];
      while (c.cached_bytes + c.lazy_bytes > keep_bytes && !blocks.empty()) {
        released.emplace_back(blocks.back(), size);
        blocks.pop_back();
        c.cached_bytes -= size;
      }
    }
  }
  size_t bytes = 0;
  for (const auto& [p, size] : released) {  // outside the lock: munmap may be slow
    munmap(p, size);
    bytes += size;
  }
  return bytes;
}

}  // namespace tpurt
