// The key-value store and barriers of Coordination: requests to the service.
#include "cluster/coordination_impl.h"

namespace tpurt {

std::string normalize_key(const std::string& key) {
  std::string out;
  out.reserve(key.size());
  for (char c : key) {
    if (c == '/' && (out.empty() || out.back() == '/')) continue;
    out.push_back(c);
  }
  while (!out.empty() && out.back() == '/') out.pop_back();
  if (out.empty()) invalid_argument("key '", key, "' is empty once its '/' are normalised");
  return out;
}

void Coordination::kv_set(const std::string& key_in, const std::string& value) {
  impl_->require_running("kv_set");
  std::string key = normalize_key(key_in);
  if (key.size() > kMaxKeyBytes)
    invalid_argument("key of ", key.size(), " bytes (at most ", kMaxKeyBytes, ")");
  if (value.size() > kMaxValueBytes)
    fail(TPU_RESOURCE_EXHAUSTED, "value of ", value.size(), " bytes for key '", key,
         "' (at most ", kMaxValueBytes, ")");
  Tpurt__Wire__KvSet s = TPURT__WIRE__KV_SET__INIT;
  s.key = const_cast<char*>(key.c_str());
  s.value = wire::binary(value);
  wire::Envelope e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_KV_SET;
  e.kv_set = &s;
  impl_->request(e, impl_->slack(), str_cat("kv_set '", key, "'"));
}

std::string Coordination::kv_get(const std::string& key_in, int64_t timeout_ms) {
  impl_->require_running("kv_get");
  std::string key = normalize_key(key_in);
  if (key.size() > kMaxKeyBytes)
    invalid_argument("key of ", key.size(), " bytes (at most ", kMaxKeyBytes, ")");
  if (timeout_ms < 0) invalid_argument("kv_get '", key, "': timeout_ms ", timeout_ms, " is negative");
  Tpurt__Wire__KvGet g = TPURT__WIRE__KV_GET__INIT;
  g.key = const_cast<char*>(key.c_str());
  g.timeout_ms = capped(timeout_ms);
  wire::Envelope e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_KV_GET;
  e.kv_get = &g;
  return impl_->request(e, capped(timeout_ms) + impl_->slack(), str_cat("kv_get '", key, "'"))->value;
}

bool Coordination::kv_try_get(const std::string& key_in, std::string* value) {
  impl_->require_running("kv_try_get");
  std::string key = normalize_key(key_in);
  if (key.size() > kMaxKeyBytes)
    invalid_argument("key of ", key.size(), " bytes (at most ", kMaxKeyBytes, ")");
  Tpurt__Wire__KvGet g = TPURT__WIRE__KV_GET__INIT;
  g.key = const_cast<char*>(key.c_str());
  g.try_only = 1;
  wire::Envelope e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_KV_GET;
  e.kv_get = &g;
  std::shared_ptr<Pending> p = impl_->request(e, impl_->slack(), str_cat("kv_try_get '", key, "'"));
  if (!p->found) return false;
  if (value) *value = p->value;
  return true;
}

void Coordination::kv_delete(const std::string& key_in) {
  impl_->require_running("kv_delete");
  std::string key = normalize_key(key_in);
  if (key.size() > kMaxKeyBytes)
    invalid_argument("key of ", key.size(), " bytes (at most ", kMaxKeyBytes, ")");
  Tpurt__Wire__KvDelete d = TPURT__WIRE__KV_DELETE__INIT;
  d.key = const_cast<char*>(key.c_str());
  wire::Envelope e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_KV_DELETE;
  e.kv_delete = &d;
  impl_->request(e, impl_->slack(), str_cat("kv_delete '", key, "'"));
}

void Coordination::barrier(const std::string& id, int64_t timeout_ms,
                           const std::vector<int32_t>& tasks) {
  impl_->require_running("barrier");
  if (timeout_ms <= 0) invalid_argument("barrier '", id, "': timeout_ms ", timeout_ms, " must be > 0");
  if (id.size() > kMaxKeyBytes) invalid_argument("barrier id of ", id.size(), " bytes");
  if (tasks.size() > 1024) invalid_argument("barrier '", id, "' lists ", tasks.size(), " tasks");
  Tpurt__Wire__Barrier b = TPURT__WIRE__BARRIER__INIT;
  b.id = const_cast<char*>(id.c_str());
  b.timeout_ms = capped(timeout_ms);
  b.n_tasks = tasks.size();
  b.tasks = const_cast<int32_t*>(tasks.data());
  wire::Envelope e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_BARRIER;
  e.barrier = &b;
  impl_->request(e, capped(timeout_ms) + impl_->slack(), str_cat("barrier '", id, "'"));
}

}  // namespace tpurt
