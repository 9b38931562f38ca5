#include "embedding/exchange.h"

#include "collectives/communicator.h"

namespace tpurt {
namespace embedding {

std::vector<std::vector<uint8_t>> exchange_bytes(Communicator& comm, int me, int P,
                                                 const std::vector<std::vector<uint8_t>>& out) {
  return comm.all_to_all_bytes(me, P, out);
}

}  // namespace embedding
}  // namespace tpurt
