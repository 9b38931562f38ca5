#include "embedding/table.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstdint>
#include <cstring>

#include "core/status.h"

namespace tpurt {
namespace embedding {

void TableStorage::FreeDeleter::operator()(float* p) const {
  if (mapped_bytes > 0) munmap(p, mapped_bytes);
  else std::free(p);
}

namespace {
// What the machine could hold at all: a table beyond it fails at init rather than at
// its first touch (the kernel overcommits).
int64_t physical_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? int64_t{pages} * size : INT64_MAX;
}
// Zeroed floats; a large variable on transparent huge pages where the kernel gives them
// on request (THP "madvise"): lookups and updates touch rows at random, and with 4 KiB
// pages nearly each one misses the TLB. Large ones are anonymous mappings, aligned to a
// huge page, which the kernel zeroes as they are first touched (*mapped_bytes: their
// size, for munmap; 0 for calloc's).
float* allocate_zeroed(int64_t count, size_t* mapped_bytes) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(float);
  constexpr size_t kHugePage = size_t{2} << 20;
  *mapped_bytes = 0;
  if (bytes < kHugePage) return static_cast<float*>(std::calloc(bytes / sizeof(float), sizeof(float)));
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* raw = mmap(nullptr, rounded + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + rounded + kHugePage;
  if (end > aligned + rounded) munmap(reinterpret_cast<void*>(aligned + rounded), end - aligned - rounded);
#ifdef MADV_HUGEPAGE
  madvise(reinterpret_cast<void*>(aligned), rounded, MADV_HUGEPAGE);  // advice: without it the pages are small
#endif
  *mapped_bytes = rounded;
  return reinterpret_cast<float*>(aligned);
}
}  // namespace

TableStorage::TableStorage(const TableSpec& spec, int64_t first_shard, int64_t num_shards)
    : spec_(&spec), first_shard_(first_shard), num_shards_(num_shards),
      mod_(spec.shards.mod()), dim_(spec.dimension), data_(nullptr, FreeDeleter{}) {
  const ShardMap& m = spec.shards;
  int64_t rows = 0;
  if (mod_) {
    rows = m.max_rows() * num_shards;
  } else {
    for (int64_t s = 0; s < first_shard; ++s) first_row_ += m.rows_in(s);
    for (int64_t s = first_shard; s < first_shard + num_shards; ++s) rows += m.rows_in(s);
  }
  const int variables = 1 + static_cast<int>(spec.optimizer->slot_names().size());
  if (variables > kMaxVariables)
    fail(TPU_INTERNAL, "table '", spec.name, "' has ", variables, " variables; at most ", kMaxVariables);
  const int64_t bytes_per_variable = rows * dim_ * static_cast<int64_t>(sizeof(float));
  const int64_t total = bytes_per_variable * variables;
  if (total / variables != bytes_per_variable || total > physical_bytes())
    fail(TPU_RESOURCE_EXHAUSTED, "embedding table '", spec.name, "' needs ", total, " bytes on this task (",
         rows, " rows of ", dim_, " floats, ", variables, " variables), more than the machine's ",
         physical_bytes(), " bytes of memory");
  num_variables_ = variables;
  size_t mapped = 0;
  float* p = allocate_zeroed(rows * dim_ * variables, &mapped);
  if (p == nullptr)
    fail(TPU_RESOURCE_EXHAUSTED, "embedding table '", spec.name, "' needs ", total,
         " bytes on this task and their allocation failed");
  data_ = std::unique_ptr<float[], FreeDeleter>(p, FreeDeleter{mapped});
  const std::vector<float>& initial = spec.optimizer->slot_initial_values();
  for (int v = 1; v < variables; ++v) {
    if (initial[v - 1] == 0) continue;
    for (int64_t r = 0; r < rows; ++r) {
      float* at = p + (r * variables + v) * dim_;
      std::fill(at, at + dim_, initial[v - 1]);
    }
  }
}

}  // namespace embedding
}  // namespace tpurt
