// Binding-support layer (../tpurt_binding.hpp): whole-system checkpoints
// (checkpoint.h, 1.5): CheckpointOptions, checkpointSave, checkpointLatest,
// checkpointRestore.
#ifndef TPURT_BINDING_SUPPORT_CHECKPOINT_HPP
#define TPURT_BINDING_SUPPORT_CHECKPOINT_HPP

#include "system.hpp"

namespace tpurt {

class CheckpointOptions {
 public:
  CheckpointOptions() { detail::check(tpu_checkpoint_options_init(&o_, sizeof o_)); }
  int64_t timeoutMs = 0;  // 0: the system's collective timeout
  int keep = 0;           // save: the newest complete checkpoints kept; 0 keeps all
  const tpu_checkpoint_options* toC() const {
    o_.timeout_ms = timeoutMs;
    o_.keep = keep;
    return &o_;
  }

 private:
  mutable tpu_checkpoint_options o_;
};

// What checkpointRestore gives back: the step and the tensors asked for, in order.
class RestoredCheckpoint {
 public:
  int64_t step = 0;
  std::vector<Tensor> tensors;
};

// Collective over every task: the tables, tensors named names[i] (task 0's written), step.
inline void checkpointSave(TpuSystem& system, const std::string& dir, int64_t step,
                           const std::vector<std::string>& names, const std::vector<Tensor>& tensors,
                           const CheckpointOptions& options) {
  std::vector<const char*> n = detail::names_of(names, tensors.size(), "tensors");
  std::vector<tpu_tensor*> h = Tensor::handles(tensors);
  detail::check(tpu_checkpoint_save(system.handle(), dir.c_str(), step, n.data(), h.data(),
                                    detail::int_or_throw(h.size(), "tensors"), options.toC()));
}

// The newest complete checkpoint's step (NotFound when dir holds none).
inline int64_t checkpointLatest(const std::string& dir) {
  int64_t step = 0;
  detail::check(tpu_checkpoint_latest(dir.c_str(), &step));
  return step;
}

// Collective: step -1 restores the newest complete checkpoint.
inline RestoredCheckpoint checkpointRestore(TpuSystem& system, const std::string& dir, int64_t step,
                                            const std::vector<std::string>& names,
                                            const CheckpointOptions& options) {
  std::vector<const char*> n = detail::names_of(names, names.size(), "names");
  std::vector<tpu_tensor*> out(names.size(), nullptr);
  RestoredCheckpoint r;
  detail::check(tpu_checkpoint_restore(system.handle(), dir.c_str(), step, n.data(), out.data(),
                                       detail::int_or_throw(out.size(), "names"), &r.step, options.toC()));
  r.tensors = Tensor::adopt(out);
  return r;
}

}  // namespace tpurt

#endif  // TPURT_BINDING_SUPPORT_CHECKPOINT_HPP
