// Posted gathers over shared memory (ShmTransport::gather_posts, net/posted_gather.h):
// tasks as threads of this process or a forked process. Many posts of every size mixed
// with exchanges, every byte checked; peer sets that vary between collectives (the rule
// for rewriting a slot); the errors of net::Transport::exchange (a peer that ends its
// step, one in another collective, other digests or sizes, the deadline, an interrupt,
// a killed or stopped process); and a hostile peer's post slots.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "net/shm_segment.h"
#include "net/shm_transport.h"
#include "tpurt.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
extern "C" {
#include <cmocka.h>
}

#include "test_util.h"
#include "transport_util.h"

namespace {

namespace shm = tpurt::net::shm;
constexpr size_t kGuard = 64;        // bytes after each receive buffer that must stay poisoned
constexpr unsigned char kPoison = 0xEE;
constexpr int kPost = 7;             // the `to` of a post's pattern (every reader gets the same)

// The byte k of what task `from` gives `to` (or posts: kPost) in collective `seq` of
// `step`. The first byte alone differs between tasks and between nearby collectives, the
// next ones carry a 64-bit mix of all four: stale, swapped or misplaced data shows.
struct Pattern {
  Pattern(uint64_t step, int from, int to, uint64_t seq) {
    uint64_t h = step * 0x9E3779B97F4A7C15ull ^ seq * 0xC2B2AE3D27D4EB4Full ^
                 uint64_t(from * 8 + to + 1) * 0x165667B19E3779F9ull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    mix = h ^ (h >> 32);
    first = static_cast<unsigned char>(seq * 7 + from * 85 + to * 29 + step * 50);
  }
  unsigned char operator()(size_t k) const {
    return k == 0 ? first : static_cast<unsigned char>((mix >> ((k % 8) * 8)) + k * 31 + (k >> 8));
  }
  uint64_t mix;
  unsigned char first;
};

void fill(std::vector<unsigned char>* v, size_t bytes, const Pattern& p) {
  v->resize(bytes);
  for (size_t k = 0; k < bytes; ++k) (*v)[k] = p(k);
}

// A receive buffer: `bytes` then kGuard poisoned bytes.
struct Inbox {
  std::vector<unsigned char> buf = std::vector<unsigned char>(shm::kPostBytes + kGuard);
  void poison(size_t bytes) { std::memset(buf.data(), kPoison, bytes + kGuard); }
  // Wrong bytes: the payload against p, the guard against the poison.
  size_t wrong(size_t bytes, const Pattern& p) const {
    size_t n = 0;
    for (size_t k = 0; k < bytes; ++k) n += buf[k] != p(k);
    for (size_t k = bytes; k < bytes + kGuard; ++k) n += buf[k] != kPoison;
    return n;
  }
};

uint64_t digest_of(uint64_t seq) { return seq * 1000003 + 11; }

void gather(ShmTransport& t, uint64_t seq, uint64_t digest, const void* mine, size_t bytes,
            const std::vector<Recv>& from, Clock::time_point deadline,
            const std::function<void()>& check = no_check) {
  t.gather_posts(seq, digest, mine, bytes, from.data(), from.size(), deadline, check, name);
}

// The stamp of post k of a step (as lib/net/shm_transport.cc makes it).
uint64_t stamp_of(uint64_t step, uint64_t k) { return (step << 32) | (k + 1); }

// Fails with every task's error, when any.
void check_all_ok(const std::vector<Result>& results, const char* what) {
  std::string errors;
  for (size_t i = 0; i < results.size(); ++i)
    if (results[i].code != TPU_OK)
      errors += tpurt::str_cat("\n  task ", i, ": ", tpurt::status_name(results[i].code), " ",
                               results[i].message);
  if (!errors.empty()) CHECK_FAIL("%s:%s", what, errors.c_str());
}

// One task's step: body() between begin_step and end_step. A failure ends the step with
// it, so that the peers abort at once rather than at their deadlines, and is rethrown.
// Returns whether a peer's step failed.
bool run_step(ShmTransport& t, uint64_t step, const std::function<void()>& body) {
  t.begin_step(step);
  StepOutcome remote;
  try {
    body();
  } catch (const tpurt::Error& e) {
    t.end_step(StepOutcome{e.code(), -1, e.message()}, time_limit_ms(10000), &remote, name);
    throw;
  }
  return t.end_step(StepOutcome{}, time_limit_ms(10000), &remote, name);
}

}  // namespace

