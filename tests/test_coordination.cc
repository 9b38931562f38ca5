// The coordination service and agent (lib/cluster/coordination.h) and the
// handshake (lib/net/handshake.h): 2-3 Coordination instances in threads of this
// process on 127.0.0.1, plus raw clients that speak the wire by hand (a fake agent
// that stops heartbeating, malformed bytes to a listener). Every wait is bounded.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cluster/coordination.h"
#include "cluster/handshake_gate.h"
#include "core/status.h"
#include "net/control_wire.h"
#include "net/frame.h"
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
using tpurt::StepAbort;
using tpurt::TaskFailure;

namespace {

// Free ports: bound to port 0 and released (another process could take one in
// between; on a test machine that is rare enough).
std::vector<int> free_ports(int n) {
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
  return ports;
}

std::vector<CoordinationConfig> configs(int n, const std::string& job = "test") {
  std::vector<int> ports = free_ports(n);
  std::vector<std::string> addresses;
  for (int p : ports) addresses.push_back("127.0.0.1:" + std::to_string(p));
  std::vector<CoordinationConfig> out(n);
  for (int i = 0; i < n; ++i) {
    out[i].job = job;
    out[i].task_id = i;
    out[i].addresses = addresses;
    out[i].service_address = addresses[0];
    out[i].num_cores = 4;
    out[i].init_timeout_ms = time_limit_ms(10000);
    // Generous, so that a loaded machine (sanitizers) loses nobody by accident;
    // the heartbeat tests set 1500 ms.
    out[i].heartbeat_interval_ms = 300;
    out[i].heartbeat_timeout_ms = time_limit_ms(4000);
    out[i].shutdown_barrier_timeout_ms = time_limit_ms(5000);
  }
  return out;
}

struct Started {
  std::vector<std::unique_ptr<Coordination>> tasks;
  std::vector<tpu_status> codes;
  std::vector<std::string> messages;
};

// Starts every config on its own thread (start blocks until all registered).
Started start_all(const std::vector<CoordinationConfig>& cs) {
  Started s;
  size_t n = cs.size();
  s.tasks.resize(n);
  s.codes.assign(n, TPU_OK);
  s.messages.resize(n);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      try {
        s.tasks[i] = Coordination::start(cs[i], nullptr);
      } catch (const tpurt::Error& e) {
        s.codes[i] = e.code();
        s.messages[i] = e.message();
      }
    });
  for (auto& t : threads) t.join();
  return s;
}

bool all_started(const Started& s) {
  bool ok = true;
  for (size_t i = 0; i < s.tasks.size(); ++i)
    if (!s.tasks[i]) {
      CHECK_FAIL("task %zu did not start: %s %s", i, tpu_status_name(s.codes[i]),
                 s.messages[i].c_str());
      ok = false;
    }
  return ok;
}

// Runs fn; returns its error code (TPU_OK if none) and keeps the message.
tpu_status code_of(const std::function<void()>& fn, std::string* message = nullptr) {
  try {
    fn();
  } catch (const tpurt::Error& e) {
    if (message) *message = e.message();
    return e.code();
  }
  return TPU_OK;
}

#define CHECK_THROWS(expr, code, fragment)                                                     \
  do {                                                                                         \
    std::string m_;                                                                            \
    tpu_status c_ = code_of([&] { expr; }, &m_);                                               \
    if (c_ != (code) || m_.find(fragment) == std::string::npos)                                \
      CHECK_FAIL("%s gave %s \"%s\"; expected %s with \"%s\"", #expr, tpu_status_name(c_),     \
                 m_.c_str(), tpu_status_name(code), fragment);                                 \
  } while (0)

// Shuts every task down at once (each waits at the shutdown barrier for the rest).
void shutdown_all(std::vector<std::unique_ptr<Coordination>>& tasks) {
  std::vector<std::thread> threads;
  for (auto& t : tasks)
    if (t)
      threads.emplace_back([&t] {
        std::string m;
        tpu_status c = code_of([&] { t->shutdown(); }, &m);
        if (c != TPU_OK) CHECK_FAIL("shutdown of task %d: %s %s", t->task_id(), tpu_status_name(c), m.c_str());
      });
  for (auto& th : threads) th.join();
  CHECK_NO_WORKER_FAILURES();
}

// Failures and aborts one task saw.
struct Seen {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<TaskFailure> failures;
  std::vector<StepAbort> aborts;

  void watch(Coordination& c) {
    c.on_task_failure([this](const TaskFailure& f) {
      std::lock_guard<std::mutex> lock(mu);
      failures.push_back(f);
      cv.notify_all();
    });
    c.on_step_abort([this](const StepAbort& a) {
      std::lock_guard<std::mutex> lock(mu);
      aborts.push_back(a);
      cv.notify_all();
    });
  }
  bool wait_failures(size_t n, double seconds) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::duration<double>(time_limit(seconds)),
                       [&] { return failures.size() >= n; });
  }
  bool wait_aborts(size_t n, double seconds) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::duration<double>(time_limit(seconds)),
                       [&] { return aborts.size() >= n; });
  }
};

int connect_raw(const std::string& address) {
  std::string host, port;
  tpurt::net::split_host_port(address, &host, &port);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  std::memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(port)));
  inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the peer closes fd (read gives 0 or an error) within `seconds`.
bool closed_by_peer(int fd, double seconds) {
  double end = now() + time_limit(seconds);
  char buf[4096];
  while (now() < end) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return true;  // EOF or ECONNRESET
  }
  return false;
}

void send_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

std::string header_bytes(uint16_t type, uint64_t length, uint64_t seq = 0) {
  tpurt::net::FrameHeader h;
  h.type = type;
  h.length = length;
  h.seq = seq;
  std::string s(tpurt::net::kFrameHeaderBytes, '\0');
  tpurt::net::encode_header(h, reinterpret_cast<unsigned char*>(&s[0]));
  return s;
}

// ---------------------------------------------------------------------------

