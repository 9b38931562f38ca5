// One task's shared-memory segment: an anonymous memfd holding a header (identity,
// liveness words, the task's doorbell), two post slots that the task writes and its
// peers read (small gathers, net/posted_gather.h), one single-producer/single-consumer
// byte ring per peer, in which that peer writes to the task, and at its end a staging
// window of kWindowBytes that the task writes and its peers read (net/shared_windows.h).
// Peers map it by opening /proc/<pid>/fd/<fd> (the locator says which); once every
// peer has mapped it the owner closes the memfd, so the memory lives exactly as long
// as the mappings.
//
// Everything a peer can write is untrusted: the static header fields are checked
// once when mapped and copied out, ring indices are bounded before every use.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace tpurt {
namespace net {
namespace shm {

constexpr uint64_t kMagic = 0x31676573746d6873;  // "shmtseg1" read little-endian
constexpr uint32_t kVersion = 4;  // 2: the staging window; 3: the post slots; 4: 2 MiB
                                  // windows, the rings' wait flags
constexpr uint64_t kMinRingBytes = 4096;
constexpr uint64_t kMaxRingBytes = 64u << 20;
constexpr int kMaxTasks = 4096;
constexpr size_t kLine = 128;  // a cache line pair: the adjacent-line prefetcher shares 128 bytes
// The staging window: its pages are touched only by the collectives that use it. An
// all-reduce stages chunks of up to 512 KiB through two chunk buffers and two slice
// buffers in it (collectives/reduce_staged.cc). Measured with one chunk buffer
// (tpurt bench --tasks 8 --transport shm, float32, 16 MiB, busbw): chunks of 512 KiB
// beat 256 KiB and 1 MiB: 2.9-3.0 GB/s against 2.5-2.7 and 2.0-2.5.
constexpr uint64_t kWindowBytes = 2u << 20;

// At offset 0. Words written after creation are on lines of their own.
struct SegmentHeader {
  uint64_t magic;
  uint64_t nonce;          // random: a locator names exactly this segment
  uint64_t ring_bytes;     // each ring's capacity, a power of two
  uint64_t segment_bytes;
  uint64_t start_time;     // the owner's start time (/proc/<pid>/stat), against pid reuse
  int64_t pid;             // the owner's
  uint32_t version;
  uint32_t num_tasks;
  uint32_t task_id;        // the owner
  uint32_t reserved;
  alignas(kLine) uint32_t closed;  // 1: the owner shut down cleanly
  alignas(kLine) uint32_t bell;    // the owner's doorbell (a futex word): bumped to wake it
  uint32_t sleeping;               // 1 while the owner sleeps on bell
};

// The control words of the ring in which task w writes to the owner.
struct RingControl {
  alignas(kLine) uint64_t head;  // bytes ever written (by the writer)
  alignas(kLine) uint64_t tail;  // bytes ever read (by the owner)
  alignas(kLine) uint32_t closed;  // 1: either side ended the link
  // 1 while the writer may sleep for room: the owner rings the writer's doorbell after
  // reading only then, not whenever the writer sleeps (for other rings' frames).
  alignas(kLine) uint32_t writer_waits;
  // 1 while the owner sleeps for this ring's bytes: the writer rings the owner's
  // doorbell after writing only then, or once a quarter of the ring is full. A task
  // waiting for the frames of several peers (a barrier) flags one ring at a time, so
  // it is not woken once for every peer's frame.
  alignas(kLine) uint32_t reader_waits;
};

// The largest post: a task's share of a small gather (all its replicas' inputs).
constexpr uint64_t kPostBytes = 16 * 1024;
// A post's fields and its first bytes share a line: a peer reading an 8-byte post
// misses once.
struct PostSlot {
  alignas(kLine) uint64_t stamp;  // which post this is (written last); 0: none yet
  uint64_t seq;                   // the collective's number in its step
  uint64_t digest;                // the collective's descriptor digest
  uint64_t bytes;                 // the payload's size, at most kPostBytes
  unsigned char data[kPostBytes];
};
// Posts alternate between two slots; a slot is written again only once every peer
// that read its previous post says so in `consumed`.
struct PostArea {
  alignas(kLine) uint64_t consumed;  // the stamp of the last post this task has read
  PostSlot slot[2];
};

constexpr size_t kHeaderBytes = sizeof(SegmentHeader);
static_assert(kHeaderBytes % kLine == 0, "the rings' control words start on a line");

inline size_t control_offset(int writer) { return kHeaderBytes + writer * sizeof(RingControl); }
inline size_t posts_offset(int num_tasks) { return control_offset(num_tasks); }
inline uint64_t data_offset(int num_tasks) {
  return (posts_offset(num_tasks) + sizeof(PostArea) + 4095) & ~uint64_t(4095);
}
inline uint64_t ring_offset(int num_tasks, uint64_t ring_bytes, int writer) {
  return data_offset(num_tasks) + writer * ring_bytes;
}
inline uint64_t segment_bytes(int num_tasks, uint64_t ring_bytes) {
  return data_offset(num_tasks) + num_tasks * ring_bytes + kWindowBytes;
}

// A mapped segment (this task's own or a peer's).
struct Mapping {
  unsigned char* base = nullptr;
  uint64_t bytes = 0;
  SegmentHeader* header() const { return reinterpret_cast<SegmentHeader*>(base); }
  RingControl* control(int writer) const {
    return reinterpret_cast<RingControl*>(base + control_offset(writer));
  }
  PostArea* posts(int num_tasks) const {
    return reinterpret_cast<PostArea*>(base + posts_offset(num_tasks));
  }
};

// The ring size: TPURT_SHM_RING_BYTES (a power of two in [kMinRingBytes,
// kMaxRingBytes], decimal, nothing else) or the default for num_tasks tasks (1 MiB,
// less from 16 tasks up). A bad value throws TPU_INVALID_ARGUMENT naming the variable
// and its value.
uint64_t ring_bytes_from_env(int num_tasks);

// Creates and maps this task's segment (*fd: the memfd). Throws TPU_RESOURCE_EXHAUSTED
// naming what failed.
Mapping create_segment(int num_tasks, int task_id, uint64_t ring_bytes, int* fd);

// What a peer needs to map the segment: "<pid>:<fd>:<bytes>:<nonce as 16 hex digits>".
std::string format_locator(const Mapping& m, int fd);

// Maps task `peer`'s segment from its locator and checks it belongs to task `peer` of
// a cluster of num_tasks. Throws TPU_INVALID_ARGUMENT for a malformed or foreign
// locator, TPU_UNAVAILABLE for a segment that cannot be opened (naming the peer).
// *pid and *start_time: the owner's identity (checked against /proc).
Mapping map_peer_segment(int num_tasks, int peer, const std::string& locator, pid_t* pid,
                         uint64_t* start_time);

void unmap(Mapping* m);

// A process's start time (field 22 of /proc/<pid>/stat), and whether it is a zombie;
// false when it does not exist.
bool process_start_time(pid_t pid, uint64_t* start_time, bool* zombie);

// The doorbell: the owner sleeps on `bell` (any process mapping it can wake it).
void ring_doorbell(SegmentHeader* h);
// Sleeps while *bell == seen, at most timeout_ns. Shared (not FUTEX_PRIVATE): the word is
// mapped by several processes.
void futex_wait(uint32_t* bell, uint32_t seen, int64_t timeout_ns);

template <typename T>
inline T load(const T* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
template <typename T>
inline void store(T* p, T v) {
  // Sequentially consistent: a store of progress is ordered before the load of the
  // peer's sleeping word that decides whether to wake it (see ring_doorbell).
  __atomic_store_n(p, v, __ATOMIC_SEQ_CST);
}

}  // namespace shm
}  // namespace net
}  // namespace tpurt
