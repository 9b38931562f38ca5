// The cluster's own lifetime in one process (lib/cluster): a system shut down and the
// next one started by the same tasks while task 0's old service still runs; accepted
// connections that send nothing (SilentConnections) and a flood of them from the tasks'
// own address. Coordination instances on threads of this process on 127.0.0.1; every
// wait is bounded. The multi-process side is tests/check_cluster_lifetime.sh.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cluster/coordination.h"
#include "cluster/silent_connections.h"
#include "core/status.h"
#include "net/event_loop.h"
#include "net/handshake.h"
#include "tpurt.h"

// After the C++ and library headers: cmocka defines a macro named fail().
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
extern "C" {
#include <cmocka.h>
}

#include "test_util.h"

using tpurt::Coordination;
using tpurt::CoordinationConfig;

namespace {

std::vector<CoordinationConfig> configs(int n) {
  std::vector<int> fds, ports;
  for (int i = 0; i < n; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    std::memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ports.push_back(ntohs(a.sin_port));
    fds.push_back(fd);
  }
  for (int fd : fds) close(fd);
  std::vector<std::string> addresses;
  for (int p : ports) addresses.push_back("127.0.0.1:" + std::to_string(p));
  std::vector<CoordinationConfig> out(n);
  for (int i = 0; i < n; ++i) {
    out[i].job = "lifetime";
    out[i].task_id = i;
    out[i].addresses = addresses;
    out[i].service_address = addresses[0];
    out[i].num_cores = 2;
    out[i].init_timeout_ms = time_limit_ms(10000);
    out[i].heartbeat_interval_ms = 300;
    out[i].heartbeat_timeout_ms = time_limit_ms(4000);
    out[i].shutdown_barrier_timeout_ms = time_limit_ms(5000);
  }
  return out;
}

// Starts config c on a thread of its own; the outcome when it is joined.
struct Starter {
  std::unique_ptr<Coordination> task;
  tpu_status code = TPU_OK;
  std::string message;
  std::atomic<bool> done{false};
  std::thread thread;

  explicit Starter(const CoordinationConfig& c) {
    thread = std::thread([this, c] {
      try {
        task = Coordination::start(c, nullptr);
      } catch (const tpurt::Error& e) {
        code = e.code();
        message = e.message();
      }
      done = true;
    });
  }
  ~Starter() { join(); }
  void join() {
    if (thread.joinable()) thread.join();
  }
  bool ok(int index) {
    join();
    if (!task) CHECK_FAIL("task %d did not start: %s %s", index, tpu_status_name(code), message.c_str());
    return task != nullptr;
  }
};

void shutdown_all(const std::vector<Coordination*>& tasks) {
  std::vector<std::thread> threads;
  for (Coordination* t : tasks)
    threads.emplace_back([t] {
      try {
        t->shutdown();
      } catch (const tpurt::Error& e) {
        CHECK_FAIL("shutdown of task %d: %s %s", t->task_id(), tpu_status_name(e.code()), e.message().c_str());
      }
    });
  for (auto& th : threads) th.join();
  CHECK_NO_WORKER_FAILURES();
}

// A connection to address that sends nothing (non-blocking connect: the listener may
// be slow to accept); -1 if the socket cannot be made.
int silent_connection(const std::string& address) {
  std::string host, port;
  tpurt::net::split_host_port(address, &host, &port);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a;
  std::memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(port)));
  inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  return fd;
}

// Whether the peer has ended fd (a read gives 0 or an error) within `seconds`.
bool ended(int fd, double seconds) {
  double end = now() + time_limit(seconds);
  for (;;) {
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return true;
    if (now() >= end) return false;
    struct pollfd p = {fd, POLLIN, 0};
    poll(&p, 1, 20);
  }
}

}  // namespace

