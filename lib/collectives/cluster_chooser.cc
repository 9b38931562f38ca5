// Which algorithm runs a collective's rows across tasks: the tables below, read in
// order, the first whose predicate holds. Every task of a row evaluates them alike
// (they read the row, the sizes and the transport, which every task knows), so all
// of a row's tasks run the same algorithm.
#include "collectives/cluster_algorithms.h"

#include <vector>

#include "core/tensor.h"
#include "trace/trace.h"

namespace tpurt {
namespace {

// A gather of one row (all-gather, all-to-all, and a small reduction's inputs).
constexpr RowGatherer kGatherers[] = {
    // name         applies              run
    // more than 2 tasks, not shared memory, all inputs <= kGatherReduceBytes:
    {"log rounds", log_rounds::applies, log_rounds::run},
    // otherwise:
    {"direct", direct::applies, direct::run},
};

// A reduction of one row (all-reduce, reduce-scatter).
constexpr RowReducer kReducers[] = {
    // name                 applies                   run                    writes_outputs
    // a reduce-scatter of one member per task in task order, blocks contiguous,
    // input <= 8 MiB, the offload (MPI) takes the type and op:
    {"offload reduce-scatter", offload_scatter::applies, offload_scatter::run, true},
    // all-reduce (or reduce-scatter <= 8 MiB) over an offload taking the type and op,
    // one member per task or exact partials:
    {"offload all-reduce", offload_reduce::applies, offload_reduce::run, false},
    // all-reduce over shared windows, >= 3 tasks, input >= 128 KiB, one member per
    // task or exact partials:
    {"staged windows", staged::applies, staged::run, false},
    // all on this task, or all inputs <= kGatherReduceBytes:
    {"gather and reduce", gathered::applies, gathered::run, false},
    // floating point whose fold passed along the row's runs moves fewer bytes:
    {"fold chain", chain::applies, chain::run, false},
    // otherwise:
    {"reduce-scatter, all-gather", slices::applies, slices::run, false},
};

template <typename Algorithm, size_t N, typename... Args>
const Algorithm& first_applying(const Algorithm (&table)[N], const Args&... args) {
  for (const Algorithm& a : table)
    if (a.applies(args...)) return a;
  return table[N - 1];  // the last applies always
}

}  // namespace

void gather_groups(ClusterContext& cx, ClusterCall& call, const Groups& g, size_t bytes, UseRow use) {
  // Small ones over shared memory: every row here at once (a task posts once).
  if (posted::take(cx, bytes)) {
    trace::note_algorithm("posted gather");
    posted::gather(cx, call, g, bytes, use);
    return;
  }
  std::vector<const void*> inputs(g.max_size());
  for (int gi = 0; gi < g.num_groups; ++gi) {
    const Row row{g.row(gi), g.size(gi), gi, cx.split(g.row(gi), g.size(gi))};
    if (row.split.mine < 0) continue;
    const RowGatherer& algorithm = first_applying(kGatherers, cx, row, bytes);
    trace::note_algorithm(algorithm.name);
    algorithm.run(cx, call, row, bytes, inputs.data(), use);
  }
}

void reduce_groups(ClusterContext& cx, ClusterCall& call, const Groups& g, const Reduction& r,
                   Deliver deliver) {
  // Small ones over shared memory: every row here at once (a task posts once).
  if (posted::reduce_takes(cx, g, r)) {
    trace::note_algorithm("posted reduce");
    posted::reduce(cx, call, g, r, deliver);
    return;
  }
  for (int gi = 0; gi < g.num_groups; ++gi) {
    const Row row{g.row(gi), g.size(gi), gi, cx.split(g.row(gi), g.size(gi))};
    if (row.split.mine < 0) continue;
    const RowReducer& algorithm = first_applying(kReducers, cx, r, row);
    trace::note_algorithm(algorithm.name);
    if (algorithm.writes_outputs) {
      algorithm.run(cx, call, r, row, nullptr);
      continue;
    }
    // The whole result: the first local member's output, or a buffer of ours.
    const std::vector<int>& mine = row.split.members[row.split.mine];
    char* result = r.into_output ? static_cast<char*>(cx.output(call, row.ids[mine[0]]))
                                 : ClusterContext::grow(&cx.result, r.x->byte_size);
    algorithm.run(cx, call, r, row, result);
    for (int k : mine) deliver(row.ids[k], result);
  }
}

}  // namespace tpurt
