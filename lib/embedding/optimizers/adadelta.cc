// Adadelta. TensorFlow publishes no TPU program for it; the CPU kernel
// OptimizationParameters links, tensorflow/core/kernels/training_ops.cc
// ApplyAdadelta<CPUDevice> (the current order: w before the update accumulator),
// operation for operation:
//   a = a * rho + g * g * (1 - rho)
//   u = sqrt(au + epsilon) * rsqrt(a + epsilon) * g
//   w = w - u * lr
//   au = au * rho + u * u * (1 - rho)
// rsqrt(x) is computed as 1 / sqrt(x), correctly rounded twice; Eigen's vectorized
// rsqrt (TensorFlow's CPU path) may differ from it in the last bit.
#include <cmath>

#include "embedding/optimizers/rules.h"

namespace tpurt {
namespace embedding {
namespace {

class Adadelta final : public UpdateRule {
 public:
  explicit Adadelta(const Tensorflow__Tpu__AdadeltaParameters& q)
      : rho_(q.rho), epsilon_(q.epsilon), initial_{q.initial_accumulator, q.initial_update} {}
  std::vector<std::string> slot_names() const override { return {"accumulators", "updates"}; }
  std::vector<float> slot_initial_values() const override { return initial_; }
  void update(float* w, float* const* slots, const float* g, int dim, float lr) const override {
    float* a = slots[0];
    float* au = slots[1];
    for (int i = 0; i < dim; ++i) {
      a[i] = a[i] * rho_ + g[i] * g[i] * (1.0f - rho_);
      const float u = std::sqrt(au[i] + epsilon_) * (1.0f / std::sqrt(a[i] + epsilon_)) * g[i];
      w[i] = w[i] - u * lr;
      au[i] = au[i] * rho_ + u * u * (1.0f - rho_);
    }
  }

 private:
  float rho_, epsilon_;
  std::vector<float> initial_;
};

}  // namespace

// accumulators and updates start at TensorFlow 1.x's initial_accumulator /
// initial_update when set, else at 0.
std::unique_ptr<UpdateRule> make_adadelta(const OptimizationParameters& p, const std::string&) {
  return std::make_unique<Adadelta>(*p.adadelta);
}

}  // namespace embedding
}  // namespace tpurt
