// The data planes on their own: TCP (lib/net/tcp_transport.h), tasks as threads of
// this process joined by socket pairs, and shared memory (lib/net/shm_transport.h),
// tasks as threads or forked processes. The protocol cases run over both: exchanges
// of many frames both ways, the end of a step and the outcomes it carries, a peer that
// ends the step without a collective, a digest mismatch, a closed connection, the
// deadline, and an interrupted exchange whose half-sent frame the end of the step
// completes. Then each transport's own: malformed bytes on a socket; for shared
// memory, sizes around the ring's, bad locators, corrupt ring indices, and a peer
// process killed with SIGKILL.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
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
#include "net/event_loop.h"
#include "net/frame.h"
#include "net/shm_segment.h"
#include "net/shm_transport.h"
#include "net/tcp_transport.h"
#include "tpurt.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
extern "C" {
#include <cmocka.h>
}

#include "test_util.h"
#include "transport_util.h"

// Every task sends every other task 3 MiB + 5 bytes (four frames) and an empty
// transfer; all arrive intact, and the step ends well everywhere, twice.
static void exchange_all_pairs(MakeCluster make_cluster) {
  const int n = 3;
  const size_t bytes = (3u << 20) + 5;
  auto t = make_cluster(n);
  std::vector<std::vector<char>> data(n, std::vector<char>(bytes));
  for (int i = 0; i < n; ++i)
    for (size_t k = 0; k < bytes; ++k) data[i][k] = static_cast<char>(i * 31 + k * 7);
  std::vector<std::vector<std::vector<char>>> got(n, std::vector<std::vector<char>>(n, std::vector<char>(bytes)));
  std::vector<int> remote_failed(n, -1);
  for (uint64_t step = 1; step <= 2; ++step) {
    auto results = run_tasks(n, [&](int me) {
      t[me]->begin_step(step);
      std::vector<Send> sends;
      std::vector<Recv> recvs;
      for (int p = 0; p < n; ++p) {
        if (p == me) continue;
        sends.push_back({p, 7, data[me].data(), bytes});
        sends.push_back({p, 8, nullptr, 0});
        recvs.push_back({p, 7, got[me][p].data(), bytes});
        recvs.push_back({p, 8, nullptr, 0});
      }
      t[me]->exchange(1, 42, sends.data(), sends.size(), recvs.data(), recvs.size(), in_ms(10000),
                      no_check, name);
      StepOutcome remote;
      remote_failed[me] = t[me]->end_step(StepOutcome{}, 10000, &remote, name);
    });
    for (int i = 0; i < n; ++i) {
      CHECK(results[i].code == TPU_OK);
      CHECK(remote_failed[i] == 0);
      for (int p = 0; p < n; ++p)
        if (p != i) CHECK(got[i][p] == data[p]);
    }
  }
}

// A task that ends its step without the collective its peer is in: the peer learns
// it at once from the end-of-step frame, naming the task; a failed step's outcome
// reaches the peer as TPU_ABORTED with the origin's message, and end_step reports it.
static void peer_ends_step(MakeCluster make_cluster) {
  auto t = make_cluster(2);
  char buf[16];
  StepOutcome seen;
  bool seen_failed = false;
  auto results = run_tasks(2, [&](int me) {
    t[me]->begin_step(1);
    if (me == 1) {
      StepOutcome remote;
      t[me]->end_step(StepOutcome{}, 5000, &remote, name);
      return;
    }
    Recv r{1, 0, buf, sizeof buf};
    try {
      t[me]->exchange(3, 9, nullptr, 0, &r, 1, in_ms(5000), no_check, name);
    } catch (...) {
      StepOutcome remote;
      t[me]->end_step(StepOutcome{TPU_FAILED_PRECONDITION, -1, "x"}, 5000, &remote, name);
      throw;
    }
  });
  CHECK(results[0].code == TPU_FAILED_PRECONDITION);
  CHECK(results[0].message.find("task 1 finished the step without calling collective #3") != std::string::npos);
  CHECK(results[1].code == TPU_OK);

  results = run_tasks(2, [&](int me) {
    t[me]->begin_step(2);
    if (me == 1) {
      StepOutcome remote;
      t[me]->end_step(StepOutcome{TPU_DATA_LOSS, 3, "replica 3: broken"}, 5000, &remote, name);
      return;
    }
    Recv r{1, 0, buf, sizeof buf};
    try {
      t[me]->exchange(1, 9, nullptr, 0, &r, 1, in_ms(5000), no_check, name);
    } catch (...) {
      seen_failed = t[me]->end_step(StepOutcome{TPU_ABORTED, -1, "collateral"}, 5000, &seen, name);
      throw;
    }
  });
  CHECK(results[0].code == TPU_ABORTED);
  CHECK(results[0].message == "replica 3: broken");
  CHECK(seen_failed);
  CHECK(seen.code == TPU_DATA_LOSS && seen.origin_replica == 3 && seen.message == "replica 3: broken");
}

