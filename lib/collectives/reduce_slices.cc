// The reduction of a row in two exchanges among its tasks: the elements are split
// among the tasks, each task sends each owner its contributions to the owner's slice
// (every member's input, or for exact ops one partial of its members) and the owner
// reduces it in member order (reduce-scatter); then every owner sends its reduced
// slice to the others (all-gather). Pairwise, in rounds when large.
#include <vector>

#include "collectives/cluster_algorithms.h"
#include "collectives/reduce.h"
#include "core/dtype.h"

namespace tpurt {
namespace slices {

bool applies(const ClusterContext&, const Reduction&, const Row&) { return true; }

void run(ClusterContext& cx, ClusterCall& call, const Reduction& r, const Row& row, char* result) {
  const TaskSplit& split = row.split;
  const tpu_dtype dtype = r.x->dtype;
  const tpu_reduce_op op = r.op;
  const size_t esize = dtype_size(dtype);
  const int64_t n = r.x->num_elements;
  const int np = static_cast<int>(split.tasks.size());
  const bool exact = partials_exact(dtype, op);
  const std::vector<int>& mine = split.members[split.mine];
  auto local_input = [&](int k) { return static_cast<const char*>(cx.input(call, row.ids[k])); };
  // This task's partial (exact ops): its members reduced, all elements.
  char* partial = nullptr;
  if (exact) {
    partial = ClusterContext::grow(&cx.partial, r.x->byte_size);
    SourceList srcs(static_cast<int>(mine.size()));
    for (size_t j = 0; j < mine.size(); ++j) srcs.data()[j] = local_input(mine[j]);
    reduce(dtype, op, srcs.data(), static_cast<int>(mine.size()), 0, n, partial);
  }
  int64_t my_lo, my_len;
  slice_of(n, np, split.mine, &my_lo, &my_len);
  const size_t my_bytes = static_cast<size_t>(my_len) * esize;
  // Phase 1: every task sends each owner its contributions to the owner's slice.
  std::vector<net::Send> sends;
  std::vector<net::Recv> recvs;
  std::vector<size_t> slot_of_task(np, 0);  // first receive slot of each task
  size_t slots = 0;
  for (int s = 0; s < np; ++s) {
    if (s == split.mine) continue;
    slot_of_task[s] = slots;
    slots += exact ? 1 : split.members[s].size();
  }
  char* received = ClusterContext::grow(&cx.received, slots * my_bytes);
  const uint32_t tag = static_cast<uint32_t>(row.index) * 2;
  for (int s = 0; s < np; ++s) {
    if (s == split.mine) continue;
    int64_t lo, len;
    slice_of(n, np, s, &lo, &len);
    const size_t off = static_cast<size_t>(lo) * esize, bytes = static_cast<size_t>(len) * esize;
    if (exact) sends.push_back({split.tasks[s], tag, partial + off, bytes});
    else
      for (int k : mine) sends.push_back({split.tasks[s], tag, local_input(k) + off, bytes});
    const size_t count = exact ? 1 : split.members[s].size();
    for (size_t c = 0; c < count; ++c)
      recvs.push_back({split.tasks[s], tag, received + (slot_of_task[s] + c) * my_bytes, my_bytes});
  }
  cx.exchange(call, sends, recvs, &split.tasks);
  // Reduce this task's slice.
  const size_t my_off = static_cast<size_t>(my_lo) * esize;
  if (exact) {
    SourceList srcs(np);
    int k = 0;
    srcs.data()[k++] = partial + my_off;
    for (int s = 0; s < np; ++s)
      if (s != split.mine) srcs.data()[k++] = received + slot_of_task[s] * my_bytes;
    reduce(dtype, op, srcs.data(), np, 0, my_len, result + my_off);
  } else {
    SourceList srcs(row.size);
    for (int s = 0; s < np; ++s)
      for (size_t c = 0; c < split.members[s].size(); ++c) {
        const int k = split.members[s][c];
        srcs.data()[k] = s == split.mine ? local_input(k) + my_off : received + (slot_of_task[s] + c) * my_bytes;
      }
    reduce(dtype, op, srcs.data(), row.size, 0, my_len, result + my_off);
  }
  // Phase 2: every owner sends its reduced slice to the others.
  sends.clear();
  recvs.clear();
  for (int s = 0; s < np; ++s) {
    if (s == split.mine) continue;
    int64_t lo, len;
    slice_of(n, np, s, &lo, &len);
    sends.push_back({split.tasks[s], tag + 1, result + my_off, my_bytes});
    recvs.push_back({split.tasks[s], tag + 1, result + static_cast<size_t>(lo) * esize,
                     static_cast<size_t>(len) * esize});
  }
  cx.exchange(call, sends, recvs, &split.tasks);
}

}  // namespace slices
}  // namespace tpurt
