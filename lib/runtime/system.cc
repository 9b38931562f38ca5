#include "runtime/system.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "collectives/cluster_communicator.h"
#include "collectives/communicator.h"
#include "net/handshake.h"
#include "runtime/data_plane.h"
#include "core/status.h"
#include "core/cpus.h"
#include "core/deadline.h"
#include "core/env.h"
#include "core/options.h"
#include "core/wait.h"
#include "embedding/engine.h"
#include "topology/embedding_config.h"
#include "topology/group_modes.h"
#include "topology/topology.h"
#include "trace/trace.h"

namespace tpurt {
namespace {

std::mutex g_live_mu;
const System* g_live = nullptr;  // guarded by g_live_mu
std::weak_ptr<System> g_live_ref;  // the same, to reach it (guarded by g_live_mu)

bool valid_job_name(const std::string& job) {
  if (job.empty()) return false;
  for (char c : job)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') return false;
  return true;
}

}  // namespace

SystemConfig resolve_system_options(const tpu_system_options* options) {
  const tpu_system_options o = read_options(options, kSystemOptionsMinSize, "tpu_system_options");
  SystemConfig c;

  if (o.num_cores < 0 || o.num_cores > kMaxCores)
    invalid_argument("options->num_cores is ", o.num_cores, "; it must be in [1, ", kMaxCores,
                     "], or 0 for the default");
  c.num_cores = o.num_cores;
  // The environment only where it is consulted: an explicit count wins over it.
  if (c.num_cores == 0) c.num_cores = static_cast<int>(env_value(EnvVar::kNumCores));
  check_environment();

  const int32_t* m = o.mesh_shape;
  if (m[0] == 0 && m[1] == 0 && m[2] == 0 && m[3] == 0) {
    c.mesh_shape[0] = c.num_cores;
    c.mesh_shape[1] = c.mesh_shape[2] = c.mesh_shape[3] = 1;
  } else {
    for (int i = 0; i < TPU_MESH_RANK; ++i)
      if (m[i] <= 0)
        invalid_argument("options->mesh_shape[", i, "] is ", m[i],
                         "; every entry must be positive, or all 0 for [num_cores, 1, 1, 1]");
    int64_t product = 1;
    for (int i = 0; i < TPU_MESH_RANK; ++i) {
      product = std::min<int64_t>(product * m[i], kMaxCores + 1);  // no overflow
      c.mesh_shape[i] = m[i];
    }
    if (product != c.num_cores)
      invalid_argument("options->mesh_shape [", m[0], ", ", m[1], ", ", m[2], ", ", m[3],
                       "] does not hold num_cores = ", c.num_cores,
                       " cores (its product must equal num_cores)");
  }

  c.job_name = o.job_name ? o.job_name : "localhost";
  if (!valid_job_name(c.job_name))
    invalid_argument("options->job_name '", c.job_name,
                     "' is not a job name (letters, digits, '_', '-' and '.')");

  c.device_type = o.device_type ? o.device_type : "TPU";
  for (char& ch : c.device_type) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (c.device_type != "TPU" && c.device_type != "CPU")
    invalid_argument("options->device_type '", o.device_type, "' is not \"TPU\" or \"CPU\"");

  if (o.pin_threads != TPU_PIN_AUTO && o.pin_threads != TPU_PIN_ALWAYS && o.pin_threads != TPU_PIN_NEVER)
    invalid_argument("options->pin_threads is ", o.pin_threads, "; it must be TPU_PIN_AUTO (",
                     TPU_PIN_AUTO, "), TPU_PIN_ALWAYS (", TPU_PIN_ALWAYS, ") or TPU_PIN_NEVER (",
                     TPU_PIN_NEVER, ")");
  c.pin_threads = o.pin_threads;
  if (o.collective_timeout_ms < 0)
    invalid_argument("options->collective_timeout_ms is ", o.collective_timeout_ms,
                     "; it must be positive, or 0 for the default (",
                     TPU_DEFAULT_COLLECTIVE_TIMEOUT_MS, " ms)");
  c.collective_timeout_ms =
      o.collective_timeout_ms ? o.collective_timeout_ms : TPU_DEFAULT_COLLECTIVE_TIMEOUT_MS;
  c.close_on_failure = o.close_on_failure != 0;
  // Fields past the first release's struct are read only if the caller's struct has them.
  c.private_collective_results = o.private_collective_results != 0;
  if (o.trace_path != nullptr) c.trace_path = o.trace_path;
  else if (const char* env = std::getenv("TPURT_TRACE")) c.trace_path = env;

  if (o.embedding_config_len > 0) {
    if (o.embedding_config == nullptr)
      invalid_argument("options->embedding_config is NULL but embedding_config_len is ",
                       o.embedding_config_len);
    validate_embedding_config(o.embedding_config, o.embedding_config_len);
    c.embedding_config.assign(static_cast<const char*>(o.embedding_config),
                              o.embedding_config_len);
  }
  return c;
}

namespace {

std::vector<std::string> device_names(const SystemConfig& c) {
  std::vector<std::string> names(c.num_cores);
  for (int core = 0; core < c.num_cores; ++core)
    names[core] = full_device_name(c.job_name.c_str(), c.task_id, c.device_type.c_str(), core);
  return names;
}

}  // namespace

System::System(SystemConfig config)
    : config_(std::move(config)),
      comms_(config_.num_cores + 1),
      participant_core_(config_.num_cores),
      core_owner_(config_.num_cores),
      executor_(this, device_names(config_), config_.pin_threads, config_.collective_timeout_ms) {
  build_topology();
  if (!config_.embedding_config.empty())
    embedding_ = std::make_unique<embedding::Engine>(config_.embedding_config, config_.task_id,
                                                     config_.num_tasks, config_.num_cores);
}

System::~System() = default;

void System::start_trace() {
  if (config_.trace_path.empty()) return;
  const int64_t offset = coordination_ ? coordination_->clock_offset_ns() : 0;
  trace_.reset(new trace::Recorder(config_.trace_path, task_id(), num_tasks(), offset, transport_name_,
                                   config_.num_cores));
  trace::install(trace_.get());
}

// Tasks stack along x: each task's cores are a contiguous block of the mesh, in task
// order, laid out inside the block as a one-task system's are.
void System::build_topology() {
  const int T = config_.num_tasks;
  if (T == 1) {
    topology_ = Topology::local(config_.mesh_shape, config_.num_cores);
  } else {
    const int32_t* m = config_.mesh_shape;
    std::shared_ptr<const Topology> block = Topology::local(m, config_.num_cores);
    const int32_t mesh[TPU_MESH_RANK] = {m[0] * T, m[1], m[2], m[3]};
    std::vector<int32_t> coords;
    coords.reserve(static_cast<size_t>(T) * config_.num_cores * TPU_MESH_RANK);
    for (int t = 0; t < T; ++t)
      for (int d = 0; d < config_.num_cores; ++d) {
        Coords c = block->device_coordinates(0, d);
        coords.push_back(c[0] + t * m[0]);
        coords.push_back(c[1]);
        coords.push_back(c[2]);
        coords.push_back(c[3]);
      }
    topology_ = Topology::create(mesh, TPU_MESH_RANK, coords.data(), T, config_.num_cores);
  }
  serialized_topology_ = topology_->serialize();
}

std::shared_ptr<System> System::start(const tpu_system_options* options) {
  return launch(resolve_system_options(options), nullptr);
}

std::shared_ptr<System> System::launch(SystemConfig config, const ClusterSetup* setup) {
  std::shared_ptr<System> system;
  {
    // The slot is taken before joining a cluster, which may wait minutes for the other
    // tasks: another start meanwhile fails at once instead of waiting for the lock.
    std::lock_guard<std::mutex> lock(g_live_mu);
    if (g_live != nullptr)
      fail(TPU_ALREADY_EXISTS,
           "a TPU system is already initialized in this process; shut it down first "
           "(tpu_system_shutdown)");
    system.reset(new System(std::move(config)));
    g_live = system.get();
  }
  try {
    if (setup) system->join_cluster(*setup);
    try {
      system->executor_.start(system);
      system->host_.start(system);
      system->start_trace();
    } catch (...) {
      system->executor_.stop();
      system->host_.stop();
      throw;
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(g_live_mu);
    g_live = nullptr;
    throw;
  }
  std::lock_guard<std::mutex> lock(g_live_mu);
  g_live_ref = system;
  return system;
}

std::shared_ptr<System> System::start_cluster(const tpu_system_options* options,
                                              const ClusterSetup& setup) {
  SystemConfig config = resolve_system_options(options);
  const CoordinationConfig& cc = setup.coordination;
  config.num_tasks = static_cast<int>(cc.addresses.size());
  config.task_id = cc.task_id;
  if (options == nullptr || options->job_name == nullptr) config.job_name = cc.job;
  return launch(std::move(config), &setup);
}

void System::shutdown_live() {
  std::shared_ptr<System> live;
  {
    std::lock_guard<std::mutex> lock(g_live_mu);
    if (g_live == nullptr) return;
    live = g_live_ref.lock();
  }
  if (live) live->shutdown();
}

void System::join_cluster(const ClusterSetup& setup) {
  CoordinationConfig cc = setup.coordination;
  cc.num_cores = config_.num_cores;
  const int me = config_.task_id;
  // Peers' data connections may arrive as soon as the service listens: they wait
  // in connections_ until the data plane is chosen.
  connections_.reset(new DataConnections());
  DataConnections* connections = connections_.get();
  coordination_ = Coordination::start(cc, [connections](int peer, int fd) { connections->accept(peer, fd); });
  for (const TaskInfo& t : coordination_->tasks())
    if (t.num_cores != config_.num_cores)
      invalid_argument("task ", t.task_id, " (", t.address, ") has ", t.num_cores,
                       " cores but task ", me, " has ", config_.num_cores,
                       "; every task of a TPU system needs the same number (TPURT_NUM_CORES)");
  DataPlane plane = connect_data_plane(*coordination_, cc, *connections_, deadline_ms_after(net::now_ms(), cc.init_timeout_ms));
  transport_ = std::move(plane.transport);
  transport_name_ = plane.name;
  transport_reason_ = plane.reason;
  net::Transport* transport = transport_.get();
  coordination_->on_task_failure([transport](const TaskFailure& f) { transport->fail(f.message); });
}

void System::check_live() const {
  if (is_shut_down()) fail(TPU_FAILED_PRECONDITION, "the TPU system is shut down");
}

void System::check_open() const {
  const int state = state_.load(std::memory_order_acquire);
  if (state == kOpen) return;
  if (state == kShutDown) fail(TPU_FAILED_PRECONDITION, "the TPU system is shut down");
  std::lock_guard<std::mutex> lock(closed_mu_);
  fail(TPU_FAILED_PRECONDITION, closed_message_);
}

void System::check_can_start_step() const {
  if (in_user_code())
    fail(TPU_FAILED_PRECONDITION,
         "TPU computations cannot be nested: a step was started from inside a computation");
  check_open();
}

void System::close(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(closed_mu_);
    closed_message_ = str_cat("the system was closed by a failed step: ", why);
  }
  int open = kOpen;
  state_.compare_exchange_strong(open, kClosed, std::memory_order_acq_rel);
}

void System::shutdown() {
  if (in_user_code())
    fail(TPU_FAILED_PRECONDITION, "tpu_system_shutdown must not be called from inside a computation");
  std::lock_guard<FifoMutex> lock(step_mu_);
  // Bounded: a computation that never returns must not hang the shutdown.
  const std::string late = executor_.wait_for_late(0, nullptr, config_.collective_timeout_ms);
  std::string barrier_error;
  if (!is_shut_down()) {
    state_.store(kShutDown, std::memory_order_release);
    executor_.stop();
    host_.stop();
    if (trace_) trace::install(nullptr), trace_.reset();  // the file is complete
    // Peers in a step with this task hear at once why it will not come, rather than
    // at their deadline or the shutdown barrier's.
    if (transport_)
      transport_->leave({TPU_FAILED_PRECONDITION, -1,
                         str_cat("task ", task_id(), " shut down its TPU system (tpu_system_shutdown)"
                                 " while this task's step needs it")});
    if (coordination_) {
      try {
        coordination_->shutdown();
      } catch (const Error& e) {
        barrier_error = e.message();
      }
    }
    std::lock_guard<std::mutex> live(g_live_mu);
    if (g_live == this) g_live = nullptr;
  }
  if (!barrier_error.empty())
    fail(TPU_DEADLINE_EXCEEDED, "the system is shut down, but the shutdown barrier failed: ",
         barrier_error);
  if (!late.empty())
    fail(TPU_DEADLINE_EXCEEDED, "the system is shut down, but ", late, " did not return within ",
         config_.collective_timeout_ms,
         " ms more; its thread, and the user_data it was given, stay in use until it returns");
}

void System::check_num_replicas(int num_replicas, const DeviceAssignment* da) const {
  if (da == nullptr) {
    if (num_replicas != 1 && num_replicas != num_global_cores())
      invalid_argument("without a device assignment 'num_replicas' must be equal to 1 or ",
                       num_global_cores(), " (the number of cores", num_tasks() > 1 ? " of all tasks" : "",
                       "), got ", num_replicas);
    return;
  }
  // Spec §1.3: the runtime rejects an assignment whose topology is not the live one.
  const Topology& da_topology = *da->topology();
  if (&da_topology != topology_.get() && !da_topology.same_layout(*topology_))
    invalid_argument("the device assignment was built for another topology (",
                     da_topology.describe(), ") than this system's (", topology_->describe(),
                     "); build it on tpu_system_topology's");
  const int da_replicas = da->num_replicas();
  if (da_replicas != num_replicas)
    invalid_argument("the device assignment has ", da_replicas, " replicas but num_replicas is ",
                     num_replicas);
  const int64_t participants = int64_t{num_replicas} * da->num_cores_per_replica();
  if (participants > num_global_cores())
    invalid_argument("the device assignment has ", num_replicas, " replicas",
                     da->num_cores_per_replica() > 1
                         ? str_cat(" of ", da->num_cores_per_replica(), " cores (", participants,
                                   " computations)")
                         : std::string(),
                     " but the system has ", num_global_cores(),
                     " cores; each replica needs a core of its own for each of its logical cores");
}

std::shared_ptr<const DeviceAssignment> System::default_device_assignment(int num_replicas) const {
  check_num_replicas(num_replicas, nullptr);
  return DeviceAssignment::in_device_order(topology_, num_replicas);
}

const int* System::resolve_cores(int num_replicas, const DeviceAssignment* da,
                                 int* cores_per_replica) {
  check_num_replicas(num_replicas, da);
  const int k = da == nullptr ? 1 : da->num_cores_per_replica();
  const int n = num_replicas * k;
  *cores_per_replica = k;
  participant_core_.assign(n, -1);
  participant_task_.assign(n, 0);
  local_participants_.clear();
  if (da == nullptr) {
    // Replica r on global core r: task r / num_cores, its core r % num_cores.
    for (int r = 0; r < num_replicas; ++r) {
      participant_task_[r] = r / num_cores();
      if (participant_task_[r] != task_id()) continue;
      participant_core_[r] = r % num_cores();
      local_participants_.push_back(r);
    }
    return participant_core_.data();
  }
  std::fill(core_owner_.begin(), core_owner_.end(), -1);
  for (int r = 0; r < num_replicas; ++r) {
    for (int c = 0; c < k; ++c) {
      const int p = r * k + c;
      const int task = da->task(r, c);
      if (task < 0 || task >= num_tasks())
        invalid_argument("the device assignment puts ", participant_name(p, k), " on task ", task,
                         ", but this system has ", num_tasks() == 1 ? "only task 0" : "tasks 0 to ",
                         num_tasks() == 1 ? "" : std::to_string(num_tasks() - 1));
      participant_task_[p] = task;
      if (task != task_id()) continue;
      local_participants_.push_back(p);
      const int core = da->tpu_ordinal(r, c);
      if (core < 0 || core >= num_cores())
        invalid_argument("the device assignment puts ", participant_name(p, k), " on device ", core,
                         ", but this system has ", num_cores(), " cores");
      // Two computations on one core would deadlock in their first collective.
      if (core_owner_[core] >= 0)
        invalid_argument("the device assignment puts ", participant_name(core_owner_[core], k),
                         " and ", participant_name(p, k), " on core ", core,
                         "; each needs a core of its own");
      core_owner_[core] = p;
      participant_core_[p] = core;
    }
  }
  return participant_core_.data();
}

const std::shared_ptr<Communicator>& System::communicator(int num_participants,
                                                          int cores_per_replica) {
  std::shared_ptr<Communicator>& comm = comms_[num_participants];
  if (!comm || comm->cores_per_replica() != cores_per_replica)
    comm = std::make_shared<Communicator>(num_participants, config_.collective_timeout_ms,
                                          num_usable_cpus(), config_.private_collective_results,
                                          cores_per_replica);
  return comm;
}

void System::run_step(const StepSpec& spec, const DeviceAssignment* device_assignment,
                      tpu_tensor** outputs) {
  check_can_start_step();
  std::lock_guard<FifoMutex> lock(step_mu_);
  check_open();
  int cores_per_replica = 1;
  const int* cores = resolve_cores(spec.num_replicas, device_assignment, &cores_per_replica);
  if (num_tasks() > 1) return run_cluster_step(spec, cores, cores_per_replica, outputs);
  const int participants = spec.num_replicas * cores_per_replica;
  StepSpec step = spec;
  if (embedding_) step.embedding = embedding_->begin_step(participant_task_, local_participants_, cores_per_replica);
  StepResult result;
  if (trace_) trace_->begin_step();
  try {
    result = executor_.run(step, cores, cores_per_replica, communicator(participants, cores_per_replica), outputs);
  } catch (...) {  // nothing ran (a core still late): the tables are as they were
    if (step.embedding) embedding_->end_step(*step.embedding, false, false);
    if (trace_) trace_->end_step(TPU_UNAVAILABLE, "the step did not start: a core still runs a late computation");
    throw;
  }
  if (step.embedding) embedding_->end_step(*step.embedding, result.code == TPU_OK, result.late);
  if (trace_) trace_->end_step(result.code, result.message);
  if (result.code == TPU_OK) return;
  if (result.late) comms_[participants].reset();  // the late participants hold it
  if (config_.close_on_failure) close(result.message);
  throw Error(result.code, result.message);
}


// Every task runs its replicas of the step, then ends the step with every other task
// (net::Transport::end_step), so that a step fails as one: a task whose replicas
// succeeded still reports another task's failure.
void System::run_cluster_step(const StepSpec& spec, const int* cores, int cores_per_replica,
                              tpu_tensor** outputs) {
  transport_->begin_step(++step_number_);
  if (trace_) trace_->begin_step();
  if (!cluster_comm_ || cluster_comm_->task_of_participant() != participant_task_ ||
      cluster_comm_->cores_per_replica() != cores_per_replica)
    cluster_comm_ = std::make_shared<ClusterCommunicator>(
        participant_task_, task_id(), transport_.get(), config_.collective_timeout_ms,
        num_usable_cpus(), config_.private_collective_results, cores_per_replica);
  std::shared_ptr<Communicator> comm = cluster_comm_;
  StepResult result;
  StepSpec step = spec;
  if (embedding_) step.embedding = embedding_->begin_step(participant_task_, local_participants_, cores_per_replica);
  try {
    result = executor_.run(step, cores, cores_per_replica, comm, outputs, &local_participants_);
  } catch (const Error& e) {  // the step did not start here: the others must still hear
    result.code = e.code();
    result.message = e.message();
  }
  net::StepOutcome mine{result.code, -1, result.message}, remote;
  const int64_t timeout = spec.timeout_ms > 0 ? spec.timeout_ms : config_.collective_timeout_ms;
  ClusterCommunicator* cc = cluster_comm_.get();
  const bool remote_failed =
      transport_->end_step(mine, timeout, &remote, [cc](int task) { return cc->describe_task(task); });
  if (result.late) cluster_comm_.reset();  // the late participants hold it
  // A step fails as one: another task's failure fails this task's step too, and its
  // own error wins over the abort it caused here.
  if (remote_failed && (result.code == TPU_OK ||
                        (result.code == TPU_ABORTED && remote.code != TPU_ABORTED))) {
    if (result.code == TPU_OK)
      for (int p : local_participants_)
        for (int o = 0; o < spec.num_outputs; ++o)
          release(std::exchange(outputs[static_cast<int64_t>(p) * spec.num_outputs + o], nullptr));
    result.code = remote.code;
    result.message = remote.message;
  }
  // Every task now knows the step's one outcome: each applies its rows' gradients or none.
  if (step.embedding) embedding_->end_step(*step.embedding, result.code == TPU_OK, result.late);
  if (trace_) trace_->end_step(result.code, result.message);
  if (result.code == TPU_OK) return;
  if (config_.close_on_failure) close(result.message);
  throw Error(result.code, result.message);
}

JoinedParticipant System::join_step(int core, int64_t timeout_ms, const std::shared_ptr<System>& keepalive) {
  check_live();
  return executor_.join(core, timeout_ms, keepalive);
}

void System::between_steps(FunctionRef<void()> fn) {
  if (in_user_code())
    fail(TPU_FAILED_PRECONDITION, "the embedding tables cannot be loaded or retrieved from inside a computation");
  std::lock_guard<FifoMutex> lock(step_mu_);
  check_live();
  fn();
}

namespace {
// Users' keys and barrier ids stay out of the names tpurt uses between its tasks.
void check_not_reserved(const char* what, const std::string& name, bool is_key = true) {
  const std::string n = is_key ? normalize_key(name) : name;
  const std::string prefix = kReservedKeyPrefix;  // "__tpurt/": the subtree and its root
  if (n.compare(0, prefix.size(), prefix) == 0 || n == prefix.substr(0, prefix.size() - 1))
    invalid_argument(what, " '", name, "' begins with '", kReservedKeyPrefix,
                     "', which is reserved for tpurt's own use");
}
}  // namespace

void System::kv_set(const std::string& key, const std::string& value) {
  check_live();
  check_not_reserved("key", key);
  internal_kv_set_unchecked(key, value);
}

void System::internal_kv_set(const std::string& key, const std::string& value) {
  check_live();
  internal_kv_set_unchecked(kReservedKeyPrefix + key, value);
}

std::string System::internal_kv_get(const std::string& key, int64_t timeout_ms) {
  return kv_get(kReservedKeyPrefix + key, timeout_ms);
}

void System::internal_kv_set_unchecked(const std::string& key, const std::string& value) {
  if (coordination_) return coordination_->kv_set(key, value);
  const std::string k = normalize_key(key);
  std::lock_guard<std::mutex> lock(kv_mu_);
  if (!kv_.emplace(k, value).second) fail(TPU_ALREADY_EXISTS, "key '", k, "' is already set");
  kv_changed_.notify_all();
}

std::string System::kv_get(const std::string& key, int64_t timeout_ms) {
  check_live();
  if (timeout_ms <= 0) invalid_argument("timeout_ms is ", timeout_ms, "; it must be > 0");
  if (coordination_) return coordination_->kv_get(key, timeout_ms);
  const std::string k = normalize_key(key);
  std::unique_lock<std::mutex> lock(kv_mu_);
  if (!wait_for_ms(kv_changed_, lock, timeout_ms, [&] { return kv_.count(k) > 0; }))
    fail(TPU_DEADLINE_EXCEEDED, "key '", k, "' was not set within ", timeout_ms, " ms");
  return kv_[k];
}

bool System::kv_try_get(const std::string& key, std::string* value) {
  check_live();
  if (coordination_) return coordination_->kv_try_get(key, value);
  const std::string k = normalize_key(key);
  std::lock_guard<std::mutex> lock(kv_mu_);
  auto it = kv_.find(k);
  if (it == kv_.end()) return false;
  *value = it->second;
  return true;
}

void System::kv_delete(const std::string& key) {
  check_live();
  check_not_reserved("key", key);
  if (coordination_) return coordination_->kv_delete(key);
  const std::string k = normalize_key(key);
  std::lock_guard<std::mutex> lock(kv_mu_);
  kv_.erase(k);
  for (auto it = kv_.lower_bound(k + "/"); it != kv_.end() && it->first.compare(0, k.size() + 1, k + "/") == 0;)
    it = kv_.erase(it);
}

void System::barrier(const std::string& id, int64_t timeout_ms, const std::vector<int32_t>& tasks) {
  check_live();
  if (id.empty()) invalid_argument("the barrier id is empty");
  if (timeout_ms <= 0) invalid_argument("timeout_ms is ", timeout_ms, "; it must be > 0");
  check_not_reserved("barrier id", id, false);
  if (coordination_) return coordination_->barrier(id, timeout_ms, tasks);
  for (int32_t t : tasks)
    if (t != 0) invalid_argument("barrier '", id, "' lists task ", t, ", but this system has only task 0");
}

}  // namespace tpurt