// Peers in different collectives (digests differ): TPU_INVALID_ARGUMENT naming the peer.
static void digest_mismatch(MakeCluster make_cluster) {
  auto t = make_cluster(2);
  char out[8] = {0}, in[2][8];  // a buffer each: the tasks run on two threads
  auto results = run_tasks(2, [&](int me) {
    t[me]->begin_step(1);
    Send s{1 - me, 0, out, sizeof out};
    Recv r{1 - me, 0, in[me], sizeof in[me]};
    try {
      t[me]->exchange(1, me == 0 ? 100 : 200, &s, 1, &r, 1, in_ms(5000), no_check, name);
    } catch (...) {
      StepOutcome remote;
      t[me]->end_step(StepOutcome{TPU_INVALID_ARGUMENT, -1, "mismatch"}, 5000, &remote, name);
      throw;
    }
  });
  for (int i = 0; i < 2; ++i) {
    CHECK(results[i].code == TPU_INVALID_ARGUMENT);
    CHECK(results[i].message.find(name(1 - i)) != std::string::npos);
  }
  // The streams stay framed: the next step works.
  results = run_tasks(2, [&](int me) {
    t[me]->begin_step(2);
    Send s{1 - me, 0, out, sizeof out};
    Recv r{1 - me, 0, in[me], sizeof in[me]};
    t[me]->exchange(1, 5, &s, 1, &r, 1, in_ms(5000), no_check, name);
    StepOutcome remote;
    t[me]->end_step(StepOutcome{}, 5000, &remote, name);
  });
  CHECK(results[0].code == TPU_OK && results[1].code == TPU_OK);
}

// Nothing arrives: TPU_DEADLINE_EXCEEDED naming the peer. A peer that closes its end:
// TPU_UNAVAILABLE naming it, and later steps are refused.
// A task that leaves says why, and its peers report that, not its link: one shutting
// down while its peer waits for its data (TPU_FAILED_PRECONDITION, now and at every
// later step), and one leaving because the cluster failed while its peer is blocked
// sending to it (the cluster's failure, read from what it sent before it closed).
static void peer_leaves(MakeCluster make_cluster) {
  auto t = make_cluster(2);
  char buf[16];
  auto results = run_tasks(2, [&](int me) {
    if (me == 1) return t[1]->leave(StepOutcome{TPU_FAILED_PRECONDITION, -1, "task 1 shut down"});
    t[0]->begin_step(1);
    Recv r{1, 0, buf, sizeof buf};
    t[0]->exchange(1, 9, nullptr, 0, &r, 1, in_ms(5000), no_check, name);
  });
  CHECK(results[0].code == TPU_FAILED_PRECONDITION);
  CHECK(results[0].message == "task 1 shut down");
  try {
    t[0]->begin_step(2);
    CHECK_FAIL("a step began with a peer that left");
  } catch (const tpurt::Error& e) {
    CHECK(e.code() == TPU_FAILED_PRECONDITION && e.message() == "task 1 shut down");
  }

  t = make_cluster(2);
  std::vector<char> big(16u << 20);
  results = run_tasks(2, [&](int me) {
    t[me]->begin_step(1);
    if (me == 1) {
      (t[1]->fail)("task 2 (elsewhere) lost: killed");  // () keeps cmocka's fail macro out
      StepOutcome remote;
      CHECK(t[1]->end_step(StepOutcome{TPU_UNAVAILABLE, -1, "task 2 (elsewhere) lost: killed"}, 5000,
                           &remote, name));
      CHECK(remote.code == TPU_UNAVAILABLE);
      t[1].reset();  // its links close
      return;
    }
    Send s{1, 0, big.data(), big.size()};
    t[0]->exchange(1, 9, &s, 1, nullptr, 0, in_ms(10000), no_check, name);
  });
  CHECK(results[0].code == TPU_UNAVAILABLE);
  if (results[0].message != "task 2 (elsewhere) lost: killed")
    CHECK_FAIL("task 0 reported \"%s\", not task 1's cause", results[0].message.c_str());
}

static void deadline_and_closed(MakeCluster make_cluster) {
  auto t = make_cluster(2);
  char in[8];
  Recv r{1, 0, in, sizeof in};
  t[0]->begin_step(1);
  try {
    t[0]->exchange(1, 1, nullptr, 0, &r, 1, in_ms(100), no_check, name);
    CHECK_FAIL("no deadline");
  } catch (const tpurt::Error& e) {
    CHECK(e.code() == TPU_DEADLINE_EXCEEDED);
    CHECK(e.message().find("no data arrived from task 1") != std::string::npos);
  }
  t[1].reset();  // closes its sockets
  try {
    t[0]->exchange(1, 1, nullptr, 0, &r, 1, in_ms(5000), no_check, name);
    CHECK_FAIL("no error for a closed peer");
  } catch (const tpurt::Error& e) {
    CHECK(e.code() == TPU_UNAVAILABLE);
    CHECK(e.message().find("task 1") != std::string::npos);
  }
  try {
    t[0]->begin_step(2);
    CHECK_FAIL("a step with a lost peer began");
  } catch (const tpurt::Error& e) {
    CHECK(e.code() == TPU_UNAVAILABLE);
  }
}

