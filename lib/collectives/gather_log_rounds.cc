// Bruck's all-gather: in round k every task sends the task 2^k before it the blocks
// it holds so far (its own and those of the tasks after it) and receives as many from
// the task 2^k after it, so np tasks are done in ceil(log2 np) rounds of one message
// each way instead of one round of np - 1: fewer messages for the tasks to be
// scheduled for, which is what small collectives on busy CPUs wait on.
#include <cstring>

#include "collectives/cluster_algorithms.h"

namespace tpurt {
namespace log_rounds {

// Where fanning out costs (not shared memory), for small rows of more than 2 tasks.
bool applies(const ClusterContext& cx, const Row& row, size_t bytes) {
  return row.split.tasks.size() > 2 && !cx.transport()->fans_out_cheaply() &&
         bytes * static_cast<size_t>(row.size) <= kGatherReduceBytes;
}

void run(ClusterContext& cx, ClusterCall& call, const Row& row, size_t bytes, const void** inputs, UseRow use) {
  const TaskSplit& split = row.split;
  const uint32_t tag = static_cast<uint32_t>(row.index);
  const int np = static_cast<int>(split.tasks.size()), me = split.mine;
  // Block j holds the members' inputs of the task j positions after this one.
  std::vector<size_t> block_at(np + 1, 0);
  for (int j = 0; j < np; ++j) block_at[j + 1] = block_at[j] + split.members[(me + j) % np].size() * bytes;
  cx.gather_staging.resize(block_at[np]);
  char* staging = cx.gather_staging.data();
  const std::vector<int>& own = split.members[me];
  for (size_t c = 0; c < own.size(); ++c)
    if (bytes) std::memcpy(staging + c * bytes, cx.input(call, row.ids[own[c]]), bytes);
  std::vector<net::Send> sends(1);
  std::vector<net::Recv> recvs(1);
  for (int dist = 1; dist < np; dist *= 2) {
    const int count = std::min(dist, np - dist);
    sends[0] = {split.tasks[(me - dist + np) % np], tag, staging, block_at[count]};
    recvs[0] = {split.tasks[(me + dist) % np], tag, staging + block_at[dist],
                block_at[dist + count] - block_at[dist]};
    cx.exchange_once(call, sends, recvs);
  }
  for (int j = 0; j < np; ++j) {
    const std::vector<int>& members = split.members[(me + j) % np];
    for (size_t c = 0; c < members.size(); ++c) inputs[members[c]] = staging + block_at[j] + c * bytes;
  }
  use(row.ids, row.size, inputs);
}

}  // namespace log_rounds
}  // namespace tpurt