// 3 tasks, two steps of 2000 collectives each: posts of 0, 1, 8, 100, 4095 and
// kPostBytes bytes (each task's size differs from its peers'), every 7th collective an
// exchange of all pairs instead, sharing the numbering. Every byte arrives where it is
// due, nothing past it is written, and every step ends well.
static void test_posts__many_posts(void **) {
  const int n = 3;
  const uint64_t kCollectives = 2000;
  const size_t sizes[] = {0, 1, 8, 100, 4095, shm::kPostBytes};
  auto post_size = [&](int task, uint64_t c) { return sizes[(c * 5 + task) % 6]; };
  auto exchange_size = [](int from, int to, uint64_t c) { return size_t((c * 13 + from * 3 + to) % 300); };
  auto t = make_shm(n);
  std::vector<size_t> wrong(n, 0), posts(n, 0), exchanges(n, 0);
  std::vector<int> remote_failed(n, -1);
  for (uint64_t step = 1; step <= 2; ++step) {
    auto results = run_tasks(n, [&](int me) {
      std::vector<Inbox> in(n);
      std::vector<std::vector<unsigned char>> out(n);
      std::vector<unsigned char> mine;
      std::vector<Recv> from;
      std::vector<Send> sends;
      remote_failed[me] = run_step(*t[me], step, [&] {
        for (uint64_t c = 1; c <= kCollectives; ++c) {
          from.clear();
          if (c % 7 == 0) {
            sends.clear();
            for (int p = 0; p < n; ++p) {
              if (p == me) continue;
              fill(&out[p], exchange_size(me, p, c), Pattern(step, me, p, c));
              sends.push_back({p, 1, out[p].data(), out[p].size()});
              in[p].poison(exchange_size(p, me, c));
              from.push_back({p, 1, in[p].buf.data(), exchange_size(p, me, c)});
            }
            t[me]->exchange(c, digest_of(c), sends.data(), sends.size(), from.data(), from.size(),
                            in_ms(time_limit_ms(20000)), no_check, name);
            for (int p = 0; p < n; ++p)
              if (p != me) wrong[me] += in[p].wrong(exchange_size(p, me, c), Pattern(step, p, me, c));
            ++exchanges[me];
          } else {
            fill(&mine, post_size(me, c), Pattern(step, me, kPost, c));
            for (int p = 0; p < n; ++p) {
              if (p == me) continue;
              in[p].poison(post_size(p, c));
              from.push_back({p, 0, in[p].buf.data(), post_size(p, c)});
            }
            gather(*t[me], c, digest_of(c), mine.data(), mine.size(), from, in_ms(time_limit_ms(20000)));
            for (int p = 0; p < n; ++p)
              if (p != me) wrong[me] += in[p].wrong(post_size(p, c), Pattern(step, p, kPost, c));
            ++posts[me];
          }
        }
      });
    });
    check_all_ok(results, step == 1 ? "step 1" : "step 2");
    for (int i = 0; i < n; ++i) {
      CHECK(remote_failed[i] == 0);
      CHECK(wrong[i] == 0);
    }
  }
  for (int i = 0; i < n; ++i)
    CHECK(posts[i] == 2 * (kCollectives - kCollectives / 7) && exchanges[i] == 2 * (kCollectives / 7));
}

// 4 tasks (more than this machine's CPUs, so that tasks are preempted anywhere), 100 steps
// of 1001 collectives: posted gathers alternating with exchanges, a gather last before
// the end of the step. A task still waiting for posts may find a peer's frames of the
// next collective, or its step's end, in its ring: the peer has posted since, and its
// post is taken, not reported as a peer elsewhere.
static void test_posts__posts_between_exchanges(void **) {
  const int n = 4;
  auto t = make_shm(n);
  std::vector<size_t> wrong(n, 0);
  std::vector<int> remote_failed(n, -1);
  for (uint64_t step = 1; step <= 100; ++step) {
    auto results = run_tasks(n, [&](int me) {
      std::vector<Inbox> in(n);
      std::vector<std::vector<unsigned char>> out(n);
      std::vector<Recv> from;
      std::vector<Send> sends;
      remote_failed[me] = run_step(*t[me], step, [&] {
        for (uint64_t c = 1; c <= 1001; ++c) {
          from.clear();
          sends.clear();
          const int to = c % 2 ? kPost : 0;  // a post, or the exchange's pattern (to: the receiver)
          for (int p = 0; p < n; ++p) {
            if (p == me) continue;
            fill(&out[p], 8, Pattern(step, me, to == kPost ? kPost : p, c));
            sends.push_back({p, 0, out[p].data(), 8});
            in[p].poison(8);
            from.push_back({p, 0, in[p].buf.data(), 8});
          }
          if (c % 2)
            gather(*t[me], c, digest_of(c), out[(me + 1) % n].data(), 8, from, in_ms(time_limit_ms(20000)));
          else
            t[me]->exchange(c, digest_of(c), sends.data(), sends.size(), from.data(), from.size(),
                            in_ms(time_limit_ms(20000)), no_check, name);
          for (const Recv& r : from)
            wrong[me] += in[r.peer].wrong(8, Pattern(step, r.peer, to == kPost ? kPost : me, c));
        }
      });
    });
    check_all_ok(results, tpurt::str_cat("step ", step).c_str());
    for (int i = 0; i < n; ++i) CHECK(remote_failed[i] == 0 && wrong[i] == 0);
  }
}

