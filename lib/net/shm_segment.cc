#include "net/shm_segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/env.h"
#include "core/status.h"

namespace tpurt {
namespace net {
namespace shm {
namespace {

// Measured (bench/shm_transport.cc, 16 MiB to the next task and from the previous,
// medians of 3x5 runs): 256 KiB, 1 MiB and 4 MiB rings move 2.5, 2.6, 2.6 GB/s per
// task with 8 tasks and 10.5, 9.9, 11.0 GB/s with 2, 8-byte latency alike. So 1 MiB,
// and smaller rings for many tasks: a segment (a ring per task) stays within 8 MiB.
constexpr uint64_t kDefaultRingBytes = 1u << 20;
constexpr uint64_t kDefaultSegmentRings = 8u << 20;
constexpr uint64_t kLeastDefaultRingBytes = 64u << 10;

std::string errno_text(int err) { return std::strerror(err); }

bool parse_decimal(const std::string& text, uint64_t max, uint64_t* out) {
  return text.size() <= 20 && tpurt::parse_decimal(text.c_str(), 0, max, out);
}

// Exactly 16 lowercase or uppercase hex digits.
bool parse_hex64(const std::string& text, uint64_t* out) {
  if (text.size() != 16) return false;
  uint64_t v = 0;
  for (char c : text) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return false;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

bool power_of_two(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

uint64_t ring_bytes_from_env(int num_tasks) {
  const int64_t chosen = env_value(EnvVar::kShmRingBytes);
  if (chosen != 0) return static_cast<uint64_t>(chosen);
  uint64_t v = kDefaultRingBytes;
  while (v > kLeastDefaultRingBytes && v * static_cast<uint64_t>(num_tasks) > kDefaultSegmentRings)
    v /= 2;
  return v;
}

bool process_start_time(pid_t pid, uint64_t* start_time, bool* zombie) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return false;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // "pid (comm) state ppid ...": comm may hold anything, so fields count from the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ') return false;
  p += 2;
  *zombie = *p == 'Z' || *p == 'X';
  for (int field = 3; field < 22; ++field) {  // field 3 is the state
    p = std::strchr(p, ' ');
    if (p == nullptr) return false;
    ++p;
  }
  char* end;
  errno = 0;
  const unsigned long long v = std::strtoull(p, &end, 10);
  if (errno != 0 || end == p) return false;
  *start_time = v;
  return true;
}

Mapping create_segment(int num_tasks, int task_id, uint64_t ring_bytes, int* fd) {
  const uint64_t bytes = segment_bytes(num_tasks, ring_bytes);
  uint64_t nonce = 0;
  if (getrandom(&nonce, sizeof nonce, 0) != static_cast<ssize_t>(sizeof nonce))
    tpurt::fail(TPU_RESOURCE_EXHAUSTED, "shared-memory segment of task ", task_id,
                ": getrandom: ", errno_text(errno));
  uint64_t start_time = 0;
  bool zombie = false;
  if (!process_start_time(getpid(), &start_time, &zombie))
    tpurt::fail(TPU_RESOURCE_EXHAUSTED, "shared-memory segment of task ", task_id,
                ": cannot read /proc/self/stat");
  *fd = static_cast<int>(syscall(SYS_memfd_create, "tpurt-shm", MFD_CLOEXEC));
  if (*fd < 0)
    tpurt::fail(TPU_RESOURCE_EXHAUSTED, "shared-memory segment of task ", task_id,
                ": memfd_create: ", errno_text(errno));
  if (ftruncate(*fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    ::close(*fd);
    tpurt::fail(TPU_RESOURCE_EXHAUSTED, "shared-memory segment of task ", task_id,
                ": ftruncate to ", bytes, " bytes: ", errno_text(err));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    ::close(*fd);
    tpurt::fail(TPU_RESOURCE_EXHAUSTED, "shared-memory segment of task ", task_id,
                ": mmap of ", bytes, " bytes: ", errno_text(err));
  }
  Mapping m{static_cast<unsigned char*>(base), bytes};
  SegmentHeader* h = m.header();
  h->magic = kMagic;
  h->nonce = nonce;
  h->ring_bytes = ring_bytes;
  h->segment_bytes = bytes;
  h->start_time = start_time;
  h->pid = getpid();
  h->version = kVersion;
  h->num_tasks = static_cast<uint32_t>(num_tasks);
  h->task_id = static_cast<uint32_t>(task_id);
  return m;
}

std::string format_locator(const Mapping& m, int fd) {
  char nonce[17];
  std::snprintf(nonce, sizeof nonce, "%016llx", static_cast<unsigned long long>(m.header()->nonce));
  return str_cat(m.header()->pid, ":", fd, ":", m.bytes, ":", nonce);
}

Mapping map_peer_segment(int num_tasks, int peer, const std::string& locator, pid_t* pid,
                         uint64_t* start_time) {
  auto bad = [&](const auto&... why) {
    invalid_argument("task ", peer, "'s shared-memory locator '", locator, "' ", why...);
  };
  // "<pid>:<fd>:<bytes>:<nonce>"
  std::string parts[4];
  size_t from = 0;
  for (int i = 0; i < 4; ++i) {
    const size_t colon = i < 3 ? locator.find(':', from) : locator.size();
    if (colon == std::string::npos) bad("is not <pid>:<fd>:<bytes>:<nonce>");
    parts[i] = locator.substr(from, colon - from);
    from = colon + 1;
  }
  if (parts[3].find(':') != std::string::npos) bad("is not <pid>:<fd>:<bytes>:<nonce>");
  uint64_t pid_v = 0, fd_v = 0, bytes = 0, nonce = 0;
  if (!parse_decimal(parts[0], INT_MAX, &pid_v) || pid_v == 0) bad("has a bad pid '", parts[0], "'");
  if (!parse_decimal(parts[1], INT_MAX, &fd_v)) bad("has a bad descriptor '", parts[1], "'");
  if (!parse_decimal(parts[2], UINT64_MAX, &bytes)) bad("has a bad size '", parts[2], "'");
  if (!parse_hex64(parts[3], &nonce)) bad("has a bad nonce '", parts[3], "' (16 hex digits)");
  if (bytes < segment_bytes(num_tasks, kMinRingBytes) ||
      bytes > segment_bytes(num_tasks, kMaxRingBytes))
    bad("has a size of ", bytes, " bytes, not that of a segment for ", num_tasks, " tasks");

  char path[64];
  std::snprintf(path, sizeof path, "/proc/%llu/fd/%llu", static_cast<unsigned long long>(pid_v),
                static_cast<unsigned long long>(fd_v));
  const int fd = ::open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    tpurt::fail(TPU_UNAVAILABLE, "task ", peer, "'s shared-memory segment (", path,
                ") cannot be opened: ", errno_text(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != bytes) {
    ::close(fd);
    bad("names a file that is not its segment (", path, " is not a ", bytes, "-byte memfd)");
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the memory
  if (base == MAP_FAILED)
    tpurt::fail(TPU_UNAVAILABLE, "task ", peer, "'s shared-memory segment (", bytes,
                " bytes) cannot be mapped: ", errno_text(err));
  Mapping m{static_cast<unsigned char*>(base), bytes};
  // Copied once: the peer may change its header at any time.
  const SegmentHeader h = *m.header();
  std::string wrong;
  if (h.magic != kMagic || h.version != kVersion)
    wrong = "no tpurt segment of this version";
  else if (h.nonce != nonce)
    wrong = "another segment (its nonce differs)";
  else if (h.num_tasks != static_cast<uint32_t>(num_tasks))
    wrong = str_cat("a segment of a cluster of ", h.num_tasks, " tasks, not ", num_tasks);
  else if (h.task_id != static_cast<uint32_t>(peer))
    wrong = str_cat("the segment of task ", h.task_id);
  else if (h.pid != static_cast<int64_t>(pid_v))
    wrong = str_cat("a segment owned by pid ", h.pid);
  else if (!power_of_two(h.ring_bytes) || h.ring_bytes < kMinRingBytes ||
           h.ring_bytes > kMaxRingBytes || h.segment_bytes != bytes ||
           segment_bytes(num_tasks, h.ring_bytes) != bytes)
    wrong = str_cat("a segment with a malformed ring size (", h.ring_bytes, ")");
  if (!wrong.empty()) {
    unmap(&m);
    bad("names ", wrong);
  }
  // The pid is the owner's only while its start time matches.
  uint64_t started = 0;
  bool zombie = false;
  if (!process_start_time(static_cast<pid_t>(pid_v), &started, &zombie) || zombie ||
      started != h.start_time) {
    unmap(&m);
    tpurt::fail(TPU_UNAVAILABLE, "task ", peer, "'s process (pid ", pid_v, ") is gone");
  }
  *pid = static_cast<pid_t>(pid_v);
  *start_time = h.start_time;
  return m;
}

void unmap(Mapping* m) {
  if (m->base != nullptr) munmap(m->base, m->bytes);
  m->base = nullptr;
  m->bytes = 0;
}

void ring_doorbell(SegmentHeader* h) {
  // The sleeper sets `sleeping`, then reads `bell`, then rechecks its rings; the
  // waker has stored its progress (sequentially consistent) before it reads
  // `sleeping`. So either the sleeper sees the progress, or the waker sees it asleep
  // and bumps bell, which makes the futex wait return at once.
  if (__atomic_load_n(&h->sleeping, __ATOMIC_SEQ_CST) == 0) return;
  __atomic_fetch_add(&h->bell, 1, __ATOMIC_SEQ_CST);
  syscall(SYS_futex, &h->bell, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void futex_wait(uint32_t* bell, uint32_t seen, int64_t timeout_ns) {
  if (timeout_ns <= 0) return;
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000), static_cast<long>(timeout_ns % 1000000000)};
  syscall(SYS_futex, bell, FUTEX_WAIT, seen, &ts, nullptr, 0);
}

}  // namespace shm
}  // namespace net
}  // namespace tpurt
