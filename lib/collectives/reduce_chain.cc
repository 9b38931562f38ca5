// The reduction of a row by passing the fold along its runs of members: each task
// folds its own members onto what the previous run's task sends, in member order (so
// the bits are a single process's), in pieces, pipelined; the last run's task then
// spreads the result along the row's tasks. For floating-point rows whose tasks hold
// several members each: a task sends one partial, not one input per member.
#include <algorithm>
#include <vector>

#include "collectives/cluster_algorithms.h"
#include "collectives/reduce.h"
#include "core/dtype.h"

namespace tpurt {
namespace chain {
namespace {

// A chained reduction passes its fold along in pieces of this many bytes (of the
// partial's type): small enough to stay in the caches between the receive, the fold
// and the send, large enough that a piece costs far more than its exchange.
constexpr size_t kChainPieceBytes = 256 * 1024;

// A row's members in maximal runs of one task, in member order.
struct Run {
  int task;
  int begin, end;  // positions in the row
};

std::vector<Run> runs_of(const ClusterContext& cx, const Row& row) {
  std::vector<Run> runs;
  for (int k = 0; k < row.size; ++k) {
    const int t = cx.task_of(row.ids[k]);
    if (runs.empty() || runs.back().task != t) runs.push_back({t, k, k + 1});
    else runs.back().end = k + 1;
  }
  return runs;
}

// Whether passing the fold along the runs moves fewer bytes than sending every member's
// input to the owner of each slice. Per element of the result, the chain sends
// (runs - 1) partials and the slices take size * (np - 1) / np inputs; both then
// spread the result to np - 1 tasks.
bool chain_pays(size_t num_runs, int size, int np, size_t partial_size, size_t esize) {
  return (num_runs - 1) * partial_size * np < static_cast<size_t>(size) * (np - 1) * esize;
}

}  // namespace

bool applies(const ClusterContext& cx, const Reduction& r, const Row& row) {
  const tpu_dtype dtype = r.x->dtype;
  if (partials_exact(dtype, r.op) || !partial_fold_supported(dtype, r.op)) return false;
  return chain_pays(runs_of(cx, row).size(), row.size, static_cast<int>(row.split.tasks.size()),
                    dtype_size(partial_dtype(dtype)), dtype_size(dtype));
}

// The pipeline runs in steps, each one exchange (every transfer of a step posted at
// once) followed by the folds it allows. A transfer's two ends are in the same step,
// so every step completes whatever the sockets buffer. Run r receives piece c in
// step c + r and folds it; the next run receives it in step c + r + 1; the last run
// (m - 1) finishes it, and the i-th task of the spread receives it in step
// c + m - 1 + i. Tags: the row's, and the next for the spread.
void run(ClusterContext& cx, ClusterCall& call, const Reduction& red, const Row& row, char* result) {
  const uint32_t tag = static_cast<uint32_t>(row.index) * 2;
  const std::vector<int>& tasks = row.split.tasks;
  const int size = row.size;
  const tpu_reduce_op op = red.op;
  const std::vector<Run> runs = runs_of(cx, row);
  const int64_t m = static_cast<int64_t>(runs.size());
  const tpu_dtype dtype = red.x->dtype, pdtype = partial_dtype(dtype);
  const size_t esize = dtype_size(dtype), psize = dtype_size(pdtype);
  const int64_t n = red.x->num_elements;
  const int64_t piece = static_cast<int64_t>(kChainPieceBytes / psize);
  const int64_t pieces = (n + piece - 1) / piece;
  auto length = [&](int64_t c) { return std::min(piece, n - c * piece); };
  auto at = [&](char* base, int64_t c) { return base + static_cast<size_t>(c * piece) * esize; };
  // This task's runs. A partial of the result's own type is kept in the result; any
  // other (float32 for bfloat16 and half) in two slots per run, one being folded
  // while the other is sent.
  std::vector<int64_t> my_runs;
  for (int64_t r = 0; r < m; ++r)
    if (runs[r].task == cx.task_id()) my_runs.push_back(r);
  const bool in_result = pdtype == dtype;
  char* slots = in_result ? nullptr
                          : ClusterContext::grow(&cx.partial, my_runs.size() * 2 * static_cast<size_t>(piece) * psize);
  auto partial = [&](size_t i, int64_t c) {
    return in_result ? at(result, c) : slots + (2 * i + (c & 1)) * static_cast<size_t>(piece) * psize;
  };
  // The spread starts at the last run's task and follows the group's tasks in order.
  const int64_t np = static_cast<int64_t>(tasks.size());
  const int64_t last = std::find(tasks.begin(), tasks.end(), runs.back().task) - tasks.begin();
  const int64_t me = std::find(tasks.begin(), tasks.end(), cx.task_id()) - tasks.begin();
  const int64_t spread_pos = (me - last + np) % np;
  auto valid = [&](int64_t c) { return c >= 0 && c < pieces; };
  SourceList srcs(size);
  std::vector<net::Send> sends;
  std::vector<net::Recv> recvs;
  for (int64_t step = 0; step < pieces + m + np - 2; ++step) {
    sends.clear();
    recvs.clear();
    for (size_t i = 0; i < my_runs.size(); ++i) {
      const int64_t r = my_runs[i];
      if (r > 0 && valid(step - r))
        recvs.push_back({runs[r - 1].task, tag, partial(i, step - r), length(step - r) * psize});
      if (r + 1 < m && valid(step - r - 1))
        sends.push_back({runs[r + 1].task, tag, partial(i, step - r - 1), length(step - r - 1) * psize});
    }
    const int64_t got = step - (m - 1) - spread_pos, forward = got - 1;
    if (spread_pos > 0 && valid(got))
      recvs.push_back({tasks[(me - 1 + np) % np], tag + 1, at(result, got), length(got) * esize});
    if (spread_pos + 1 < np && valid(forward))
      sends.push_back({tasks[(me + 1) % np], tag + 1, at(result, forward), length(forward) * esize});
    cx.exchange_once(call, sends, recvs);
    for (size_t i = 0; i < my_runs.size(); ++i) {
      const int64_t r = my_runs[i], c = step - r;
      if (!valid(c)) continue;
      const int members = runs[r].end - runs[r].begin;
      for (int j = 0; j < members; ++j) srcs.data()[j] = cx.input(call, row.ids[runs[r].begin + j]);
      char* acc = partial(i, c);
      fold_partial(dtype, op, r > 0 ? acc : nullptr, srcs.data(), members, c * piece, length(c), acc);
      if (r + 1 == m) finish_partial(dtype, op, acc, size, length(c), at(result, c));
    }
  }
}

}  // namespace chain
}  // namespace tpurt
