// The algorithms of a collective across tasks, one per file, behind one interface:
// each works on one group row (Row: its participants and their tasks) of one call
// (ClusterCall), and says whether it applies from what every task of the row knows
// alike, so that they all choose the same. cluster_chooser.cc holds the tables that
// choose among them (the first that applies runs) and the loops over a collective's
// rows; the collectives themselves (cluster_communicator.cc) call only those loops.
//
// Results are bit-identical to a single process: a reduction folds every member's
// input in member order, except where the order cannot change the bits
// (partials_exact in reduce.h, and the offload's own order: docs/MPI.md).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "collectives/cluster_context.h"
#include "core/function_ref.h"
#include "core/tensor.h"
#include "tpurt/collectives.h"

namespace tpurt {

// Up to this many bytes of all members' inputs, a reduction sends every task the
// inputs (one exchange) instead of reducing slices and sending them back (two), and
// a gather of more than two tasks goes in log rounds.
constexpr size_t kGatherReduceBytes = 64 * 1024;

// Element range [lo, lo + len) of slice s of n elements split np ways.
inline void slice_of(int64_t n, int np, int s, int64_t* lo, int64_t* len) {
  const int64_t base = n / np, extra = n % np;
  *lo = base * s + std::min<int64_t>(s, extra);
  *len = base + (s < extra ? 1 : 0);
}

// --- Gathers: every member's input of a row on every task of it -----------------

// use(row, size, inputs): inputs by position in the row, valid during the call.
using UseRow = FunctionRef<void(const int32_t* row, int size, const void* const* inputs)>;

struct RowGatherer {
  const char* name;
  bool (*applies)(const ClusterContext&, const Row&, size_t bytes);
  // inputs: room for the row's size, which run fills before calling use.
  void (*run)(ClusterContext&, ClusterCall&, const Row&, size_t bytes, const void** inputs, UseRow use);
};

// Every row here at once through the transport's posts (net::PostedGather), when a
// task's post of all its members' inputs fits (take: the same on every task).
namespace posted {
bool take(const ClusterContext& cx, size_t bytes);
void gather(ClusterContext& cx, ClusterCall& call, const Groups& g, size_t bytes, UseRow use);
}  // namespace posted
// Bruck's all-gather in ceil(log2 tasks) rounds (gather_log_rounds.cc).
namespace log_rounds {
bool applies(const ClusterContext& cx, const Row& row, size_t bytes);
void run(ClusterContext& cx, ClusterCall& call, const Row& row, size_t bytes, const void** inputs, UseRow use);
}  // namespace log_rounds
// Every task sends every other task of the row its members' inputs (gather_direct.cc).
namespace direct {
bool applies(const ClusterContext& cx, const Row& row, size_t bytes);
void run(ClusterContext& cx, ClusterCall& call, const Row& row, size_t bytes, const void** inputs, UseRow use);
}  // namespace direct

// The gather of every row with members here (cluster_chooser.cc).
void gather_groups(ClusterContext& cx, ClusterCall& call, const Groups& g, size_t bytes, UseRow use);

// --- Reductions: a row's inputs reduced, the result on every task of it -----------

// What a row's reduction is for.
struct Reduction {
  const Tensor* x;  // the input's type and shape (every member's alike)
  tpu_reduce_op op;
  // The result goes into the row's first local member's output (an all-reduce),
  // else into a buffer of the context's (a reduce-scatter's, whose members keep a block).
  bool into_output;
  // A reduce-scatter whose members' blocks are contiguous in the input.
  bool scatter_blocks;
};

// deliver(member, result): gives the row's result to one of its local members.
using Deliver = FunctionRef<void(int member, const char* result)>;

struct RowReducer {
  const char* name;
  bool (*applies)(const ClusterContext&, const Reduction&, const Row&);
  // Writes the row's whole result into result; or, writes_outputs, each local
  // member's output itself (result: NULL, and nothing is delivered).
  void (*run)(ClusterContext&, ClusterCall&, const Reduction&, const Row&, char* result);
  bool writes_outputs;
};

// The transport's engine (MPI): a reduce-scatter of one member per task in task
// order, and an all-reduce whose per-task partials are exact (reduce_offload.cc).
namespace offload_scatter {
bool applies(const ClusterContext& cx, const Reduction& r, const Row& row);
void run(ClusterContext& cx, ClusterCall& call, const Reduction& r, const Row& row, char* result);
}  // namespace offload_scatter
namespace offload_reduce {
bool applies(const ClusterContext& cx, const Reduction& r, const Row& row);
void run(ClusterContext& cx, ClusterCall& call, const Reduction& r, const Row& row, char* result);
}  // namespace offload_reduce
// Staged through the tasks' shared-memory windows (reduce_staged.cc).
namespace staged {
bool applies(const ClusterContext& cx, const Reduction& r, const Row& row);
void run(ClusterContext& cx, ClusterCall& call, const Reduction& r, const Row& row, char* result);
}  // namespace staged
// Every task gathers every input and reduces them all (reduce_gathered.cc).
namespace gathered {
bool applies(const ClusterContext& cx, const Reduction& r, const Row& row);
void run(ClusterContext& cx, ClusterCall& call, const Reduction& r, const Row& row, char* result);
}  // namespace gathered
// The fold passed along the row's runs of members, pipelined (reduce_chain.cc).
namespace chain {
bool applies(const ClusterContext& cx, const Reduction& r, const Row& row);
void run(ClusterContext& cx, ClusterCall& call, const Reduction& r, const Row& row, char* result);
}  // namespace chain
// Reduce-scatter, then all-gather, pairwise among the row's tasks (reduce_slices.cc).
namespace slices {
bool applies(const ClusterContext& cx, const Reduction& r, const Row& row);
void run(ClusterContext& cx, ClusterCall& call, const Reduction& r, const Row& row, char* result);
}  // namespace slices

// Every row here at once through posts, each reduced here (reduce_gathered.cc).
namespace posted {
bool reduce_takes(const ClusterContext& cx, const Groups& g, const Reduction& r);
void reduce(ClusterContext& cx, ClusterCall& call, const Groups& g, const Reduction& r, Deliver deliver);
}  // namespace posted

// Reduces every row with members here and delivers its result to them (cluster_chooser.cc).
void reduce_groups(ClusterContext& cx, ClusterCall& call, const Groups& g, const Reduction& r,
                   Deliver deliver);

}  // namespace tpurt
