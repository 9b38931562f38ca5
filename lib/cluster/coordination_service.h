// The coordination service's state, hosted by task 0 on its loop thread: the
// registered tasks and their heartbeats, the key-value store, barriers (the
// shutdown barrier among them), and the broadcasts of failures and step aborts.
// Every member runs on the loop thread except other_agents().
//
// A connection that sends anything malformed or out of place after its handshake
// is closed by wire::ControlConnection or here, and its task is lost: the fault is
// the task's, and the others must not wait on it.
#pragma once

#include <uv.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cluster/coordination.h"
#include "cluster/coordination_conn.h"
#include "net/handshake.h"

namespace tpurt {

// A timeout from the wire is at most this long (deadlines cannot overflow).
inline int64_t bounded_timeout(int64_t ms) {
  constexpr int64_t kMaxTimeoutMs = int64_t(100) * 24 * 3600 * 1000;
  return ms > kMaxTimeoutMs ? kMaxTimeoutMs : ms;
}

class CoordinationService {
 public:
  CoordinationService(uv_loop_t* loop, const CoordinationConfig& config);
  ~CoordinationService();
  void start();
  // A connection of kind kCoordination whose handshake passed.
  void adopt(int fd, const net::Hello& hello);
  // Closes every connection and the timer, quietly (no failures broadcast).
  void close();
  // Agents of tasks other than 0 still connected (task 0's shutdown waits for 0).
  int other_agents() const { return other_agents_.load(); }
  // Called on the loop thread when the shutdown barrier ends with task 0 at it: the
  // system is going away, and a task that registers from then on is starting the next
  // one (the same processes initialising again), not restarting into this one.
  void on_retired(std::function<void()> fn) { on_retired_ = std::move(fn); }

 private:
  enum class State { kUnregistered, kConnected, kLost, kDisconnected };
  struct Task {
    State state = State::kUnregistered;
    uint64_t conn = 0;  // the connection id serving it
    TaskInfo info;
    int64_t last_heartbeat = 0;
    bool failed = false;  // lost, left without shutdown, or reported an error
    std::string failure;
  };
  struct Peer {
    wire::ControlConnection* conn = nullptr;
    int hello_task = -1;
    uint64_t hello_incarnation = 0;
    int task = -1;  // once registered
    bool disconnected = false;
  };
  struct Waiter {
    uint64_t conn;
    uint64_t seq;
    int64_t deadline;
    std::string key;       // kv get
    int64_t timeout_ms;    // for the message
  };
  struct Barrier {
    std::string id;
    bool shutdown = false;
    std::vector<int> participants;  // sorted
    std::map<int, std::pair<uint64_t, uint64_t>> arrived;  // task -> (conn, seq)
    int64_t deadline = 0;
    int64_t timeout_ms = 0;
    bool done = false;
    tpu_status code = TPU_OK;
    std::string message;
  };

  void on_message(uint64_t conn, const net::FrameHeader& h, wire::EnvelopePtr e);
  void on_close(uint64_t conn, const std::string& reason);
  void on_register(uint64_t conn, uint64_t seq, const Tpurt__Wire__Register& r);
  void on_barrier(uint64_t conn, uint64_t seq, int task, const Tpurt__Wire__Barrier& b);
  void on_kv_set(uint64_t conn, uint64_t seq, const Tpurt__Wire__KvSet& m);
  void on_kv_get(uint64_t conn, uint64_t seq, const Tpurt__Wire__KvGet& m);
  void on_kv_delete(uint64_t conn, uint64_t seq, const Tpurt__Wire__KvDelete& m);
  // The request's key normalized into *key; false after answering the request with why not.
  bool key_or_respond(uint64_t conn, uint64_t seq, const char* raw, std::string* key);
  void tick();
  void try_form();
  void fail_task(int task, tpu_status code, const std::string& message);
  void finish_barrier(const std::string& key, tpu_status code, const std::string& message);
  void check_barrier(const std::string& key);
  std::string task_name(int task) const;
  std::string registration_status(int64_t timeout_ms) const;
  void respond(uint64_t conn, uint64_t seq, tpu_status code, const std::string& message,
               const std::string* value = nullptr, bool found = false, bool with_tasks = false);
  void send_to(uint64_t conn, const wire::Envelope& e, uint64_t seq);
  void protocol_error(uint64_t conn, const std::string& why);
  void update_other_agents();

  uv_loop_t* loop_;
  CoordinationConfig config_;
  int num_tasks_;
  uv_timer_t timer_;
  bool timer_started_ = false;
  bool closing_ = false;
  uint64_t next_conn_ = 1;
  std::map<uint64_t, Peer> peers_;
  std::vector<Task> tasks_;
  bool formed_ = false;
  tpu_status formed_code_ = TPU_OK;
  std::string formed_message_;
  std::vector<Waiter> registrations_;
  std::map<std::string, std::string> kv_;
  std::vector<Waiter> kv_waiters_;
  std::map<std::string, Barrier> barriers_;           // by id and instance
  std::map<std::string, std::vector<int64_t>> calls_;  // barrier id -> each task's calls
  int64_t last_heartbeat_check_ = 0;
  std::atomic<int> other_agents_{0};
  std::function<void()> on_retired_;
};

}  // namespace tpurt
