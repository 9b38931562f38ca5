// The replica pool every binding runs its steps on (bindings/replica_pool.hpp), driven
// from C++ threads as the languages drive it from theirs: steps run on the seats,
// stop() ends every thread without a shutdown or a join timeout, a shutdown ends the
// pool, a busy core is waited out, a join error ends its thread and is reported once,
// and a thread gets its CPUs back when it ends.
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../bindings/replica_pool.hpp"

// After the C++ headers: cmocka defines a macro named fail().
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
extern "C" {
#include <cmocka.h>
}

#include "test_util.h"

namespace {

constexpr int kCores = 4;
constexpr int64_t kKey = 4242;

tpu_system* g_sys;

struct Threads {
  tpurt::ReplicaPool* pool = nullptr;
  std::vector<std::thread> threads;
  std::atomic<int> stopped{0}, ended{0}, ran{0}, wrong_key{0};
};

// One core's thread: the loop the header shows, with cross_replica_sum as the upcall.
void serve(Threads* t, int core) {
  tpurt::ReplicaPool::Seat* seat = t->pool->seat(core);
  int status = 0, turn;
  while ((turn = seat->next(status)) == tpurt::ReplicaPool::Seat::kRun) {
    if (seat->key() != kKey) t->wrong_key.fetch_add(1);
    tpurt::ReplicaContext& ctx = seat->context();
    try {
      ctx.setOutput(0, ctx.crossReplicaSum(ctx.input(0), tpurt::GroupAssignment(), tpurt::CollectiveOptions()));
      status = 0;
    } catch (const tpurt::Error& e) {
      status = static_cast<int>((ctx.fail)(static_cast<tpurt::Status>(e.code()), e.what()));  // () past cmocka's fail macro
    }
    t->ran.fetch_add(1);
  }
  (turn == tpurt::ReplicaPool::Seat::kStop ? t->stopped : t->ended).fetch_add(1);
  delete seat;
}

void start_threads(Threads* t, int cores) {
  for (int c = 0; c < cores; ++c) t->threads.emplace_back(serve, t, c);
}

void join_threads(Threads* t) {
  for (std::thread& th : t->threads) th.join();
  t->threads.clear();
}

tpu_system* start_system(int pin) {
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = kCores;
  o.pin_threads = pin;
  o.collective_timeout_ms = time_limit_ms(20000);
  tpu_system* s = nullptr;
  CHECK_OK(tpu_system_init(&o, &s));
  return s;
}

// A caller-threads step of kCores replicas under kKey: each output is the sum of the
// replicas' inputs (0 + 1 + 2 + 3).
tpu_status pool_step() {
  tpu_tensor* in[kCores];
  tpu_tensor* out[kCores] = {nullptr};
  for (int r = 0; r < kCores; ++r) {
    const float v = static_cast<float>(r);
    const int64_t dims[1] = {1};
    CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 1, &v, sizeof v, &in[r]));
  }
  tpu_step_options o = TPU_STEP_OPTIONS_INIT;
  o.caller_threads = 1;
  const tpu_status st = tpu_replicate(g_sys, nullptr, reinterpret_cast<void*>(static_cast<intptr_t>(kKey)), kCores,
                                      1, in, 1, out, &o);
  for (int r = 0; r < kCores; ++r) {
    tpu_tensor_release(in[r]);
    if (st == TPU_OK) {
      const void* p = nullptr;
      CHECK_OK(tpu_tensor_data(out[r], &p));
      assert_true(*static_cast<const float*>(p) == 6.0f);
      tpu_tensor_release(out[r]);
    }
  }
  return st;
}

int teardown(void**) {
  if (g_sys) tpu_system_release(g_sys);
  g_sys = nullptr;
  return 0;
}

