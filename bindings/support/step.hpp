// Binding-support layer (../tpurt_binding.hpp): the director a step runs on every
// replica (Computation), and a participant of a caller-threads step (JoinedStep).
#ifndef TPURT_BINDING_SUPPORT_STEP_HPP
#define TPURT_BINDING_SUPPORT_STEP_HPP

#include "context.hpp"

namespace tpurt {

// A replicated computation. run() returns a tpu_status: 0, or the result of
// ctx.fail(code, message). A C++ exception escaping run() fails the replica too.
class Computation {
 public:
  virtual ~Computation() = default;
  virtual Status run(ReplicaContext& ctx) = 0;
  static tpu_status trampoline(tpu_replica_context* c, tpu_tensor* const* inputs, int num_inputs,
                               tpu_tensor** outputs, int num_outputs, void* user_data) noexcept {
    ReplicaContext ctx(c, inputs, num_inputs, outputs, num_outputs);
    try {
      return static_cast<tpu_status>(static_cast<Computation*>(user_data)->run(ctx));
    } catch (const Error& e) {
      return tpu_replica_context_fail(c, static_cast<tpu_status>(e.code() ? e.code() : TPU_UNKNOWN), e.what());
    } catch (const std::exception& e) {
      return tpu_replica_context_fail(c, TPU_UNKNOWN, e.what());
    } catch (...) {
      return tpu_replica_context_fail(c, TPU_UNKNOWN, "the computation threw a non-standard exception");
    }
  }
};

// (1.4) A participant of a caller-threads step that this thread joined
// (TpuSystem::stepJoin, tpu_step_join): run the computation on context(), then call
// leave() once, on this same thread. userData() is the key the step's caller gave
// (TpuSystem::replicateOnJoinedThreads and friends).
class JoinedStep {
 public:
  explicit JoinedStep(const tpu_joined_step& j)
      : j_(j), outputs_(static_cast<size_t>(j.num_outputs < 0 ? 0 : j.num_outputs), nullptr),
        ctx_(j.ctx, j.inputs, j.num_inputs, outputs_.data(), j.num_outputs) {}
  JoinedStep(const JoinedStep&) = delete;
  JoinedStep& operator=(const JoinedStep&) = delete;
  ~JoinedStep() {
    for (tpu_tensor* t : outputs_)
      if (t) tpu_tensor_release(t);
  }
  ReplicaContext& context() { return ctx_; }
  int64_t userData() const { return static_cast<int64_t>(reinterpret_cast<intptr_t>(j_.user_data)); }
  int replicaId() const { return ctx_.replicaId(); }
  int numInputs() const { return j_.num_inputs; }
  int numOutputs() const { return j_.num_outputs; }
  bool hasLeft() const { return left_; }
  // Ends the participant with `status` (0, or what ctx.fail returned) and hands the
  // outputs set on context() over.
  void leave(Status status) {
    if (left_) throw Error(TPU_FAILED_PRECONDITION, "this joined step has left already");
    left_ = true;
    const tpu_status st = tpu_step_leave(j_.ctx, static_cast<tpu_status>(status), outputs_.data(),
                                         static_cast<int>(outputs_.size()));
    std::fill(outputs_.begin(), outputs_.end(), nullptr);  // taken over
    detail::check(st);
  }
  // Fails the participant with `message` (as ReplicaContext::fail) and leaves.
  void leaveFailed(Status code, const std::string& message) {
    leave(ctx_.fail(code == Status::Ok ? Status::Unknown : code, message));
  }

 private:
  tpu_joined_step j_;
  std::vector<tpu_tensor*> outputs_;
  ReplicaContext ctx_;
  bool left_ = false;
};

}  // namespace tpurt

#endif  // TPURT_BINDING_SUPPORT_STEP_HPP