void test_coordination__forms_and_shuts_down(void** state) {
  (void)state;
  auto cs = configs(3);
  Started s = start_all(cs);
  if (!all_started(s)) return;
  Seen seen[3];
  for (int i = 0; i < 3; ++i) seen[i].watch(*s.tasks[i]);
  for (int i = 0; i < 3; ++i) {
    const Coordination& c = *s.tasks[i];
    CHECK(c.task_id() == i);
    CHECK(c.num_tasks() == 3);
    CHECK(c.cluster_id() == s.tasks[0]->cluster_id());
    CHECK(c.cluster_id() == "test," + cs[0].addresses[0] + "," + cs[0].addresses[1] + "," +
                                cs[0].addresses[2]);
    CHECK(c.tasks().size() == 3);
    for (int t = 0; t < 3 && c.tasks().size() == 3; ++t) {
      CHECK(c.tasks()[t].task_id == t);
      CHECK(c.tasks()[t].address == cs[0].addresses[t]);
      CHECK(c.tasks()[t].num_cores == 4);
      CHECK(c.tasks()[t].incarnation == s.tasks[t]->incarnation());
      CHECK(c.tasks()[t].hostname == s.tasks[0]->tasks()[t].hostname);
      CHECK(!c.tasks()[t].hostname.empty());
    }
  }
  CHECK(s.tasks[0]->incarnation() != s.tasks[1]->incarnation());
  shutdown_all(s.tasks);
  for (int i = 0; i < 3; ++i) {
    CHECK(!s.tasks[i]->failure(nullptr));
    CHECK(seen[i].failures.empty());
    CHECK_THROWS(s.tasks[i]->kv_set("a", "b"), TPU_FAILED_PRECONDITION, "shut down");
    CHECK_THROWS(s.tasks[i]->barrier("b", 100, {}), TPU_FAILED_PRECONDITION, "shut down");
    s.tasks[i]->shutdown();  // idempotent
  }
}

// Task 1 never shuts down: task 0's shutdown barrier names it, and task 0 still
// disconnects and stops.
void test_coordination__shutdown_barrier_deadline(void** state) {
  (void)state;
  auto cs = configs(2);
  for (auto& c : cs) c.shutdown_barrier_timeout_ms = 400;
  Started s = start_all(cs);
  if (!all_started(s)) return;
  std::string m;
  CHECK(code_of([&] { s.tasks[0]->shutdown(); }, &m) == TPU_DEADLINE_EXCEEDED);
  CHECK(m.find("shutdown barrier: 1 of 2 tasks arrived within 400 ms; missing: task 1 (" +
               cs[0].addresses[1] + ")") != std::string::npos);
  CHECK_THROWS(s.tasks[0]->kv_set("k", "v"), TPU_FAILED_PRECONDITION, "shut down");
  // The service has gone with task 0.
  CHECK(code_of([&] { s.tasks[1]->kv_set("k", "v"); }) == TPU_UNAVAILABLE);
  CHECK(code_of([&] { s.tasks[1]->shutdown(); }) == TPU_UNAVAILABLE);
}

void test_coordination__start_deadline_names_missing_task(void** state) {
  (void)state;
  auto cs = configs(3);
  cs.pop_back();  // task 2 never starts
  for (auto& c : cs) c.init_timeout_ms = 800;
  Started s = start_all(cs);
  for (int i = 0; i < 2; ++i) {
    CHECK(!s.tasks[i]);
    CHECK(s.codes[i] == TPU_DEADLINE_EXCEEDED);
    CHECK(s.messages[i].find("2 of 3 tasks registered within 800 ms") != std::string::npos);
    CHECK(s.messages[i].find("missing: task 2 (" + cs[0].addresses[2] + ")") != std::string::npos);
  }
  // A task whose service never comes.
  auto lone = configs(2);
  lone[1].init_timeout_ms = 300;
  std::string m;
  CHECK(code_of([&] { Coordination::start(lone[1], nullptr); }, &m) == TPU_DEADLINE_EXCEEDED);
  CHECK(m.find(lone[1].service_address) != std::string::npos);
}

void test_coordination__bad_configs(void** state) {
  (void)state;
  auto cs = configs(2);
  CoordinationConfig c = cs[0];
  c.task_id = 2;
  CHECK_THROWS(Coordination::start(c, nullptr), TPU_INVALID_ARGUMENT, "task id 2");
  c = cs[0];
  c.addresses[1] = "nohostport";
  CHECK_THROWS(Coordination::start(c, nullptr), TPU_INVALID_ARGUMENT, "nohostport");
  c = cs[0];
  c.num_cores = 0;
  CHECK_THROWS(Coordination::start(c, nullptr), TPU_INVALID_ARGUMENT, "num_cores");
  // Different core counts: everyone hears which.
  cs[1].num_cores = 8;
  Started s = start_all(cs);
  for (int i = 0; i < 2; ++i) {
    CHECK(s.codes[i] == TPU_INVALID_ARGUMENT);
    CHECK(s.messages[i].find("task 0: 4, task 1: 8") != std::string::npos);
  }
}

// The handshake on its own: a server thread on a plain listening socket.
struct HandshakeResult {
  tpu_status server = TPU_OK, client = TPU_OK;
  std::string server_message, client_message;
};

HandshakeResult handshake(const std::string& server_cluster, const std::string& server_token,
                          const std::string& client_cluster, const std::string& client_token) {
  HandshakeResult r;
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  std::memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  listen(lfd, 4);
  socklen_t len = sizeof a;
  getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  std::string address = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  std::thread server([&] {
    int fd = accept(lfd, nullptr, nullptr);
    r.server = code_of([&] {
      tpurt::net::Hello h = tpurt::net::accept_handshake(fd, server_cluster, server_token,
                                                         tpurt::net::now_ms() + 5000);
      if (h.task_id != 3 || h.incarnation != 77) throw tpurt::Error(TPU_INTERNAL, "wrong hello");
    }, &r.server_message);
    close(fd);
  });
  tpurt::net::Hello me;
  me.cluster_id = client_cluster;
  me.task_id = 3;
  me.incarnation = 77;
  me.kind = tpurt::net::ConnectionKind::kData;
  r.client = code_of([&] {
    int fd = tpurt::net::dial(address, me, client_token, tpurt::net::now_ms() + 5000);
    close(fd);
  }, &r.client_message);
  server.join();
  close(lfd);
  return r;
}

