// The MPI transport's loader and adapter: libtpurt_mpi.so is opened with dlopen (so
// that libtpurt never links MPI) and driven through its C table
// (net/mpi_plugin_api.h); plugin statuses become tpurt::Error with its message.
#include "net/mpi_transport.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <type_traits>

#include "core/deadline.h"
#include "core/status.h"
#include "net/collective_offload.h"
#include "net/mpi_plugin_api.h"

namespace tpurt {
namespace net {
namespace {

// The groups' task lists go to the plugin as they are.
static_assert(std::is_same<int, int32_t>::value, "tasks are passed to the plugin as int32_t");

constexpr size_t kErrorBytes = 4096;
constexpr size_t kEndMessageBytes = 64 * 1024;

// Appended to the error of a wait that leaves an MPI operation in flight.
const char kAbortNote[] =
    " [MPI_Abort follows: an MPI collective in flight cannot be cancelled, so this task "
    "aborts the MPI job at its next step or when the TPU system is shut down]";

int64_t to_monotonic_ns(Transport::Clock::time_point t) {
  // steady_clock is CLOCK_MONOTONIC on Linux.
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// The plugin, loaded once per process and never unloaded (MPI cannot start twice).
struct Loaded {
  const tpurt_mpi_plugin* api = nullptr;
  std::string path;
  std::string error;  // why it could not be loaded
};

std::string directory_of_libtpurt() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&open_mpi_transport), &info) == 0 || info.dli_fname == nullptr) return "";
  std::string file = info.dli_fname;
  const size_t slash = file.rfind('/');
  return slash == std::string::npos ? "" : file.substr(0, slash + 1);
}

Loaded load_plugin() {
  Loaded l;
  std::string path;
  if (const char* p = std::getenv("TPURT_MPI_PLUGIN"); p && *p) {
    path = p;
  } else {
    const std::string beside = directory_of_libtpurt() + "libtpurt_mpi.so";
    path = access(beside.c_str(), R_OK) == 0 ? beside : "libtpurt_mpi.so";
  }
  l.path = path;
  // RTLD_GLOBAL: Open MPI's components, opened by libmpi itself, need its symbols.
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    l.error = str_cat("the MPI plugin ", path, " could not be loaded (", e ? e : "unknown error",
                      "); build it with `make mpi` or set TPURT_MPI_PLUGIN");
    return l;
  }
  auto entry = reinterpret_cast<tpurt_mpi_plugin_entry>(dlsym(lib, TPURT_MPI_PLUGIN_ENTRY));
  if (entry == nullptr) {
    l.error = str_cat(path, " has no ", TPURT_MPI_PLUGIN_ENTRY, ": not a tpurt MPI plugin of this version");
    return l;
  }
  const tpurt_mpi_plugin* api = entry();
  // A table of this version has at least the first fields; appended ones are used
  // only where struct_size covers them (an older plugin of the same version lacks them).
  if (api == nullptr || api->version != TPURT_MPI_PLUGIN_VERSION || api->struct_size < TPURT_MPI_PLUGIN_BASE_SIZE) {
    l.error = str_cat(path, " is MPI plugin version ", api ? api->version : 0, " (table of ",
                      api ? api->struct_size : 0, " bytes); this libtpurt needs version ",
                      TPURT_MPI_PLUGIN_VERSION, " (at least ", TPURT_MPI_PLUGIN_BASE_SIZE, " bytes)");
    return l;
  }
  l.api = api;
  return l;
}

const Loaded& plugin() {
  static const Loaded loaded = load_plugin();
  return loaded;
}

class MpiTransport : public Transport, public CollectiveOffload {
 public:
  MpiTransport(const tpurt_mpi_plugin* api, tpurt_mpi_handle* h, int num_tasks, int task_id)
      : api_(api), h_(h), num_tasks_(num_tasks), task_id_(task_id) {}

  ~MpiTransport() override {
    if (api_->doomed(h_)) abort_now("the TPU system is shut down");
    api_->close(h_);
  }

  int num_tasks() const override { return num_tasks_; }
  int task_id() const override { return task_id_; }

  void begin_step(uint64_t step) override {
    if (api_->doomed(h_)) abort_now(str_cat("step ", step, " would reuse its buffers"));
    if (has_failed_.load(std::memory_order_acquire)) throw_failed();
    char err[kErrorBytes];  // not zero-filled: a call's fixed cost at small sizes
    err[0] = '\0';
    tpu_status s = api_->begin_step(h_, step, err, sizeof err);
    if (s != TPU_OK) throw Error(s, err);
  }

