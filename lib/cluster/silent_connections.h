// Accepted connections that have not sent a byte yet, watched on the loop thread
// before any handshake starts: a flood of connections that never send anything (from
// any address, the tasks' own among them) costs an fd each and nothing else — no
// thread, no place at the HandshakeGate — and the listener keeps accepting at full
// rate. At most `capacity` are held: past it the oldest silent one is dropped first,
// as is one silent for longer than the handshake deadline. A connection whose first
// bytes arrive (a real task's hello comes with its connect) goes on to its handshake
// at once, whoever else is waiting.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <list>

namespace tpurt {

class SilentConnections {
 public:
  // Called on the loop thread with a connection that has sent something (a
  // connection that ends or fails first is closed here); the callee owns fd.
  using Ready = std::function<void(int fd)>;

  // The most silent connections a process of `fd_limit` open files holds.
  static size_t capacity_for(uint64_t fd_limit);

  // On the loop thread (or before it runs). The object deletes itself after close().
  static SilentConnections* open(uv_loop_t* loop, size_t capacity, int64_t deadline_ms, Ready ready);
  // An accepted connection (this object owns fd from here): handed to ready at once if
  // its first bytes are there, else held until they come.
  void add(int fd);
  // Closes every connection held and stops; on the loop thread.
  void close();
  size_t held() const { return held_.size(); }
  uint64_t dropped() const { return dropped_; }

 private:
  struct Entry;
  SilentConnections(uv_loop_t* loop, size_t capacity, int64_t deadline_ms, Ready ready)
      : loop_(loop), capacity_(capacity), deadline_ms_(deadline_ms), ready_(std::move(ready)) {}
  // Stops watching e and removes it; its fd is the caller's again.
  void release(Entry* e);
  void drop(Entry* e);
  void expire();

  uv_loop_t* loop_;
  size_t capacity_;
  int64_t deadline_ms_;
  Ready ready_;
  std::list<Entry*> held_;  // oldest first
  uv_timer_t timer_;
  uint64_t dropped_ = 0;
  bool closed_ = false;
};

}  // namespace tpurt
