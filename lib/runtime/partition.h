// Spatial partitioning of a replica's inputs and outputs over its cores
// (tpu_partition_spec): TensorFlow's TPUPartitionedInputV2 / TPUPartitionedOutputV2
// partition_dims, with TPUEstimator's split for sizes that do not divide
// (tensorflow/python/tpu/tpu_feed.py, partition_or_replicate_on_host).
// Everything throws tpurt::Error; tensors returned are new references.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"
#include "tpurt/replicate.h"

namespace tpurt {

// Piece `index` of a dimension of size n cut `count` ways: [*start, *start + *size).
// Pieces of ceil(n / count) while they fit, then the remainder, then empty pieces
// (5 cut 4 ways: 2, 2, 1, 0), as tpu_feed.py's greedy split and XLA's tiling do.
void partition_range(int64_t n, int count, int index, int64_t* start, int64_t* size);

// The rules of one spec that do not need the tensor: num_dims in [0, TPU_MAX_RANK],
// every partition_dims >= 1, their product == cores (when num_dims > 0). `kind` is
// "input" or "output", named with `index` in the message.
void check_partition_spec(const tpu_partition_spec& spec, int cores, const char* kind,
                          int index);
// The rank rule: a partitioned spec has one count per dimension of the tensor.
void check_partition_rank(const tpu_partition_spec& spec, const Tensor* t, const char* kind,
                          int index);

// Whether the spec cuts anything: num_dims > 0 (a valid spec then has product cores).
inline bool is_partitioned(const tpu_partition_spec& spec) { return spec.num_dims > 0; }

// Tile `tile` (row-major over the grid partition_dims[0..rank)) of t, a new tensor.
// The spec must be valid for t.
Tensor* partition_tile(const Tensor* t, const tpu_partition_spec& spec, int tile);

// A new handle on t's buffer (copy-on-write): the whole input one core gets.
Tensor* share_whole(const Tensor* t);

// Assembles tiles[c * stride] for c in [0, cores) (logical core c's tile) into one
// tensor, the inverse of partition_tile: every tile a tensor of the spec's rank and
// one dtype, and tiles in one row of the grid agree in every other dimension.
// Errors name output `output` of replica `replica` and the logical cores at fault.
Tensor* assemble_tiles(Tensor* const* tiles, size_t stride, int cores,
                       const tpu_partition_spec& spec, int replica, int output);

}  // namespace tpurt