void test_coordination__handshake_tokens(void** state) {
  (void)state;
  HandshakeResult r = handshake("c", "secret", "c", "secret");
  CHECK(r.server == TPU_OK && r.client == TPU_OK);
  r = handshake("c", "", "c", "");
  CHECK(r.server == TPU_OK && r.client == TPU_OK);
  r = handshake("c", "secret", "c", "wrong");
  CHECK(r.server == TPU_UNAUTHENTICATED && r.client == TPU_UNAUTHENTICATED);
  CHECK(r.server_message.find("wrong cluster token") != std::string::npos);
  r = handshake("c", "secret", "c", "");
  CHECK(r.server == TPU_UNAUTHENTICATED && r.client == TPU_UNAUTHENTICATED);
  r = handshake("c", "", "c", "secret");
  CHECK(r.server == TPU_UNAUTHENTICATED && r.client == TPU_UNAUTHENTICATED);
  r = handshake("A", "", "B", "");
  CHECK(r.server == TPU_INVALID_ARGUMENT && r.client == TPU_INVALID_ARGUMENT);
  CHECK(r.client_message.find("task 3 belongs to cluster B, this one is A") != std::string::npos);
  // Nobody listening: the deadline, naming the address.
  tpurt::net::Hello me;
  me.cluster_id = "c";
  me.task_id = 0;
  std::string address = "127.0.0.1:" + std::to_string(free_ports(1)[0]);
  std::string m;
  CHECK(code_of([&] { close(tpurt::net::dial(address, me, "", tpurt::net::now_ms() + 200)); }, &m) ==
        TPU_DEADLINE_EXCEEDED);
  CHECK(m.find(address) != std::string::npos);
  CHECK(code_of([&] { tpurt::net::dial("[::1", me, "", tpurt::net::now_ms() + 200); }) ==
        TPU_INVALID_ARGUMENT);
}

void test_coordination__cluster_tokens(void** state) {
  (void)state;
  auto cs = configs(2);
  for (auto& c : cs) c.token = "t0ken";
  Started s = start_all(cs);
  if (!all_started(s)) return;
  shutdown_all(s.tasks);
  // Wrong token, and none, on task 1: it fails at once; task 0 waits in vain.
  for (const char* token : {"other", ""}) {
    cs = configs(2);
    cs[0].token = "t0ken";
    cs[1].token = token;
    for (auto& c : cs) c.init_timeout_ms = 1500;
    s = start_all(cs);
    CHECK(s.codes[1] == TPU_UNAUTHENTICATED);
    CHECK(s.codes[0] == TPU_DEADLINE_EXCEEDED);
  }
}

void test_coordination__key_value(void** state) {
  (void)state;
  auto cs = configs(2);
  Started s = start_all(cs);
  if (!all_started(s)) return;
  Coordination& a = *s.tasks[0];
  Coordination& b = *s.tasks[1];
  a.kv_set("x", "1");
  CHECK(b.kv_get("x", 1000) == "1");
  CHECK_THROWS(b.kv_set("x", "2"), TPU_ALREADY_EXISTS, "'x'");
  std::string v;
  CHECK(!a.kv_try_get("absent", &v));
  CHECK(a.kv_try_get("x", &v) && v == "1");
  // Normalisation: ///n//m/ is n/m.
  b.kv_set("///n//m/", "nm");
  CHECK(a.kv_get("n/m", 1000) == "nm");
  CHECK_THROWS(a.kv_set("//", "v"), TPU_INVALID_ARGUMENT, "empty");
  CHECK(tpurt::normalize_key("///a//b/c//") == "a/b/c");
  // Binary values, the empty value.
  std::string bin("\0\1\2\xff", 4);
  a.kv_set("bin", bin);
  CHECK(b.kv_get("bin", 1000) == bin);
  a.kv_set("empty", "");
  CHECK(b.kv_try_get("empty", &v) && v.empty());
  // A get blocks until another task sets the key.
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    b.kv_set("late", "here");
  });
  CHECK(a.kv_get("late", time_limit_ms(5000)) == "here");
  later.join();
  CHECK_THROWS(a.kv_get("never", 200), TPU_DEADLINE_EXCEEDED, "key 'never' was not set within 200 ms");
  CHECK_THROWS(a.kv_get("never", 0), TPU_DEADLINE_EXCEEDED, "within 0 ms");
  CHECK(a.kv_get("x", 0) == "1");
  CHECK_THROWS(a.kv_get("x", -1), TPU_INVALID_ARGUMENT, "negative");
  // Delete takes the key and everything under key/, nothing else.
  a.kv_set("d", "0");
  a.kv_set("d/e", "1");
  a.kv_set("d/e/f", "2");
  a.kv_set("dx", "3");
  b.kv_delete("d");
  CHECK(!a.kv_try_get("d", &v));
  CHECK(!a.kv_try_get("d/e", &v));
  CHECK(!a.kv_try_get("d/e/f", &v));
  CHECK(a.kv_try_get("dx", &v) && v == "3");
  b.kv_set("d", "again");
  // Size bound, checked before sending.
  CHECK_THROWS(a.kv_set("big", std::string((8u << 20) + 1, 'x')), TPU_RESOURCE_EXHAUSTED, "big");
  std::string big((8u << 20), 'y');
  a.kv_set("big", big);
  CHECK(b.kv_get("big", 5000) == big);
  shutdown_all(s.tasks);
}

