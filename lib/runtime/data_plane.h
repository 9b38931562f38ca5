// Chooses and connects the data plane between a cluster's tasks (TPURT_TRANSPORT):
// every task publishes its choice and where it runs through the coordination
// service, so that every task reaches the same decision from the same facts.
//   mpi  when asked for, or (auto) when every task was started by mpirun and has the plugin;
//   shm  when asked for (every task must be on this host); with auto, per pair of
//        tasks: shared memory between the tasks of one host, TCP between hosts;
//   tcp  when asked for, or (auto) when this task shares its host with no other.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "cluster/coordination.h"
#include "net/transport.h"

namespace tpurt {

// Keys and barrier ids under this prefix are tpurt's own: users cannot set them.
constexpr const char* kReservedKeyPrefix = "__tpurt/";

// The TCP data connections the coordination service accepts (on its thread). Until
// the data plane is chosen they wait here; then they go straight to it.
class DataConnections {
 public:
  ~DataConnections();
  // The service's callback: a connection from `peer`, authenticated.
  void accept(int peer, int fd);
  // The connection from `peer`, once it arrives; TPU_DEADLINE_EXCEEDED naming the
  // peer at deadline_ms (net::now_ms() based).
  int take(int peer, int64_t deadline_ms);
  // From now on connections go to `sink` (which owns the fd); any still waiting too.
  void forward_to(std::function<void(int peer, int fd)> sink);

 private:
  std::mutex mu_;
  std::condition_variable arrived_;
  std::map<int, int> waiting_;  // peer -> fd
  std::function<void(int, int)> sink_;
};

struct DataPlane {
  std::unique_ptr<net::Transport> transport;
  std::string name;    // "tcp", "shm", "shm+tcp", "mpi"
  std::string reason;  // why, for tpurt info
};

// Bounded by deadline_ms (net::now_ms() based). Throws TPU_INVALID_ARGUMENT when the
// tasks ask for different transports or for shm across hosts, TPU_FAILED_PRECONDITION
// when mpi is asked for and cannot be had.
DataPlane connect_data_plane(Coordination& coordination, const CoordinationConfig& cc,
                             DataConnections& connections, int64_t deadline_ms);

// This process's host as far as sharing memory goes: the machine (boot id and host
// name) and the namespaces a shared segment must be reachable in (network, pid).
std::string host_identity();

}  // namespace tpurt
