// The wait policy (lib/core/wait.h): spin, then yield, then sleep on the futex word,
// each phase bounded by its time; stop and deadline; wake-ups. The waiter is always
// the test's own thread; helper threads only set flags and wake.
//
// The phases are told apart by the order in which wait_until calls its predicates:
// spinning calls ready() 256 times per stop(); yielding calls ready(), stop() and
// spin_instead() once per round; sleeping calls ready() and stop() once per wake.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/wait.h"
#include "tpurt.h"

// After the C++ and library headers: cmocka defines a macro named fail().
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
extern "C" {
#include <cmocka.h>
}

#include "test_util.h"

using tpurt::Clock;
using tpurt::coarse_now;
using tpurt::Deadline;
using tpurt::SpinPolicy;
using tpurt::WaitResult;
using tpurt::WakeWord;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Every predicate call, in order: 'R' ready, 'S' stop, 'I' spin_instead.
struct Log {
  std::string kinds;
  std::vector<Clock::time_point> times;
  Log() {
    kinds.reserve(1 << 20);
    times.reserve(1 << 20);
  }
  void add(char k) {
    if (kinds.size() == kinds.capacity()) return;  // full: the test sees the overflow
    kinds.push_back(k);
    times.push_back(Clock::now());
  }
  bool full() const { return kinds.size() == kinds.capacity(); }
};

// Runs wait_until with logging predicates: ready() is true from call number
// `ready_at` on (0: never), stop() from call `stop_at` on, spin_instead() always
// `spin_instead`.
WaitResult logged_wait(Log& log, const SpinPolicy& policy, int64_t deadline_ms, long ready_at,
                       long stop_at, bool spin_instead) {
  WakeWord word;
  Deadline deadline(deadline_ms);
  long readies = 0, stops = 0;
  return tpurt::wait_until(
      word, policy, deadline,
      [&] {
        log.add('R');
        return ready_at > 0 && ++readies >= ready_at;
      },
      [&] {
        log.add('S');
        return stop_at > 0 && ++stops >= stop_at;
      },
      [&] {
        log.add('I');
        return spin_instead;
      });
}

// The log split into the three phases.
struct Phases {
  size_t spin_end = 0;   // [0, spin_end): spinning
  size_t yield_end = 0;  // [spin_end, yield_end): yielding; the rest: sleeping
  bool well_formed = false;
  std::string why;
};

// Spinning: (R^256 S)*. Yielding: (R S I R^k)* then R S, k = 0, or 64 with spin_instead.
// Sleeping: (R S)*. Returns where each phase ends, or why the log has another shape.
Phases split(const std::string& k, bool spin_instead) {
  Phases p;
  size_t i = 0;
  while (i + 257 <= k.size() && k.compare(i, 256, std::string(256, 'R')) == 0 && k[i + 256] == 'S')
    i += 257;
  p.spin_end = i;
  size_t last_i = k.rfind('I');
  if (last_i == std::string::npos || last_i < i) {
    p.yield_end = i;  // no yield phase
  } else {
    while (i < k.size() && i <= last_i) {
      if (k.compare(i, 3, "RSI") != 0) {
        p.why = "yield round at " + std::to_string(i) + " is not R S I";
        return p;
      }
      i += 3;
      if (spin_instead) {
        if (k.compare(i, 64, std::string(64, 'R')) != 0) {
          p.why = "no 64 spins after spin_instead at " + std::to_string(i);
          return p;
        }
        i += 64;
      }
    }
    if (k.compare(i, 2, "RS") != 0) {  // the round that saw the time run out
      p.why = "yield phase does not end with R S at " + std::to_string(i);
      return p;
    }
    i += 2;
    p.yield_end = i;
  }
  for (; i < k.size(); i += 2)
    if (k.compare(i, 2, "RS") != 0) {
      p.why = "sleep round at " + std::to_string(i) + " is not R S";
      return p;
    }
  p.well_formed = true;
  return p;
}

}  // namespace

static void test_wait__spin_yield_sleep_in_order_each_bounded_by_its_time(void **state) {
  (void)state;
  const SpinPolicy policy{2000000, 2000000};  // 2 ms each
  Log log;
  const auto t0 = Clock::now();
  WaitResult res = logged_wait(log, policy, 30, 0, 0, false);
  const auto t_end = Clock::now();
  assert_false(log.full());
  assert_int_equal(static_cast<int>(res), static_cast<int>(WaitResult::kTimedOut));
  Phases p = split(log.kinds, false);
  if (!p.well_formed) fail_msg("%s", p.why.c_str());
  // Spinning reads the clock first after 256 rounds, then runs for spin_ns.
  assert_true(p.spin_end >= 2 * 257);
  assert_true(seconds_between(t0, log.times[p.spin_end]) >= 0.002);
  // Yield rounds for yield_ns from the first, then at least one sleep round.
  assert_true(p.yield_end - p.spin_end >= 5);
  assert_true(log.kinds.size() > p.yield_end);
  assert_true(seconds_between(log.times[p.spin_end], log.times[p.yield_end]) >= 0.002);
  // The deadline starts when the waiter is about to sleep, and ends the wait.
  assert_true(seconds_between(log.times[p.yield_end], t_end) >= 0.030);
  assert_true(seconds_between(t0, t_end) < time_limit(2.0));
  // Sleeping wakes once per 50 ms slice at most, not per round of a loop.
  assert_true((log.kinds.size() - p.yield_end) / 2 <= 10);
}