void test_coordination__barriers(void** state) {
  (void)state;
  auto cs = configs(3);
  Started s = start_all(cs);
  if (!all_started(s)) return;
  auto at_barrier = [&](std::vector<int> who, const std::string& id, int64_t timeout,
                        std::vector<std::vector<int32_t>> lists, std::vector<tpu_status>* codes,
                        std::vector<std::string>* messages) {
    codes->assign(who.size(), TPU_OK);
    messages->assign(who.size(), "");
    std::vector<std::thread> threads;
    for (size_t i = 0; i < who.size(); ++i)
      threads.emplace_back([&, i] {
        (*codes)[i] = code_of([&] { s.tasks[who[i]]->barrier(id, timeout, lists[i]); }, &(*messages)[i]);
      });
    for (auto& t : threads) t.join();
  };
  std::vector<tpu_status> codes;
  std::vector<std::string> messages;
  // Every task: passes, twice with the same id.
  for (int round = 0; round < 2; ++round) {
    at_barrier({0, 1, 2}, "all", time_limit_ms(5000), {{}, {}, {}}, &codes, &messages);
    for (tpu_status c : codes) CHECK(c == TPU_OK);
  }
  // A subset.
  at_barrier({0, 2}, "sub", time_limit_ms(5000), {{0, 2}, {2, 0}}, &codes, &messages);
  for (tpu_status c : codes) CHECK(c == TPU_OK);
  // Task 2 stays away: the deadline names it.
  at_barrier({0, 1}, "late", 300, {{}, {}}, &codes, &messages);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(codes[i] == TPU_DEADLINE_EXCEEDED);
    CHECK(messages[i].find("barrier 'late': 2 of 3 tasks arrived within 300 ms; missing: task 2 (" +
                           cs[0].addresses[2] + ")") != std::string::npos);
  }
  // Latecomer to that instance gets the same answer at once.
  CHECK_THROWS(s.tasks[2]->barrier("late", 5000, {}), TPU_DEADLINE_EXCEEDED, "missing: task 2");
  // Disagreeing lists.
  at_barrier({0, 1}, "disagree", time_limit_ms(5000), {{0, 1}, {0, 1, 2}}, &codes, &messages);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(codes[i] == TPU_INVALID_ARGUMENT);
    CHECK(messages[i].find("disagree") != std::string::npos);
  }
  CHECK_THROWS(s.tasks[0]->barrier("mine", 1000, {1, 2}), TPU_INVALID_ARGUMENT, "not in its task list");
  CHECK_THROWS(s.tasks[0]->barrier("dup", 1000, {0, 0}), TPU_INVALID_ARGUMENT, "listed twice");
  CHECK_THROWS(s.tasks[0]->barrier("unknown", 1000, {0, 7}), TPU_INVALID_ARGUMENT, "task 7");
  CHECK_THROWS(s.tasks[0]->barrier("zero", 0, {}), TPU_INVALID_ARGUMENT, "timeout_ms");
  shutdown_all(s.tasks);
}

void test_coordination__destroyed_task_is_reported(void** state) {
  (void)state;
  auto cs = configs(3);
  Started s = start_all(cs);
  if (!all_started(s)) return;
  Seen seen0, seen2;
  seen0.watch(*s.tasks[0]);
  seen2.watch(*s.tasks[2]);
  s.tasks[1].reset();  // no shutdown()
  for (Seen* seen : {&seen0, &seen2}) {
    CHECK(seen->wait_failures(1, 5));
    std::lock_guard<std::mutex> lock(seen->mu);
    if (seen->failures.empty()) continue;
    CHECK(seen->failures[0].task == 1);
    CHECK(seen->failures[0].code == TPU_UNAVAILABLE);
    CHECK(seen->failures[0].message.find("task 1 (" + cs[0].addresses[1] + ")") != std::string::npos);
  }
  TaskFailure f;
  CHECK(s.tasks[2]->failure(&f) && f.task == 1);
  // Key-value still works among the live; a barrier with task 1 cannot pass.
  s.tasks[0]->kv_set("k", "v");
  CHECK(s.tasks[2]->kv_get("k", 1000) == "v");
  CHECK_THROWS(s.tasks[2]->barrier("with1", 5000, {}), TPU_UNAVAILABLE, "task 1");
  // The shutdown barrier goes on without it.
  shutdown_all(s.tasks);
  CHECK(seen0.failures.size() == 1 && seen2.failures.size() == 1);
}

void test_coordination__service_lost(void** state) {
  (void)state;
  auto cs = configs(2);
  Started s = start_all(cs);
  if (!all_started(s)) return;
  Seen seen;
  seen.watch(*s.tasks[1]);
  s.tasks[0].reset();
  CHECK(seen.wait_failures(1, 5));
  {
    std::lock_guard<std::mutex> lock(seen.mu);
    if (!seen.failures.empty()) {
      CHECK(seen.failures[0].task == 0);
      CHECK(seen.failures[0].code == TPU_UNAVAILABLE);
      CHECK(seen.failures[0].message.find("task 0") != std::string::npos);
    }
  }
  CHECK_THROWS(s.tasks[1]->kv_set("k", "v"), TPU_UNAVAILABLE, "task 0");
  CHECK(code_of([&] { s.tasks[1]->shutdown(); }) == TPU_UNAVAILABLE);
}

// The next control frame's envelope on a raw connection (nullptr: closed, malformed
// or nothing within `seconds`).
tpurt::wire::EnvelopePtr read_envelope(int fd, double seconds, uint64_t* seq = nullptr) {
  tpurt::wire::FrameReader reader;
  double end = now() + time_limit(seconds);
  char buf[4096];
  while (now() < end) {
    tpurt::net::FrameHeader h;
    std::string payload, error;
    int got = reader.next(&h, &payload, &error);
    if (got < 0) return nullptr;
    if (got == 1) {
      if (seq) *seq = h.seq;
      return tpurt::wire::parse_envelope(reinterpret_cast<const unsigned char*>(payload.data()),
                                         payload.size(), &error);
    }
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    // One byte at a time: what follows this frame stays in the socket.
    ssize_t n = recv(fd, buf, 1, 0);
    if (n <= 0) return nullptr;
    reader.append(buf, static_cast<size_t>(n));
  }
  return nullptr;
}

// A hand-made agent for task `task`: the handshake, then a raw Register frame.
int fake_agent(const CoordinationConfig& c, int task, const std::string& cluster_id) {
  tpurt::net::Hello hello;
  hello.cluster_id = cluster_id;
  hello.task_id = task;
  hello.incarnation = 12345;
  hello.kind = tpurt::net::ConnectionKind::kCoordination;
  int fd = tpurt::net::dial(c.service_address, hello, c.token, tpurt::net::now_ms() + 5000);
  Tpurt__Wire__TaskInfo info = TPURT__WIRE__TASK_INFO__INIT;
  info.task_id = task;
  info.hostname = const_cast<char*>("fake");
  std::string address = task < static_cast<int>(c.addresses.size()) ? c.addresses[task] : "127.0.0.1:1";
  info.address = const_cast<char*>(address.c_str());
  info.num_cores = c.num_cores;
  info.incarnation = 12345;
  Tpurt__Wire__Register reg = TPURT__WIRE__REGISTER__INIT;
  reg.task = &info;
  reg.timeout_ms = 5000;
  tpurt::wire::Envelope e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_REGISTER;
  e.register_ = &reg;
  send_all(fd, tpurt::wire::pack_frame(1, e));
  return fd;
}

std::string cluster_id_of(const CoordinationConfig& c) {
  std::string id = c.job;
  for (auto& a : c.addresses) id += "," + a;
  return id;
}

