// Coordination's state and the agent's loop-thread side, shared by coordination.cc
// (joining, failures, shutdown) and coordination_kv.cc (the key-value store and
// barriers). Internal to lib/cluster.
#pragma once

#include <netdb.h>
#include <openssl/rand.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "cluster/coordination.h"
#include "cluster/coordination_conn.h"
#include "cluster/coordination_service.h"
#include "cluster/handshake_gate.h"
#include "cluster/silent_connections.h"
#include "core/deadline.h"
#include "core/status.h"
#include "net/control_wire.h"
#include "net/event_loop.h"
#include "net/handshake.h"
#include "net/listener.h"

namespace tpurt {
namespace coordination_detail {

constexpr size_t kMaxValueBytes = 8u << 20;
constexpr size_t kMaxKeyBytes = 64u << 10;
// Longer timeouts are this long (no overflow in deadlines and clocks).
constexpr int64_t kMaxWaitMs = int64_t(100) * 24 * 3600 * 1000;

inline int64_t capped(int64_t ms) { return ms > kMaxWaitMs ? kMaxWaitMs : ms; }

// One request waiting for its response.
struct Pending {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  tpu_status code = TPU_OK;
  std::string message;
  std::string value;
  bool found = false;
  std::vector<TaskInfo> tasks;
  int64_t clock_ns = 0;  // the service's clock when it answered

  void complete(tpu_status c, std::string m) {
    std::lock_guard<std::mutex> lock(mu);
    if (done) return;
    done = true;
    code = c;
    message = std::move(m);
    cv.notify_all();
  }
};

inline uint64_t random_incarnation() {
  uint64_t v = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&v), sizeof v) != 1)
    fail(TPU_INTERNAL, "RAND_bytes failed: no randomness for the incarnation");
  return v;
}

// host:port of a connected socket's peer, for the log (host alone without with_port).
inline std::string peer_address(int fd, bool with_port = true) {
  struct sockaddr_storage a;
  socklen_t len = sizeof a;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "an unknown peer";
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof host, port, sizeof port,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "an unknown peer";
  if (!with_port) return host;
  return a.ss_family == AF_INET6 ? str_cat("[", host, "]:", port) : str_cat(host, ":", port);
}

// The open-file limit of the process (RLIMIT_NOFILE's soft limit).
inline uint64_t open_file_limit() {
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return 1024;
  return static_cast<uint64_t>(r.rlim_cur);
}

inline std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

}  // namespace coordination_detail

using namespace coordination_detail;

struct Coordination::Impl {
  CoordinationConfig config;
  DataConnectionHandler on_data;
  std::string cluster_id;
  uint64_t incarnation = 0;
  int num_tasks = 0;
  std::vector<TaskInfo> tasks;

  std::shared_ptr<net::EventLoop> loop;
  std::shared_ptr<HandshakeGate> gate = std::make_shared<HandshakeGate>();
  std::vector<net::Listener*> listeners;       // loop thread
  SilentConnections* silent = nullptr;         // loop thread: accepted, nothing sent yet
  // Task 0: the shutdown barrier has passed, so the service refuses coordination
  // handshakes (TPU_UNAVAILABLE: the dialler retries), which can only be a next
  // system's tasks, until it is gone. Read by the handshake threads.
  std::shared_ptr<std::atomic<bool>> retired = std::make_shared<std::atomic<bool>>(false);
  std::unique_ptr<CoordinationService> service;
  bool torn_down = false;                      // loop thread: nothing new is adopted

  // The agent (loop thread).
  wire::ControlConnection* conn = nullptr;
  std::string lost_reason;                     // why conn is gone
  std::map<uint64_t, std::shared_ptr<Pending>> pending;
  int64_t last_heard = 0;
  uv_timer_t heartbeat_timer;
  bool heartbeat_started = false;
  bool quiet = false;                          // shutting down: no failure callbacks
  std::atomic<uint64_t> next_seq{1};

  // Failures and callbacks (any thread).
  mutable std::mutex mu;
  std::set<int> failed_tasks;
  bool has_failure = false;
  TaskFailure first_failure;
  std::function<void(const TaskFailure&)> failure_callback;
  std::function<void(const StepAbort&)> abort_callback;

  std::atomic<bool> shut_down{false};
  bool registered = false;  // start() completed: the service knows this task
  bool stopped = false;