// Peer sets that change from one collective to the next: in every other collective only
// a pair reads each other (task 0 and 1 in step 1, a pair rotating over the three in
// step 2) while the third task posts and reads nobody; in between everyone reads
// everyone. A slot is then rewritten only after a peer that read it two posts ago has
// said so (`consumed`); data arrive exact and no wait reaches its deadline.
static void test_posts__varying_peers(void **) {
  const int n = 3;
  const uint64_t kCollectives = 600;
  auto t = make_shm(n);
  std::vector<size_t> wrong(n, 0), reads(n, 0);
  std::vector<int> remote_failed(n, -1);
  for (uint64_t step = 1; step <= 2; ++step) {
    auto results = run_tasks(n, [&](int me) {
      std::vector<Inbox> in(n);
      std::vector<unsigned char> mine;
      std::vector<Recv> from;
      auto size = [](int task, uint64_t c) { return size_t(8 + (c * 3 + task) % 93); };
      remote_failed[me] = run_step(*t[me], step, [&] {
        for (uint64_t c = 1; c <= kCollectives; ++c) {
          from.clear();
          const int a = step == 1 ? 0 : int((c / 2) % 3), b = (a + 1) % 3;
          for (int p = 0; p < n; ++p) {
            if (p == me) continue;
            const bool reads_p = c % 2 == 0 || (me == a && p == b) || (me == b && p == a);
            if (!reads_p) continue;
            in[p].poison(size(p, c));
            from.push_back({p, 0, in[p].buf.data(), size(p, c)});
          }
          fill(&mine, size(me, c), Pattern(step, me, kPost, c));
          gather(*t[me], c, digest_of(c), mine.data(), mine.size(), from, in_ms(time_limit_ms(20000)));
          for (const Recv& r : from)
            wrong[me] += in[r.peer].wrong(r.bytes, Pattern(step, r.peer, kPost, c));
          reads[me] += from.size();
        }
      });
    });
    check_all_ok(results, step == 1 ? "step 1" : "step 2");
    for (int i = 0; i < n; ++i) {
      CHECK(remote_failed[i] == 0);
      CHECK(wrong[i] == 0);
    }
  }
  // Step 1: tasks 0 and 1 read 1 + 2 per pair of collectives, task 2 only 2; step 2:
  // each task is in two of the three rotating pairs.
  CHECK(reads[0] == 300 * 3 + 300 * 2 + 200 && reads[1] == reads[0]);
  CHECK(reads[2] == 300 * 2 + 300 * 2 + 200);
}

