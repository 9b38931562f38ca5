// An optional interface of a transport whose engine runs collectives itself (MPI):
// the cluster communicator finds it with dynamic_cast on its net::Transport and hands
// it the all-reduces and reduce-scatters it can take, instead of running them as
// exchanges.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "net/transport.h"
#include "tpurt/collectives.h"

namespace tpurt {
namespace net {

class CollectiveOffload {
 public:
  virtual ~CollectiveOffload() = default;

  // Whether the transport carries the tasks' vote on a collective (exchange() with
  // kVoteDigest, vote_skipped(), throw_if_ended()) apart from its data: an engine's
  // waits would take a vote's messages for the collective's own.
  virtual bool votes() const { return false; }

  // Whether all_reduce takes dtype and op.
  virtual bool can_all_reduce(tpu_dtype dtype, tpu_reduce_op op) const = 0;

  // out = op over `tasks` (sorted, this task among them) of each task's `in`, count
  // elements; MEAN divides the sum by divisor (the group's member count). Called by
  // every task of the group, for collective seq (digest: its descriptor), in the same
  // order for the same tasks. Waits, failures and check() as Transport::exchange.
  virtual void all_reduce(uint64_t seq, uint64_t digest, const std::vector<int>& tasks, tpu_dtype dtype,
                          tpu_reduce_op op, const void* in, void* out, int64_t count, int divisor,
                          Transport::Clock::time_point deadline, const std::function<void()>& check,
                          const std::function<std::string(int)>& name) = 0;

  // Whether reduce_scatter takes dtype and op (an older engine may have none).
  virtual bool can_reduce_scatter(tpu_dtype dtype, tpu_reduce_op op) const { return false; }

  // out (block elements) = block i of op over `tasks` of each task's `in` (tasks.size()
  // blocks of block elements, back to back), i this task's position in tasks; MEAN
  // divides by divisor. Called as all_reduce is.
  virtual void reduce_scatter(uint64_t seq, uint64_t digest, const std::vector<int>& tasks, tpu_dtype dtype,
                              tpu_reduce_op op, const void* in, void* out, int64_t block, int divisor,
                              Transport::Clock::time_point deadline, const std::function<void()>& check,
                              const std::function<std::string(int)>& name) = 0;
};

}  // namespace net
}  // namespace tpurt
