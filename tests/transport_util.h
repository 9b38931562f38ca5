// The transports of tests/test_transport.cc and tests/test_posts.cc, in one process:
// clusters joined by socket pairs, by shared memory, or both; a thread per task; and
// what a call threw. Include after <cmocka.h> and test_util.h.
#ifndef TPURT_TESTS_TRANSPORT_UTIL_H
#define TPURT_TESTS_TRANSPORT_UTIL_H

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

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
#include "net/tcp_transport.h"

using tpurt::net::Recv;
using tpurt::net::Send;
using tpurt::net::ShmTransport;
using tpurt::net::StepOutcome;
using tpurt::net::StreamTransport;
using tpurt::net::TcpTransport;
using Clock = std::chrono::steady_clock;

namespace {

std::string name(int task) { return "task " + std::to_string(task); }
void no_check() {}

using Cluster = std::vector<std::unique_ptr<StreamTransport>>;
using MakeCluster = Cluster (*)(int n);

// n transports, every pair joined by a socket pair.
[[maybe_unused]] Cluster make_cluster(int n) {
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
  return Cluster(std::make_move_iterator(t.begin()), std::make_move_iterator(t.end()));
}

// n shared-memory transports, every one attached to every other's segment, sealed.
std::vector<std::unique_ptr<ShmTransport>> make_shm(int n, bool seal = true) {
  std::vector<std::unique_ptr<ShmTransport>> t;
  for (int i = 0; i < n; ++i) t.emplace_back(new ShmTransport(n, i));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (i != j) t[i]->attach(j, t[j]->locator());
  if (seal)
    for (auto& x : t) x->seal();
  return t;
}
[[maybe_unused]] Cluster make_shm_cluster(int n) {
  auto t = make_shm(n);
  return Cluster(std::make_move_iterator(t.begin()), std::make_move_iterator(t.end()));
}

// Two hosts: tasks 0..n-2 share memory, task n-1 is a TcpTransport joined to each of
// them by a socket (ShmTransport::attach_socket).
[[maybe_unused]] Cluster make_mixed_cluster(int n) {
  std::vector<std::unique_ptr<ShmTransport>> local;
  for (int i = 0; i < n - 1; ++i) local.emplace_back(new ShmTransport(n, i));
  std::unique_ptr<TcpTransport> remote(new TcpTransport(n, n - 1));
  for (int i = 0; i < n - 1; ++i) {
    for (int j = 0; j < n - 1; ++j)
      if (i != j) local[i]->attach(j, local[j]->locator());
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) abort();
    local[i]->attach_socket(n - 1, sv[0]);
    remote->attach(i, sv[1]);
  }
  for (auto& x : local) x->seal();
  remote->wait_connected(1000);
  Cluster t(std::make_move_iterator(local.begin()), std::make_move_iterator(local.end()));
  t.emplace_back(std::move(remote));
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

namespace {

// Maps the segment a locator names, as a peer would, so that a test can corrupt it
// (before the owner seals it).
tpurt::net::shm::Mapping map_locator(const std::string& locator) {
  unsigned pid = 0, fd = 0;
  unsigned long long bytes = 0;
  tpurt::net::shm::Mapping m;
  if (sscanf(locator.c_str(), "%u:%u:%llu:", &pid, &fd, &bytes) != 3) return m;
  int f = open(("/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd)).c_str(), O_RDWR);
  if (f < 0) return m;
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
  close(f);
  if (base == MAP_FAILED) return m;
  m.base = static_cast<unsigned char*>(base);
  m.bytes = bytes;
  return m;
}

// How many of this process's descriptors are shared-memory segments.
int open_segments() {
  int count = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    char target[256];
    ssize_t n = readlinkat(dirfd(d), e->d_name, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    if (strstr(target, "memfd:tpurt-shm")) ++count;
  }
  closedir(d);
  return count;
}

// Runs `call` and returns what it threw (TPU_OK: nothing).
Result thrown(const std::function<void()>& call) {
  try {
    call();
  } catch (const tpurt::Error& e) {
    return {e.code(), e.message()};
  }
  return {};
}

bool has(const Result& r, tpu_status code, const std::string& fragment) {
  if (r.code == code && r.message.find(fragment) != std::string::npos) return true;
  print_error("got %s \"%s\", expected %s with \"%s\"\n", tpurt::status_name(r.code),
              r.message.c_str(), tpurt::status_name(code), fragment.c_str());
  return false;
}

// Task 1 of a cluster of two, in a forked process joined to `parent` (task 0) over
// shared memory: both attach and seal, and start step 1. The child runs body(its
// transport) (a nonzero return or a throw ends it with that status or 2), then says
// so (body_done() in the parent returns) and waits to be killed or stopped; alarm(60)
// bounds it whatever happens.
struct ForkedPeer {
  pid_t pid = -1;
  int from_child = -1, to_child = -1;

  ForkedPeer(ShmTransport* parent, const std::function<int(ShmTransport&)>& body) {
    const std::string parent_locator = parent->locator();
    int up[2], down[2];  // child to parent, parent to child
    if (pipe(up) != 0 || pipe(down) != 0) abort();
    pid = fork();
    if (pid < 0) abort();
    if (pid == 0) {
      alarm(60);
      close(up[0]);
      close(down[1]);
      int rc = 0;
      try {
        ShmTransport me(2, 1);
        me.attach(0, parent_locator);
        std::string loc = me.locator() + "\n";
        char ack;
        if (write(up[1], loc.data(), loc.size()) != static_cast<ssize_t>(loc.size()) ||
            read(down[0], &ack, 1) != 1)
          _exit(3);
        me.seal();
        me.begin_step(1);
        rc = body(me);
        if (rc == 0 && write(up[1], "x", 1) != 1) _exit(4);
        if (rc == 0) pause();
      } catch (...) {
        rc = 2;
      }
      _exit(rc);
    }
    close(up[1]);
    close(down[0]);
    from_child = up[0];
    to_child = down[1];
    std::string loc;
    char c;
    while (read(from_child, &c, 1) == 1 && c != '\n' && loc.size() < 200) loc += c;
    parent->attach(1, loc);
    if (write(to_child, "a", 1) != 1) abort();
    parent->seal();
    parent->begin_step(1);
  }
  ~ForkedPeer() {
    close(from_child);
    close(to_child);
  }
  // Waits until the child's body has returned; false if it ended otherwise.
  bool body_done() {
    char x;
    return read(from_child, &x, 1) == 1;
  }
  // Reaps the child; true when SIGKILL ended it.
  bool reap_killed() {
    int status = 0;
    return waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  }
};

}  // namespace

#endif