// A peer that ends its step where this task posts (after two gathers that worked): the
// waiter learns it at once from the end-of-step frame, TPU_FAILED_PRECONDITION naming the
// peer and the collective; a failed step's outcome comes as TPU_ABORTED with its message,
// and end_step reports it. The next step's posts work.
static void test_posts__peer_ends_step(void **) {
  auto t = make_shm(2);
  unsigned char mine[2][8], got[2][8];
  std::memset(mine, 3, sizeof mine);
  std::vector<StepOutcome> remote(2);
  std::vector<int> remote_failed(2, -1);
  auto from = [&](int me) { return std::vector<Recv>{{1 - me, 0, got[me], 8}}; };
  auto results = run_tasks(2, [&](int me) {
    t[me]->begin_step(1);
    for (uint64_t seq = 1; seq <= 2; ++seq)
      gather(*t[me], seq, 5, mine[me], 8, from(me), in_ms(time_limit_ms(20000)));
    if (me == 1) {
      remote_failed[1] = t[1]->end_step(StepOutcome{}, time_limit_ms(10000), &remote[1], name);
      return;
    }
    try {
      gather(*t[0], 3, 5, mine[0], 8, from(0), in_ms(time_limit_ms(20000)));
    } catch (...) {
      t[0]->end_step(StepOutcome{TPU_FAILED_PRECONDITION, -1, "x"}, time_limit_ms(10000), &remote[0], name);
      throw;
    }
  });
  CHECK(has(results[0], TPU_FAILED_PRECONDITION, "task 1 finished the step without calling collective #3"));
  CHECK(results[1].code == TPU_OK);
  CHECK(remote_failed[1] == 1 && remote[1].code == TPU_FAILED_PRECONDITION && remote[1].message == "x");

  remote_failed.assign(2, -1);
  results = run_tasks(2, [&](int me) {
    t[me]->begin_step(2);
    if (me == 1) {
      t[1]->end_step(StepOutcome{TPU_DATA_LOSS, 3, "replica 3: broken"}, time_limit_ms(10000), &remote[1],
                     name);
      return;
    }
    try {
      gather(*t[0], 1, 5, mine[0], 8, from(0), in_ms(time_limit_ms(20000)));
    } catch (...) {
      remote_failed[0] = t[0]->end_step(StepOutcome{TPU_ABORTED, -1, "collateral"}, time_limit_ms(10000),
                                        &remote[0], name);
      throw;
    }
  });
  CHECK(results[0].code == TPU_ABORTED);
  CHECK(results[0].message == "replica 3: broken");
  CHECK(remote_failed[0] == 1);
  CHECK(remote[0].code == TPU_DATA_LOSS && remote[0].origin_replica == 3 &&
        remote[0].message == "replica 3: broken");

  for (uint64_t step = 3; step <= 4; ++step) {
    remote_failed.assign(2, -1);
    results = run_tasks(2, [&](int me) {
      t[me]->begin_step(step);
      for (uint64_t seq = 1; seq <= 3; ++seq) {
        mine[me][0] = static_cast<unsigned char>(step * 16 + seq * 2 + me);
        gather(*t[me], seq, 5, mine[me], 8, from(me), in_ms(time_limit_ms(20000)));
        if (got[me][0] != static_cast<unsigned char>(step * 16 + seq * 2 + 1 - me))
          throw tpurt::Error(TPU_INTERNAL, "wrong data");
      }
      remote_failed[me] = t[me]->end_step(StepOutcome{}, time_limit_ms(10000), &remote[me], name);
    });
    for (int i = 0; i < 2; ++i) {
      if (results[i].code != TPU_OK) CHECK_FAIL("task %d: %s", i, results[i].message.c_str());
      CHECK(remote_failed[i] == 0);
    }
  }
}

// A peer in an exchange of another collective (sending to this task) while this task
// posts: the frame says where it is, TPU_INVALID_ARGUMENT naming it and its collective
// long before the deadline (which would be TPU_DEADLINE_EXCEEDED); the peer's exchange
// ends with this task's step (TPU_ABORTED, this task's message). The next step works,
// the streams still framed.
static void test_posts__peer_in_exchange(void **) {
  auto t = make_shm(2);
  unsigned char out[2][8], in[2][8], mine[2][8], got[2][8];
  std::memset(out, 4, sizeof out);
  std::memset(mine, 6, sizeof mine);
  std::vector<int> remote_failed(2, -1);
  std::vector<StepOutcome> remote(2);
  auto results = run_tasks(2, [&](int me) {
    t[me]->begin_step(1);
    try {
      if (me == 0) {
        gather(*t[0], 1, 10, mine[0], 8, {{1, 0, got[0], 8}}, in_ms(time_limit_ms(30000)));
      } else {
        Send s{0, 0, out[1], 8};
        Recv r{0, 0, in[1], 8};
        t[1]->exchange(2, 20, &s, 1, &r, 1, in_ms(time_limit_ms(30000)), no_check, name);
      }
    } catch (const tpurt::Error& e) {
      const StepOutcome mine_failed{e.code(), -1, me == 0 ? "posts mismatch" : "collateral"};
      remote_failed[me] = t[me]->end_step(mine_failed, time_limit_ms(10000), &remote[me], name);
      throw;
    }
  });
  CHECK(has(results[0], TPU_INVALID_ARGUMENT, "task 1 is in collective #2 of the step"));
  CHECK(has(results[0], TPU_INVALID_ARGUMENT, "while this task is in collective #1"));
  CHECK(has(results[1], TPU_ABORTED, "posts mismatch"));
  CHECK(remote_failed[1] == 1 && remote[1].code == TPU_INVALID_ARGUMENT);

  remote_failed.assign(2, -1);
  results = run_tasks(2, [&](int me) {
    t[me]->begin_step(2);
    out[me][0] = static_cast<unsigned char>(40 + me);
    mine[me][0] = static_cast<unsigned char>(60 + me);
    Send s{1 - me, 0, out[me], 8};
    Recv r{1 - me, 0, in[me], 8};
    t[me]->exchange(1, 20, &s, 1, &r, 1, in_ms(time_limit_ms(20000)), no_check, name);
    gather(*t[me], 2, 10, mine[me], 8, {{1 - me, 0, got[me], 8}}, in_ms(time_limit_ms(20000)));
    remote_failed[me] = t[me]->end_step(StepOutcome{}, time_limit_ms(10000), &remote[me], name);
  });
  for (int i = 0; i < 2; ++i) {
    if (results[i].code != TPU_OK) CHECK_FAIL("task %d: %s", i, results[i].message.c_str());
    CHECK(remote_failed[i] == 0);
    CHECK(in[i][0] == 40 + (1 - i) && got[i][0] == 60 + (1 - i));
  }
}