  void exchange(uint64_t seq, uint64_t digest, const Send* sends, size_t num_sends, const Recv* recvs,
                size_t num_recvs, Clock::time_point deadline, const std::function<void()>& check,
                const std::function<std::string(int)>& name) override {
    if (has_failed_.load(std::memory_order_acquire)) throw_failed();
    const bool voting = digest == kVoteDigest && votes();
    if (voting) {
      vote_skipped_.assign(num_tasks_, 0);
      vote_seq_ = seq;
    }
    // Send and Recv have the plugin's layout but for the constness of data.
    send_buf_.resize(num_sends);
    recv_buf_.resize(num_recvs);
    for (size_t i = 0; i < num_sends; ++i)
      send_buf_[i] = {sends[i].peer, sends[i].tag, const_cast<void*>(sends[i].data), sends[i].bytes};
    for (size_t i = 0; i < num_recvs; ++i)
      recv_buf_[i] = {recvs[i].peer, recvs[i].tag, recvs[i].data, recvs[i].bytes};
    Wait w(this, deadline, &check, &name);
    char err[kErrorBytes];  // not zero-filled: a call's fixed cost at small sizes
    err[0] = '\0';
    if (voting) {
      // The vote's rounds (the transfers' tags) on tags of their own; a peer that
      // ended the step without voting is passed over (vote_skipped).
      skipped_.assign(num_recvs, 0);
      tpu_status s = api_->vote(h_, seq, send_buf_.data(), num_sends, recv_buf_.data(), num_recvs, &w.wait,
                                skipped_.data(), err, sizeof err);
      if (s != TPU_OK) raise(s, err, w);
      for (size_t i = 0; i < num_recvs; ++i)
        if (skipped_[i]) vote_skipped_[recvs[i].peer] = 1;
      return;
    }
    tpu_status s = api_->exchange(h_, seq, digest, send_buf_.data(), num_sends, recv_buf_.data(), num_recvs,
                                  &w.wait, err, sizeof err);
    if (s != TPU_OK) raise(s, err, w);
  }

  bool votes() const override { return TPURT_MPI_PLUGIN_HAS(api_, vote) && TPURT_MPI_PLUGIN_HAS(api_, peer_end); }

  bool vote_skipped(int peer) const override {
    return peer >= 0 && peer < static_cast<int>(vote_skipped_.size()) && vote_skipped_[peer];
  }

  // As the stream transports word a peer's end (StreamTransport::throw_peer_ended).
  void throw_if_ended(int peer, const std::function<std::string(int)>& name) override {
    if (!votes()) return;
    std::string text(kEndMessageBytes, '\0');
    tpurt_mpi_outcome o{TPU_OK, -1, &text[0], text.size()};
    if (!api_->peer_end(h_, peer, &o)) return;
    const std::string message = text.c_str();
    if (o.code == TPU_UNAVAILABLE || o.code == TPU_DEADLINE_EXCEEDED) tpurt::fail(static_cast<tpu_status>(o.code), message);
    if (o.code != TPU_OK) tpurt::fail(TPU_ABORTED, message);
    tpurt::fail(TPU_FAILED_PRECONDITION, name(peer), " finished the step without calling collective #", vote_seq_,
                ", which this task's replicas are in");
  }

  bool can_all_reduce(tpu_dtype dtype, tpu_reduce_op op) const override {
    return api_->can_all_reduce(h_, dtype, op) != 0;
  }

  void all_reduce(uint64_t seq, uint64_t digest, const std::vector<int>& tasks, tpu_dtype dtype,
                  tpu_reduce_op op, const void* in, void* out, int64_t count, int divisor,
                  Clock::time_point deadline, const std::function<void()>& check,
                  const std::function<std::string(int)>& name) override {
    if (has_failed_.load(std::memory_order_acquire)) throw_failed();
    Wait w(this, deadline, &check, &name);
    char err[kErrorBytes];  // not zero-filled: a call's fixed cost at small sizes
    err[0] = '\0';
    tpu_status s = api_->all_reduce(h_, seq, digest, tasks.data(), tasks.size(), dtype, op, in, out,
                                    static_cast<uint64_t>(count), divisor, &w.wait, err, sizeof err);
    if (s != TPU_OK) raise(s, err, w);
  }

