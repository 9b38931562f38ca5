// One table's rows and slot variables on this task: the shards of the task's cores,
// allocated once, at init. A row's variables lie side by side (parameters, then each
// slot: nv x dim floats a row): an update reads and writes them all, and one contiguous
// span of a row costs fewer DRAM pages and lets the hardware prefetcher follow.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "embedding/config.h"

namespace tpurt {
namespace embedding {

// Parameters plus slots: the optimizers have at most 3 slots.
constexpr int kMaxVariables = 16;

class TableStorage {
 public:
  // The rows of shards [first_shard, first_shard + num_shards) of `spec`; its slots
  // start at the optimizer's initial values. TPU_RESOURCE_EXHAUSTED naming the table and
  // the bytes when the memory cannot be had.
  TableStorage(const TableSpec& spec, int64_t first_shard, int64_t num_shards);

  bool holds(int64_t row) const {
    const int64_t s = spec_->shards.shard_of(row);
    return s >= first_shard_ && s < first_shard_ + num_shards_;
  }
  // Variable 0 is the parameters, 1.. the slots. The row must be held here.
  float* row(int variable, int64_t r) { return data_.get() + (index(r) * num_variables_ + variable) * dim_; }
  const float* row(int variable, int64_t r) const {
    return data_.get() + (index(r) * num_variables_ + variable) * dim_;
  }
  int num_variables() const { return num_variables_; }
  // All of a row's variables: num_variables() x dimension() floats from row(0, r).
  size_t span_floats() const { return static_cast<size_t>(num_variables_) * dim_; }
  int dimension() const { return dim_; }

 private:
  struct FreeDeleter {
    size_t mapped_bytes = 0;  // an anonymous mapping's size, or 0: calloc's
    void operator()(float* p) const;
  };
  int64_t index(int64_t r) const {
    if (mod_) {
      const int64_t S = spec_->shards.shards();
      return (r / S) * num_shards_ + (r % S - first_shard_);
    }
    return r - first_row_;
  }

  const TableSpec* spec_;
  int64_t first_shard_, num_shards_;
  bool mod_;
  int dim_;
  int num_variables_;
  int64_t first_row_ = 0;  // DIV: the first row held here
  std::unique_ptr<float[], FreeDeleter> data_;
};

}  // namespace embedding
}  // namespace tpurt
