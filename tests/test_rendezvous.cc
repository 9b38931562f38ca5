// The rendezvous (lib/collectives/rendezvous.h) on its own: arrival and the data
// peers see, descriptor mismatches, the deadline naming who is missing, abort,
// departure and chunk claiming. One thread per rank records what it got; the test's
// own thread asserts after joining them.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/rendezvous.h"
#include "tpurt.h"

// After the C++ and library headers: cmocka defines a macro named fail().
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
extern "C" {
#include <cmocka.h>
}

#include "test_util.h"

using tpurt::CollectiveKind;
using tpurt::Descriptor;
using tpurt::Record;
using tpurt::Rendezvous;

namespace {

using Clock = std::chrono::steady_clock;

// What one rank's thread ended with.
struct Outcome {
  tpu_status code = TPU_OK;
  std::string message;
  long wrong = 0;  // values that differed from the expected ones
};

// Runs body(rank) on one thread per rank in `ranks`; an Error it throws is its outcome.
std::vector<Outcome> run_ranks(int size, const std::vector<int>& ranks,
                               const std::function<void(int, Outcome&)>& body) {
  std::vector<Outcome> out(size);
  std::vector<std::thread> threads;
  for (int r : ranks)
    threads.emplace_back([&, r] {
      try {
        body(r, out[r]);
      } catch (const tpurt::Error& e) {
        out[r].code = e.code();
        out[r].message = e.message();
      } catch (...) {
        out[r].code = TPU_UNKNOWN;
        out[r].message = "an exception that is not a tpurt::Error";
      }
    });
  for (auto& t : threads) t.join();
  return out;
}

std::vector<int> all_ranks(int size) {
  std::vector<int> v(size);
  for (int r = 0; r < size; ++r) v[r] = r;
  return v;
}

Descriptor float_all_reduce(int64_t count, int group_size) {
  Descriptor d{};
  d.kind = CollectiveKind::kAllReduce;
  d.op = TPU_REDUCE_SUM;
  d.dtype = TPU_FLOAT;
  d.rank = 1;
  d.dims[0] = count;
  d.num_groups = 1;
  d.group_size = group_size;
  return d;
}

// Publishes `d` for the next collective of `rank` and waits for the others.
uint64_t meet(Rendezvous& rv, int rank, const Descriptor& d) {
  uint64_t seq = 0;
  Record& rec = rv.begin(rank, &seq);
  rec.desc = d;
  rv.arrive_and_check(rank, seq);
  return seq;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void assert_outcome(const Outcome& o, tpu_status code, const char* fragment) {
  if (o.code != code || o.message.find(fragment) == std::string::npos)
    fail_msg("got %s \"%s\"; expected %s with \"%s\"", tpu_status_name(o.code), o.message.c_str(),
             tpu_status_name(code), fragment);
}

}  // namespace

// Every rank sees every peer's line data and record for each collective, in order.
static void test_rendezvous__arrival_shows_every_peers_data(void **state) {
  (void)state;
  const int n = 4, rounds = 300;
  Rendezvous rv(n, time_limit_ms(10000), 64);
  rv.reset(nullptr);
  static int64_t inputs[n][rounds];
  auto out = run_ranks(n, all_ranks(n), [&](int r, Outcome& o) {
    for (int k = 0; k < rounds; ++k) {
      uint64_t seq = 0;
      Record& rec = rv.begin(r, &seq);
      if (seq != static_cast<uint64_t>(k + 1)) ++o.wrong;
      rec.desc = float_all_reduce(2, n);
      inputs[r][k] = 1000 * r + k;
      rec.input = &inputs[r][k];
      const int64_t line = 7 * r + k;
      rv.set_line_data(r, seq, &line, sizeof line);
      rv.arrive_and_check(r, seq);
      for (int q = 0; q < n; ++q) {
        int64_t got = 0;
        std::memcpy(&got, rv.line_data(q, seq), sizeof got);
        if (got != 7 * q + k) ++o.wrong;
        if (*static_cast<const int64_t*>(rv.record(q, seq).input) != 1000 * q + k) ++o.wrong;
      }
    }
  });
  for (int r = 0; r < n; ++r) {
    assert_outcome(out[r], TPU_OK, "");
    assert_int_equal(out[r].wrong, 0);
  }
  assert_false(rv.aborted());
}

// A rendezvous of one: nothing to wait for.
static void test_rendezvous__single_rank(void **state) {
  (void)state;
  Rendezvous rv(1, 100, 1);
  rv.reset(nullptr);
  for (uint64_t k = 1; k <= 3; ++k) assert_int_equal(meet(rv, 0, float_all_reduce(1, 1)), k);
}

// One rank that differs is named, with what it called and what the others called;
// every rank fails with the same message.
static void test_rendezvous__mismatch_names_who_differs(void **state) {
  (void)state;
  const int n = 4;
  Rendezvous rv(n, time_limit_ms(10000), 64);
  rv.reset(nullptr);
  auto out = run_ranks(n, all_ranks(n), [&](int r, Outcome&) {
    Descriptor d = float_all_reduce(4, n);
    if (r == 2) d.dtype = TPU_INT32;
    meet(rv, r, d);
  });
  for (int r = 0; r < n; ++r) {
    assert_outcome(out[r], TPU_INVALID_ARGUMENT,
                   "collective #1: replicas disagree with the 3 that called all_reduce float32[4] op=sum");
    assert_outcome(out[r], TPU_INVALID_ARGUMENT, "replica 2 called all_reduce int32[4]");
    assert_string_equal(out[r].message.c_str(), out[0].message.c_str());
  }
  assert_true(rv.aborted());

  // After a reset the same rendezvous serves a new step: two ranks differ this time.
  rv.reset(nullptr);
  assert_false(rv.aborted());
  out = run_ranks(n, all_ranks(n), [&](int r, Outcome&) {
    Descriptor d = float_all_reduce(4, n);
    meet(rv, r, d);  // collective #1 of the new step matches
    if (r == 1 || r == 3) d.op = TPU_REDUCE_MAX;
    meet(rv, r, d);
  });
  for (int r = 0; r < n; ++r) {
    assert_outcome(out[r], TPU_INVALID_ARGUMENT, "collective #2");
    assert_outcome(out[r], TPU_INVALID_ARGUMENT, "replica 1 called all_reduce float32[4] op=max");
    assert_outcome(out[r], TPU_INVALID_ARGUMENT, "; replica 3 called all_reduce float32[4] op=max");
  }
}

// The ranks that came wait until the deadline, then fail naming the ranks that did not.
static void test_rendezvous__deadline_names_the_missing(void **state) {
  (void)state;
  Rendezvous rv(3, 100, 64);
  rv.reset(nullptr);
  auto t0 = Clock::now();
  auto out = run_ranks(3, {0, 1}, [&](int r, Outcome&) { meet(rv, r, float_all_reduce(4, 3)); });
  const double waited = seconds_since(t0);
  for (int r = 0; r < 2; ++r)
    assert_outcome(out[r], TPU_DEADLINE_EXCEEDED,
                   "collective #1 (all_reduce float32[4] op=sum groups=1x3 (hash 0)) timed out after "
                   "100 ms waiting for replicas [2]");
  assert_true(waited >= 0.099 && waited < time_limit(5.0));
  assert_true(rv.aborted());

  // Several missing: all named.
  Rendezvous four(4, 50, 64);
  four.reset(nullptr);
  out = run_ranks(4, {0}, [&](int r, Outcome&) { meet(four, r, float_all_reduce(4, 4)); });
  assert_outcome(out[0], TPU_DEADLINE_EXCEEDED, "waiting for replicas [1, 2, 3]");

  // The finish phase too: everyone arrived, rank 2 never finished.
  rv.reset(nullptr);
  out = run_ranks(3, all_ranks(3), [&](int r, Outcome&) {
    uint64_t seq = meet(rv, r, float_all_reduce(4, 3));
    if (r != 2) rv.finish(r, seq);
  });
  assert_outcome(out[0], TPU_DEADLINE_EXCEEDED, "waiting for replicas [2]");
  assert_outcome(out[1], TPU_DEADLINE_EXCEEDED, "waiting for replicas [2]");
  assert_outcome(out[2], TPU_OK, "");
}

// An abort wakes the waiters at once, long before the deadline; the first failure's
// message is the one everybody gets, and a rank that arrives later fails at once.
static void test_rendezvous__abort_wakes_the_waiters(void **state) {
  (void)state;
  Rendezvous rv(3, time_limit_ms(10000), 64);
  rv.reset(nullptr);
  auto t0 = Clock::now();
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    rv.abort(2, TPU_INTERNAL, "boom");
    rv.poison(TPU_DATA_LOSS, "second failure");  // too late: the first one stands
  });
  auto out = run_ranks(3, {0, 1}, [&](int r, Outcome&) { meet(rv, r, float_all_reduce(4, 3)); });
  const double waited = seconds_since(t0);
  aborter.join();
  for (int r = 0; r < 2; ++r)
    assert_outcome(out[r], TPU_ABORTED, "replica 2 failed (INTERNAL): boom");
  assert_true(waited < time_limit(2.0));
  out = run_ranks(3, {2}, [&](int r, Outcome&) { meet(rv, r, float_all_reduce(4, 3)); });
  assert_outcome(out[2], TPU_ABORTED, "replica 2 failed (INTERNAL): boom");

  // An abort that is no replica's, and a poison, keep their own code.
  rv.reset(nullptr);
  rv.abort(-1, TPU_CANCELLED, "shutting down");
  out = run_ranks(3, {0}, [&](int r, Outcome&) { meet(rv, r, float_all_reduce(4, 3)); });
  assert_outcome(out[0], TPU_ABORTED, "step aborted (CANCELLED): shutting down");
  rv.reset(nullptr);
  rv.poison(TPU_DATA_LOSS, "bad wire");
  out = run_ranks(3, {1}, [&](int r, Outcome&) { meet(rv, r, float_all_reduce(4, 3)); });
  assert_outcome(out[1], TPU_DATA_LOSS, "bad wire");
}

