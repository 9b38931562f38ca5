// The shared-memory data plane between tasks on one host: the stream protocol of
// net/stream_transport.h over one single-producer/single-consumer ring per ordered
// pair of tasks (net/shm_segment.h). A frame's header and payload are copied
// straight into the ring and straight out of it into the destination; no syscall
// is made while both sides are busy. A waiting task spins briefly, then sleeps on
// the doorbell word of its own segment (a futex, at most kLivenessMs at a time, so
// that its deadline and its peers' liveness are rechecked); a task that makes
// progress on a ring rings the peer's doorbell if the peer sleeps for that progress
// (room, or this ring's bytes: flags in the ring's control words; a task awaiting
// several rings flags one at a time) or the ring is a quarter full.
//
// Liveness: a peer whose process has exited (pidfd, or /proc/<pid>/stat with its
// start time) loses its link with TPU_UNAVAILABLE naming it; a peer that shut down
// cleanly marks its segment closed ("closed by the peer"); a stopped peer is caught
// by the collective deadline. A corrupt ring index loses the link, never crashes.
//
// Peers on other hosts may be joined by sockets instead (attach_socket): one transport
// then serves a cluster spread over hosts, rings to the local tasks and TCP (the same
// frames; a TcpTransport is a valid peer) to the others. A wait that involves both
// kinds sleeps in poll() on the sockets and rechecks the rings every kMixedPollMs.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "net/posted_gather.h"
#include "net/shared_windows.h"
#include "net/shm_segment.h"
#include "net/stream_transport.h"

namespace tpurt {
namespace net {

class ShmLink;

class ShmTransport : public StreamTransport, public SharedWindows, public PostedGather {
 public:
  // Creates this task's segment: an anonymous memfd (memfd_create, MFD_CLOEXEC) holding
  // the rings in which every peer writes to this task, plus a header with liveness words.
  // Throws tpurt::Error TPU_RESOURCE_EXHAUSTED naming what failed (TPU_INVALID_ARGUMENT
  // for bad arguments or a bad TPURT_SHM_RING_BYTES).
  ShmTransport(int num_tasks, int task_id);
  ~ShmTransport() override;
  // What a peer needs to map this task's segment: "<pid>:<fd>:<bytes>:<nonce>".
  std::string locator() const;
  // Maps peer's segment (opening /proc/<pid>/fd/<fd>); checks size, magic, the task ids and
  // nonce in its header. Malformed or foreign locator: TPU_INVALID_ARGUMENT naming the
  // peer and the value; a segment that cannot be opened: TPU_UNAVAILABLE naming the peer.
  // Any thread; a peer attaches once.
  void attach(int peer, const std::string& locator);
  // Joins `peer` (on another host) by a connected socket instead; the transport owns the
  // socket from now on. Any thread. TPU_INVALID_ARGUMENT for a peer out of range or
  // attached already (the socket is closed).
  void attach_socket(int peer, int fd);
  // Called once every peer has attached: closes this task's memfd, so the memory lives
  // only as long as the mappings and nothing is left behind by any exit, kill -9
  // included. TPU_FAILED_PRECONDITION naming the peers not attached yet.
  void seal();

  // True while every peer is reached through shared memory.
  bool fans_out_cheaply() const override { return socket_peers_.load(std::memory_order_relaxed) == 0; }

  // The ring size in use (TPURT_SHM_RING_BYTES or the default).
  uint64_t ring_bytes() const { return ring_bytes_; }

  // SharedWindows: the staging window at the end of each task's segment.
  size_t window_bytes() const override { return shm::kWindowBytes; }
  char* window(int task) override;

  // PostedGather: two post slots in each task's segment, used in turn. Each post is
  // stamped with the step and its number among the step's posts; a peer's slot
  // holding another stamp of this step than the one awaited or the one before (a
  // peer posting ahead: groups that differ) is TPU_INVALID_ARGUMENT, and a post is
  // checked again after it is copied, so a torn copy is never used.
  bool posts_reach_all() const override { return fans_out_cheaply(); }
  size_t post_bytes() const override { return shm::kPostBytes; }
  void gather_posts(uint64_t seq, uint64_t digest, const void* mine, size_t bytes, const Recv* from,
                    size_t num_from, Clock::time_point deadline, const std::function<void()>& check,
                    const std::function<std::string(int)>& name) override;
  void begin_step(uint64_t step) override;

 protected:
  void wait_ready(const std::vector<int>& readers, const std::vector<int>& writers,
                  Clock::time_point until) override;
  void wake() override;
  void clear_wakes() override;
  // Pauses the CPU for the first kHotSpin of a spin while every task can have a CPU of
  // its own, else (or after that, when another process may have the peer's CPU) yields it.
  void idle(Clock::duration spun) override;

 private:
  // Waits until ready(peer) holds for every peer in *pending (emptied as they do), or
  // throws: the deadline (missed_deadline naming the pending peers as owing data, or
  // for Owed::kRead as not taking it), what a peer's
  // stream says (probe), an interrupt. ready may throw.
  // prefetch(peer) fetches what ready(peer) will read.
  // Sleeps on this task's doorbell for at most `longest`, unless ready() or a wake()
  // says there is something to do.
  template <typename Ready>
  void doze(Ready&& ready, Clock::duration longest);
  // What the peers awaited owe: their post, or their reading of this task's.
  enum class Owed { kPost, kRead };
  template <typename Ready, typename Prefetch>
  void await_peers(std::vector<int>* pending, Owed owed, Ready&& ready, Prefetch&& prefetch,
                   Clock::time_point deadline,
                   const std::function<void()>& check, const std::function<std::string(int)>& name);
  shm::PostArea* peer_posts(int peer, const std::function<std::string(int)>& name);

  const uint64_t ring_bytes_;
  shm::Mapping own_;
  int fd_ = -1;  // the memfd until seal()
  int wake_fd_ = -1;  // eventfd: wakes a poll() on sockets
  std::string locator_;
  std::vector<shm::Mapping> peer_maps_;  // by peer; under attach_mu_
  std::vector<std::atomic<char*>> windows_;  // by task: set once mapped, read by window()
  std::mutex attach_mu_;
  std::atomic<int> socket_peers_{0};  // peers attached by socket
  bool spin_hot_ = false;  // every task can have a CPU (see the constructor)
  // wait_ready()'s lists, kept to spare allocations.
  std::vector<ShmLink*> shm_readers_, shm_writers_;
  std::vector<pollfd> sockets_;
  std::atomic<bool> wake_pending_{false};
  Clock::time_point last_liveness_check_{};
  // Posts: how many this step, each slot's last stamp and the peers that read it.
  uint64_t posts_in_step_ = 0;
  uint64_t slot_stamp_[2] = {0, 0};
  std::vector<int> slot_readers_[2];
  std::vector<int> pending_;
  std::vector<int> from_index_;  // by peer: its position in gather_posts()'s list
  std::vector<uint64_t> from_mark_;  // by peer: the last gather that listed it
  std::vector<shm::PostArea*> posts_of_;  // by peer: its posts, once a gather listed it
  uint64_t gathers_ = 0;
  std::vector<uint64_t> read_post_;  // by peer: the number of its last post read this step
};

}  // namespace net
}  // namespace tpurt