// Malformed bytes from a peer (random, an oversized length, a frame of another step):
// TPU_UNAVAILABLE naming it, the connection closed, no crash.
static void test_transport__malformed_frames(void **) {
  unsigned char frames[3][tpurt::net::kFrameHeaderBytes];
  std::memset(frames[0], 0xAB, sizeof frames[0]);
  tpurt::net::FrameHeader h;
  h.type = static_cast<uint16_t>(tpurt::net::FrameType::kData);
  h.length = uint64_t(1) << 40;
  h.step = 1;
  tpurt::net::encode_header(h, frames[1]);
  h.length = 8;
  h.step = 7;
  tpurt::net::encode_header(h, frames[2]);
  for (auto& frame : frames) {
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    TcpTransport t(2, 0);
    t.attach(1, sv[0]);
    CHECK(write(sv[1], frame, sizeof frame) == static_cast<ssize_t>(sizeof frame));
    char in[8];
    Recv r{1, 0, in, sizeof in};
    t.begin_step(1);
    try {
      t.exchange(1, 0, nullptr, 0, &r, 1, in_ms(5000), no_check, name);
      CHECK_FAIL("a malformed frame was taken");
    } catch (const tpurt::Error& e) {
      CHECK(e.code() == TPU_UNAVAILABLE);
      CHECK(e.message().find("malformed") != std::string::npos);
    }
    char c;
    CHECK(read(sv[1], &c, 1) == 0);  // closed by the transport
    close(sv[1]);
  }
}

// An exchange interrupted in the middle of a large send: check() throws, end_step
// pads the frame in flight, the peer drains it, and the next step's exchange works.
static void interrupted_send(MakeCluster make_cluster) {
  auto t = make_cluster(2);
  const size_t bytes = 32u << 20;  // more than the socket buffers hold
  std::vector<char> big(bytes, 1), sink(bytes);
  auto results = run_tasks(2, [&](int me) {
    t[me]->begin_step(1);
    StepOutcome remote;
    if (me == 0) {
      Send s{1, 0, big.data(), bytes};
      std::atomic<bool> stop{false};
      std::thread stopper([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        stop = true;
        t[0]->interrupt();
      });
      try {
        t[0]->exchange(1, 1, &s, 1, nullptr, 0, in_ms(10000),
                       [&] { if (stop) throw tpurt::Error(TPU_ABORTED, "stopped"); }, name);
      } catch (...) {
        stopper.join();
        t[0]->end_step(StepOutcome{TPU_ABORTED, -1, "stopped"}, 10000, &remote, name);
        throw;
      }
      stopper.join();
    } else {
      // Task 1 never reads the transfer: its step failed too (as the abort relay says).
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      t[1]->end_step(StepOutcome{TPU_ABORTED, -1, "aborted"}, 10000, &remote, name);
    }
  });
  CHECK(results[0].code == TPU_ABORTED);
  char a = 5, b[2] = {0, 0};  // a byte each: the tasks run on two threads
  results = run_tasks(2, [&](int me) {
    t[me]->begin_step(2);
    Send s{1 - me, 0, &a, 1};
    Recv r{1 - me, 0, &b[me], 1};
    t[me]->exchange(1, 2, &s, 1, &r, 1, in_ms(5000), no_check, name);
    StepOutcome remote;
    t[me]->end_step(StepOutcome{}, 5000, &remote, name);
  });
  for (int i = 0; i < 2; ++i)
    if (results[i].code != TPU_OK) CHECK_FAIL("task %d: %s", i, results[i].message.c_str());
  CHECK(b[0] == 5 && b[1] == 5);
}


// What a broken or hostile peer sends: 1 to 200 random bytes from a fixed seed, some
// starting with a valid data-frame header so that the checks past the magic are reached.
class RandomInputs {
 public:
  explicit RandomInputs(uint64_t seed) : state_(seed) {}
  std::vector<unsigned char> next_input(bool with_header) {
    std::vector<unsigned char> bytes(next() % 200 + 1);
    for (auto& b : bytes) b = static_cast<unsigned char>(next());
    if (with_header && bytes.size() >= tpurt::net::kFrameHeaderBytes) {
      tpurt::net::FrameHeader h;
      h.type = static_cast<uint16_t>(tpurt::net::FrameType::kData);
      h.step = 1;
      h.seq = next() % 3;
      h.tag = next() % 3;
      h.length = next() % 64;
      tpurt::net::encode_header(h, bytes.data());
    }
    return bytes;
  }

