// The all-reduce staged through the tasks' shared-memory windows (net::SharedWindows,
// every task of the row mapped), for large rows of one member per task or exact
// partials: each task copies its input (or partial) into its window, reduces its
// slice reading every window in member order (so the bits stay a single process's),
// and copies the slices out of the owners' windows; zero-byte exchanges are the
// barriers.
#include <cstring>
#include <vector>

#include "collectives/cluster_algorithms.h"
#include "collectives/reduce.h"
#include "core/dtype.h"
#include "net/shared_windows.h"

namespace tpurt {
namespace staged {
namespace {

// From this many bytes per member and this many tasks an all-reduce over shared
// memory is staged through the tasks' windows rather than exchanged.
// Measured (tpurt bench --tasks T --transport shm, float32 sum, 2 cores): 8 tasks,
// 128 KiB: 170-176 us staged against 209-270 exchanged, 16 MiB: 2.3x the busbw;
// 3 and 4 tasks, 1-16 MiB: 1.1-1.3x; 2 tasks: 5.5-7.7 GB/s staged against 10-11.
constexpr size_t kStagedBytes = 128 * 1024;
constexpr int kStagedTasks = 3;

// Elements of a chunk: a window holds a chunk of the inputs, then the owner's
// reduced slice of it at the same offset.
int64_t chunk_elements(const net::SharedWindows& windows, tpu_dtype dtype) {
  return static_cast<int64_t>(windows.window_bytes() / 2 / dtype_size(dtype));
}

}  // namespace

bool applies(const ClusterContext& cx, const Reduction& r, const Row& row) {
  net::SharedWindows* windows = cx.windows();
  const int np = static_cast<int>(row.split.tasks.size());
  if (!r.into_output || windows == nullptr || np < kStagedTasks || r.x->byte_size < kStagedBytes ||
      !cx.transport()->fans_out_cheaply())
    return false;
  if (np != row.size && !partials_exact(r.x->dtype, r.op)) return false;
  for (int s = 0; s < np; ++s)
    if (windows->window(row.split.tasks[s]) == nullptr) return false;
  return chunk_elements(*windows, r.x->dtype) >= np;
}

void run(ClusterContext& cx, ClusterCall& call, const Reduction& r, const Row& row, char* result) {
  const TaskSplit& split = row.split;
  const uint32_t tag = static_cast<uint32_t>(row.index) * 2;
  const int np = static_cast<int>(split.tasks.size());
  const tpu_dtype dtype = r.x->dtype;
  const tpu_reduce_op op = r.op;
  const bool one_each = np == row.size;
  net::SharedWindows* windows = cx.windows();
  std::vector<char*> window(np);
  for (int s = 0; s < np; ++s) window[s] = windows->window(split.tasks[s]);
  const size_t esize = dtype_size(dtype), half = windows->window_bytes() / 2;
  const int64_t chunk = chunk_elements(*windows, dtype), n = r.x->num_elements;
  std::vector<net::Send> sends;
  std::vector<net::Recv> recvs;
  for (int s = 0; s < np; ++s) {
    if (s == split.mine) continue;
    sends.push_back({split.tasks[s], tag, nullptr, 0});
    recvs.push_back({split.tasks[s], tag, nullptr, 0});
  }
  // Every task of the row has done what it did before: a zero-byte exchange with each.
  auto barrier = [&] { cx.exchange_once(call, sends, recvs); };
  const std::vector<int>& mine = split.members[split.mine];
  char* own = window[split.mine];
  // Sources by member (one each: in member order) or by task (partials).
  SourceList srcs(np), local(static_cast<int>(mine.size()));
  for (size_t j = 0; j < mine.size(); ++j) local.data()[j] = cx.input(call, row.ids[mine[j]]);
  for (int s = 0; s < np; ++s) srcs.data()[one_each ? split.members[s][0] : s] = window[s];
  for (int64_t at = 0; at < n; at += chunk) {
    const int64_t len = std::min(chunk, n - at);
    // (a) my input's chunk (or my members' partial) into my window's first half:
    // every task has read the last chunk's before the last barrier.
    if (mine.size() == 1)
      std::memcpy(own, static_cast<const char*>(local.data()[0]) + static_cast<size_t>(at) * esize,
                  static_cast<size_t>(len) * esize);
    else
      reduce(dtype, op, local.data(), static_cast<int>(mine.size()), at, len, own);
    barrier();
    // (b) my slice of the chunk, from every window, into my result half: every task
    // has copied the last chunk's slices out before the barrier above.
    int64_t lo, sl;
    slice_of(len, np, split.mine, &lo, &sl);
    reduce(dtype, op, srcs.data(), np, lo, sl, own + half + static_cast<size_t>(lo) * esize);
    barrier();
    // (c) every slice from its owner's window into the result.
    for (int s = 0; s < np; ++s) {
      slice_of(len, np, s, &lo, &sl);
      std::memcpy(result + static_cast<size_t>(at + lo) * esize, window[s] + half + static_cast<size_t>(lo) * esize,
                  static_cast<size_t>(sl) * esize);
    }
  }
  // Before my window is written by another row or collective, with other tasks.
  barrier();
}

}  // namespace staged
}  // namespace tpurt
