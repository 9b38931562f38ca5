// The data planes between processes of one host, without the collectives on top:
// ShmTransport against TcpTransport (loopback TCP). N forked tasks; task 0 prints.
//   pingpong   8 B from task 0 to 1 and back: half the round trip
//   ring8      every task sends 8 B to the next and receives from the previous at once
//              (one round of a ring collective)
//   all8       every task sends 8 B to every other and receives from every other in one
//              exchange (an all-reduce of 8 bytes, less the local sum)
//   posts8     the same as a posted gather (shm only, net/posted_gather.h): each task
//              posts 8 B and copies every other's post
//   oneway     16 MiB from task 0 to 1, back to back: bandwidth
//   ring16M    every task sends 16 MiB to the next at once: bandwidth per task
// Every figure is the median of RUNS runs (each a step of its own). Not part of make:
//   make build/lib/libtpurt.a
//   g++ -std=c++17 -O2 -pthread -Iinclude -Ilib -Ibuild/gen bench/shm_transport.cc \
//       build/lib/libtpurt.a $(pkg-config --libs libprotobuf-c libuv libcrypto jansson) \
//       -o build/shm_transport_bench
//   build/shm_transport_bench [tasks=2] [runs=5] [shm|tcp|both] [pingpong,ring8,all8,posts8,oneway,ring16M]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "net/shm_transport.h"
#include "net/tcp_transport.h"

using namespace tpurt::net;
using Clock = std::chrono::steady_clock;

namespace {

std::string name(int t) { return "task " + std::to_string(t); }
void no_check() {}

bool write_all(int fd, const std::string& s) {
  return write(fd, s.data(), s.size()) == static_cast<ssize_t>(s.size());
}
std::string read_line(int fd) {
  std::string s;
  char c;
  while (read(fd, &c, 1) == 1 && c != '\n') s += c;
  return s;
}

// A connected loopback TCP pair.
void tcp_pair(int fds[2]) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) || listen(l, 1) ||
      getsockname(l, reinterpret_cast<sockaddr*>(&a), &len))
    abort();
  fds[0] = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fds[0], reinterpret_cast<sockaddr*>(&a), sizeof a)) abort();
  fds[1] = accept(l, nullptr, nullptr);
  close(l);
  int one = 1;
  for (int i = 0; i < 2; ++i) setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Bench {
  Transport* t;
  int me, n;
  uint64_t step = 0, seq = 0;

  void xchg(const Send* s, size_t ns, const Recv* r, size_t nr) {
    t->exchange(++seq, 1, s, ns, r, nr, Clock::now() + std::chrono::seconds(60), no_check, name);
  }
  // Runs body(iters) as one step per run; returns the median seconds per iteration.
  template <typename F>
  double timed(int runs, int iters, F body) {
    std::vector<double> per;
    for (int r = 0; r <= runs; ++r) {  // run 0 warms up
      t->begin_step(++step);
      seq = 0;
      auto t0 = Clock::now();
      body(iters);
      double s = std::chrono::duration<double>(Clock::now() - t0).count();
      StepOutcome remote;
      t->end_step(StepOutcome{}, 60000, &remote, name);
      if (r > 0) per.push_back(s / iters);
    }
    return median(per);
  }
};

std::string g_phases = "pingpong,ring8,all8,posts8,oneway,ring16M";
bool phase(const char* name) { return g_phases.find(name) != std::string::npos; }