// Three tasks; task 2 reported an error (so the shutdown barrier does not wait for it)
// and keeps its agent connected, so task 0's service, past its barrier, waits for it
// to leave. Meanwhile task 1 starts the next system: it must not be taken for a
// restart of the old one's task 1 (main: ABORTED "task 1 restarted"); it waits until
// the old service is gone and joins the new one.
void test_cluster_lifetime__next_system_while_the_old_service_lingers(void** state) {
  (void)state;
  auto cs = configs(3);
  std::vector<std::unique_ptr<Coordination>> old(3);
  {
    Starter s0(cs[0]), s1(cs[1]), s2(cs[2]);
    if (!s0.ok(0) || !s1.ok(1) || !s2.ok(2)) return;
    for (int i = 0; i < 3; ++i) old[i] = std::move(i == 0 ? s0.task : i == 1 ? s1.task : s2.task);
  }
  old[2]->report_error(TPU_INTERNAL, "task 2 fails (the test)");
  std::thread t0_shutdown([&] {
    try {
      old[0]->shutdown();
    } catch (const tpurt::Error&) {
      // Task 2 leaves without shutdown: no verdict on that here.
    }
  });
  old[1]->shutdown();
  old[1].reset();
  // Task 1 again, while task 0's old service waits for task 2's agent.
  Starter next1(cs[1]);
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(time_limit_ms(800))));
  if (next1.done.load())  // not refused as a restart: waiting for the next service
    CHECK_FAIL("task 1's next start ended while the old service lingered: %s %s",
               tpu_status_name(next1.code), next1.message.c_str());
  old[2].reset();             // task 2 leaves; the old service goes
  t0_shutdown.join();
  old[0].reset();
  Starter next0(cs[0]), next2(cs[2]);
  bool ok = next0.ok(0) && next1.ok(1) && next2.ok(2);
  if (!ok) return;
  CHECK(next1.task->tasks().size() == 3);
  CHECK(!next0.task->failure(nullptr));
  shutdown_all({next0.task.get(), next1.task.get(), next2.task.get()});
}

// A restart of a task inside a live system is still one (the next system is only
// recognised past the shutdown barrier).
void test_cluster_lifetime__restart_inside_a_live_system_is_refused(void** state) {
  (void)state;
  auto cs = configs(2);
  Starter s0(cs[0]), s1(cs[1]);
  if (!s0.ok(0) || !s1.ok(1)) return;
  s1.task.reset();  // leaves without shutdown: task 0 loses it
  std::string message;
  tpu_status code = TPU_OK;
  try {
    Coordination::start(cs[1], nullptr);
  } catch (const tpurt::Error& e) {
    code = e.code();
    message = e.message();
  }
  CHECK(code == TPU_ABORTED && message.find("task 1 restarted") != std::string::npos);
  if (code != TPU_ABORTED) CHECK_FAIL("got %s %s", tpu_status_name(code), message.c_str());
  try {
    s0.task->shutdown();
  } catch (const tpurt::Error&) {
  }
}