  std::string service_name() const {
    return str_cat("coordination service in task 0 (", config.service_address, ")");
  }

  // ---- Loop thread ----

  // Every accepted connection: held without a thread until its first bytes come
  // (SilentConnections), so that connections that send nothing never keep a task's
  // hello waiting.
  void on_accept(int fd) {
    if (torn_down || silent == nullptr) {
      ::close(fd);
      return;
    }
    silent->add(fd);
  }

  // A connection that sent something: its handshake on a thread of its own, if the
  // gate admits it.
  void start_handshake(int fd) {
    if (torn_down) {
      ::close(fd);
      return;
    }
    std::string why;
    if (!gate->admit(fd, peer_address(fd, false), &why)) {
      wire::log(str_cat("closing the connection from ", peer_address(fd), ": ", why));
      ::close(fd);
      return;
    }
    std::shared_ptr<HandshakeGate> gate_ref = gate;
    std::shared_ptr<net::EventLoop> loop_ref = loop;
    std::string id = cluster_id, token = config.token;
    std::shared_ptr<std::atomic<bool>> retired_ref = retired;
    std::string here = config.addresses[config.task_id];
    try {
      std::thread([this, gate_ref, loop_ref, retired_ref, here, fd, id, token] {
        net::Hello hello;
        bool ok = false;
        net::RefuseFn refuse = [&](const net::Hello& h) -> std::string {
          if (h.kind != net::ConnectionKind::kCoordination || !retired_ref->load()) return "";
          return str_cat("the coordination service at ", here,
                         " is shutting down with the system it served; task ", h.task_id,
                         " tries again until the next one listens");
        };
        try {
          hello = net::accept_handshake(fd, id, token, net::now_ms() + HandshakeGate::kDeadlineMs,
                                        refuse);
          ok = true;
        } catch (const std::exception& e) {
          wire::log(str_cat("closing the connection from ", peer_address(fd), ": ", e.what()));
        }
        gate_ref->finished(fd);
        if (!ok || !loop_ref->post([this, fd, hello] { on_handshaken(fd, hello); })) ::close(fd);
        gate_ref->exited();
      }).detach();
    } catch (const std::exception&) {
      gate->finished(fd);
      gate->exited();
      ::close(fd);
    }
  }

  void on_handshaken(int fd, const net::Hello& hello) {
    if (torn_down) {
      ::close(fd);
      return;
    }
    if (hello.kind == net::ConnectionKind::kData) {
      if (hello.task_id < 0 || hello.task_id >= num_tasks) {
        wire::log(str_cat("closing a data connection from task ", hello.task_id,
                          ": not in the cluster"));
        ::close(fd);
      } else if (on_data) {
        // The callee owns fd from here, even when it throws.
        guarded_callback("on_data", [&] { on_data(hello.task_id, fd); });
      } else {
        ::close(fd);
      }
      return;
    }
    // A task id out of range reaches the service, which answers its registration
    // with TPU_INVALID_ARGUMENT.
    if (!service) {
      wire::log(str_cat("closing a coordination connection from task ", hello.task_id,
                        ": the service runs in task 0"));
      ::close(fd);
      return;
    }
    service->adopt(fd, hello);
  }

  void agent_adopt(int fd) {
    if (torn_down) {
      ::close(fd);
      return;
    }
    last_heard = net::now_ms();
    conn = wire::ControlConnection::open(
        loop->loop(), fd, service_name(),
        [this](const net::FrameHeader& h, wire::EnvelopePtr e) { agent_message(h, std::move(e)); },
        [this](const std::string& reason, bool) { agent_closed(reason); });
    if (conn == nullptr) {
      lost_reason = "cannot watch the connection";
      return;
    }
    uv_timer_init(loop->loop(), &heartbeat_timer);
    heartbeat_timer.data = this;
    heartbeat_started = true;
    uv_timer_start(&heartbeat_timer, [](uv_timer_t* t) { static_cast<Impl*>(t->data)->heartbeat(); },
                   config.heartbeat_interval_ms, config.heartbeat_interval_ms);
  }

