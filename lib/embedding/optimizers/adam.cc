// Adam without bias correction (OptimizationParameters' AdamParameters: the TPU applies
// none; a caller folds it into a dynamic learning rate). TensorFlow:
// tensorflow/core/tpu/kernels/sparse_core_ops_utils.cc BuildAdamOptimizerComputation,
// operation for operation:
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   w = w - lr * m / (sqrt(v + e1) + e2)
// with (e1, e2) = (epsilon * epsilon, 0) under use_sum_inside_sqrt, else (0, epsilon).
// use_non_lazy_adam updates every row each step, untouched ones with a zero gradient.
#include <cmath>

#include "embedding/optimizers/rules.h"

namespace tpurt {
namespace embedding {
namespace {

class Adam final : public UpdateRule {
 public:
  Adam(const Tensorflow__Tpu__AdamParameters& q)
      : beta1_(q.beta1), beta2_(q.beta2), e1_(q.use_sum_inside_sqrt ? q.epsilon * q.epsilon : 0.0f),
        e2_(q.use_sum_inside_sqrt ? 0.0f : q.epsilon), initial_m_(q.initial_m), initial_v_(q.initial_v),
        non_lazy_(q.use_non_lazy_adam != 0) {}
  std::vector<std::string> slot_names() const override { return {"momenta", "velocities"}; }
  std::vector<float> slot_initial_values() const override { return {initial_m_, initial_v_}; }
  bool updates_every_row() const override { return non_lazy_; }
  void update(float* w, float* const* slots, const float* g, int dim, float lr) const override {
    float* m = slots[0];
    float* v = slots[1];
    for (int i = 0; i < dim; ++i) {
      m[i] = beta1_ * m[i] + (1.0f - beta1_) * g[i];
      v[i] = beta2_ * v[i] + (1.0f - beta2_) * g[i] * g[i];
      w[i] = w[i] - lr * m[i] / (std::sqrt(v[i] + e1_) + e2_);
    }
  }

 private:
  float beta1_, beta2_, e1_, e2_, initial_m_, initial_v_;
  bool non_lazy_;
};

}  // namespace

// momenta and velocities start at TensorFlow 1.x's initial_m / initial_v when set, else
// at 0 (tf.tpu.experimental.embedding.Adam's Constant() initializers). Both Adam classes
// refuse beta1 or beta2 outside [0, 1) and epsilon <= 0.
std::unique_ptr<UpdateRule> make_adam(const OptimizationParameters& p, const std::string& table) {
  const Tensorflow__Tpu__AdamParameters& q = *p.adam;
  require_param(q.beta1 >= 0 && q.beta1 < 1, table, "adam.beta1", q.beta1, "it must be in [0, 1)");
  require_param(q.beta2 >= 0 && q.beta2 < 1, table, "adam.beta2", q.beta2, "it must be in [0, 1)");
  require_param(q.epsilon > 0, table, "adam.epsilon", q.epsilon, "it must be positive");
  return std::make_unique<Adam>(q);
}

}  // namespace embedding
}  // namespace tpurt