 private:
  uint32_t next() {
    state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state_ >> 33);
  }
  uint64_t state_;
};

// Random bytes from a peer, 300 inputs from a fixed seed (some starting with a valid
// header so the checks past the magic are reached): every one ends the exchange with an
// error that names the peer, within the deadline, and never crashes.
static void test_transport__random_bytes(void **) {
  RandomInputs inputs(12345);
  for (int i = 0; i < 300; ++i) {
    const std::vector<unsigned char> bytes = inputs.next_input(i % 2 == 1);
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    TcpTransport t(2, 0);
    t.attach(1, sv[0]);
    CHECK(write(sv[1], bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
    shutdown(sv[1], SHUT_WR);  // then nothing more: the exchange cannot wait forever
    char in[16];
    Recv r{1, 0, in, sizeof in};
    t.begin_step(1);
    try {
      t.exchange(1, 0, nullptr, 0, &r, 1, in_ms(2000), no_check, name);
      // Only a well-formed frame of exactly what was due completes it.
    } catch (const tpurt::Error& e) {
      CHECK(e.message().find("task 1") != std::string::npos);
      CHECK(e.code() == TPU_UNAVAILABLE || e.code() == TPU_INVALID_ARGUMENT ||
            e.code() == TPU_DEADLINE_EXCEEDED);
    }
    close(sv[1]);
  }
}

static void test_transport__exchange_all_pairs(void **) { exchange_all_pairs(make_cluster); }
static void test_transport__peer_ends_step(void **) { peer_ends_step(make_cluster); }
static void test_transport__peer_leaves(void **) { peer_leaves(make_cluster); }
static void test_transport__shm_peer_leaves(void **) { peer_leaves(make_shm_cluster); }
static void test_transport__mixed_peer_leaves(void **) { peer_leaves(make_mixed_cluster); }
static void test_transport__digest_mismatch(void **) { digest_mismatch(make_cluster); }
static void test_transport__deadline_and_closed(void **) { deadline_and_closed(make_cluster); }
static void test_transport__interrupted_send(void **) { interrupted_send(make_cluster); }
static void test_transport__shm_exchange_all_pairs(void **) { exchange_all_pairs(make_shm_cluster); }
static void test_transport__shm_peer_ends_step(void **) { peer_ends_step(make_shm_cluster); }
static void test_transport__shm_digest_mismatch(void **) { digest_mismatch(make_shm_cluster); }
static void test_transport__shm_deadline_and_closed(void **) { deadline_and_closed(make_shm_cluster); }
static void test_transport__shm_interrupted_send(void **) { interrupted_send(make_shm_cluster); }
static void test_transport__mixed_exchange_all_pairs(void **) { exchange_all_pairs(make_mixed_cluster); }
static void test_transport__mixed_peer_ends_step(void **) { peer_ends_step(make_mixed_cluster); }
static void test_transport__mixed_digest_mismatch(void **) { digest_mismatch(make_mixed_cluster); }
static void test_transport__mixed_deadline_and_closed(void **) { deadline_and_closed(make_mixed_cluster); }
static void test_transport__mixed_interrupted_send(void **) { interrupted_send(make_mixed_cluster); }


// Transfers of sizes around the ring's (0, 1, odd, one byte short of it, past it, past
// a frame), all of them to both peers at once, in both directions, over two steps, with
// the default ring and the smallest: every byte arrives where it is due. Sealed
// segments leave no descriptor behind.
static void shm_sizes(const char* ring_bytes) {
  if (ring_bytes) setenv("TPURT_SHM_RING_BYTES", ring_bytes, 1);
  const int n = 3;
  auto t = make_shm(n);
  unsetenv("TPURT_SHM_RING_BYTES");
  CHECK(open_segments() == 0);
  const uint64_t ring = t[0]->ring_bytes();
  const std::vector<uint64_t> sizes = {0, 1, 3, 57, 4095, ring - 56, ring - 1, ring, ring + 13,
                                       2 * ring + 1, tpurt::net::kFramePayloadBytes + 7};
  auto byte = [](int from, int to, size_t tag, size_t k) {
    return static_cast<char>(from * 59 + to * 17 + tag * 5 + k * 13 + (k >> 11));
  };
  // data[from][to][tag], got[to][from][tag]
  std::vector<std::vector<std::vector<std::vector<char>>>> data(n), got(n);
  for (int a = 0; a < n; ++a) {
    data[a].resize(n);
    got[a].resize(n);
    for (int b = 0; b < n; ++b)
      for (size_t s = 0; s < sizes.size(); ++s) {
        std::vector<char> v(sizes[s]);
        for (size_t k = 0; k < v.size(); ++k) v[k] = byte(a, b, s, k);
        data[a][b].push_back(v);
        got[a][b].push_back(std::vector<char>(sizes[s], 0));
      }
  }
  for (uint64_t step = 1; step <= 2; ++step) {
    std::vector<int> remote_failed(n, -1);
    auto results = run_tasks(n, [&](int me) {
      t[me]->begin_step(step);
      std::vector<Send> sends;
      std::vector<Recv> recvs;
      for (size_t s = 0; s < sizes.size(); ++s)
        for (int p = 0; p < n; ++p) {
          if (p == me) continue;
          sends.push_back({p, static_cast<uint32_t>(s), data[me][p][s].data(), sizes[s]});
          recvs.push_back({p, static_cast<uint32_t>(s), got[me][p][s].data(), sizes[s]});
        }
      t[me]->exchange(step, 77, sends.data(), sends.size(), recvs.data(), recvs.size(),
                      in_ms(20000), no_check, name);
      StepOutcome remote;
      remote_failed[me] = t[me]->end_step(StepOutcome{}, 10000, &remote, name);
    });
    for (int i = 0; i < n; ++i) {
      if (results[i].code != TPU_OK) CHECK_FAIL("task %d: %s", i, results[i].message.c_str());
      CHECK(remote_failed[i] == 0);
      for (int p = 0; p < n; ++p)
        if (p != i)
          for (size_t s = 0; s < sizes.size(); ++s) CHECK(got[i][p][s] == data[p][i][s]);
    }
  }
}

static void test_transport__shm_sizes(void **) {
  shm_sizes(nullptr);  // the default ring
  shm_sizes("4096");   // the smallest: every frame wraps around it many times
}

// A peer whose transport is destroyed in the middle of a step (after sending part of
// what is due): the waiting task gets TPU_UNAVAILABLE naming it, not a timeout.
static void test_transport__shm_peer_destroyed(void **) {
  auto t = make_shm(2);
  std::vector<char> part(1000, 3), got(1000), rest(8);
  std::thread peer([&] {
    t[1]->begin_step(1);
    Send s{0, 1, part.data(), part.size()};
    t[1]->exchange(1, 5, &s, 1, nullptr, 0, in_ms(10000), no_check, name);
    t[1].reset();
  });
  t[0]->begin_step(1);
  Recv r[2] = {{1, 1, got.data(), got.size()}, {1, 2, rest.data(), rest.size()}};
  Result res = thrown([&] { t[0]->exchange(1, 5, nullptr, 0, r, 2, in_ms(30000), no_check, name); });
  peer.join();
  CHECK(has(res, TPU_UNAVAILABLE, "task 1: data connection closed"));
  CHECK(got == part);
  CHECK(has(thrown([&] { t[0]->begin_step(2); }), TPU_UNAVAILABLE, "closed by the peer"));
}

// Locators that are malformed, name another segment, task or size, or a descriptor
// that does not exist; a second attach; a seal before every peer attached; bad
// arguments and ring sizes. Each is refused with its status, naming what is wrong.
static void test_transport__shm_bad_locators(void **) {
  auto t = make_shm(3, false);
  ShmTransport fresh(3, 0);
  const std::string good = t[1]->locator();
  const std::string nonce = good.substr(good.rfind(':') + 1);
  const std::string pid = std::to_string(getpid());
  const std::string bytes = good.substr(0, good.rfind(':')).substr(good.find(':', good.find(':') + 1) + 1);
  const std::string malformed[] = {
      "", "1", "a:b:c:d", "1:2:3", ":::", good + ":", " " + good, "-1:3:" + bytes + ":" + nonce,
      "99999999999999999999:3:" + bytes + ":" + nonce, pid + ":3:" + bytes + ":" + nonce.substr(1),
      pid + ":3:" + bytes + ":" + nonce + "0", pid + ":3:" + bytes + ":xyz0123456789abc",
      pid + ":+3:" + bytes + ":" + nonce, pid + ":3:12:" + nonce, pid + ":3:" + bytes + "0:" + nonce};
  for (const std::string& loc : malformed) {
    Result r = thrown([&] { fresh.attach(1, loc); });
    CHECK(has(r, TPU_INVALID_ARGUMENT, "task 1"));
    CHECK(has(r, TPU_INVALID_ARGUMENT, "'" + loc + "'"));
  }
  std::string wrong_nonce = good;
  wrong_nonce.back() = wrong_nonce.back() == '0' ? '1' : '0';
  CHECK(has(thrown([&] { fresh.attach(1, wrong_nonce); }), TPU_INVALID_ARGUMENT, "nonce"));
  CHECK(has(thrown([&] { fresh.attach(1, t[2]->locator()); }), TPU_INVALID_ARGUMENT,
            "the segment of task 2"));
  CHECK(has(thrown([&] { fresh.attach(0, t[0]->locator()); }), TPU_INVALID_ARGUMENT,
            "cannot attach task 0"));
  CHECK(has(thrown([&] { fresh.attach(3, good); }), TPU_INVALID_ARGUMENT, "cannot attach task 3"));
  CHECK(has(thrown([&] { fresh.attach(-1, good); }), TPU_INVALID_ARGUMENT, "cannot attach task -1"));
  // Another cluster's segment of the same task: its size differs.
  ShmTransport two(2, 1);
  CHECK(has(thrown([&] { fresh.attach(1, two.locator()); }), TPU_INVALID_ARGUMENT, "task 1"));
  const std::string no_fd = pid + ":999999:" + bytes + ":" + nonce;
  CHECK(has(thrown([&] { fresh.attach(1, no_fd); }), TPU_UNAVAILABLE, "task 1"));
  CHECK(has(thrown([&] { fresh.seal(); }), TPU_FAILED_PRECONDITION, "task(s) 1, 2"));
  fresh.attach(1, good);
  CHECK(has(thrown([&] { fresh.attach(1, good); }), TPU_INVALID_ARGUMENT, "attached already"));
  CHECK(has(thrown([&] { fresh.seal(); }), TPU_FAILED_PRECONDITION, "task(s) 2"));

  CHECK(has(thrown([] { ShmTransport x(3, 3); }), TPU_INVALID_ARGUMENT, "task 3"));
  CHECK(has(thrown([] { ShmTransport x(0, 0); }), TPU_INVALID_ARGUMENT, "0 tasks"));
  for (const char* bad : {"1000", "4096x", "+4096", " 4096", "2", "134217728", "99999999999999999999999"}) {
    setenv("TPURT_SHM_RING_BYTES", bad, 1);
    CHECK(has(thrown([] { ShmTransport x(2, 0); }), TPU_INVALID_ARGUMENT,
              std::string("TPURT_SHM_RING_BYTES='") + bad + "'"));
  }
  setenv("TPURT_SHM_RING_BYTES", "8192", 1);
  CHECK(ShmTransport(2, 0).ring_bytes() == 8192);
  unsetenv("TPURT_SHM_RING_BYTES");
}

// The staging windows (net::SharedWindows): each task's own, and every peer's through
// the peer's mapping, the same memory end to end; none for a peer not yet attached,
// one attached by socket, or a task out of range.
static void test_transport__shm_windows(void **) {
  auto t = make_shm(3);
  const size_t w = t[0]->window_bytes();
  CHECK(w >= 4096 && w == t[2]->window_bytes());
  for (int i = 0; i < 3; ++i)
    for (size_t k = 0; k < w; ++k) t[i]->window(i)[k] = static_cast<char>(i * 37 + k * 11 + k / 4096);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      const char* p = t[i]->window(j);
      CHECK(p != nullptr);
      size_t wrong = 0;
      for (size_t k = 0; k < w; ++k) wrong += p[k] != static_cast<char>(j * 37 + k * 11 + k / 4096);
      CHECK(wrong == 0);
    }
  CHECK(t[0]->window(-1) == nullptr && t[0]->window(3) == nullptr);
  ShmTransport lone(2, 0);
  CHECK(lone.window(0) != nullptr && lone.window(1) == nullptr);
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  lone.attach_socket(1, sv[0]);
  CHECK(lone.window(1) == nullptr && !lone.fans_out_cheaply());
  ::close(sv[1]);
}

// Ring indices a peer corrupts (a head far past the tail, a tail past the head, seen
// once the writer needs the room) and garbage bytes within a valid head: the link is
// lost with a message naming the peer, nothing is written out of bounds, nothing crashes.
static void test_transport__shm_corrupt_ring(void **) {
  using tpurt::net::shm::RingControl;
  char in[8];
  for (int c = 0; c < 4; ++c) {
    auto t = make_shm(2, false);
    std::vector<char> out(2 * t[0]->ring_bytes() + 1, 1);
    auto m0 = map_locator(t[0]->locator());
    auto m1 = map_locator(t[1]->locator());
    CHECK(m0.base != nullptr && m1.base != nullptr);
    for (auto& x : t) x->seal();
    RingControl* from1 = m0.control(1);  // in which task 1 writes to task 0
    RingControl* to1 = m1.control(0);    // in which task 0 writes to task 1
    unsigned char* data = m0.base + tpurt::net::shm::ring_offset(2, t[0]->ring_bytes(), 1);
    std::string expect = "corrupt";
    switch (c) {
      case 0: from1->head = uint64_t(1) << 40; break;
      case 1: from1->head = ~uint64_t(0); break;
      case 2: to1->tail = 12345678; break;
      case 3:
        memset(data, 0xAB, 100);
        from1->head = 100;
        expect = "malformed";
        break;
    }
    t[0]->begin_step(1);
    Send s{1, 0, out.data(), out.size()};
    Recv r{1, 0, in, sizeof in};
    Result res = c == 2 ? thrown([&] { t[0]->exchange(1, 1, &s, 1, nullptr, 0, in_ms(10000), no_check, name); })
                        : thrown([&] { t[0]->exchange(1, 1, nullptr, 0, &r, 1, in_ms(10000), no_check, name); });
    CHECK(has(res, TPU_UNAVAILABLE, "task 1"));
    CHECK(has(res, TPU_UNAVAILABLE, expect));
    CHECK(has(thrown([&] { t[0]->begin_step(2); }), TPU_UNAVAILABLE, "task 1"));
    tpurt::net::shm::unmap(&m0);
    tpurt::net::shm::unmap(&m1);
  }
}

// A task awaiting a peer over rings and another over a socket at once gets each when
// it comes, whichever is first; silent, both are named at the deadline. attach_socket
// refuses a bad peer or a second link (closing the socket).
static void test_transport__mixed_waits(void **) {
  auto t = make_mixed_cluster(3);
  std::vector<char> a(100, 1), b(100, 2), got1(100), got2(100);
  for (int late : {1, 2}) {
    auto results = run_tasks(3, [&](int me) {
      t[me]->begin_step(late);
      if (me == 0) {
        Recv r[2] = {{1, 0, got1.data(), got1.size()}, {2, 0, got2.data(), got2.size()}};
        t[0]->exchange(1, 3, nullptr, 0, r, 2, in_ms(20000), no_check, name);
      } else {
        if (me == late) std::this_thread::sleep_for(std::chrono::milliseconds(30));
        Send s{0, 0, me == 1 ? a.data() : b.data(), 100};
        t[me]->exchange(1, 3, &s, 1, nullptr, 0, in_ms(20000), no_check, name);
      }
      StepOutcome remote;
      t[me]->end_step(StepOutcome{}, 10000, &remote, name);
    });
    for (int i = 0; i < 3; ++i)
      if (results[i].code != TPU_OK) CHECK_FAIL("task %d: %s", i, results[i].message.c_str());
    CHECK(got1 == a && got2 == b);
  }
  t[0]->begin_step(3);
  Recv r[2] = {{1, 0, got1.data(), got1.size()}, {2, 0, got2.data(), got2.size()}};
  CHECK(has(thrown([&] { t[0]->exchange(1, 3, nullptr, 0, r, 2, in_ms(100), no_check, name); }),
            TPU_DEADLINE_EXCEEDED, "no data arrived from task 1; task 2"));

  ShmTransport x(2, 0), y(2, 1);
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  CHECK(has(thrown([&] { x.attach_socket(2, sv[0]); }), TPU_INVALID_ARGUMENT, "cannot attach task 2"));
  char c;
  CHECK(read(sv[1], &c, 1) == 0);  // closed
  close(sv[1]);
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  x.attach_socket(1, sv[0]);
  int sv2[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv2) == 0);
  CHECK(has(thrown([&] { x.attach_socket(1, sv2[0]); }), TPU_INVALID_ARGUMENT, "attached already"));
  CHECK(read(sv2[1], &c, 1) == 0);
  CHECK(has(thrown([&] { x.attach(1, y.locator()); }), TPU_INVALID_ARGUMENT, "attached already"));
  x.seal();
  close(sv[1]);
  close(sv2[1]);
}

