#include "net/shm_transport.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/cpus.h"
#include "core/status.h"
#include "net/tcp_transport.h"

namespace tpurt {
namespace net {
namespace {

// How long a waiting driver retries its rings (pausing or yielding between tries, see
// idle()) before it sleeps: long enough to catch a peer's reply in a ping-pong, short
// enough that 8 processes sharing 2 cores do not burn each other's turns.
constexpr auto kSpin = std::chrono::microseconds(20);
// The longest futex sleep: the deadline and the peers' liveness are rechecked this often.
constexpr auto kLiveness = std::chrono::milliseconds(10);
// The longest poll() on sockets while rings are awaited too: rings cannot wake a poll().
constexpr auto kMixedPoll = std::chrono::milliseconds(1);
// The longest sleep of a wait for peers to read this task's post (see gather_posts).
constexpr auto kReadNap = std::chrono::milliseconds(1);
// Rounds of a posted gather's wait that only look again, with neither a pause nor
// the clock, when tasks fit the CPUs: a running peer's post comes within a few, and
// a pause (tens to a hundred cycles) would delay seeing it (2 tasks: 0.146 against
// 0.156 us). Afterwards the spin pauses between looks.
constexpr unsigned kHotRounds = 64;
// Idle rounds of a wait between readings of the clock (the deadline and the spin's
// length): a reading costs about as much as a look at every peer.
constexpr unsigned kRoundsPerClock = 8;
// How long a spin pauses rather than yields when tasks fit the CPUs: a peer that is
// running replies within this; one that does not may wait for this task's CPU.
constexpr auto kHotSpin = std::chrono::microseconds(3);
// A ring's counters are published after at most this many bytes copied (or a quarter
// of the ring), so that writer and reader copy at the same time.
constexpr uint64_t kGrainBytes = 64 * 1024;

// A post's stamp: the step (modulo 2^32) and the post's number in it plus one, so
// that 0 is no post and a later post of a step has a larger stamp.
constexpr uint64_t kMaxPostsPerStep = 0xfffffffeu;
uint64_t post_stamp(uint64_t step, uint64_t k) { return (step << 32) | (k + 1); }
uint64_t stamp_step(uint64_t stamp) { return stamp >> 32; }
uint64_t stamp_post(uint64_t stamp) { return (stamp & 0xffffffffu) - 1; }  // when nonzero

// A post's bytes: the usual few without a call to memcpy.
inline void copy_post(void* to, const void* from, size_t bytes) {
  if (bytes == 8) {
    uint64_t v;
    __builtin_memcpy(&v, from, 8);
    __builtin_memcpy(to, &v, 8);
  } else if (bytes) {
    std::memcpy(to, from, bytes);
  }
}

// num_tasks, once it and task_id are known to be valid.
int checked_tasks(int num_tasks, int task_id) {
  if (num_tasks < 1 || num_tasks > shm::kMaxTasks)
    invalid_argument("a shared-memory transport for ", num_tasks, " tasks (1 to ", shm::kMaxTasks,
                     ")");
  if (task_id < 0 || task_id >= num_tasks)
    invalid_argument("task ", task_id, " is not one of the cluster's ", num_tasks, " tasks");
  return num_tasks;
}

// The staging window of a mapped segment, whose size was checked against its ring size.
char* window_in(const shm::Mapping& m) {
  return reinterpret_cast<char*>(m.base + (m.bytes - shm::kWindowBytes));
}

}  // namespace

// The pair of rings joining this task and one peer: `in` in this task's segment
// (the peer writes), `out` in the peer's (this task writes). Each side keeps its own
// counter privately and only publishes it; the peer's counter is bounded before use.
class ShmLink : public Link {
 public:
  struct Ring {
    shm::RingControl* control;
    unsigned char* data;
    uint64_t capacity;  // a power of two
  };

  ShmLink(Ring in, Ring out, shm::SegmentHeader* peer, pid_t pid, uint64_t start_time, int pidfd)
      : in_(in), out_(out), peer_(peer), pid_(pid), start_time_(start_time), pidfd_(pidfd) {}
  ~ShmLink() override {
    if (pidfd_ >= 0) ::close(pidfd_);
  }

