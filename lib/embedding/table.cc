#include "embedding/table.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/status.h"

namespace tpurt {
namespace embedding {

void TableStorage::FreeDeleter::operator()(float* p) const { std::free(p); }

namespace {
// What the machine could hold at all: a table beyond it fails at init rather than at
// its first touch (the kernel overcommits).
int64_t physical_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? int64_t{pages} * size : INT64_MAX;
}
// Zeroed floats; a large variable on transparent huge pages where the kernel gives them
// on request (THP "madvise"): lookups and updates touch rows at random, and with 4 KiB
// pages nearly each one misses the TLB. Freed with std::free either way.
float* allocate_zeroed(int64_t count) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(float);
  constexpr size_t kHugePage = size_t{2} << 20;
  if (bytes < kHugePage) return static_cast<float*>(std::calloc(bytes / sizeof(float), sizeof(float)));
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = nullptr;
  if (posix_memalign(&p, kHugePage, rounded) != 0) return nullptr;
#ifdef MADV_HUGEPAGE
  madvise(p, rounded, MADV_HUGEPAGE);  // advice: without it the pages are small
#endif
  std::memset(p, 0, bytes);
  return static_cast<float*>(p);
}
}  // namespace

TableStorage::TableStorage(const TableSpec& spec, int64_t first_shard, int64_t num_shards)
    : spec_(&spec), first_shard_(first_shard), num_shards_(num_shards),
      mod_(spec.shards.mod()), dim_(spec.dimension) {
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
  const std::vector<float>& initial = spec.optimizer->slot_initial_values();
  for (int v = 0; v < variables; ++v) {
    float* p = allocate_zeroed(rows * dim_);
    if (p == nullptr)
      fail(TPU_RESOURCE_EXHAUSTED, "embedding table '", spec.name, "' needs ", total,
           " bytes on this task and the allocation of ", bytes_per_variable, " failed");
    vars_.emplace_back(p);
    if (v > 0 && initial[v - 1] != 0) std::fill(p, p + rows * dim_, initial[v - 1]);
  }
}

}  // namespace embedding
}  // namespace tpurt