// Random bytes in a ring, 300 inputs from a fixed seed (some starting with a valid
// header so the checks past the magic are reached), then the ring closed: every one
// ends the exchange with an error naming the peer, and nothing crashes.
static void test_transport__shm_random_bytes(void **) {
  RandomInputs inputs(54321);
  for (int i = 0; i < 300; ++i) {
    auto t = make_shm(2, false);
    auto m0 = map_locator(t[0]->locator());
    CHECK(m0.base != nullptr);
    for (auto& x : t) x->seal();
    const std::vector<unsigned char> bytes = inputs.next_input(i % 2 == 1);
    unsigned char* ring = m0.base + tpurt::net::shm::ring_offset(2, t[0]->ring_bytes(), 1);
    memcpy(ring, bytes.data(), bytes.size());
    tpurt::net::shm::RingControl* from1 = m0.control(1);
    __atomic_store_n(&from1->head, bytes.size(), __ATOMIC_SEQ_CST);
    __atomic_store_n(&from1->closed, 1u, __ATOMIC_SEQ_CST);  // then nothing more
    char in[16];
    Recv r{1, 0, in, sizeof in};
    t[0]->begin_step(1);
    Result res = thrown([&] { t[0]->exchange(1, 0, nullptr, 0, &r, 1, in_ms(10000), no_check, name); });
    // Only a well-formed frame of exactly what was due completes it.
    if (res.code != TPU_OK) {
      CHECK(res.message.find("task 1") != std::string::npos);
      CHECK(res.code == TPU_UNAVAILABLE || res.code == TPU_INVALID_ARGUMENT);
    }
    tpurt::net::shm::unmap(&m0);
  }
}

