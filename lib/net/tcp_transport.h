// The TCP data plane: one connection per pair of tasks (the higher task id dials),
// carrying the stream protocol of net/stream_transport.h, driven by the thread that
// runs the collective with non-blocking sockets and poll(), so no event-loop thread
// sits between the network and the replicas and a chunk costs no thread wake-up.
#pragma once

#include <string>

#include "net/stream_transport.h"

namespace tpurt {
namespace net {

// A connected socket as a stream link (the link owns and closes it).
class SocketLink : public Link {
 public:
  explicit SocketLink(int fd);  // makes fd non-blocking
  ~SocketLink() override;
  int fd() const { return fd_; }
  int64_t send(const iovec* iov, int n, std::string* error) override;
  int64_t recv(void* dest, size_t bytes, std::string* error) override;
  void shutdown() override;

 private:
  const int fd_;
};

class TcpTransport : public StreamTransport {
 public:
  TcpTransport(int num_tasks, int task_id);
  ~TcpTransport() override;

  // Hands over a connected socket to `peer` (the transport owns it from now on).
  // Any thread; a second socket for a peer replaces a lost one, else is closed.
  void attach(int peer, int fd);
  // Waits until every peer has a connection; TPU_DEADLINE_EXCEEDED naming the
  // missing tasks.
  void wait_connected(int64_t timeout_ms);

  // Every peer at once: when tasks outnumber CPUs (4 on 2) or other work takes them,
  // a round waits for its one peer to be scheduled, while at once any running peer's
  // bytes move. 4 tasks, 16 MiB, under load 12-17: faster in 13 of 16 alternated rounds.
  bool large_exchanges_in_rounds() const override { return false; }

 protected:
  // Sleeps in poll() on the peers' sockets and the interrupt eventfd until one is
  // ready or `until`.
  void wait_ready(const std::vector<int>& readers, const std::vector<int>& writers,
                  Clock::time_point until) override;
  void wake() override;
  void clear_wakes() override;

 private:
  int wake_fd_ = -1;  // eventfd: interrupt()
};

}  // namespace net
}  // namespace tpurt