  int64_t send(const iovec* iov, int n, std::string* error) override {
    if (dead_) return fail(error, dead_why_);
    if (closed_by_peer()) return fail(error, "closed by the peer");
    uint64_t want = 0;
    for (int i = 0; i < n; ++i) want += iov[i].iov_len;
    // The reader's tail is read again only when the last one seen leaves too little
    // room: its cache line then stays with the reader.
    if (out_.capacity - (out_head_ - out_tail_seen_) < want) {
      const uint64_t tail = shm::load(&out_.control->tail);
      if (out_head_ - tail > out_.capacity)
        return fail(error, str_cat("corrupt ring to the peer (", out_head_ - tail,
                                   " bytes in use of ", out_.capacity, ")"));
      out_tail_seen_ = tail;
    }
    uint64_t room = out_.capacity - (out_head_ - out_tail_seen_), taken = 0;
    int i = 0;
    uint64_t off = 0;  // in iov[i]
    while (room > 0 && i < n) {
      // Published piece by piece, so that the reader copies while this side does.
      const uint64_t piece = std::min(room, grain(out_));
      uint64_t done = 0;
      while (done < piece && i < n) {
        const uint64_t k = std::min<uint64_t>(piece - done, iov[i].iov_len - off);
        copy_in(out_head_ + done, static_cast<const unsigned char*>(iov[i].iov_base) + off, k);
        done += k;
        off += k;
        if (off == iov[i].iov_len) ++i, off = 0;
      }
      if (done == 0) break;
      out_head_ += done;
      taken += done;
      room -= done;
      shm::store(&out_.control->head, out_head_);
      if (__atomic_load_n(&out_.control->reader_waits, __ATOMIC_SEQ_CST) != 0 ||
          out_head_ - out_tail_seen_ >= out_.capacity / 4)
        shm::ring_doorbell(peer_);
    }
    return static_cast<int64_t>(taken);
  }

  int64_t recv(void* dest, size_t bytes, std::string* error) override {
    // The line the next bytes will be in is fetched while the head is: a reply then
    // costs one cache miss after another no longer (measured: 0.49 -> 0.39 us ping-pong).
    __builtin_prefetch(in_.data + (in_tail_ & (in_.capacity - 1)));
    const uint64_t avail = shm::load(&in_.control->head) - in_tail_;
    if (avail > in_.capacity)
      return fail(error, str_cat("corrupt ring from the peer (", avail, " bytes pending in a ",
                                 in_.capacity, "-byte ring)"));
    if (avail == 0) {  // what the peer wrote before it went is still read
      if (closed_by_peer()) return kClosed;
      if (dead_) return fail(error, dead_why_);
      return 0;
    }
    const uint64_t k = std::min<uint64_t>(avail, bytes);
    const uint64_t end = in_tail_ + avail;
    unsigned char* to = static_cast<unsigned char*>(dest);
    for (uint64_t done = 0; done < k;) {
      const uint64_t piece = std::min(k - done, grain(in_));
      const uint64_t at = in_tail_ & (in_.capacity - 1);
      const uint64_t first = std::min(piece, in_.capacity - at);
      std::memcpy(to + done, in_.data + at, first);
      std::memcpy(to + done + first, in_.data, piece - first);
      done += piece;
      in_tail_ += piece;
      // Published once the ring is drained or a piece is read: a frame's header and
      // payload, read apart, cost one store the writer sees. What stays unpublished is
      // less than what is still to be read, so the writer never waits on it alone.
      if (in_tail_ == end || in_tail_ - in_published_ >= grain(in_)) {
        in_published_ = in_tail_;
        shm::store(&in_.control->tail, in_tail_);
        // The writer is woken only if it sleeps for room (see wait_for_room): woken
        // whenever it sleeps, a task waiting for the other peers' frames of a barrier
        // woke once for every peer that read its own.
        if (__atomic_load_n(&in_.control->writer_waits, __ATOMIC_SEQ_CST) != 0) shm::ring_doorbell(peer_);
      }
    }
    return static_cast<int64_t>(k);
  }

  void shutdown() override {
    shm::store(&in_.control->closed, 1u);
    shm::store(&out_.control->closed, 1u);
    shm::ring_doorbell(peer_);
  }

