#include "collectives/shapes.h"

#include <algorithm>
#include <vector>

#include "core/checked.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor_ops.h"
#include "topology/group_modes.h"

namespace tpurt {

int all_gather_shape(const Tensor* x, int axis, int group_size, int64_t* dims) {
  if (x->rank == 0) invalid_argument("all_gather needs a tensor of rank >= 1, got a scalar");
  const int a = normalize_axis(axis, x->rank, "axis");
  std::copy(x->dims, x->dims + x->rank, dims);
  dims[a] = checked_mul(dims[a], int64_t{group_size}, "dimension ", a, " of all_gather's output (",
                        group_size, " x ", dtype_name(x->dtype), ShapeText{x->dims, x->rank}, ")");
  return a;
}

int reduce_scatter_shape(const Tensor* x, int axis, int group_size, int64_t* dims) {
  if (x->rank == 0) invalid_argument("reduce_scatter needs a tensor of rank >= 1, got a scalar");
  const int a = normalize_axis(axis, x->rank, "scatter_axis");
  if (x->dims[a] % group_size != 0)
    invalid_argument("dimension ", a, " of ", describe(x), " (", x->dims[a],
                     ") is not divisible by the group size ", group_size);
  std::copy(x->dims, x->dims + x->rank, dims);
  dims[a] /= group_size;
  return a;
}

void all_to_all_shape(const Tensor* x, int concat_dim, int split_dim, int split_count,
                      int group_size, int* concat, int* split, int64_t* box, int64_t* dims) {
  if (x->rank == 0) invalid_argument("all_to_all needs a tensor of rank >= 1, got a scalar");
  if (split_count < 1) invalid_argument("split_count must be >= 1, got ", split_count);
  const int c = normalize_axis(concat_dim, x->rank, "concat_dimension");
  const int s = normalize_axis(split_dim, x->rank, "split_dimension");
  if (split_count != group_size)
    invalid_argument("split_count ", split_count, " must equal the group size ", group_size);
  if (x->dims[s] % split_count != 0)
    invalid_argument("dimension ", s, " of ", describe(x), " (", x->dims[s],
                     ") is not divisible by split_count ", split_count);
  std::copy(x->dims, x->dims + x->rank, box);
  box[s] /= split_count;
  std::copy(box, box + x->rank, dims);
  dims[c] = checked_mul(dims[c], int64_t{split_count}, "dimension ", c,
                        " of all_to_all's output (", dtype_name(x->dtype),
                        ShapeText{x->dims, x->rank}, " split ", split_count, " ways along ", s,
                        " and concatenated along ", c, ")");
  *concat = c;
  *split = s;
}

int permute_source(const int32_t* pairs, int num_pairs, int num_replicas, int replica) {
  check_permute_pairs(pairs, num_pairs, num_replicas, "replica", "");
  for (int i = 0; i < num_pairs; ++i)
    if (pairs[2 * i + 1] == replica) return pairs[2 * i];
  return -1;
}

}  // namespace tpurt