// SilentConnections on its own: a connection with bytes goes on at once; silent ones
// wait, the oldest dropped first past the cap; one whose bytes come later goes on;
// the rest are dropped at their deadline.
void test_cluster_lifetime__silent_connections(void** state) {
  (void)state;
  tpurt::net::EventLoop loop;
  std::mutex mu;
  std::vector<int> ready;
  tpurt::SilentConnections* silent = nullptr;
  const int64_t deadline = time_limit_ms(1500);
  silent = tpurt::SilentConnections::open(loop.loop(), 4, deadline, [&](int fd) {
    std::lock_guard<std::mutex> lock(mu);
    ready.push_back(fd);
  });
  loop.start();
  std::vector<int> ours, theirs;  // server ends (handed to silent), client ends
  auto add = [&](bool with_byte) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return;
    if (with_byte) {
      ssize_t n = send(sv[1], "x", 1, MSG_NOSIGNAL);
      (void)n;
    }
    ours.push_back(sv[0]);
    theirs.push_back(sv[1]);
    int fd = sv[0];
    std::mutex m;
    std::condition_variable cv;
    bool added = false;
    loop.post([&, fd] {
      silent->add(fd);
      std::lock_guard<std::mutex> lock(m);
      added = true;
      cv.notify_all();
    });
    std::unique_lock<std::mutex> lock(m);
    cv.wait_for(lock, std::chrono::seconds(5), [&] { return added; });
  };
  auto is_ready = [&](int fd, double seconds) {
    double end = now() + time_limit(seconds);
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu);
        for (int r : ready)
          if (r == fd) return true;
      }
      if (now() >= end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  for (int i = 0; i < 6; ++i) add(false);  // 0..5: silent, cap 4
  CHECK(ended(theirs[0], 1));               // the two oldest are dropped
  CHECK(ended(theirs[1], 1));
  CHECK(!ended(theirs[2], 0.1));
  ssize_t n = send(theirs[3], "y", 1, MSG_NOSIGNAL);  // 3 speaks: it goes on
  (void)n;
  CHECK(is_ready(ours[3], 2));
  add(true);  // 6: bytes at once
  CHECK(is_ready(ours[6], 1));
  CHECK(!is_ready(ours[2], 0.05));
  // Past the deadline the silent rest (2, 4, 5) are dropped.
  CHECK(ended(theirs[2], 5));
  CHECK(ended(theirs[4], 1));
  CHECK(ended(theirs[5], 1));
  CHECK(!ended(theirs[3], 0.05));  // handed on: ours to close, not the pool's
  loop.post([silent] { silent->close(); });
  loop.stop();
  {
    std::lock_guard<std::mutex> lock(mu);
    for (int fd : ready) close(fd);
  }
  for (int fd : theirs) close(fd);
}

// More silent connections from 127.0.0.1 than task 0 holds, opened before task 1
// dials from the same address: task 1 joins at once, and the oldest silent ones are
// the ones dropped. (main: the first 8 held every handshake place of 127.0.0.1 for
// their 3 s deadline.)
void test_cluster_lifetime__silent_flood_from_the_tasks_address(void** state) {
  (void)state;
  struct rlimit r;
  getrlimit(RLIMIT_NOFILE, &r);
  if (r.rlim_cur < 4096 && r.rlim_max > r.rlim_cur) {
    r.rlim_cur = r.rlim_max < 4096 ? r.rlim_max : 4096;
    setrlimit(RLIMIT_NOFILE, &r);
  }
  getrlimit(RLIMIT_NOFILE, &r);
  const size_t capacity = tpurt::SilentConnections::capacity_for(r.rlim_cur);
  auto cs = configs(2);
  Starter s0(cs[0]);
  // The listener is up once task 0 dials its own service: wait for a connect to work.
  double until = now() + time_limit(5);
  for (;;) {
    int probe = silent_connection(cs[0].addresses[0]);
    struct pollfd p = {probe, POLLOUT, 0};
    poll(&p, 1, 100);
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(probe, SOL_SOCKET, SO_ERROR, &err, &len);
    close(probe);
    if (err == 0 || now() > until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<int> flood;
  const size_t count = capacity + 100;
  for (size_t i = 0; i < count; ++i) {
    int fd = silent_connection(cs[0].addresses[0]);
    if (fd < 0) break;
    flood.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // accepted, held
  double start = now();
  Starter s1(cs[1]);
  bool ok = s0.ok(0) && s1.ok(1);
  double took = now() - start;
  if (ok) {
    if (took >= time_limit(2.0)) CHECK_FAIL("task 1 took %.1f s to join under %zu silent connections", took, flood.size());
  }
  CHECK(flood.size() == count);
  CHECK(ended(flood[0], 2));                   // the oldest: dropped
  CHECK(!ended(flood[flood.size() - 1], 0.05));  // the newest: still held
  for (int fd : flood) close(fd);
  if (ok) shutdown_all({s0.task.get(), s1.task.get()});
}

int main(int argc, char** argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cluster_lifetime__next_system_while_the_old_service_lingers),
      cmocka_unit_test(test_cluster_lifetime__restart_inside_a_live_system_is_refused),
      cmocka_unit_test(test_cluster_lifetime__silent_connections),
      cmocka_unit_test(test_cluster_lifetime__silent_flood_from_the_tasks_address),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
