// Adagrad: a += g * g; w -= lr * g / sqrt(a) (training_ops.cc ApplyAdagrad).
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
      a[i] += g[i] * g[i];
      w[i] -= lr * g[i] / std::sqrt(a[i]);
    }
  }

 private:
  float initial_;
};

}  // namespace

// TensorFlow 2 carries no initial value (the Python layer loads the slot): 0.1, the
// default of tf.tpu.experimental.embedding.Adagrad, unless TensorFlow 1.x's field is set.
std::unique_ptr<UpdateRule> make_adagrad(const OptimizationParameters& p) {
  const float initial = p.adagrad && p.adagrad->initial_accumulator != 0 ? p.adagrad->initial_accumulator : 0.1f;
  return std::make_unique<Adagrad>(initial);
}

}  // namespace embedding
}  // namespace tpurt
