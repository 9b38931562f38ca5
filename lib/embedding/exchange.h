// Variable-sized messages between every pair of a step's participants, over the
// step's communicator (so across tasks over its transport, point to point:
// Communicator::all_to_all_bytes).
#pragma once

#include <cstdint>
#include <vector>

namespace tpurt {

class Communicator;

namespace embedding {

// Sends out[q] to participant q (out has one entry per participant) and returns what
// each participant sent to `me`, by sender. A collective of all participants.
std::vector<std::vector<uint8_t>> exchange_bytes(Communicator& comm, int me, int participants,
                                                 const std::vector<std::vector<uint8_t>>& out);

}  // namespace embedding
}  // namespace tpurt
