// The direct gather: every task sends each other task of the row its members'
// inputs, in one exchange (in rounds when large: ClusterContext::exchange).
#include <vector>

#include "collectives/cluster_algorithms.h"

namespace tpurt {
namespace direct {

bool applies(const ClusterContext&, const Row&, size_t) { return true; }

void run(ClusterContext& cx, ClusterCall& call, const Row& row, size_t bytes, const void** inputs, UseRow use) {
  const TaskSplit& split = row.split;
  const int np = static_cast<int>(split.tasks.size());
  const size_t remote = static_cast<size_t>(row.size) - split.members[split.mine].size();
  std::vector<char> received(remote * bytes);
  std::vector<net::Send> sends;
  std::vector<net::Recv> recvs;
  const uint32_t tag = static_cast<uint32_t>(row.index);
  size_t slot = 0;
  for (int s = 0; s < np; ++s) {
    if (s == split.mine) {
      for (int k : split.members[s]) inputs[k] = cx.input(call, row.ids[k]);
      continue;
    }
    for (int k : split.members[split.mine])
      sends.push_back({split.tasks[s], tag, cx.input(call, row.ids[k]), bytes});
    for (int k : split.members[s]) {
      char* at = received.data() + slot++ * bytes;
      recvs.push_back({split.tasks[s], tag, at, bytes});
      inputs[k] = at;
    }
  }
  cx.exchange(call, sends, recvs, &split.tasks);
  use(row.ids, row.size, inputs);
}

}  // namespace direct
}  // namespace tpurt
