// The replica pool every binding runs its steps on (tpu_step_join / tpu_step_leave):
// one thread per core of the task, each the language's own (a managed thread in C#,
// a daemon in Java, a goroutine locked to its OS thread in Go), looping
//
//   Seat* seat = pool->seat(core);             // on the thread, once
//   int status = 0;
//   while (seat->next(status) == Seat::kRun)   // leaves the last participant, joins
//     status = <the language's computation for seat->key()>(seat->context());
//   delete seat;                                // restores the thread's CPUs
//
// Everything but the upcall is here, once: the join record, leave-and-join in one
// call, what each join status means, the errors of threads that ended, and stopping
// without polling (tpu_step_join_cancel). Not wrapped by SWIG: each language's glue
// calls it (tpurt_csharp.i, tpurt_java.i, go/pool.cxx).
#ifndef TPURT_BINDING_REPLICA_POOL_HPP
#define TPURT_BINDING_REPLICA_POOL_HPP

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tpurt_binding.hpp"

namespace tpurt {

class ReplicaPool {
  struct State;

 public:
  // A thread's place at its core: what it joined, and the CPUs to give back.
  class Seat {
   public:
    enum Turn {
      kRun = 0,    // a participant: run the computation registered under key()
      kStop = 1,   // the pool stopped (stop(), or the system was shut down): end the thread
      kEnded = 2,  // the join failed in a way a retry would hide: end the thread (the
                   // pool keeps why, for the next step: takeEnded)
    };

    // Leaves the participant this seat ran, if any, with `status` (0, or what the
    // context's fail returned) and the outputs set on context(); then, unless the pool
    // stops, joins the core for the next one. One native call per participant.
    int next(int status) {
      leave(status);
      return join();
    }
    // Ends a participant whose thread cannot finish it (a Go goroutine that called
    // runtime.Goexit): fails it with `message` and leaves. The seat is then done.
    void abandon(int code, const std::string& message) {
      if (!joined_) return;
      leave(tpu_replica_context_fail(j_.ctx, static_cast<tpu_status>(code), message.c_str()));
    }

    ReplicaContext& context() { return context_; }
    int64_t key() const { return static_cast<int64_t>(reinterpret_cast<intptr_t>(j_.user_data)); }
    int numInputs() const { return j_.num_inputs; }
    int numOutputs() const { return static_cast<int>(outputs_.size()); }
    int core() const { return core_; }

    // On the thread that sat: a participant still joined (its thread is ending inside
    // it) fails now, not when the thread exits.
    ~Seat() {
      abandon(TPU_CANCELLED, "the thread serving core " + std::to_string(core_) + " ended inside its participant");
      for (tpu_tensor* t : outputs_)
        if (t) tpu_tensor_release(t);
      // The library pins a joined thread while the system pins its workers: give the
      // thread back as it came (a Go thread returns to Go's scheduler).
      if (have_cpus_) pthread_setaffinity_np(pthread_self(), sizeof cpus_, &cpus_);
    }
    Seat(const Seat&) = delete;
    Seat& operator=(const Seat&) = delete;

   private:
    friend class ReplicaPool;
    Seat(std::shared_ptr<State> state, int core) : state_(std::move(state)), core_(core) {
      have_cpus_ = sched_getaffinity(0, sizeof cpus_, &cpus_) == 0;
    }

    void leave(int status) {
      if (!joined_) return;
      joined_ = false;
      // The runtime takes the outputs over whatever the status; a wrong count fails
      // the participant (the step reports it).
      tpu_step_leave(j_.ctx, static_cast<tpu_status>(status), outputs_.data(), static_cast<int>(outputs_.size()));
      std::fill(outputs_.begin(), outputs_.end(), nullptr);
      state_->core[core_].running.fetch_sub(1, std::memory_order_relaxed);
    }