// A rank that leaves without joining is named at once; one that joined and then left
// is fine.
static void test_rendezvous__departure(void **state) {
  (void)state;
  Rendezvous rv(2, time_limit_ms(10000), 64);
  rv.reset(nullptr);
  auto t0 = Clock::now();
  auto out = run_ranks(2, all_ranks(2), [&](int r, Outcome&) {
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      rv.depart(1);
    } else {
      meet(rv, r, float_all_reduce(4, 2));
    }
  });
  assert_outcome(out[0], TPU_FAILED_PRECONDITION,
                 "replica 1 finished its computation without joining collective #1 (all_reduce "
                 "float32[4]");
  assert_outcome(out[0], TPU_FAILED_PRECONDITION, "that replica 0 is in");
  assert_true(seconds_since(t0) < time_limit(2.0));

  rv.reset(nullptr);
  out = run_ranks(2, all_ranks(2), [&](int r, Outcome&) {
    meet(rv, r, float_all_reduce(4, 2));
    if (r == 1) rv.depart(1);
  });
  assert_outcome(out[0], TPU_OK, "");
  assert_outcome(out[1], TPU_OK, "");
}

// The chunks of a collective are handed out once each, and numbering restarts at 0
// for the next collective.
static void test_rendezvous__claim_chunk_partitions_the_work(void **state) {
  (void)state;
  const int n = 3, chunks = 100, rounds = 20;
  Rendezvous rv(n, time_limit_ms(10000), 64);
  rv.reset(nullptr);
  static std::vector<int64_t> claimed[n][rounds];
  auto out = run_ranks(n, all_ranks(n), [&](int r, Outcome&) {
    for (int k = 0; k < rounds; ++k) {
      uint64_t seq = meet(rv, r, float_all_reduce(4, n));
      for (int64_t c; (c = rv.claim_chunk(0, seq)) < chunks;) claimed[r][k].push_back(c);
      rv.finish(r, seq);  // nobody claims on this parity again before the next meeting
    }
  });
  for (int r = 0; r < n; ++r) assert_outcome(out[r], TPU_OK, "");
  for (int k = 0; k < rounds; ++k) {
    std::vector<int64_t> all;
    for (int r = 0; r < n; ++r) all.insert(all.end(), claimed[r][k].begin(), claimed[r][k].end());
    std::sort(all.begin(), all.end());
    assert_int_equal(all.size(), chunks);
    for (int c = 0; c < chunks; ++c) assert_int_equal(all[c], c);
  }
}