  bool can_reduce_scatter(tpu_dtype dtype, tpu_reduce_op op) const override {
    return TPURT_MPI_PLUGIN_HAS(api_, reduce_scatter) && api_->can_all_reduce(h_, dtype, op) != 0;
  }

  void reduce_scatter(uint64_t seq, uint64_t digest, const std::vector<int>& tasks, tpu_dtype dtype,
                      tpu_reduce_op op, const void* in, void* out, int64_t block, int divisor,
                      Clock::time_point deadline, const std::function<void()>& check,
                      const std::function<std::string(int)>& name) override {
    if (has_failed_.load(std::memory_order_acquire)) throw_failed();
    if (!TPURT_MPI_PLUGIN_HAS(api_, reduce_scatter))
      tpurt::fail(TPU_INTERNAL, "the MPI plugin has no reduce_scatter (check can_reduce_scatter first)");
    Wait w(this, deadline, &check, &name);
    char err[kErrorBytes];  // not zero-filled: a call's fixed cost at small sizes
    err[0] = '\0';
    tpu_status s = api_->reduce_scatter(h_, seq, digest, tasks.data(), tasks.size(), dtype, op, in, out,
                                        static_cast<uint64_t>(block), divisor, &w.wait, err, sizeof err);
    if (s != TPU_OK) raise(s, err, w);
  }

  void interrupt() override { interrupted_.store(true, std::memory_order_release); }

  bool end_step(const StepOutcome& mine, int64_t timeout_ms, StepOutcome* remote,
                const std::function<std::string(int)>& name) override {
    if (num_tasks_ == 1 || has_failed_.load(std::memory_order_acquire)) {
      report_doomed(mine.code, mine.message);
      return false;
    }
    // Only the cluster's failure stops the wait for the peers' ends.
    Wait w(this, deadline_after(timeout_ms), nullptr, &name);
    tpurt_mpi_outcome m{mine.code, mine.origin_replica, const_cast<char*>(mine.message.c_str()),
                        mine.message.size() + 1};
    std::string text(kEndMessageBytes, '\0');
    tpurt_mpi_outcome r{TPU_OK, -1, &text[0], text.size()};
    int failed = 0;
    char err[kErrorBytes] = "";
    tpu_status s = api_->end_step(h_, &m, timeout_ms, &w.wait, &r, &failed, err, sizeof err);
    if (s == TPU_OK && failed) {
      remote->code = is_status(static_cast<tpu_status>(r.code)) ? static_cast<tpu_status>(r.code) : TPU_UNKNOWN;
      remote->origin_replica = r.origin_replica;
      remote->message = text.c_str();
    }
    if (s != TPU_OK && s != TPU_CANCELLED && std::getenv("TPURT_LOG"))
      std::fprintf(stderr, "task %d: end_step: %s\n", task_id_, err);
    if (failed && (mine.code == TPU_OK || (mine.code == TPU_ABORTED && remote->code != TPU_ABORTED)))
      report_doomed(remote->code, remote->message);
    else
      report_doomed(mine.code, mine.message);
    return s == TPU_OK && failed;
  }

