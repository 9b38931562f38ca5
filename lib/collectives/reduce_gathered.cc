// Small reductions (and rows all on this task): every task gets every member's input
// of the row by a gather and reduces them all itself, in member order: one exchange
// instead of two. Over shared memory, by posts, every row here at once.
#include "collectives/cluster_algorithms.h"
#include "collectives/reduce.h"

namespace tpurt {
namespace gathered {

bool applies(const ClusterContext&, const Reduction& r, const Row& row) {
  return row.split.tasks.size() == 1 || r.x->byte_size * static_cast<size_t>(row.size) <= kGatherReduceBytes;
}

void run(ClusterContext& cx, ClusterCall& call, const Reduction& r, const Row& row, char* result) {
  const Groups one{row.ids, 1, row.size};
  gather_groups(cx, call, one, r.x->byte_size, [&](const int32_t*, int size, const void* const* in) {
    reduce(r.x->dtype, r.op, in, size, 0, r.x->num_elements, result);
  });
}

}  // namespace gathered

namespace posted {

bool reduce_takes(const ClusterContext& cx, const Groups& g, const Reduction& r) {
  return take(cx, r.x->byte_size) && r.x->byte_size * static_cast<size_t>(g.max_size()) <= kGatherReduceBytes;
}

void reduce(ClusterContext& cx, ClusterCall& call, const Groups& g, const Reduction& r, Deliver deliver) {
  gather(cx, call, g, r.x->byte_size, [&](const int32_t* row, int size, const void* const* in) {
    int first = 0;
    while (!cx.is_local(row[first])) ++first;
    char* result = r.into_output ? static_cast<char*>(cx.output(call, row[first]))
                                 : ClusterContext::grow(&cx.result, r.x->byte_size);
    tpurt::reduce(r.x->dtype, r.op, in, size, 0, r.x->num_elements, result);
    for (int k = first; k < size; ++k)
      if (cx.is_local(row[k])) deliver(row[k], result);
  });
}

}  // namespace posted
}  // namespace tpurt