// More ranks than CPUs, pinned (several per CPU, and CPU ids it does not know): the
// waits take the yield and spin-instead paths and still deliver every collective.
static void test_rendezvous__oversubscribed_and_pinned(void **state) {
  (void)state;
  const int n = 6, rounds = 200;
  const int cpus[][n] = {{0, 0, 0, 1, 1, 1}, {0, -1, 5000, 0, 1, 0}};
  for (const auto& cpu_of_rank : cpus) {
    Rendezvous rv(n, time_limit_ms(10000), 2);
    rv.reset(cpu_of_rank);
    auto out = run_ranks(n, all_ranks(n), [&](int r, Outcome& o) {
      for (int k = 0; k < rounds; ++k) {
        uint64_t seq = 0;
        Record& rec = rv.begin(r, &seq);
        rec.desc = float_all_reduce(1, n);
        const int64_t v = r + k;
        rv.set_line_data(r, seq, &v, sizeof v);
        rv.arrive_and_check(r, seq);
        int64_t sum = 0;
        for (int q = 0; q < n; ++q) {
          int64_t got;
          std::memcpy(&got, rv.line_data(q, seq), sizeof got);
          sum += got;
        }
        if (sum != n * (n - 1) / 2 + n * k) ++o.wrong;
        rv.finish(r, seq);
      }
    });
    for (int r = 0; r < n; ++r) {
      assert_outcome(out[r], TPU_OK, "");
      assert_int_equal(out[r].wrong, 0);
    }
  }
}

