// Admission of connections that have not authenticated yet (and have sent their first
// bytes: those that send nothing wait threadless in SilentConnections, and never get
// here): each runs its handshake on a thread of its own, and a flood of them must
// neither exhaust the process nor keep real tasks out. So: a short handshake deadline, at most kMaxPerSource handshakes in
// flight per source address, and when kMaxInFlight are in flight a newcomer takes the
// place of the oldest handshake of the busiest source (if that source has more in
// flight than the newcomer's), else it is refused. A real task, whose handshake takes
// milliseconds and whose dialer retries a closed connection, always gets through.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace tpurt {

class HandshakeGate {
 public:
  static constexpr int kMaxInFlight = 128;
  static constexpr int kMaxPerSource = 8;
  static constexpr int64_t kDeadlineMs = 3000;  // a real peer needs two round trips

  // Whether fd (from `source`, its peer's address without the port) may start a
  // handshake; false with *why: the caller closes it. May end another handshake.
  bool admit(int fd, const std::string& source, std::string* why);
  // The handshake of an admitted fd is over: its place is free (call before the fd is
  // closed or handed on, so that its number is not yet anyone else's).
  void finished(int fd);
  // The admitted fd's thread touches nothing of its owner's any more.
  void exited();
  // Refuses newcomers, ends the handshakes in flight and waits for their threads
  // (bounded by timeout_ms).
  void close(int64_t timeout_ms);

 private:
  struct Entry {
    std::string source;
    uint64_t order;  // admission order: the lowest is the oldest
  };
  void evict(std::map<int, Entry>::iterator it);

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, Entry> active_;            // handshakes that hold a place
  std::map<std::string, int> per_source_;  // places held per source
  int threads_ = 0;                        // admitted and not finished (evicted included)
  uint64_t next_order_ = 0;
  bool closing_ = false;
};

}  // namespace tpurt
