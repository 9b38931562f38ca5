// The agent side of the coordination service, and the process's loop: every
// task's Coordination owns one net::EventLoop thread that runs its listeners,
// the agent's connection to the service and, in task 0, the service itself
// (coordination_service.cc). Public calls pack their request on the caller's
// thread, hand it to the loop with post(), and wait for the response (matched by
// the frame's seq) with a deadline.
//
// Accepted connections wait on the loop, threadless, for their first bytes
// (SilentConnections: the oldest silent one dropped first past a cap), then run their
// handshake on a short-lived thread each (admitted by a HandshakeGate: bounded per
// source and in all, a short deadline), then come back to the loop: data connections
// go to on_data, called on the loop thread; coordination connections go to the service
// (task 0; elsewhere they are closed).
//
// One process may run one system after another with the same cluster: once task 0's
// shutdown barrier has passed, its service refuses coordination handshakes with
// TPU_UNAVAILABLE (net::dial retries those) until it is gone, so that a task that
// released first and initialises again joins the next service, never the old one
// (which would take it for a restart of a task it lost).
#include "cluster/coordination_impl.h"

namespace tpurt {

namespace {

void check_config(const CoordinationConfig& c) {
  if (c.addresses.empty()) invalid_argument("the cluster has no task addresses");
  if (c.task_id < 0 || c.task_id >= static_cast<int>(c.addresses.size()))
    invalid_argument("task id ", c.task_id, " is not in 0..", c.addresses.size() - 1);
  if (c.num_cores <= 0) invalid_argument("num_cores ", c.num_cores, " must be > 0");
  if (c.init_timeout_ms <= 0) invalid_argument("init_timeout_ms ", c.init_timeout_ms, " must be > 0");
  if (c.heartbeat_interval_ms <= 0)
    invalid_argument("heartbeat_interval_ms ", c.heartbeat_interval_ms, " must be > 0");
  if (c.heartbeat_timeout_ms <= c.heartbeat_interval_ms)
    invalid_argument("heartbeat_timeout_ms ", c.heartbeat_timeout_ms,
                     " must exceed heartbeat_interval_ms ", c.heartbeat_interval_ms);
  if (c.shutdown_barrier_timeout_ms <= 0)
    invalid_argument("shutdown_barrier_timeout_ms ", c.shutdown_barrier_timeout_ms, " must be > 0");
  std::set<std::string> seen;
  for (size_t i = 0; i < c.addresses.size(); ++i) {
    std::string host, port;
    net::split_host_port(c.addresses[i], &host, &port);
    if (!seen.insert(c.addresses[i]).second)
      invalid_argument("task ", i, "'s address ", c.addresses[i], " is listed twice");
  }
  std::string host, port;
  net::split_host_port(c.service_address, &host, &port);
}

}  // namespace

Coordination::Coordination(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<Coordination> Coordination::start(const CoordinationConfig& config_in,
                                                  DataConnectionHandler on_data) {
  CoordinationConfig config = config_in;
  if (config.service_address.empty() && !config.addresses.empty())
    config.service_address = config.addresses[0];
  check_config(config);
  config.init_timeout_ms = capped(config.init_timeout_ms);
  config.heartbeat_interval_ms = capped(config.heartbeat_interval_ms);
  config.heartbeat_timeout_ms = capped(config.heartbeat_timeout_ms);
  config.shutdown_barrier_timeout_ms = capped(config.shutdown_barrier_timeout_ms);
  int64_t deadline = deadline_ms_after(net::now_ms(), config.init_timeout_ms);

  auto impl = std::make_unique<Impl>();
  Impl* m = impl.get();
  m->config = config;
  m->on_data = std::move(on_data);
  m->num_tasks = static_cast<int>(config.addresses.size());
  m->incarnation = random_incarnation();
  m->cluster_id = config.job;
  for (const std::string& a : config.addresses) m->cluster_id += "," + a;
  m->loop = std::make_shared<net::EventLoop>();

  // Listeners and the service are set up before the loop thread runs them.
  m->silent = SilentConnections::open(m->loop->loop(), SilentConnections::capacity_for(open_file_limit()),
                                      HandshakeGate::kDeadlineMs, [m](int fd) { m->start_handshake(fd); });
  auto accept = [m](int fd) { m->on_accept(fd); };
  // A taken address is most often a second process with this task id: registering
  // anyway lets the service say so, naming both hosts.
  std::string in_use;
  try {
    m->listeners.push_back(net::Listener::open(m->loop->loop(), config.addresses[config.task_id], accept));
  } catch (const Error& e) {
    if (e.code() != TPU_ALREADY_EXISTS) throw;
    in_use = e.message();
  }
  if (config.task_id == 0 && in_use.empty()) {
    if (config.service_address != config.addresses[0])
      m->listeners.push_back(net::Listener::open(m->loop->loop(), config.service_address, accept));
    m->service = std::make_unique<CoordinationService>(m->loop->loop(), config);
    std::shared_ptr<std::atomic<bool>> retired = m->retired;
    m->service->on_retired([retired] { retired->store(true); });
    m->service->start();
  }
  std::unique_ptr<Coordination> self(new Coordination(std::move(impl)));
  m->loop->start();

  net::Hello hello;
  hello.cluster_id = m->cluster_id;
  hello.task_id = config.task_id;
  hello.incarnation = m->incarnation;
  hello.kind = net::ConnectionKind::kCoordination;
  int fd = -1;
  // Without a listener this process only asks the service whom its address belongs to.
  const std::string holder_unknown = str_cat(
      in_use, ": another process holds task ", config.task_id,
      "'s address (a second process with this task id, or another program)");
  // The holder of the address registers right after it listens: it goes first.
  if (!in_use.empty())
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(1000, config.init_timeout_ms / 2)));
  try {
    fd = net::dial(config.service_address, hello, config.token,
                   in_use.empty() ? deadline : std::min<int64_t>(deadline, net::now_ms() + 5000));
  } catch (const Error& e) {
    if (!in_use.empty()) fail(TPU_ALREADY_EXISTS, holder_unknown);
    if (e.code() == TPU_DEADLINE_EXCEEDED)
      fail(TPU_DEADLINE_EXCEEDED, "task ", config.task_id, " could not reach the coordination service at ",
           config.service_address, " within ", config.init_timeout_ms, " ms: ", e.message());
    throw;
  }
  if (!m->loop->post([m, fd] { m->agent_adopt(fd); })) {
    ::close(fd);
    fail(TPU_INTERNAL, "the coordination loop stopped during start");
  }