// A peer in another process: killed with SIGKILL in the middle of an exchange, the
// waiting task gets TPU_UNAVAILABLE naming it (long before the deadline, which would
// say TPU_DEADLINE_EXCEEDED); stopped with SIGSTOP, the deadline names it.
static void test_transport__shm_peer_process(void **) {
  for (int sig : {SIGKILL, SIGSTOP}) {
    auto parent = std::unique_ptr<ShmTransport>(new ShmTransport(2, 0));
    ForkedPeer child(parent.get(), [](ShmTransport& me) {
      std::vector<char> data(4u << 20, 7);
      Send s{0, 1, data.data(), data.size()};
      me.exchange(1, 9, &s, 1, nullptr, 0, in_ms(30000), no_check, name);
      return 0;
    });
    CHECK(open_segments() == 0);  // sealed, and the child's was closed once mapped
    std::vector<char> got(4u << 20), rest(8);
    Recv r[2] = {{1, 1, got.data(), got.size()}, {1, 2, rest.data(), rest.size()}};
    std::thread signaller([&] {
      if (child.body_done()) kill(child.pid, sig);  // the child sent tag 1 and waits
    });
    const int deadline_ms = sig == SIGKILL ? 30000 : 300;
    Result res = thrown([&] {
      parent->exchange(1, 9, nullptr, 0, r, 2, in_ms(deadline_ms), no_check, name);
    });
    signaller.join();
    if (sig == SIGKILL) {
      CHECK(has(res, TPU_UNAVAILABLE, "task 1: data connection failed: the peer's process (pid " +
                                          std::to_string(child.pid) + ") has exited"));
    } else {
      CHECK(has(res, TPU_DEADLINE_EXCEEDED, "no data arrived from task 1"));
      kill(child.pid, SIGKILL);
    }
    CHECK(got == std::vector<char>(4u << 20, 7));
    CHECK(child.reap_killed());
  }
}