    int join() {
      State& s = *state_;
      std::chrono::milliseconds backoff(1);
      for (;;) {
        // Dekker with stop(): either this thread sees `stopping`, or stop() sees it
        // joining and cancels the core (no lock on the step's path).
        s.core[core_].joining.store(1, std::memory_order_seq_cst);
        if (s.stopping.load(std::memory_order_seq_cst)) {
          s.left_join(core_);
          return kStop;
        }
        j_ = TPU_JOINED_STEP_INIT;
        const tpu_status st = tpu_step_join(s.system, core_, -1, &j_);
        const std::string message = st == TPU_OK ? std::string() : tpu_last_error();
        s.left_join(core_);
        switch (st) {
          case TPU_OK: {
            const size_t n = static_cast<size_t>(j_.num_outputs < 0 ? 0 : j_.num_outputs);
            outputs_.assign(n, nullptr);
            context_ = ReplicaContext(j_.ctx, j_.inputs, j_.num_inputs, outputs_.data(), static_cast<int>(n));
            joined_ = true;
            s.core[core_].running.fetch_add(1, std::memory_order_relaxed);
            return kRun;
          }
          case TPU_CANCELLED:  // stop() cancelled it, or a shutdown woke it
          case TPU_FAILED_PRECONDITION:  // shut down before it joined
            if (st == TPU_CANCELLED && !s.stopping.load() && message.find("tpu_step_join_cancel") != std::string::npos)
              continue;  // an earlier pool's cancel, left for this core's next join
            s.stop_all();
            return kStop;
          case TPU_ALREADY_EXISTS: {
            // Another thread holds the core (a raw stepJoin, or this core's previous
            // thread not gone yet): wait for it to let go, or for stop().
            std::unique_lock<std::mutex> lock(s.mu);
            if (s.changed.wait_for(lock, backoff, [&] { return s.stopping.load(); })) return kStop;
            backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
            continue;
          }
          default: {
            // INVALID_ARGUMENT or anything else is a programming error: retrying would
            // hide it. The thread ends, and the next step reports why.
            std::lock_guard<std::mutex> lock(s.mu);
            s.any_ended.store(true, std::memory_order_release);
            s.ended.push_back(End{core_, st,
                                  "the replica thread of core " + std::to_string(core_) +
                                      " ended: tpu_step_join failed: " + message});
            return kEnded;
          }
        }
      }
    }

    std::shared_ptr<State> state_;  // the last seat keeps the pool's state
    const int core_;
    tpu_joined_step j_ = TPU_JOINED_STEP_INIT;
    std::vector<tpu_tensor*> outputs_;
    ReplicaContext context_{nullptr, nullptr, 0, nullptr, 0};
    bool joined_ = false;
    cpu_set_t cpus_;
    bool have_cpus_ = false;
  };

  // A pool for `cores` cores of `system` (its C handle must stay valid until stop()
  // returns). No thread is started here: the language starts one per core, each
  // calling seat(core).
  ReplicaPool(tpu_system* system, int cores) : state_(std::make_shared<State>(system, cores)) {
    if (system == nullptr) throw Error(TPU_INVALID_ARGUMENT, "the replica pool's system is NULL");
    if (cores <= 0) throw Error(TPU_INVALID_ARGUMENT, "the replica pool's core count is " + std::to_string(cores));
  }
  // Stops the pool (threads inside a computation end when they leave it).
  ~ReplicaPool() { stop(); }
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;

  // The calling thread's seat at `core` (new; the thread deletes it when it ends).
  Seat* seat(int core) {
    if (core < 0 || core >= state_->cores)
      throw Error(TPU_INVALID_ARGUMENT, "core is " + std::to_string(core) + "; the pool serves cores 0 to " +
                                            std::to_string(state_->cores - 1));
    return new Seat(state_, core);
  }

  // Ends the pool's threads without a shutdown: each join is cancelled, and this
  // returns once no thread is inside tpu_step_join, so the system's handle may go
  // (a thread inside a computation leaves it later, and then ends). Idempotent.
  void stop() {
    State& s = *state_;
    if (s.stopped.load()) return;
    s.stop_all();
    for (int c = 0; c < s.cores; ++c)
      if (s.core[c].joining.load(std::memory_order_seq_cst)) tpu_step_join_cancel(s.system, c);
    std::unique_lock<std::mutex> lock(s.mu);
    s.changed.wait(lock, [&] { return s.none_joining(); });
    s.stopped.store(true);
  }
  bool stopping() const { return state_->stopping.load(); }
  // Threads inside a computation (a late participant of a failed step, say).
  int running() const {
    int n = 0;
    for (int c = 0; c < state_->cores; ++c) n += state_->core[c].running.load(std::memory_order_relaxed);
    return n;
  }

