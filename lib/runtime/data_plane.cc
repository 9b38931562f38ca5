#include "runtime/data_plane.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "core/env.h"
#include "core/status.h"
#include "net/handshake.h"
#include "net/mpi_transport.h"
#include "net/shm_transport.h"

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

}  // namespace

std::string host_identity() {
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) != 0) name[0] = '\0';
  return str_cat(name, " boot=", first_line("/proc/sys/kernel/random/boot_id"),
                 " net=", link_target("/proc/self/ns/net"), " pid=", link_target("/proc/self/ns/pid"));
}

DataPlane connect_data_plane(Coordination& coordination, const CoordinationConfig& cc,
                             net::TcpTransport& tcp, int64_t deadline_ms) {
  const int T = static_cast<int>(cc.addresses.size()), me = cc.task_id;
  const TransportChoice choice = env_transport();
  Published mine{transport_choice_name(choice), std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr,
                 host_identity()};
  coordination.kv_set(key("choice", me), encode(mine));

  int other_host = -1;  // the first task on another host
  std::string other_host_identity;
  bool all_mpi_launched = true;
  for (int t = 0; t < T; ++t) {
    const Published p = t == me ? mine : decode(t, coordination.kv_get(key("choice", t), left_ms(deadline_ms)));
    if (p.choice != mine.choice)
      invalid_argument("task ", t, " has TPURT_TRANSPORT=", p.choice, " but task ", me, " has ",
                       mine.choice, ": every task of a cluster needs the same value");
    if (p.host != mine.host && other_host < 0) {
      other_host = t;
      other_host_identity = p.host;
    }
    all_mpi_launched &= p.mpi_launch;
  }

  DataPlane plane;
  const bool asked = choice != TransportChoice::kAuto;
  if (choice == TransportChoice::kMpi || (choice == TransportChoice::kAuto && all_mpi_launched)) {
    std::string why_not;
    plane.owned = net::open_mpi_transport(T, me, &why_not);
    if (plane.owned) {
      plane.name = "mpi";
      plane.reason = asked ? "TPURT_TRANSPORT=mpi"
                           : "every task was started by mpirun and the MPI plugin is installed";
    } else if (asked) {
      fail(TPU_FAILED_PRECONDITION, "TPURT_TRANSPORT=mpi, but the MPI transport is not available: ",
           why_not);
    }
  }
  if (!plane.owned && (choice == TransportChoice::kShm ||
                       (choice == TransportChoice::kAuto && other_host < 0))) {
    if (other_host >= 0)
      invalid_argument("TPURT_TRANSPORT=shm, but task ", other_host, " runs on another host (",
                       other_host_identity, ") than task ", me, " (", mine.host,
                       "): shared memory joins only the tasks of one host");
    auto shm = std::make_unique<net::ShmTransport>(T, me);
    coordination.kv_set(key("shm", me), shm->locator());
    for (int t = 0; t < T; ++t)
      if (t != me) shm->attach(t, coordination.kv_get(key("shm", t), left_ms(deadline_ms)));
    // Once every task has mapped every segment, nobody needs a segment's descriptor:
    // the memory then lives exactly as long as the mappings, whatever ends a task.
    coordination.barrier(str_cat(kReservedKeyPrefix, "transport/shm-attached"), left_ms(deadline_ms), {});
    shm->seal();
    plane.owned = std::move(shm);
    plane.name = "shm";
    plane.reason = asked ? "TPURT_TRANSPORT=shm" : "every task runs on this host";
  }
  if (plane.owned) {
    plane.transport = plane.owned.get();
    return plane;
  }

  // TCP: the higher task dials, so every pair gets exactly one connection.
  net::Hello hello;
  hello.cluster_id = coordination.cluster_id();
  hello.task_id = me;
  hello.incarnation = coordination.incarnation();
  hello.kind = net::ConnectionKind::kData;
  for (int peer = 0; peer < me; ++peer)
    tcp.attach(peer, net::dial(cc.addresses[peer], hello, cc.token, deadline_ms));
  tcp.wait_connected(left_ms(deadline_ms));
  plane.transport = &tcp;
  plane.name = "tcp";
  plane.reason = asked ? "TPURT_TRANSPORT=tcp"
                       : str_cat("task ", other_host, " runs on another host (", other_host_identity, ")");
  return plane;
}

}  // namespace tpurt
