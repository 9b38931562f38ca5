// The TCP data plane (lib/net/tcp_transport.h) on its own: tasks are threads of this
// process joined by socket pairs. Exchanges of many frames both ways, the end of a
// step and the outcomes it carries, a peer that ends the step without a collective,
// a digest mismatch, a closed connection, malformed frames, the deadline, and an
// interrupted exchange whose half-sent frame the end of the step completes.
#include <sys/socket.h>
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
#include "net/frame.h"
#include "net/tcp_transport.h"
#include "tpurt.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
extern "C" {
#include <cmocka.h>
}

#include "test_util.h"

using tpurt::net::Recv;
using tpurt::net::Send;
using tpurt::net::StepOutcome;
using tpurt::net::TcpTransport;
using Clock = std::chrono::steady_clock;

namespace {

std::string name(int task) { return "task " + std::to_string(task); }
void no_check() {}

// n transports, every pair joined by a socket pair.
std::vector<std::unique_ptr<TcpTransport>> make_cluster(int n) {
  std::vector<std::unique_ptr<TcpTransport>> t;
  for (int i = 0; i < n; ++i) t.emplace_back(new TcpTransport(n, i));
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) {
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) abort();
      t[i]->attach(j, sv[0]);
      t[j]->attach(i, sv[1]);
    }
  for (int i = 0; i < n; ++i) t[i]->wait_connected(1000);
  return t;
}

struct Result {
  tpu_status code = TPU_OK;
  std::string message;
};

// Runs fn(task) on a thread per task; returns what each threw.
std::vector<Result> run_tasks(int n, const std::function<void(int)>& fn) {
  std::vector<Result> results(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      try {
        fn(i);
      } catch (const tpurt::Error& e) {
        results[i] = {e.code(), e.message()};
      }
    });
  for (auto& th : threads) th.join();
  return results;
}

Clock::time_point in_ms(int ms) { return Clock::now() + std::chrono::milliseconds(ms); }

}  // namespace

// Every task sends every other task 3 MiB + 5 bytes (four frames) and an empty
// transfer; all arrive intact, and the step ends well everywhere, twice.
static void test_transport__exchange_all_pairs(void **) {
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
static void test_transport__peer_ends_step(void **) {
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
static void test_transport__digest_mismatch(void **) {
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
static void test_transport__deadline_and_closed(void **) {
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
static void test_transport__interrupted_send(void **) {
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


// Random bytes from a peer, 300 inputs from a fixed seed (some starting with a valid
// header so the checks past the magic are reached): every one ends the exchange with an
// error that names the peer, within the deadline, and never crashes.
static void test_transport__random_bytes(void **) {
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 33);
  };
  for (int i = 0; i < 300; ++i) {
    std::vector<unsigned char> bytes(next() % 200 + 1);
    for (auto& b : bytes) b = static_cast<unsigned char>(next());
    if (i % 2 && bytes.size() >= tpurt::net::kFrameHeaderBytes) {
      tpurt::net::FrameHeader h;
      h.type = static_cast<uint16_t>(tpurt::net::FrameType::kData);
      h.step = 1;
      h.seq = next() % 3;
      h.tag = next() % 3;
      h.length = next() % 64;
      tpurt::net::encode_header(h, bytes.data());
    }
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

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_transport__exchange_all_pairs),
      cmocka_unit_test(test_transport__peer_ends_step),
      cmocka_unit_test(test_transport__digest_mismatch),
      cmocka_unit_test(test_transport__deadline_and_closed),
      cmocka_unit_test(test_transport__malformed_frames),
      cmocka_unit_test(test_transport__interrupted_send),
      cmocka_unit_test(test_transport__random_bytes),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