  void heartbeat() {
    if (!conn) return;
    int64_t now = net::now_ms();
    if (now - last_heard > config.heartbeat_timeout_ms) {
      conn->close(str_cat("no answer to heartbeats for ", config.heartbeat_timeout_ms, " ms"));
      return;
    }
    Tpurt__Wire__Heartbeat hb = TPURT__WIRE__HEARTBEAT__INIT;
    hb.task_id = config.task_id;
    hb.incarnation = incarnation;
    wire::Envelope e = TPURT__WIRE__ENVELOPE__INIT;
    e.msg_case = TPURT__WIRE__ENVELOPE__MSG_HEARTBEAT;
    e.heartbeat = &hb;
    conn->send(wire::pack_frame(next_seq++, e));
  }

  void agent_message(const net::FrameHeader& h, wire::EnvelopePtr e) {
    last_heard = net::now_ms();
    switch (e->msg_case) {
      case TPURT__WIRE__ENVELOPE__MSG_RESPONSE: {
        auto it = pending.find(h.seq);
        if (it == pending.end()) return;  // a heartbeat's, or a request given up on
        std::shared_ptr<Pending> p = it->second;
        pending.erase(it);
        const Tpurt__Wire__Response& r = *e->response;
        tpu_status code = static_cast<tpu_status>(r.code);
        if (!is_status(code)) code = TPU_UNKNOWN;
        std::lock_guard<std::mutex> lock(p->mu);
        p->value = wire::bytes(r.value);
        p->found = r.found;
        p->clock_ns = r.clock_ns;
        for (size_t i = 0; i < r.n_tasks; ++i) {
          TaskInfo t;
          t.task_id = r.tasks[i]->task_id;
          t.hostname = r.tasks[i]->hostname;
          t.address = r.tasks[i]->address;
          t.num_cores = r.tasks[i]->num_cores;
          t.incarnation = r.tasks[i]->incarnation;
          p->tasks.push_back(t);
        }
        p->done = true;
        p->code = code;
        p->message = r.message;
        p->cv.notify_all();
        return;
      }
      case TPURT__WIRE__ENVELOPE__MSG_TASK_FAILURE: {
        TaskFailure f;
        f.task = e->task_failure->task;
        f.code = static_cast<tpu_status>(e->task_failure->code);
        if (!is_status(f.code) || f.code == TPU_OK) f.code = TPU_UNKNOWN;
        f.message = e->task_failure->message;
        deliver_failure(f);
        return;
      }
      case TPURT__WIRE__ENVELOPE__MSG_STEP_ABORT: {
        const Tpurt__Wire__StepAbort& m = *e->step_abort;
        StepAbort a;
        a.step = m.step;
        a.origin_task = m.origin_task;
        a.origin_replica = m.origin_replica;
        a.code = static_cast<tpu_status>(m.code);
        a.message = m.message;
        std::function<void(const StepAbort&)> cb;
        {
          std::lock_guard<std::mutex> lock(mu);
          cb = abort_callback;
        }
        if (cb && !quiet) guarded_callback("on_step_abort", [&] { cb(a); });
        return;
      }
      default:
        wire::log(str_cat("closing the connection to the ", service_name(), ": unexpected ",
                          wire::message_name(*e), " message"));
        conn->close(str_cat("it sent an unexpected ", wire::message_name(*e), " message"));
    }
  }

  void agent_closed(const std::string& reason) {
    conn = nullptr;
    lost_reason = str_cat(service_name(), " lost: ", reason);
    if (heartbeat_started) {
      uv_timer_stop(&heartbeat_timer);
    }
    std::map<uint64_t, std::shared_ptr<Pending>> waiting;
    waiting.swap(pending);
    for (auto& p : waiting) p.second->complete(TPU_UNAVAILABLE, lost_reason);
    TaskFailure f;
    f.task = 0;
    f.code = TPU_UNAVAILABLE;
    f.message = lost_reason;
    deliver_failure(f);
  }

