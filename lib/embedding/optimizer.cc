#include "embedding/optimizer.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"
#include "embedding/optimizers/rules.h"

namespace tpurt {
namespace embedding {

namespace {

struct ParamsDeleter {
  void operator()(OptimizationParameters* p) const {
    tensorflow__tpu__optimization_parameters__free_unpacked(p, nullptr);
  }
};

ClipRange clip_range(const Tensorflow__Tpu__ClippingLimits* limits) {
  ClipRange r;
  if (limits == nullptr) return r;
  if (limits->lower) r.lower = limits->lower->value;
  if (limits->upper) r.upper = limits->upper->value;
  return r;
}

void clip(float* x, int dim, const ClipRange& r) {
  for (int i = 0; i < dim; ++i) x[i] = std::min(std::max(x[i], r.lower), r.upper);
}

const char* optimizer_name(int field) {
  switch (field) {
    case 3: return "adagrad";
    case 26: return "adagrad_momentum";
    case 19: return "bounded_adagrad";
    case 30: return "frequency_aware_adagrad";
    case 4: return "stochastic_gradient_descent";
    case 5: return "ftrl";
    case 6: return "adam";
    case 8: return "momentum";
    case 29: return "lion";
    case 9: return "rms_prop";
    case 10: return "centered_rms_prop";
    case 11: return "mdl_adagrad_light";
    case 12: return "adadelta";
    case 14: return "proximal_adagrad";
    case 20: return "online_yogi";
    case 21: return "proximal_yogi";
    case 23: return "frequency_estimator";
    case 24: return "user_defined_program";
    case 25: return "assign";
  }
  return "unknown";
}

std::unique_ptr<UpdateRule> make_rule(const OptimizationParameters& p, const std::string& table) {
  switch (p.parameters_case) {
    case TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_STOCHASTIC_GRADIENT_DESCENT:
      return make_sgd(p, table);
    case TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_ADAGRAD:
      return make_adagrad(p, table);
    case TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_ADAGRAD_MOMENTUM:
      return make_adagrad_momentum(p, table);
    case TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_ADAM:
      return make_adam(p, table);
    case TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_FTRL:
      return make_ftrl(p, table);
    case TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_MOMENTUM:
      return make_momentum(p, table);
    case TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_RMS_PROP:
      return make_rms_prop(p, table);
    case TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_CENTERED_RMS_PROP:
      return make_centered_rms_prop(p, table);
    case TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_ADADELTA:
      return make_adadelta(p, table);
    case TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_PROXIMAL_ADAGRAD:
      return make_proximal_adagrad(p, table);
    case TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS__NOT_SET:
      invalid_argument("table '", table, "' has OptimizationParameters without an optimizer");
    default:
      fail(TPU_UNIMPLEMENTED, "table '", table, "' uses the ", optimizer_name(p.parameters_case),
           " optimizer (OptimizationParameters field ", static_cast<int>(p.parameters_case),
           "), which tpurt does not implement");
  }
}

}  // namespace

bool ClipRange::enabled() const { return std::isfinite(lower) || std::isfinite(upper); }

const char* Optimizer::kind_name() const { return optimizer_name(kind_); }

std::unique_ptr<Optimizer> Optimizer::parse(const void* bytes, size_t len, const std::string& table) {
  static const uint8_t kEmpty = 0;
  std::unique_ptr<OptimizationParameters, ParamsDeleter> p(tensorflow__tpu__optimization_parameters__unpack(
      nullptr, len, len ? static_cast<const uint8_t*>(bytes) : &kEmpty));
  if (!p)
    invalid_argument("table '", table, "': optimization_parameters are not a serialized ",
                     "tensorflow.tpu.OptimizationParameters (", len, " bytes)");
  std::unique_ptr<Optimizer> o(new Optimizer());
  o->rule_ = make_rule(*p, table);
  o->kind_ = static_cast<tpu_embedding_optimizer>(p->parameters_case);
  if (p->learning_rate != nullptr &&
      p->learning_rate->learning_rate_case == TENSORFLOW__TPU__LEARNING_RATE__LEARNING_RATE_DYNAMIC) {
    const int tag = p->learning_rate->dynamic ? p->learning_rate->dynamic->tag : 0;
    if (tag < 0) invalid_argument("table '", table, "' has dynamic learning rate tag ", tag, "; it must be >= 0");
    o->dynamic_tag_ = tag;
  } else if (p->learning_rate != nullptr &&
             p->learning_rate->learning_rate_case == TENSORFLOW__TPU__LEARNING_RATE__LEARNING_RATE_CONSTANT) {
    o->constant_lr_ = p->learning_rate->constant;
    if (!std::isfinite(o->constant_lr_))
      invalid_argument("table '", table, "' has learning rate ", o->constant_lr_, "; it must be finite");
  }
  o->weight_clip_ = clip_range(p->clipping_limits);
  o->gradient_clip_ = clip_range(p->gradient_clipping_limits);
  o->weight_decay_ = p->weight_decay_factor;
  o->decay_by_learning_rate_ = p->multiply_weight_decay_factor_by_learning_rate != 0;
  o->slot_names_ = o->rule_->slot_names();
  o->slot_initial_ = o->rule_->slot_initial_values();
  return o;
}

// Order: gradient clipping, weight decay, the update rule, weight clipping.
// gradient_clipping_limits clip "the backward pass gradient before using it for
// updates" (the proto). weight_decay_factor is decoupled weight decay: the proto says
// "see weight_decay_optimizers.py", and multiply_weight_decay_factor_by_learning_rate
// exists "to match the note in DecoupledWeightDecayExtension" there
// (tensorflow/contrib/opt/python/training/weight_decay_optimizers.py,
// DecoupledWeightDecayExtension._decay_weights_op / _decay_weights_sparse_op): the row
// is decayed first, w = w - d * w with d = weight_decay_factor (times the learning rate
// under the flag), and the update rule then runs on the decayed row with the clipped
// gradient (TensorFlow's update op has a control dependency on the decay). The
// gradient is not changed by the decay. clipping_limits clip the updated weights last,
// as every program in tensorflow/core/tpu/kernels/sparse_core_ops_utils.cc does
// (ApplyWeightClippingToTable on the update's result). docs/EMBEDDING.md, "Optimizers",
// says the same.
void Optimizer::apply(float* row, float* const* slots, const float* grad, int dim, float learning_rate,
                      float* scratch) const {
  const float* g = grad;
  if (gradient_clip_.enabled()) {
    std::copy(grad, grad + dim, scratch);
    clip(scratch, dim, gradient_clip_);
    g = scratch;
  }
  if (weight_decay_ != 0) {
    const float decay = decay_by_learning_rate_ ? weight_decay_ * learning_rate : weight_decay_;
    for (int i = 0; i < dim; ++i) row[i] = row[i] - decay * row[i];
  }
  rule_->update(row, slots, g, dim, learning_rate);
  if (weight_clip_.enabled()) clip(row, dim, weight_clip_);
}

}  // namespace embedding
}  // namespace tpurt