// Posts of the same collective number with other digests: TPU_INVALID_ARGUMENT on both
// tasks, each naming the other. A peer posting fewer bytes than this task expects:
// TPU_INVALID_ARGUMENT naming both sizes, the peer (which got what it expected) learns
// the failure from end_step. The next step works.
static void test_posts__mismatches(void **) {
  auto t = make_shm(2);
  unsigned char mine[2][8], got[2][8 + kGuard];
  std::memset(mine, 9, sizeof mine);
  std::vector<int> remote_failed(2, -1);
  std::vector<StepOutcome> remote(2);
  auto end_failed = [&](int me, const tpurt::Error& e) {
    remote_failed[me] = t[me]->end_step(StepOutcome{e.code(), -1, e.message()}, time_limit_ms(10000),
                                        &remote[me], name);
  };
  auto results = run_tasks(2, [&](int me) {
    t[me]->begin_step(1);
    try {
      gather(*t[me], 1, me == 0 ? 100 : 200, mine[me], 8, {{1 - me, 0, got[me], 8}},
             in_ms(time_limit_ms(20000)));
    } catch (const tpurt::Error& e) {
      end_failed(me, e);
      throw;
    }
  });
  CHECK(has(results[0], TPU_INVALID_ARGUMENT,
            "task 1 is in collective #1 of the step (descriptor digest c8)"));
  CHECK(has(results[1], TPU_INVALID_ARGUMENT,
            "task 0 is in collective #1 of the step (descriptor digest 64)"));

  remote_failed.assign(2, -1);
  std::memset(got, kPoison, sizeof got);
  results = run_tasks(2, [&](int me) {
    t[me]->begin_step(2);
    try {
      gather(*t[me], 1, 100, mine[me], me == 1 ? 4 : 8, {{1 - me, 0, got[me], 8}},
             in_ms(time_limit_ms(20000)));
    } catch (const tpurt::Error& e) {
      end_failed(me, e);
      throw;
    }
    remote_failed[me] = t[me]->end_step(StepOutcome{}, time_limit_ms(10000), &remote[me], name);
  });
  CHECK(has(results[0], TPU_INVALID_ARGUMENT,
            "task 1 posted 4 bytes for collective #1 where this task expects 8"));
  CHECK(results[1].code == TPU_OK);
  CHECK(remote_failed[1] == 1 && remote[1].code == TPU_INVALID_ARGUMENT);
  for (size_t k = 0; k < sizeof got[0]; ++k) CHECK(got[0][k] == kPoison);  // nothing copied

  remote_failed.assign(2, -1);
  results = run_tasks(2, [&](int me) {
    t[me]->begin_step(3);
    mine[me][7] = static_cast<unsigned char>(70 + me);
    gather(*t[me], 1, 100, mine[me], 8, {{1 - me, 0, got[me], 8}}, in_ms(time_limit_ms(20000)));
    remote_failed[me] = t[me]->end_step(StepOutcome{}, time_limit_ms(10000), &remote[me], name);
  });
  for (int i = 0; i < 2; ++i) {
    if (results[i].code != TPU_OK) CHECK_FAIL("task %d: %s", i, results[i].message.c_str());
    CHECK(remote_failed[i] == 0 && got[i][7] == 70 + (1 - i));
  }
}