static void test_wait__zero_spin_yields_at_once_and_zero_yield_sleeps_at_once(void **state) {
  (void)state;
  Log yield_first;
  logged_wait(yield_first, SpinPolicy{0, 1000000}, 10, 0, 0, false);
  Phases p = split(yield_first.kinds, false);
  if (!p.well_formed) fail_msg("%s", p.why.c_str());
  assert_int_equal(p.spin_end, 0);
  assert_true(p.yield_end >= 5);
  assert_string_equal(yield_first.kinds.substr(0, 3).c_str(), "RSI");

  Log sleep_first;
  logged_wait(sleep_first, SpinPolicy{0, 0}, 10, 0, 0, false);
  p = split(sleep_first.kinds, false);
  if (!p.well_formed) fail_msg("%s", p.why.c_str());
  assert_int_equal(p.spin_end, 0);
  assert_int_equal(p.yield_end, 0);
  assert_true(sleep_first.kinds.size() >= 2);
}

// While no thread that shares the CPU could use it, the yield phase spins instead.
static void test_wait__spin_instead_replaces_the_yield(void **state) {
  (void)state;
  Log log;
  logged_wait(log, SpinPolicy{0, 1000000}, 10, 0, 0, true);
  Phases p = split(log.kinds, true);
  if (!p.well_formed) fail_msg("%s", p.why.c_str());
  assert_true(p.yield_end >= 67);
}

static void test_wait__ready_ends_the_spin_phase(void **state) {
  (void)state;
  Log log;
  const auto t0 = Clock::now();
  // A second of spinning allowed; ready on the 1000th look.
  WaitResult res = logged_wait(log, SpinPolicy{1000000000, 1000000000}, 10000, 1000, 0, false);
  assert_int_equal(static_cast<int>(res), static_cast<int>(WaitResult::kReady));
  assert_true(seconds_since(t0) < time_limit(0.5));
  assert_int_equal(log.kinds.find('I'), std::string::npos);  // never left the spin phase
  size_t readies = 0, stops = 0;
  for (char k : log.kinds) (k == 'R' ? readies : stops)++;
  assert_int_equal(readies, 1000);
  assert_int_equal(stops, 3);  // after looks 256, 512 and 768
}

static void test_wait__stop_ends_every_phase(void **state) {
  (void)state;
  Log spin, yield, sleep;
  // Spinning checks stop() after every 256 looks.
  assert_int_equal(static_cast<int>(logged_wait(spin, SpinPolicy{1000000000, 0}, 10000, 0, 1, false)),
                   static_cast<int>(WaitResult::kStopped));
  assert_string_equal(spin.kinds.c_str(), (std::string(256, 'R') + "S").c_str());
  // Yielding checks it every round.
  assert_int_equal(static_cast<int>(logged_wait(yield, SpinPolicy{0, 1000000000}, 10000, 0, 3, false)),
                   static_cast<int>(WaitResult::kStopped));
  assert_string_equal(yield.kinds.c_str(), "RSIRSIRS");
  // Sleeping checks it before each sleep.
  assert_int_equal(static_cast<int>(logged_wait(sleep, SpinPolicy{0, 0}, 10000, 0, 1, false)),
                   static_cast<int>(WaitResult::kStopped));
  assert_string_equal(sleep.kinds.c_str(), "RS");
}

// A sleeper wakes when a helper changes its condition and calls wake(), long before
// its deadline; for `stop` as for `ready`.
static void test_wait__wake_ends_the_sleep(void **state) {
  (void)state;
  for (int make_ready = 0; make_ready < 2; ++make_ready) {
    WakeWord word;
    Deadline deadline(time_limit_ms(10000));
    std::atomic<bool> ready{false}, stop{false};
    // Before the helper starts: a main thread descheduled between the two would
    // measure less than the helper's 30 ms.
    const auto t0 = Clock::now();
    std::thread helper([&] {
      sleep_ms(30);
      (make_ready ? ready : stop).store(true);
      word.wake();
    });
    WaitResult res = tpurt::wait_until(
        word, SpinPolicy{0, 0}, deadline, [&] { return ready.load(); }, [&] { return stop.load(); });
    const double waited = seconds_since(t0);
    helper.join();
    assert_int_equal(static_cast<int>(res),
                     static_cast<int>(make_ready ? WaitResult::kReady : WaitResult::kStopped));
    assert_true(waited >= 0.025 && waited < time_limit(1.0));
  }
}