  // Before each step: the first error of the threads that ended on an unexpected join
  // status since the last call (code 0: none), and the cores whose thread the language
  // must start again.
  int takeEnded(std::string* message, std::vector<int>* cores) {
    if (!state_->any_ended.load(std::memory_order_acquire)) return 0;  // every step asks
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->any_ended.store(false, std::memory_order_relaxed);
    int code = 0;
    for (const End& e : state_->ended) {
      if (code == 0) {
        code = e.code;
        *message = e.message;
      }
      cores->push_back(e.core);
    }
    state_->ended.clear();
    return code;
  }

 private:
  struct End {
    int core;
    int code;
    std::string message;
  };
  struct State {
    State(tpu_system* system, int cores)
        : system(system), cores(cores), core(new Core[cores > 0 ? cores : 1]) {}
    // The pool is over: stop() called, or a shutdown ended a join (the handle stays
    // valid until the language's close, which calls stop()).
    void stop_all() {
      stopping.store(true, std::memory_order_seq_cst);
      std::lock_guard<std::mutex> lock(mu);
      changed.notify_all();
    }
    void left_join(int c) {
      core[c].joining.store(0, std::memory_order_seq_cst);
      if (stopping.load(std::memory_order_seq_cst)) {
        std::lock_guard<std::mutex> lock(mu);
        changed.notify_all();
      }
    }
    bool none_joining() const {
      for (int c = 0; c < cores; ++c)
        if (core[c].joining.load(std::memory_order_seq_cst)) return false;
      return true;
    }
    tpu_system* const system;
    const int cores;
    // Per core, written by its thread on every step, each on a cache line of its own
    // (shared lines and a pool-wide counter bounced between the CPUs every step).
    struct alignas(64) Core {
      std::atomic<int> joining{0};  // its thread is in tpu_step_join
      std::atomic<int> running{0};  // its threads inside a computation
    };
    std::unique_ptr<Core[]> core;
    std::atomic<bool> stopping{false}, stopped{false};
    std::atomic<bool> any_ended{false};  // `ended` is not empty
    std::mutex mu;                // for `changed` and `ended`
    std::condition_variable changed;
    std::vector<End> ended;
  };

  std::shared_ptr<State> state_;
};

// A replicate step of `key` with the default options but the collectives' timeout, on
// the threads that joined the cores (the pool's): a plain step of a binding in one
// native call, with no SWIG vectors or options to build. inputs are numReplicas *
// numInputs tensors; outputs get numReplicas * numOutputs new Tensors, and nothing on
// failure, when the thread's last error (tpu_last_error) says why.
inline tpu_status replicate_joined(tpu_system* system, int64_t key, int numReplicas, int numInputs,
                                   Tensor* const* inputs, int numOutputs, Tensor** outputs,
                                   int64_t collectiveTimeoutMs) {
  if (numReplicas < 0 || numInputs < 0 || numOutputs < 0)
    return tpu_set_last_error(TPU_INVALID_ARGUMENT, ("a step of " + std::to_string(numReplicas) + " replicas, " +
                                                     std::to_string(numInputs) + " inputs and " +
                                                     std::to_string(numOutputs) + " outputs each")
                                                        .c_str());
  const size_t nin = static_cast<size_t>(numReplicas) * static_cast<size_t>(numInputs);
  const size_t nout = static_cast<size_t>(numReplicas) * static_cast<size_t>(numOutputs);
  // A step of a few tensors keeps their handles on the stack: no allocation.
  constexpr size_t kSmall = 64;
  tpu_tensor* small[2 * kSmall];
  std::vector<tpu_tensor*> big(nin <= kSmall && nout <= kSmall ? 0 : nin + nout);
  tpu_tensor** in = big.empty() ? small : big.data();
  tpu_tensor** out = big.empty() ? small + kSmall : big.data() + nin;
  for (size_t i = 0; i < nin; ++i) in[i] = inputs[i]->handleOrNull();
  std::fill(out, out + nout, nullptr);
  tpu_step_options o = TPU_STEP_OPTIONS_INIT;
  o.collective_timeout_ms = collectiveTimeoutMs;
  o.caller_threads = 1;
  const tpu_status st = tpu_replicate(system, nullptr, reinterpret_cast<void*>(static_cast<intptr_t>(key)),
                                      numReplicas, numInputs, in, numOutputs, out, &o);
  if (st != TPU_OK) return st;
  for (size_t i = 0; i < nout; ++i) outputs[i] = new Tensor(out[i]);
  return TPU_OK;
}

}  // namespace tpurt

#endif  // TPURT_BINDING_REPLICA_POOL_HPP
