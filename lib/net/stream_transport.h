// The data plane's protocol over one ordered byte stream per pair of tasks, whatever
// carries the bytes (a socket: tcp_transport.h; shared-memory rings: shm_transport.h).
// Transfers travel as frames (net/frame.h) of at most kFramePayloadBytes; each frame
// names its step, collective, descriptor digest, tag and offset, and the receiver
// checks every field before it writes a byte. Each step ends with an END frame per
// peer carrying the task's outcome. The calling thread drives everything: it retries
// the links, spins briefly, then sleeps in the subclass's wait_ready().
#pragma once

#include <sched.h>
#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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
// The tag of a task's last frame, of any step (payload: an outcome, as END's): why it
// leaves (its shutdown, or the cluster's failure), so that no peer blames the link.
constexpr uint32_t kFarewellTag = 0xfffffffeu;
constexpr uint64_t kMaxEndPayloadBytes = 64 * 1024;

// One direction-pair byte stream to a peer. Never blocks; one thread at a time
// sends and receives (the transport's driver), shutdown() may come from another.
class Link {
 public:
  static constexpr int64_t kError = -1;   // *error says why
  static constexpr int64_t kClosed = -2;  // the peer closed its end (recv only)
  virtual ~Link() = default;
  // Takes the first bytes of iov[0..n) in order: returns how many (0: none fit now),
  // or kError.
  virtual int64_t send(const iovec* iov, int n, std::string* error) = 0;
  // Reads up to `bytes` (> 0) into dest: how many (0: none there now), kClosed, kError.
  virtual int64_t recv(void* dest, size_t bytes, std::string* error) = 0;
  // Ends the link both ways; the peer's reads then see kClosed, its sends fail.
  virtual void shutdown() = 0;
};