// A peer that never posts: TPU_DEADLINE_EXCEEDED naming it. A peer that read this task's
// post but never said so (it is stuck in the same collective, waiting for a third task):
// two posts later this task does not rewrite the slot it may still be reading; the
// deadline names the peer and the post stays intact.
static void test_posts__deadline(void **) {
  {
    auto t = make_shm(2);
    unsigned char mine[8] = {1}, got[8];
    t[0]->begin_step(1);
    CHECK(has(thrown([&] { gather(*t[0], 1, 5, mine, 8, {{1, 0, got, 8}}, in_ms(200)); }),
              TPU_DEADLINE_EXCEEDED,
              "collective #1 of the step did not complete: no data arrived from task 1"));
  }
  auto t = make_shm(3, false);
  auto m0 = map_locator(t[0]->locator());
  CHECK(m0.base != nullptr);
  for (auto& x : t) x->seal();
  std::vector<unsigned char> first(100), later(100, 0x55);
  fill(&first, 100, Pattern(1, 0, kPost, 1));
  unsigned char got1[100], got0[100], got2[100];
  // Task 1 posts #0, reads task 0's, then waits for task 2 until its deadline; task 0
  // reads task 1's post.
  auto results = run_tasks(2, [&](int me) {
    t[me]->begin_step(1);
    if (me == 1)
      gather(*t[1], 1, 5, later.data(), 100, {{0, 0, got0, 100}, {2, 0, got2, 100}}, in_ms(300));
    else
      gather(*t[0], 1, 5, first.data(), 100, {{1, 0, got1, 100}}, in_ms(time_limit_ms(5000)));
  });
  CHECK(has(results[1], TPU_DEADLINE_EXCEEDED, "no data arrived from task 2"));
  CHECK(results[0].code == TPU_OK);
  CHECK(std::memcmp(got1, later.data(), 100) == 0 && std::memcmp(got0, first.data(), 100) == 0);
  gather(*t[0], 2, 6, later.data(), 100, {}, in_ms(time_limit_ms(5000)));  // nobody reads: slot 1
  Result r = thrown([&] { gather(*t[0], 3, 7, later.data(), 100, {{1, 0, got1, 100}}, in_ms(200)); });
  CHECK(has(r, TPU_DEADLINE_EXCEEDED, "collective #3 of the step did not complete"));
  CHECK(has(r, TPU_DEADLINE_EXCEEDED, "task 1"));
  const shm::PostSlot& slot0 = m0.posts(3)->slot[0];
  CHECK(slot0.stamp == stamp_of(1, 0) && slot0.seq == 1 && slot0.bytes == 100);
  CHECK(std::memcmp(slot0.data, first.data(), 100) == 0);
  shm::unmap(&m0);
}

// An interrupt while a task waits for a post: check() runs and its error comes out.
static void test_posts__interrupt(void **) {
  auto t = make_shm(2);
  unsigned char mine[8] = {0}, got[8];
  std::atomic<bool> stop{false};
  t[0]->begin_step(1);
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    stop = true;
    t[0]->interrupt();
  });
  Result r = thrown([&] {
    gather(*t[0], 1, 5, mine, 8, {{1, 0, got, 8}}, in_ms(time_limit_ms(30000)),
           [&] { if (stop) throw tpurt::Error(TPU_CANCELLED, "stopped by the test"); });
  });
  stopper.join();
  CHECK(has(r, TPU_CANCELLED, "stopped by the test"));
}