void test_coordination__heartbeat_timeout(void** state) {
  (void)state;
  auto cs = configs(2);
  for (auto& c : cs) c.heartbeat_timeout_ms = 1500;
  std::unique_ptr<Coordination> t0;
  std::string err;
  std::thread starter([&] { code_of([&] { t0 = Coordination::start(cs[0], nullptr); }, &err); });
  int fd = -1;
  code_of([&] { fd = fake_agent(cs[0], 1, cluster_id_of(cs[0])); }, &err);
  starter.join();
  if (!t0 || fd < 0) {
    CHECK_FAIL("no cluster: %s", err.c_str());
    if (fd >= 0) close(fd);
    return;
  }
  Seen seen;
  seen.watch(*t0);
  CHECK(seen.wait_failures(1, 6));
  {
    std::lock_guard<std::mutex> lock(seen.mu);
    if (!seen.failures.empty()) {
      CHECK(seen.failures[0].task == 1);
      CHECK(seen.failures[0].code == TPU_UNAVAILABLE);
      CHECK(seen.failures[0].message.find("task 1 (" + cs[0].addresses[1] +
                                          ") missed heartbeats for 1500 ms") != std::string::npos);
    }
  }
  CHECK(closed_by_peer(fd, 3));  // the service drops the silent task
  close(fd);
  std::string m;
  CHECK(code_of([&] { t0->shutdown(); }, &m) == TPU_OK);
}

// A service that answers the registration, then never again: the agent reports
// task 0 lost once heartbeat_timeout_ms passes without an answer.
void test_coordination__silent_service(void** state) {
  (void)state;
  auto cs = configs(2);
  for (auto& c : cs) c.heartbeat_timeout_ms = 1500;
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a;
  std::memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string host, port;
  tpurt::net::split_host_port(cs[0].addresses[0], &host, &port);
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(port)));
  if (bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(lfd, 4) != 0) {
    CHECK_FAIL("cannot listen on %s", cs[0].addresses[0].c_str());
    close(lfd);
    return;
  }
  int served = -1;
  std::thread service([&] {
    struct pollfd p = {lfd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(time_limit_ms(5000))) <= 0) return;
    int fd = accept(lfd, nullptr, nullptr);
    if (code_of([&] {
          tpurt::net::accept_handshake(fd, cluster_id_of(cs[0]), "", tpurt::net::now_ms() + 5000);
        }) != TPU_OK) {
      close(fd);
      return;
    }
    uint64_t seq = 0;
    tpurt::wire::EnvelopePtr reg = read_envelope(fd, 5, &seq);
    if (!reg || reg->msg_case != TPURT__WIRE__ENVELOPE__MSG_REGISTER) {
      close(fd);
      return;
    }
    Tpurt__Wire__TaskInfo infos[2];
    Tpurt__Wire__TaskInfo* ptrs[2];
    for (int i = 0; i < 2; ++i) {
      tpurt__wire__task_info__init(&infos[i]);
      infos[i].task_id = i;
      infos[i].address = const_cast<char*>(cs[0].addresses[i].c_str());
      infos[i].num_cores = 4;
      ptrs[i] = &infos[i];
    }
    Tpurt__Wire__Response r = TPURT__WIRE__RESPONSE__INIT;
    r.n_tasks = 2;
    r.tasks = ptrs;
    tpurt::wire::Envelope e = TPURT__WIRE__ENVELOPE__INIT;
    e.msg_case = TPURT__WIRE__ENVELOPE__MSG_RESPONSE;
    e.response = &r;
    send_all(fd, tpurt::wire::pack_frame(seq, e));
    served = fd;  // then silence, the connection open
  });
  std::unique_ptr<Coordination> t1;
  std::string m;
  CHECK(code_of([&] { t1 = Coordination::start(cs[1], nullptr); }, &m) == TPU_OK);
  service.join();
  if (t1) {
    Seen seen;
    seen.watch(*t1);
    CHECK(seen.wait_failures(1, 6));
    std::lock_guard<std::mutex> lock(seen.mu);
    if (!seen.failures.empty()) {
      CHECK(seen.failures[0].task == 0);
      CHECK(seen.failures[0].code == TPU_UNAVAILABLE);
      CHECK(seen.failures[0].message.find("coordination service in task 0 (" + cs[0].addresses[0] +
                                          ") lost: no answer to heartbeats for 1500 ms") !=
            std::string::npos);
    }
  }
  if (t1) CHECK(code_of([&] { t1->shutdown(); }) == TPU_UNAVAILABLE);
  if (served >= 0) close(served);
  close(lfd);
}