void test_replica_pool__steps_run_on_the_seats(void**) {
  g_sys = start_system(TPU_PIN_NEVER);
  Threads t;
  tpurt::ReplicaPool pool(g_sys, kCores);
  t.pool = &pool;
  start_threads(&t, kCores);
  for (int s = 0; s < 50; ++s) CHECK_OK(pool_step());
  assert_int_equal(t.ran.load(), 50 * kCores);
  assert_int_equal(t.wrong_key.load(), 0);
  pool.stop();
  join_threads(&t);
  assert_int_equal(t.stopped.load(), kCores);
  assert_int_equal(pool.running(), 0);
}

// stop() ends every thread waiting with no join timeout, without a shutdown: the
// system runs steps on its workers after, and a new pool serves the cores again.
void test_replica_pool__stop_ends_the_threads_without_a_shutdown(void**) {
  g_sys = start_system(TPU_PIN_NEVER);
  for (int round = 0; round < 3; ++round) {
    Threads t;
    tpurt::ReplicaPool pool(g_sys, kCores);
    t.pool = &pool;
    start_threads(&t, kCores);
    CHECK_OK(pool_step());
    pool.stop();
    join_threads(&t);
    assert_int_equal(t.stopped.load(), kCores);
    int closed = 1;
    CHECK_OK(tpu_system_is_closed(g_sys, &closed));
    assert_int_equal(closed, 0);
  }
  // No cancel is left over for a raw join of a core.
  tpu_joined_step j = TPU_JOINED_STEP_INIT;
  for (int c = 0; c < kCores; ++c) CHECK_ERROR(tpu_step_join(g_sys, c, 0, &j), TPU_DEADLINE_EXCEEDED, "no step");
}

void test_replica_pool__shutdown_ends_the_pool(void**) {
  g_sys = start_system(TPU_PIN_NEVER);
  Threads t;
  tpurt::ReplicaPool pool(g_sys, kCores);
  t.pool = &pool;
  start_threads(&t, kCores);
  CHECK_OK(pool_step());
  CHECK_OK(tpu_system_shutdown(g_sys));
  join_threads(&t);
  assert_int_equal(t.stopped.load(), kCores);
  assert_true(pool.stopping());
  pool.stop();  // what the language's close does next: returns at once
}

// A raw join holding a core: the pool's thread for it waits, then serves the core
// once the raw join lets go; stop() ends it while it waits.
void test_replica_pool__a_busy_core_is_waited_out(void**) {
  g_sys = start_system(TPU_PIN_NEVER);
  std::atomic<int> raw_state{0};
  std::thread raw([&] {
    tpu_joined_step j = TPU_JOINED_STEP_INIT;
    raw_state = 1;
    // Holds core 3 by waiting on it for a moment.
    tpu_step_join(g_sys, 3, 300, &j);
    raw_state = 2;
  });
  while (raw_state.load() == 0) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Threads t;
  tpurt::ReplicaPool pool(g_sys, kCores);
  t.pool = &pool;
  start_threads(&t, kCores);
  raw.join();
  CHECK_OK(pool_step());  // core 3's pool thread took over once the raw join returned
  assert_int_equal(t.ran.load(), kCores);
  pool.stop();
  join_threads(&t);
  assert_int_equal(t.stopped.load(), kCores);
}

