#include "collectives/cluster_communicator.h"

#include <algorithm>
#include <cstring>

#include "collectives/reduce.h"
#include "collectives/rendezvous.h"
#include "collectives/shapes.h"
#include "core/box_copy.h"
#include "core/checked.h"
#include "core/dtype.h"
#include "core/float16.h"
#include "core/tensor_ops.h"
#include "core/tensor_ref.h"
#include "net/collective_offload.h"
#include "net/posted_gather.h"
#include "net/shared_windows.h"
#include "topology/group_assignment.h"

namespace tpurt {
namespace {

// Whether reducing per task first gives the same bits as reducing in member order:
// wrapping integer arithmetic and min/max are associative and commutative, floating
// point sums and products are not, and MEAN divides once by the member count.
bool partials_exact(tpu_dtype dtype, tpu_reduce_op op) {
  if (op == TPU_REDUCE_MIN || op == TPU_REDUCE_MAX) return dtype != TPU_COMPLEX64;
  if (op == TPU_REDUCE_MEAN) return false;
  switch (dtype) {
    case TPU_INT8: case TPU_INT16: case TPU_INT32: case TPU_INT64:
    case TPU_UINT8: case TPU_UINT32: case TPU_UINT64: case TPU_BOOL:
      return true;
    default:
      return false;
  }
}

// Up to this many bytes of all members' inputs, a reduction sends every task the
// inputs (one exchange) instead of reducing slices and sending them back (two).
constexpr size_t kGatherReduceBytes = 64 * 1024;
// Above this many bytes an exchange with several peers goes in rounds, one peer each
// way per round (round k: to the k-th task after this one, from the k-th before):
// two streams per task instead of two per peer, which crowd the CPUs and the caches.
// Not over shared memory, where every ring is copied at once: 8 tasks at 1 MiB took
// 730-770 us at once against 860-960 us in rounds (tpurt bench --tasks 8 --transport shm).
constexpr uint64_t kRoundsBytes = 256 * 1024;

// From this many bytes per member and this many tasks an all-reduce over shared
// memory is staged through the tasks' windows (see staged_row) rather than exchanged.
// Measured (tpurt bench --tasks T --transport shm, float32 sum, 2 cores): 8 tasks,
// 128 KiB: 170-176 us staged against 209-270 exchanged, 16 MiB: 2.3x the busbw;
// 3 and 4 tasks, 1-16 MiB: 1.1-1.3x; 2 tasks: 5.5-7.7 GB/s staged against 10-11.
constexpr size_t kStagedBytes = 128 * 1024;
constexpr int kStagedTasks = 3;

// Up to this many bytes of a member's input a reduce-scatter goes to the offload
// (MPI). Above it the exchanges are faster: Open MPI's non-blocking reduce-scatter
// reduces every block at one task through a fresh buffer of twice the input, and an
// all-reduce moves every block to every task. tpurt bench --tasks 4 --transport mpi
// -c reduce_scatter, runs alternated (docs/MPI.md): 1-8 MiB 0.62-0.74x the
// exchanges' time; 16 MiB 55-63 ms against 13-27 (under load).
constexpr size_t kOffloadScatterBytes = 8 << 20;

// A chained reduction passes its fold along in pieces of this many bytes (of the
// partial's type): small enough to stay in the caches between the receive, the fold
// and the send, large enough that a piece costs far more than its exchange.
constexpr size_t kChainPieceBytes = 256 * 1024;

// Element range [lo, lo + len) of slice s of n elements split np ways.
void slice_of(int64_t n, int np, int s, int64_t* lo, int64_t* len) {
  const int64_t base = n / np, extra = n % np;
  *lo = base * s + std::min<int64_t>(s, extra);
  *len = base + (s < extra ? 1 : 0);
}

// An output the leader writes into: if the collective throws, the leader may still
// be writing, so the rendezvous keeps it until the step's reset.
struct Published {
  Rendezvous& rv;
  int rank;
  Tensor* t = nullptr;
  ~Published() {
    if (t) rv.park(rank, t);
  }
  Tensor* take() { return std::exchange(t, nullptr); }
};

}  // namespace

struct ClusterCommunicator::Call {
  uint64_t seq = 0;
  uint64_t digest = 0;
  std::vector<const void*> input;  // by local rank
  std::vector<void*> output;       // by local rank
  net::Transport::Clock::time_point deadline;
};

ClusterCommunicator::ClusterCommunicator(std::vector<int> task_of_replica, int task_id,
                                         net::Transport* transport, int64_t timeout_ms,
                                         int num_cpus, bool private_results)
    : Communicator(static_cast<int>(std::count(task_of_replica.begin(), task_of_replica.end(), task_id)),
                   timeout_ms, num_cpus, private_results),
      task_of_replica_(std::move(task_of_replica)),
      task_id_(task_id),
      transport_(transport),
      offload_(dynamic_cast<net::CollectiveOffload*>(transport)),
      windows_(dynamic_cast<net::SharedWindows*>(transport)),
      posts_(dynamic_cast<net::PostedGather*>(transport)),
      index_on_task_(task_of_replica_.size()),
      replicas_on_task_(transport->num_tasks(), 0),
      local_rank_(task_of_replica_.size(), -1),
      all_replicas_(task_of_replica_.size()),
      check_([rv = &rendezvous()] {
        int origin;
        tpu_status code;
        std::string message;
        if (rv->failure(&origin, &code, &message)) throw Error(code, message);
      }),
      namer_([this](int task) { return describe_task(task); }),
      call_(new Call) {
  for (size_t r = 0; r < task_of_replica_.size(); ++r) {
    all_replicas_[r] = static_cast<int32_t>(r);
    const int t = task_of_replica_[r];
    index_on_task_[r] = replicas_on_task_[t]++;
    most_replicas_on_a_task_ = std::max(most_replicas_on_a_task_, replicas_on_task_[t]);
    if (task_of_replica_[r] != task_id_) continue;
    local_rank_[r] = static_cast<int>(local_replicas_.size());
    local_replicas_.push_back(static_cast<int>(r));
  }
  all_replicas_hash_ = hash_ids(all_replicas_.data(), num_replicas());
  call_timeout_ms_.assign(local_replicas_.size(), 0);
}

ClusterCommunicator::~ClusterCommunicator() = default;

void ClusterCommunicator::not_local(int replica) const {
  fail(TPU_INTERNAL, "replica ", replica, " is not one of task ", task_id_, "'s");
}

std::string ClusterCommunicator::describe_task(int task) const {
  std::string replicas;
  int count = 0;
  for (int r = 0; r < num_replicas(); ++r)
    if (task_of_replica_[r] == task) replicas += str_cat(count++ ? ", " : "", r);
  if (count == 0) return str_cat("task ", task, " (no replicas in this step)");
  return str_cat("task ", task, " (replica", count > 1 ? "s " : " ", replicas, ")");
}

void ClusterCommunicator::set_call_timeout(int rank, int64_t timeout_ms) {
  const int lr = local_rank(rank);
  call_timeout_ms_[lr] = timeout_ms;
  Communicator::set_call_timeout(lr, timeout_ms);
}

void ClusterCommunicator::abort(int replica, tpu_status code, const std::string& message) {
  Communicator::abort(replica, code, message);
  transport_->interrupt();  // the leader may be waiting on the network
}

void ClusterCommunicator::depart(int rank) { Communicator::depart(local_rank(rank)); }

ClusterCommunicator::Groups ClusterCommunicator::groups_of(const tpu_group_assignment* groups,
                                                           Descriptor* desc) const {
  if (groups == nullptr) {
    desc->num_groups = 1;
    desc->group_size = num_replicas();
    desc->groups_hash = all_replicas_hash_;
    return {all_replicas_.data(), 1, num_replicas()};
  }
  validate_group_assignment(groups, num_replicas());
  desc->num_groups = groups->num_groups;
  desc->group_size = groups->group_size;
  desc->groups_hash = hash_ids(groups->replica_ids, int64_t(groups->num_groups) * groups->group_size);
  return {groups->replica_ids, groups->num_groups, groups->group_size};
}

int ClusterCommunicator::shares_with(int rank, const Groups& g, size_t bytes) const {
  if (private_results() || bytes <= kInlineBytes) return -1;
  for (int gi = 0; gi < g.num_groups; ++gi) {
    const int32_t* row = g.ids + int64_t(gi) * g.group_size;
    if (std::find(row, row + g.group_size, rank) == row + g.group_size) continue;
    int first = -1, here = 0;
    for (int k = 0; k < g.group_size; ++k) {
      if (task_of_replica_[row[k]] != task_id_) continue;
      if (first < 0) first = row[k];
      ++here;
    }
    return here > 1 ? first : -1;
  }
  return -1;
}

void ClusterCommunicator::run(int rank, const Descriptor& desc, const Tensor* x, Tensor** out,
                              int share_with, FunctionRef<void(Call&)> leader) {
  Rendezvous& rv = rendezvous();
  const int lr = local_rank(rank);
  uint64_t seq;
  Record& rec = rv.begin(lr, &seq);
  rec.desc = desc;
  rec.input = x ? x->data : nullptr;
  rec.output = *out ? (*out)->data : nullptr;
  rec.result = *out;
  rv.arrive_and_check(lr, seq);
  // The first member cannot release its result before every member has finished.
  if (share_with >= 0 && share_with != rank) {
    const Tensor* first = rv.record(local_rank(share_with), seq).result;
    *out = share(first, first->dims, first->rank, 0);
  }
  if (lr == 0) {
    Call& call = *call_;
    call.seq = seq;
    call.digest = rv.arrival_digest(lr, seq);
    const int n = static_cast<int>(local_replicas_.size());
    call.input.resize(n);
    call.output.resize(n);
    for (int j = 0; j < n; ++j) {
      call.input[j] = rv.record(j, seq).input;
      call.output[j] = rv.record(j, seq).output;
    }
    const int64_t timeout = call_timeout_ms_[0] > 0 ? call_timeout_ms_[0] : rv.step_timeout();
    call.deadline = coarse_now() + std::chrono::milliseconds(timeout);
    try {
      leader(call);
    } catch (const Error& e) {
      rv.poison(e.code(), e.message());
      throw;
    }
  }
  rv.finish(lr, seq);
}

void ClusterCommunicator::exchange(Call& call, std::vector<net::Send>& sends,
                                   std::vector<net::Recv>& recvs, const std::vector<int>* tasks) {
  uint64_t total = 0;
  for (const net::Send& s : sends) total += s.bytes;
  if (tasks == nullptr || tasks->size() <= 2 || total <= kRoundsBytes || transport_->fans_out_cheaply()) {
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

void ClusterCommunicator::exchange_once(Call& call, std::vector<net::Send>& sends,
                                        std::vector<net::Recv>& recvs) {
  if (sends.empty() && recvs.empty()) return;
  transport_->exchange(call.seq, call.digest, sends.data(), sends.size(), recvs.data(), recvs.size(),
                       call.deadline, check_, namer_);
}

bool ClusterCommunicator::offload_row(Call& call, const int32_t* row, int size, const TaskSplit& split,
                                      const Tensor* x, tpu_reduce_op op, char* result) {
  if (offload_ == nullptr || split.tasks.size() < 2 || !offload_->can_all_reduce(x->dtype, op)) return false;
  bool one_each = true;
  for (const std::vector<int>& m : split.members) one_each &= m.size() == 1;
  if (!one_each && !partials_exact(x->dtype, op)) return false;
  const std::vector<int>& mine = split.members[split.mine];
  const void* in = call.input[local_rank_[row[mine[0]]]];
  if (mine.size() > 1) {
    grow(&partial_buffer_, x->byte_size);
    SourceList srcs(static_cast<int>(mine.size()));
    for (size_t j = 0; j < mine.size(); ++j) srcs.data()[j] = call.input[local_rank_[row[mine[j]]]];
    reduce(x->dtype, op, srcs.data(), static_cast<int>(mine.size()), 0, x->num_elements, partial_buffer_.data.get());
    in = partial_buffer_.data.get();
  }
  offload_->all_reduce(call.seq, call.digest, split.tasks, x->dtype, op, in, result, x->num_elements, size,
                       call.deadline, check_, namer_);
  return true;
}

bool ClusterCommunicator::offload_scatter_row(Call& call, const int32_t* row, int size, const TaskSplit& split,
                                              const Tensor* x, tpu_reduce_op op) {
  if (offload_ == nullptr || size < 2 || static_cast<int>(split.tasks.size()) != size ||
      x->byte_size > kOffloadScatterBytes || !offload_->can_reduce_scatter(x->dtype, op))
    return false;
  // The engine gives block s to the group's s-th task: member s must be there.
  for (int s = 0; s < size; ++s)
    if (split.members[s][0] != s) return false;
  const int lr = local_rank_[row[split.mine]];
  offload_->reduce_scatter(call.seq, call.digest, split.tasks, x->dtype, op, call.input[lr], call.output[lr],
                           x->num_elements / size, size, call.deadline, check_, namer_);
  return true;
}

bool ClusterCommunicator::staged_row(Call& call, const int32_t* row, int size, const TaskSplit& split,
                                     const Tensor* x, tpu_reduce_op op, char* result, uint32_t tag) {
  const int np = static_cast<int>(split.tasks.size());
  if (windows_ == nullptr || np < kStagedTasks || x->byte_size < kStagedBytes || !transport_->fans_out_cheaply())
    return false;
  const tpu_dtype dtype = x->dtype;
  const bool one_each = np == size;
  const bool exact = partials_exact(dtype, op);
  if (!one_each && !exact) return false;
  std::vector<char*> window(np);
  for (int s = 0; s < np; ++s)
    if ((window[s] = windows_->window(split.tasks[s])) == nullptr) return false;
  // A window holds a chunk of the inputs, then the owner's reduced slice of it at the
  // same offset.
  const size_t esize = dtype_size(dtype), half = windows_->window_bytes() / 2;
  const int64_t chunk = static_cast<int64_t>(half / esize), n = x->num_elements;
  if (chunk < np) return false;
  std::vector<net::Send> sends;
  std::vector<net::Recv> recvs;
  for (int s = 0; s < np; ++s) {
    if (s == split.mine) continue;
    sends.push_back({split.tasks[s], tag, nullptr, 0});
    recvs.push_back({split.tasks[s], tag, nullptr, 0});
  }
  // Every task of the row has done what it did before: a zero-byte exchange with each.
  auto barrier = [&] { exchange_once(call, sends, recvs); };
  const std::vector<int>& mine = split.members[split.mine];
  char* own = window[split.mine];
  // Sources by member (one each: in member order) or by task (partials).
  SourceList srcs(np), local(static_cast<int>(mine.size()));
  for (size_t j = 0; j < mine.size(); ++j) local.data()[j] = call.input[local_rank_[row[mine[j]]]];
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
  return true;
}

namespace {

// Validates on this replica; a failure fails the whole step, so peers blocked in the
// same collective learn of it at once.
template <typename Fn>
void guard(Rendezvous& rv, int lr, int replica, Fn&& checks) {
  if (rv.aborted()) {
    uint64_t seq;
    rv.begin(lr, &seq);
    rv.arrive_and_check(lr, seq);  // throws the step's failure
  }
  try {
    checks();
  } catch (const Error& e) {
    rv.poison(e.code(), e.message(), replica);
    throw;
  }
}

void fill_desc(Descriptor* d, CollectiveKind kind, const Tensor* x) {
  *d = Descriptor{};
  d->kind = kind;
  if (x == nullptr) return;
  d->dtype = x->dtype;
  d->rank = x->rank;
  for (int i = 0; i < x->rank; ++i) d->dims[i] = x->dims[i];
}

}  // namespace

using TaskSplit = ClusterCommunicator::TaskSplit;

static TaskSplit split_row(const int32_t* row, int size, const std::vector<int>& task_of, int me) {
  TaskSplit s;
  for (int k = 0; k < size; ++k) s.tasks.push_back(task_of[row[k]]);
  std::sort(s.tasks.begin(), s.tasks.end());
  s.tasks.erase(std::unique(s.tasks.begin(), s.tasks.end()), s.tasks.end());
  s.members.resize(s.tasks.size());
  for (int k = 0; k < size; ++k) {
    const int t = task_of[row[k]];
    const int pos = static_cast<int>(std::lower_bound(s.tasks.begin(), s.tasks.end(), t) - s.tasks.begin());
    s.members[pos].push_back(k);
  }
  for (size_t i = 0; i < s.tasks.size(); ++i)
    if (s.tasks[i] == me) s.mine = static_cast<int>(i);
  return s;
}

// A row's members in maximal runs of one task, in member order.
struct Run {
  int task;
  int begin, end;  // positions in the row
};

static std::vector<Run> runs_of(const int32_t* row, int size, const std::vector<int>& task_of) {
  std::vector<Run> runs;
  for (int k = 0; k < size; ++k) {
    const int t = task_of[row[k]];
    if (runs.empty() || runs.back().task != t) runs.push_back({t, k, k + 1});
    else runs.back().end = k + 1;
  }
  return runs;
}

// Whether passing the fold along the runs moves fewer bytes than sending every member's
// input to the owner of each slice. Per element of the result, the chain sends
// (runs - 1) partials and the slices take size * (np - 1) / np inputs; both then
// spread the result to np - 1 tasks.
static bool chain_pays(size_t num_runs, int size, int np, size_t partial_size, size_t esize) {
  return (num_runs - 1) * partial_size * np < static_cast<size_t>(size) * (np - 1) * esize;
}

// The pipeline runs in steps, each one exchange (every transfer of a step posted at
// once) followed by the folds it allows. A transfer's two ends are in the same step,
// so every step completes whatever the sockets buffer. Run r receives piece c in
// step c + r and folds it; the next run receives it in step c + r + 1; the last run
// (m - 1) finishes it, and the i-th task of the spread receives it in step
// c + m - 1 + i.
void ClusterCommunicator::reduce_chain(Call& call, const int32_t* row, int size,
                                       const std::vector<int>& tasks, const Tensor* x,
                                       tpu_reduce_op op, char* result, uint32_t tag) {
  const std::vector<Run> runs = runs_of(row, size, task_of_replica_);
  const int64_t m = static_cast<int64_t>(runs.size());
  const tpu_dtype dtype = x->dtype, pdtype = partial_dtype(dtype);
  const size_t esize = dtype_size(dtype), psize = dtype_size(pdtype);
  const int64_t n = x->num_elements;
  const int64_t piece = static_cast<int64_t>(kChainPieceBytes / psize);
  const int64_t pieces = (n + piece - 1) / piece;
  auto length = [&](int64_t c) { return std::min(piece, n - c * piece); };
  auto at = [&](char* base, int64_t c) { return base + static_cast<size_t>(c * piece) * esize; };
  // This task's runs. A partial of the result's own type is kept in the result; any
  // other (float32 for bfloat16 and half) in two slots per run, one being folded
  // while the other is sent.
  std::vector<int64_t> my_runs;
  for (int64_t r = 0; r < m; ++r)
    if (runs[r].task == task_id_) my_runs.push_back(r);
  const bool in_result = pdtype == dtype;
  if (!in_result) grow(&partial_buffer_, my_runs.size() * 2 * static_cast<size_t>(piece) * psize);
  auto partial = [&](size_t i, int64_t c) {
    return in_result ? at(result, c)
                     : partial_buffer_.data.get() + (2 * i + (c & 1)) * static_cast<size_t>(piece) * psize;
  };
  // The spread starts at the last run's task and follows the group's tasks in order.
  const int64_t np = static_cast<int64_t>(tasks.size());
  const int64_t last = std::find(tasks.begin(), tasks.end(), runs.back().task) - tasks.begin();
  const int64_t me = std::find(tasks.begin(), tasks.end(), task_id_) - tasks.begin();
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
    exchange_once(call, sends, recvs);
    for (size_t i = 0; i < my_runs.size(); ++i) {
      const int64_t r = my_runs[i], c = step - r;
      if (!valid(c)) continue;
      const int members = runs[r].end - runs[r].begin;
      for (int j = 0; j < members; ++j)
        srcs.data()[j] = call.input[local_rank_[row[runs[r].begin + j]]];
      char* acc = partial(i, c);
      fold_partial(dtype, op, r > 0 ? acc : nullptr, srcs.data(), members, c * piece, length(c), acc);
      if (r + 1 == m) finish_partial(dtype, op, acc, size, length(c), at(result, c));
    }
  }
}

void ClusterCommunicator::reduce_groups(Call& call, const Groups& g, const Tensor* x,
                                        tpu_reduce_op op, bool into_output,
                                        FunctionRef<void(int, const char*)> deliver, bool scatter_blocks) {
  const tpu_dtype dtype = x->dtype;
  const size_t esize = dtype_size(dtype);
  const int64_t n = x->num_elements;
  const bool exact = partials_exact(dtype, op);
  if (posts_take(x->byte_size) && x->byte_size * static_cast<size_t>(g.group_size) <= kGatherReduceBytes) {
    // Every row here at once: a task posts once per collective.
    gather_posted(call, g, x->byte_size, [&](const int32_t* row, int size, const void* const* in) {
      int first = 0;
      while (task_of_replica_[row[first]] != task_id_) ++first;
      char* result;
      if (into_output) {
        result = static_cast<char*>(call.output[local_rank_[row[first]]]);
      } else {
        grow(&result_buffer_, x->byte_size);
        result = result_buffer_.data.get();
      }
      reduce(dtype, op, in, size, 0, n, result);
      for (int k = first; k < size; ++k)
        if (task_of_replica_[row[k]] == task_id_) deliver(row[k], result);
    });
    return;
  }
  for (int gi = 0; gi < g.num_groups; ++gi) {
    const int32_t* row = g.ids + int64_t(gi) * g.group_size;
    TaskSplit split = split_row(row, g.group_size, task_of_replica_, task_id_);
    if (split.mine < 0) continue;
    const int np = static_cast<int>(split.tasks.size());
    if (scatter_blocks && offload_scatter_row(call, row, g.group_size, split, x, op)) continue;
    const std::vector<int>& mine = split.members[split.mine];
    auto local_input = [&](int k) {
      return static_cast<const char*>(call.input[local_rank_[row[k]]]);
    };
    // The whole result: the first local member's output, or a buffer of ours.
    char* result;
    if (into_output) {
      result = static_cast<char*>(call.output[local_rank_[row[mine[0]]]]);
    } else {
      grow(&result_buffer_, x->byte_size);
      result = result_buffer_.data.get();
    }
    if ((into_output || x->byte_size <= kOffloadScatterBytes) &&
        offload_row(call, row, g.group_size, split, x, op, result)) {
      for (int k : mine) deliver(row[k], result);
      continue;
    }
    if (into_output && staged_row(call, row, g.group_size, split, x, op, result, static_cast<uint32_t>(gi) * 2)) {
      for (int k : mine) deliver(row[k], result);
      continue;
    }
    if (np == 1 || x->byte_size * static_cast<size_t>(g.group_size) <= kGatherReduceBytes) {
      // Small (or all here): every task gets every input and reduces them all.
      Groups one{row, 1, g.group_size};
      gather_groups(call, one, x->byte_size, [&](const int32_t*, int size, const void* const* in) {
        reduce(dtype, op, in, size, 0, n, result);
      });
      for (int k : mine) deliver(row[k], result);
      continue;
    }
    if (!exact && partial_fold_supported(dtype, op)) {
      const size_t num_runs = runs_of(row, g.group_size, task_of_replica_).size();
      if (chain_pays(num_runs, g.group_size, np, dtype_size(partial_dtype(dtype)), esize)) {
        reduce_chain(call, row, g.group_size, split.tasks, x, op, result, static_cast<uint32_t>(gi) * 2);
        for (int k : mine) deliver(row[k], result);
        continue;
      }
    }
    // This task's partial (exact ops): its members reduced, all elements.
    char* partial = nullptr;
    if (exact) {
      grow(&partial_buffer_, x->byte_size);
      partial = partial_buffer_.data.get();
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
    grow(&received_buffer_, slots * my_bytes);
    char* received = received_buffer_.data.get();
    const uint32_t tag = static_cast<uint32_t>(gi) * 2;
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
    exchange(call, sends, recvs, &split.tasks);
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
      SourceList srcs(g.group_size);
      for (int s = 0; s < np; ++s)
        for (size_t c = 0; c < split.members[s].size(); ++c) {
          const int k = split.members[s][c];
          srcs.data()[k] = s == split.mine ? local_input(k) + my_off
                                           : received + (slot_of_task[s] + c) * my_bytes;
        }
      reduce(dtype, op, srcs.data(), g.group_size, 0, my_len, result + my_off);
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
    exchange(call, sends, recvs, &split.tasks);
    for (int k : mine) deliver(row[k], result);
  }
}

void ClusterCommunicator::grow(Buffer* buffer, size_t bytes) {
  if (buffer->capacity >= bytes) return;
  buffer->data.reset(new char[bytes]);
  buffer->capacity = bytes;
}

// Bruck's all-gather: in round k every task sends the task 2^k before it the blocks
// it holds so far (its own and those of the tasks after it) and receives as many from
// the task 2^k after it, so np tasks are done in ceil(log2 np) rounds of one message
// each way instead of one round of np - 1: fewer messages for the tasks to be
// scheduled for, which is what small collectives on busy CPUs wait on.
void ClusterCommunicator::gather_in_rounds(Call& call, const int32_t* row, const TaskSplit& split,
                                           size_t bytes, uint32_t tag, const void** inputs) {
  const int np = static_cast<int>(split.tasks.size()), me = split.mine;
  // Block j holds the members' inputs of the task j positions after this one.
  std::vector<size_t> block_at(np + 1, 0);
  for (int j = 0; j < np; ++j) block_at[j + 1] = block_at[j] + split.members[(me + j) % np].size() * bytes;
  gather_staging_.resize(block_at[np]);
  char* staging = gather_staging_.data();
  const std::vector<int>& own = split.members[me];
  for (size_t c = 0; c < own.size(); ++c)
    if (bytes) std::memcpy(staging + c * bytes, call.input[local_rank_[row[own[c]]]], bytes);
  std::vector<net::Send> sends(1);
  std::vector<net::Recv> recvs(1);
  for (int dist = 1; dist < np; dist *= 2) {
    const int count = std::min(dist, np - dist);
    sends[0] = {split.tasks[(me - dist + np) % np], tag, staging, block_at[count]};
    recvs[0] = {split.tasks[(me + dist) % np], tag, staging + block_at[dist],
                block_at[dist + count] - block_at[dist]};
    exchange_once(call, sends, recvs);
  }
  for (int j = 0; j < np; ++j) {
    const std::vector<int>& members = split.members[(me + j) % np];
    for (size_t c = 0; c < members.size(); ++c) inputs[members[c]] = staging + block_at[j] + c * bytes;
  }
}

bool ClusterCommunicator::posts_take(size_t bytes) const {
  return posts_ != nullptr && posts_->posts_reach_all() &&
         bytes * static_cast<size_t>(most_replicas_on_a_task_) <= posts_->post_bytes();
}

void ClusterCommunicator::gather_posted(
    Call& call, const Groups& g, size_t bytes,
    FunctionRef<void(const int32_t*, int, const void* const*)> use) {
  const int num_tasks = static_cast<int>(replicas_on_task_.size());
  const size_t n_local = local_replicas_.size();
  // This task's post: its members' inputs in replica order (one member's, as it is).
  const void* mine = n_local == 1 ? call.input[0] : nullptr;
  if (n_local > 1) {
    post_out_.resize(n_local * bytes);
    for (size_t j = 0; j < n_local && bytes; ++j) std::memcpy(&post_out_[j * bytes], call.input[j], bytes);
    mine = post_out_.data();
  }
  // The tasks sharing a row with this one, and where their posts go: planned once for
  // a collective like the last (the digest covers the groups, shape and dtype).
  if (post_plan_digest_ != call.digest || post_plan_ids_ != g.ids) {
    post_plan_ids_ = nullptr;  // no plan until this one is whole
    post_at_.assign(num_tasks, SIZE_MAX);
    post_rows_.clear();
    post_from_.clear();
    size_t total = 0;
    for (int gi = 0; gi < g.num_groups; ++gi) {
      const int32_t* row = g.ids + int64_t(gi) * g.group_size;
      bool here = false;
      for (int k = 0; k < g.group_size && !here; ++k) here = task_of_replica_[row[k]] == task_id_;
      if (!here) continue;
      post_rows_.push_back(gi);
      for (int k = 0; k < g.group_size; ++k) {
        const int t = task_of_replica_[row[k]];
        if (t == task_id_ || post_at_[t] != SIZE_MAX) continue;
        post_at_[t] = total;
        const size_t its = static_cast<size_t>(replicas_on_task_[t]) * bytes;
        post_from_.push_back({t, 0, nullptr, its});
        total += its;
      }
    }
    post_in_.resize(total);
    for (net::Recv& r : post_from_) r.data = post_in_.data() + post_at_[r.peer];
    post_plan_digest_ = call.digest;
    post_plan_ids_ = g.ids;
  }
  posts_->gather_posts(call.seq, call.digest, mine, n_local * bytes, post_from_.data(), post_from_.size(),
                       call.deadline, check_, namer_);
  post_inputs_.resize(g.group_size);
  for (int gi : post_rows_) {
    const int32_t* row = g.ids + int64_t(gi) * g.group_size;
    for (int k = 0; k < g.group_size; ++k) {
      const int r = row[k], t = task_of_replica_[r];
      post_inputs_[k] = t == task_id_ ? call.input[local_rank_[r]]
                                      : post_in_.data() + post_at_[t] + static_cast<size_t>(index_on_task_[r]) * bytes;
    }
    use(row, g.group_size, post_inputs_.data());
  }
}

void ClusterCommunicator::gather_groups(
    Call& call, const Groups& g, size_t bytes,
    FunctionRef<void(const int32_t*, int, const void* const*)> use) {
  if (posts_take(bytes)) {
    gather_posted(call, g, bytes, use);
    return;
  }
  std::vector<const void*> inputs(g.group_size);
  for (int gi = 0; gi < g.num_groups; ++gi) {
    const int32_t* row = g.ids + int64_t(gi) * g.group_size;
    TaskSplit split = split_row(row, g.group_size, task_of_replica_, task_id_);
    if (split.mine < 0) continue;
    const int np = static_cast<int>(split.tasks.size());
    if (np > 2 && !transport_->fans_out_cheaply() &&
        bytes * static_cast<size_t>(g.group_size) <= kGatherReduceBytes) {
      gather_in_rounds(call, row, split, bytes, static_cast<uint32_t>(gi), inputs.data());
      use(row, g.group_size, inputs.data());
      continue;
    }
    const size_t remote = static_cast<size_t>(g.group_size) - split.members[split.mine].size();
    std::vector<char> received(remote * bytes);
    std::vector<net::Send> sends;
    std::vector<net::Recv> recvs;
    const uint32_t tag = static_cast<uint32_t>(gi);
    size_t slot = 0;
    for (int s = 0; s < np; ++s) {
      if (s == split.mine) {
        for (int k : split.members[s]) inputs[k] = call.input[local_rank_[row[k]]];
        continue;
      }
      for (int k : split.members[split.mine])
        sends.push_back({split.tasks[s], tag, call.input[local_rank_[row[k]]], bytes});
      for (int k : split.members[s]) {
        char* at = received.data() + slot++ * bytes;
        recvs.push_back({split.tasks[s], tag, at, bytes});
        inputs[k] = at;
      }
    }
    exchange(call, sends, recvs, &split.tasks);
    use(row, g.group_size, inputs.data());
  }
}

Tensor* ClusterCommunicator::all_reduce(int rank, const Tensor* x, tpu_reduce_op op,
                                        const tpu_group_assignment* groups, bool bf16_wire) {
  if (bf16_wire && x != nullptr && x->dtype == TPU_FLOAT)
    return through_bfloat16(x, [&](const Tensor* wire) { return reduce_impl(rank, wire, op, groups, true); });
  return reduce_impl(rank, x, op, groups, false);
}

Tensor* ClusterCommunicator::reduce_impl(int rank, const Tensor* x, tpu_reduce_op op,
                                         const tpu_group_assignment* groups, bool bf16_wire) {
  Rendezvous& rv = rendezvous();
  const int lr = local_rank(rank);
  Descriptor desc;
  Groups g{};
  int shared_with = -1;
  Published out{rv, lr};
  guard(rv, lr, rank, [&] {
    require_not_null(x, "x");
    check_reduction(x->dtype, op);
    fill_desc(&desc, CollectiveKind::kAllReduce, x);
    g = groups_of(groups, &desc);
    shared_with = shares_with(rank, g, x->byte_size);
    if (shared_with < 0 || shared_with == rank) out.t = new_tensor_like(x);
  });
  desc.op = op;
  desc.bf16_wire = bf16_wire;
  run(rank, desc, x, &out.t, shared_with, [&](Call& call) {
    reduce_groups(call, g, x, op, /*into_output=*/true, [&](int member, const char* result) {
      void* dst = call.output[local_rank_[member]];
      if (x->byte_size && dst && dst != result) std::memcpy(dst, result, x->byte_size);
    });
  });
  return out.take();
}

Tensor* ClusterCommunicator::reduce_scatter(int rank, const Tensor* x, tpu_reduce_op op, int axis,
                                            const tpu_group_assignment* groups, bool bf16_wire) {
  if (bf16_wire && x != nullptr && x->dtype == TPU_FLOAT)
    return through_bfloat16(x, [&](const Tensor* wire) { return scatter_impl(rank, wire, op, axis, groups, true); });
  return scatter_impl(rank, x, op, axis, groups, false);
}

Tensor* ClusterCommunicator::scatter_impl(int rank, const Tensor* x, tpu_reduce_op op, int axis,
                                          const tpu_group_assignment* groups, bool bf16_wire) {
  Rendezvous& rv = rendezvous();
  const int lr = local_rank(rank);
  Descriptor desc;
  Groups g{};
  int a = 0;
  int64_t dims[TPU_MAX_RANK];
  Published out{rv, lr};
  guard(rv, lr, rank, [&] {
    require_not_null(x, "x");
    check_reduction(x->dtype, op);
    fill_desc(&desc, CollectiveKind::kReduceScatter, x);
    g = groups_of(groups, &desc);
    a = reduce_scatter_shape(x, axis, g.group_size, dims);
    out.t = new_tensor_uninitialized(x->dtype, dims, x->rank);
  });
  desc.op = op;
  desc.params[0] = a;
  desc.bf16_wire = bf16_wire;
  run(rank, desc, x, &out.t, -1, [&](Call& call) {
    // Each member's block is contiguous when every dimension before the axis is 1.
    bool contiguous = true;
    for (int d = 0; d < a; ++d) contiguous &= x->dims[d] == 1;
    reduce_groups(call, g, x, op, /*into_output=*/false, [&](int member, const char* result) {
      if (x->num_elements == 0) return;
      int pos = 0;
      for (int gi = 0; gi < g.num_groups; ++gi)
        for (int k = 0; k < g.group_size; ++k)
          if (g.ids[int64_t(gi) * g.group_size + k] == member) pos = k;
      int64_t extent[TPU_MAX_RANK], from[TPU_MAX_RANK] = {0}, to[TPU_MAX_RANK] = {0};
      std::copy(dims, dims + x->rank, extent);
      from[a] = pos * dims[a];
      copy_box(dtype_size(x->dtype), x->rank, extent, result, x->dims, from,
               call.output[local_rank_[member]], dims, to);
    }, contiguous);
  });
  return out.take();
}

Tensor* ClusterCommunicator::all_gather(int rank, const Tensor* x, int axis,
                                        const tpu_group_assignment* groups) {
  Rendezvous& rv = rendezvous();
  const int lr = local_rank(rank);
  Descriptor desc;
  Groups g{};
  int a = 0;
  int64_t dims[TPU_MAX_RANK];
  int shared_with = -1;
  Published out{rv, lr};
  guard(rv, lr, rank, [&] {
    require_not_null(x, "x");
    fill_desc(&desc, CollectiveKind::kAllGather, x);
    g = groups_of(groups, &desc);
    a = all_gather_shape(x, axis, g.group_size, dims);
    shared_with = shares_with(rank, g, x->byte_size);
    if (shared_with < 0 || shared_with == rank) out.t = new_tensor_uninitialized(x->dtype, dims, x->rank);
  });
  desc.params[0] = a;
  run(rank, desc, x, &out.t, shared_with, [&](Call& call) {
    gather_groups(call, g, x->byte_size, [&](const int32_t* row, int size, const void* const* in) {
      for (int k = 0; k < size; ++k) {
        if (task_of_replica_[row[k]] != task_id_) continue;
        void* dst = call.output[local_rank_[row[k]]];
        if (dst == nullptr) continue;  // shares the first local member's
        int64_t from[TPU_MAX_RANK] = {0}, to[TPU_MAX_RANK] = {0};
        for (int j = 0; j < size; ++j) {
          to[a] = j * x->dims[a];
          copy_box(dtype_size(x->dtype), x->rank, x->dims, in[j], x->dims, from, dst, dims, to);
        }
      }
    });
  });
  return out.take();
}

Tensor* ClusterCommunicator::all_to_all(int rank, const Tensor* x, int concat_dim, int split_dim,
                                        int split_count, const tpu_group_assignment* groups) {
  Rendezvous& rv = rendezvous();
  const int lr = local_rank(rank);
  Descriptor desc;
  Groups g{};
  int c = 0, s = 0;
  int64_t box[TPU_MAX_RANK], dims[TPU_MAX_RANK];
  Published out{rv, lr};
  guard(rv, lr, rank, [&] {
    require_not_null(x, "x");
    fill_desc(&desc, CollectiveKind::kAllToAll, x);
    g = groups_of(groups, &desc);
    all_to_all_shape(x, concat_dim, split_dim, split_count, g.group_size, &c, &s, box, dims);
    out.t = new_tensor_uninitialized(x->dtype, dims, x->rank);
  });
  desc.params[0] = s;
  desc.params[1] = c;
  desc.params[2] = split_count;
  run(rank, desc, x, &out.t, -1, [&](Call& call) {
    gather_groups(call, g, x->byte_size, [&](const int32_t* row, int size, const void* const* in) {
      for (int pos = 0; pos < size; ++pos) {
        if (task_of_replica_[row[pos]] != task_id_) continue;
        int64_t src_start[TPU_MAX_RANK] = {0}, dst_start[TPU_MAX_RANK] = {0};
        src_start[s] = pos * box[s];
        for (int j = 0; j < size; ++j) {
          dst_start[c] = j * box[c];
          copy_box(dtype_size(x->dtype), x->rank, box, in[j], x->dims, src_start,
                   call.output[local_rank_[row[pos]]], dims, dst_start);
        }
      }
    });
  });
  return out.take();
}

Tensor* ClusterCommunicator::collective_permute(int rank, const Tensor* x, const int32_t* pairs,
                                                int num_pairs) {
  Rendezvous& rv = rendezvous();
  const int lr = local_rank(rank);
  Descriptor desc;
  Published out{rv, lr};
  guard(rv, lr, rank, [&] {
    require_not_null(x, "x");
    fill_desc(&desc, CollectiveKind::kCollectivePermute, x);
    permute_source(pairs, num_pairs, num_replicas(), rank);
    out.t = new_tensor_like(x);
  });
  desc.num_groups = num_pairs;
  desc.group_size = 2;
  desc.groups_hash = hash_ids(pairs, int64_t(num_pairs) * 2);
  run(rank, desc, x, &out.t, -1, [&](Call& call) {
    const size_t bytes = x->byte_size;
    std::vector<bool> targeted(local_replicas_.size(), false);
    std::vector<net::Send> sends;
    std::vector<net::Recv> recvs;
    for (int i = 0; i < num_pairs; ++i) {
      const int a = pairs[2 * i], b = pairs[2 * i + 1];
      const int ta = task_of_replica_[a], tb = task_of_replica_[b];
      if (tb == task_id_) targeted[local_rank_[b]] = true;
      if (ta == task_id_ && tb == task_id_) {
        if (bytes) std::memcpy(call.output[local_rank_[b]], call.input[local_rank_[a]], bytes);
      } else if (ta == task_id_) {
        sends.push_back({tb, static_cast<uint32_t>(i), call.input[local_rank_[a]], bytes});
      } else if (tb == task_id_) {
        recvs.push_back({ta, static_cast<uint32_t>(i), call.output[local_rank_[b]], bytes});
      }
    }
    for (size_t j = 0; j < targeted.size(); ++j)
      if (!targeted[j] && bytes) std::memset(call.output[j], 0, bytes);
    exchange(call, sends, recvs);
  });
  return out.take();
}

Tensor* ClusterCommunicator::broadcast(int rank, const Tensor* x, int root,
                                       const tpu_group_assignment* groups) {
  Rendezvous& rv = rendezvous();
  const int lr = local_rank(rank);
  Descriptor desc;
  Groups g{};
  int shared_with = -1;
  Published out{rv, lr};
  guard(rv, lr, rank, [&] {
    require_not_null(x, "x");
    fill_desc(&desc, CollectiveKind::kBroadcast, x);
    g = groups_of(groups, &desc);
    if (root < 0 || root >= g.group_size)
      invalid_argument("root ", root, " is outside the group of ", g.group_size);
    shared_with = shares_with(rank, g, x->byte_size);
    if (shared_with < 0 || shared_with == rank) out.t = new_tensor_like(x);
  });
  desc.params[0] = root;
  run(rank, desc, x, &out.t, shared_with, [&](Call& call) {
    const size_t bytes = x->byte_size;
    for (int gi = 0; gi < g.num_groups; ++gi) {
      const int32_t* row = g.ids + int64_t(gi) * g.group_size;
      TaskSplit split = split_row(row, g.group_size, task_of_replica_, task_id_);
      if (split.mine < 0) continue;
      const int root_task = task_of_replica_[row[root]];
      std::vector<net::Send> sends;
      std::vector<net::Recv> recvs;
      const std::vector<int>& mine = split.members[split.mine];
      const void* src;
      if (root_task == task_id_) {
        src = call.input[local_rank_[row[root]]];
        for (int t : split.tasks)
          if (t != task_id_) sends.push_back({t, static_cast<uint32_t>(gi), src, bytes});
      } else {
        void* first = call.output[local_rank_[row[mine[0]]]];
        recvs.push_back({root_task, static_cast<uint32_t>(gi), first, bytes});
        src = first;
      }
      exchange(call, sends, recvs);
      for (int k : mine) {
        void* dst = call.output[local_rank_[row[k]]];
        if (dst && dst != src && bytes) std::memcpy(dst, src, bytes);
      }
    }
  });
  return out.take();
}

void ClusterCommunicator::barrier(int rank) {
  Rendezvous& rv = rendezvous();
  const int lr = local_rank(rank);
  Descriptor desc;
  guard(rv, lr, rank, [&] {
    fill_desc(&desc, CollectiveKind::kBarrier, nullptr);
    Groups g = groups_of(nullptr, &desc);
    (void)g;
  });
  Tensor* none = nullptr;
  run(rank, desc, nullptr, &none, -1, [&](Call& call) {
    std::vector<net::Send> sends;
    std::vector<net::Recv> recvs;
    std::vector<bool> has(transport_->num_tasks(), false);
    for (int t : task_of_replica_) has[t] = true;
    for (int t = 0; t < transport_->num_tasks(); ++t) {
      if (t == task_id_ || !has[t]) continue;
      sends.push_back({t, 0, nullptr, 0});
      recvs.push_back({t, 0, nullptr, 0});
    }
    exchange(call, sends, recvs);
  });
}

}  // namespace tpurt
