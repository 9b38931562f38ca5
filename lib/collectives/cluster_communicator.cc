#include "collectives/cluster_communicator.h"

#include <algorithm>
#include <cstring>

#include "collectives/cluster_algorithms.h"
#include "collectives/reduce.h"
#include "collectives/rendezvous.h"
#include "collectives/shapes.h"
#include "core/box_copy.h"
#include "core/checked.h"
#include "core/deadline.h"
#include "core/dtype.h"
#include "core/float16.h"
#include "core/tensor_ops.h"
#include "core/tensor_ref.h"
#include "topology/group_assignment.h"
#include "topology/group_modes.h"
#include "trace/trace.h"

namespace tpurt {
namespace {

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

void fill_desc(Descriptor* d, CollectiveKind kind, const Tensor* x) {
  *d = Descriptor{};
  d->kind = kind;
  if (x == nullptr) return;
  d->dtype = x->dtype;
  d->rank = x->rank;
  for (int i = 0; i < x->rank; ++i) d->dims[i] = x->dims[i];
}

}  // namespace

ClusterCommunicator::ClusterCommunicator(std::vector<int> task_of_participant, int task_id,
                                         net::Transport* transport, int64_t timeout_ms, int num_cpus,
                                         bool private_results, int cores_per_replica)
    : Communicator(static_cast<int>(
                       std::count(task_of_participant.begin(), task_of_participant.end(), task_id)),
                   timeout_ms, num_cpus, private_results, cores_per_replica),
      cx_(std::move(task_of_participant), task_id, transport,
          [rv = &rendezvous()] {
            tpu_status code;
            std::string message;
            if (rv->failure_for(-1, &code, &message)) throw Error(code, message);
          },
          [this](int task) { return describe_task(task); }),
      all_(cx_.num_participants()),
      call_(new ClusterCall) {
  if (cores_per_replica < 1 || num_participants() % cores_per_replica != 0)
    fail(TPU_INTERNAL, num_participants(), " participants are not replicas of ", cores_per_replica,
         " cores");
  for (int p = 0; p < num_participants(); ++p) all_[p] = p;
  all_hash_ = hash_ids(all_.data(), num_participants());
  call_timeout_ms_.assign(cx_.local_participants().size(), 0);
  // The rendezvous's ranks are this task's participants: its messages name them.
  rendezvous().name_ranks(cx_.local_participants());
}

ClusterCommunicator::~ClusterCommunicator() = default;

void ClusterCommunicator::reset(const int* cpu_of_rank) {
  Communicator::reset(cpu_of_rank);
  std::lock_guard<std::mutex> lock(verdict_mu_);
  claimed_ = decided_ = false;
  voted_seq_ = 0;
  verdict_ = Verdict{};
}

int64_t ClusterCommunicator::timeout_of(int lr) {
  return call_timeout_ms_[lr] > 0 ? call_timeout_ms_[lr] : rendezvous().step_timeout();
}

template <typename Fn>
void ClusterCommunicator::guard(int lr, int participant, Fn&& checks) {
  Rendezvous& rv = rendezvous();
  if (rv.aborted()) {
    uint64_t seq;
    rv.begin(lr, &seq);
    try {
      rv.arrive_and_check(lr, seq);  // throws the step's failure
    } catch (const Error& e) {
      settle(participant, seq, e);
    }
  }
  try {
    checks();
  } catch (const Error& e) {
    rv.poison(e.code(), e.message(), participant);
    uint64_t seq;
    rv.begin(lr, &seq);
    settle(participant, seq, e);
  }
}

void ClusterCommunicator::guard_ref(int lr, int participant, FunctionRef<void()> checks) {
  guard(lr, participant, checks);
}

void ClusterCommunicator::not_local(int participant) const {
  fail(TPU_INTERNAL, participant_name(participant, cores_per_replica()), " is not one of task ",
       cx_.task_id(), "'s");
}

std::string ClusterCommunicator::describe_task(int task) const {
  std::string names;
  int count = 0;
  for (int p = 0; p < num_participants(); ++p) {
    if (cx_.task_of(p) != task) continue;
    names += count++ ? ", " : "";
    names += cores_per_replica() > 1 ? participant_name(p, cores_per_replica()) : std::to_string(p);
  }
  if (count == 0) return str_cat("task ", task, " (no replicas in this step)");
  if (cores_per_replica() > 1) return str_cat("task ", task, " (", names, ")");
  return str_cat("task ", task, " (replica", count > 1 ? "s " : " ", names, ")");
}

void ClusterCommunicator::set_call_timeout(int rank, int64_t timeout_ms) {
  const int lr = local_rank(rank);
  call_timeout_ms_[lr] = timeout_ms;
  Communicator::set_call_timeout(lr, timeout_ms);
}

void ClusterCommunicator::abort(int participant, tpu_status code, const std::string& message) {
  Communicator::abort(participant, code, message);
  cx_.transport()->interrupt();  // the leader may be waiting on the network
}

void ClusterCommunicator::depart(int rank) { Communicator::depart(local_rank(rank)); }

Groups ClusterCommunicator::groups_of(const tpu_group_assignment* groups, Descriptor* desc) const {
  if (groups == nullptr) {
    desc->num_groups = 1;
    desc->group_size = num_participants();
    desc->groups_hash = all_hash_;
    return {all_.data(), 1, num_participants()};
  }
  validate_group_assignment(groups, num_participants());
  desc->num_groups = groups->num_groups;
  desc->group_size = groups->group_size;
  if (is_ragged(groups)) {
    Groups g{groups->replica_ids, groups->num_groups, groups->group_size};
    int64_t at = 0;
    for (int gi = 0; gi < g.num_groups; ++gi) {
      g.starts.push_back(at + 1);
      at += 1 + g.ids[at];
    }
    desc->groups_hash = hash_ids(groups->replica_ids, at);
    return g;
  }
  desc->groups_hash = hash_ids(groups->replica_ids, int64_t(groups->num_groups) * groups->group_size);
  return {groups->replica_ids, groups->num_groups, groups->group_size};
}

int ClusterCommunicator::shares_with(int rank, const Groups& g, size_t bytes) const {
  if (private_results() || bytes <= kInlineBytes) return -1;
  for (int gi = 0; gi < g.num_groups; ++gi) {
    const int32_t* row = g.row(gi);
    const int size = g.size(gi);
    if (std::find(row, row + size, rank) == row + size) continue;
    int first = -1, here = 0;
    for (int k = 0; k < size; ++k) {
      if (!cx_.is_local(row[k])) continue;
      if (first < 0) first = row[k];
      ++here;
    }
    return here > 1 ? first : -1;
  }
  return -1;
}

bool ClusterCommunicator::folds(const Groups* g, size_t bytes) const {
  // Shared windows' waits and MPI's do not read the peers' frames; windows serve
  // reductions of 128 KiB and more (reduce_staged.cc), where a vote costs nothing.
  // Only when every peer is in shared memory (as staged::applies asks): a task alone
  // on its host has no windows, and every task must decide alike.
  if (g == nullptr || cx_.offload() != nullptr ||
      (cx_.windows() != nullptr && cx_.transport()->fans_out_cheaply() && bytes >= 128 * 1024))
    return false;
  int tasks = 0;
  for (int t = 0; t < cx_.num_tasks(); ++t) tasks += cx_.participants_on(t) > 0;
  for (int gi = 0; gi < g->num_groups; ++gi)
    if (static_cast<int>(cx_.split(g->row(gi), g->size(gi)).tasks.size()) != tasks) return false;
  return true;
}

void ClusterCommunicator::run(int rank, const Descriptor& desc, const void* input, size_t bytes, void* output,
                              Tensor** out, int share_with, const Groups* fold,
                              FunctionRef<void(ClusterCall&)> leader) {
  Rendezvous& rv = rendezvous();
  const int lr = local_rank(rank);
  uint64_t seq;
  Record& rec = rv.begin(lr, &seq);
  rec.desc = desc;
  rec.input = input;
  rec.output = output;
  rec.result = *out;
  try {
    rv.arrive_and_check(lr, seq);
  } catch (const Error& e) {
    settle(rank, seq, e);
  }
  // The first member cannot release its result before every member has finished.
  if (share_with >= 0 && share_with != rank) {
    const Tensor* first = rv.record(local_rank(share_with), seq).result;
    *out = share(first, first->dims, first->rank, 0);
  }
  const int64_t timeout = timeout_of(lr);
  if (lr == 0) {
    ClusterCall& call = *call_;
    call.seq = seq;
    call.digest = rv.arrival_digest(lr, seq);
    const int n = static_cast<int>(cx_.local_participants().size());
    call.input.resize(n);
    call.output.resize(n);
    for (int j = 0; j < n; ++j) {
      call.input[j] = rv.record(j, seq).input;
      call.output[j] = rv.record(j, seq).output;
    }
    {
      std::lock_guard<std::mutex> lock(verdict_mu_);
      voted_seq_ = seq;
    }
    // Once this task's collective failed past its vote: the step's verdict, which every
    // later collective of the step throws.
    auto decide = [&](const Verdict& v) {
      rv.overrule(v.code, v.message, v.origin);
      {
        std::lock_guard<std::mutex> lock(verdict_mu_);
        claimed_ = decided_ = true;
        verdict_ = v;
      }
      verdict_cv_.notify_all();
      throw Error(v.code, v.message);
    };
    if (!votes()) {
      call.deadline = deadline_after(coarse_now(), timeout);
      try {
        leader(call);
      } catch (const Error& e) {
        rv.poison(e.code(), e.message());
        throw;
      }
      rv.finish(lr, seq);
      return;
    }
    const bool folded = folds(fold, bytes);
    Verdict v;
    if (!folded) {
      try {
        trace::WaitSpan waiting;  // for the other tasks' ballots
        v = vote(seq, TPU_OK, -1, std::string(), false, with_grace(timeout));
      } catch (const Error& e) {
        v = {e.code(), -1, e.message()};
      }
      if (v.code != TPU_OK) decide(v);
    }
    // Folded, a peer's ballot may come instead of its data: a task that waits for a late
    // participant votes at its deadline, so the exchange waits as long as a vote.
    call.deadline = deadline_after(coarse_now(), folded ? with_grace(timeout) : timeout);
    try {
      leader(call);
      // Folded, the data that came may be from peers that gave up on this task since.
      if (folded) cx_.transport()->peek_votes(seq, cx_.namer());
    } catch (const Error& e) {
      if (!folded) {  // past the vote: as before it
        rv.poison(e.code(), e.message());
        rv.failure(&v.origin, &v.code, &v.message);
        {
          std::lock_guard<std::mutex> lock(verdict_mu_);
          claimed_ = decided_ = true;
          verdict_ = v;
        }
        verdict_cv_.notify_all();
        throw;
      }
      // Every task must hear of it before any returns: they vote now. A peer that
      // called the vote, or sent data of another descriptor, leaves this task's
      // participants agreed (its ballot says which descriptor); any other failure
      // is this task's ballot.
      const bool agreed = dynamic_cast<const net::VoteCalled*>(&e) || dynamic_cast<const net::PeerDisagrees*>(&e);
      try {
        v = agreed ? vote(seq, TPU_OK, -1, std::string(), false, with_grace(timeout))
                   : vote(seq, e.code(), -1, e.message(), false, grace_ms(timeout));
      } catch (const Error& e2) {
        v = {e2.code(), -1, e2.message()};
      }
      if (v.code == TPU_OK)
        v = {TPU_INTERNAL, -1, str_cat("collective #", seq, ": its exchange failed (", e.message(),
                                       "), yet every task voted that it agreed")};
      decide(v);
    }
  }
  // The others wait for the leader, whose vote and exchange are bounded (a deadline
  // each, with grace).
  trace::note_algorithm("the task's leader's exchange");
  if (!votes()) {
    rv.finish(lr, seq);
    return;
  }
  try {
    rv.finish(lr, seq, lr == 0 ? 0 : leader_bound(timeout));
  } catch (const Error& e) {
    settle(rank, seq, e);
  }
}

Tensor* ClusterCommunicator::all_reduce(int rank, const Tensor* x, tpu_reduce_op op,
                                        const tpu_group_assignment* groups, bool bf16_wire) {
  trace::CollectiveSpan span("all_reduce", x, groups);
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
  guard(lr, rank, [&] {
    require_not_null(x, "x");
    check_reduction(x->dtype, op);
    fill_desc(&desc, CollectiveKind::kAllReduce, x);
    g = groups_of(groups, &desc);
    shared_with = shares_with(rank, g, x->byte_size);
    if (shared_with < 0 || shared_with == rank) out.t = new_tensor_like(x);
  });
  desc.op = op;
  desc.bf16_wire = bf16_wire;
  run(rank, desc, x, &out.t, shared_with, &g, [&](ClusterCall& call) {
    reduce_groups(cx_, call, g, Reduction{x, op, /*into_output=*/true, /*scatter_blocks=*/false},
                  [&](int member, const char* result) {
      void* dst = call.output[cx_.local_index(member)];
      if (x->byte_size && dst && dst != result) std::memcpy(dst, result, x->byte_size);
    });
  });
  return out.take();
}

Tensor* ClusterCommunicator::reduce_scatter(int rank, const Tensor* x, tpu_reduce_op op, int axis,
                                            const tpu_group_assignment* groups, bool bf16_wire) {
  trace::CollectiveSpan span("reduce_scatter", x, groups);
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
  guard(lr, rank, [&] {
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
  run(rank, desc, x, &out.t, -1, &g, [&](ClusterCall& call) {
    // Each member's block is contiguous when every dimension before the axis is 1.
    bool contiguous = true;
    for (int d = 0; d < a; ++d) contiguous &= x->dims[d] == 1;
    reduce_groups(cx_, call, g, Reduction{x, op, /*into_output=*/false, /*scatter_blocks=*/contiguous},
                  [&](int member, const char* result) {
      if (x->num_elements == 0) return;
      int pos = 0;
      for (int gi = 0; gi < g.num_groups; ++gi)
        for (int k = 0; k < g.group_size; ++k)
          if (g.ids[int64_t(gi) * g.group_size + k] == member) pos = k;
      int64_t extent[TPU_MAX_RANK], from[TPU_MAX_RANK] = {0}, to[TPU_MAX_RANK] = {0};
      std::copy(dims, dims + x->rank, extent);
      from[a] = pos * dims[a];
      copy_box(dtype_size(x->dtype), x->rank, extent, result, x->dims, from,
               call.output[cx_.local_index(member)], dims, to);
    });
  });
  return out.take();
}

Tensor* ClusterCommunicator::all_gather(int rank, const Tensor* x, int axis,
                                        const tpu_group_assignment* groups) {
  trace::CollectiveSpan span("all_gather", x, groups);
  Rendezvous& rv = rendezvous();
  const int lr = local_rank(rank);
  Descriptor desc;
  Groups g{};
  int a = 0;
  int64_t dims[TPU_MAX_RANK];
  int shared_with = -1;
  Published out{rv, lr};
  guard(lr, rank, [&] {
    require_not_null(x, "x");
    fill_desc(&desc, CollectiveKind::kAllGather, x);
    g = groups_of(groups, &desc);
    a = all_gather_shape(x, axis, g.group_size, dims);
    shared_with = shares_with(rank, g, x->byte_size);
    if (shared_with < 0 || shared_with == rank) out.t = new_tensor_uninitialized(x->dtype, dims, x->rank);
  });
  desc.params[0] = a;
  run(rank, desc, x, &out.t, shared_with, &g, [&](ClusterCall& call) {
    gather_groups(cx_, call, g, x->byte_size, [&](const int32_t* row, int size, const void* const* in) {
      for (int k = 0; k < size; ++k) {
        if (!cx_.is_local(row[k])) continue;
        void* dst = call.output[cx_.local_index(row[k])];
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
  trace::CollectiveSpan span("all_to_all", x, groups);
  Rendezvous& rv = rendezvous();
  const int lr = local_rank(rank);
  Descriptor desc;
  Groups g{};
  int c = 0, s = 0;
  int64_t box[TPU_MAX_RANK], dims[TPU_MAX_RANK];
  Published out{rv, lr};
  guard(lr, rank, [&] {
    require_not_null(x, "x");
    fill_desc(&desc, CollectiveKind::kAllToAll, x);
    g = groups_of(groups, &desc);
    all_to_all_shape(x, concat_dim, split_dim, split_count, g.group_size, &c, &s, box, dims);
    out.t = new_tensor_uninitialized(x->dtype, dims, x->rank);
  });
  desc.params[0] = s;
  desc.params[1] = c;
  desc.params[2] = split_count;
  // Point to point: each task sends each other task of a row only the blocks of its
  // members (sender's members, then receiver's, in member order), one frame a row.
  run(rank, desc, x, &out.t, -1, &g, [&](ClusterCall& call) {
    const size_t es = dtype_size(x->dtype);
    size_t block = es;
    for (int d = 0; d < x->rank; ++d) block *= static_cast<size_t>(box[d]);
    const int64_t zero[TPU_MAX_RANK] = {0};
    int64_t from[TPU_MAX_RANK] = {0}, to[TPU_MAX_RANK] = {0};
    // fn(gi, row, split, mine) for each group this task has members in.
    auto each_row_here = [&](auto&& fn) {
      for (int gi = 0; gi < g.num_groups; ++gi) {
        const TaskSplit& split = cx_.split(g.row(gi), g.size(gi));
        if (split.mine >= 0) fn(gi, g.row(gi), split, split.members[split.mine]);
      }
    };
    size_t send_total = 0;
    each_row_here([&](int, const int32_t*, const TaskSplit& split, const std::vector<int>& mine) {
      for (size_t ti = 0; ti < split.tasks.size(); ++ti)
        if (static_cast<int>(ti) != split.mine) send_total += mine.size() * split.members[ti].size() * block;
    });
    char* sbuf = ClusterContext::grow(&cx_.partial, send_total);
    char* rbuf = ClusterContext::grow(&cx_.received, send_total);  // as much comes back
    std::vector<net::Send> sends;
    std::vector<net::Recv> recvs;
    size_t at = 0;
    each_row_here([&](int gi, const int32_t* row, const TaskSplit& split, const std::vector<int>& mine) {
      for (size_t ti = 0; ti < split.tasks.size(); ++ti) {
        if (static_cast<int>(ti) == split.mine) continue;
        const size_t bytes = mine.size() * split.members[ti].size() * block;
        char* b = sbuf + at;
        for (int j : mine)
          for (int pos : split.members[ti]) {
            from[s] = pos * box[s];
            if (block) copy_box(es, x->rank, box, cx_.input(call, row[j]), x->dims, from, b, box, zero);
            b += block;
          }
        sends.push_back({split.tasks[ti], static_cast<uint32_t>(gi), sbuf + at, bytes});
        recvs.push_back({split.tasks[ti], static_cast<uint32_t>(gi), rbuf + at, bytes});
        at += bytes;
      }
    });
    const TaskSplit* one = g.num_groups == 1 ? &cx_.split(g.row(0), g.size(0)) : nullptr;
    cx_.exchange(call, sends, recvs, one && one->mine >= 0 ? &one->tasks : nullptr);
    at = 0;
    each_row_here([&](int, const int32_t* row, const TaskSplit& split, const std::vector<int>& mine) {
      for (size_t ti = 0; ti < split.tasks.size(); ++ti) {
        const bool local = static_cast<int>(ti) == split.mine;
        for (int j : split.members[ti])
          for (int pos : mine) {
            to[c] = j * box[c];
            void* dst = cx_.output(call, row[pos]);
            if (local) {
              from[s] = pos * box[s];
              if (block) copy_box(es, x->rank, box, cx_.input(call, row[j]), x->dims, from, dst, dims, to);
            } else {
              if (block) copy_box(es, x->rank, box, rbuf + at, box, zero, dst, dims, to);
              at += block;
            }
          }
      }
    });
  });
  return out.take();
}

Tensor* ClusterCommunicator::collective_permute(int rank, const Tensor* x, const int32_t* pairs,
                                                int num_pairs) {
  trace::CollectiveSpan span("collective_permute", x, nullptr);
  Rendezvous& rv = rendezvous();
  const int lr = local_rank(rank);
  Descriptor desc;
  Published out{rv, lr};
  guard(lr, rank, [&] {
    require_not_null(x, "x");
    fill_desc(&desc, CollectiveKind::kCollectivePermute, x);
    permute_source(pairs, num_pairs, num_participants(), rank);
    out.t = new_tensor_like(x);
  });
  desc.num_groups = num_pairs;
  desc.group_size = 2;
  desc.groups_hash = hash_ids(pairs, int64_t(num_pairs) * 2);
  run(rank, desc, x, &out.t, -1, nullptr, [&](ClusterCall& call) {
    const size_t bytes = x->byte_size;
    std::vector<bool> targeted(cx_.local_participants().size(), false);
    std::vector<net::Send> sends;
    std::vector<net::Recv> recvs;
    for (int i = 0; i < num_pairs; ++i) {
      const int a = pairs[2 * i], b = pairs[2 * i + 1];
      const int ta = cx_.task_of(a), tb = cx_.task_of(b);
      if (tb == cx_.task_id()) targeted[cx_.local_index(b)] = true;
      if (ta == cx_.task_id() && tb == cx_.task_id()) {
        if (bytes) std::memcpy(call.output[cx_.local_index(b)], call.input[cx_.local_index(a)], bytes);
      } else if (ta == cx_.task_id()) {
        sends.push_back({tb, static_cast<uint32_t>(i), call.input[cx_.local_index(a)], bytes});
      } else if (tb == cx_.task_id()) {
        recvs.push_back({ta, static_cast<uint32_t>(i), call.output[cx_.local_index(b)], bytes});
      }
    }
    for (size_t j = 0; j < targeted.size(); ++j)
      if (!targeted[j] && bytes) std::memset(call.output[j], 0, bytes);
    cx_.exchange(call, sends, recvs);
  });
  return out.take();
}

Tensor* ClusterCommunicator::broadcast(int rank, const Tensor* x, int root,
                                       const tpu_group_assignment* groups) {
  trace::CollectiveSpan span("broadcast", x, groups);
  Rendezvous& rv = rendezvous();
  const int lr = local_rank(rank);
  Descriptor desc;
  Groups g{};
  int shared_with = -1;
  Published out{rv, lr};
  guard(lr, rank, [&] {
    require_not_null(x, "x");
    fill_desc(&desc, CollectiveKind::kBroadcast, x);
    g = groups_of(groups, &desc);
    for (int gi = 0; gi < g.num_groups; ++gi)
      if (root < 0 || root >= g.size(gi))
        invalid_argument("root ", root, " is outside the group of ", g.size(gi));
    shared_with = shares_with(rank, g, x->byte_size);
    if (shared_with < 0 || shared_with == rank) out.t = new_tensor_like(x);
  });
  desc.params[0] = root;
  run(rank, desc, x, &out.t, shared_with, nullptr, [&](ClusterCall& call) {
    const size_t bytes = x->byte_size;
    for (int gi = 0; gi < g.num_groups; ++gi) {
      const int32_t* row = g.row(gi);
      TaskSplit split = cx_.split(row, g.size(gi));
      if (split.mine < 0) continue;
      const int root_task = cx_.task_of(row[root]);
      std::vector<net::Send> sends;
      std::vector<net::Recv> recvs;
      const std::vector<int>& mine = split.members[split.mine];
      const void* src;
      if (root_task == cx_.task_id()) {
        src = call.input[cx_.local_index(row[root])];
        for (int t : split.tasks)
          if (t != cx_.task_id()) sends.push_back({t, static_cast<uint32_t>(gi), src, bytes});
      } else {
        void* first = call.output[cx_.local_index(row[mine[0]])];
        recvs.push_back({root_task, static_cast<uint32_t>(gi), first, bytes});
        src = first;
      }
      cx_.exchange(call, sends, recvs);
      for (int k : mine) {
        void* dst = call.output[cx_.local_index(row[k])];
        if (dst && dst != src && bytes) std::memcpy(dst, src, bytes);
      }
    }
  });
  return out.take();
}

void ClusterCommunicator::barrier(int rank) {
  trace::CollectiveSpan span("barrier", nullptr, nullptr);
  const int lr = local_rank(rank);
  Descriptor desc;
  guard(lr, rank, [&] {
    fill_desc(&desc, CollectiveKind::kBarrier, nullptr);
    Groups g = groups_of(nullptr, &desc);
    (void)g;
  });
  Tensor* none = nullptr;
  const Groups everyone{all_.data(), 1, num_participants()};
  run(rank, desc, nullptr, &none, -1, &everyone, [&](ClusterCall& call) {
    std::vector<net::Send> sends;
    std::vector<net::Recv> recvs;
    std::vector<bool> has(cx_.num_tasks(), false);
    for (int t : cx_.task_of()) has[t] = true;
    for (int t = 0; t < cx_.num_tasks(); ++t) {
      if (t == cx_.task_id() || !has[t]) continue;
      sends.push_back({t, 0, nullptr, 0});
      recvs.push_back({t, 0, nullptr, 0});
    }
    cx_.exchange(call, sends, recvs);
  });
}

}  // namespace tpurt
