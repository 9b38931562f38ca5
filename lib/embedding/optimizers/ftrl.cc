// FTRL. TensorFlow: tensorflow/core/tpu/kernels/sparse_core_ops_utils.cc
// BuildFtrlOptimizerComputation, operation for operation (k = lr_power):
//   n = a + g * g;  dp = pow(n, -k) - pow(a, -k)
//   multiply_linear_by_lr: l = l + lr * g - dp * w
//                          w = (l1 == 0 ? -l : clamp(l, -lr * l1, lr * l1) - l)
//                              / (pow(n, -k) + 2 * lr * l2 + beta)
//   else:                  l = l + g - dp * w / lr
//                          w = (l1 == 0 ? -l : clamp(l, -l1, l1) - l)
//                              / ((pow(n, -k) + beta) / lr + 2 * l2)
//   a = n
// allow_zero_accumulator is read and ignored: TensorFlow's current proto deprecates it
// ("The current implementation ignores this parameter; zero or near-zero accumulator
// values are now always supported"), and its SparseCore program does not take it.
#include <algorithm>
#include <cmath>

#include "embedding/optimizers/rules.h"

namespace tpurt {
namespace embedding {
namespace {

class Ftrl final : public UpdateRule {
 public:
  Ftrl(const Tensorflow__Tpu__FtrlParameters& q, float initial_accum)
      : l1_(q.l1), l2_(q.l2), neg_power_(-q.lr_power), beta_(q.beta), initial_accum_(initial_accum),
        initial_linear_(q.initial_linear), by_lr_(q.multiply_linear_by_lr != 0) {}
  std::vector<std::string> slot_names() const override { return {"accumulators", "linears"}; }
  std::vector<float> slot_initial_values() const override { return {initial_accum_, initial_linear_}; }
  void update(float* w, float* const* slots, const float* g, int dim, float lr) const override {
    float* acc = slots[0];
    float* lin = slots[1];
    for (int i = 0; i < dim; ++i) {
      const float a = acc[i];
      const float n = a + g[i] * g[i];
      const float p_old = std::pow(a, neg_power_);
      const float p_new = std::pow(n, neg_power_);
      const float dp = p_new - p_old;
      float l, numer, denom;
      if (by_lr_) {
        l = lin[i] + lr * g[i] - dp * w[i];
        const float bound = lr * l1_;
        numer = l1_ == 0.0f ? -l : std::min(std::max(l, -bound), bound) - l;
        denom = p_new + 2.0f * lr * l2_ + beta_;
      } else {
        l = lin[i] + g[i] - dp * w[i] / lr;
        numer = l1_ == 0.0f ? -l : std::min(std::max(l, -l1_), l1_) - l;
        denom = (p_new + beta_) / lr + 2.0f * l2_;
      }
      w[i] = numer / denom;
      acc[i] = n;
      lin[i] = l;
    }
  }

 private:
  float l1_, l2_, neg_power_, beta_, initial_accum_, initial_linear_;
  bool by_lr_;
};

}  // namespace

// accumulators start at TensorFlow 1.x's initial_accum when set, else at 0.1 (the
// default of tf.tpu.experimental.embedding.FTRL); linears at initial_linear, else 0.
// TensorFlow 1.x's FtrlParameters refuses lr_power > 0, l1 < 0, l2 < 0 and a negative
// initial accumulator.
std::unique_ptr<UpdateRule> make_ftrl(const OptimizationParameters& p, const std::string& table) {
  const Tensorflow__Tpu__FtrlParameters& q = *p.ftrl;
  require_param(!(q.lr_power > 0), table, "ftrl.lr_power", q.lr_power, "it must be <= 0");
  require_param(!(q.l1 < 0), table, "ftrl.l1", q.l1, "it must be >= 0");
  require_param(!(q.l2 < 0), table, "ftrl.l2", q.l2, "it must be >= 0");
  require_param(!(q.initial_accum < 0), table, "ftrl.initial_accum", q.initial_accum, "it must be >= 0");
  return std::make_unique<Ftrl>(q, initial_or(q.initial_accum, 0.1f));
}

}  // namespace embedding
}  // namespace tpurt
