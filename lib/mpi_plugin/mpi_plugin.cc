// libtpurt_mpi.so: tpurt's data plane over MPI (the table of net/mpi_plugin_api.h):
// joining and leaving MPI, and the entry point. The waits are in wait.cc, the ends of
// steps in step.cc, the all-reduces and reduce-scatters in all_reduce.cc, the notes
// naming a task in another collective in notes.cc, the rounds of the tasks' vote on a
// collective (before its data: one verdict on every task) in vote.cc.
//
// Point-to-point transfers become MPI_Isend/MPI_Irecv, all-reduces MPI_Iallreduce and
// reduce-scatters MPI_Ireduce_scatter_block, on a duplicate of MPI_COMM_WORLD (or a
// communicator per group of tasks, made once), polled with MPI_Testsome until done so that every wait honours
// its deadline and the runtime's check(). Each task ends a step by sending every
// peer its outcome; a receive of each peer's is posted when the step begins, so a
// wait also notices a peer that ended the step without it.
//
// What MPI cannot undo: a send or a collective in flight cannot be cancelled (only a
// receive can). A wait that fails with one still in flight leaves the handle doomed
// (tpurt_mpi_plugin::doomed); the caller must end the process with abort().
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "mpi_plugin/handle.h"

using namespace tpurt::mpi;

namespace {

const char* library_version() {
  static char text[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  if (text[0] == '\0') {
    int len = 0;
    MPI_Get_library_version(text, &len);
    text[strcspn(text, "\n,")] = '\0';
  }
  return text;
}

// Handles not yet closed: one with an operation in flight at exit aborts the job
// rather than finalise MPI under it.
std::vector<tpurt_mpi_handle*> g_open;

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (tpurt_mpi_handle* h : g_open)
    if (!h->stuck.empty()) {
      fprintf(stderr, "tpurt: task %d: MPI_Abort at exit: an MPI collective in flight cannot be cancelled\n",
              h->rank);
      fflush(stderr);
      MPI_Abort(h->comm, 1);
    }
  MPI_Finalize();
}

tpu_status open_handle(int num_tasks, int task_id, tpurt_mpi_handle** out, char* why, size_t why_size) {
  *out = nullptr;
  int initialized = 0, finalized = 0;
  // On unless turned off: tpurt promises that every collective checks its peers agree.
  const char* check = getenv("TPURT_MPI_CHECK_COLLECTIVES");
  if (check != nullptr && *check != '\0' && strcmp(check, "0") != 0 && strcmp(check, "1") != 0) {
    say(why, why_size, "TPURT_MPI_CHECK_COLLECTIVES is '%s'; it must be 1 (the default) or 0", check);
    return TPU_INVALID_ARGUMENT;
  }
  const bool check_collectives = check == nullptr || strcmp(check, "0") != 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    say(why, why_size, "MPI was already finalized in this process");
    return TPU_FAILED_PRECONDITION;
  }
  auto h = std::make_unique<tpurt_mpi_handle>();
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    // Open MPI's default non-blocking all-reduce is far slower than its blocking one
    // at large sizes; Rabenseifner's is as fast. The user's setting wins.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", 0);
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) {
      say(why, why_size, "MPI_Init_thread failed: %s", mpi_error(rc).c_str());
      return TPU_UNAVAILABLE;
    }
    // Finalised at exit, not when a handle closes: a program may shut its TPU system
    // down and start another (MPI cannot be initialised twice).
    atexit(finalize_at_exit);
  } else {
    MPI_Query_thread(&provided);
  }
  auto refuse = [&](const std::string& message) {
    say(why, why_size, "%s", message.c_str());
    return TPU_FAILED_PRECONDITION;
  };
  // Not always the same thread drives the transport: FUNNELED is not enough.
  if (provided < MPI_THREAD_SERIALIZED)
    return refuse("MPI provides thread level " + std::to_string(provided) +
                  "; the transport needs MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE (the program "
                  "initialised MPI with less)");
  MPI_Comm_size(MPI_COMM_WORLD, &h->size);
  MPI_Comm_rank(MPI_COMM_WORLD, &h->rank);
  if (h->size != num_tasks || h->rank != task_id)
    return refuse("MPI's world is rank " + std::to_string(h->rank) + " of " + std::to_string(h->size) +
                  " but this is task " + std::to_string(task_id) + " of " + std::to_string(num_tasks) +
                  " (the tasks must be the ranks of MPI_COMM_WORLD, in order)");
  void* ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  if (flag && ub) h->tag_ub = *static_cast<int*>(ub);
  h->tag_slots = (static_cast<uint64_t>(h->tag_ub) - kTagCycle) / kTagCycle;
  if (h->tag_slots < kReservedTags + 1)
    return refuse("MPI_TAG_UB is " + std::to_string(h->tag_ub) + "; the transport needs at least " +
                  std::to_string((kReservedTags + 2) * kTagCycle) + " tags");
  MPI_Comm_dup(MPI_COMM_WORLD, &h->comm);
  MPI_Comm_set_errhandler(h->comm, MPI_ERRORS_RETURN);
  h->eager_notes = check_collectives;
  MPI_Comm_dup(MPI_COMM_WORLD, &h->ctl);
  MPI_Comm_set_errhandler(h->ctl, MPI_ERRORS_RETURN);
  if (tpu_status s = open_notes(h.get(), why, why_size); s != TPU_OK) {
    close_notes(h.get());
    MPI_Comm_free(&h->ctl);
    MPI_Comm_free(&h->comm);
    return s;
  }
  h->ops.reset(new ReduceOps());
  h->end_in.assign(h->size, std::vector<char>(kMaxEndBytes));
  h->end_req.assign(h->size, MPI_REQUEST_NULL);
  h->ended.assign(h->size, 0);
  h->end_len.assign(h->size, 0);
  *out = h.release();
  g_open.push_back(*out);
  return TPU_OK;
}

