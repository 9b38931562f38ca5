#include "collectives/cluster_context.h"

#include <algorithm>

#include "net/collective_offload.h"
#include "net/posted_gather.h"
#include "net/shared_windows.h"

namespace tpurt {
namespace {

// Above this many bytes an exchange with several peers goes in rounds, one peer each
// way per round (round k: to the k-th task after this one, from the k-th before):
// two streams per task instead of two per peer, which crowd the CPUs and the caches.
// Not over shared memory, where every ring is copied at once: 8 tasks at 1 MiB took
// 730-770 us at once against 860-960 us in rounds (tpurt bench --tasks 8 --transport shm).
// Nor over TCP (tcp_transport.h says why): the transport decides.
constexpr uint64_t kRoundsBytes = 256 * 1024;

}  // namespace

ClusterContext::ClusterContext(std::vector<int> task_of, int task_id, net::Transport* transport,
                               std::function<void()> check, std::function<std::string(int)> namer)
    : task_of_(std::move(task_of)),
      task_id_(task_id),
      transport_(transport),
      offload_(dynamic_cast<net::CollectiveOffload*>(transport)),
      windows_(dynamic_cast<net::SharedWindows*>(transport)),
      posts_(dynamic_cast<net::PostedGather*>(transport)),
      local_index_(task_of_.size(), -1),
      index_on_task_(task_of_.size()),
      on_task_(transport->num_tasks(), 0),
      check_(std::move(check)),
      namer_(std::move(namer)) {
  for (size_t p = 0; p < task_of_.size(); ++p) {
    const int t = task_of_[p];
    index_on_task_[p] = on_task_[t]++;
    most_on_a_task_ = std::max(most_on_a_task_, on_task_[t]);
    if (t != task_id_) continue;
    local_index_[p] = static_cast<int>(local_.size());
    local_.push_back(static_cast<int>(p));
  }
}

ClusterContext::~ClusterContext() = default;

const TaskSplit& ClusterContext::split(const int32_t* row, int size) const {
  for (const CachedSplit& c : splits_)
    if (c.row.size() == static_cast<size_t>(size) && std::equal(row, row + size, c.row.begin())) return c.split;
  if (splits_.size() >= kMaxSplits) splits_.clear();
  splits_.push_back({std::vector<int32_t>(row, row + size), {}});
  TaskSplit& s = splits_.back().split;
  for (int k = 0; k < size; ++k) s.tasks.push_back(task_of_[row[k]]);
  std::sort(s.tasks.begin(), s.tasks.end());
  s.tasks.erase(std::unique(s.tasks.begin(), s.tasks.end()), s.tasks.end());
  s.members.resize(s.tasks.size());
  for (int k = 0; k < size; ++k) {
    const int t = task_of_[row[k]];
    const int pos = static_cast<int>(std::lower_bound(s.tasks.begin(), s.tasks.end(), t) - s.tasks.begin());
    s.members[pos].push_back(k);
  }
  for (size_t i = 0; i < s.tasks.size(); ++i)
    if (s.tasks[i] == task_id_) s.mine = static_cast<int>(i);
  return s;
}

void ClusterContext::exchange(ClusterCall& call, std::vector<net::Send>& sends,
                              std::vector<net::Recv>& recvs, const std::vector<int>* tasks) {
  uint64_t total = 0;
  for (const net::Send& s : sends) total += s.bytes;
  if (tasks == nullptr || tasks->size() <= 2 || total <= kRoundsBytes || !transport_->large_exchanges_in_rounds()) {
    exchange_once(call, sends, recvs);
    return;
  }
  const int np = static_cast<int>(tasks->size());
  const int pos = static_cast<int>(std::find(tasks->begin(), tasks->end(), task_id_) - tasks->begin());
  std::vector<net::Send> round_sends;
  std::vector<net::Recv> round_recvs;
  for (int k = 1; k < np; ++k) {
    const int to = (*tasks)[(pos + k) % np], from = (*tasks)[(pos - k + np) % np];
    round_sends.clear();
    round_recvs.clear();
    for (const net::Send& s : sends)
      if (s.peer == to) round_sends.push_back(s);
    for (const net::Recv& r : recvs)
      if (r.peer == from) round_recvs.push_back(r);
    exchange_once(call, round_sends, round_recvs);
  }
}

void ClusterContext::exchange_once(ClusterCall& call, std::vector<net::Send>& sends,
                                   std::vector<net::Recv>& recvs) {
  if (sends.empty() && recvs.empty()) return;
  transport_->exchange(call.seq, call.digest, sends.data(), sends.size(), recvs.data(), recvs.size(),
                       call.deadline, check_, namer_);
}

char* ClusterContext::grow(Buffer* buffer, size_t bytes) {
  if (buffer->capacity < bytes) {
    buffer->data.reset(new char[bytes]);
    buffer->capacity = bytes;
  }
  return buffer->data.get();
}

}  // namespace tpurt
