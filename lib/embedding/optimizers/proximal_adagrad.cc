// Proximal Adagrad (FOBOS with Adagrad's rate). TensorFlow publishes no TPU program
// for it; the CPU kernel OptimizationParameters links,
// tensorflow/core/kernels/training_ops.cc ApplyProximalAdagrad<CPUDevice>, operation
// for operation:
//   a = a + g * g
//   r = lr * rsqrt(a)
//   v = w - g * r
//   w = l1 > 0 ? sign(v) * max(|v| - r * l1, 0) / (1 + l2 * r) : v / (1 + l2 * r)
// rsqrt(x) is computed as 1 / sqrt(x) (see adadelta.cc).
#include <algorithm>
#include <cmath>

#include "embedding/optimizers/rules.h"

namespace tpurt {
namespace embedding {
namespace {

float sign(float x) { return x == 0.0f ? 0.0f : (x < 0.0f ? -1.0f : 1.0f); }

class ProximalAdagrad final : public UpdateRule {
 public:
  ProximalAdagrad(float l1, float l2, float initial) : l1_(l1), l2_(l2), initial_(initial) {}
  std::vector<std::string> slot_names() const override { return {"accumulators"}; }
  std::vector<float> slot_initial_values() const override { return {initial_}; }
  void update(float* w, float* const* slots, const float* g, int dim, float lr) const override {
    float* a = slots[0];
    for (int i = 0; i < dim; ++i) {
      a[i] = a[i] + g[i] * g[i];
      const float r = lr * (1.0f / std::sqrt(a[i]));
      const float v = w[i] - g[i] * r;
      const float shrink = 1.0f + l2_ * r;
      w[i] = l1_ > 0.0f ? sign(v) * std::max(std::fabs(v) - r * l1_, 0.0f) / shrink : v / shrink;
    }
  }

 private:
  float l1_, l2_, initial_;
};

}  // namespace

// accumulators start at TensorFlow 1.x's initial_accumulator when set, else at 0.1 (the
// default of TensorFlow 1.x's ProximalAdagradParameters, which refuses an initial
// accumulator <= 0, l1 < 0 and l2 < 0).
std::unique_ptr<UpdateRule> make_proximal_adagrad(const OptimizationParameters& p, const std::string& table) {
  const Tensorflow__Tpu__ProximalAdagradParameters& q = *p.proximal_adagrad;
  require_param(!(q.initial_accumulator < 0), table, "proximal_adagrad.initial_accumulator",
                q.initial_accumulator, "it must be positive");
  require_param(!(q.l1 < 0), table, "proximal_adagrad.l1", q.l1, "it must be >= 0");
  require_param(!(q.l2 < 0), table, "proximal_adagrad.l2", q.l2, "it must be >= 0");
  return std::make_unique<ProximalAdagrad>(q.l1, q.l2, initial_or(q.initial_accumulator, 0.1f));
}

}  // namespace embedding
}  // namespace tpurt
