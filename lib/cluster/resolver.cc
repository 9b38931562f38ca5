#include "cluster/resolver.h"

#include <jansson.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cluster/hostlist.h"
#include "core/env.h"
#include "core/options.h"
#include "core/status.h"

namespace tpurt {
namespace {

constexpr int kDefaultTpuPort = 8470;    // TPUClusterResolver's port for grpc:// names
constexpr int kDefaultPortBase = 8888;   // SlurmClusterResolver's port_base
constexpr int kMaxSparseIndex = 65535;   // bounds a sparse TF_CONFIG job's vector
// Bounds the vectors of all TF_CONFIG's jobs together (each sparse job is as long as its
// largest index): many jobs of one large index each would be gigabytes.
constexpr size_t kMaxTaskSlots = size_t{1} << 20;
const char kGrpcPrefix[] = "grpc://";

// The variable's value; nullptr when unset. `empty_is_unset`: set but empty counts as
// unset (the library's convention for its own variables and the launchers').
const char* env(const char* name, bool empty_is_unset = true) {
  const char* v = std::getenv(name);
  if (v != nullptr && empty_is_unset && *v == '\0') return nullptr;
  return v;
}

bool starts_with(const std::string& s, const char* prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string::npos ? at : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

// Python's int() on a decimal: optional sign and digits, no spaces. Returns false for
// anything else and for values outside int64.
bool parse_int(const char* text, int64_t* out) {
  const char* p = text;
  bool negative = *p == '-';
  if (*p == '-' || *p == '+') ++p;
  if (*p == '\0') return false;
  uint64_t v = 0;
  for (; *p; ++p) {
    if (*p < '0' || *p > '9') return false;
    v = v * 10 + static_cast<uint64_t>(*p - '0');
    if (v > static_cast<uint64_t>(INT64_MAX)) return false;
  }
  *out = negative ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  return true;
}

// A required non-negative integer variable of a launcher, below `limit`.
int64_t launcher_int(const char* name, const char* text, int64_t limit) {
  int64_t v;
  if (!parse_int(text, &v) || v < 0 || v >= limit)
    invalid_argument("environment variable ", name, "='", text,
                     "' is not a decimal integer in [0, ", limit, ")");
  return v;
}

bool is_host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '-' || c == '.' || c == '_';
}

// Splits "host:port" or "[v6]:port" into host and port text; false when it is
// neither. `port` is "" when the address has no port.
bool split_address(const std::string& a, std::string* host, std::string* port) {
  size_t colon;
  if (!a.empty() && a[0] == '[') {
    size_t close = a.find(']');
    if (close == std::string::npos || close == 1) return false;
    bool zone = false;  // after '%': an interface name ("fe80::1%eth0")
    for (size_t i = 1; i < close; ++i) {
      char c = a[i];
      bool ok = zone ? is_host_char(c)
                     : (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
                           (c >= 'A' && c <= 'F') || c == ':' || c == '.' || c == '%';
      if (!ok) return false;
      zone = zone || c == '%';
    }
    *host = a.substr(0, close + 1);
    if (close + 1 == a.size()) {
      port->clear();
      return true;
    }
    if (a[close + 1] != ':') return false;
    colon = close + 1;
  } else {
    colon = a.find(':');
    *host = a.substr(0, colon);
    if (host->empty()) return false;
    for (char c : *host)
      if (!is_host_char(c)) return false;
    if (colon == std::string::npos) {
      port->clear();
      return true;
    }
  }
  *port = a.substr(colon + 1);
  if (port->empty()) return false;  // "host:" names no port
  return true;
}

bool valid_port(const std::string& p) {
  if (p.empty() || p.size() > 5) return false;
  for (char c : p)
    if (c < '0' || c > '9') return false;
  int v = std::atoi(p.c_str());
  return v >= 1 && v <= 65535;
}

[[noreturn]] void bad_address(const std::string& a, const std::string& where) {
  invalid_argument("invalid address '", a, "' in ", where,
                   ": expected host:port with a port in [1, 65535] (IPv6 as [addr]:port)");
}

// Checks host:port; `where` names the entry's source for the message.
void check_address(const std::string& a, const std::string& where) {
  std::string host, port;
  if (!split_address(a, &host, &port) || !valid_port(port)) bad_address(a, where);
}

// host[:port] with the port defaulting to `port`.
std::string with_default_port(const std::string& a, int port, const std::string& where) {
  std::string host, port_text;
  if (!split_address(a, &host, &port_text)) bad_address(a, where);
  if (port_text.empty()) return str_cat(host, ":", port);
  if (!valid_port(port_text)) bad_address(a, where);
  return a;
}

void check_no_duplicates(const std::vector<std::string>& addresses, const std::string& where) {
  std::set<std::string> seen;
  for (const std::string& a : addresses)
    if (!a.empty() && !seen.insert(a).second)
      invalid_argument("duplicate address '", a, "' in ", where,
                       ": every task needs its own host:port");
}

std::string format_master_url(const std::string& address, const std::string& rpc_layer) {
  return rpc_layer.empty() ? address : str_cat(rpc_layer, "://", address);
}

std::string port_base_address(const std::string& host, int port_base, int64_t offset,
                              const char* what) {
  if (port_base + offset > 65535)
    invalid_argument("port ", port_base, " + ", offset, " for ", what,
                     " is above 65535: lower port_base");
  return str_cat(host, ":", port_base + offset);
}

// ---- TF_CONFIG ---------------------------------------------------------------

struct JsonRef {
  json_t* p;
  explicit JsonRef(json_t* j) : p(j) {}
  ~JsonRef() { json_decref(p); }
  JsonRef(const JsonRef&) = delete;
  JsonRef& operator=(const JsonRef&) = delete;
};

const char* json_type_name(const json_t* j) {
  switch (json_typeof(j)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "a list";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
  }
  return "a value";
}

std::string json_string_of(const json_t* j) {
  return std::string(json_string_value(j), json_string_length(j));
}

}  // namespace

int count_tasks(const std::vector<std::string>& addresses) {
  return static_cast<int>(
      std::count_if(addresses.begin(), addresses.end(), [](const std::string& a) {
        return !a.empty();
      }));
}

std::unique_ptr<ClusterResolver> ClusterResolver::create(
    const tpu_cluster_resolver_options* options) {
  // Every field exists since the first release: the whole struct is the minimum.
  const tpu_cluster_resolver_options o = read_options(
      options, sizeof(tpu_cluster_resolver_options), "tpu_cluster_resolver_options");
  if (o.source < TPU_RESOLVER_AUTO || o.source > TPU_RESOLVER_OPENMPI)
    invalid_argument("options->source is ", o.source,
                     "; expected a tpu_resolver_source (0 to 5)");
  if (o.task_id < -1) invalid_argument("options->task_id is ", o.task_id, "; expected >= -1");
  if (o.port_base < 0 || o.port_base > 65535)
    invalid_argument("options->port_base is ", o.port_base, "; expected 0 (8888) to 65535");
  if (o.job_name != nullptr && *o.job_name == '\0')
    invalid_argument("options->job_name is \"\"; use NULL for the source's default");
  if (o.coordinator_name != nullptr && *o.coordinator_name == '\0')
    invalid_argument("options->coordinator_name is \"\"; use NULL for none");
  std::unique_ptr<ClusterResolver> r(new ClusterResolver());
  r->environment_ = o.environment ? o.environment : "";
  r->resolve(o);
  r->finish(o);
  return r;
}

void ClusterResolver::resolve(const tpu_cluster_resolver_options& o) {
  switch (o.source) {
    case TPU_RESOLVER_TPU: return resolve_tpu(o, true);
    case TPU_RESOLVER_TF_CONFIG: return resolve_tf_config(o, env("TF_CONFIG"));
    case TPU_RESOLVER_DTENSOR: return resolve_dtensor(o);
    case TPU_RESOLVER_SLURM: return resolve_slurm(o);
    case TPU_RESOLVER_OPENMPI: return resolve_openmpi(o);
    default: break;
  }
  // AUTO, in the header's order. A DTENSOR_JOBS set to "" still counts (DTensor
  // itself treats it as one client with an empty address, an error below).
  if (env("DTENSOR_JOBS", false) != nullptr) return resolve_dtensor(o);
  if (const char* tf_config = env("TF_CONFIG")) {
    // Parsed here to see whether it names a cluster; a malformed one is reported,
    // not skipped, since the user meant it.
    resolve_tf_config(o, tf_config);
    if (!spec_.empty()) return;
    // No cluster: forget what it set and go on with the other sources.
    sparse_jobs_.clear();
    has_session_master_ = false;
    session_master_.clear();
    job_name_.clear();
    rpc_layer_.clear();
    tpu_name_.clear();
    task_id_ = 0;
    local_ = false;
  }
  if (env("SLURM_JOB_ID") != nullptr) return resolve_slurm(o);
  if (env("OMPI_COMM_WORLD_SIZE") != nullptr) return resolve_openmpi(o);
  resolve_tpu(o, false);
}

// ---- TPUClusterResolver ----------------------------------------------------------

void ClusterResolver::resolve_tpu(const tpu_cluster_resolver_options& o, bool required) {
  source_ = TPU_RESOLVER_TPU;
  job_name_ = o.job_name ? o.job_name : "worker";
  task_id_ = 0;
  rpc_layer_ = "grpc";  // master() always says grpc:// for this source
  std::string where = "options->tpu";
  std::string name = o.tpu ? o.tpu : "";
  if (name.empty()) {
    for (const char* var : {"KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", "TPU_NAME"}) {
      if (const char* v = env(var)) {
        name = v;
        where = var;
        break;
      }
    }
  }
  if (name.empty()) {
    // TensorFlow's words for an explicit TPU resolver; AUTO with nothing found means
    // this process alone.
    if (required)
      invalid_argument("Please provide a TPU Name to connect to. (options->tpu, "
                       "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS and TPU_NAME are all unset; "
                       "use \"local\" or grpc://host:port)");
    name = "local";
  }
  tpu_name_ = name;
  if (name == "local") {
    local_ = true;
    return;
  }
  if (!starts_with(name, kGrpcPrefix))
    fail(TPU_NOT_FOUND, "TPU '", name, "' (from ", where,
         ") is a Cloud TPU name; tpurt has no Cloud TPU API to look it up. Tried "
         "options->tpu, KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS, TPU_NAME; name the workers as "
         "grpc://host:port[,grpc://host:port...] or use \"local\"");
  std::vector<std::string> endpoints;
  for (std::string item : split(name, ',')) {
    if (starts_with(item, kGrpcPrefix)) item.erase(0, std::strlen(kGrpcPrefix));
    endpoints.push_back(with_default_port(item, kDefaultTpuPort, where));
  }
  check_no_duplicates(endpoints, where);
  spec_[job_name_] = std::move(endpoints);
}

// ---- TFConfigClusterResolver -------------------------------------------------------

void ClusterResolver::resolve_tf_config(const tpu_cluster_resolver_options& o, const char* text) {
  source_ = TPU_RESOLVER_TF_CONFIG;
  tpu_name_ = "TF_CONFIG";
  rpc_layer_.clear();
  JsonRef root(nullptr);
  if (text != nullptr) {
    json_error_t error;
    root.p = json_loads(text, 0, &error);
    if (root.p == nullptr)
      invalid_argument("TF_CONFIG is not valid JSON: ", error.text, " at line ", error.line,
                       " column ", error.column);
    if (!json_is_object(root.p))
      invalid_argument("TF_CONFIG is ", json_type_name(root.p), "; expected a JSON object");
  }
  const json_t* cluster = root.p ? json_object_get(root.p, "cluster") : nullptr;
  const json_t* task = root.p ? json_object_get(root.p, "task") : nullptr;
  const json_t* rpc = root.p ? json_object_get(root.p, "rpc_layer") : nullptr;
  const json_t* master = root.p ? json_object_get(root.p, "session_master") : nullptr;

  if (cluster != nullptr && !json_is_null(cluster)) {
    if (!json_is_object(cluster))
      invalid_argument("TF_CONFIG's \"cluster\" is ", json_type_name(cluster),
                       "; expected an object of job name -> list of host:port");
    const char* job;
    json_t* tasks;
    size_t slots = 0;
    json_object_foreach(const_cast<json_t*>(cluster), job, tasks) {
      std::string where = str_cat("TF_CONFIG's cluster.", job);
      std::vector<std::string> addresses;
      if (json_is_array(tasks)) {
        size_t i;
        json_t* a;
        json_array_foreach(tasks, i, a) {
          if (!json_is_string(a))
            invalid_argument(where, "[", i, "] is ", json_type_name(a), "; expected a \"host:port\" string");
          addresses.push_back(json_string_of(a));
          check_address(addresses.back(), str_cat(where, "[", i, "]"));
        }
      } else if (json_is_object(tasks)) {
        // A sparse job: {"index": "host:port"}.
        const char* key;
        json_t* a;
        json_object_foreach(tasks, key, a) {
          int64_t index;
          if (!parse_int(key, &index) || index < 0 || index > kMaxSparseIndex ||
              key[0] == '+' || key[0] == '-')
            invalid_argument(where, " has task index '", key, "'; expected a decimal integer in [0, ",
                             kMaxSparseIndex, "]");
          if (!json_is_string(a))
            invalid_argument(where, ".", key, " is ", json_type_name(a), "; expected a \"host:port\" string");
          if (addresses.size() <= static_cast<size_t>(index)) addresses.resize(index + 1);
          if (!addresses[index].empty())
            invalid_argument(where, " names task ", index, " twice");
          addresses[index] = json_string_of(a);
          check_address(addresses[index], str_cat(where, ".", key));
        }
        sparse_jobs_.insert(job);
      } else {
        invalid_argument(where, " is ", json_type_name(tasks),
                         "; expected a list of \"host:port\" or an object of index -> \"host:port\"");
      }
      slots += addresses.size();
      if (slots > kMaxTaskSlots)
        invalid_argument("TF_CONFIG's cluster has more than ", kMaxTaskSlots,
                         " task slots (a sparse job has as many as its largest index + 1)");
      check_no_duplicates(addresses, where);
      spec_[job] = std::move(addresses);
    }
  }

  bool has_type = false, has_index = false;
  int64_t index = 0;
  if (task != nullptr && !json_is_null(task)) {
    if (!json_is_object(task))
      invalid_argument("TF_CONFIG's \"task\" is ", json_type_name(task), "; expected an object");
    const json_t* type = json_object_get(task, "type");
    if (type != nullptr && !json_is_null(type)) {
      if (!json_is_string(type))
        invalid_argument("TF_CONFIG's task.type is ", json_type_name(type), "; expected a string");
      job_name_ = json_string_of(type);
      has_type = true;
    }
    const json_t* idx = json_object_get(task, "index");
    if (idx != nullptr && !json_is_null(idx)) {
      if (!json_is_integer(idx))
        invalid_argument("TF_CONFIG's task.index is ", json_type_name(idx), "; expected an integer");
      index = json_integer_value(idx);
      has_index = true;
    }
  }
  if (rpc != nullptr && !json_is_null(rpc)) {
    if (!json_is_string(rpc))
      invalid_argument("TF_CONFIG's rpc_layer is ", json_type_name(rpc), "; expected a string");
    rpc_layer_ = json_string_of(rpc);
  }
  if (master != nullptr && !json_is_null(master)) {
    if (!json_is_string(master))
      invalid_argument("TF_CONFIG's session_master is ", json_type_name(master),
                       "; expected a string");
    session_master_ = json_string_of(master);
    has_session_master_ = true;
  }

  // The constructor's arguments win over TF_CONFIG (task_id 0 counts only together
  // with task_type, since zeroed options carry 0).
  if (o.task_type != nullptr) {
    job_name_ = o.task_type;
    has_type = true;
  }
  if (o.task_id > 0 || (o.task_id == 0 && o.task_type != nullptr)) {
    index = o.task_id;
    has_index = true;
  }
  if (o.rpc_layer != nullptr) rpc_layer_ = o.rpc_layer;

  if (spec_.empty()) {
    // No cluster: this process alone, as TensorFlow's empty ClusterSpec.
    local_ = true;
    task_id_ = index >= 0 && index <= INT32_MAX ? static_cast<int>(index) : 0;
    return;
  }
  // tpurt runs this task in the cluster, so it must be one of the cluster's tasks.
  // (TensorFlow lets task.index default to None; a missing index is task 0 here.)
  if (!has_type)
    invalid_argument("TF_CONFIG names a cluster but no task.type (nor options->task_type): "
                     "tpurt needs to know which task this process is");
  auto job = spec_.find(job_name_);
  if (job == spec_.end())
    invalid_argument("TF_CONFIG's task.type '", job_name_, "' is not a job of its cluster");
  const std::vector<std::string>& tasks = job->second;
  if (index < 0 || index >= static_cast<int64_t>(tasks.size()) || tasks[index].empty())
    invalid_argument("task index ", index, " of TF_CONFIG's task (", job_name_,
                     ") is out of range: job '", job_name_, "' has ", count_tasks(tasks),
                     " task(s)", has_index ? "" : " (task.index was not given: 0)");
  task_id_ = static_cast<int>(index);
}

// ---- DTensor -----------------------------------------------------------------------

void ClusterResolver::resolve_dtensor(const tpu_cluster_resolver_options& o) {
  source_ = TPU_RESOLVER_DTENSOR;
  rpc_layer_ = o.rpc_layer ? o.rpc_layer : "grpc";
  const char* jobs_text = env("DTENSOR_JOBS", false);
  if (jobs_text == nullptr)
    invalid_argument("DTENSOR_JOBS is not set: DTensor's multi-client mode needs the "
                     "clients' host:port list (without it DTensor runs locally; use the "
                     "TPU source with \"local\" for that)");
  if (const char* executor = env("DTENSOR_USE_PARALLEL_EXECUTOR"))
    if (std::strcmp(executor, "pw") == 0)
      fail(TPU_UNIMPLEMENTED, "DTENSOR_USE_PARALLEL_EXECUTOR=pw asks for Pathways, which "
                              "tpurt does not have");
  tpu_name_ = jobs_text;
  // DTensor splits on ','; "" is then one client with an empty address, which fails
  // the address check below. DTENSOR_NUM_CLIENTS was removed from DTensor: ignored.
  std::vector<std::string> jobs = split(jobs_text, ',');
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (starts_with(jobs[i], "/bns/"))
      fail(TPU_UNIMPLEMENTED, "DTENSOR_JOBS entry ", i, " '", jobs[i],
           "' is a /bns/ address, which tpurt cannot resolve; use host:port");
    check_address(jobs[i], str_cat("DTENSOR_JOBS entry ", i));
  }
  check_no_duplicates(jobs, "DTENSOR_JOBS");
  int64_t client_id = 0;
  // DTensor's int(os.environ.get(...)): an empty value is not an integer either.
  if (const char* id = env("DTENSOR_CLIENT_ID", false)) {
    if (!parse_int(id, &client_id))
      invalid_argument("DTENSOR_CLIENT_ID='", id, "' is not an integer");
    if (client_id < 0) invalid_argument("DTENSOR_CLIENT_ID (=", id, ") must be >= 0");
    if (client_id >= static_cast<int64_t>(jobs.size()))
      invalid_argument("DTENSOR_CLIENT_ID (=", id, ") must be < ", jobs.size(),
                       " (the number of clients in DTENSOR_JOBS)");
  }
  task_id_ = static_cast<int>(client_id);
  if (o.job_name != nullptr)
    job_name_ = o.job_name;
  else if (const char* name = env("DTENSOR_JOB_NAME"))
    job_name_ = name;
  else  // DTensor's default, also for a multi-client run of one client
    job_name_ = jobs.size() == 1 ? "localhost" : "worker";
  spec_[job_name_] = std::move(jobs);
}

// ---- Slurm ---------------------------------------------------------------------------

namespace {

// SlurmClusterResolver's lookup: the step's variable, else the job's (may be NULL).
// *used gets the name of the one read.
std::string slurm_var(const char* step_name, const char* job_name, const char** used = nullptr) {
  for (const char* name : {step_name, job_name}) {
    if (name == nullptr) continue;
    if (const char* v = env(name)) {
      if (used) *used = name;
      return v;
    }
  }
  invalid_argument(step_name, " not found in environment. Not running inside a SLURM step?");
}

}  // namespace

void ClusterResolver::resolve_slurm(const tpu_cluster_resolver_options& o) {
  source_ = TPU_RESOLVER_SLURM;
  tpu_name_ = "slurm";
  rpc_layer_ = o.rpc_layer ? o.rpc_layer : "grpc";
  job_name_ = o.job_name ? o.job_name : "worker";
  int port_base = o.port_base ? o.port_base : kDefaultPortBase;

  const char *ntasks_var, *nodelist_var, *tpn_var;
  std::string procid = slurm_var("SLURM_PROCID", nullptr);
  std::string ntasks_text = slurm_var("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", &ntasks_var);
  std::string nodelist = slurm_var("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", &nodelist_var);
  std::string tasks_per_node_text =
      slurm_var("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", &tpn_var);

  // One task per address: kMaxHosts bounds the tasks as it bounds the hosts.
  int64_t ntasks = launcher_int(ntasks_var, ntasks_text.c_str(), kMaxHosts + 1);
  if (ntasks == 0) invalid_argument(ntasks_var, " is 0: the step has no tasks");
  int64_t rank = launcher_int("SLURM_PROCID", procid.c_str(), ntasks);

  std::vector<std::string> hosts = expand_hostlist(nodelist, nodelist_var);
  std::vector<int> per_node = expand_tasks_per_node(tasks_per_node_text, tpn_var);
  if (per_node.size() != hosts.size())
    invalid_argument(tpn_var, "='", tasks_per_node_text, "' has ", per_node.size(),
                     " entries but ", nodelist_var, "='", nodelist, "' has ", hosts.size(),
                     " hosts");
  int64_t total = 0;
  for (int n : per_node) total += n;
  if (total != ntasks)
    invalid_argument("Requested ", ntasks, " tasks but ", tpn_var, "='", tasks_per_node_text,
                     "' assigns ", total);

  // Hosts in Slurm's order, not TensorFlow's sorted order: with the default block
  // distribution Slurm gives consecutive ranks to each host in its list's order, so
  // this order makes task k the process whose SLURM_PROCID is k.
  std::vector<std::string> addresses;
  int64_t local_index = -1;
  for (size_t h = 0; h < hosts.size(); ++h) {
    for (int i = 0; i < per_node[h]; ++i) {
      if (static_cast<int64_t>(addresses.size()) == rank) local_index = i;
      addresses.push_back(port_base_address(hosts[h], port_base, i, hosts[h].c_str()));
    }
  }
  for (size_t i = 0; i < addresses.size(); ++i)
    check_address(addresses[i], str_cat(nodelist_var, " (task ", i, ")"));
  check_no_duplicates(addresses, nodelist_var);
  // A cyclic or arbitrary distribution breaks the block order assumed above.
  if (const char* localid = env("SLURM_LOCALID")) {
    int64_t id = launcher_int("SLURM_LOCALID", localid, kMaxHosts + 1);
    if (id != local_index)
      invalid_argument("SLURM_LOCALID=", id, " but task ", rank, " is local task ", local_index,
                       " of its node in block order; tpurt needs --distribution=block");
  }
  task_id_ = static_cast<int>(rank);
  spec_[job_name_] = std::move(addresses);

  if (o.coordinator_address == nullptr) {
    // JAX's choice (jax/_src/clusters/slurm_cluster.py): the first host, port
    // job_id % 2**12 + (65535 - 2**12 + 1), i.e. 61440 + SLURM_JOB_ID % 4096, a high
    // port that differs between concurrent jobs. Task addresses stay port_base + i.
    std::string job_id = slurm_var("SLURM_JOB_ID", nullptr);
    int64_t id = launcher_int("SLURM_JOB_ID", job_id.c_str(), INT64_MAX);
    std::string host, port;
    split_address(spec_[job_name_][0], &host, &port);
    coordinator_address_ = str_cat(host, ":", 61440 + id % 4096);
  }
}

// ---- Open MPI --------------------------------------------------------------------------

namespace {

std::string ompi_var(const char* name) {
  if (const char* v = env(name)) return v;
  invalid_argument(name, " not found in environment. Not running inside an Open MPI launch "
                         "(mpirun)?");
}

// JAX's coordinator for ORTE launches (jax/_src/clusters/ompi_cluster.py): the
// launcher's first IP in OMPI_MCA_orte_hnp_uri ("1531576320.0;tcp://10.96.0.1,...:34911"
// or "...;tcp6://[fe80::1,...]:43370"), port 61440 + (jobid / 4096) % 4096. "" when
// the variable is unset or does not parse.
std::string orte_coordinator() {
  const char* uri_text = env("OMPI_MCA_orte_hnp_uri");
  if (uri_text == nullptr) return "";
  std::string uri = uri_text;
  int64_t job_id;
  if (!parse_int(uri.substr(0, uri.find('.')).c_str(), &job_id) || job_id < 0) return "";
  int64_t port = (job_id / 4096) % 4096 + 61440;
  std::string host;
  size_t at;
  if ((at = uri.find("tcp://")) != std::string::npos) {
    size_t start = at + 6;
    size_t end = uri.find_first_of(",:", start);
    if (end == std::string::npos || end == start) return "";
    host = uri.substr(start, end - start);
  } else if ((at = uri.find("tcp6://[")) != std::string::npos) {
    size_t start = at + 8;
    size_t end = uri.find_first_of(",]", start);
    if (end == std::string::npos || end == start) return "";
    host = str_cat("[", uri.substr(start, end - start), "]");
  } else {
    return "";
  }
  std::string address = str_cat(host, ":", port);
  std::string h, p;
  return split_address(address, &h, &p) && valid_port(p) ? address : "";
}

}  // namespace

void ClusterResolver::resolve_openmpi(const tpu_cluster_resolver_options& o) {
  source_ = TPU_RESOLVER_OPENMPI;
  tpu_name_ = "openmpi";
  rpc_layer_ = o.rpc_layer ? o.rpc_layer : "grpc";
  job_name_ = o.job_name ? o.job_name : "worker";
  int port_base = o.port_base ? o.port_base : kDefaultPortBase;

  std::string size_text = ompi_var("OMPI_COMM_WORLD_SIZE");
  std::string rank_text = ompi_var("OMPI_COMM_WORLD_RANK");
  std::string local_rank_text = ompi_var("OMPI_COMM_WORLD_LOCAL_RANK");
  int64_t size = launcher_int("OMPI_COMM_WORLD_SIZE", size_text.c_str(), kMaxHosts + 1);
  if (size == 0) invalid_argument("OMPI_COMM_WORLD_SIZE is 0");
  int64_t rank = launcher_int("OMPI_COMM_WORLD_RANK", rank_text.c_str(), size);
  launcher_int("OMPI_COMM_WORLD_LOCAL_RANK", local_rank_text.c_str(), size);
  int64_t local_size = -1;
  if (const char* v = env("OMPI_COMM_WORLD_LOCAL_SIZE"))
    local_size = launcher_int("OMPI_COMM_WORLD_LOCAL_SIZE", v, size + 1);

  // An Open MPI launch does not tell a rank where the others run: TPURT_TASK_ADDRESSES
  // lists them, or, when every rank is on this host, task i is 127.0.0.1:port_base+i.
  std::vector<std::string> addresses;
  if (const char* list = env("TPURT_TASK_ADDRESSES")) {
    addresses = split(list, ',');
    if (static_cast<int64_t>(addresses.size()) != size)
      invalid_argument("TPURT_TASK_ADDRESSES has ", addresses.size(),
                       " entries but OMPI_COMM_WORLD_SIZE is ", size);
    for (size_t i = 0; i < addresses.size(); ++i)
      check_address(addresses[i], str_cat("TPURT_TASK_ADDRESSES entry ", i));
    check_no_duplicates(addresses, "TPURT_TASK_ADDRESSES");
  } else if (local_size == size) {
    for (int64_t i = 0; i < size; ++i)
      addresses.push_back(port_base_address("127.0.0.1", port_base, i, "an Open MPI rank"));
  } else {
    invalid_argument("the Open MPI ranks run on more than one host (OMPI_COMM_WORLD_LOCAL_SIZE=",
                     local_size < 0 ? std::string("unset") : std::to_string(local_size),
                     ", OMPI_COMM_WORLD_SIZE=", size, ") and Open MPI does not tell a rank "
                     "where the others are: set TPURT_TASK_ADDRESSES to the ranks' host:port, "
                     "comma-separated in rank order");
  }
  task_id_ = static_cast<int>(rank);
  spec_[job_name_] = std::move(addresses);

  if (o.coordinator_address == nullptr) {
    if (const char* c = env("TPURT_COORDINATOR_ADDRESS")) {
      check_address(c, "TPURT_COORDINATOR_ADDRESS");
      coordinator_address_ = c;
    } else {
      coordinator_address_ = orte_coordinator();  // "" leaves task 0's address
    }
  }
}

// ---- Common to every source --------------------------------------------------------

void ClusterResolver::finish(const tpu_cluster_resolver_options& o) {
  if (o.coordinator_name != nullptr && o.coordinator_address == nullptr)
    invalid_argument("options->coordinator_name '", o.coordinator_name,
                     "' needs options->coordinator_address: tpurt starts no server to "
                     "stand in for it, as TensorFlow does");
  if (o.coordinator_address != nullptr)
    check_address(o.coordinator_address, "options->coordinator_address");
  // Local means no network: TensorFlow's 'local' has an empty ClusterSpec whatever
  // the coordinator options say.
  // Job names go into cluster_spec_json(), and so must be UTF-8 (jansson checks).
  for (const auto& job : spec_) {
    json_t* name = json_string(job.first.c_str());
    if (name == nullptr) invalid_argument("job name '", job.first, "' is not valid UTF-8");
    json_decref(name);
  }
  if (o.coordinator_name != nullptr) {
    json_t* name = json_string(o.coordinator_name);
    if (name == nullptr)
      invalid_argument("options->coordinator_name '", o.coordinator_name, "' is not valid UTF-8");
    json_decref(name);
  }
  if (local_) {
    spec_.clear();
    coordinator_address_.clear();
    return;
  }
  if (o.coordinator_address != nullptr) coordinator_address_ = o.coordinator_address;
  if (o.coordinator_name != nullptr) {
    if (spec_.count(o.coordinator_name))
      invalid_argument("options->coordinator_name '", o.coordinator_name,
                       "' is already a job of the cluster");
    spec_[o.coordinator_name] = {o.coordinator_address};
  }
  if (coordinator_address_.empty()) {
    // Task 0 of the leader job: the chief's in TF_CONFIG (else the workers', else the
    // first job's: every task must pick the same), otherwise this resolver's job.
    const std::vector<std::string>* leader = nullptr;
    if (source_ == TPU_RESOLVER_TF_CONFIG) {
      for (const char* job : {"chief", "worker"})
        if (!leader && spec_.count(job) && count_tasks(spec_.at(job)) > 0) leader = &spec_.at(job);
      for (const auto& job : spec_)
        if (!leader && count_tasks(job.second) > 0) leader = &job.second;
    } else {
      leader = &spec_.at(job_name_);
    }
    if (leader != nullptr)
      for (const std::string& a : *leader)
        if (!a.empty()) {
          coordinator_address_ = a;
          break;
        }
  }
}

tpu_resolver_source ClusterResolver::source() const { return source_; }
bool ClusterResolver::is_local() const { return local_; }
const std::string& ClusterResolver::tpu_name() const { return tpu_name_; }
const std::string& ClusterResolver::job_name() const { return job_name_; }
int ClusterResolver::task_id() const { return task_id_; }
const std::string& ClusterResolver::rpc_layer() const { return rpc_layer_; }
const std::string& ClusterResolver::environment() const { return environment_; }
const std::map<std::string, std::vector<std::string>>& ClusterResolver::cluster_spec() const {
  return spec_;
}

const std::vector<std::string>& ClusterResolver::task_addresses() const {
  static const std::vector<std::string> kNone;
  auto job = spec_.find(job_name_);
  return job == spec_.end() ? kNone : job->second;
}

std::string ClusterResolver::coordinator_address() const { return coordinator_address_; }

const std::string& ClusterResolver::address_of(const std::string& job, int task) const {
  auto it = spec_.find(job);
  if (it == spec_.end()) {
    std::string jobs;
    for (const auto& j : spec_) jobs += (jobs.empty() ? "'" : ", '") + j.first + "'";
    fail(TPU_NOT_FOUND, "job '", job, "' is not in the cluster spec (",
         jobs.empty() ? std::string("it has no jobs") : "jobs: " + jobs, ")");
  }
  const std::vector<std::string>& tasks = it->second;
  if (task < 0 || static_cast<size_t>(task) >= tasks.size() || tasks[task].empty())
    fail(TPU_NOT_FOUND, "job '", job, "' has no task ", task, " (it has ", count_tasks(tasks),
         " task(s))");
  return tasks[task];
}

std::string ClusterResolver::master(const char* task_type, int task_id,
                                    const char* rpc_layer) const {
  if (task_id < -1) invalid_argument("task_id is ", task_id, "; expected >= 0, or -1 for the resolver's own");
  // TensorFlow looks at session_master first, even without a cluster.
  if (source_ == TPU_RESOLVER_TF_CONFIG && has_session_master_) return session_master_;
  if (local_) return "";
  std::string type = task_type ? task_type : job_name_;
  int id = task_id >= 0 ? task_id : task_id_;
  switch (source_) {
    case TPU_RESOLVER_TPU:  // rpc_layer is ignored: always grpc
      return kGrpcPrefix + address_of(type, id);
    case TPU_RESOLVER_TF_CONFIG:
      if (spec_.size() == 1 && count_tasks(spec_.begin()->second) == 1) return "";
      break;
    default:
      break;
  }
  return format_master_url(address_of(type, id), rpc_layer ? rpc_layer : rpc_layer_);
}

std::string ClusterResolver::cluster_spec_json() const {
  JsonRef root(json_object());
  if (root.p == nullptr) throw std::bad_alloc();
  for (const auto& job : spec_) {
    json_t* tasks;
    if (sparse_jobs_.count(job.first)) {
      tasks = json_object();
      for (size_t i = 0; tasks && i < job.second.size(); ++i)
        if (!job.second[i].empty())
          json_object_set_new(tasks, std::to_string(i).c_str(),
                              json_stringn(job.second[i].data(), job.second[i].size()));
    } else {
      tasks = json_array();
      for (size_t i = 0; tasks && i < job.second.size(); ++i)
        json_array_append_new(tasks, json_stringn(job.second[i].data(), job.second[i].size()));
    }
    if (tasks == nullptr || json_object_set_new(root.p, job.first.c_str(), tasks) != 0)
      throw std::bad_alloc();
  }
  char* text = json_dumps(root.p, JSON_COMPACT | JSON_SORT_KEYS);
  if (text == nullptr) throw std::bad_alloc();
  std::string out(text);
  std::free(text);
  return out;
}

int ClusterResolver::num_accelerators() const {
  // The cores tpu_system_init would give this task: TPURT_NUM_CORES, else its default.
  return static_cast<int>(env_value(EnvVar::kNumCores));
}

void ClusterResolver::enter() {
  std::lock_guard<std::mutex> lock(mu_);
  ++entered_;
}

void ClusterResolver::exit() {
  std::lock_guard<std::mutex> lock(mu_);
  if (entered_ == 0)
    fail(TPU_FAILED_PRECONDITION, "cluster resolver exit without a matching enter");
  --entered_;
}

}  // namespace tpurt
