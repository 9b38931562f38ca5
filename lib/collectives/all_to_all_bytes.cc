// Messages of any size between every pair of a step's participants (the embedding
// exchange's): in one process through all_to_all padded to the longest, across tasks
// point to point, each message its own size.
#include <algorithm>
#include <cstring>

#include "collectives/cluster_communicator.h"
#include "collectives/communicator.h"
#include "collectives/rendezvous.h"
#include "core/status.h"
#include "core/tensor.h"
#include "trace/trace.h"

namespace tpurt {
namespace {

// Owns a tensor handle for the scope.
struct Held {
  tpu_tensor* t = nullptr;
  ~Held() {
    if (t) release(t);
  }
};

using Messages = std::vector<std::vector<uint8_t>>;

}  // namespace

Messages Communicator::all_to_all_bytes(int me, int P, const Messages& out) {
  if (out.size() != static_cast<size_t>(P))
    invalid_argument(out.size(), " messages for an exchange among ", P, " participants");
  const int64_t n[1] = {P};
  Held sizes, all_sizes;
  sizes.t = new_tensor(TPU_INT64, n, 1);
  int64_t* s = static_cast<int64_t*>(mutable_data(sizes.t));
  for (int q = 0; q < P; ++q) s[q] = static_cast<int64_t>(out[q].size());
  all_sizes.t = all_gather(me, sizes.t, 0, nullptr);  // [P * P]: row p is what p sends
  const int64_t* m = static_cast<const int64_t*>(all_sizes.t->data);
  int64_t longest = 0;
  for (int64_t i = 0; i < int64_t{P} * P; ++i) {
    if (m[i] < 0) fail(TPU_INTERNAL, "a message size of ", m[i], " bytes");
    longest = std::max(longest, m[i]);
  }
  Messages in(P);
  if (longest == 0) return in;  // every participant sees the same sizes, so all skip
  const int64_t padded[1] = {int64_t{P} * longest};
  Held send, got;
  send.t = new_tensor_uninitialized(TPU_UINT8, padded, 1);
  uint8_t* b = static_cast<uint8_t*>(mutable_data(send.t));
  for (int q = 0; q < P; ++q) {
    if (!out[q].empty()) std::memcpy(b + q * longest, out[q].data(), out[q].size());
    std::memset(b + q * longest + out[q].size(), 0, longest - out[q].size());
  }
  got.t = all_to_all(me, send.t, 0, 0, P, nullptr);
  const uint8_t* r = static_cast<const uint8_t*>(got.t->data);
  for (int q = 0; q < P; ++q) {
    const int64_t size = m[int64_t{q} * P + me];
    in[q].assign(r + q * longest, r + q * longest + size);
  }
  return in;
}

// One collective: the leader sends every other task its participants' sizes (one
// frame a task, which also carries the vote when folded), then each message on its
// own, and copies the messages between this task's participants.
Messages ClusterCommunicator::all_to_all_bytes(int rank, int P, const Messages& out) {
  trace::CollectiveSpan span("all_to_all_bytes", nullptr, nullptr);
  const int lr = local_rank(rank);
  Descriptor desc{};
  guard_ref(lr, rank, [&] {
    if (P != num_participants())
      invalid_argument("an exchange among ", P, " participants in a step of ", num_participants());
    if (out.size() != static_cast<size_t>(P))
      invalid_argument(out.size(), " messages for an exchange among ", P, " participants");
    desc.kind = CollectiveKind::kAllToAll;
    desc.dtype = TPU_UINT8;
    desc.rank = 1;
    desc.dims[0] = P;
    desc.params[0] = desc.params[1] = -1;  // no tensor's split or concat dimension
    desc.params[2] = P;
    groups_of(nullptr, &desc);
  });
  Messages in(P);
  Tensor* none = nullptr;
  const Groups everyone{all_.data(), 1, num_participants()};
  run(rank, desc, &out, 0, &in, &none, -1, &everyone, [&](ClusterCall& call) {
    const std::vector<int>& local = cx_.local_participants();
    const int L = static_cast<int>(local.size());
    auto sent = [&](int j) -> const Messages& { return *static_cast<const Messages*>(call.input[j]); };
    auto got = [&](int j) -> Messages& { return *static_cast<Messages*>(call.output[j]); };
    std::vector<int> tasks;  // with participants, increasing: alike on every task
    for (int t = 0; t < cx_.num_tasks(); ++t)
      if (cx_.participants_on(t) > 0) tasks.push_back(t);
    // Sizes: row p of the matrix is what participant p sends each participant.
    std::vector<int64_t> mine(int64_t{L} * P);
    for (int j = 0; j < L; ++j)
      for (int q = 0; q < P; ++q) mine[int64_t{j} * P + q] = static_cast<int64_t>(sent(j)[q].size());
    std::vector<std::vector<int64_t>> theirs(cx_.num_tasks());
    std::vector<net::Send> sends;
    std::vector<net::Recv> recvs;
    for (int t : tasks) {
      if (t == cx_.task_id()) continue;
      theirs[t].resize(int64_t{cx_.participants_on(t)} * P);
      sends.push_back({t, 0, mine.data(), mine.size() * sizeof(int64_t)});
      recvs.push_back({t, 0, theirs[t].data(), theirs[t].size() * sizeof(int64_t)});
    }
    cx_.exchange_once(call, sends, recvs);
    // Each message on its own: per peer task, by sender then receiver on both sides.
    sends.clear();
    recvs.clear();
    for (int j = 0; j < L; ++j)
      for (int q = 0; q < P; ++q)
        if (!cx_.is_local(q) && !sent(j)[q].empty())
          sends.push_back({cx_.task_of(q), static_cast<uint32_t>(int64_t{local[j]} * P + q), sent(j)[q].data(),
                           sent(j)[q].size()});
    for (int p = 0; p < P; ++p) {
      if (cx_.is_local(p)) continue;
      const int t = cx_.task_of(p);
      const int64_t* row = theirs[t].data() + int64_t{cx_.index_on_task(p)} * P;
      for (int j = 0; j < L; ++j) {
        const int64_t size = row[local[j]];
        if (size < 0 || size > (int64_t{1} << 40))
          fail(TPU_INTERNAL, describe_task(t), " announced a message of ", size, " bytes from participant ", p);
        if (size == 0) continue;
        std::vector<uint8_t>& m = got(j)[p];
        m.resize(size);
        recvs.push_back({t, static_cast<uint32_t>(int64_t{p} * P + local[j]), m.data(), static_cast<uint64_t>(size)});
      }
    }
    for (int j = 0; j < L; ++j)
      for (int k = 0; k < L; ++k) got(k)[local[j]] = sent(j)[local[k]];
    cx_.exchange(call, sends, recvs, &tasks);
  });
  return in;
}

}  // namespace tpurt
