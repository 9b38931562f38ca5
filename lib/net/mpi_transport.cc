#include "net/mpi_transport.h"

namespace tpurt {
namespace net {

std::unique_ptr<Transport> open_mpi_transport(int, int, std::string* why_not) {
  *why_not = "this build has no MPI plugin loader";
  return nullptr;
}

}  // namespace net
}  // namespace tpurt