void close_handle(tpurt_mpi_handle* h) {
  if (h == nullptr) return;
  g_open.erase(std::remove(g_open.begin(), g_open.end(), h), g_open.end());
  if (const char* stats = getenv("TPURT_MPI_STATS"); stats && strcmp(stats, "1") == 0) {
    fprintf(stderr,
            "tpurt_mpi: task %d: %llu exchanges, %llu MPI_Iallreduce, %llu MPI_Ireduce_scatter_block, %llu direct "
            "all-reduces, %llu vote rounds\n",
            h->rank, static_cast<unsigned long long>(h->num_exchanges),
            static_cast<unsigned long long>(h->num_iallreduce), static_cast<unsigned long long>(h->num_ireduce_scatter),
            static_cast<unsigned long long>(h->num_direct), static_cast<unsigned long long>(h->num_votes));
    fflush(stderr);
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    for (MPI_Request& r : h->end_req)
      if (r != MPI_REQUEST_NULL) {
        MPI_Cancel(&r);
        MPI_Request_free(&r);
      }
    for (auto& a : h->answers)
      if (a.first != MPI_REQUEST_NULL) MPI_Request_free(&a.first);
    for (auto& c : h->comms) MPI_Comm_free(&c.second);
    close_notes(h);
    if (h->ctl != MPI_COMM_NULL) MPI_Comm_free(&h->ctl);
    h->ops.reset();
    if (h->comm != MPI_COMM_NULL) MPI_Comm_free(&h->comm);
  }
  delete h;
}

int doomed(tpurt_mpi_handle* h) {
  if (h->stuck.empty()) return 0;
  for (char kind : h->stuck_kind)
    if (kind != kSend) return 2;
  return 1;
}

int can_all_reduce(tpurt_mpi_handle* h, tpu_dtype dtype, tpu_reduce_op op) {
  MPI_Datatype type;
  MPI_Op mpi_op;
  return h->ops->map(dtype, op, &type, &mpi_op);
}

