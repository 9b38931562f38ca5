// Reductions a transport runs itself (net::CollectiveOffload: MPI). It takes the
// all-reduces of rows whose order cannot matter here: one member per task (the
// engine's order among the tasks is its own, so floating-point results may differ in
// bits from one process's: docs/MPI.md), or exact reductions, each task's members
// reduced in memory first. Its reduce-scatter takes rows of one member per task in
// task order whose blocks are contiguous; other reduce-scatters of such rows, up to
// kOffloadScatterBytes, are its all-reduces, each member's block copied out.
#include "collectives/cluster_algorithms.h"
#include "collectives/reduce.h"
#include "net/collective_offload.h"

namespace tpurt {
namespace {

// Up to this many bytes of a member's input a reduce-scatter goes to the offload
// (MPI). Above it the exchanges are faster: Open MPI's non-blocking reduce-scatter
// reduces every block at one task through a fresh buffer of twice the input, and an
// all-reduce moves every block to every task. tpurt bench --tasks 4 --transport mpi
// -c reduce_scatter, runs alternated (docs/MPI.md): 1-8 MiB 0.62-0.74x the
// exchanges' time; 16 MiB 55-63 ms against 13-27 (under load).
constexpr size_t kOffloadScatterBytes = 8 << 20;

}  // namespace

namespace offload_scatter {

bool applies(const ClusterContext& cx, const Reduction& r, const Row& row) {
  const net::CollectiveOffload* offload = cx.offload();
  const TaskSplit& split = row.split;
  if (!r.scatter_blocks || offload == nullptr || row.size < 2 ||
      static_cast<int>(split.tasks.size()) != row.size || r.x->byte_size > kOffloadScatterBytes ||
      !offload->can_reduce_scatter(r.x->dtype, r.op))
    return false;
  // The engine gives block s to the group's s-th task: member s must be there.
  for (int s = 0; s < row.size; ++s)
    if (split.members[s][0] != s) return false;
  return true;
}

void run(ClusterContext& cx, ClusterCall& call, const Reduction& r, const Row& row, char*) {
  const int lr = cx.local_index(row.ids[row.split.mine]);
  cx.offload()->reduce_scatter(call.seq, call.digest, row.split.tasks, r.x->dtype, r.op, call.input[lr],
                               call.output[lr], r.x->num_elements / row.size, row.size, call.deadline,
                               cx.check(), cx.namer());
}

}  // namespace offload_scatter

namespace offload_reduce {

bool applies(const ClusterContext& cx, const Reduction& r, const Row& row) {
  const net::CollectiveOffload* offload = cx.offload();
  if (!r.into_output && r.x->byte_size > kOffloadScatterBytes) return false;
  if (offload == nullptr || row.split.tasks.size() < 2 || !offload->can_all_reduce(r.x->dtype, r.op))
    return false;
  bool one_each = true;
  for (const std::vector<int>& m : row.split.members) one_each &= m.size() == 1;
  return one_each || partials_exact(r.x->dtype, r.op);
}

void run(ClusterContext& cx, ClusterCall& call, const Reduction& r, const Row& row, char* result) {
  const Tensor* x = r.x;
  const std::vector<int>& mine = row.split.members[row.split.mine];
  const void* in = cx.input(call, row.ids[mine[0]]);
  if (mine.size() > 1) {
    char* partial = ClusterContext::grow(&cx.partial, x->byte_size);
    SourceList srcs(static_cast<int>(mine.size()));
    for (size_t j = 0; j < mine.size(); ++j) srcs.data()[j] = cx.input(call, row.ids[mine[j]]);
    reduce(x->dtype, r.op, srcs.data(), static_cast<int>(mine.size()), 0, x->num_elements, partial);
    in = partial;
  }
  cx.offload()->all_reduce(call.seq, call.digest, row.split.tasks, x->dtype, r.op, in, result, x->num_elements,
                           row.size, call.deadline, cx.check(), cx.namer());
}

}  // namespace offload_reduce
}  // namespace tpurt
