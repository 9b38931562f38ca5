// All-reduces on MPI_Iallreduce and reduce-scatters on MPI_Ireduce_scatter_block, on a
// communicator per group of tasks made once.
#include "mpi_plugin/handle.h"

#include <algorithm>
#include <cstring>

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
  tpu_status s = exchange_tagged(h, seq, digest, digest ^ 0x636f6d6dull, meet.data(), meet.size(), meet.data(),
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

// Checks the group and maps dtype and op; w.watch gets the group's other tasks.
tpu_status check_group(tpurt_mpi_handle* h, uint64_t seq, const int32_t* tasks, size_t num_tasks, tpu_dtype dtype,
                       tpu_reduce_op op, MPI_Datatype* type, MPI_Op* mpi_op, Waiting* w, char* err,
                       size_t err_size) {
  if (!h->ops->map(dtype, op, type, mpi_op)) {
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
  h->reached = std::max(h->reached, seq);
  for (size_t i = 0; i < num_tasks; ++i)
    if (tasks[i] != h->rank) w->watch.push_back(tasks[i]);
  return TPU_OK;
}

// check_group, then tells the group's other tasks (w.watch) that this task has
// entered collective seq, and finds the group's communicator. A task of the group
// that has already ended the step will never join: its end fails the call before
// anything MPI cannot cancel is started (a task late to a collective its peers gave
// up on gets their verdict, not an MPI_Abort).
tpu_status enter(tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, const int32_t* tasks, size_t num_tasks,
                 tpu_dtype dtype, tpu_reduce_op op, const tpurt_mpi_wait* wait, MPI_Datatype* type, MPI_Op* mpi_op,
                 MPI_Comm* comm, Waiting* w, char* err, size_t err_size) {
  tpu_status s = check_group(h, seq, tasks, num_tasks, dtype, op, type, mpi_op, w, err, err_size);
  if (s != TPU_OK) return s;
  s = ended_before(h, w->watch, seq, wait, err, err_size);
  if (s != TPU_OK) return s;
  // Before this task's part: a peer that completes the collective finds the note due.
  if (h->eager_notes) note_entry(h, seq, digest, w->watch.data(), w->watch.size());
  return comm_for(h, seq, digest, tasks, num_tasks, wait, comm, err, err_size);
}

// A small all-reduce point to point: this task's header and input to each other task
// of the group, theirs received into a slot each, then out = the fold of every task's
// input in task order (the same on every task, bit for bit). Tags name the collective
// by its number alone, so that a task in the same collective with another descriptor
// is matched and named from its header; one in another collective sends under
// another tag, and the stalled wait finds it by the notes (notes.cc).
tpu_status direct_all_reduce(tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, const int32_t* tasks,
                             size_t num_tasks, tpu_dtype dtype, tpu_reduce_op op, MPI_Datatype type,
                             MPI_Op mpi_op, size_t esize, const void* in, void* out, uint64_t count,
                             const tpurt_mpi_wait* wait, Waiting& w, char* err, size_t err_size) {
  constexpr size_t kHead = sizeof(DirectHeader);
  constexpr size_t kSlot = kHead + kDirectBytes;
  const size_t bytes = count * esize;
  DirectHeader mine;
  mine.step = h->step;
  mine.seq = seq;
  mine.digest = digest;
  mine.what = static_cast<uint32_t>(dtype) << 8 | static_cast<uint32_t>(op);
  mine.count = static_cast<uint32_t>(count);
  h->direct_out.resize(kSlot);
  h->direct_in.resize(num_tasks * kSlot);
  std::memcpy(h->direct_out.data(), &mine, kHead);
  if (bytes) std::memcpy(h->direct_out.data() + kHead, in, bytes);
  const int tag = data_tag(h, seq, 0x646972656374ull);  // "direct"
  const size_t n = w.watch.size();
  w.reqs.assign(2 * n, MPI_REQUEST_NULL);
  w.peer.resize(2 * n);
  w.kind.resize(2 * n);
  size_t k = 0;
  for (size_t i = 0; i < num_tasks; ++i) {
    if (tasks[i] == h->rank) continue;
    char* slot = &h->direct_in[i * kSlot];
    std::memset(slot, 0, kHead);  // a short message leaves no stale header
    w.peer[k] = tasks[i];
    w.kind[k] = kReceive;
    MPI_Irecv(slot, static_cast<int>(kSlot), MPI_BYTE, tasks[i], tag, h->comm, &w.reqs[k++]);
  }
  for (int t : w.watch) {
    w.peer[k] = t;
    w.kind[k] = kSend;
    MPI_Isend(h->direct_out.data(), static_cast<int>(kHead + bytes), MPI_BYTE, t, tag, h->comm, &w.reqs[k++]);
  }
  ++h->num_direct;
  tpu_status s = wait_all(h, w, seq, digest, wait, "the all-reduce", err, err_size);
  if (s != TPU_OK) {
    // MPI may still write or read them: they live as long as the handle.
    if (!h->stuck.empty()) {
      h->sinks.push_back(std::move(h->direct_in));
      h->sinks.push_back(std::move(h->direct_out));
      h->direct_in.clear();
      h->direct_out.clear();
    }
    return s;
  }
  for (size_t i = 0; i < num_tasks; ++i) {
    if (tasks[i] == h->rank) continue;
    DirectHeader theirs;
    std::memcpy(&theirs, &h->direct_in[i * kSlot], kHead);
    if (theirs.step == mine.step && theirs.seq == mine.seq && theirs.digest == mine.digest &&
        theirs.what == mine.what && theirs.count == mine.count)
      continue;
    // The peer learns this task's collective from its own copy of this header.
    const Note note{theirs.step, theirs.seq, theirs.digest};
    say(err, err_size, "%s", mismatch_message(wait, tasks[i], note, seq, digest).c_str());
    return TPU_INVALID_ARGUMENT;
  }
  // out = in[t0], then in[t] op out for each later task t (MPI_Reduce_local's order).
  for (size_t i = 0; i < num_tasks && bytes; ++i) {
    const void* from = tasks[i] == h->rank ? in : &h->direct_in[i * kSlot + kHead];
    if (i == 0) std::memcpy(out, from, bytes);
    else MPI_Reduce_local(from, out, static_cast<int>(count), type, mpi_op);
  }
  return TPU_OK;
}

// Runs one engine collective that start() posts into w.reqs[0].
template <typename Start>
tpu_status run_one(tpurt_mpi_handle* h, Waiting& w, uint64_t seq, uint64_t digest, const tpurt_mpi_wait* wait,
                   const char* what, Start&& start, char* err, size_t err_size) {
  w.reqs.assign(1, MPI_REQUEST_NULL);
  w.peer.assign(1, -1);
  w.kind.assign(1, kCollective);
  int rc = start(&w.reqs[0]);
  if (rc != MPI_SUCCESS) {
    say(err, err_size, "%s of collective #%llu failed: %s", what, static_cast<unsigned long long>(seq),
        mpi_error(rc).c_str());
    return TPU_UNAVAILABLE;
  }
  return wait_all(h, w, seq, digest, wait, what, err, err_size);
}

}  // namespace

tpu_status all_reduce(tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, const int32_t* tasks,
                      size_t num_tasks, tpu_dtype dtype, tpu_reduce_op op, const void* in, void* out,
                      uint64_t count, int32_t divisor, const tpurt_mpi_wait* wait, char* err,
                      size_t err_size) {
  MPI_Datatype type;
  MPI_Op mpi_op;
  MPI_Comm comm = MPI_COMM_NULL;
  Waiting& direct = h->direct_wait;
  direct.watch.clear();
  tpu_status s = check_group(h, seq, tasks, num_tasks, dtype, op, &type, &mpi_op, &direct, err, err_size);
  if (s != TPU_OK) return s;
  int esize = 0;
  MPI_Type_size(type, &esize);
  if (count * static_cast<uint64_t>(esize) <= kDirectBytes && num_tasks <= kDirectTasks) {
    s = direct_all_reduce(h, seq, digest, tasks, num_tasks, dtype, op, type, mpi_op, static_cast<size_t>(esize), in,
                          out, count, wait, direct, err, err_size);
    if (s == TPU_OK && op == TPU_REDUCE_MEAN) tpurt::mpi::divide(dtype, out, count, divisor);
    return s;
  }
  Waiting w;
  s = enter(h, seq, digest, tasks, num_tasks, dtype, op, wait, &type, &mpi_op, &comm, &w, err, err_size);
  if (s != TPU_OK) return s;
  for (uint64_t off = 0; off < count || (count == 0 && off == 0);) {
    const int len = static_cast<int>(std::min<uint64_t>(kMaxChunk, count - off));
    ++h->num_iallreduce;
    s = run_one(h, w, seq, digest, wait, "MPI_Iallreduce", [&](MPI_Request* r) {
      return MPI_Iallreduce(static_cast<const char*>(in) + off * esize, static_cast<char*>(out) + off * esize, len,
                            type, mpi_op, comm, r);
    }, err, err_size);
    if (s != TPU_OK) return s;
    off += static_cast<uint64_t>(len);
    if (count == 0) break;
  }
  s = h->eager_notes ? confirm(h, seq, digest, w.watch, wait, err, err_size) : TPU_OK;
  if (s != TPU_OK) return s;
  if (op == TPU_REDUCE_MEAN) tpurt::mpi::divide(dtype, out, count, divisor);
  return TPU_OK;
}

tpu_status reduce_scatter(tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, const int32_t* tasks,
                          size_t num_tasks, tpu_dtype dtype, tpu_reduce_op op, const void* in, void* out,
                          uint64_t block, int32_t divisor, const tpurt_mpi_wait* wait, char* err,
                          size_t err_size) {
  MPI_Datatype type;
  MPI_Op mpi_op;
  MPI_Comm comm = MPI_COMM_NULL;
  Waiting w;
  tpu_status s = enter(h, seq, digest, tasks, num_tasks, dtype, op, wait, &type, &mpi_op, &comm, &w, err, err_size);
  if (s != TPU_OK) return s;
  int esize = 0;
  MPI_Type_size(type, &esize);
  const size_t e = static_cast<size_t>(esize);
  // MPI's counts are int: a larger block goes in pieces, each piece of every block
  // packed back to back first (the staging outlives a failed wait: MPI may still
  // read it until the job aborts).
  const uint64_t piece = block <= kMaxChunk ? block : kMaxChunk / num_tasks;
  std::vector<char> staging;
  for (uint64_t off = 0; off < block || (block == 0 && off == 0);) {
    const int len = static_cast<int>(std::min<uint64_t>(piece, block - off));
    const char* from = static_cast<const char*>(in);
    if (piece != block) {
      staging.resize(num_tasks * static_cast<size_t>(len) * e);
      for (size_t i = 0; i < num_tasks; ++i)
        std::memcpy(&staging[i * len * e], from + (i * block + off) * e, static_cast<size_t>(len) * e);
      from = staging.data();
    }
    ++h->num_ireduce_scatter;
    s = run_one(h, w, seq, digest, wait, "MPI_Ireduce_scatter_block", [&](MPI_Request* r) {
      return MPI_Ireduce_scatter_block(from, static_cast<char*>(out) + off * e, len, type, mpi_op, comm, r);
    }, err, err_size);
    if (s != TPU_OK) {
      if (!staging.empty()) h->sinks.push_back(std::move(staging));
      return s;
    }
    off += static_cast<uint64_t>(len);
    if (block == 0) break;
  }
  s = h->eager_notes ? confirm(h, seq, digest, w.watch, wait, err, err_size) : TPU_OK;
  if (s != TPU_OK) return s;
  if (op == TPU_REDUCE_MEAN) tpurt::mpi::divide(dtype, out, block, divisor);
  return TPU_OK;
}

}  // namespace mpi
}  // namespace tpurt
