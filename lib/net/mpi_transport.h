// The MPI data plane, loaded at run time from libtpurt_mpi.so (make mpi) so that
// libtpurt itself never links MPI.
#pragma once

#include <memory>
#include <string>

#include "net/transport.h"

namespace tpurt {
namespace net {

// Opens the MPI transport for task `task_id` of `num_tasks` (the task must be MPI
// rank task_id of a world of num_tasks). Returns nullptr, with why_not saying why,
// when the plugin cannot be loaded or MPI's world does not match; throws for a
// plugin that loads but fails.
std::unique_ptr<Transport> open_mpi_transport(int num_tasks, int task_id, std::string* why_not);

}  // namespace net
}  // namespace tpurt