void run_task(Transport* t, int me, int n, int runs, int out_fd) {
  Bench b{t, me, n};
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  uint64_t small_out = me, small_in = 0;
  std::vector<char> big_out(16u << 20, static_cast<char>(me)), big_in(16u << 20);
  std::string report;
  char line[256];

  if (phase("pingpong")) {
  double pp = b.timed(runs, 20000, [&](int iters) {
    for (int i = 0; i < iters; ++i) {
      if (me == 0) {
        Send s{1, 0, &small_out, 8};
        Recv r{1, 0, &small_in, 8};
        b.xchg(&s, 1, nullptr, 0);
        b.xchg(nullptr, 0, &r, 1);
      } else if (me == 1) {
        Send s{0, 0, &small_out, 8};
        Recv r{0, 0, &small_in, 8};
        b.xchg(nullptr, 0, &r, 1);
        b.xchg(&s, 1, nullptr, 0);
      }
    }
  });
  snprintf(line, sizeof line, "pingpong 8 B half round trip: %.2f us\n", pp / 2 * 1e6);
  report += line;
  }

  if (phase("ring8")) {
  double r8 = b.timed(runs, 20000, [&](int iters) {
    Send s{next, 0, &small_out, 8};
    Recv r{prev, 0, &small_in, 8};
    for (int i = 0; i < iters; ++i) b.xchg(&s, 1, &r, 1);
  });
  snprintf(line, sizeof line, "ring8 8 B to the next, from the previous: %.2f us per round\n",
           r8 * 1e6);
  report += line;
  }

  if (phase("all8")) {
  std::vector<uint64_t> from(n);
  std::vector<Send> sends;
  std::vector<Recv> recvs;
  for (int p = 0; p < n; ++p)
    if (p != me) {
      sends.push_back({p, 0, &small_out, 8});
      recvs.push_back({p, 0, &from[p], 8});
    }
  double a8 = b.timed(runs, 20000, [&](int iters) {
    for (int i = 0; i < iters; ++i) b.xchg(sends.data(), sends.size(), recvs.data(), recvs.size());
  });
  snprintf(line, sizeof line, "all8 8 B to and from every task: %.2f us per exchange\n", a8 * 1e6);
  report += line;
  }

  auto* posts = dynamic_cast<tpurt::net::PostedGather*>(t);
  if (phase("posts8") && posts) {
  std::vector<uint64_t> from(n);
  std::vector<Recv> recvs;
  for (int p = 0; p < n; ++p)
    if (p != me) recvs.push_back({p, 0, &from[p], 8});
  double p8 = b.timed(runs, 20000, [&](int iters) {
    for (int i = 0; i < iters; ++i)
      posts->gather_posts(++b.seq, 1, &small_out, 8, recvs.data(), recvs.size(),
                          Clock::now() + std::chrono::seconds(60), no_check, name);
  });
  snprintf(line, sizeof line, "posts8 8 B posted, every other's copied: %.2f us per gather\n", p8 * 1e6);
  report += line;
  }

  if (phase("oneway")) {
  double ow = b.timed(runs, 20, [&](int iters) {
    Send s{1, 0, big_out.data(), big_out.size()};
    Recv r{0, 0, big_in.data(), big_in.size()};
    for (int i = 0; i < iters; ++i) {
      if (me == 0) b.xchg(&s, 1, nullptr, 0);
      else if (me == 1) b.xchg(nullptr, 0, &r, 1);
    }
    if (me < 2) {  // the time counts until task 1 has it all
      uint64_t z = 0;
      Send a{0, 1, &z, 8};
      Recv ra{1, 1, &z, 8};
      if (me == 1) b.xchg(&a, 1, nullptr, 0);
      else b.xchg(nullptr, 0, &ra, 1);
    }
  });
  snprintf(line, sizeof line, "oneway 16 MiB from task 0 to 1: %.2f GB/s\n", (16u << 20) / ow / 1e9);
  report += line;
  }

  if (phase("ring16M")) {
  double rb = b.timed(runs, 10, [&](int iters) {
    Send s{next, 0, big_out.data(), big_out.size()};
    Recv r{prev, 0, big_in.data(), big_in.size()};
    for (int i = 0; i < iters; ++i) b.xchg(&s, 1, &r, 1);
  });
  snprintf(line, sizeof line, "ring16M 16 MiB to the next, from the previous: %.2f GB/s per task\n",
           (16u << 20) / rb / 1e9);
  report += line;
  }
  if (me == 0) write_all(out_fd, report);
}

// Forks n tasks joined by `kind` and returns task 0's report.
std::string run(const std::string& kind, int n, int runs) {
  std::vector<std::vector<int>> fds(n, std::vector<int>(n, -1));
  if (kind == "tcp")
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j) {
        int p[2];
        tcp_pair(p);
        fds[i][j] = p[0];
        fds[j][i] = p[1];
      }
  std::vector<int> up(n), down(n);
  int report[2];
  if (pipe(report)) abort();
  std::vector<pid_t> kids;
  for (int i = 0; i < n; ++i) {
    int u[2], d[2];
    if (pipe(u) || pipe(d)) abort();
    pid_t pid = fork();
    if (pid == 0) {
      close(u[0]);
      close(d[1]);
      try {
        std::unique_ptr<Transport> t;
        if (kind == "tcp") {
          auto* tcp = new TcpTransport(n, i);
          t.reset(tcp);
          for (int j = 0; j < n; ++j)
            if (j != i) tcp->attach(j, fds[i][j]);
          tcp->wait_connected(10000);
        } else {
          auto* shm = new ShmTransport(n, i);
          t.reset(shm);
          write_all(u[1], shm->locator() + "\n");
          for (int j = 0; j < n; ++j) {
            std::string loc = read_line(d[0]);
            if (j != i) shm->attach(j, loc);
          }
          write_all(u[1], "attached\n");
          read_line(d[0]);
          shm->seal();
        }
        run_task(t.get(), i, n, runs, report[1]);
      } catch (const tpurt::Error& e) {
        fprintf(stderr, "task %d: %s\n", i, e.message().c_str());
        _exit(1);
      }
      _exit(0);
    }
    close(u[1]);
    close(d[0]);
    up[i] = u[0];
    down[i] = d[1];
    kids.push_back(pid);
  }
  for (auto& row : fds)
    for (int fd : row)
      if (fd >= 0) close(fd);
  close(report[1]);
  if (kind == "shm") {
    std::vector<std::string> locs;
    for (int i = 0; i < n; ++i) locs.push_back(read_line(up[i]));
    for (int i = 0; i < n; ++i)
      for (auto& l : locs) write_all(down[i], l + "\n");
    for (int i = 0; i < n; ++i) read_line(up[i]);  // every task attached every segment
    for (int i = 0; i < n; ++i) write_all(down[i], "seal\n");
  }
  std::string out;
  char buf[4096];
  ssize_t k;
  while ((k = read(report[0], buf, sizeof buf)) > 0) out.append(buf, k);
  for (pid_t p : kids) waitpid(p, nullptr, 0);
  close(report[0]);
  for (int i = 0; i < n; ++i) close(up[i]), close(down[i]);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 2;
  const int runs = argc > 2 ? atoi(argv[2]) : 5;
  const std::string which = argc > 3 ? argv[3] : "both";
  if (argc > 4) g_phases = argv[4];
  if (n < 2 || n > 64 || runs < 1 || (which != "shm" && which != "tcp" && which != "both")) {
    fprintf(stderr, "usage: %s [tasks 2..64] [runs] [shm|tcp|both]\n", argv[0]);
    return 2;
  }
  for (const char* kind : {"shm", "tcp"})
    if (which == "both" || which == kind)
      printf("%s, %d tasks (median of %d runs):\n%s\n", kind, n, runs, run(kind, n, runs).c_str());
  return 0;
}
