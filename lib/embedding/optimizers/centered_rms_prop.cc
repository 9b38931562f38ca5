// Centered RMSProp. TensorFlow publishes no TPU program for it; the CPU kernel
// OptimizationParameters links, tensorflow/core/kernels/training_ops.cc
// ApplyCenteredRMSProp<CPUDevice>, operation for operation:
//   ms = ms + (g * g - ms) * (1 - rho)
//   mg = mg + (g - mg) * (1 - rho)
//   mom = mom * momentum + g * lr / sqrt((ms - mg * mg) + epsilon)
//   w = w - mom
#include <cmath>

#include "embedding/optimizers/rules.h"

namespace tpurt {
namespace embedding {
namespace {

class CenteredRmsProp final : public UpdateRule {
 public:
  explicit CenteredRmsProp(const Tensorflow__Tpu__CenteredRmsPropParameters& q)
      : rho_(q.rho), momentum_(q.momentum), epsilon_(q.epsilon),
        initial_{q.initial_ms, q.initial_mom, q.initial_mg} {}
  std::vector<std::string> slot_names() const override { return {"ms", "mom", "mg"}; }
  std::vector<float> slot_initial_values() const override { return initial_; }
  void update(float* w, float* const* slots, const float* g, int dim, float lr) const override {
    float* ms = slots[0];
    float* mom = slots[1];
    float* mg = slots[2];
    for (int i = 0; i < dim; ++i) {
      ms[i] = ms[i] + (g[i] * g[i] - ms[i]) * (1.0f - rho_);
      mg[i] = mg[i] + (g[i] - mg[i]) * (1.0f - rho_);
      const float denom = (ms[i] - mg[i] * mg[i]) + epsilon_;
      mom[i] = mom[i] * momentum_ + (g[i] * lr) / std::sqrt(denom);
      w[i] = w[i] - mom[i];
    }
  }

 private:
  float rho_, momentum_, epsilon_;
  std::vector<float> initial_;
};

}  // namespace

// ms, mom and mg start at TensorFlow 1.x's initial_ms / initial_mom / initial_mg when
// set, else at 0.
std::unique_ptr<UpdateRule> make_centered_rms_prop(const OptimizationParameters& p, const std::string&) {
  return std::make_unique<CenteredRmsProp>(*p.centered_rms_prop);
}

}  // namespace embedding
}  // namespace tpurt