  void fail(const std::string& message) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (failed_.empty()) failed_ = message;
    }
    has_failed_.store(true, std::memory_order_release);
    interrupt();
  }

 private:
  // A wait's C view: check() wakes only when interrupted, as TCP's does.
  struct Wait {
    Wait(MpiTransport* self, Clock::time_point deadline, const std::function<void()>* check,
         const std::function<std::string(int)>* name)
        : self(self), check(check), name(name) {
      wait.deadline_ns = to_monotonic_ns(deadline);
      wait.check = &Wait::on_check;
      wait.name = &Wait::on_name;
      wait.ctx = this;
    }
    static int on_check(void* p) {
      Wait* w = static_cast<Wait*>(p);
      if (!w->self->interrupted_.load(std::memory_order_acquire)) return 0;
      w->self->interrupted_.store(false, std::memory_order_release);
      try {
        if (w->self->has_failed_.load(std::memory_order_acquire)) w->self->throw_failed();
        if (w->check && *w->check) (*w->check)();
      } catch (...) {
        w->error = std::current_exception();
        return 1;
      }
      return 0;
    }
    static void on_name(void* p, int task, char* buf, size_t size) {
      Wait* w = static_cast<Wait*>(p);
      buf[0] = '\0';
      try {
        if (w->name && *w->name) std::snprintf(buf, size, "%s", (*w->name)(task).c_str());
      } catch (...) {
      }
    }
    MpiTransport* self;
    const std::function<void()>* check;
    const std::function<std::string(int)>* name;
    std::exception_ptr error;
    tpurt_mpi_wait wait{};
  };

  [[noreturn]] void throw_failed() const {
    std::lock_guard<std::mutex> lock(mu_);
    tpurt::fail(TPU_UNAVAILABLE, failed_);
  }

  // Rethrows what stopped the wait (check()'s exception) or the plugin's error; when
  // an operation is left in flight, says that MPI_Abort follows, and prints it.
  [[noreturn]] void raise(tpu_status s, const char* err, Wait& w) {
    tpu_status code = s;
    std::string message = err;
    if (s == TPU_CANCELLED && w.error) {
      try {
        std::rethrow_exception(w.error);
      } catch (const Error& e) {
        code = e.code();
        message = e.message();
      }
    }
    // Sends a live peer (one that ended the step, or is in another collective) will
    // drain when it ends the step are not final yet; a lost or silent peer drains nothing.
    const int doomed = api_->doomed(h_);
    if (doomed == 2 || (doomed == 1 && code != TPU_ABORTED && code != TPU_FAILED_PRECONDITION &&
                        code != TPU_INVALID_ARGUMENT)) {
      message += kAbortNote;
      report_doomed(code, message);
    }
    throw Error(code, message);
  }

  // Prints the step's error once, when the task must abort: the user sees it first.
  void report_doomed(tpu_status code, const std::string& message) {
    if (reported_ || !api_->doomed(h_)) return;
    reported_ = true;
    const bool noted = message.find(kAbortNote) != std::string::npos;
    std::fprintf(stderr, "tpurt: task %d: TPU_%s: %s%s\n", task_id_, status_name(code), message.c_str(),
                 noted ? "" : kAbortNote);
  }

  [[noreturn]] void abort_now(const std::string& when) {
    if (!reported_) report_doomed(TPU_ABORTED, "a failed step left an MPI operation in flight");
    std::fprintf(stderr, "tpurt: task %d: MPI_Abort (%s): an MPI collective in flight cannot be cancelled\n",
                 task_id_, when.c_str());
    std::fflush(stderr);
    api_->abort(h_, 1);
    std::abort();  // abort() does not return
  }

  const tpurt_mpi_plugin* const api_;
  tpurt_mpi_handle* const h_;
  const int num_tasks_, task_id_;
  mutable std::mutex mu_;  // guards failed_
  std::string failed_;
  std::atomic<bool> has_failed_{false};
  std::atomic<bool> interrupted_{false};
  bool reported_ = false;
  std::vector<tpurt_mpi_transfer> send_buf_, recv_buf_;
  // The last vote's collective and the peers it passed over.
  uint64_t vote_seq_ = 0;
  std::vector<char> vote_skipped_;
  std::vector<int32_t> skipped_;
};

}  // namespace

std::unique_ptr<Transport> open_mpi_transport(int num_tasks, int task_id, std::string* why_not) {
  if (num_tasks < 1 || task_id < 0 || task_id >= num_tasks)
    invalid_argument("open_mpi_transport: task ", task_id, " of ", num_tasks, " is not a task");
  const Loaded& l = plugin();
  if (l.api == nullptr) {
    *why_not = l.error;
    return nullptr;
  }
  char why[kErrorBytes] = "";
  tpurt_mpi_handle* h = nullptr;
  tpu_status s = l.api->open(num_tasks, task_id, &h, why, sizeof why);
  if (s == TPU_FAILED_PRECONDITION) {
    *why_not = str_cat(why, " (", l.api->library_version(), ", plugin ", l.path, ")");
    return nullptr;
  }
  if (s != TPU_OK || h == nullptr)
    fail(s == TPU_OK ? TPU_INTERNAL : s, "the MPI plugin ", l.path, " failed to join MPI: ", why);
  return std::make_unique<MpiTransport>(l.api, h, num_tasks, task_id);
}

}  // namespace net
}  // namespace tpurt
