#include "cluster/resolver.h"

#include <cstdint>

#include "cluster/hostlist.h"
#include "cluster/resolver_parse.h"
#include "core/status.h"

namespace tpurt {

using namespace resolver;

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

}  // namespace tpurt
