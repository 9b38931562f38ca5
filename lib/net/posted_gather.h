// An optional interface of a transport whose tasks share memory (ShmTransport): a
// small gather without messages. Each task posts its bytes once, in memory every peer
// can read, and copies each peer's post of the same collective out of the peer's
// memory: one write and one read per peer instead of a frame each way through a ring,
// so a small collective costs about one cache miss per peer (what a shared-memory MPI
// does for a small all-reduce).
//
// The cluster communicator finds it with dynamic_cast on its net::Transport. Posted
// gathers and exchanges share the step's collective numbering, deadlines, checks and
// failure model: a peer found in another collective, at the end of its step, dead or
// silent past the deadline gives the errors net::Transport::exchange documents.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "net/transport.h"

namespace tpurt {
namespace net {

class PostedGather {
 public:
  virtual ~PostedGather() = default;

  // Whether posts reach every peer (all attached through shared memory); the same on
  // every task of a cluster, so that all choose posts or exchanges alike.
  virtual bool posts_reach_all() const = 0;
  // The largest post.
  virtual size_t post_bytes() const = 0;

  // Collective `seq` (digest: its descriptor) as a gather: posts `mine` (at most
  // post_bytes()) and copies the post of every peer in `from` into it; a peer's
  // post must have exactly from[i].bytes (tag is unused). Every task that takes part
  // in the step's collective posts, also one with nothing to read. The peers read
  // must be those that read this task's post (a task's groups are its peers', which
  // equal digests ensure); a slot is rewritten once they have read it. Errors as
  // Transport::exchange; a post of another size is TPU_INVALID_ARGUMENT.
  virtual void gather_posts(uint64_t seq, uint64_t digest, const void* mine, size_t bytes,
                            const Recv* from, size_t num_from, Transport::Clock::time_point deadline,
                            const std::function<void()>& check,
                            const std::function<std::string(int)>& name) = 0;
};

}  // namespace net
}  // namespace tpurt
