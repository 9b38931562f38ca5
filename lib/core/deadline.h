// Deadlines computed from a caller's timeout: the one rule for every wait in lib/.
//
// A timeout in milliseconds becomes a point on the monotonic clock by adding it to
// now. A timeout that the clock cannot add (the sum would overflow steady_clock's
// nanosecond count, about 292 years after boot, or int64 milliseconds) is no deadline:
// Clock::time_point::max() (kNever). So is a negative one. Callers that give 0 or a
// negative value a meaning of their own decide that before they ask for a deadline.
//
// std::condition_variable::wait_for(ms) adds ms to now() inside libstdc++, unchecked:
// INT64_MAX ms wraps to a deadline in the past. Waits on a condition variable go
// through wait_until_deadline / wait_for_ms here instead.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <mutex>

namespace tpurt {

using Clock = std::chrono::steady_clock;

// Clock (CLOCK_MONOTONIC on Linux) in nanoseconds: traces and the coordination
// service's clock offsets.
inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

constexpr Clock::time_point kNever = Clock::time_point::max();

// from + timeout_ms, or kNever when timeout_ms < 0 or the sum would overflow.
inline Clock::time_point deadline_after(Clock::time_point from, int64_t timeout_ms) {
  if (timeout_ms < 0) return kNever;
  // The room left on the clock, in whole milliseconds (rounded down): a timeout that
  // reaches it (or the end of the nanosecond range on its own) is no deadline.
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(kNever - from).count();
  if (timeout_ms >= room) return kNever;
  return from + std::chrono::milliseconds(timeout_ms);
}

inline Clock::time_point deadline_after(int64_t timeout_ms) {
  return deadline_after(Clock::now(), timeout_ms);
}

// a + b for timeouts (>= 0) in ms, INT64_MAX (no deadline) past the range.
inline int64_t add_timeouts_ms(int64_t a, int64_t b) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  return a > kMax - b ? kMax : a + b;
}

// The same rule on an int64 millisecond clock (net::now_ms()): now_ms + timeout_ms, or
// INT64_MAX (never) when timeout_ms < 0 or the sum would overflow.
inline int64_t deadline_ms_after(int64_t now_ms, int64_t timeout_ms) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (timeout_ms < 0 || timeout_ms >= kMax - now_ms) return kMax;
  return now_ms + timeout_ms;
}

// And on an int64 nanosecond clock (CLOCK_MONOTONIC, as the MPI plugin's waits):
// now_ns + timeout_ms ms, or INT64_MAX (never).
inline int64_t deadline_ns_after(int64_t now_ns, int64_t timeout_ms) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (timeout_ms < 0 || timeout_ms >= (kMax - now_ns) / 1000000) return kMax;
  return now_ns + timeout_ms * 1000000;
}

// Waits on cv until pred() or the deadline; returns pred(). kNever waits without a
// time limit (no clock arithmetic at all).
template <typename Pred>
bool wait_until_deadline(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                         Clock::time_point deadline, Pred pred) {
  if (deadline == kNever) {
    cv.wait(lock, pred);
    return true;
  }
  return cv.wait_until(lock, deadline, pred);
}

// cv.wait_for(lock, milliseconds(timeout_ms), pred) without the overflow.
template <typename Pred>
bool wait_for_ms(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, int64_t timeout_ms,
                 Pred pred) {
  return wait_until_deadline(cv, lock, deadline_after(timeout_ms), pred);
}

}  // namespace tpurt