  TaskInfo mine;
  mine.task_id = config.task_id;
  mine.hostname = host_name();
  mine.address = config.addresses[config.task_id];
  mine.num_cores = config.num_cores;
  mine.incarnation = m->incarnation;
  Tpurt__Wire__TaskInfo info = TPURT__WIRE__TASK_INFO__INIT;
  info.task_id = mine.task_id;
  info.hostname = const_cast<char*>(mine.hostname.c_str());
  info.address = const_cast<char*>(mine.address.c_str());
  info.num_cores = mine.num_cores;
  info.incarnation = mine.incarnation;
  Tpurt__Wire__Register reg = TPURT__WIRE__REGISTER__INIT;
  reg.task = &info;
  int64_t left = deadline - net::now_ms();
  reg.timeout_ms = left > 1 ? left : 1;
  reg.init_timeout_ms = config.init_timeout_ms;
  wire::Envelope e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_REGISTER;
  e.register_ = &reg;
  if (!in_use.empty()) {
    // The service answers a duplicate at once; a registration it takes is not ours to
    // keep (this process cannot listen), so the wait is short and the error the same.
    std::shared_ptr<Pending> p;
    try {
      p = m->call(e, std::min<int64_t>(reg.timeout_ms, 5000), "registration");
    } catch (const Error&) {
    }
    if (p && p->code == TPU_ALREADY_EXISTS) fail(TPU_ALREADY_EXISTS, p->message, " (", in_use, ")");
    fail(TPU_ALREADY_EXISTS, holder_unknown);
  }
  std::shared_ptr<Pending> p = m->request(e, reg.timeout_ms + 2000, "registration");
  if (static_cast<int>(p->tasks.size()) != m->num_tasks)
    fail(TPU_INTERNAL, "the coordination service described ", p->tasks.size(), " tasks, not ",
         m->num_tasks);
  m->tasks = p->tasks;
  m->registered = true;
  return self;
}

