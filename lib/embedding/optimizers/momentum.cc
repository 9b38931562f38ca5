// Momentum. TensorFlow publishes no TPU program for it; the CPU kernel
// OptimizationParameters links, tensorflow/core/kernels/training_ops.cc
// ApplyMomentum<CPUDevice>, operation for operation:
//   m = m * momentum + g
//   w = w - (use_nesterov ? g * lr + m * momentum * lr : m * lr)
#include "embedding/optimizers/rules.h"

namespace tpurt {
namespace embedding {
namespace {

class Momentum final : public UpdateRule {
 public:
  explicit Momentum(const Tensorflow__Tpu__MomentumParameters& q)
      : momentum_(q.momentum), initial_(q.initial_accum), nesterov_(q.use_nesterov != 0) {}
  std::vector<std::string> slot_names() const override { return {"momenta"}; }
  std::vector<float> slot_initial_values() const override { return {initial_}; }
  void update(float* w, float* const* slots, const float* g, int dim, float lr) const override {
    float* m = slots[0];
    for (int i = 0; i < dim; ++i) {
      m[i] = m[i] * momentum_ + g[i];
      w[i] = nesterov_ ? w[i] - (g[i] * lr + m[i] * momentum_ * lr) : w[i] - m[i] * lr;
    }
  }

 private:
  float momentum_, initial_;
  bool nesterov_;
};

}  // namespace

// momenta start at TensorFlow 1.x's initial_accum when set, else at 0 (what
// tf.compat.v1 MomentumOptimizer's slot starts at).
std::unique_ptr<UpdateRule> make_momentum(const OptimizationParameters& p, const std::string&) {
  return std::make_unique<Momentum>(*p.momentum);
}

}  // namespace embedding
}  // namespace tpurt