// A peer in another process, after a posted gather with it worked: killed with SIGKILL
// while this task waits for its next post, TPU_UNAVAILABLE naming it as exited (not the
// deadline); stopped with SIGSTOP, the deadline names it.
static void test_posts__peer_process(void **) {
  for (int sig : {SIGKILL, SIGSTOP}) {
    auto parent = std::unique_ptr<ShmTransport>(new ShmTransport(2, 0));
    ForkedPeer child(parent.get(), [](ShmTransport& me) {
      unsigned char mine[100], got[100];
      std::memset(mine, 7, sizeof mine);
      gather(me, 1, 9, mine, sizeof mine, {{0, 0, got, sizeof got}}, in_ms(30000));
      for (unsigned char c : got)
        if (c != 5) return 5;
      return 0;
    });
    CHECK(open_segments() == 0);  // sealed, and the child's was closed once mapped
    unsigned char mine[100], got[100];
    std::memset(mine, 5, sizeof mine);
    std::thread signaller([&] {
      if (child.body_done()) kill(child.pid, sig);  // the child read the post and waits
    });
    const std::vector<Recv> from{{1, 0, got, sizeof got}};
    Result first =
        thrown([&] { gather(*parent, 1, 9, mine, sizeof mine, from, in_ms(time_limit_ms(30000))); });
    // Stopped, the peer never posts: the short deadline is what names it.
    const int deadline_ms = sig == SIGKILL ? time_limit_ms(30000) : 300;
    Result second = thrown([&] { gather(*parent, 2, 9, mine, sizeof mine, from, in_ms(deadline_ms)); });
    signaller.join();
    if (first.code != TPU_OK) {
      kill(child.pid, SIGKILL);
      CHECK_FAIL("the first gather: %s", first.message.c_str());
    }
    CHECK(got[0] == 7 && got[99] == 7);
    if (sig == SIGKILL) {
      CHECK(has(second, TPU_UNAVAILABLE, "task 1"));
      CHECK(has(second, TPU_UNAVAILABLE,
                "the peer's process (pid " + std::to_string(child.pid) + ") has exited"));
    } else {
      CHECK(has(second, TPU_DEADLINE_EXCEEDED, "no data arrived from task 1"));
      kill(child.pid, SIGKILL);
    }
    CHECK(child.reap_killed());
  }
}

// A hostile peer's post slot (written through a mapping of its segment): a stamp of a
// later post of the step, sizes far past the post or the buffer, and a few hundred slots
// of random bytes (the stamp forced, or random within the step). Every outcome is OK with
// exactly the slot's data, TPU_INVALID_ARGUMENT naming the peer, or (a stamp that reads
// as no post yet) the deadline; nothing past the receive buffer is written, nothing crashes.
static void test_posts__hostile_slots(void **) {
  auto t = make_shm(2, false);
  auto m1 = map_locator(t[1]->locator());
  CHECK(m1.base != nullptr);
  for (auto& x : t) x->seal();
  shm::PostSlot& slot = m1.posts(2)->slot[0];  // post #0 of each step is in slot 0
  unsigned char mine[8] = {0};
  std::vector<unsigned char> in(shm::kPostBytes + kGuard);

  t[0]->begin_step(1);
  __atomic_store_n(&slot.stamp, stamp_of(1, 2), __ATOMIC_SEQ_CST);
  const std::vector<Recv> eight{{1, 0, in.data(), 8}};
  CHECK(has(thrown([&] { gather(*t[0], 1, 5, mine, 8, eight, in_ms(time_limit_ms(5000))); }),
            TPU_INVALID_ARGUMENT, "task 1 posted the step's small collective #2 while this task is in #0"));

  const uint64_t huge[] = {uint64_t(1) << 40, ~uint64_t(0), shm::kPostBytes + 1, 9};
  for (size_t i = 0; i < 4; ++i) {
    const uint64_t step = 2 + i;
    t[0]->begin_step(step);
    slot.seq = 1;
    slot.digest = 5;
    slot.bytes = huge[i];
    std::memset(slot.data, 0x11, sizeof slot.data);
    __atomic_store_n(&slot.stamp, stamp_of(step, 0), __ATOMIC_SEQ_CST);
    std::memset(in.data(), kPoison, in.size());
    CHECK(has(thrown([&] { gather(*t[0], 1, 5, mine, 8, eight, in_ms(time_limit_ms(5000))); }),
              TPU_INVALID_ARGUMENT,
              "task 1 posted " + std::to_string(huge[i]) +
                  " bytes for collective #1 where this task expects 8"));
    size_t touched = 0;
    for (unsigned char b : in) touched += b != kPoison;
    CHECK(touched == 0);
  }

  uint64_t state = 777;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 33);
  };
  int ok = 0, invalid = 0, late = 0;
  for (int round = 0; round < 400; ++round) {
    const uint64_t step = 100 + round, seq = 1 + round % 5, digest = 1000 + round;
    const size_t want = next() % (shm::kPostBytes + 1);
    unsigned char* raw = reinterpret_cast<unsigned char*>(&slot);
    for (size_t k = 0; k < sizeof slot; ++k) raw[k] = static_cast<unsigned char>(next());
    const int kind = round % 4;  // 0: fields random; 1: the collective right; 2: all right; 3: any stamp
    if (kind >= 1) slot.seq = seq, slot.digest = digest;
    if (kind == 1) slot.bytes = next() % 2 ? want ^ (1u << (next() % 14)) : next();
    if (kind == 2) slot.bytes = want;
    if (kind == 3) slot.stamp = (step << 32) | (next() % 3 == 0 ? next() % 3 : next());
    else slot.stamp = stamp_of(step, 0);
    t[0]->begin_step(step);
    std::memset(in.data(), kPoison, in.size());
    Result r = thrown([&] { gather(*t[0], seq, digest, mine, 8, {{1, 0, in.data(), want}}, in_ms(50)); });
    size_t guard_touched = 0;
    for (size_t k = want; k < want + kGuard; ++k) guard_touched += in[k] != kPoison;
    CHECK(guard_touched == 0);
    if (r.code == TPU_OK) {
      ++ok;
      CHECK(kind >= 2 && slot.bytes == want && std::memcmp(in.data(), slot.data, want) == 0);
    } else if (r.code == TPU_INVALID_ARGUMENT) {
      ++invalid;
      CHECK(has(r, TPU_INVALID_ARGUMENT, "task 1 "));
      CHECK(kind != 2);
      for (size_t k = 0; k < want; ++k) guard_touched += in[k] != kPoison;
      CHECK(guard_touched == 0);  // a refused post is not copied
    } else {
      ++late;
      CHECK(has(r, TPU_DEADLINE_EXCEEDED, "no data arrived from task 1"));
      CHECK(kind == 3 && (slot.stamp & 0xffffffffu) == 0);
    }
  }
  CHECK(ok >= 100 && invalid >= 150);  // each kind reached its outcome
  shm::unmap(&m1);
}

