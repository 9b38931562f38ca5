#include "runtime/partition.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/box_copy.h"
#include "core/checked.h"
#include "core/dtype.h"
#include "core/status.h"

namespace tpurt {
namespace {

// The grid coordinates of `tile`, row-major (the last dimension fastest), as
// TensorFlow's tile_assignment np.arange(prod(dims)).reshape(dims) numbers them
// (tpu_feed.py, _tag_sharding_attribute_for_dequeued_tensor).
void tile_coords(const tpu_partition_spec& spec, int tile, int* coords) {
  for (int d = spec.num_dims - 1; d >= 0; --d) {
    coords[d] = tile % spec.partition_dims[d];
    tile /= spec.partition_dims[d];
  }
}

int tile_index(const tpu_partition_spec& spec, const int* coords) {
  int tile = 0;
  for (int d = 0; d < spec.num_dims; ++d) tile = tile * spec.partition_dims[d] + coords[d];
  return tile;
}

std::string dims_text(const tpu_partition_spec& spec) {
  return shape_string(std::vector<int64_t>(spec.partition_dims, spec.partition_dims + spec.num_dims).data(),
                      spec.num_dims);
}

}  // namespace

void partition_range(int64_t n, int count, int index, int64_t* start, int64_t* size) {
  const int64_t piece = n / count + (n % count != 0);  // ceil(n / count)
  *start = std::min(index * piece, n);
  *size = std::min(piece, n - *start);
}

void check_partition_spec(const tpu_partition_spec& spec, int cores, const char* kind,
                          int index) {
  if (spec.num_dims < 0 || spec.num_dims > TPU_MAX_RANK)
    invalid_argument(kind, "_partitions[", index, "].num_dims is ", spec.num_dims,
                     "; it must be in [0, ", TPU_MAX_RANK, "] (0: not partitioned)");
  int64_t product = 1;
  bool overflow = false;
  for (int d = 0; d < spec.num_dims; ++d) {
    const int p = spec.partition_dims[d];
    if (p < 1)
      invalid_argument(kind, "_partitions[", index, "].partition_dims[", d, "] is ", p,
                       "; every partition dimension must be >= 1");
    overflow |= __builtin_mul_overflow(product, p, &product);
  }
  if (spec.num_dims > 0 && (overflow || product != cores))
    invalid_argument("the product of ", kind, "_partitions[", index, "].partition_dims ",
                     dims_text(spec), " is ", overflow ? std::string("more than 2^63") : std::to_string(product),
                     " but must equal the cores per replica (", cores, ")");
}

void check_partition_rank(const tpu_partition_spec& spec, const Tensor* t, const char* kind,
                          int index) {
  if (spec.num_dims > 0 && spec.num_dims != t->rank)
    invalid_argument(kind, "_partitions[", index, "] has ", spec.num_dims,
                     " partition dimensions ", dims_text(spec), " but ", kind, " ", index, " is ",
                     describe(t), " of rank ", t->rank, "; they must be equal");
}

Tensor* partition_tile(const Tensor* t, const tpu_partition_spec& spec, int tile) {
  int coords[TPU_MAX_RANK];
  tile_coords(spec, tile, coords);
  int64_t start[TPU_MAX_RANK], extent[TPU_MAX_RANK];
  for (int d = 0; d < t->rank; ++d)
    partition_range(t->dims[d], spec.partition_dims[d], coords[d], &start[d], &extent[d]);
  Tensor* out = new_tensor_uninitialized(t->dtype, extent, t->rank);
  const int64_t zero[TPU_MAX_RANK] = {0};
  copy_box(dtype_size(t->dtype), t->rank, extent, t->data, t->dims, start, out->data, extent,
           zero);
  return out;
}

Tensor* share_whole(const Tensor* t) { return share(t, t->dims, t->rank, 0); }

Tensor* assemble_tiles(Tensor* const* tiles, size_t stride, int cores,
                       const tpu_partition_spec& spec, int replica, int output) {
  auto tile = [&](int c) { return tiles[c * stride]; };
  const int rank = spec.num_dims;
  for (int c = 0; c < cores; ++c) {
    const Tensor* t = tile(c);
    if (t == nullptr)
      invalid_argument("replica ", replica, " logical core ", c, " left output ", output,
                       " NULL; a partitioned output (output_partitions[", output,
                       "]) needs a tile from every core");
    if (t->rank != rank)
      invalid_argument("replica ", replica, " logical core ", c, " output ", output, " is ",
                       describe(t), " of rank ", t->rank, " but output_partitions[", output,
                       "] has ", rank, " partition dimensions ", dims_text(spec));
    if (t->dtype != tile(0)->dtype)
      invalid_argument("replica ", replica, " output ", output, ": logical core 0's tile is ",
                       describe(tile(0)), " but logical core ", c, "'s is ", describe(t),
                       "; the tiles of a partitioned output must have one dtype");
  }
  if (cores == 1) {  // the whole output
    retain(tile(0));
    return tile(0);
  }
  // Tiles that differ in one grid coordinate only (neighbours in a row of the grid
  // along e) must agree in every dimension but e; by transitivity, each tile's size
  // along d then depends on its coordinate along d alone, so the grid fits together.
  int coords[TPU_MAX_RANK];
  for (int c = 0; c < cores; ++c) {
    tile_coords(spec, c, coords);
    for (int e = 0; e < rank; ++e) {
      if (coords[e] == 0) continue;
      --coords[e];
      const int n = tile_index(spec, coords);
      ++coords[e];
      for (int d = 0; d < rank; ++d)
        if (d != e && tile(n)->dims[d] != tile(c)->dims[d])
          invalid_argument("replica ", replica, " output ", output, ": logical cores ", n,
                           " and ", c, " give tiles ", describe(tile(n)), " and ",
                           describe(tile(c)), ", which differ in dimension ", d,
                           "; tiles in one row of the partition grid ", dims_text(spec),
                           " (here along dimension ", e,
                           ") must agree in every other dimension");
    }
  }
  // Offsets of each grid coordinate along each dimension: the sizes of the tiles
  // before it on the grid's axis through tile 0.
  int64_t dims[TPU_MAX_RANK];
  std::vector<int64_t> offsets;
  std::vector<size_t> first(rank + 1, 0);
  for (int d = 0; d < rank; ++d) {
    first[d + 1] = first[d] + spec.partition_dims[d];
    int axis[TPU_MAX_RANK] = {0};
    dims[d] = 0;
    for (int g = 0; g < spec.partition_dims[d]; ++g) {
      axis[d] = g;
      offsets.push_back(dims[d]);
      dims[d] = checked_add(dims[d], tile(tile_index(spec, axis))->dims[d], "dimension ", d,
                            " of output ", output, " assembled from ", cores, " tiles");
    }
  }
  Tensor* out = new_tensor_uninitialized(tile(0)->dtype, dims, rank);
  const size_t elem = dtype_size(out->dtype);
  int64_t at[TPU_MAX_RANK];
  for (int c = 0; c < cores; ++c) {
    tile_coords(spec, c, coords);
    for (int d = 0; d < rank; ++d) at[d] = offsets[first[d] + coords[d]];
    const Tensor* t = tile(c);
    const int64_t zero[TPU_MAX_RANK] = {0};
    copy_box(elem, rank, t->dims, t->data, t->dims, zero, out->data, out->dims, at);
  }
  return out;
}

}  // namespace tpurt