void test_coordination__registration_conflicts(void** state) {
  (void)state;
  auto cs = configs(2);
  cs[0].init_timeout_ms = 1500;
  cs[0].heartbeat_timeout_ms = 20000;  // the fake agent never heartbeats
  std::unique_ptr<Coordination> t0;
  std::string err;
  std::thread starter([&] { code_of([&] { t0 = Coordination::start(cs[0], nullptr); }, &err); });
  int fd = -1;
  code_of([&] { fd = fake_agent(cs[0], 1, cluster_id_of(cs[0])); }, &err);
  starter.join();
  if (!t0 || fd < 0) {
    CHECK_FAIL("no cluster: %s", err.c_str());
    if (fd >= 0) close(fd);
    return;
  }
  // The same process registering again (a retry on a new connection): harmless.
  {
    tpurt::wire::EnvelopePtr first = read_envelope(fd, 3);
    CHECK(first && first->msg_case == TPURT__WIRE__ENVELOPE__MSG_RESPONSE &&
          first->response->code == TPU_OK && first->response->n_tasks == 2);
    int again = -1;
    code_of([&] { again = fake_agent(cs[0], 1, cluster_id_of(cs[0])); });
    CHECK(again >= 0);
    if (again >= 0) {
      tpurt::wire::EnvelopePtr r = read_envelope(again, 3);
      CHECK(r && r->msg_case == TPURT__WIRE__ENVELOPE__MSG_RESPONSE && r->response->code == TPU_OK &&
            r->response->n_tasks == 2);
      // The new connection serves task 1 now: the old one's end is no loss.
      close(fd);
      fd = again;
    }
    // A task id the cluster does not have.
    int stranger = -1;
    code_of([&] { stranger = fake_agent(cs[0], 5, cluster_id_of(cs[0])); });
    CHECK(stranger >= 0);
    if (stranger >= 0) {
      tpurt::wire::EnvelopePtr r = read_envelope(stranger, 3);
      CHECK(r && r->msg_case == TPURT__WIRE__ENVELOPE__MSG_RESPONSE &&
            r->response->code == TPU_INVALID_ARGUMENT &&
            std::string(r->response->message).find("task 5 is not in the cluster") != std::string::npos);
      close(stranger);
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(!t0->failure(nullptr));
  // A second process claiming task 1 while the first is alive.
  CHECK_THROWS(Coordination::start(cs[1], nullptr), TPU_ALREADY_EXISTS,
               "duplicate task id 1: task 1 is already registered by a process on host ");
  Seen seen;
  seen.watch(*t0);
  close(fd);  // task 1 lost
  CHECK(seen.wait_failures(1, 5));
  // Its restart cannot join the cluster that lost it.
  CHECK_THROWS(Coordination::start(cs[1], nullptr), TPU_ABORTED, "task 1 restarted");
  t0->shutdown();
}

// Two tasks with the same id: the second cannot listen on the address (in use), and is
// told it is a duplicate, naming both hosts, not "Address already in use" alone. Task 0
// twice: the same, against the first one's service.
void test_coordination__duplicate_task_id(void** state) {
  (void)state;
  for (int dup = 1; dup >= 0; --dup) {
    auto cs = configs(2);
    Started s = start_all(cs);
    if (!all_started(s)) return;
    std::string host = s.tasks[0]->tasks()[dup].hostname;
    std::string m;
    CHECK(code_of([&] { Coordination::start(cs[dup], nullptr); }, &m) == TPU_ALREADY_EXISTS);
    const std::string want = "duplicate task id " + std::to_string(dup) + ": task " +
                             std::to_string(dup) + " is already registered by a process on host " +
                             host;
    if (m.find(want) == std::string::npos || m.find("this one runs on host " + host) == std::string::npos)
      CHECK_FAIL("a second task %d: \"%s\"; expected \"%s\" and this one's host", dup, m.c_str(),
                 want.c_str());
    shutdown_all(s.tasks);
  }
}

// The gate that admits unauthenticated connections: a cap per source, a cap in all,
// and at the cap a newcomer from a quieter source ends the busiest source's oldest.
void test_coordination__handshake_gate(void** state) {
  (void)state;
  using tpurt::HandshakeGate;
  HandshakeGate gate;
  std::vector<int> fds;
  auto fresh = [&] {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return -1;
    fds.push_back(sv[0]);
    fds.push_back(sv[1]);
    return sv[0];
  };
  auto ended = [](int fd) {  // shut down by the gate: a read sees the end at once
    char c;
    return recv(fd, &c, 1, MSG_DONTWAIT) == 0;
  };
  std::string why;
  std::vector<int> from_a;
  for (int i = 0; i < HandshakeGate::kMaxPerSource; ++i) {
    from_a.push_back(fresh());
    CHECK(gate.admit(from_a.back(), "10.0.0.1", &why));
  }
  CHECK(!gate.admit(fresh(), "10.0.0.1", &why));
  CHECK(why.find("from 10.0.0.1") != std::string::npos);
  // Fill up from other sources, up to 4 each (the first source stays the busiest).
  int admitted = HandshakeGate::kMaxPerSource;
  for (int s = 2; admitted < HandshakeGate::kMaxInFlight; ++s)
    for (int k = 0; k < 4 && admitted < HandshakeGate::kMaxInFlight; ++k, ++admitted)
      CHECK(gate.admit(fresh(), "10.0.0." + std::to_string(s), &why));
  // A real task's first connection: 10.0.0.1's oldest handshake makes way.
  int real = fresh();
  CHECK(gate.admit(real, "127.0.0.1", &why));
  CHECK(ended(from_a[0]));
  CHECK(!ended(from_a[1]));
  gate.finished(from_a[0]);  // its thread ends: no place was held any more
  gate.exited();
  // A source as busy as the busiest is refused rather than served by evicting.
  CHECK(gate.admit(fresh(), "10.0.0.2", &why));  // 10.0.0.1 (7) > 10.0.0.2 (4)
  gate.finished(real);
  gate.exited();
  for (int i = 0; i < HandshakeGate::kMaxInFlight; ++i) gate.exited();  // the rest
  gate.close(100);
  CHECK(ended(from_a[1]));  // close ends every handshake in flight
  for (int fd : fds) close(fd);
}

void test_coordination__step_abort_relay(void** state) {
  (void)state;
  auto cs = configs(3);
  Started s = start_all(cs);
  if (!all_started(s)) return;
  Seen seen[3];
  for (int i = 0; i < 3; ++i) seen[i].watch(*s.tasks[i]);
  StepAbort a;
  a.step = 42;
  a.origin_task = 1;
  a.origin_replica = 5;
  a.code = TPU_INTERNAL;
  a.message = "replica 5 failed";
  s.tasks[1]->broadcast_step_abort(a);
  for (int i : {0, 2}) {
    CHECK(seen[i].wait_aborts(1, 5));
    std::lock_guard<std::mutex> lock(seen[i].mu);
    if (seen[i].aborts.empty()) continue;
    CHECK(seen[i].aborts[0].step == 42);
    CHECK(seen[i].aborts[0].origin_task == 1);
    CHECK(seen[i].aborts[0].origin_replica == 5);
    CHECK(seen[i].aborts[0].code == TPU_INTERNAL);
    CHECK(seen[i].aborts[0].message == "replica 5 failed");
  }
  // A callback runs on the loop thread: a blocking call from there is refused.
  std::atomic<int> from_callback{-1};
  s.tasks[0]->on_step_abort([&](const StepAbort&) {
    from_callback = code_of([&] { s.tasks[0]->kv_set("cb", "x"); });
  });
  s.tasks[1]->broadcast_step_abort(a);
  double end = now() + time_limit(5);
  while (from_callback.load() < 0 && now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(from_callback.load() == TPU_FAILED_PRECONDITION);
  seen[0].watch(*s.tasks[0]);
  // report_error: every task hears of task 2's failure.
  s.tasks[2]->report_error(TPU_INTERNAL, "disk on fire");
  for (int i : {0, 1}) {
    CHECK(seen[i].wait_failures(1, 5));
    std::lock_guard<std::mutex> lock(seen[i].mu);
    if (seen[i].failures.empty()) continue;
    CHECK(seen[i].failures[0].task == 2);
    CHECK(seen[i].failures[0].code == TPU_INTERNAL);
    CHECK(seen[i].failures[0].message.find("disk on fire") != std::string::npos);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  {
    std::lock_guard<std::mutex> lock(seen[1].mu);
    CHECK(seen[1].aborts.empty());  // not back to its origin
  }
  shutdown_all(s.tasks);
}

void test_coordination__malformed_input(void** state) {
  (void)state;
  auto cs = configs(2);
  Started s = start_all(cs);
  if (!all_started(s)) return;
  Seen seen;
  seen.watch(*s.tasks[0]);
  std::mt19937 rng(7);
  for (const std::string& address : {cs[0].addresses[0], cs[0].addresses[1]}) {
    // Random bytes.
    int fd = connect_raw(address);
    std::string junk(300, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    send_all(fd, junk);
    CHECK(closed_by_peer(fd, 3));
    close(fd);
    // An oversized length.
    fd = connect_raw(address);
    send_all(fd, header_bytes(1, 1ull << 40));
    CHECK(closed_by_peer(fd, 3));
    close(fd);
    // A handshake frame above 4 KiB.
    fd = connect_raw(address);
    send_all(fd, header_bytes(1, 5000));
    CHECK(closed_by_peer(fd, 3));
    close(fd);
    // A valid header with garbage protobuf.
    fd = connect_raw(address);
    send_all(fd, header_bytes(1, 8) + std::string("\xff\xff\xff\xff\xff\xff\xff\xff", 8));
    CHECK(closed_by_peer(fd, 3));
    close(fd);
    // A truncated frame, then the end of the stream.
    fd = connect_raw(address);
    send_all(fd, header_bytes(1, 100) + "abc");
    shutdown(fd, SHUT_WR);
    CHECK(closed_by_peer(fd, 3));
    close(fd);
    // A data frame during the handshake.
    fd = connect_raw(address);
    send_all(fd, header_bytes(2, 4) + "abcd");
    CHECK(closed_by_peer(fd, 3));
    close(fd);
  }
  // A coordination connection to task 1 (not the service) is refused after its handshake.
  tpurt::net::Hello hello;
  hello.cluster_id = s.tasks[0]->cluster_id();
  hello.task_id = 0;
  hello.kind = tpurt::net::ConnectionKind::kCoordination;
  int fd = tpurt::net::dial(cs[0].addresses[1], hello, "", tpurt::net::now_ms() + 3000);
  CHECK(closed_by_peer(fd, 3));
  close(fd);
  // A silent connection left open while the cluster works and shuts down.
  int silent = connect_raw(cs[0].addresses[0]);
  s.tasks[1]->kv_set("still", "works");
  CHECK(s.tasks[0]->kv_get("still", 1000) == "works");
  {
    std::lock_guard<std::mutex> lock(seen.mu);
    CHECK(seen.failures.empty());
  }
  shutdown_all(s.tasks);
  close(silent);
}

// Data connections: the dialled task's on_data gets the peer's task id and a
// connected socket it owns.
void test_coordination__data_connections(void** state) {
  (void)state;
  auto cs = configs(2);
  for (auto& c : cs) c.token = "tok";
  std::mutex mu;
  std::condition_variable cv;
  int got_peer = -1, got_fd = -1;
  auto on_data = [&](int peer, int fd) {
    std::lock_guard<std::mutex> lock(mu);
    got_peer = peer;
    got_fd = fd;
    cv.notify_all();
  };
  std::vector<std::unique_ptr<Coordination>> tasks(2);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([&, i] {
      code_of([&] { tasks[i] = Coordination::start(cs[i], i == 1 ? Coordination::DataConnectionHandler(on_data) : nullptr); });
    });
  for (auto& t : threads) t.join();
  if (!tasks[0] || !tasks[1]) {
    CHECK_FAIL("the cluster did not form");
    return;
  }
  tpurt::net::Hello hello;
  hello.cluster_id = tasks[0]->cluster_id();
  hello.task_id = 0;
  hello.incarnation = tasks[0]->incarnation();
  hello.kind = tpurt::net::ConnectionKind::kData;
  int fd = tpurt::net::dial(cs[0].addresses[1], hello, "tok", tpurt::net::now_ms() + 5000);
  send_all(fd, "ping");
  {
    std::unique_lock<std::mutex> lock(mu);
    CHECK(cv.wait_for(lock, std::chrono::duration<double>(time_limit(5)), [&] { return got_fd >= 0; }));
  }
  if (got_fd >= 0) {
    CHECK(got_peer == 0);
    char buf[4] = {0};
    size_t have = 0;
    double end = now() + time_limit(3);
    while (have < 4 && now() < end) {
      struct pollfd p = {got_fd, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      ssize_t n = recv(got_fd, buf + have, 4 - have, 0);
      if (n <= 0) break;
      have += static_cast<size_t>(n);
    }
    CHECK(have == 4 && std::memcmp(buf, "ping", 4) == 0);
    close(got_fd);
  }
  close(fd);
  // The wrong token on a data connection: refused on both sides.
  CHECK(code_of([&] { close(tpurt::net::dial(cs[0].addresses[1], hello, "bad", tpurt::net::now_ms() + 3000)); }) ==
        TPU_UNAUTHENTICATED);
  shutdown_all(tasks);
}

// A registered agent sending well-formed but arbitrary requests: the service
// answers or refuses each, and keeps serving the others.
void test_coordination__arbitrary_requests(void** state) {
  (void)state;
  auto cs = configs(3);
  std::vector<CoordinationConfig> real = {cs[0], cs[1]};
  for (auto& c : real) c.heartbeat_timeout_ms = 20000;  // the fake agent never heartbeats
  Started s;
  int fd = -1;
  std::thread faker([&] { code_of([&] { fd = fake_agent(cs[0], 2, cluster_id_of(cs[0])); }); });
  s = start_all(real);
  faker.join();
  if (!all_started(s) || fd < 0) {
    if (fd >= 0) close(fd);
    return;
  }
  Seen seen;
  seen.watch(*s.tasks[0]);
  std::mt19937_64 rng(99);
  std::thread reader([&] {  // drains the answers so the service never blocks on us
    char buf[4096];
    double end = now() + time_limit(10);
    while (now() < end) {
      struct pollfd p = {fd, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      if (recv(fd, buf, sizeof buf, 0) <= 0) return;
    }
  });
  auto rand_str = [&](size_t max) {
    std::string r(rng() % (max + 1), '\0');
    for (char& c : r) c = "ab/c\0\xff"[rng() % 6];
    return r;
  };
  for (int i = 0; i < 400; ++i) {
    tpurt::wire::Envelope e = TPURT__WIRE__ENVELOPE__INIT;
    std::string key = rand_str(12), value = rand_str(40);
    Tpurt__Wire__KvSet ks = TPURT__WIRE__KV_SET__INIT;
    Tpurt__Wire__KvGet kg = TPURT__WIRE__KV_GET__INIT;
    Tpurt__Wire__KvDelete kd = TPURT__WIRE__KV_DELETE__INIT;
    Tpurt__Wire__Barrier b = TPURT__WIRE__BARRIER__INIT;
    Tpurt__Wire__Heartbeat hb = TPURT__WIRE__HEARTBEAT__INIT;
    Tpurt__Wire__StepAbort sa = TPURT__WIRE__STEP_ABORT__INIT;
    int32_t tasks[4];
    switch (rng() % 6) {
      case 0:
        ks.key = const_cast<char*>(key.c_str());
        ks.value = tpurt::wire::binary(value);
        e.msg_case = TPURT__WIRE__ENVELOPE__MSG_KV_SET;
        e.kv_set = &ks;
        break;
      case 1:
        kg.key = const_cast<char*>(key.c_str());
        kg.timeout_ms = static_cast<int64_t>(rng() % 3) - 1 + (rng() % 2 ? 0 : INT64_MAX - 1);
        kg.try_only = rng() % 2;
        e.msg_case = TPURT__WIRE__ENVELOPE__MSG_KV_GET;
        e.kv_get = &kg;
        break;
      case 2:
        kd.key = const_cast<char*>(key.c_str());
        e.msg_case = TPURT__WIRE__ENVELOPE__MSG_KV_DELETE;
        e.kv_delete = &kd;
        break;
      case 3: {
        b.id = const_cast<char*>(key.c_str());
        b.timeout_ms = static_cast<int64_t>(rng() % 100) - 10;
        b.n_tasks = rng() % 5;
        for (size_t k = 0; k < b.n_tasks; ++k) tasks[k] = static_cast<int32_t>(rng() % 5) - 1;
        b.tasks = tasks;
        e.msg_case = TPURT__WIRE__ENVELOPE__MSG_BARRIER;
        e.barrier = &b;
        break;
      }
      case 4:
        hb.task_id = static_cast<int32_t>(rng());
        hb.incarnation = rng();
        e.msg_case = TPURT__WIRE__ENVELOPE__MSG_HEARTBEAT;
        e.heartbeat = &hb;
        break;
      default:
        sa.step = rng();
        sa.origin_task = static_cast<int32_t>(rng());
        sa.code = static_cast<int32_t>(rng());
        sa.message = const_cast<char*>(key.c_str());
        e.msg_case = TPURT__WIRE__ENVELOPE__MSG_STEP_ABORT;
        e.step_abort = &sa;
    }
    send_all(fd, tpurt::wire::pack_frame(rng(), e));
  }
  // Still serving, with nobody lost.
  s.tasks[0]->kv_set("after", "ok");
  CHECK(s.tasks[1]->kv_get("after", 2000) == "ok");
  {
    std::lock_guard<std::mutex> lock(seen.mu);
    CHECK(seen.failures.empty());
  }
  shutdown(fd, SHUT_RDWR);
  reader.join();
  close(fd);
  CHECK(seen.wait_failures(1, 5));  // the fake's end is a lost task
  shutdown_all(s.tasks);
}

void test_coordination__malformed_agent_is_lost(void** state) {
  (void)state;
  auto cs = configs(3);
  std::vector<CoordinationConfig> real = {cs[0], cs[1]};
  Started s;
  int fd = -1;
  std::string err;
  std::thread faker([&] {
    code_of([&] { fd = fake_agent(cs[0], 2, cluster_id_of(cs[0])); }, &err);
  });
  s = start_all(real);
  faker.join();
  if (!all_started(s) || fd < 0) {
    if (fd >= 0) close(fd);
    return;
  }
  Seen seen;
  seen.watch(*s.tasks[1]);
  // An established agent connection that sends an unexpected message type.
  Tpurt__Wire__Challenge c = TPURT__WIRE__CHALLENGE__INIT;
  std::string nonce(32, 'n');
  c.server_nonce = tpurt::wire::binary(nonce);
  tpurt::wire::Envelope e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_CHALLENGE;
  e.challenge = &c;
  send_all(fd, tpurt::wire::pack_frame(9, e));
  CHECK(closed_by_peer(fd, 3));
  close(fd);
  CHECK(seen.wait_failures(1, 5));
  {
    std::lock_guard<std::mutex> lock(seen.mu);
    if (!seen.failures.empty()) {
      CHECK(seen.failures[0].task == 2);
      CHECK(seen.failures[0].message.find("unexpected challenge") != std::string::npos);
    }
  }
  s.tasks[0]->kv_set("k", "v");
  CHECK(s.tasks[1]->kv_get("k", 1000) == "v");
  shutdown_all(s.tasks);
}

}  // namespace

int main(int argc, char** argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_coordination__forms_and_shuts_down),
      cmocka_unit_test(test_coordination__start_deadline_names_missing_task),
      cmocka_unit_test(test_coordination__shutdown_barrier_deadline),
      cmocka_unit_test(test_coordination__bad_configs),
      cmocka_unit_test(test_coordination__handshake_tokens),
      cmocka_unit_test(test_coordination__cluster_tokens),
      cmocka_unit_test(test_coordination__key_value),
      cmocka_unit_test(test_coordination__barriers),
      cmocka_unit_test(test_coordination__destroyed_task_is_reported),
      cmocka_unit_test(test_coordination__service_lost),
      cmocka_unit_test(test_coordination__heartbeat_timeout),
      cmocka_unit_test(test_coordination__silent_service),
      cmocka_unit_test(test_coordination__registration_conflicts),
      cmocka_unit_test(test_coordination__duplicate_task_id),
      cmocka_unit_test(test_coordination__handshake_gate),
      cmocka_unit_test(test_coordination__step_abort_relay),
      cmocka_unit_test(test_coordination__malformed_input),
      cmocka_unit_test(test_coordination__malformed_agent_is_lost),
      cmocka_unit_test(test_coordination__data_connections),
      cmocka_unit_test(test_coordination__arbitrary_requests),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