Coordination::~Coordination() {
  if (!impl_->shut_down.exchange(true) && impl_->registered) {
    // Left without shutdown(): the others hear of it as this task's failure.
    impl_->set_quiet();
    impl_->disconnect(/*graceful=*/false, 1000);
  }
  impl_->teardown();
}

int Coordination::task_id() const { return impl_->config.task_id; }
int Coordination::num_tasks() const { return impl_->num_tasks; }
uint64_t Coordination::incarnation() const { return impl_->incarnation; }
const std::string& Coordination::cluster_id() const { return impl_->cluster_id; }
const std::vector<TaskInfo>& Coordination::tasks() const { return impl_->tasks; }

void Coordination::on_task_failure(std::function<void(const TaskFailure&)> callback) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->failure_callback = std::move(callback);
}

void Coordination::on_step_abort(std::function<void(const StepAbort&)> callback) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->abort_callback = std::move(callback);
}

bool Coordination::failure(TaskFailure* out) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->has_failure) return false;
  if (out) *out = impl_->first_failure;
  return true;
}

void Coordination::broadcast_step_abort(const StepAbort& abort) {
  impl_->require_running("broadcast_step_abort");
  Tpurt__Wire__StepAbort a = TPURT__WIRE__STEP_ABORT__INIT;
  a.step = abort.step;
  a.origin_task = abort.origin_task;
  a.origin_replica = abort.origin_replica;
  a.code = abort.code;
  a.message = const_cast<char*>(abort.message.c_str());
  wire::Envelope e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_STEP_ABORT;
  e.step_abort = &a;
  // No response and no batching: straight onto the connection.
  std::string frame = wire::pack_frame(0, e);
  Impl* m = impl_.get();
  m->loop->post([m, frame = std::move(frame)]() mutable {
    if (m->conn) m->conn->send(std::move(frame));
  });
}

void Coordination::report_error(tpu_status code, const std::string& message) {
  impl_->require_running("report_error");
  Tpurt__Wire__ReportError r = TPURT__WIRE__REPORT_ERROR__INIT;
  r.code = code;
  r.message = const_cast<char*>(message.c_str());
  wire::Envelope e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_REPORT_ERROR;
  e.report_error = &r;
  impl_->request(e, impl_->slack(), "report_error");
}

void Coordination::shutdown() {
  Impl* m = impl_.get();
  if (m->loop->on_loop_thread())
    fail(TPU_FAILED_PRECONDITION, "shutdown: not callable from a coordination callback");
  if (m->shut_down.exchange(true)) return;
  const int64_t timeout = capped(m->config.shutdown_barrier_timeout_ms);
  std::unique_ptr<Error> error;
  Tpurt__Wire__Barrier b = TPURT__WIRE__BARRIER__INIT;
  b.id = const_cast<char*>("shutdown");
  b.timeout_ms = timeout;
  b.shutdown = 1;
  wire::Envelope e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_BARRIER;
  e.barrier = &b;
  try {
    m->request(e, timeout + m->slack(), "shutdown barrier");
  } catch (const Error& err) {
    error = std::make_unique<Error>(err);
  }
  // Task 0: past its barrier (passed or not) the service only waits for the other
  // agents to leave; a task registering now is a next system's (the service has set
  // this already when the barrier passed with task 0 at it).
  if (m->service) m->retired->store(true);
  // Past the barrier a peer's or the service's departure is expected.
  m->set_quiet();
  if (m->service) {
    // Task 0 serves until every other agent has left, so that none sees it lost.
    int64_t until = deadline_ms_after(net::now_ms(), timeout);
    while (m->service->other_agents() > 0 && net::now_ms() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  m->disconnect(/*graceful=*/true, 2000);
  m->teardown();
  if (error) throw *error;
}

}  // namespace tpurt
