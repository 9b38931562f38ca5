// The TCP data plane: one connection per pair of tasks (the higher task id dials),
// driven by the thread that runs the collective with non-blocking sockets and
// poll(), so no event-loop thread sits between the network and the replicas and a
// chunk costs no thread wake-up. Transfers travel as frames (net/frame.h) of at
// most kFramePayloadBytes; each frame names its step, collective, descriptor digest,
// tag and offset, and the receiver checks every field before it writes a byte.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "net/frame.h"
#include "net/transport.h"

namespace tpurt {
namespace net {

// The payload of one data frame: large enough that headers cost nothing, small
// enough that a failed step pads or drains little.
constexpr uint64_t kFramePayloadBytes = 1u << 20;
// The tag of the frame that ends a step (its payload: the step's outcome).
constexpr uint32_t kEndTag = 0xffffffffu;
constexpr uint64_t kMaxEndPayloadBytes = 64 * 1024;

class TcpTransport : public Transport {
 public:
  TcpTransport(int num_tasks, int task_id);
  ~TcpTransport() override;

  // Hands over a connected socket to `peer` (the transport owns it from now on).
  // Any thread; a second socket for a peer replaces a lost one, else is closed.
  void attach(int peer, int fd);
  // Waits until every peer has a connection; TPU_DEADLINE_EXCEEDED naming the
  // missing tasks.
  void wait_connected(int64_t timeout_ms);

  int num_tasks() const override { return num_tasks_; }
  int task_id() const override { return task_id_; }
  void begin_step(uint64_t step) override;
  void exchange(uint64_t seq, uint64_t digest, const Send* sends, size_t num_sends,
                const Recv* recvs, size_t num_recvs, Clock::time_point deadline,
                const std::function<void()>& check,
                const std::function<std::string(int)>& name) override;
  void interrupt() override;
  bool end_step(const StepOutcome& mine, int64_t timeout_ms, StepOutcome* remote,
                const std::function<std::string(int)>& name) override;
  void fail(const std::string& message) override;

 private:
  struct Peer;
  enum class Progress { kBlocked, kAdvanced, kDone };

  Progress pump_send(Peer& p);
  Progress pump_recv(Peer& p, const std::function<std::string(int)>& name, bool ending);
  void start_frame(Peer& p, const FrameHeader& h, const void* data);
  void lose(Peer& p, const std::string& why);
  // Sleeps in poll() on the peers' sockets and the interrupt eventfd until one is
  // ready or `until`.
  void wait_ready(const std::vector<int>& readers, const std::vector<int>& writers,
                  Clock::time_point until);
  void drain_interrupts();
  [[noreturn]] void throw_failed() const;

  const int num_tasks_;
  const int task_id_;
  std::unique_ptr<Peer[]> peers_;
  mutable std::mutex mu_;  // guards Peer::fd changes by attach() and failed_
  std::mutex drive_mu_;    // one driver at a time: exchange() or end_step()
  std::condition_variable attached_;
  std::string failed_;     // the cluster's failure, once any
  std::atomic<bool> has_failed_{false};
  std::unique_ptr<char[]> sink_;  // where discarded payload goes
  int wake_fd_ = -1;       // eventfd: interrupt()
  std::atomic<bool> interrupted_{false};
  uint64_t step_ = 0;
  uint64_t seq_ = 0;
  uint64_t digest_ = 0;
};

}  // namespace net
}  // namespace tpurt
