// Template body of tpurt::wait_until (see wait.h).
#pragma once

#include <sched.h>

namespace tpurt {

template <typename Ready, typename Stop>
WaitResult wait_until(WakeWord& word, const SpinPolicy& policy, Deadline& deadline,
                      Ready&& ready, Stop&& stop) {
  return wait_until(word, policy, deadline, ready, stop, [] { return false; });
}

template <typename Ready, typename Stop, typename SpinInstead>
WaitResult wait_until(WakeWord& word, const SpinPolicy& policy, Deadline& deadline,
                      Ready&& ready, Stop&& stop, SpinInstead&& spin_instead) {
  if (policy.spin_ns > 0) {
    // Bounded by time, not count: a peer that shares this CPU (another process took
    // the other one) cannot arrive while we spin. The clock is first read after 256
    // pauses (microseconds), so quicker hand-offs never read it.
    Clock::time_point stop_spinning{};
    for (int i = 0;; ++i) {
      if (ready()) return WaitResult::kReady;
      if ((i & 255) == 255) {
        if (stop()) return WaitResult::kStopped;
        if (i == 255) stop_spinning = Clock::now() + std::chrono::nanoseconds(policy.spin_ns);
        else if (Clock::now() >= stop_spinning) break;
      }
      cpu_relax();
    }
  }
  if (policy.yield_ns > 0) {
    // Under CFS a thread that keeps yielding keeps the lowest vruntime and is picked
    // again before the thread it waits for, so yielding is bounded by time.
    // The clock is first read after one yield: most waits end there.
    Clock::time_point stop_yielding{};
    for (int i = 0;; ++i) {
      if (ready()) return WaitResult::kReady;
      if (stop()) return WaitResult::kStopped;
      if (i == 1) stop_yielding = Clock::now() + std::chrono::nanoseconds(policy.yield_ns);
      else if (i > 1 && (i & 3) == 1 && Clock::now() >= stop_yielding) break;
      if (!spin_instead()) {
        sched_yield();
        continue;
      }
      for (int j = 0; j < 64 && !ready(); ++j) cpu_relax();
    }
  }
  for (;;) {
    word.enter_sleep();
    uint32_t seen = word.epoch();
    if (ready()) {
      word.leave_sleep();
      return WaitResult::kReady;
    }
    if (stop()) {
      word.leave_sleep();
      return WaitResult::kStopped;
    }
    if (Clock::now() >= deadline.at()) {
      word.leave_sleep();
      return WaitResult::kTimedOut;
    }
    word.sleep(seen, deadline.at());
    word.leave_sleep();
  }
}

}  // namespace tpurt
