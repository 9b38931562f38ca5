// An optional interface of a transport whose tasks share memory (ShmTransport): each
// task owns a window of window_bytes() that it writes and every other task can read.
// The cluster communicator finds it with dynamic_cast on its net::Transport and stages
// large all-reduces through the windows (a copy in, a reduction reading the peers'
// windows, a copy out) instead of sending each byte through a ring. Who may read or
// write a window when is the user's protocol: the transport orders nothing itself,
// but an exchange() completed with a peer orders the peer's earlier window writes
// before this task's later reads (the rings publish with sequentially consistent stores).
#pragma once

#include <cstddef>

namespace tpurt {
namespace net {

class SharedWindows {
 public:
  virtual ~SharedWindows() = default;

  // Every task's window has this size.
  virtual size_t window_bytes() const = 0;
  // Task `task`'s window (this task's own included), or nullptr when that task is not
  // reached through shared memory (attached by socket, not yet attached, out of range).
  virtual char* window(int task) = 0;
};

}  // namespace net
}  // namespace tpurt
