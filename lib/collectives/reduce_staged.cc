// The all-reduce staged through the tasks' shared-memory windows (net::SharedWindows,
// every task of the row mapped), for large rows of one member per task or exact
// partials: each task copies its input (or partial) into its window, reduces its
// slice reading every window in member order (so the bits stay a single process's;
// its own input in place), and copies the slices out of the owners' windows;
// zero-byte exchanges are the barriers.
//
// A window holds two chunk buffers and two slice buffers, used in turn, so that the
// three passes run as a pipeline with one barrier per chunk: in step t a task copies
// chunk t in, reduces its slice of chunk t-1 and copies chunk t-2's slices out. With
// more tasks than CPUs every barrier is a turn of every task on a CPU, so halving
// them (against copy in, barrier, reduce, barrier, copy out) is most of the gain.
#include <cstdint>
#include <cstring>
#include <vector>

#include "collectives/cluster_algorithms.h"
#include "collectives/reduce.h"
#include "core/dtype.h"
#include "core/stream_copy.h"
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
// The largest chunk: 512 KiB beat 256 KiB and 1 MiB with two barriers a chunk (8
// tasks, 16 MiB); the eight tasks' buffers (8 x 2.3 chunks) then stay in the shared cache.
constexpr size_t kChunkBytes = 512 * 1024;
// From this result size the slices are copied out with non-temporal stores: the
// result does not stay cached anyway (every task writes its own), and ordinary stores
// would first read each line and push the windows, which the peers read, out of the
// shared cache.
constexpr size_t kStreamBytes = 4u << 20;
constexpr size_t kAlign = 64;

size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// A window's layout for np tasks: buffers in[0], in[1] of a chunk and res[0], res[1]
// of a task's slice of one.
struct Layout {
  int64_t chunk = 0;      // elements
  size_t in_bytes = 0;    // of each chunk buffer, rounded up
  size_t res_bytes = 0;   // of each slice buffer, rounded up
  size_t in(int b) const { return static_cast<size_t>(b) * in_bytes; }
  size_t res(int b) const { return 2 * in_bytes + static_cast<size_t>(b) * res_bytes; }
};

// The largest chunk (at most kChunkBytes, a multiple of 16 elements so that the
// slices of whole chunks stay aligned) whose four buffers fit the window; chunk 0
// when not even np elements fit.
Layout layout_for(size_t window_bytes, size_t esize, int np) {
  Layout l;
  int64_t c = static_cast<int64_t>(std::min(kChunkBytes, window_bytes / 2) / esize);
  c -= c % 16;
  for (; c >= np; c -= c > 16 ? 16 : 1) {
    const size_t in = round_up(static_cast<size_t>(c) * esize);
    const size_t res = round_up(static_cast<size_t>((c + np - 1) / np) * esize);
    if (2 * in + 2 * res <= window_bytes) {
      l.chunk = c;
      l.in_bytes = in;
      l.res_bytes = res;
      return l;
    }
  }
  return l;
}

// Copies n bytes to dst, with non-temporal stores from dst's first 16-byte boundary.
void copy_out(char* dst, const char* src, size_t n, bool stream) {
  if (!stream) {
    std::memcpy(dst, src, n);
    return;
  }
  const size_t head = std::min(n, (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
  std::memcpy(dst, src, head);
  stream_copy(dst + head, src + head, n - head);
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
  return layout_for(windows->window_bytes(), dtype_size(r.x->dtype), np).chunk > 0;
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
  const size_t esize = dtype_size(dtype);
  const Layout lay = layout_for(windows->window_bytes(), esize, np);
  const int64_t chunk = lay.chunk, n = r.x->num_elements;
  const int64_t chunks = (n + chunk - 1) / chunk;
  const bool stream = r.x->byte_size >= kStreamBytes;
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
  std::vector<int> order(np);  // the source position of task s's window
  for (int s = 0; s < np; ++s) order[s] = one_each ? split.members[s][0] : s;
  // Step t: chunk t in, chunk t-1 reduced, chunk t-2 out; then a barrier. A buffer
  // written in step t was last read in step t-1 (in: reduced; res: copied out), and
  // what step t reads was written in step t-1, so one barrier a step orders both. The
  // last step's barrier keeps this task's window from being written (by another row
  // or collective, with other tasks) while a peer still copies out of it.
  for (int64_t t = 0; t < chunks + 2; ++t) {
    if (t < chunks) {  // my input's chunk (or my members' partial) into in[t % 2]
      const int64_t at = t * chunk, len = std::min(chunk, n - at);
      char* to = own + lay.in(static_cast<int>(t % 2));
      if (mine.size() == 1) {  // all but my own slice, which my reduction reads in place
        const char* from = static_cast<const char*>(local.data()[0]) + static_cast<size_t>(at) * esize;
        int64_t lo, sl;
        slice_of(len, np, split.mine, &lo, &sl);
        std::memcpy(to, from, static_cast<size_t>(lo) * esize);
        std::memcpy(to + (lo + sl) * esize, from + (lo + sl) * esize, static_cast<size_t>(len - lo - sl) * esize);
      } else {
        reduce(dtype, op, local.data(), static_cast<int>(mine.size()), at, len, to);
      }
    }
    if (t >= 1 && t <= chunks) {  // my slice of chunk t-1, from every window, into res
      const int64_t c = t - 1, len = std::min(chunk, n - c * chunk);
      const int b = static_cast<int>(c % 2);
      int64_t lo, sl;
      slice_of(len, np, split.mine, &lo, &sl);
      for (int s = 0; s < np; ++s) srcs.data()[order[s]] = window[s] + lay.in(b);
      if (mine.size() == 1)
        srcs.data()[order[split.mine]] = static_cast<const char*>(local.data()[0]) + static_cast<size_t>(c * chunk) * esize;
      reduce(dtype, op, srcs.data(), np, lo, sl, own + lay.res(b));
    }
    if (t >= 2) {  // every slice of chunk t-2 from its owner's window into the result
      const int64_t c = t - 2, at = c * chunk, len = std::min(chunk, n - at);
      const int b = static_cast<int>(c % 2);
      int64_t lo, sl;
      for (int s = 0; s < np; ++s) {
        slice_of(len, np, s, &lo, &sl);
        copy_out(result + static_cast<size_t>(at + lo) * esize, window[s] + lay.res(b),
                 static_cast<size_t>(sl) * esize, stream);
      }
      if (stream) stream_fence();
    }
    barrier();
  }
}

}  // namespace staged
}  // namespace tpurt