int peer_end(tpurt_mpi_handle* h, int32_t peer, tpurt_mpi_outcome* out) {
  if (peer < 0 || peer >= h->size || peer == h->rank) return 0;
  poll_ends(h);
  int32_t code = 0, origin = -1;
  uint64_t reached = 0;
  std::string message;
  if (!h->ended[peer]) return 0;
  if (!read_end(h, peer, &code, &origin, &reached, &message)) {
    code = TPU_UNAVAILABLE;
    message = "task " + std::to_string(peer) + " sent a malformed end of the step";
  }
  out->code = code;
  out->origin_replica = origin;
  say(out->message, out->message_size, "%s", message.c_str());
  return 1;
}

void abort_all(tpurt_mpi_handle* h, int code) {
  fflush(stdout);
  fflush(stderr);
  MPI_Abort(h && h->comm != MPI_COMM_NULL ? h->comm : MPI_COMM_WORLD, code);
  _exit(code);  // MPI_Abort does not return; should it, this process still ends
}

// No exception crosses into libtpurt.
template <typename Fn>
tpu_status guarded(char* err, size_t err_size, Fn&& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    say(err, err_size, "out of memory in the MPI plugin");
    return TPU_RESOURCE_EXHAUSTED;
  } catch (...) {
    say(err, err_size, "unexpected exception in the MPI plugin");
    return TPU_INTERNAL;
  }
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const tpurt_mpi_plugin* tpurt_mpi_plugin_v1(void) {
  static const tpurt_mpi_plugin table = {
      sizeof(tpurt_mpi_plugin),
      TPURT_MPI_PLUGIN_VERSION,
      library_version,
      [](int num_tasks, int task_id, tpurt_mpi_handle** out, char* why, size_t why_size) {
        return guarded(why, why_size, [&] { return open_handle(num_tasks, task_id, out, why, why_size); });
      },
      close_handle,
      [](tpurt_mpi_handle* h, uint64_t step, char* err, size_t err_size) {
        return guarded(err, err_size, [&] { return begin_step(h, step, err, err_size); });
      },
      [](tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, const tpurt_mpi_transfer* sends, size_t num_sends,
         const tpurt_mpi_transfer* recvs, size_t num_recvs, const tpurt_mpi_wait* wait, char* err,
         size_t err_size) {
        return guarded(err, err_size, [&] {
          return do_exchange(h, seq, digest, sends, num_sends, recvs, num_recvs, wait, err, err_size);
        });
      },
      can_all_reduce,
      [](tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, const int32_t* tasks, size_t num_tasks,
         tpu_dtype dtype, tpu_reduce_op op, const void* in, void* out, uint64_t count, int32_t divisor,
         const tpurt_mpi_wait* wait, char* err, size_t err_size) {
        return guarded(err, err_size, [&] {
          return all_reduce(h, seq, digest, tasks, num_tasks, dtype, op, in, out, count, divisor, wait, err,
                            err_size);
        });
      },
      [](tpurt_mpi_handle* h, const tpurt_mpi_outcome* mine, int64_t timeout_ms, const tpurt_mpi_wait* wait,
         tpurt_mpi_outcome* remote, int* failed, char* err, size_t err_size) {
        return guarded(err, err_size, [&] {
          return end_step(h, mine, timeout_ms, wait, remote, failed, err, err_size);
        });
      },
      doomed,
      abort_all,
      [](tpurt_mpi_handle* h, uint64_t seq, uint64_t digest, const int32_t* tasks, size_t num_tasks,
         tpu_dtype dtype, tpu_reduce_op op, const void* in, void* out, uint64_t block, int32_t divisor,
         const tpurt_mpi_wait* wait, char* err, size_t err_size) {
        return guarded(err, err_size, [&] {
          return reduce_scatter(h, seq, digest, tasks, num_tasks, dtype, op, in, out, block, divisor, wait, err,
                                err_size);
        });
      },
      [](tpurt_mpi_handle* h, uint64_t seq, const tpurt_mpi_transfer* sends, size_t num_sends,
         const tpurt_mpi_transfer* recvs, size_t num_recvs, const tpurt_mpi_wait* wait, int32_t* skipped, char* err,
         size_t err_size) {
        return guarded(err, err_size, [&] {
          return vote(h, seq, sends, num_sends, recvs, num_recvs, wait, skipped, err, err_size);
        });
      },
      peer_end,
  };
  return &table;
}
