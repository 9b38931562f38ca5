#include "cluster/handshake_gate.h"

#include <sys/socket.h>

#include <chrono>

#include "core/status.h"

namespace tpurt {

void HandshakeGate::evict(std::map<int, Entry>::iterator it) {
  // Its thread sees the socket end, finishes and closes it.
  ::shutdown(it->first, SHUT_RDWR);
  if (--per_source_[it->second.source] == 0) per_source_.erase(it->second.source);
  active_.erase(it);
}

bool HandshakeGate::admit(int fd, const std::string& source, std::string* why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closing_) {
    *why = "shutting down";
    return false;
  }
  auto mine = per_source_.find(source);
  const int from_source = mine == per_source_.end() ? 0 : mine->second;
  if (from_source >= kMaxPerSource) {
    *why = str_cat(from_source, " handshakes from ", source, " in flight already");
    return false;
  }
  if (static_cast<int>(active_.size()) >= kMaxInFlight) {
    auto busiest = per_source_.end();
    for (auto s = per_source_.begin(); s != per_source_.end(); ++s)
      if (busiest == per_source_.end() || s->second > busiest->second) busiest = s;
    if (busiest == per_source_.end() || busiest->second <= from_source) {
      *why = str_cat(active_.size(), " handshakes in flight already");
      return false;
    }
    auto oldest = active_.end();
    for (auto e = active_.begin(); e != active_.end(); ++e)
      if (e->second.source == busiest->first &&
          (oldest == active_.end() || e->second.order < oldest->second.order))
        oldest = e;
    evict(oldest);
  }
  active_[fd] = Entry{source, next_order_++};
  ++per_source_[source];
  ++threads_;
  return true;
}

void HandshakeGate::finished(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(fd);
  if (it != active_.end()) {
    if (--per_source_[it->second.source] == 0) per_source_.erase(it->second.source);
    active_.erase(it);
  }
}

void HandshakeGate::exited() {
  std::lock_guard<std::mutex> lock(mu_);
  --threads_;
  cv_.notify_all();
}

void HandshakeGate::close(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  closing_ = true;
  while (!active_.empty()) evict(active_.begin());
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return threads_ == 0; });
}

}  // namespace tpurt
