// Waiting without burning CPU: spin briefly, then yield, then sleep on a futex word.
// A sleep and wake costs hundreds of times a spinning hand-off (bench/RESULTS.md has
// the figures measured), so spinning is right while waiters do not outnumber CPUs,
// and yielding (so the thread we wait for can run) is right when they do.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "core/deadline.h"

namespace tpurt {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// A futex word that waiters sleep on and wakers bump. Waiters must re-check their
// condition after reading epoch() and before sleep(); wake() after changing it.
class WakeWord {
 public:
  uint32_t epoch() const { return word_.load(std::memory_order_seq_cst); }
  // Sleeps while the word still equals `seen`, at most until `deadline`.
  void sleep(uint32_t seen, Clock::time_point deadline);
  // Wakes all sleepers if there are any (cheap when none sleep).
  void wake();
  void enter_sleep() { sleepers_.fetch_add(1, std::memory_order_seq_cst); }
  void leave_sleep() { sleepers_.fetch_sub(1, std::memory_order_relaxed); }

 private:
  std::atomic<uint32_t> word_{0};
  std::atomic<int32_t> sleepers_{0};
};

// How long to spin and yield before sleeping, for `waiters` threads on the machine.
struct SpinPolicy {
  int64_t spin_ns;   // how long to spin before the first yield
  int64_t yield_ns;  // how long to keep yielding before sleeping
  static SpinPolicy for_threads(int waiters, int cpus);
};

enum class WaitResult { kReady, kStopped, kTimedOut };

// A timeout that starts when a waiter first needs it (when it is about to sleep), so
// the many waits that end while spinning or yielding never read the clock.
// The monotonic clock at its coarse resolution (a few milliseconds, no more than
// steady_clock's now() behind it): cheap enough to start every collective's deadline.
Clock::time_point coarse_now();

// A negative timeout, or one past the clock's range, is none (core/deadline.h).
class Deadline {
 public:
  static Deadline never() { return Deadline(-1); }
  explicit Deadline(int64_t timeout_ms) : timeout_ms_(timeout_ms) {}
  Clock::time_point at() {
    if (!started_) {
      at_ = deadline_after(timeout_ms_);
      started_ = true;
    }
    return at_;
  }

 private:
  int64_t timeout_ms_;
  bool started_ = false;
  Clock::time_point at_{};
};

// Waits until ready() is true, stop() is true, or the deadline passes. Both
// predicates are re-evaluated after every wake; `word` must be woken when either
// may change.
template <typename Ready, typename Stop>
WaitResult wait_until(WakeWord& word, const SpinPolicy& policy, Deadline& deadline,
                      Ready&& ready, Stop&& stop);
// The same, but in the yield phase spins instead of yielding while spin_instead() is
// true: when no thread that shares this CPU could use it, a yield only delays
// noticing that the wait is over.
template <typename Ready, typename Stop, typename SpinInstead>
WaitResult wait_until(WakeWord& word, const SpinPolicy& policy, Deadline& deadline,
                      Ready&& ready, Stop&& stop, SpinInstead&& spin_instead);

}  // namespace tpurt

#include "core/wait_inl.h"
