// Chooses and connects the data plane between a cluster's tasks (TPURT_TRANSPORT):
// every task publishes its choice and where it runs through the coordination
// service, so that every task reaches the same decision from the same facts.
//   mpi  when asked for, or (auto) when every task was started by mpirun and has the plugin;
//   shm  when asked for, or (auto) when every task runs on this host;
//   tcp  otherwise.
#pragma once

#include <memory>
#include <string>

#include "cluster/coordination.h"
#include "net/tcp_transport.h"

namespace tpurt {

// Keys and barrier ids under this prefix are tpurt's own: users cannot set them.
constexpr const char* kReservedKeyPrefix = "__tpurt/";

struct DataPlane {
  std::unique_ptr<net::Transport> owned;  // shm or mpi; null for tcp
  net::Transport* transport = nullptr;    // the one in use
  std::string name;                       // "tcp", "shm", "mpi"
  std::string reason;                     // why, for tpurt info
};

// tcp: the TCP transport the coordination service hands accepted data connections
// to; it is dialled and used only when the choice is tcp. Bounded by deadline_ms
// (net::now_ms() based). Throws TPU_INVALID_ARGUMENT when the tasks ask for
// different transports or for shm across hosts, TPU_FAILED_PRECONDITION when mpi
// is asked for and cannot be had.
DataPlane connect_data_plane(Coordination& coordination, const CoordinationConfig& cc,
                             net::TcpTransport& tcp, int64_t deadline_ms);

// This process's host as far as sharing memory goes: the machine (boot id and host
// name) and the namespaces a shared segment must be reachable in (network, pid).
std::string host_identity();

}  // namespace tpurt
