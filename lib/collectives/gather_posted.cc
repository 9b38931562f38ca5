// The gather by posts over shared memory (net::PostedGather): each task posts its
// members' inputs once per collective and copies those of the tasks it shares rows
// with out of their memory, for every row here at once.
#include <cstring>

#include "collectives/cluster_algorithms.h"
#include "net/posted_gather.h"

namespace tpurt {
namespace posted {

bool take(const ClusterContext& cx, size_t bytes) {
  const net::PostedGather* posts = cx.posts();
  return posts != nullptr && posts->posts_reach_all() &&
         bytes * static_cast<size_t>(cx.most_on_a_task()) <= posts->post_bytes();
}

void gather(ClusterContext& cx, ClusterCall& call, const Groups& g, size_t bytes, UseRow use) {
  ClusterContext::PostPlan& plan = cx.post_plan;
  const int num_tasks = cx.num_tasks(), me = cx.task_id();
  const size_t n_local = cx.local_participants().size();
  // This task's post: its members' inputs in participant order (one member's, as it is).
  const void* mine = n_local == 1 ? call.input[0] : nullptr;
  if (n_local > 1) {
    plan.out.resize(n_local * bytes);
    for (size_t j = 0; j < n_local && bytes; ++j) std::memcpy(&plan.out[j * bytes], call.input[j], bytes);
    mine = plan.out.data();
  }
  // The tasks sharing a row with this one, and where their posts go: planned once for
  // a collective like the last (the digest covers the groups, shape and dtype).
  if (plan.digest != call.digest || plan.ids != g.ids) {
    plan.ids = nullptr;  // no plan until this one is whole
    plan.at.assign(num_tasks, SIZE_MAX);
    plan.rows.clear();
    plan.from.clear();
    size_t total = 0;
    for (int gi = 0; gi < g.num_groups; ++gi) {
      const int32_t* row = g.row(gi);
      bool here = false;
      for (int k = 0; k < g.size(gi) && !here; ++k) here = cx.is_local(row[k]);
      if (!here) continue;
      plan.rows.push_back(gi);
      for (int k = 0; k < g.size(gi); ++k) {
        const int t = cx.task_of(row[k]);
        if (t == me || plan.at[t] != SIZE_MAX) continue;
        plan.at[t] = total;
        const size_t its = static_cast<size_t>(cx.participants_on(t)) * bytes;
        plan.from.push_back({t, 0, nullptr, its});
        total += its;
      }
    }
    plan.in.resize(total);
    for (net::Recv& r : plan.from) r.data = plan.in.data() + plan.at[r.peer];
    plan.digest = call.digest;
    plan.ids = g.ids;
  }
  cx.posts()->gather_posts(call.seq, call.digest, mine, n_local * bytes, plan.from.data(), plan.from.size(),
                           call.deadline, cx.check(), cx.namer());
  plan.inputs.resize(g.max_size());
  for (int gi : plan.rows) {
    const int32_t* row = g.row(gi);
    for (int k = 0; k < g.size(gi); ++k) {
      const int p = row[k], t = cx.task_of(p);
      plan.inputs[k] = t == me ? cx.input(call, p)
                               : plan.in.data() + plan.at[t] + static_cast<size_t>(cx.index_on_task(p)) * bytes;
    }
    use(row, g.size(gi), plan.inputs.data());
  }
}

}  // namespace posted
}  // namespace tpurt
