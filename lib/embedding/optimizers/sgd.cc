// Stochastic gradient descent: w = w - lr * g. TensorFlow:
// tensorflow/core/tpu/kernels/sparse_core_ops_utils.cc BuildSgdOptimizerComputation
// (the same as tensorflow/core/kernels/training_ops.cc ApplyGradientDescent).
#include "embedding/optimizers/rules.h"

namespace tpurt {
namespace embedding {
namespace {

class Sgd final : public UpdateRule {
 public:
  std::vector<std::string> slot_names() const override { return {}; }
  std::vector<float> slot_initial_values() const override { return {}; }
  void update(float* w, float* const*, const float* g, int dim, float lr) const override {
    for (int i = 0; i < dim; ++i) w[i] = w[i] - lr * g[i];
  }
};

}  // namespace

std::unique_ptr<UpdateRule> make_sgd(const OptimizationParameters&, const std::string&) {
  return std::make_unique<Sgd>();
}

}  // namespace embedding
}  // namespace tpurt
