// Adagrad: a = a + g * g; w = w - lr * g / sqrt(a). TensorFlow:
// tensorflow/core/tpu/kernels/sparse_core_ops_utils.cc BuildAdagradOptimizerComputation
// (its order: (lr * g) / sqrt(a); training_ops.cc ApplyAdagrad multiplies by rsqrt).
#include <cmath>

#include "embedding/optimizers/rules.h"

namespace tpurt {
namespace embedding {
namespace {

class Adagrad final : public UpdateRule {
 public:
  explicit Adagrad(float initial) : initial_(initial) {}
  std::vector<std::string> slot_names() const override { return {"accumulators"}; }
  std::vector<float> slot_initial_values() const override { return {initial_}; }
  void update(float* w, float* const* slots, const float* g, int dim, float lr) const override {
    float* a = slots[0];
    for (int i = 0; i < dim; ++i) {
      a[i] = a[i] + g[i] * g[i];
      w[i] = w[i] - lr * g[i] / std::sqrt(a[i]);
    }
  }

 private:
  float initial_;
};

}  // namespace

// accumulators start at TensorFlow 1.x's initial_accumulator when set, else at 0.1, the
// default of tf.tpu.experimental.embedding.Adagrad; both classes refuse a value <= 0.
std::unique_ptr<UpdateRule> make_adagrad(const OptimizationParameters& p, const std::string& table) {
  const float set = p.adagrad ? p.adagrad->initial_accumulator : 0;
  require_param(!(set < 0), table, "adagrad.initial_accumulator", set, "it must be positive");
  return std::make_unique<Adagrad>(initial_or(set, 0.1f));
}

}  // namespace embedding
}  // namespace tpurt
