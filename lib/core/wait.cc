#include "core/wait.h"

#include "core/env.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

namespace tpurt {

void WakeWord::sleep(uint32_t seen, Clock::time_point deadline) {
  auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return;
  // Bounded slices keep a missed wake from costing more than a slice.
  auto slice = std::min<Clock::duration>(left, std::chrono::milliseconds(50));
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(slice).count();
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(ns / 1000000000);
  ts.tv_nsec = static_cast<long>(ns % 1000000000);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word_), FUTEX_WAIT_PRIVATE, seen, &ts, nullptr, 0);
}

Clock::time_point coarse_now() {
  // steady_clock is CLOCK_MONOTONIC; its coarse reading is the same clock at the last tick.
  timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0) return Clock::now();
  return Clock::time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
}

void WakeWord::wake() {
  if (sleepers_.load(std::memory_order_seq_cst) == 0) return;
  word_.fetch_add(1, std::memory_order_seq_cst);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word_), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

SpinPolicy SpinPolicy::for_threads(int waiters, int cpus) {
  const int64_t yield_ns = env_value_cached(EnvVar::kYieldNs);
  // Peers are running: spin about as long as a sleep and wake would cost (a few tens
  // of us), so a late peer costs at most twice the best choice, then yield.
  if (waiters <= cpus) return SpinPolicy{50000, 200000};
  return SpinPolicy{0, yield_ns};  // the thread we wait for needs this CPU
}

}  // namespace tpurt