// A condition changed without wake() is still seen within one 50 ms sleep slice.
static void test_wait__missed_wake_costs_at_most_a_slice(void **state) {
  (void)state;
  WakeWord word;
  Deadline deadline(time_limit_ms(10000));
  std::atomic<bool> ready{false};
  std::thread helper([&] {
    sleep_ms(20);
    ready.store(true);  // no wake
  });
  const auto t0 = Clock::now();
  WaitResult res = tpurt::wait_until(
      word, SpinPolicy{0, 0}, deadline, [&] { return ready.load(); }, [] { return false; });
  const double waited = seconds_since(t0);
  helper.join();
  assert_int_equal(static_cast<int>(res), static_cast<int>(WaitResult::kReady));
  assert_true(waited < time_limit(1.0));
}

static void test_wait__wake_word(void **state) {
  (void)state;
  WakeWord word;
  const uint32_t e0 = word.epoch();
  word.wake();  // nobody sleeps: nothing to do
  assert_int_equal(word.epoch(), e0);
  word.enter_sleep();
  word.wake();
  assert_int_equal(word.epoch(), e0 + 1);
  word.leave_sleep();
  // sleep() returns at its deadline when nobody wakes it, and at once when it is past.
  auto t0 = Clock::now();
  word.sleep(word.epoch(), t0 + std::chrono::milliseconds(30));
  assert_true(seconds_since(t0) >= 0.029);
  t0 = Clock::now();
  word.sleep(word.epoch(), t0 - std::chrono::milliseconds(1));
  assert_true(seconds_since(t0) < time_limit(1.0));
}

static void test_wait__deadline_starts_when_first_needed(void **state) {
  (void)state;
  assert_true(Deadline::never().at() == Clock::time_point::max());
  Deadline d(50);
  sleep_ms(30);
  const auto before = Clock::now();
  const auto at = d.at();
  assert_true(at >= before + std::chrono::milliseconds(50));
  sleep_ms(5);
  assert_true(d.at() == at);  // fixed once started
  // A zero deadline: the first sleep round times out.
  Log log;
  assert_int_equal(static_cast<int>(logged_wait(log, SpinPolicy{0, 0}, 0, 0, 0, false)),
                   static_cast<int>(WaitResult::kTimedOut));
  assert_string_equal(log.kinds.c_str(), "RS");
}

// The coarse clock is steady_clock's, at most a tick (a few ms) behind it, and moves:
// a collective's deadline started with it is never later than asked.
static void test_wait__coarse_clock_trails_the_steady_clock(void **state) {
  (void)state;
  for (int i = 0; i < 100; ++i) {
    const auto coarse = coarse_now();
    const auto now = Clock::now();
    assert_true(coarse <= now);
    assert_true(now - coarse < std::chrono::milliseconds(50));
  }
  const auto first = coarse_now();
  sleep_ms(30);
  assert_true(coarse_now() > first);
}

// Spin while waiters fit the CPUs; with more waiters than CPUs, yield at once
// (for TPURT_YIELD_NS, 20 us by default).
static void test_wait__policy_for_threads(void **state) {
  (void)state;
  const SpinPolicy fits = SpinPolicy::for_threads(4, 4);
  assert_true(fits.spin_ns > 0 && fits.yield_ns > 0);
  const SpinPolicy crowded = SpinPolicy::for_threads(5, 4);
  assert_int_equal(crowded.spin_ns, 0);
  const char *env = std::getenv("TPURT_YIELD_NS");
  assert_int_equal(crowded.yield_ns, env ? std::atoll(env) : 20000);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_wait__spin_yield_sleep_in_order_each_bounded_by_its_time),
      cmocka_unit_test(test_wait__zero_spin_yields_at_once_and_zero_yield_sleeps_at_once),
      cmocka_unit_test(test_wait__spin_instead_replaces_the_yield),
      cmocka_unit_test(test_wait__ready_ends_the_spin_phase),
      cmocka_unit_test(test_wait__stop_ends_every_phase),
      cmocka_unit_test(test_wait__wake_ends_the_sleep),
      cmocka_unit_test(test_wait__missed_wake_costs_at_most_a_slice),
      cmocka_unit_test(test_wait__wake_word),
      cmocka_unit_test(test_wait__deadline_starts_when_first_needed),
      cmocka_unit_test(test_wait__policy_for_threads),
      cmocka_unit_test(test_wait__coarse_clock_trails_the_steady_clock),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
