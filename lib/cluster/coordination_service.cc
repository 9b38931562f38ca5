#include "cluster/coordination_service.h"

#include <unistd.h>

#include <algorithm>

#include "core/deadline.h"
#include "core/status.h"

namespace tpurt {
namespace {

constexpr int64_t kTickMs = 20;
std::string status_text(tpu_status code) { return status_name(code); }

void fill_task_info(const TaskInfo& t, Tpurt__Wire__TaskInfo* w) {
  tpurt__wire__task_info__init(w);
  w->task_id = t.task_id;
  w->hostname = const_cast<char*>(t.hostname.c_str());
  w->address = const_cast<char*>(t.address.c_str());
  w->num_cores = t.num_cores;
  w->incarnation = t.incarnation;
}

}  // namespace

CoordinationService::CoordinationService(uv_loop_t* loop, const CoordinationConfig& config)
    : loop_(loop), config_(config), num_tasks_(static_cast<int>(config.addresses.size())),
      tasks_(config.addresses.size()) {
  for (int i = 0; i < num_tasks_; ++i) {
    tasks_[i].info.task_id = i;
    tasks_[i].info.address = config.addresses[i];
  }
}

CoordinationService::~CoordinationService() = default;

void CoordinationService::start() {
  uv_timer_init(loop_, &timer_);
  timer_.data = this;
  uv_timer_start(&timer_, [](uv_timer_t* t) { static_cast<CoordinationService*>(t->data)->tick(); },
                 kTickMs, kTickMs);
  timer_started_ = true;
}

void CoordinationService::close() {
  if (closing_) return;
  closing_ = true;
  if (timer_started_) uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
  // Task 0 gave up waiting (its start failed): the tasks still waiting learn why,
  // rather than only that the service went away.
  if (!formed_) {
    std::string why = registration_status(config_.init_timeout_ms);
    for (const Waiter& w : registrations_) respond(w.conn, w.seq, TPU_DEADLINE_EXCEEDED, why);
    registrations_.clear();
  }
  std::vector<wire::ControlConnection*> open;
  for (auto& p : peers_)
    if (p.second.conn) open.push_back(p.second.conn);
  for (auto* c : open) c->close("the coordination service stopped");
  peers_.clear();
  other_agents_ = 0;
}

std::string CoordinationService::registration_status(int64_t timeout_ms) const {
  int registered = 0;
  std::string missing;
  for (int i = 0; i < num_tasks_; ++i) {
    if (tasks_[i].state == State::kConnected) {
      ++registered;
    } else {
      missing += str_cat(missing.empty() ? "" : ", ", task_name(i));
    }
  }
  return str_cat(registered, " of ", num_tasks_, " tasks registered within ", timeout_ms,
                 " ms; missing: ", missing);
}

std::string CoordinationService::task_name(int task) const {
  if (task < 0 || task >= num_tasks_) return str_cat("task ", task);
  return str_cat("task ", task, " (", config_.addresses[task], ")");
}

void CoordinationService::adopt(int fd, const net::Hello& hello) {
  if (closing_) {
    ::close(fd);
    return;
  }
  uint64_t id = next_conn_++;
  wire::ControlConnection* c = wire::ControlConnection::open(
      loop_, fd, task_name(hello.task_id),
      [this, id](const net::FrameHeader& h, wire::EnvelopePtr e) { on_message(id, h, std::move(e)); },
      [this, id](const std::string& reason, bool) { on_close(id, reason); });
  if (c == nullptr) return;
  Peer& p = peers_[id];
  p.conn = c;
  p.hello_task = hello.task_id;
  p.hello_incarnation = hello.incarnation;
}

void CoordinationService::send_to(uint64_t conn, const wire::Envelope& e, uint64_t seq) {
  auto it = peers_.find(conn);
  if (it == peers_.end() || it->second.conn == nullptr) return;
  it->second.conn->send(wire::pack_frame(seq, e));
}

void CoordinationService::respond(uint64_t conn, uint64_t seq, tpu_status code,
                                  const std::string& message, const std::string* value,
                                  bool found, bool with_tasks) {
  Tpurt__Wire__Response r = TPURT__WIRE__RESPONSE__INIT;
  r.code = code;
  r.message = const_cast<char*>(message.c_str());
  if (value) r.value = wire::binary(*value);
  r.found = found;
  r.clock_ns = now_ns();
  std::vector<Tpurt__Wire__TaskInfo> infos;
  std::vector<Tpurt__Wire__TaskInfo*> ptrs;
  if (with_tasks) {
    infos.resize(tasks_.size());
    for (size_t i = 0; i < tasks_.size(); ++i) {
      fill_task_info(tasks_[i].info, &infos[i]);
      ptrs.push_back(&infos[i]);
    }
    r.n_tasks = ptrs.size();
    r.tasks = ptrs.data();
  }
  wire::Envelope e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_RESPONSE;
  e.response = &r;
  send_to(conn, e, seq);
}

void CoordinationService::protocol_error(uint64_t conn, const std::string& why) {
  auto it = peers_.find(conn);
  if (it == peers_.end() || it->second.conn == nullptr) return;
  wire::log(str_cat("coordination service: closing the connection of ",
                    task_name(it->second.hello_task), ": ", why));
  it->second.conn->close(why);  // on_close loses the task
}

void CoordinationService::update_other_agents() {
  int n = 0;
  for (auto& p : peers_)
    if (p.second.conn && p.second.task > 0 && !p.second.disconnected) ++n;
  other_agents_ = n;
}

void CoordinationService::on_close(uint64_t conn, const std::string& reason) {
  auto it = peers_.find(conn);
  if (it == peers_.end()) return;
  Peer p = it->second;
  peers_.erase(it);
  update_other_agents();
  if (closing_) return;
  // Waiters of that connection can no longer be answered.
  auto gone = [conn](const Waiter& w) { return w.conn == conn; };
  registrations_.erase(std::remove_if(registrations_.begin(), registrations_.end(), gone),
                       registrations_.end());
  kv_waiters_.erase(std::remove_if(kv_waiters_.begin(), kv_waiters_.end(), gone),
                    kv_waiters_.end());
  if (p.task < 0 || p.disconnected) return;
  Task& t = tasks_[p.task];
  if (t.conn != conn || t.state != State::kConnected) return;
  fail_task(p.task, TPU_UNAVAILABLE, str_cat(task_name(p.task), " lost: ", reason));
}

void CoordinationService::fail_task(int task, tpu_status code, const std::string& message) {
  Task& t = tasks_[task];
  if (t.failed) return;
  t.failed = true;
  t.failure = message;
  if (code == TPU_UNAVAILABLE) t.state = State::kLost;
  wire::log(str_cat("coordination service: ", message));
  // Close a lost task's connection (a silent host, a malformed stream).
  if (t.state == State::kLost) {
    auto it = peers_.find(t.conn);
    if (it != peers_.end() && it->second.conn) {
      it->second.task = -1;  // its close is this failure, not another
      it->second.conn->close(message);
    }
  }
  // Every connected task hears of it.
  Tpurt__Wire__TaskFailure f = TPURT__WIRE__TASK_FAILURE__INIT;
  f.task = task;
  f.code = code;
  f.message = const_cast<char*>(message.c_str());
  wire::Envelope e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_TASK_FAILURE;
  e.task_failure = &f;
  std::vector<uint64_t> targets;
  for (auto& p : peers_)
    if (p.second.conn && p.second.task >= 0 && !p.second.disconnected) targets.push_back(p.first);
  for (uint64_t c : targets) send_to(c, e, 0);
  // Barriers waiting on it fail; the shutdown barrier goes on without it.
  std::vector<std::string> keys;
  for (auto& b : barriers_)
    if (!b.second.done) keys.push_back(b.first);
  for (const std::string& key : keys) {
    Barrier& b = barriers_[key];
    if (!std::binary_search(b.participants.begin(), b.participants.end(), task)) continue;
    if (b.shutdown) {
      b.participants.erase(std::find(b.participants.begin(), b.participants.end(), task));
      b.arrived.erase(task);
      check_barrier(key);
    } else {
      finish_barrier(key, TPU_UNAVAILABLE,
                     str_cat("barrier '", b.id, "' cannot pass: ", message));
    }
  }
  // A cluster that has not formed yet never will.
  if (!formed_) {
    formed_ = true;
    formed_code_ = TPU_UNAVAILABLE;
    formed_message_ = str_cat("the cluster cannot form: ", message);
    std::vector<Waiter> waiting;
    waiting.swap(registrations_);
    for (const Waiter& w : waiting) respond(w.conn, w.seq, formed_code_, formed_message_);
  }
  update_other_agents();
}

void CoordinationService::on_message(uint64_t conn, const net::FrameHeader& h,
                                     wire::EnvelopePtr e) {
  auto it = peers_.find(conn);
  if (it == peers_.end() || closing_) return;
  uint64_t seq = h.seq;
  if (e->msg_case == TPURT__WIRE__ENVELOPE__MSG_REGISTER) {
    on_register(conn, seq, *e->register_);
    return;
  }
  int task = it->second.task;
  if (task < 0) {
    protocol_error(conn, str_cat("a ", wire::message_name(*e), " message before registering"));
    return;
  }
  if (it->second.disconnected) {
    respond(conn, seq, TPU_FAILED_PRECONDITION, str_cat(task_name(task), " already disconnected"));
    return;
  }
  switch (e->msg_case) {
    case TPURT__WIRE__ENVELOPE__MSG_HEARTBEAT:
      if (tasks_[task].conn == conn) tasks_[task].last_heartbeat = net::now_ms();
      respond(conn, seq, TPU_OK, "");
      return;
    case TPURT__WIRE__ENVELOPE__MSG_REPORT_ERROR: {
      tpu_status code = static_cast<tpu_status>(e->report_error->code);
      if (!is_status(code) || code == TPU_OK) code = TPU_UNKNOWN;
      respond(conn, seq, TPU_OK, "");
      fail_task(task, code, str_cat(task_name(task), " failed: ", e->report_error->message));
      return;
    }
    case TPURT__WIRE__ENVELOPE__MSG_STEP_ABORT: {
      // At once to every other task: peers blocked in a collective wait on this.
      // Rebuilt from the known fields: re-packing what arrived would forward
      // unknown fields protobuf-c may not read back.
      const Tpurt__Wire__StepAbort& in = *e->step_abort;
      Tpurt__Wire__StepAbort a = TPURT__WIRE__STEP_ABORT__INIT;
      a.step = in.step;
      a.origin_task = in.origin_task;
      a.origin_replica = in.origin_replica;
      a.code = in.code;
      a.message = in.message;
      wire::Envelope out = TPURT__WIRE__ENVELOPE__INIT;
      out.msg_case = TPURT__WIRE__ENVELOPE__MSG_STEP_ABORT;
      out.step_abort = &a;
      std::vector<uint64_t> targets;
      for (auto& p : peers_)
        if (p.first != conn && p.second.conn && p.second.task >= 0 && p.second.task != task &&
            !p.second.disconnected)
          targets.push_back(p.first);
      for (uint64_t c : targets) send_to(c, out, 0);
      return;
    }
    case TPURT__WIRE__ENVELOPE__MSG_KV_SET: on_kv_set(conn, seq, *e->kv_set); return;
    case TPURT__WIRE__ENVELOPE__MSG_KV_GET: on_kv_get(conn, seq, *e->kv_get); return;
    case TPURT__WIRE__ENVELOPE__MSG_KV_DELETE: on_kv_delete(conn, seq, *e->kv_delete); return;
    case TPURT__WIRE__ENVELOPE__MSG_BARRIER: on_barrier(conn, seq, task, *e->barrier); return;
    case TPURT__WIRE__ENVELOPE__MSG_DISCONNECT: {
      bool graceful = e->disconnect->graceful;
      it->second.disconnected = true;
      respond(conn, seq, TPU_OK, "");
      update_other_agents();
      if (tasks_[task].conn != conn) return;
      if (graceful) {
        if (!tasks_[task].failed) tasks_[task].state = State::kDisconnected;
        // Still a participant of the shutdown barrier it passed; nothing else waits.
      } else {
        fail_task(task, TPU_UNAVAILABLE,
                  str_cat(task_name(task), " left the cluster without shutdown"));
      }
      return;
    }
    default:
      protocol_error(conn, str_cat("unexpected ", wire::message_name(*e), " message"));
  }
}

void CoordinationService::on_register(uint64_t conn, uint64_t seq, const Tpurt__Wire__Register& r) {
  Peer& p = peers_[conn];
  const Tpurt__Wire__TaskInfo& info = *r.task;
  int task = info.task_id;
  if (task < 0 || task >= num_tasks_) {
    respond(conn, seq, TPU_INVALID_ARGUMENT,
            str_cat("task ", task, " is not in the cluster (tasks 0..", num_tasks_ - 1, ")"));
    return;
  }
  if (task != p.hello_task || info.incarnation != p.hello_incarnation) {
    protocol_error(conn, str_cat("registers as task ", task, " but said hello as task ",
                                 p.hello_task));
    return;
  }
  Task& t = tasks_[task];
  switch (t.state) {
    case State::kConnected:
      if (t.info.incarnation != info.incarnation) {
        respond(conn, seq, TPU_ALREADY_EXISTS,
                str_cat("duplicate task id ", task, ": task ", task,
                        " is already registered by a process on host ", t.info.hostname,
                        " (incarnation ", t.info.incarnation, "); this one runs on host ",
                        info.hostname ? info.hostname : "", " (incarnation ", info.incarnation,
                        ")"));
        return;
      }
      break;  // a retry: harmless
    case State::kLost:
    case State::kDisconnected:
      respond(conn, seq, TPU_ABORTED,
              t.info.incarnation != info.incarnation
                  ? str_cat("task ", task, " restarted (new incarnation); the cluster lost it earlier")
                  : str_cat("task ", task, " was lost or left earlier; the cluster cannot take it back"));
      return;
    case State::kUnregistered:
      break;
  }
  if (t.failed && t.state == State::kConnected && t.info.incarnation == info.incarnation) {
    // Reported an error earlier: registration answers with the cluster's state all the same.
  }
  t.state = State::kConnected;
  t.conn = conn;
  t.info.hostname = info.hostname ? info.hostname : "";
  t.info.num_cores = info.num_cores;
  t.info.incarnation = info.incarnation;
  t.last_heartbeat = net::now_ms();
  p.task = task;
  update_other_agents();
  if (formed_) {
    respond(conn, seq, formed_code_, formed_message_, nullptr, false, formed_code_ == TPU_OK);
    return;
  }
  int64_t timeout = r.timeout_ms > 0 ? bounded_timeout(r.timeout_ms) : 1;
  registrations_.push_back(
      Waiter{conn, seq, deadline_ms_after(net::now_ms(), timeout), "", r.init_timeout_ms > 0 ? r.init_timeout_ms : timeout});
  try_form();
}

void CoordinationService::try_form() {
  for (const Task& t : tasks_)
    if (t.state != State::kConnected) return;
  formed_ = true;
  std::string counts;
  bool same = true;
  for (const Task& t : tasks_) {
    counts += str_cat(counts.empty() ? "" : ", ", "task ", t.info.task_id, ": ", t.info.num_cores);
    same = same && t.info.num_cores == tasks_[0].info.num_cores;
  }
  if (!same) {
    formed_code_ = TPU_INVALID_ARGUMENT;
    formed_message_ = str_cat("the tasks report different numbers of cores (", counts,
                              "); every task must have the same");
  }
  std::vector<Waiter> waiting;
  waiting.swap(registrations_);
  for (const Waiter& w : waiting)
    respond(w.conn, w.seq, formed_code_, formed_message_, nullptr, false, formed_code_ == TPU_OK);
}


void CoordinationService::tick() {
  if (closing_) return;
  int64_t now = net::now_ms();
  // Registrations that waited too long.
  if (!registrations_.empty()) {
    std::vector<Waiter> expired;
    for (const Waiter& w : registrations_)
      if (w.deadline <= now) expired.push_back(w);
    if (!expired.empty()) {
      registrations_.erase(std::remove_if(registrations_.begin(), registrations_.end(),
                                          [now](const Waiter& w) { return w.deadline <= now; }),
                           registrations_.end());
      for (const Waiter& w : expired)
        respond(w.conn, w.seq, TPU_DEADLINE_EXCEEDED, registration_status(w.timeout_ms));
    }
  }
  // Key-value gets past their timeout.
  if (!kv_waiters_.empty()) {
    std::vector<Waiter> expired;
    for (const Waiter& w : kv_waiters_)
      if (w.deadline <= now) expired.push_back(w);
    kv_waiters_.erase(std::remove_if(kv_waiters_.begin(), kv_waiters_.end(),
                                     [now](const Waiter& w) { return w.deadline <= now; }),
                      kv_waiters_.end());
    for (const Waiter& w : expired)
      respond(w.conn, w.seq, TPU_DEADLINE_EXCEEDED,
              str_cat("key '", w.key, "' was not set within ", w.timeout_ms, " ms"));
  }
  // Barriers past their deadline.
  std::vector<std::string> late;
  for (auto& b : barriers_)
    if (!b.second.done && b.second.deadline <= now) late.push_back(b.first);
  for (const std::string& key : late) {
    Barrier& b = barriers_[key];
    std::string missing;
    for (int t : b.participants)
      if (!b.arrived.count(t)) missing += str_cat(missing.empty() ? "" : ", ", task_name(t));
    std::string label = b.shutdown ? std::string("shutdown barrier") : str_cat("barrier '", b.id, "'");
    finish_barrier(key, TPU_DEADLINE_EXCEEDED,
                   str_cat(label, ": ", b.arrived.size(), " of ", b.participants.size(),
                           " tasks arrived within ", b.timeout_ms, " ms; missing: ", missing));
  }
  // Heartbeats.
  int64_t every = std::min<int64_t>(config_.heartbeat_interval_ms, 1000);
  if (now - last_heartbeat_check_ >= every) {
    last_heartbeat_check_ = now;
    for (int i = 0; i < num_tasks_; ++i) {
      Task& t = tasks_[i];
      if (t.state != State::kConnected || t.failed) continue;
      if (now - t.last_heartbeat > config_.heartbeat_timeout_ms)
        fail_task(i, TPU_UNAVAILABLE,
                  str_cat(task_name(i), " missed heartbeats for ", config_.heartbeat_timeout_ms,
                          " ms: it has failed, was stopped or its host is unreachable"));
    }
  }
  (void)status_text;
}

}  // namespace tpurt