  // Whether recv() has something to say (bytes, the end, an error).
  bool readable() const {
    return shm::load(&in_.control->head) != in_tail_ || closed_by_peer() || dead_;
  }
  // Says whether this side may sleep for room in the ring to the peer: set before it
  // announces sleeping and looks at writable() (sequentially consistent, as the
  // reader's store of its tail and its load of this word).
  void wait_for_room(bool waits) { shm::store(&out_.control->writer_waits, waits ? 1u : 0u); }
  // Likewise for the bytes of the ring from the peer (see RingControl::reader_waits).
  void wait_for_bytes(bool waits) { shm::store(&in_.control->reader_waits, waits ? 1u : 0u); }
  // Whether send() has something to say (room, an error).
  bool writable() const {
    return out_head_ - shm::load(&out_.control->tail) != out_.capacity || closed_by_peer() || dead_;
  }

  // Notes whether the peer's process has exited; from then on the link fails.
  void check_alive() {
    if (dead_) return;
    bool gone;
    if (pidfd_ >= 0) {
      pollfd p{pidfd_, POLLIN, 0};
      gone = ::poll(&p, 1, 0) > 0;  // a pidfd is readable once its process has exited
    } else {
      uint64_t started = 0;
      bool zombie = false;
      gone = !shm::process_start_time(pid_, &started, &zombie) || zombie || started != start_time_;
    }
    if (!gone) return;
    dead_why_ = str_cat("the peer's process (pid ", pid_, ") has exited");
    dead_ = true;
  }

 private:
  int64_t fail(std::string* error, const std::string& why) {
    *error = why;
    return kError;
  }
  static uint64_t grain(const Ring& r) { return std::min(r.capacity / 4, kGrainBytes); }
  bool closed_by_peer() const {
    return shm::load(&in_.control->closed) != 0 || shm::load(&out_.control->closed) != 0 ||
           shm::load(&peer_->closed) != 0;
  }
  void copy_in(uint64_t pos, const unsigned char* src, uint64_t k) {
    const uint64_t at = pos & (out_.capacity - 1);
    const uint64_t first = std::min(k, out_.capacity - at);
    std::memcpy(out_.data + at, src, first);
    std::memcpy(out_.data, src + first, k - first);
  }

  const Ring in_, out_;
  shm::SegmentHeader* const peer_;
  const pid_t pid_;
  const uint64_t start_time_;
  const int pidfd_;  // -1 without pidfd_open: /proc/<pid>/stat is read instead
  uint64_t in_tail_ = 0;   // this task's counters (the driver's thread only)
  uint64_t in_published_ = 0;  // the tail the writer was last shown
  uint64_t out_head_ = 0;
  uint64_t out_tail_seen_ = 0;  // the reader's tail when last read
  bool dead_ = false;      // the driver's thread only, like dead_why_
  std::string dead_why_;
};

ShmTransport::ShmTransport(int num_tasks, int task_id)
    : StreamTransport(checked_tasks(num_tasks, task_id), task_id, kSpin),
      ring_bytes_(shm::ring_bytes_from_env(num_tasks)) {
  own_ = shm::create_segment(num_tasks, task_id, ring_bytes_, &fd_);
  locator_ = shm::format_locator(own_, fd_);
  peer_maps_.resize(num_tasks);
  windows_ = std::vector<std::atomic<char*>>(num_tasks);
  windows_[task_id].store(window_in(own_), std::memory_order_release);
  from_index_.assign(num_tasks, -1);
  from_mark_.assign(num_tasks, 0);
  posts_of_.assign(num_tasks, nullptr);
  read_post_.assign(num_tasks, UINT64_MAX);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    const int err = errno;
    shm::unmap(&own_);
    ::close(fd_);
    tpurt::fail(TPU_RESOURCE_EXHAUSTED, "eventfd: ", std::strerror(err));
  }
  cpu_set_t cpus;
  // Spinning pays while every task can have a CPU: free to run on as many CPUs as
  // there are tasks, or bound to CPUs of its own (tpurt launch --bind spread) with the
  // tasks no more than the machine's CPUs.
  const int usable = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  spin_hot_ = num_tasks <= usable || (usable < online_cpus() && num_tasks <= online_cpus());
}

ShmTransport::~ShmTransport() {
  // Peers see "closed by the peer" from now on, and a sleeping one wakes to see it.
  shm::store(&own_.header()->closed, 1u);
  drop_links();
  for (auto& m : peer_maps_) {
    if (m.base != nullptr) shm::ring_doorbell(m.header());
    shm::unmap(&m);
  }
  shm::unmap(&own_);
  if (fd_ >= 0) ::close(fd_);
  ::close(wake_fd_);
}

char* ShmTransport::window(int task) {
  if (task < 0 || task >= num_tasks_) return nullptr;
  return windows_[task].load(std::memory_order_acquire);
}

std::string ShmTransport::locator() const { return locator_; }

void ShmTransport::attach(int peer, const std::string& locator) {
  if (peer < 0 || peer >= num_tasks_ || peer == task_id_)
    invalid_argument("task ", task_id_, " cannot attach task ", peer, ": not a peer in a cluster of ",
                     num_tasks_, " tasks");
  std::lock_guard<std::mutex> lock(attach_mu_);
  if (link(peer) != nullptr) invalid_argument("task ", peer, " is attached already");
  pid_t pid = 0;
  uint64_t start_time = 0;
  shm::Mapping m = shm::map_peer_segment(num_tasks_, peer, locator, &pid, &start_time);
  // A pidfd pins the process: checked against the start time once it is open.
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0 && errno == ESRCH) {
    shm::unmap(&m);
    tpurt::fail(TPU_UNAVAILABLE, "task ", peer, "'s process (pid ", pid, ") is gone");
  }
  if (pidfd >= 0) {
    uint64_t started = 0;
    bool zombie = false;
    if (!shm::process_start_time(pid, &started, &zombie) || zombie || started != start_time) {
      ::close(pidfd);
      shm::unmap(&m);
      tpurt::fail(TPU_UNAVAILABLE, "task ", peer, "'s process (pid ", pid, ") is gone");
    }
  }
  // The peer's ring size follows from its segment's size, which is checked and ours.
  const uint64_t peer_ring = (m.bytes - shm::kWindowBytes - shm::data_offset(num_tasks_)) / num_tasks_;
  ShmLink::Ring in{own_.control(peer), own_.base + shm::ring_offset(num_tasks_, ring_bytes_, peer),
                   ring_bytes_};
  ShmLink::Ring out{m.control(task_id_),
                    m.base + shm::ring_offset(num_tasks_, peer_ring, task_id_), peer_ring};
  peer_maps_[peer] = m;
  windows_[peer].store(window_in(m), std::memory_order_release);
  attach_link(peer, std::unique_ptr<Link>(new ShmLink(in, out, m.header(), pid, start_time, pidfd)));
}

