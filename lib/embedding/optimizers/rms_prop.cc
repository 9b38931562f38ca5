// RMSProp. TensorFlow publishes no TPU program for it; the CPU kernel
// OptimizationParameters links, tensorflow/core/kernels/training_ops.cc
// ApplyRMSProp<CPUDevice>, operation for operation:
//   ms = ms + (g * g - ms) * (1 - rho)
//   mom = mom * momentum + g * lr / sqrt(ms + epsilon)
//   w = w - mom
#include <cmath>

#include "embedding/optimizers/rules.h"

namespace tpurt {
namespace embedding {
namespace {

class RmsProp final : public UpdateRule {
 public:
  explicit RmsProp(const Tensorflow__Tpu__RmsPropParameters& q)
      : rho_(q.rho), momentum_(q.momentum), epsilon_(q.epsilon), initial_ms_(q.initial_ms),
        initial_mom_(q.initial_mom) {}
  std::vector<std::string> slot_names() const override { return {"ms", "mom"}; }
  std::vector<float> slot_initial_values() const override { return {initial_ms_, initial_mom_}; }
  void update(float* w, float* const* slots, const float* g, int dim, float lr) const override {
    float* ms = slots[0];
    float* mom = slots[1];
    for (int i = 0; i < dim; ++i) {
      ms[i] = ms[i] + (g[i] * g[i] - ms[i]) * (1.0f - rho_);
      mom[i] = mom[i] * momentum_ + (g[i] * lr) / std::sqrt(ms[i] + epsilon_);
      w[i] = w[i] - mom[i];
    }
  }

 private:
  float rho_, momentum_, epsilon_, initial_ms_, initial_mom_;
};

}  // namespace

// ms and mom start at TensorFlow 1.x's initial_ms / initial_mom when set, else at 0
// (tf.compat.v1.tpu.experimental's RMSProp slots start at zero).
std::unique_ptr<UpdateRule> make_rms_prop(const OptimizationParameters& p, const std::string&) {
  return std::make_unique<RmsProp>(*p.rms_prop);
}

}  // namespace embedding
}  // namespace tpurt