// What makes two descriptors the same collective, and how they read in messages.
static void test_rendezvous__descriptor(void **state) {
  (void)state;
  Descriptor a = float_all_reduce(4, 2), b = a;
  b.dims[3] = 99;  // beyond the rank: not part of the shape
  assert_true(a == b);
  assert_int_equal(a.digest(), b.digest());
  const std::vector<std::function<void(Descriptor&)>> changes = {
      [](Descriptor& d) { d.kind = CollectiveKind::kReduceScatter; },
      [](Descriptor& d) { d.op = TPU_REDUCE_MIN; },
      [](Descriptor& d) { d.dtype = TPU_DOUBLE; },
      [](Descriptor& d) { d.dims[0] = 5; },
      [](Descriptor& d) { d.rank = 2, d.dims[1] = 1; },
      [](Descriptor& d) { d.params[2] = 1; },
      [](Descriptor& d) { d.bf16_wire = 1; },
      [](Descriptor& d) { d.num_groups = 2; },
      [](Descriptor& d) { d.group_size = 1; },
      [](Descriptor& d) { d.groups_hash = 1; }};
  for (const auto& change : changes) {
    Descriptor c = a;
    change(c);
    assert_false(c == a);
    assert_true(c.digest() != a.digest());
  }
  assert_string_equal(a.describe().c_str(), "all_reduce float32[4] op=sum groups=1x2 (hash 0)");
  Descriptor barrier{};
  barrier.kind = CollectiveKind::kBarrier;
  assert_string_equal(barrier.describe().c_str(), "barrier");
  Descriptor gather = a;
  gather.kind = CollectiveKind::kAllGather;
  gather.params[0] = 1;
  assert_non_null(strstr(gather.describe().c_str(), "all_gather float32[4] axis=1"));
  assert_string_equal(tpurt::kind_name(CollectiveKind::kCollectivePermute), "collective_permute");
}

int main(int argc, char** argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rendezvous__arrival_shows_every_peers_data),
      cmocka_unit_test(test_rendezvous__single_rank),
      cmocka_unit_test(test_rendezvous__mismatch_names_who_differs),
      cmocka_unit_test(test_rendezvous__deadline_names_the_missing),
      cmocka_unit_test(test_rendezvous__abort_wakes_the_waiters),
      cmocka_unit_test(test_rendezvous__departure),
      cmocka_unit_test(test_rendezvous__claim_chunk_partitions_the_work),
      cmocka_unit_test(test_rendezvous__oversubscribed_and_pinned),
      cmocka_unit_test(test_rendezvous__descriptor),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