// What the caller gets wrong (the communicator's bugs, TPU_INTERNAL naming the value): a
// peer out of range or this task itself, a post or an expected post past post_bytes();
// a peer without shared memory (attached by socket, or not at all): TPU_UNAVAILABLE
// naming it. None of them posts: the next gather is post #0 and works.
static void test_posts__bad_arguments(void **) {
  auto t = make_shm(2);
  CHECK(t[0]->posts_reach_all() && t[0]->post_bytes() == shm::kPostBytes);
  std::vector<unsigned char> big(shm::kPostBytes + 1), got(shm::kPostBytes + 1);
  const auto deadline = in_ms(time_limit_ms(5000));
  t[0]->begin_step(1);
  for (int peer : {-1, 0, 2})
    CHECK(has(thrown([&] { gather(*t[0], 1, 5, big.data(), 8, {{peer, 0, got.data(), 8}}, deadline); }),
              TPU_INTERNAL, "a posted gather names task " + std::to_string(peer) + " of 2"));
  CHECK(has(thrown([&] { gather(*t[0], 1, 5, big.data(), big.size(), {{1, 0, got.data(), 8}}, deadline); }),
            TPU_INTERNAL, "a post of 16385 bytes (at most 16384)"));
  CHECK(has(thrown([&] { gather(*t[0], 1, 5, big.data(), 8, {{1, 0, got.data(), got.size()}}, deadline); }),
            TPU_INTERNAL, "a post of 16385 bytes expected (at most 16384)"));
  auto results = run_tasks(2, [&](int me) {
    if (me == 1) t[1]->begin_step(1);
    unsigned char mine = static_cast<unsigned char>(30 + me), in = 0;
    gather(*t[me], 1, 5, &mine, 1, {{1 - me, 0, &in, 1}}, deadline);
    if (in != 30 + (1 - me)) throw tpurt::Error(TPU_INTERNAL, "wrong data");
  });
  check_all_ok(results, "after the refused calls");

  ShmTransport lone(3, 0);
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  lone.attach_socket(2, sv[0]);
  CHECK(!lone.posts_reach_all());
  lone.begin_step(1);
  for (int peer : {1, 2})
    CHECK(has(thrown([&] { gather(lone, 1, 5, big.data(), 8, {{peer, 0, got.data(), 8}}, deadline); }),
              TPU_UNAVAILABLE, "task " + std::to_string(peer) + ": no shared memory with this task"));
  ::close(sv[1]);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_posts__many_posts),
      cmocka_unit_test(test_posts__varying_peers),
      cmocka_unit_test(test_posts__posts_between_exchanges),
      cmocka_unit_test(test_posts__peer_ends_step),
      cmocka_unit_test(test_posts__peer_in_exchange),
      cmocka_unit_test(test_posts__mismatches),
      cmocka_unit_test(test_posts__deadline),
      cmocka_unit_test(test_posts__interrupt),
      cmocka_unit_test(test_posts__peer_process),
      cmocka_unit_test(test_posts__hostile_slots),
      cmocka_unit_test(test_posts__bad_arguments),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
