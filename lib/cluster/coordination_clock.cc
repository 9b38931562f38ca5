// The offset of this process's clock from the coordination service's, for traces.
#include "cluster/coordination_impl.h"
#include "core/deadline.h"

namespace tpurt {

int64_t Coordination::clock_offset_ns() {
  impl_->require_running("clock_offset_ns");
  // A key no one sets: the service answers at once, stamping its clock.
  Tpurt__Wire__KvGet g = TPURT__WIRE__KV_GET__INIT;
  g.key = const_cast<char*>("__tpurt/clock");
  g.try_only = 1;
  wire::Envelope e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_KV_GET;
  e.kv_get = &g;
  // The round trip with the least delay bounds the error best (half of it).
  int64_t best_rtt = INT64_MAX, offset = 0;
  for (int i = 0; i < 5; ++i) {
    const int64_t sent = now_ns();
    std::shared_ptr<Pending> p = impl_->request(e, impl_->slack(), "the clock's round trip");
    const int64_t got = now_ns();
    if (got - sent < best_rtt) {
      best_rtt = got - sent;
      offset = p->clock_ns - (sent + got) / 2;
    }
  }
  return offset;
}

}  // namespace tpurt
