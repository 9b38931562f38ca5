// The coordination service's key-value store and barriers (XLA's semantics): values
// set once, gets that wait with a deadline, barriers that name who did not arrive.
#include "cluster/coordination_service.h"

#include <algorithm>

#include "core/deadline.h"
#include "core/status.h"

namespace tpurt {

bool CoordinationService::key_or_respond(uint64_t conn, uint64_t seq, const char* raw,
                                         std::string* key) {
  try {
    *key = normalize_key(raw);
    return true;
  } catch (const Error& err) {
    respond(conn, seq, err.code(), err.message());
    return false;
  }
}

void CoordinationService::on_kv_set(uint64_t conn, uint64_t seq, const Tpurt__Wire__KvSet& m) {
  std::string key;
  if (!key_or_respond(conn, seq, m.key, &key)) return;
  if (kv_.count(key)) {
    respond(conn, seq, TPU_ALREADY_EXISTS, str_cat("key '", key, "' is already set"));
    return;
  }
  std::string& value = kv_[key] = wire::bytes(m.value);
  respond(conn, seq, TPU_OK, "");
  std::vector<Waiter> ready;
  auto match = [&](const Waiter& w) { return w.key == key; };
  for (const Waiter& w : kv_waiters_)
    if (match(w)) ready.push_back(w);
  kv_waiters_.erase(std::remove_if(kv_waiters_.begin(), kv_waiters_.end(), match),
                    kv_waiters_.end());
  for (const Waiter& w : ready) respond(w.conn, w.seq, TPU_OK, "", &value, true);
}

void CoordinationService::on_kv_get(uint64_t conn, uint64_t seq, const Tpurt__Wire__KvGet& m) {
  std::string key;
  if (!key_or_respond(conn, seq, m.key, &key)) return;
  auto it = kv_.find(key);
  if (it != kv_.end()) {
    respond(conn, seq, TPU_OK, "", &it->second, true);
    return;
  }
  if (m.try_only) {
    respond(conn, seq, TPU_OK, "", nullptr, false);
    return;
  }
  int64_t timeout = m.timeout_ms < 0 ? 0 : bounded_timeout(m.timeout_ms);
  if (timeout == 0) {
    respond(conn, seq, TPU_DEADLINE_EXCEEDED, str_cat("key '", key, "' was not set within 0 ms"));
    return;
  }
  kv_waiters_.push_back(Waiter{conn, seq, deadline_ms_after(net::now_ms(), timeout), key, timeout});
}

void CoordinationService::on_kv_delete(uint64_t conn, uint64_t seq,
                                       const Tpurt__Wire__KvDelete& m) {
  std::string key;
  if (!key_or_respond(conn, seq, m.key, &key)) return;
  kv_.erase(key);
  std::string prefix = key + "/";
  for (auto it = kv_.lower_bound(prefix); it != kv_.end() && it->first.compare(0, prefix.size(), prefix) == 0;)
    it = kv_.erase(it);
  respond(conn, seq, TPU_OK, "");
}

void CoordinationService::on_barrier(uint64_t conn, uint64_t seq, int task,
                                     const Tpurt__Wire__Barrier& m) {
  int64_t now = net::now_ms();
  std::string id = m.shutdown ? std::string("shutdown") : std::string(m.id);
  std::string label = m.shutdown ? std::string("shutdown barrier") : str_cat("barrier '", id, "'");
  if (m.timeout_ms <= 0) {
    respond(conn, seq, TPU_INVALID_ARGUMENT, str_cat(label, ": timeout_ms ", m.timeout_ms, " must be > 0"));
    return;
  }
  std::vector<int> participants;
  if (m.shutdown) {
    for (int i = 0; i < num_tasks_; ++i)
      if (!tasks_[i].failed) participants.push_back(i);
  } else if (m.n_tasks == 0) {
    for (int i = 0; i < num_tasks_; ++i) participants.push_back(i);
  } else {
    for (size_t i = 0; i < m.n_tasks; ++i) {
      int t = m.tasks[i];
      if (t < 0 || t >= num_tasks_) {
        respond(conn, seq, TPU_INVALID_ARGUMENT,
                str_cat(label, ": task ", t, " is not in the cluster (tasks 0..", num_tasks_ - 1, ")"));
        return;
      }
      participants.push_back(t);
    }
    std::sort(participants.begin(), participants.end());
    auto dup = std::adjacent_find(participants.begin(), participants.end());
    if (dup != participants.end()) {
      respond(conn, seq, TPU_INVALID_ARGUMENT, str_cat(label, ": task ", *dup, " is listed twice"));
      return;
    }
    if (!std::binary_search(participants.begin(), participants.end(), task)) {
      respond(conn, seq, TPU_INVALID_ARGUMENT,
              str_cat(label, ": task ", task, " waits at it but is not in its task list"));
      return;
    }
  }
  // The n-th call of a task to an id joins the id's n-th instance.
  std::vector<int64_t>& calls = calls_[(m.shutdown ? "S:" : "U:") + id];
  calls.resize(num_tasks_, 0);
  int64_t instance = calls[task]++;
  std::string key = str_cat(m.shutdown ? "S:" : "U:", id, "#", instance);
  auto it = barriers_.find(key);
  if (it == barriers_.end()) {
    Barrier b;
    b.id = id;
    b.shutdown = m.shutdown;
    b.participants = participants;
    b.deadline = now + bounded_timeout(m.timeout_ms);
    b.timeout_ms = bounded_timeout(m.timeout_ms);
    it = barriers_.emplace(key, std::move(b)).first;
  }
  Barrier& b = it->second;
  if (b.done) {
    // Finished before this caller arrived (a failure: a passed one needs everyone).
    if (m.shutdown && task == 0 && on_retired_) on_retired_();
    respond(conn, seq, b.code, b.message);
    return;
  }
  if (m.shutdown && !std::binary_search(b.participants.begin(), b.participants.end(), task)) {
    respond(conn, seq, TPU_OK, "");  // a failed task is not waited for
    return;
  }
  b.arrived[task] = {conn, seq};
  if (!m.shutdown && participants != b.participants) {
    finish_barrier(key, TPU_INVALID_ARGUMENT,
                   str_cat(label, ": the tasks disagree on its task list (task ", task,
                           " lists ", participants.size(), " tasks, an earlier caller ",
                           b.participants.size(), ")"));
    return;
  }
  if (!m.shutdown) {
    for (int t : b.participants)
      if (tasks_[t].failed) {
        finish_barrier(key, TPU_UNAVAILABLE,
                       str_cat(label, " cannot pass: ", tasks_[t].failure));
        return;
      }
  }
  check_barrier(key);
}

void CoordinationService::check_barrier(const std::string& key) {
  Barrier& b = barriers_[key];
  if (b.done) return;
  for (int t : b.participants)
    if (!b.arrived.count(t)) return;
  finish_barrier(key, TPU_OK, "");
}

void CoordinationService::finish_barrier(const std::string& key, tpu_status code,
                                         const std::string& message) {
  Barrier& b = barriers_[key];
  b.done = true;
  b.code = code;
  b.message = message;
  // Before any task hears the answer: one that initialises again at once must find
  // this service refusing it (net::accept_handshake's refuse), not taking it for a
  // restart of a task it lost.
  if (b.shutdown && b.arrived.count(0) && on_retired_) on_retired_();
  for (auto& a : b.arrived) respond(a.second.first, a.second.second, code, message);
  bool everyone = true;
  for (int t : b.participants) everyone = everyone && b.arrived.count(t);
  // Kept only while a participant may still come and must get the same answer.
  if (everyone) barriers_.erase(key);
}

}  // namespace tpurt
