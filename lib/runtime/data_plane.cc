#include "runtime/data_plane.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "core/deadline.h"
#include "core/env.h"
#include "core/status.h"
#include "net/handshake.h"
#include "net/mpi_transport.h"
#include "net/shm_transport.h"
#include "net/tcp_transport.h"

namespace tpurt {
namespace {

std::string key(const char* what, int task) {
  return str_cat(kReservedKeyPrefix, "transport/", what, "/", task);
}

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string link_target(const char* path) {
  char buf[256];
  const ssize_t n = readlink(path, buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("?");
}

// What a task tells the others: its choice, whether mpirun started it, its host.
struct Published {
  std::string choice;
  bool mpi_launch = false;
  std::string host;
};

std::string encode(const Published& p) {
  return str_cat(p.choice, "\n", p.mpi_launch ? 1 : 0, "\n", p.host);
}

Published decode(int task, const std::string& text) {
  const size_t a = text.find('\n');
  const size_t b = a == std::string::npos ? a : text.find('\n', a + 1);
  if (b == std::string::npos || b != a + 2 || (text[a + 1] != '0' && text[a + 1] != '1'))
    fail(TPU_INTERNAL, "task ", task, " published a malformed transport record");
  return Published{text.substr(0, a), text[a + 1] == '1', text.substr(b + 1)};
}

int64_t left_ms(int64_t deadline_ms) { return std::max<int64_t>(1, deadline_ms - net::now_ms()); }

// Waits until every task has read the facts of `what` that all published.
void read_by_all(Coordination& coordination, const char* what, int64_t deadline_ms) {
  coordination.barrier(str_cat(kReservedKeyPrefix, "transport/read/", what), left_ms(deadline_ms), {});
}

}  // namespace

std::string host_identity() {
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) != 0) name[0] = '\0';
  return str_cat(name, " boot=", first_line("/proc/sys/kernel/random/boot_id"),
                 " net=", link_target("/proc/self/ns/net"), " pid=", link_target("/proc/self/ns/pid"));
}

DataConnections::~DataConnections() {
  for (const auto& w : waiting_) ::close(w.second);
}

void DataConnections::accept(int peer, int fd) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!sink_) {
    auto it = waiting_.find(peer);
    if (it != waiting_.end()) ::close(it->second);  // the newer connection wins
    waiting_[peer] = fd;
    arrived_.notify_all();
    return;
  }
  auto sink = sink_;
  lock.unlock();
  try {
    sink(peer, fd);  // a refused connection is closed by the sink
  } catch (const Error& e) {
    if (std::getenv("TPURT_LOG")) std::fprintf(stderr, "tpurt: data connection refused: %s\n", e.message().c_str());
  }
}

int DataConnections::take(int peer, int64_t deadline_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool arrived = wait_for_ms(arrived_, lock, left_ms(deadline_ms), [&] { return waiting_.count(peer) > 0; });
  if (!arrived)
    fail(TPU_DEADLINE_EXCEEDED, "no data connection arrived from task ", peer,
         " before the init deadline (TPURT_INIT_TIMEOUT_MS)");
  const int fd = waiting_[peer];
  waiting_.erase(peer);
  return fd;
}

void DataConnections::forward_to(std::function<void(int, int)> sink) {
  std::map<int, int> waiting;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sink_ = std::move(sink);
    waiting.swap(waiting_);
  }
  for (const auto& w : waiting) accept(w.first, w.second);
}

