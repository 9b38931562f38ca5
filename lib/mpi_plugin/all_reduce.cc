// All-reduces on MPI_Iallreduce, on a communicator per group of tasks made once.
#include "mpi_plugin/handle.h"

#include <algorithm>

namespace tpurt {
namespace mpi {

namespace {

// The group's communicator: MPI_COMM_WORLD's duplicate for every task, else one made
// once with MPI_Comm_create_group, which only the group's tasks call. That call
// blocks until they all do: a zero-byte exchange with each first, bounded by the
// deadline, makes sure they are there.
tpu_status comm_for(tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, const int32_t* tasks, size_t num,
                    const tpurt_mpi_wait* wait, MPI_Comm* comm, char* err, size_t err_size) {
  if (static_cast<int>(num) == h->size) {
    *comm = h->comm;
    return TPU_OK;
  }
  std::vector<int32_t> key(tasks, tasks + num);
  auto it = h->comms.find(key);
  if (it != h->comms.end()) {
    *comm = it->second;
    return TPU_OK;
  }
  std::vector<tpurt_mpi_transfer> meet;
  for (int32_t t : key)
    if (t != h->rank) meet.push_back({t, 0, nullptr, 0});
  tpu_status s = do_exchange(h, seq, digest ^ 0x636f6d6dull, meet.data(), meet.size(), meet.data(),
                             meet.size(), wait, err, err_size);
  if (s != TPU_OK) return s;
  MPI_Group world, group;
  MPI_Comm_group(h->comm, &world);
  std::vector<int> ranks(key.begin(), key.end());
  MPI_Group_incl(world, static_cast<int>(ranks.size()), ranks.data(), &group);
  MPI_Comm made = MPI_COMM_NULL;
  int rc = MPI_Comm_create_group(h->comm, group, 1, &made);
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  if (rc != MPI_SUCCESS || made == MPI_COMM_NULL) {
    say(err, err_size, "MPI_Comm_create_group for %zu tasks failed: %s", num, mpi_error(rc).c_str());
    return TPU_INTERNAL;
  }
  MPI_Comm_set_errhandler(made, MPI_ERRORS_RETURN);
  h->comms.emplace(std::move(key), made);
  *comm = made;
  return TPU_OK;
}

}  // namespace

tpu_status all_reduce(tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, const int32_t* tasks,
                      size_t num_tasks, tpu_dtype dtype, tpu_reduce_op op, const void* in, void* out,
                      uint64_t count, int32_t divisor, const tpurt_mpi_wait* wait, char* err,
                      size_t err_size) {
  MPI_Datatype type;
  MPI_Op mpi_op;
  if (!h->ops->map(dtype, op, &type, &mpi_op)) {
    say(err, err_size, "MPI cannot reduce dtype %d with op %d as tpurt does", static_cast<int>(dtype),
        static_cast<int>(op));
    return TPU_INTERNAL;
  }
  bool here = false;
  for (size_t i = 0; i < num_tasks; ++i) {
    if (tasks[i] < 0 || tasks[i] >= h->size || (i > 0 && tasks[i] <= tasks[i - 1])) {
      say(err, err_size, "the group's tasks are not distinct tasks of 0..%d in increasing order (entry %zu is %d)",
          h->size - 1, i, tasks[i]);
      return TPU_INTERNAL;
    }
    here |= tasks[i] == h->rank;
  }
  if (!here) {
    say(err, err_size, "task %d is not in the group it reduces over", h->rank);
    return TPU_INTERNAL;
  }
  MPI_Comm comm = MPI_COMM_NULL;
  h->reached = std::max(h->reached, seq);
  tpu_status s = comm_for(h, seq, digest, tasks, num_tasks, wait, &comm, err, err_size);
  if (s != TPU_OK) return s;
  int esize = 0;
  MPI_Type_size(type, &esize);
  Waiting w;
  for (size_t i = 0; i < num_tasks; ++i)
    if (tasks[i] != h->rank) w.watch.push_back(tasks[i]);
  for (uint64_t off = 0; off < count || (count == 0 && off == 0);) {
    const int len = static_cast<int>(std::min<uint64_t>(kMaxChunk, count - off));
    w.reqs.assign(1, MPI_REQUEST_NULL);
    w.peer.assign(1, -1);
    w.kind.assign(1, kCollective);
    int rc = MPI_Iallreduce(static_cast<const char*>(in) + off * esize, static_cast<char*>(out) + off * esize,
                            len, type, mpi_op, comm, &w.reqs[0]);
    if (rc != MPI_SUCCESS) {
      say(err, err_size, "MPI_Iallreduce of collective #%llu failed: %s", static_cast<unsigned long long>(seq),
          mpi_error(rc).c_str());
      return TPU_UNAVAILABLE;
    }
    s = wait_all(h, w, seq, wait, "MPI_Iallreduce", err, err_size);
    if (s != TPU_OK) return s;
    off += static_cast<uint64_t>(len);
    if (count == 0) break;
  }
  if (op == TPU_REDUCE_MEAN) tpurt::mpi::divide(dtype, out, count, divisor);
  return TPU_OK;
}

}  // namespace mpi
}  // namespace tpurt
