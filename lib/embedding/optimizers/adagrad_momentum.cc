// Adagrad with momentum. TensorFlow:
// tensorflow/core/tpu/kernels/sparse_core_ops_utils.cc
// BuildAdagradMomentumOptimizerComputation, operation for operation:
//   a = beta2 == 1 ? a + g * g : beta2 * a + (1 - beta2) * g * g
//   s = pow(a + epsilon, -(1 / exponent)) * g
//   m = momentum * m + s
//   w = w - lr * (use_nesterov ? momentum * m + s : m)
#include <cmath>

#include "embedding/optimizers/rules.h"

namespace tpurt {
namespace embedding {
namespace {

class AdagradMomentum final : public UpdateRule {
 public:
  explicit AdagradMomentum(const Tensorflow__Tpu__AdagradMomentumParameters& q)
      : beta1_(q.momentum), beta2_(q.beta2), epsilon_(q.epsilon), neg_inv_exponent_(-(1.0f / q.exponent)),
        nesterov_(q.use_nesterov != 0) {}
  std::vector<std::string> slot_names() const override { return {"accumulators", "momenta"}; }
  std::vector<float> slot_initial_values() const override { return {0.0f, 0.0f}; }
  void update(float* w, float* const* slots, const float* g, int dim, float lr) const override {
    float* a = slots[0];
    float* m = slots[1];
    for (int i = 0; i < dim; ++i) {
      a[i] = beta2_ == 1.0f ? a[i] + g[i] * g[i] : beta2_ * a[i] + (1.0f - beta2_) * g[i] * g[i];
      const float s = std::pow(a[i] + epsilon_, neg_inv_exponent_) * g[i];
      m[i] = beta1_ * m[i] + s;
      w[i] = nesterov_ ? w[i] - lr * (beta1_ * m[i] + s) : w[i] - lr * m[i];
    }
  }

 private:
  float beta1_, beta2_, epsilon_, neg_inv_exponent_;
  bool nesterov_;
};

}  // namespace

// Both slots start at 0 (tf.tpu.experimental.embedding.AdagradMomentum's Constant()
// initializers), which also refuses epsilon <= 0 and exponent <= 0.
std::unique_ptr<UpdateRule> make_adagrad_momentum(const OptimizationParameters& p, const std::string& table) {
  const Tensorflow__Tpu__AdagradMomentumParameters& q = *p.adagrad_momentum;
  require_param(q.epsilon > 0, table, "adagrad_momentum.epsilon", q.epsilon, "it must be positive");
  require_param(q.exponent > 0, table, "adagrad_momentum.exponent", q.exponent, "it must be positive");
  return std::make_unique<AdagradMomentum>(q);
}

}  // namespace embedding
}  // namespace tpurt
