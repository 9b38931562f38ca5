#include "runtime/system.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "collectives/communicator.h"
#include "core/status.h"
#include "core/cpus.h"
#include "core/env.h"
#include "core/options.h"
#include "core/wait.h"
#include "topology/embedding_config.h"
#include "topology/topology.h"

namespace tpurt {
namespace {

std::mutex g_live_mu;
const System* g_live = nullptr;  // guarded by g_live_mu

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
    names[core] = full_device_name(c.job_name.c_str(), 0, c.device_type.c_str(), core);
  return names;
}

}  // namespace

System::System(SystemConfig config)
    : config_(std::move(config)),
      comms_(config_.num_cores + 1),
      replica_core_(config_.num_cores),
      core_owner_(config_.num_cores),
      executor_(this, device_names(config_), config_.pin_threads, config_.collective_timeout_ms) {
  build_topology();
}

System::~System() = default;

void System::build_topology() {
  topology_ = Topology::local(config_.mesh_shape, config_.num_cores);
  serialized_topology_ = topology_->serialize();
}

std::shared_ptr<System> System::start(const tpu_system_options* options) {
  SystemConfig config = resolve_system_options(options);
  std::lock_guard<std::mutex> lock(g_live_mu);
  if (g_live != nullptr)
    fail(TPU_ALREADY_EXISTS,
         "a TPU system is already initialized in this process; shut it down first "
         "(tpu_system_shutdown)");
  std::shared_ptr<System> system(new System(std::move(config)));
  try {
    system->executor_.start(system);
    system->host_.start(system);
  } catch (...) {
    system->executor_.stop();
    system->host_.stop();
    throw;
  }
  g_live = system.get();
  return system;
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
  if (!is_shut_down()) {
    state_.store(kShutDown, std::memory_order_release);
    executor_.stop();
    host_.stop();
    std::lock_guard<std::mutex> live(g_live_mu);
    if (g_live == this) g_live = nullptr;
  }
  if (!late.empty())
    fail(TPU_DEADLINE_EXCEEDED, "the system is shut down, but ", late, " did not return within ",
         config_.collective_timeout_ms,
         " ms more; its thread, and the user_data it was given, stay in use until it returns");
}

void System::check_num_replicas(int num_replicas, const DeviceAssignment* da) const {
  if (da == nullptr) {
    if (num_replicas != 1 && num_replicas != num_cores())
      invalid_argument("without a device assignment 'num_replicas' must be equal to 1 or ",
                       num_cores(), " (the number of cores), got ", num_replicas);
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
  if (num_replicas > num_cores())
    invalid_argument("the device assignment has ", num_replicas, " replicas but the system has ",
                     num_cores(), " cores; each replica needs a core of its own");
}

std::shared_ptr<const DeviceAssignment> System::default_device_assignment(int num_replicas) const {
  check_num_replicas(num_replicas, nullptr);
  return DeviceAssignment::task0_devices(topology_, num_replicas);
}

const int* System::resolve_cores(int num_replicas, const DeviceAssignment* da,
                                 int* cores_per_replica) {
  check_num_replicas(num_replicas, da);
  if (da == nullptr) {
    for (int r = 0; r < num_replicas; ++r) replica_core_[r] = r;
    *cores_per_replica = 1;
    return replica_core_.data();
  }
  *cores_per_replica = da->num_cores_per_replica();
  std::fill(core_owner_.begin(), core_owner_.end(), -1);
  for (int r = 0; r < num_replicas; ++r) {
    const int task = da->task(r, 0);
    if (task != 0)
      invalid_argument("the device assignment puts replica ", r, " on task ", task,
                       ", but this system has only task 0");
    const int core = da->tpu_ordinal(r, 0);
    if (core < 0 || core >= num_cores())
      invalid_argument("the device assignment puts replica ", r, " on device ", core,
                       ", but this system has ", num_cores(), " cores");
    // Two replicas on one core would deadlock in their first collective.
    if (core_owner_[core] >= 0)
      invalid_argument("the device assignment puts replicas ", core_owner_[core], " and ", r,
                       " on core ", core, "; each replica needs a core of its own");
    core_owner_[core] = r;
    replica_core_[r] = core;
  }
  return replica_core_.data();
}

const std::shared_ptr<Communicator>& System::communicator(int num_replicas) {
  std::shared_ptr<Communicator>& comm = comms_[num_replicas];
  if (!comm)
    comm = std::make_shared<Communicator>(num_replicas, config_.collective_timeout_ms,
                                          num_usable_cpus(), config_.private_collective_results);
  return comm;
}

void System::run_step(const StepSpec& spec, const DeviceAssignment* device_assignment,
                      tpu_tensor** outputs) {
  check_can_start_step();
  std::lock_guard<FifoMutex> lock(step_mu_);
  check_open();
  int cores_per_replica = 1;
  const int* cores = resolve_cores(spec.num_replicas, device_assignment, &cores_per_replica);
  StepResult result = executor_.run(spec, cores, cores_per_replica,
                                    communicator(spec.num_replicas), outputs);
  if (result.code == TPU_OK) return;
  if (result.late) comms_[spec.num_replicas].reset();  // the late replicas hold it
  if (config_.close_on_failure) close(result.message);
  throw Error(result.code, result.message);
}


}  // namespace tpurt