DataPlane connect_data_plane(Coordination& coordination, const CoordinationConfig& cc,
                             DataConnections& connections, int64_t deadline_ms) {
  const int T = static_cast<int>(cc.addresses.size()), me = cc.task_id;
  const TransportChoice choice = env_transport();
  const bool asked = choice != TransportChoice::kAuto;
  Published mine{transport_choice_name(choice), std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr,
                 host_identity()};
  coordination.kv_set(key("choice", me), encode(mine));

  std::vector<bool> same_host(T, false);  // shares this task's host (not this task itself)
  std::string first_remote, other_choice;
  bool all_mpi_launched = true;
  for (int t = 0; t < T; ++t) {
    const Published p = t == me ? mine : decode(t, coordination.kv_get(key("choice", t), left_ms(deadline_ms)));
    if (p.choice != mine.choice && other_choice.empty())
      other_choice = str_cat("task ", t, " has TPURT_TRANSPORT=", p.choice, " but task ", me, " has ",
                             mine.choice, ": every task of a cluster needs the same value");
    all_mpi_launched &= p.mpi_launch;
    if (t == me) continue;
    same_host[t] = p.host == mine.host;
    if (!same_host[t] && first_remote.empty()) first_remote = str_cat("task ", t, " (", p.host, ")");
  }
  // Every task has read every choice before any fails on them: task 0, which hosts the
  // coordination service, would otherwise leave before the others read its own.
  read_by_all(coordination, "choices", deadline_ms);
  if (!other_choice.empty()) invalid_argument(other_choice);
  std::string local_tasks;  // this host's, in order
  for (int t = 0; t < T; ++t)
    if (t == me || same_host[t]) local_tasks += str_cat(local_tasks.empty() ? "" : ", ", t);
  const bool any_local = local_tasks != str_cat(me), any_remote = !first_remote.empty();

  DataPlane plane;
  std::string mpi_note;  // why auto did not take MPI under mpirun
  if (choice == TransportChoice::kMpi || (choice == TransportChoice::kAuto && all_mpi_launched)) {
    std::string why_not;
    plane.transport = net::open_mpi_transport(T, me, &why_not);
    if (!asked) {
      // Chosen only if every task has it; tasks that differ fail alike, naming one without.
      coordination.kv_set(key("mpi", me), plane.transport ? "" : "-" + why_not);
      int with = 0, without = -1;
      std::string without_why;
      for (int t = 0; t < T; ++t) {
        const std::string theirs = coordination.kv_get(key("mpi", t), left_ms(deadline_ms));
        if (theirs.empty()) ++with;
        else if (without < 0) without = t, without_why = theirs.substr(1);
      }
      read_by_all(coordination, "mpi", deadline_ms);
      if (with > 0 && without >= 0)
        fail(TPU_FAILED_PRECONDITION, "every task was started by mpirun, but task ", without,
             " cannot use the MPI plugin (", without_why, ") while ", with,
             " task(s) can: install it alike everywhere, or set TPURT_TRANSPORT");
    }
    if (plane.transport) {
      connections.forward_to([](int, int fd) { ::close(fd); });  // MPI carries all the data
      plane.name = "mpi";
      plane.reason = asked ? "TPURT_TRANSPORT=mpi"
                           : "every task was started by mpirun and the MPI plugin is installed";
      return plane;
    }
    if (asked)
      fail(TPU_FAILED_PRECONDITION, "TPURT_TRANSPORT=mpi, but the MPI transport is not available: ",
           why_not);
    mpi_note = str_cat("; mpirun started the tasks, but not MPI: ", why_not);
  }
  if (choice == TransportChoice::kShm && any_remote)
    invalid_argument("TPURT_TRANSPORT=shm, but ", first_remote, " runs on another host than task ",
                     me, " (", mine.host, "): shared memory joins only the tasks of one host");

  // Shared memory with the tasks of this host, when there are any; TCP with the rest.
  const bool use_shm = choice == TransportChoice::kShm || (choice == TransportChoice::kAuto && any_local);
  net::ShmTransport* shm = nullptr;
  net::TcpTransport* tcp = nullptr;
  if (use_shm) {
    plane.transport.reset(shm = new net::ShmTransport(T, me));
    coordination.kv_set(key("shm", me), shm->locator());
    for (int t = 0; t < T; ++t)
      if (same_host[t]) shm->attach(t, coordination.kv_get(key("shm", t), left_ms(deadline_ms)));
  } else {
    plane.transport.reset(tcp = new net::TcpTransport(T, me));
  }
  auto attach_socket = [shm, tcp](int peer, int fd) {
    if (shm) shm->attach_socket(peer, fd);
    else tcp->attach(peer, fd);
  };
  // The higher task of a pair dials: every pair gets exactly one connection.
  net::Hello hello;
  hello.cluster_id = coordination.cluster_id();
  hello.task_id = me;
  hello.incarnation = coordination.incarnation();
  hello.kind = net::ConnectionKind::kData;
  for (int peer = 0; peer < T; ++peer) {
    if (peer == me || (use_shm && same_host[peer])) continue;
    attach_socket(peer, peer < me ? net::dial(cc.addresses[peer], hello, cc.token, deadline_ms)
                                  : connections.take(peer, deadline_ms));
  }
  connections.forward_to(attach_socket);
  // Once every task has mapped every segment, nobody needs a segment's descriptor:
  // the memory then lives exactly as long as the mappings, whatever ends a task.
  coordination.barrier(str_cat(kReservedKeyPrefix, "transport/attached"), left_ms(deadline_ms), {});
  if (shm) shm->seal();

  if (use_shm && !any_remote) {
    plane.name = "shm";
    plane.reason = asked ? "TPURT_TRANSPORT=shm" : "every task runs on this host";
  } else if (use_shm) {
    plane.name = "shm+tcp";
    plane.reason = str_cat("tasks ", local_tasks, " share this host (shared memory); the others "
                           "run on other hosts (TCP)");
  } else {
    plane.name = "tcp";
    plane.reason = asked ? "TPURT_TRANSPORT=tcp" : "no other task runs on this host";
  }
  plane.reason += mpi_note;
  return plane;
}

}  // namespace tpurt