void ShmTransport::attach_socket(int peer, int fd) {
  std::unique_ptr<Link> socket(new SocketLink(fd));  // closes fd if refused
  if (peer < 0 || peer >= num_tasks_ || peer == task_id_)
    invalid_argument("task ", task_id_, " cannot attach task ", peer, ": not a peer in a cluster of ",
                     num_tasks_, " tasks");
  std::lock_guard<std::mutex> lock(attach_mu_);
  if (link(peer) != nullptr) invalid_argument("task ", peer, " is attached already");
  socket_peers_.fetch_add(1, std::memory_order_relaxed);
  attach_link(peer, std::move(socket));
}

void ShmTransport::seal() {
  std::string missing;
  if (!wait_attached(0, &missing))
    tpurt::fail(TPU_FAILED_PRECONDITION, "task ", task_id_,
                "'s shared-memory segment cannot be sealed before task(s) ", missing, " attach");
  std::lock_guard<std::mutex> lock(attach_mu_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void ShmTransport::wake() {
  wake_pending_.store(true, std::memory_order_seq_cst);
  shm::ring_doorbell(own_.header());
  uint64_t one = 1;
  ssize_t ignored = ::write(wake_fd_, &one, sizeof one);
  (void)ignored;
}

void ShmTransport::clear_wakes() {
  wake_pending_.store(false, std::memory_order_seq_cst);
  uint64_t value;
  while (::read(wake_fd_, &value, sizeof value) > 0) {
  }
}

void ShmTransport::idle(Clock::duration spun) {
  if (!spin_hot_ || spun > kHotSpin) {
    sched_yield();
    return;
  }
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

void ShmTransport::begin_step(uint64_t step) {
  StreamTransport::begin_step(step);
  // Every peer that read a post of the last step has ended it, so both slots are free.
  posts_in_step_ = 0;
  std::fill(read_post_.begin(), read_post_.end(), UINT64_MAX);
}

shm::PostArea* ShmTransport::peer_posts(int peer, const std::function<std::string(int)>& name) {
  if (peer < 0 || peer >= num_tasks_ || peer == task_id_)
    tpurt::fail(TPU_INTERNAL, "a posted gather names task ", peer, " of ", num_tasks_);
  // The mapping is set before the link is published (attach).
  if (link(peer) == nullptr || peer_maps_[peer].base == nullptr)
    tpurt::fail(TPU_UNAVAILABLE, name(peer), ": no shared memory with this task");
  return peer_maps_[peer].posts(num_tasks_);
}

template <typename Ready>
void ShmTransport::doze(Ready&& ready, Clock::duration longest) {
  // Sleeping is announced before ready() looks (see shm::ring_doorbell): a peer's
  // progress after that bumps the bell, and the futex wait returns at once.
  shm::SegmentHeader* h = own_.header();
  shm::store(&h->sleeping, 1u);
  const uint32_t seen = __atomic_load_n(&h->bell, __ATOMIC_SEQ_CST);
  if (!wake_pending_.load(std::memory_order_seq_cst) && !ready())
    shm::futex_wait(&h->bell, seen, std::chrono::duration_cast<std::chrono::nanoseconds>(longest).count());
  shm::store(&h->sleeping, 0u);
}

template <typename Ready, typename Prefetch>
void ShmTransport::await_peers(std::vector<int>* pending, Owed owed, Ready&& ready, Prefetch&& prefetch,
                               Clock::time_point deadline,
                               const std::function<void()>& check,
                               const std::function<std::string(int)>& name) {
  Clock::time_point spin_start{};
  Clock::duration spun{};  // when the clock was last read
  bool spinning = false;
  unsigned hot = 0;          // rounds since the last progress, before the clock is read
  unsigned unclocked = 0;    // idle rounds since the clock was last read
  for (unsigned round = 0;; ++round) {
    poll_interrupts(check);
    bool advanced = false;
    // The peers' lines are fetched together: their misses overlap.
    for (int peer : *pending) prefetch(peer);
    for (size_t i = 0; i < pending->size();) {
      const int peer = (*pending)[i];
      bool done = ready(peer);
      // A peer that sends rather than posts is elsewhere: its frame says where. Looked
      // at every few rounds: it is an error's path, and the ring's words are on other
      // pages than the post. A peer posts before it sends its next frame, so one whose
      // frame is there is looked at again first: it may have posted since.
      if (!done && (round & 7) == 7 && static_cast<ShmLink*>(link(peer))->readable()) {
        done = ready(peer);
        if (!done) probe(peer, name);
      }
      if (!done) {
        ++i;
        continue;
      }
      (*pending)[i] = pending->back();
      pending->pop_back();
      advanced = true;
    }
    if (pending->empty()) return;
    if (advanced) {
      spinning = false;
      hot = 0;
      spun = Clock::duration::zero();
      continue;
    }
    if (spin_hot_ && hot < kHotRounds) {
      ++hot;
      continue;
    }
    // Then the clock is read every few idle rounds: a task that yields at once (more
    // tasks than CPUs) reads it on one turn in kRoundsPerClock, not on every one.
    if (++unclocked < kRoundsPerClock) {
      idle(spun);
      continue;
    }
    unclocked = 0;
    const auto now = Clock::now();
    if (!spinning) {
      spinning = true;
      spin_start = now;
    }
    if (now >= deadline) {
      if (owed == Owed::kPost) missed_deadline(*pending, {}, name);
      missed_deadline({}, *pending, name);
    }
    spun = now - spin_start;
    if (spun < kSpin) {
      idle(spun);
      continue;
    }
    // Peers ring the doorbell when they post and when they have read, and when they
    // send a frame (they are elsewhere: probe() says where).
    for (int peer : *pending) static_cast<ShmLink*>(link(peer))->wait_for_bytes(true);
    doze([&] {
      for (int peer : *pending)
        if (ready(peer) || static_cast<ShmLink*>(link(peer))->readable()) return true;
      return false;
    }, std::min<Clock::duration>(deadline - now, owed == Owed::kRead ? kReadNap : kLiveness));
    for (int peer : *pending) static_cast<ShmLink*>(link(peer))->wait_for_bytes(false);
    const auto after = Clock::now();
    if (after - last_liveness_check_ >= kLiveness) {
      last_liveness_check_ = after;
      for (int peer : *pending) static_cast<ShmLink*>(link(peer))->check_alive();
    }
  }
}

void ShmTransport::gather_posts(uint64_t seq, uint64_t digest, const void* mine, size_t bytes,
                                const Recv* from, size_t num_from, Clock::time_point deadline,
                                const std::function<void()>& check,
                                const std::function<std::string(int)>& name) {
  std::lock_guard<DriveLock> driving(drive_mutex());
  throw_if_failed();
  enter_collective(seq, digest);
  if (bytes > shm::kPostBytes)
    tpurt::fail(TPU_INTERNAL, "a post of ", bytes, " bytes (at most ", shm::kPostBytes, ")");
  ++gathers_;
  for (size_t i = 0; i < num_from; ++i) {
    posts_of_[from[i].peer] = peer_posts(from[i].peer, name);
    throw_if_ended(from[i].peer, name);  // its END came in an earlier exchange of the step
    if (from_mark_[from[i].peer] == gathers_)
      tpurt::fail(TPU_INTERNAL, "a posted gather names task ", from[i].peer, " twice");
    from_mark_[from[i].peer] = gathers_;
    if (from[i].bytes > shm::kPostBytes)
      tpurt::fail(TPU_INTERNAL, "a post of ", from[i].bytes, " bytes expected (at most ",
                  shm::kPostBytes, ")");
  }
  const uint64_t step = current_step(), k = posts_in_step_;
  if (k >= kMaxPostsPerStep)
    tpurt::fail(TPU_RESOURCE_EXHAUSTED, "more than ", kMaxPostsPerStep,
                " small collectives over shared memory in one step");
  const uint64_t stamp = post_stamp(step, k);
  const int parity = static_cast<int>(k & 1);
  shm::PostArea* own = own_.posts(num_tasks_);
  shm::PostSlot& slot = own->slot[parity];

  // The slot is written again once every peer that read its last post (two posts
  // ago) has read it: its `consumed` holds that stamp or a later one of this step. A
  // peer whose post before this one this task has read had: it posts after it reads.
  if (k >= 2) {
    const uint64_t previous = slot_stamp_[parity];
    pending_.clear();
    for (int peer : slot_readers_[parity])
      if (read_post_[peer] != k - 1) pending_.push_back(peer);
    await_peers(&pending_, Owed::kRead, [&](int peer) {
      const uint64_t c = shm::load(&posts_of_[peer]->consumed);
      return stamp_step(c) == stamp_step(previous) && (c & 0xffffffffu) != 0 &&
             stamp_post(c) >= stamp_post(previous);
    }, [&](int peer) { __builtin_prefetch(&posts_of_[peer]->consumed); }, deadline, check, name);
  }
  // As a seqlock: no stamp while the fields change, so a reader that copied them
  // meanwhile sees its check after the copy fail.
  __atomic_store_n(&slot.stamp, uint64_t{0}, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  slot.seq = seq;
  slot.digest = digest;
  slot.bytes = bytes;
  copy_post(slot.data, mine, bytes);
  shm::store(&slot.stamp, stamp);
  posts_in_step_ = k + 1;
  slot_stamp_[parity] = stamp;
  std::vector<int>& readers = slot_readers_[parity];
  readers.clear();
  for (size_t i = 0; i < num_from; ++i) {
    readers.push_back(from[i].peer);
    shm::ring_doorbell(peer_maps_[from[i].peer].header());
  }

  // Every peer's post of this collective, copied out and checked again after the copy.
  pending_.clear();
  for (size_t i = 0; i < num_from; ++i) {
    pending_.push_back(from[i].peer);
    from_index_[from[i].peer] = static_cast<int>(i);
  }
  await_peers(&pending_, Owed::kPost, [&](int peer) {
    const shm::PostSlot& post = posts_of_[peer]->slot[parity];
    const uint64_t its = shm::load(&post.stamp);
    if (its != stamp) {
      // Not yet: the slot's post two before, or one of an earlier step.
      if (stamp_step(its) != stamp_step(stamp) || (its & 0xffffffffu) == 0 || stamp_post(its) < k)
        return false;
      tpurt::fail(TPU_INVALID_ARGUMENT, name(peer), " posted the step's small collective #",
                  stamp_post(its), " while this task is in #", k,
                  " (collective #", seq, "): the tasks' replicas called different collectives, or "
                  "with different groups");
    }
    const Recv& r = from[from_index_[peer]];
    const uint64_t its_seq = post.seq, its_digest = post.digest, its_bytes = post.bytes;
    if (its_seq != seq || its_digest != digest) {
      const std::string why =
          str_cat(name(peer), " is in collective #", its_seq, " of the step (descriptor digest ",
                  std::hex, its_digest, std::dec, ") while this task is in collective #", seq,
                  " (digest ", std::hex, digest, std::dec,
                  "): the tasks' replicas called different collectives, or with "
                  "different dtypes, shapes, operations or groups");
      if (its_seq == seq) throw PeerDisagrees(TPU_INVALID_ARGUMENT, why);
      tpurt::fail(TPU_INVALID_ARGUMENT, why);
    }
    if (its_bytes != r.bytes)
      tpurt::fail(TPU_INVALID_ARGUMENT, name(peer), " posted ", its_bytes, " bytes for collective #",
                  seq, " where this task expects ", r.bytes);
    copy_post(r.data, post.data, r.bytes);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (shm::load(&post.stamp) != stamp)
      tpurt::fail(TPU_INVALID_ARGUMENT, name(peer), " overwrote its post of collective #", seq,
                  " before this task had read it: the tasks' replicas called different "
                  "collectives, or with different groups");
    read_post_[peer] = k;
    return true;
  }, [&](int peer) { __builtin_prefetch(&posts_of_[peer]->slot[parity]); }, deadline, check, name);
  // Read: the peers may write their slots again (they wait for this, see above).
  // A release store, not a fence: the doorbells below may then miss a peer falling
  // asleep this instant, which is why a wait for reads sleeps kReadNap at most.
  __atomic_store_n(&own->consumed, stamp, __ATOMIC_RELEASE);
  for (size_t i = 0; i < num_from; ++i) shm::ring_doorbell(peer_maps_[from[i].peer].header());
}

void ShmTransport::wait_ready(const std::vector<int>& readers, const std::vector<int>& writers,
                              Clock::time_point until) {
  // The rings awaited, and the sockets (peers on other hosts).
  shm_readers_.clear();
  shm_writers_.clear();
  sockets_.clear();
  for (int i : readers) {
    Link* l = link(i);
    if (auto* s = dynamic_cast<SocketLink*>(l)) sockets_.push_back({s->fd(), POLLIN, 0});
    else shm_readers_.push_back(static_cast<ShmLink*>(l));
  }
  for (int i : writers) {
    Link* l = link(i);
    if (auto* s = dynamic_cast<SocketLink*>(l)) sockets_.push_back({s->fd(), POLLOUT, 0});
    else shm_writers_.push_back(static_cast<ShmLink*>(l));
  }
  auto rings_ready = [&] {
    for (ShmLink* l : shm_readers_)
      if (l->readable()) return true;
    for (ShmLink* l : shm_writers_)
      if (l->writable()) return true;
    return false;
  };
  auto left = std::min<Clock::duration>(until - Clock::now(), kLiveness);
  if (wake_pending_.load(std::memory_order_seq_cst)) {
    sched_yield();  // end_step() does not clear wakes: it must not spin on one
  } else if (sockets_.empty()) {
    // One ring awaited at a time: the first without bytes (the others' writers ring
    // only under pressure); woken by it, this task looks at them all again.
    ShmLink* awaited = nullptr;
    for (ShmLink* l : shm_readers_)
      if (!l->readable()) {
        awaited = l;
        break;
      }
    if (awaited != nullptr) awaited->wait_for_bytes(true);
    for (ShmLink* l : shm_writers_) l->wait_for_room(true);
    doze(rings_ready, left);
    for (ShmLink* l : shm_writers_) l->wait_for_room(false);
    if (awaited != nullptr) awaited->wait_for_bytes(false);
  } else if (!rings_ready()) {
    // Rings cannot wake a poll(): it sleeps kMixedPoll at most while rings are awaited.
    if (!shm_readers_.empty() || !shm_writers_.empty()) left = std::min<Clock::duration>(left, kMixedPoll);
    sockets_.push_back({wake_fd_, POLLIN, 0});
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    if (ms > 0) ::poll(sockets_.data(), sockets_.size(), static_cast<int>(ms));
  }
  const auto now = Clock::now();
  if (now - last_liveness_check_ < kLiveness) return;
  last_liveness_check_ = now;
  for (ShmLink* l : shm_readers_) l->check_alive();
  for (ShmLink* l : shm_writers_) l->check_alive();
}

}  // namespace net
}  // namespace tpurt
