#include "embedding/exchange.h"

#include <algorithm>
#include <cstring>

#include "collectives/communicator.h"
#include "core/status.h"
#include "core/tensor.h"

namespace tpurt {
namespace embedding {

namespace {
// Owns a tensor handle for the scope.
struct Held {
  tpu_tensor* t = nullptr;
  ~Held() {
    if (t) release(t);
  }
};
}  // namespace

std::vector<std::vector<uint8_t>> exchange_bytes(Communicator& comm, int me, int P,
                                                 const std::vector<std::vector<uint8_t>>& out) {
  const int64_t n[1] = {P};
  Held sizes, all_sizes;
  sizes.t = new_tensor(TPU_INT64, n, 1);
  int64_t* s = static_cast<int64_t*>(mutable_data(sizes.t));
  for (int q = 0; q < P; ++q) s[q] = static_cast<int64_t>(out[q].size());
  all_sizes.t = comm.all_gather(me, sizes.t, 0, nullptr);  // [P * P]: row p is what p sends
  const int64_t* m = static_cast<const int64_t*>(all_sizes.t->data);
  int64_t longest = 0;
  for (int64_t i = 0; i < int64_t{P} * P; ++i) {
    if (m[i] < 0) fail(TPU_INTERNAL, "an embedding message size of ", m[i], " bytes");
    longest = std::max(longest, m[i]);
  }
  std::vector<std::vector<uint8_t>> in(P);
  if (longest == 0) return in;  // every participant sees the same sizes, so all skip
  const int64_t padded[1] = {int64_t{P} * longest};
  Held send, got;
  send.t = new_tensor_uninitialized(TPU_UINT8, padded, 1);
  uint8_t* b = static_cast<uint8_t*>(mutable_data(send.t));
  for (int q = 0; q < P; ++q) {
    if (!out[q].empty()) std::memcpy(b + q * longest, out[q].data(), out[q].size());
    std::memset(b + q * longest + out[q].size(), 0, longest - out[q].size());
  }
  got.t = comm.all_to_all(me, send.t, 0, 0, P, nullptr);
  const uint8_t* r = static_cast<const uint8_t*>(got.t->data);
  for (int q = 0; q < P; ++q) {
    const int64_t size = m[int64_t{q} * P + me];
    in[q].assign(r + q * longest, r + q * longest + size);
  }
  return in;
}

}  // namespace embedding
}  // namespace tpurt