// A join that fails in a way a retry would hide (a thread that has joined already)
// ends its thread; takeEnded reports it once, naming the core, and the core is
// served again by a new thread.
void test_replica_pool__a_join_error_ends_the_thread_and_is_reported_once(void**) {
  g_sys = start_system(TPU_PIN_NEVER);
  Threads t;
  tpurt::ReplicaPool pool(g_sys, kCores);
  t.pool = &pool;
  start_threads(&t, kCores - 1);  // cores 0 to 2
  std::thread odd([&] {
    // A thread already joined elsewhere: its seat's join fails with INVALID_ARGUMENT.
    tpu_joined_step j = TPU_JOINED_STEP_INIT;
    tpu_status st;
    do st = tpu_step_join(g_sys, 3, 1000, &j);
    while (st == TPU_DEADLINE_EXCEEDED);
    assert_int_equal(st, TPU_OK);  // the probe step below
    tpurt::ReplicaPool::Seat* seat = pool.seat(3);
    assert_int_equal(seat->next(0), tpurt::ReplicaPool::Seat::kEnded);
    delete seat;
    tpu_tensor* out = nullptr;
    tpu_step_leave(j.ctx, tpu_replica_context_fail(j.ctx, TPU_ABORTED, "probe"), &out, j.num_outputs > 0 ? 1 : 0);
  });
  assert_int_not_equal(pool_step(), TPU_OK);  // replica 3 failed ("probe")
  odd.join();
  std::string message;
  std::vector<int> cores;
  assert_int_equal(pool.takeEnded(&message, &cores), TPU_INVALID_ARGUMENT);
  assert_int_equal(static_cast<int>(cores.size()), 1);
  assert_int_equal(cores[0], 3);
  assert_non_null(strstr(message.c_str(), "the replica thread of core 3 ended: tpu_step_join failed"));
  cores.clear();
  assert_int_equal(pool.takeEnded(&message, &cores), 0);  // once
  t.threads.emplace_back(serve, &t, 3);
  CHECK_OK(pool_step());
  pool.stop();
  join_threads(&t);
}

// The library pins a joined thread while the system pins its workers; the seat gives
// the thread its CPUs back when it ends (a Go thread returns to Go's scheduler).
void test_replica_pool__a_thread_gets_its_cpus_back(void**) {
  cpu_set_t before;
  assert_int_equal(sched_getaffinity(0, sizeof before, &before), 0);
  if (CPU_COUNT(&before) < 2) skip();
  g_sys = start_system(TPU_PIN_ALWAYS);
  tpurt::ReplicaPool pool(g_sys, kCores);
  std::atomic<int> pinned{0}, restored{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kCores; ++c)
    threads.emplace_back([&, c] {
      tpurt::ReplicaPool::Seat* seat = pool.seat(c);
      int status = 0;
      while (seat->next(status) == tpurt::ReplicaPool::Seat::kRun) {
        cpu_set_t now;
        sched_getaffinity(0, sizeof now, &now);
        if (CPU_COUNT(&now) == 1) pinned.fetch_add(1);
        tpurt::ReplicaContext& ctx = seat->context();
        ctx.setOutput(0, ctx.crossReplicaSum(ctx.input(0), tpurt::GroupAssignment(), tpurt::CollectiveOptions()));
        status = 0;
      }
      delete seat;
      cpu_set_t after;
      sched_getaffinity(0, sizeof after, &after);
      if (CPU_EQUAL(&after, &before)) restored.fetch_add(1);
    });
  CHECK_OK(pool_step());
  pool.stop();
  for (std::thread& th : threads) th.join();
  assert_int_equal(pinned.load(), kCores);    // the library pinned each while it ran
  assert_int_equal(restored.load(), kCores);  // and each got its CPUs back
}

void test_replica_pool__arguments(void**) {
  g_sys = start_system(TPU_PIN_NEVER);
  try {
    tpurt::ReplicaPool pool(nullptr, 2);
    fail_msg("a NULL system was accepted");
  } catch (const tpurt::Error& e) {
    assert_int_equal(e.code(), TPU_INVALID_ARGUMENT);
  }
  try {
    tpurt::ReplicaPool pool(g_sys, 0);
    fail_msg("0 cores were accepted");
  } catch (const tpurt::Error& e) {
    assert_int_equal(e.code(), TPU_INVALID_ARGUMENT);
  }
  tpurt::ReplicaPool pool(g_sys, kCores);
  try {
    delete pool.seat(kCores);
    fail_msg("a core out of range was accepted");
  } catch (const tpurt::Error& e) {
    assert_int_equal(e.code(), TPU_INVALID_ARGUMENT);
    assert_non_null(strstr(e.what(), "core is 4; the pool serves cores 0 to 3"));
  }
}

