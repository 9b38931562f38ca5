// Deadlines from the caller's timeouts (lib/core/deadline.h): a timeout the clock
// cannot add, INT64_MAX or 2^62 ms ("practically never"), is no deadline, in the
// helper and in every wait the C ABI offers: a collective whose peer is late, with the
// system's and with the step's timeout, infeed and outfeed dequeues, tpu_kv_get.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>

#if __has_include("core/deadline.h")
#include "core/deadline.h"
#define TPURT_TEST_HAVE_DEADLINE_H 1
#endif
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

namespace {

using tpurt::Clock;

constexpr int64_t kMaxMs = std::numeric_limits<int64_t>::max();
constexpr int64_t kPracticallyNever = int64_t{1} << 62;
constexpr int kLateMs = 200;

tpu_system* g_sys;
tpu_infeed_queue* g_in;
tpu_outfeed_queue* g_out;

int teardown(void** state) {
  (void)state;
  tpu_infeed_queue_release(g_in);
  tpu_outfeed_queue_release(g_out);
  tpu_system_release(g_sys);
  g_in = nullptr;
  g_out = nullptr;
  g_sys = nullptr;
  return 0;
}

void start(int cores, int64_t timeout_ms) {
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = cores;
  o.collective_timeout_ms = timeout_ms;
  CHECK_OK(tpu_system_init(&o, &g_sys));
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Deadline (core/wait.h), the waits' deadline: a timeout past the clock is none.
void test_deadlines__wait_deadline_at_int64_max_is_never(void** state) {
  (void)state;
  for (int64_t ms : {kMaxMs, kPracticallyNever, int64_t{1} << 50}) {
    tpurt::Deadline d(ms);
    if (d.at() != Clock::time_point::max())
      CHECK_FAIL("Deadline(%lld).at() is %lld ns, not the clock's end", static_cast<long long>(ms),
                 static_cast<long long>(d.at().time_since_epoch().count()));
  }
  // An ordinary timeout is now + it.
  const Clock::time_point before = Clock::now();
  tpurt::Deadline d(1000);
  const Clock::time_point at = d.at();
  CHECK(at >= before + std::chrono::milliseconds(1000));
  CHECK(at <= Clock::now() + std::chrono::milliseconds(1000));
}

#ifdef TPURT_TEST_HAVE_DEADLINE_H
// The helper itself, at INT64_MAX and at the edge of the clock's range.
void test_deadlines__helper_saturates(void** state) {
  (void)state;
  const Clock::time_point now = Clock::now();
  CHECK(tpurt::deadline_after(now, kMaxMs) == tpurt::kNever);
  CHECK(tpurt::deadline_after(kMaxMs) == tpurt::kNever);
  CHECK(tpurt::deadline_after(now, kPracticallyNever) == tpurt::kNever);
  CHECK(tpurt::deadline_after(now, -1) == tpurt::kNever);
  CHECK(tpurt::deadline_after(now, 0) == now);
  CHECK(tpurt::deadline_after(now, 250) == now + std::chrono::milliseconds(250));
  // The last representable millisecond before the end, and one past it.
  const int64_t room =
      std::chrono::duration_cast<std::chrono::milliseconds>(tpurt::kNever - now).count();
  CHECK(tpurt::deadline_after(now, room - 1) == now + std::chrono::milliseconds(room - 1));
  CHECK(tpurt::deadline_after(now, room) == tpurt::kNever);
  CHECK(tpurt::deadline_after(now, room + 1) == tpurt::kNever);
  // The int64 millisecond clock (net::now_ms()).
  CHECK(tpurt::deadline_ms_after(1000, kMaxMs) == kMaxMs);
  CHECK(tpurt::deadline_ms_after(1000, kMaxMs - 1000) == kMaxMs);
  CHECK(tpurt::deadline_ms_after(1000, kMaxMs - 1001) == kMaxMs - 1);
  CHECK(tpurt::deadline_ms_after(1000, -5) == kMaxMs);
  CHECK(tpurt::deadline_ms_after(1000, 5) == 1005);
}

// A condition variable wait of INT64_MAX ms waits for the predicate (libstdc++'s
// wait_for would have wrapped to a deadline in the past); a short one times out.
void test_deadlines__condition_variable_waits(void** state) {
  (void)state;
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false;
  std::thread setter([&] {
    sleep_ms(kLateMs);
    std::lock_guard<std::mutex> lock(mu);
    ready = true;
    cv.notify_all();
  });
  const Clock::time_point t0 = Clock::now();
  {
    std::unique_lock<std::mutex> lock(mu);
    CHECK(tpurt::wait_for_ms(cv, lock, kMaxMs, [&] { return ready; }));
  }
  CHECK(seconds_since(t0) >= kLateMs / 1000.0 * 0.9);
  CHECK(seconds_since(t0) < time_limit(10));
  setter.join();
  std::unique_lock<std::mutex> lock(mu);
  bool never = false;
  CHECK(!tpurt::wait_for_ms(cv, lock, 20, [&] { return never; }));
}
#endif

// Replica 1 reaches the cross_replica_sum kLateMs after replica 0.
tpu_status late_sum(tpu_replica_context* ctx, tpu_tensor* const* in, int ni, tpu_tensor** out,
                    int no, void* user) {
  int id = -1;
  tpu_replica_context_replica_id(ctx, &id);
  if (id == 1) sleep_ms(kLateMs);
  float v = static_cast<float>(id + 1);
  tpu_tensor* x = nullptr;
  tpu_status st = tpu_tensor_create(TPU_FLOAT, nullptr, 0, &v, sizeof v, &x);
  if (st != TPU_OK) return st;
  tpu_tensor* sum = nullptr;
  st = tpu_cross_replica_sum(ctx, x, nullptr, &sum, nullptr);
  tpu_tensor_release(x);
  if (st != TPU_OK) return st;
  const void* p = nullptr;
  tpu_tensor_data(sum, &p);
  if (*static_cast<const float*>(p) != 3.0f) st = tpu_replica_context_fail(ctx, TPU_INTERNAL, "wrong sum");
  tpu_tensor_release(sum);
  return st;
}

void run_late_sum(const tpu_step_options* options) {
  const Clock::time_point t0 = Clock::now();
  CHECK_OK(tpu_replicate(g_sys, late_sum, nullptr, 2, 0, nullptr, 0, nullptr, options));
  CHECK(seconds_since(t0) >= kLateMs / 1000.0 * 0.9);
  CHECK(seconds_since(t0) < time_limit(10));
}

void test_deadlines__system_timeout_int64_max_waits_for_a_late_replica(void** state) {
  (void)state;
  for (int64_t ms : {kMaxMs, kPracticallyNever}) {
    start(2, ms);
    run_late_sum(nullptr);
    run_late_sum(nullptr);  // and the next step too
    tpu_system_release(g_sys);
    g_sys = nullptr;
  }
}

void test_deadlines__step_timeout_int64_max_waits_for_a_late_replica(void** state) {
  (void)state;
  start(2, 0);
  for (int64_t ms : {kMaxMs, kPracticallyNever}) {
    tpu_step_options o = TPU_STEP_OPTIONS_INIT;
    o.collective_timeout_ms = ms;
    run_late_sum(&o);
  }
}

// Infeed: the replica's dequeue (the step's timeout) waits for the host's late enqueue.
// Outfeed: the host's dequeue (the system's timeout) waits for the replica's late one.
const tpu_dtype kTypes[1] = {TPU_INT32};
const tpu_shape kShapes[1] = {{0, {0}}};

tpu_tensor* scalar(int32_t v) {
  tpu_tensor* t = nullptr;
  CHECK_OK(tpu_tensor_create(TPU_INT32, nullptr, 0, &v, sizeof v, &t));
  return t;
}

tpu_status dequeue_then_enqueue_late(tpu_replica_context* ctx, tpu_tensor* const* in, int ni,
                                     tpu_tensor** out, int no, void* user) {
  tpu_tensor* t = nullptr;
  tpu_status st = tpu_infeed_dequeue(ctx, g_in, &t, 1);
  if (st != TPU_OK) return st;
  const void* p = nullptr;
  tpu_tensor_data(t, &p);
  int32_t v = *static_cast<const int32_t*>(p);
  tpu_tensor_release(t);
  sleep_ms(kLateMs);
  tpu_tensor* reply = nullptr;
  v += 1;
  st = tpu_tensor_create(TPU_INT32, nullptr, 0, &v, sizeof v, &reply);
  if (st != TPU_OK) return st;
  st = tpu_outfeed_enqueue(ctx, g_out, &reply, 1);
  tpu_tensor_release(reply);
  return st;
}

void test_deadlines__feed_dequeues_with_int64_max_timeouts(void** state) {
  (void)state;
  start(1, kMaxMs);
  CHECK_OK(tpu_infeed_queue_create(g_sys, 1, 1, kTypes, kShapes, 0, &g_in));
  CHECK_OK(tpu_outfeed_queue_create(g_sys, 1, 1, kTypes, kShapes, 0, &g_out));
  tpu_step_options o = TPU_STEP_OPTIONS_INIT;
  o.collective_timeout_ms = kMaxMs;
  std::atomic<tpu_status> step{TPU_UNKNOWN};
  std::thread runner([&] {
    tpu_status st = tpu_replicate(g_sys, dequeue_then_enqueue_late, nullptr, 1, 0, nullptr, 0, nullptr, &o);
    if (st != TPU_OK) CHECK_FAIL("tpu_replicate gave %s: \"%s\"", tpu_status_name(st), tpu_last_error());
    step = st;
  });
  sleep_ms(kLateMs);  // the replica waits in its dequeue meanwhile
  tpu_tensor* t = scalar(41);
  CHECK_OK(tpu_infeed_enqueue(g_in, 0, &t, 1));
  tpu_tensor_release(t);
  const Clock::time_point t0 = Clock::now();
  tpu_tensor* got = nullptr;
  CHECK_OK(tpu_outfeed_dequeue(g_out, 0, &got, 1));  // the replica enqueues kLateMs later
  CHECK(seconds_since(t0) >= kLateMs / 1000.0 * 0.9);
  CHECK(seconds_since(t0) < time_limit(10));
  const void* p = nullptr;
  tpu_tensor_data(got, &p);
  assert_int_equal(*static_cast<const int32_t*>(p), 42);
  tpu_tensor_release(got);
  runner.join();
  CHECK_NO_WORKER_FAILURES();
  assert_int_equal(step.load(), TPU_OK);
}

// A one-task system's key-value store waits for INT64_MAX ms as for no limit.
void test_deadlines__kv_get_with_int64_max_timeout(void** state) {
  (void)state;
  start(1, 0);
  std::thread setter([] {
    sleep_ms(kLateMs);
    CHECK_OK(tpu_kv_set(g_sys, "late", "v", 1));
  });
  const Clock::time_point t0 = Clock::now();
  char buf[8];
  size_t len = 0;
  CHECK_OK(tpu_kv_get(g_sys, "late", kMaxMs, buf, sizeof buf, &len));
  CHECK(seconds_since(t0) < time_limit(10));
  setter.join();
  CHECK_NO_WORKER_FAILURES();
  assert_int_equal(len, 1);
  assert_int_equal(buf[0], 'v');
}

}  // namespace

int main(int argc, char** argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_deadlines__wait_deadline_at_int64_max_is_never),
#ifdef TPURT_TEST_HAVE_DEADLINE_H
      cmocka_unit_test(test_deadlines__helper_saturates),
      cmocka_unit_test(test_deadlines__condition_variable_waits),
#endif
      cmocka_unit_test_teardown(test_deadlines__system_timeout_int64_max_waits_for_a_late_replica, teardown),
      cmocka_unit_test_teardown(test_deadlines__step_timeout_int64_max_waits_for_a_late_replica, teardown),
      cmocka_unit_test_teardown(test_deadlines__feed_dequeues_with_int64_max_timeouts, teardown),
      cmocka_unit_test_teardown(test_deadlines__kv_get_with_int64_max_timeout, teardown),
  };
  return RUN_TESTS(argc, argv, tests, nullptr, nullptr);
}
