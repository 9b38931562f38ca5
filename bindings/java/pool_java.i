/* Java's seat in the one replica pool (../replica_pool.hpp), after the interface so
 * that its %exception covers it: ReplicaThreads.java starts a daemon per core, each
 * looping seat.next(status) -> the body its step registered under seat.key(); the pool
 * joins and leaves (one call), stops by cancelling the joins, and keeps join errors
 * for the next step. Package-private: the binding's plumbing, not API. */
%{
#include "replica_pool.hpp"
static_assert(tpurt::ReplicaPool::Seat::kRun == 0, "ReplicaThreads.java runs a participant when next() is 0");
%}
%typemap(javaclassmodifiers) JavaReplicaPool, JavaSeat, JavaPoolEnded "final class"
/* A seat is deleted by the thread that sat (it gives that thread its CPUs back): no finalizer. */
%typemap(javafinalize) JavaSeat ""
%newobject JavaReplicaPool::seat;
%newobject JavaReplicaPool::takeEnded;
%inline %{
/* The threads that ended on a join error since the last takeEnded: the first error,
 * and the cores the language serves again. */
class JavaPoolEnded {
 public:
  int code() const { return code_; }
  std::string message() const { return message_; }
  std::vector<int32_t> cores() const { return cores_; }

 private:
  friend class JavaReplicaPool;
  JavaPoolEnded() = default;
  int code_ = 0;
  std::string message_;
  std::vector<int32_t> cores_;
};

/* A pool thread's place at its core (tpurt::ReplicaPool::Seat). */
class JavaSeat {
 public:
  ~JavaSeat() { delete seat_; }
  /* Leaves the last participant with status, joins the next: 0 runs it; else the thread ends. */
  int next(int status) { return seat_->next(status); }
  /* The key its step registered the body under. */
  int64_t key() const { return seat_->key(); }
  int numInputs() const { return seat_->numInputs(); }
  int numOutputs() const { return seat_->numOutputs(); }
  /* The same object for every participant (re-pointed by next): fetch it once per thread. */
  tpurt::ReplicaContext& context() { return seat_->context(); }
  /* Fails the participant still joined with message and leaves it (the thread is ending). */
  void abandon(int code, const std::string& message) { seat_->abandon(code, message); }

 private:
  friend class JavaReplicaPool;
  explicit JavaSeat(tpurt::ReplicaPool::Seat* seat) : seat_(seat) {}
  JavaSeat(const JavaSeat&) = delete;
  JavaSeat& operator=(const JavaSeat&) = delete;
  tpurt::ReplicaPool::Seat* seat_;
};

/* The pool of cores 0 .. cores - 1 of system (open: its handle stays valid until stop()). */
class JavaReplicaPool {
 public:
  JavaReplicaPool(tpurt::TpuSystem& system, int cores) : pool_(system.handle(), cores) {}
  /* Cancels the joins; returns once no thread is inside one. Idempotent. */
  void stop() { pool_.stop(); }
  bool stopping() const { return pool_.stopping(); }
  /* Threads inside a computation. */
  int running() const { return pool_.running(); }
  /* The calling thread's seat (that thread deletes it). */
  JavaSeat* seat(int core) { return new JavaSeat(pool_.seat(core)); }
  /* null when no thread ended on a join error since the last call. */
  JavaPoolEnded* takeEnded() {
    std::string message;
    std::vector<int> cores;
    const int code = pool_.takeEnded(&message, &cores);
    if (code == 0) return nullptr;
    JavaPoolEnded* ended = new JavaPoolEnded();
    ended->code_ = code;
    ended->message_ = message;
    ended->cores_.assign(cores.begin(), cores.end());
    return ended;
  }

 private:
  JavaReplicaPool(const JavaReplicaPool&) = delete;
  JavaReplicaPool& operator=(const JavaReplicaPool&) = delete;
  tpurt::ReplicaPool pool_;
};
%}