// The coordination service writes through libuv on the loop thread. A peer that closes
// as it writes must be an EPIPE for the connection, not a SIGPIPE that ends the process
// (test_coordination__arbitrary_requests died so about 2 runs in 100).
static void test_transport__loop_write_to_closed_peer(void** state) {
  (void)state;
  int fds[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  close(fds[1]);
  tpurt::net::EventLoop loop;
  loop.start();
  std::atomic<int> result{0};
  std::atomic<bool> done{false};
  CHECK(loop.post([&] {
    auto* pipe = new uv_pipe_t;
    uv_pipe_init(loop.loop(), pipe, 0);
    uv_pipe_open(pipe, fds[0]);
    char byte = 1;
    uv_buf_t b = uv_buf_init(&byte, 1);
    result = uv_try_write(reinterpret_cast<uv_stream_t*>(pipe), &b, 1);
    uv_close(reinterpret_cast<uv_handle_t*>(pipe),
             [](uv_handle_t* h) { delete reinterpret_cast<uv_pipe_t*>(h); });
    done = true;
  }));
  for (int i = 0; i < 5000 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  loop.stop();
  CHECK(done);
  CHECK(result == UV_EPIPE);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_transport__exchange_all_pairs),
      cmocka_unit_test(test_transport__peer_ends_step),
      cmocka_unit_test(test_transport__peer_leaves),
      cmocka_unit_test(test_transport__shm_peer_leaves),
      cmocka_unit_test(test_transport__mixed_peer_leaves),
      cmocka_unit_test(test_transport__digest_mismatch),
      cmocka_unit_test(test_transport__deadline_and_closed),
      cmocka_unit_test(test_transport__malformed_frames),
      cmocka_unit_test(test_transport__interrupted_send),
      cmocka_unit_test(test_transport__random_bytes),
      cmocka_unit_test(test_transport__shm_exchange_all_pairs),
      cmocka_unit_test(test_transport__shm_peer_ends_step),
      cmocka_unit_test(test_transport__shm_digest_mismatch),
      cmocka_unit_test(test_transport__shm_deadline_and_closed),
      cmocka_unit_test(test_transport__shm_interrupted_send),
      cmocka_unit_test(test_transport__mixed_exchange_all_pairs),
      cmocka_unit_test(test_transport__mixed_peer_ends_step),
      cmocka_unit_test(test_transport__mixed_digest_mismatch),
      cmocka_unit_test(test_transport__mixed_deadline_and_closed),
      cmocka_unit_test(test_transport__mixed_interrupted_send),
      cmocka_unit_test(test_transport__shm_sizes),
      cmocka_unit_test(test_transport__shm_peer_destroyed),
      cmocka_unit_test(test_transport__shm_bad_locators),
      cmocka_unit_test(test_transport__shm_windows),
      cmocka_unit_test(test_transport__shm_corrupt_ring),
      cmocka_unit_test(test_transport__shm_random_bytes),
      cmocka_unit_test(test_transport__shm_peer_process),
      cmocka_unit_test(test_transport__mixed_waits),
      cmocka_unit_test(test_transport__loop_write_to_closed_peer),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