  void deliver_failure(const TaskFailure& f) {
    if (quiet) return;
    std::function<void(const TaskFailure&)> cb;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!failed_tasks.insert(f.task).second) return;
      if (!has_failure) {
        has_failure = true;
        first_failure = f;
      }
      cb = failure_callback;
    }
    if (cb) guarded_callback("on_task_failure", [&] { cb(f); });
  }

  // A callback's exception must not unwind through libuv.
  template <typename F>
  static void guarded_callback(const char* name, F&& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      wire::log(str_cat("the ", name, " callback threw: ", e.what()));
    } catch (...) {
      wire::log(str_cat("the ", name, " callback threw"));
    }
  }

  // Closes everything the loop holds; the loop thread.
  void close_on_loop() {
    torn_down = true;
    quiet = true;
    for (net::Listener* l : listeners) l->close();
    listeners.clear();
    if (silent) silent->close();
    silent = nullptr;
    if (service) service->close();
    if (conn) conn->close("shutting down");
    if (heartbeat_started) {
      heartbeat_started = false;
      uv_close(reinterpret_cast<uv_handle_t*>(&heartbeat_timer), nullptr);
    }
    for (auto& p : pending) p.second->complete(TPU_FAILED_PRECONDITION, "shutting down");
    pending.clear();
  }

  // ---- Any thread ----

  // Sends the envelope as a request and waits for its response up to wait_ms.
  std::shared_ptr<Pending> call(const wire::Envelope& e, int64_t wait_ms, const std::string& what) {
    // The answer comes through the loop: waiting on it from there would never end.
    if (loop->on_loop_thread())
      fail(TPU_FAILED_PRECONDITION, what, ": not callable from a coordination callback");
    auto p = std::make_shared<Pending>();
    uint64_t seq = next_seq++;
    std::string frame = wire::pack_frame(seq, e);
    bool posted = loop->post([this, p, seq, frame = std::move(frame)]() mutable {
      if (!conn) {
        p->complete(TPU_UNAVAILABLE, lost_reason.empty() ? std::string("not connected") : lost_reason);
        return;
      }
      pending[seq] = p;
      conn->send(std::move(frame));
    });
    if (!posted) fail(TPU_FAILED_PRECONDITION, what, ": the coordination of task ",
                      config.task_id, " is shut down");
    std::unique_lock<std::mutex> lock(p->mu);
    wait_ms = capped(wait_ms);
    bool done = wait_for_ms(p->cv, lock, wait_ms, [&] { return p->done; });
    if (!done) {
      lock.unlock();
      loop->post([this, seq] { pending.erase(seq); });
      fail(TPU_DEADLINE_EXCEEDED, what, ": no answer from the ", service_name(), " within ",
           wait_ms, " ms");
    }
    return p;
  }

  // A request whose failure throws.
  std::shared_ptr<Pending> request(const wire::Envelope& e, int64_t wait_ms, const std::string& what) {
    std::shared_ptr<Pending> p = call(e, wait_ms, what);
    if (p->code != TPU_OK) fail(p->code, p->message);
    return p;
  }

  // How long a call waits beyond the service's own timeout: the service answers
  // or the connection fails (heartbeats) well within this.
  int64_t slack() const { return 2 * config.heartbeat_timeout_ms + 5000; }

  void require_running(const char* what) const {
    if (shut_down) fail(TPU_FAILED_PRECONDITION, what, ": the coordination of task ",
                        config.task_id, " is shut down");
  }

  void disconnect(bool graceful, int64_t wait_ms) {
    Tpurt__Wire__Disconnect d = TPURT__WIRE__DISCONNECT__INIT;
    d.graceful = graceful;
    wire::Envelope e = TPURT__WIRE__ENVELOPE__INIT;
    e.msg_case = TPURT__WIRE__ENVELOPE__MSG_DISCONNECT;
    e.disconnect = &d;
    try {
      call(e, wait_ms, "disconnect");
    } catch (const Error&) {
      // Gone already, or slow: the teardown closes the connection all the same.
    }
  }

  void set_quiet() {
    struct Flag {
      std::mutex m;
      std::condition_variable cv;
      bool done = false;
    };
    auto flag = std::make_shared<Flag>();
    if (!loop->post([this, flag] {
          quiet = true;
          std::lock_guard<std::mutex> lock(flag->m);
          flag->done = true;
          flag->cv.notify_all();
        }))
      return;
    std::unique_lock<std::mutex> lock(flag->m);
    flag->cv.wait_for(lock, std::chrono::seconds(10), [&] { return flag->done; });
  }

  // Stops the handshakes, closes the loop's handles, joins the loop thread.
  void teardown() {
    if (stopped) return;
    stopped = true;
    gate->close(HandshakeGate::kDeadlineMs + 2000);
    if (loop) {
      loop->post([this] { close_on_loop(); });
      loop->stop();
    }
    service.reset();
  }

  ~Impl() { teardown(); }
};

}  // namespace tpurt