// One driver at a time, rarely contended (a late leader against the step's end): a
// flag taken with one exchange; a waiter yields, then naps.
class DriveLock {
 public:
  void lock() {
    for (int tries = 0; taken_.exchange(true, std::memory_order_acquire); ++tries) {
      if (tries < 1000) sched_yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  void unlock() { taken_.store(false, std::memory_order_release); }
  // lock(), unless another thread keeps it for `patience`: false then.
  bool try_lock_for(std::chrono::milliseconds patience) {
    const auto until = std::chrono::steady_clock::now() + patience;
    while (taken_.exchange(true, std::memory_order_acquire)) {
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return true;
  }

 private:
  std::atomic<bool> taken_{false};
};

class StreamTransport : public Transport {
 public:
  ~StreamTransport() override;

  int num_tasks() const override { return num_tasks_; }
  int task_id() const override { return task_id_; }
  void begin_step(uint64_t step) override;
  void exchange(uint64_t seq, uint64_t digest, const Send* sends, size_t num_sends,
                const Recv* recvs, size_t num_recvs, Clock::time_point deadline,
                const std::function<void()>& check,
                const std::function<std::string(int)>& name) override;
  void peek_votes(uint64_t seq, const std::function<std::string(int)>& name) override;
  bool vote_skipped(int peer) const override;
  void throw_if_ended(int peer, const std::function<std::string(int)>& name) override;
  void interrupt() override;
  bool end_step(const StepOutcome& mine, int64_t timeout_ms, StepOutcome* remote,
                const std::function<std::string(int)>& name) override;
  void fail(const std::string& message) override;
  void leave(const StepOutcome& why) override;

 protected:
  // spin: how long a waiting driver retries its links before wait_ready().
  StreamTransport(int num_tasks, int task_id, std::chrono::microseconds spin);

  // Gives `peer` its link (any thread). A link for a peer whose link works is
  // refused (false; the caller disposes of it); one for a lost link replaces it.
  bool attach_link(int peer, std::unique_ptr<Link> link);
  // Waits up to timeout_ms for every peer to have a link; false with the missing
  // ones ("1, 3") in *missing when some have none.
  bool wait_attached(int64_t timeout_ms, std::string* missing);
  // The peer's link, or nullptr (the driver's thread; a replaced link stays alive
  // until destruction).
  Link* link(int peer) const;
  // Shuts down and destroys every link: the subclass's destructor calls it before
  // what its links use goes away.
  void drop_links();

  // Sleeps until a reader or writer peer's link may be ready, wake() is called, or
  // `until` (the subclass may return earlier, e.g. to recheck a peer's liveness).
  virtual void wait_ready(const std::vector<int>& readers, const std::vector<int>& writers,
                          Clock::time_point until) = 0;
  // Makes a wait_ready() in progress, or the next one, return soon. Any thread.
  virtual void wake() = 0;
  // Forgets the wake()s so far (after the driver has seen the interrupt).
  virtual void clear_wakes() {}
  // One pause of the spin before wait_ready(), `spun` into it: sched_yield, so that
  // the peers this task waits for can run on its CPU.
  virtual void idle(Clock::duration spun);

  // For a subclass's own ways of moving a collective's data beside the streams
  // (ShmTransport's posts), under the same rules:
  // the lock that lets one thread at a time drive the transport;
  DriveLock& drive_mutex() { return drive_mu_; }
  uint64_t current_step() const { return step_; }
  // throws the cluster's failure (TPU_UNAVAILABLE) once any;
  void throw_if_failed() const {
    if (has_failed_.load(std::memory_order_acquire)) throw_failed();
  }
  // after an interrupt(), throws the cluster's failure or what check() throws;
  void poll_interrupts(const std::function<void()>& check);
  // names the collective in progress (what probe() and missed_deadline() speak of);
  void enter_collective(uint64_t seq, uint64_t digest) {
    seq_ = seq;
    digest_ = digest;
  }
  // reads what `peer` sent while this task expects nothing from it, and throws what
  // that means: a frame of another collective (TPU_INVALID_ARGUMENT), the end of the
  // peer's step (TPU_FAILED_PRECONDITION, or TPU_ABORTED with its failure), a lost or
  // failed link (TPU_UNAVAILABLE). Returns while nothing (or only part of a frame's
  // header) has come.
  void probe(int peer, const std::function<std::string(int)>& name);
  // throws TPU_DEADLINE_EXCEEDED for the collective, naming the peers it still waits
  // for data from (owing) and to take data (stuck).
  [[noreturn]] void missed_deadline(const std::vector<int>& owing, const std::vector<int>& stuck,
                                    const std::function<std::string(int)>& name) const;

  const int num_tasks_;
  const int task_id_;

 private:
  struct Peer;
  enum class Progress { kBlocked, kAdvanced, kDone };

  Progress pump_send(Peer& p);
  // ending: during end_step(); probing: nothing is expected (see probe()).
  Progress pump_recv(Peer& p, const std::function<std::string(int)>& name, bool ending,
                     bool probing = false);
  void start_frame(Peer& p, const FrameHeader& h, const void* data);
  // A step's control frame (END, farewell): `tag` and `payload`, which must outlive it.
  void start_control_frame(Peer& p, uint32_t tag, const std::string& payload);
  void lose(Peer& p, const std::string& why);
  // Throws why `p`'s link is unusable: what the peer said last (an END with a failure,
  // or its farewell), read from what it sent before the link went, else the link's loss.
  [[noreturn]] void throw_gone(Peer& p, const std::function<std::string(int)>& name);
  // Throws what the peer's END (read outside end_step) or farewell means here.
  [[noreturn]] void throw_peer_ended(Peer& p, const std::function<std::string(int)>& name);
  // Sends a farewell carrying `why` to every peer whose link works, after what is in
  // flight (padded), for up to timeout_ms; no reply awaited. The driver's thread.
  void send_farewells(const StepOutcome& why, int64_t timeout_ms);
  void drain_interrupts();
  [[noreturn]] void throw_failed() const;

  const std::chrono::microseconds spin_;
  std::unique_ptr<Peer[]> peers_;
  mutable std::mutex mu_;  // guards Peer::link changes by attach_link(), Peer::lost and failed_
  DriveLock drive_mu_;     // one driver at a time: exchange() or end_step()
  std::condition_variable attached_;
  std::string failed_;     // the cluster's failure, once any
  std::atomic<bool> has_failed_{false};
  std::vector<std::unique_ptr<Link>> links_;  // every link attached, under mu_
  std::unique_ptr<char[]> sink_;  // where discarded payload goes
  std::string farewell_;          // the farewell's payload: frames in flight point into it
  std::atomic<bool> interrupted_{false};
  uint64_t step_ = 0;
  uint64_t seq_ = 0;
  uint64_t digest_ = 0;
};

}  // namespace net
}  // namespace tpurt