// tpurt::replicate_joined, the bindings' one-call plain step: the same outputs as
// tpu_replicate's caller-threads step, no pool thread left inside a computation, and
// its failures named: a core no thread serves, and counts that cannot be a step.
void test_replica_pool__replicate_joined_is_the_plain_step(void**) {
  g_sys = start_system(TPU_PIN_NEVER);
  Threads t;
  tpurt::ReplicaPool pool(g_sys, kCores);
  t.pool = &pool;
  start_threads(&t, kCores - 1);  // core 3 first: its participant never starts
  std::vector<tpurt::Tensor> in;
  for (int r = 0; r < kCores; ++r) {
    const float v = 0.1f * static_cast<float>(r + 1);
    const int64_t dims[1] = {1};
    tpu_tensor* h = nullptr;
    CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 1, &v, sizeof v, &h));
    in.emplace_back(h);
  }
  std::vector<tpurt::Tensor*> in_ptrs;
  for (tpurt::Tensor& x : in) in_ptrs.push_back(&x);
  tpurt::Tensor* out[kCores] = {nullptr};
  assert_int_equal(tpurt::replicate_joined(g_sys, kKey, kCores, 1, in_ptrs.data(), 1, out, 200), TPU_DEADLINE_EXCEEDED);
  assert_non_null(strstr(tpu_last_error(), "replica 3 (core 3) never started"));
  for (tpurt::Tensor* o : out) assert_null(o);
  t.threads.emplace_back(serve, &t, kCores - 1);
  // The general step's sum, bit for bit (0.1 + 0.2 + 0.3 + 0.4 in the library's order).
  tpu_tensor* general[kCores] = {nullptr};
  std::vector<tpu_tensor*> handles = tpurt::Tensor::handles(in);
  tpu_step_options o = TPU_STEP_OPTIONS_INIT;
  o.caller_threads = 1;
  CHECK_OK(tpu_replicate(g_sys, nullptr, reinterpret_cast<void*>(static_cast<intptr_t>(kKey)), kCores, 1,
                         handles.data(), 1, general, &o));
  CHECK_OK(tpurt::replicate_joined(g_sys, kKey, kCores, 1, in_ptrs.data(), 1, out, 0));
  for (int r = 0; r < kCores; ++r) {
    const void *a = nullptr, *b = nullptr;
    CHECK_OK(tpu_tensor_data(general[r], &a));
    assert_non_null(out[r]);
    CHECK_OK(tpu_tensor_data(out[r]->handleOrNull(), &b));
    assert_memory_equal(a, b, sizeof(float));
    tpu_tensor_release(general[r]);
    delete out[r];
  }
  assert_int_equal(pool.running(), 0);
  assert_int_equal(tpurt::replicate_joined(g_sys, kKey, -1, 1, in_ptrs.data(), 1, out, 0), TPU_INVALID_ARGUMENT);
  assert_non_null(strstr(tpu_last_error(), "a step of -1 replicas, 1 inputs and 1 outputs each"));
  pool.stop();
  join_threads(&t);
  assert_int_equal(t.wrong_key.load(), 0);
}

}  // namespace

int main(int argc, char** argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_replica_pool__steps_run_on_the_seats, teardown),
      cmocka_unit_test_teardown(test_replica_pool__stop_ends_the_threads_without_a_shutdown, teardown),
      cmocka_unit_test_teardown(test_replica_pool__shutdown_ends_the_pool, teardown),
      cmocka_unit_test_teardown(test_replica_pool__a_busy_core_is_waited_out, teardown),
      cmocka_unit_test_teardown(test_replica_pool__a_join_error_ends_the_thread_and_is_reported_once, teardown),
      cmocka_unit_test_teardown(test_replica_pool__a_thread_gets_its_cpus_back, teardown),
      cmocka_unit_test_teardown(test_replica_pool__arguments, teardown),
      cmocka_unit_test_teardown(test_replica_pool__replicate_joined_is_the_plain_step, teardown),
  };
  return RUN_TESTS(argc, argv, tests, nullptr, nullptr);
}
