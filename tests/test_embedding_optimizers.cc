// The embedding optimizers (lib/embedding/optimizer.h, optimizers/): each against a
// scalar reference of TensorFlow's formula written out here, one row of 6 elements,
// several steps with varied gradients and learning rates, every option.
//
// The references are written from TensorFlow's sources, not from tpurt's files:
// SGD, Adagrad, Adagrad with momentum, Adam and FTRL from the SparseCore update programs
// (tensorflow/core/tpu/kernels/sparse_core_ops_utils.cc, Build*OptimizerComputation),
// the others from the CPU kernels OptimizationParameters links
// (tensorflow/core/kernels/training_ops.cc, Apply*<CPUDevice>). Each evaluates the same
// float operations in the same order as TensorFlow writes them, so the comparison is
// bit for bit: no tolerance is needed (x86-64 without FMA contraction, IEEE single
// precision throughout; std::pow and std::sqrt are the same functions on both sides).
// Where TensorFlow's CPU kernels use Eigen's rsqrt, both sides compute 1 / sqrt(x),
// which is the formula TensorFlow writes; Eigen's vectorized rsqrt may round the last
// bit differently, which no test here can see.
//
// Every optimizer also with weight_decay_factor set (with and without
// multiply_weight_decay_factor_by_learning_rate), against its reference after the
// decoupled decay of TensorFlow's DecoupledWeightDecayExtension (decayed() below).
// Then the shared pipeline: gradient clipping, weight decay, the update, weight
// clipping, in that order; and parse errors.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "embedding/optimizer.h"
#include "optimization_parameters.pb-c.h"
#include "tpu_embedding_configuration.pb-c.h"
#include "tpurt.h"

// After the C++ and library headers: cmocka defines a macro named fail().
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
extern "C" {
#include <cmocka.h>
}

#include "test_util.h"

namespace {

using tpurt::embedding::Optimizer;

constexpr int kDim = 6;
constexpr int kSteps = 7;
const char* kTable = "tbl";

// OptimizationParameters built with protobuf-c's generated code; every sub-message lives
// here so the pointers stay valid until pack().
struct Params {
  Tensorflow__Tpu__OptimizationParameters op = TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__INIT;
  Tensorflow__Tpu__LearningRate lr = TENSORFLOW__TPU__LEARNING_RATE__INIT;
  Tensorflow__Tpu__DynamicLearningRate dyn = TENSORFLOW__TPU__DYNAMIC_LEARNING_RATE__INIT;
  Tensorflow__Tpu__ClippingLimits wclip = TENSORFLOW__TPU__CLIPPING_LIMITS__INIT;
  Tensorflow__Tpu__ClippingLimits gclip = TENSORFLOW__TPU__CLIPPING_LIMITS__INIT;
  Tensorflow__Tpu__FloatValue wlo = TENSORFLOW__TPU__FLOAT_VALUE__INIT, whi = TENSORFLOW__TPU__FLOAT_VALUE__INIT;
  Tensorflow__Tpu__FloatValue glo = TENSORFLOW__TPU__FLOAT_VALUE__INIT, ghi = TENSORFLOW__TPU__FLOAT_VALUE__INIT;
  Tensorflow__Tpu__StochasticGradientDescentParameters sgd =
      TENSORFLOW__TPU__STOCHASTIC_GRADIENT_DESCENT_PARAMETERS__INIT;
  Tensorflow__Tpu__AdagradParameters adagrad = TENSORFLOW__TPU__ADAGRAD_PARAMETERS__INIT;
  Tensorflow__Tpu__AdagradMomentumParameters adagrad_momentum = TENSORFLOW__TPU__ADAGRAD_MOMENTUM_PARAMETERS__INIT;
  Tensorflow__Tpu__AdamParameters adam = TENSORFLOW__TPU__ADAM_PARAMETERS__INIT;
  Tensorflow__Tpu__FtrlParameters ftrl = TENSORFLOW__TPU__FTRL_PARAMETERS__INIT;
  Tensorflow__Tpu__MomentumParameters momentum = TENSORFLOW__TPU__MOMENTUM_PARAMETERS__INIT;
  Tensorflow__Tpu__RmsPropParameters rms_prop = TENSORFLOW__TPU__RMS_PROP_PARAMETERS__INIT;
  Tensorflow__Tpu__CenteredRmsPropParameters centered = TENSORFLOW__TPU__CENTERED_RMS_PROP_PARAMETERS__INIT;
  Tensorflow__Tpu__AdadeltaParameters adadelta = TENSORFLOW__TPU__ADADELTA_PARAMETERS__INIT;
  Tensorflow__Tpu__ProximalAdagradParameters proximal = TENSORFLOW__TPU__PROXIMAL_ADAGRAD_PARAMETERS__INIT;
  Tensorflow__Tpu__BoundedAdagradParameters bounded = TENSORFLOW__TPU__BOUNDED_ADAGRAD_PARAMETERS__INIT;
  Tensorflow__Tpu__LionParameters lion = TENSORFLOW__TPU__LION_PARAMETERS__INIT;

  explicit Params(Tensorflow__Tpu__OptimizationParameters__ParametersCase which) {
    op.learning_rate = &lr;
    lr.learning_rate_case = TENSORFLOW__TPU__LEARNING_RATE__LEARNING_RATE_CONSTANT;
    lr.constant = 0.05f;
    op.parameters_case = which;
    switch (which) {
      case TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_STOCHASTIC_GRADIENT_DESCENT:
        op.stochastic_gradient_descent = &sgd;
        break;
      case TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_ADAGRAD: op.adagrad = &adagrad; break;
      case TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_ADAGRAD_MOMENTUM:
        op.adagrad_momentum = &adagrad_momentum;
        break;
      case TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_ADAM: op.adam = &adam; break;
      case TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_FTRL: op.ftrl = &ftrl; break;
      case TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_MOMENTUM: op.momentum = &momentum; break;
      case TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_RMS_PROP: op.rms_prop = &rms_prop; break;
      case TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_CENTERED_RMS_PROP:
        op.centered_rms_prop = &centered;
        break;
      case TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_ADADELTA: op.adadelta = &adadelta; break;
      case TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_PROXIMAL_ADAGRAD:
        op.proximal_adagrad = &proximal;
        break;
      case TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_BOUNDED_ADAGRAD:
        op.bounded_adagrad = &bounded;
        break;
      case TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_LION: op.lion = &lion; break;
      default: break;
    }
  }
  void dynamic(int tag) {
    lr.learning_rate_case = TENSORFLOW__TPU__LEARNING_RATE__LEARNING_RATE_DYNAMIC;
    lr.dynamic = &dyn;
    dyn.tag = tag;
  }
  void clip_weights(float lo, float hi) {
    wlo.value = lo;
    whi.value = hi;
    wclip.lower = &wlo;
    wclip.upper = &whi;
    op.clipping_limits = &wclip;
  }
  void clip_gradients(float lo, float hi) {
    glo.value = lo;
    ghi.value = hi;
    gclip.lower = &glo;
    gclip.upper = &ghi;
    op.gradient_clipping_limits = &gclip;
  }
  std::vector<uint8_t> pack() const {
    std::vector<uint8_t> out(tensorflow__tpu__optimization_parameters__get_packed_size(&op));
    tensorflow__tpu__optimization_parameters__pack(&op, out.data());
    return out;
  }
  std::unique_ptr<Optimizer> parse() const {
    const std::vector<uint8_t> b = pack();
    return Optimizer::parse(b.data(), b.size(), kTable);
  }
};

// Varied gradients: positive, negative, zero, small and large, different each step.
float grad_at(int step, int i) {
  if ((step + i) % 5 == 3) return 0.0f;
  return static_cast<float>(((i * 7 + step * 13) % 11) - 5) * 0.173f + 0.011f * static_cast<float>(step * (i + 1));
}
// A learning rate that changes each step (as a dynamic rate would).
float lr_at(int step, float base) { return base * (1.0f + 0.25f * static_cast<float>(step % 3)); }
float w0_at(int i) { return 0.3f * static_cast<float>(i) - 0.7f; }

// One element's update by the reference: w and the slots of that element in place.
using Reference = std::function<void(float& w, std::vector<float>& s, float g, float lr)>;

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Runs kSteps steps through Optimizer::apply and through `ref`, one element at a time,
// and requires the row and every slot to be bit-identical after every step.
void check_rule(const char* what, const Params& p, const std::vector<float>& initial, const Reference& ref,
                float base_lr = 0.05f) {
  std::unique_ptr<Optimizer> opt;
  try {
    opt = p.parse();
  } catch (const tpurt::Error& e) {
    CHECK_FAIL("%s: parse failed: %s", what, e.what());
    return;
  }
  const size_t ns = opt->slot_names().size();
  CHECK(opt->slot_initial_values() == initial);
  std::vector<float> w(kDim), scratch(kDim), grad(kDim);
  std::vector<std::vector<float>> slots(ns, std::vector<float>(kDim));
  std::vector<float*> slot_ptrs(ns + 1);
  for (size_t k = 0; k < ns; ++k) {
    std::fill(slots[k].begin(), slots[k].end(), initial[k]);
    slot_ptrs[k] = slots[k].data();
  }
  std::vector<float> rw(kDim);
  std::vector<std::vector<float>> rs(kDim, initial);
  for (int i = 0; i < kDim; ++i) w[i] = rw[i] = w0_at(i);
  for (int step = 0; step < kSteps; ++step) {
    const float lr = lr_at(step, base_lr);
    for (int i = 0; i < kDim; ++i) grad[i] = grad_at(step, i);
    opt->apply(w.data(), slot_ptrs.data(), grad.data(), kDim, lr, scratch.data());
    for (int i = 0; i < kDim; ++i) {
      ref(rw[i], rs[i], grad[i], lr);
      if (!same_bits(w[i], rw[i]))
        CHECK_FAIL("%s: step %d element %d: w %.9g, reference %.9g", what, step, i, w[i], rw[i]);
      for (size_t k = 0; k < ns; ++k)
        if (!same_bits(slots[k][i], rs[i][k]))
          CHECK_FAIL("%s: step %d element %d: slot %s %.9g, reference %.9g", what, step, i,
                     opt->slot_names()[k].c_str(), slots[k][i], rs[i][k]);
    }
  }
  for (int i = 0; i < kDim; ++i) CHECK(std::isfinite(w[i]));
}

std::string label(const char* name, std::initializer_list<float> options) {
  std::string s = name;
  for (float o : options) {
    char buf[32];
    std::snprintf(buf, sizeof buf, " %g", o);
    s += buf;
  }
  return s;
}

// Decoupled weight decay, as TensorFlow's OptimizationParameters.weight_decay_factor
// points to it ("see weight_decay_optimizers.py";
// multiply_weight_decay_factor_by_learning_rate matches "the note in
// DecoupledWeightDecayExtension"): tensorflow/contrib/opt/python/training/
// weight_decay_optimizers.py, DecoupledWeightDecayExtension._decay_weights_op runs
// var.assign_sub(weight_decay * var) and the optimizer's own update runs after it (a
// control dependency), on the decayed variable, with the gradient unchanged. `rule` is
// the optimizer's reference; the decay factor is `factor`, times lr when `by_lr`.
Reference decayed(float factor, bool by_lr, const Reference& rule) {
  return [=](float& w, std::vector<float>& s, float g, float lr) {
    const float d = by_lr ? factor * lr : factor;
    w = w - d * w;
    rule(w, s, g, lr);
  };
}

// check_rule with weight_decay_factor set, with and without
// multiply_weight_decay_factor_by_learning_rate, against decayed(ref); p is left as it was.
void check_decay(const std::string& what, Params& p, const std::vector<float>& initial, const Reference& ref,
                 float base_lr = 0.05f) {
  for (int by_lr : {0, 1}) {
    const float factor = by_lr ? 0.3f : 0.02f;
    p.op.weight_decay_factor = factor;
    p.op.multiply_weight_decay_factor_by_learning_rate = by_lr;
    check_rule((what + (by_lr ? ", weight decay times lr" : ", weight decay")).c_str(), p, initial,
               decayed(factor, by_lr != 0, ref), base_lr);
  }
  p.op.weight_decay_factor = 0;
  p.op.multiply_weight_decay_factor_by_learning_rate = 0;
}

void test_embedding_optimizers__sgd(void** state) {
  Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_STOCHASTIC_GRADIENT_DESCENT);
  std::unique_ptr<Optimizer> opt = p.parse();
  assert_int_equal(opt->kind(), TPU_EMBEDDING_OPTIMIZER_SGD);
  CHECK(opt->slot_names().empty());
  CHECK(opt->dynamic_tag() == -1 && opt->constant_learning_rate() == 0.05f);
  // BuildSgdOptimizerComputation: embedding_table - learning_rate * gradient.
  const Reference ref = [](float& w, std::vector<float>&, float g, float lr) { w = w - lr * g; };
  check_rule("sgd", p, {}, ref);
  check_decay("sgd", p, {}, ref);
}

void test_embedding_optimizers__adagrad(void** state) {
  Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_ADAGRAD);
  std::unique_ptr<Optimizer> opt = p.parse();
  assert_int_equal(opt->kind(), TPU_EMBEDDING_OPTIMIZER_ADAGRAD);
  CHECK(opt->slot_names() == std::vector<std::string>{"accumulators"});
  // BuildAdagradOptimizerComputation: a' = a + g * g; w - lr * g / sqrt(a').
  const Reference ref = [](float& w, std::vector<float>& s, float g, float lr) {
    float& a = s[0];
    a = a + g * g;
    w = w - lr * g / std::sqrt(a);
  };
  // tf.tpu.experimental.embedding.Adagrad's initial_accumulator_value, 0.1 ...
  check_rule("adagrad default", p, {0.1f}, ref);
  // ... or TensorFlow 1.x's initial_accumulator.
  p.adagrad.initial_accumulator = 0.5f;
  check_rule("adagrad initial 0.5", p, {0.5f}, ref);
  check_decay("adagrad initial 0.5", p, {0.5f}, ref);
}

void test_embedding_optimizers__adagrad_momentum(void** state) {
  Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_ADAGRAD_MOMENTUM);
  for (float momentum : {0.0f, 0.9f})
    for (int nesterov : {0, 1})
      for (float exponent : {2.0f, 3.0f})
        for (float beta2 : {1.0f, 0.99f})
          for (float epsilon : {1e-10f, 0.1f}) {
            Tensorflow__Tpu__AdagradMomentumParameters& q = p.adagrad_momentum;
            q.momentum = momentum;
            q.use_nesterov = nesterov;
            q.exponent = exponent;
            q.beta2 = beta2;
            q.epsilon = epsilon;
            std::unique_ptr<Optimizer> opt = p.parse();
            assert_int_equal(opt->kind(), TPU_EMBEDDING_OPTIMIZER_ADAGRAD_MOMENTUM);
            CHECK((opt->slot_names() == std::vector<std::string>{"accumulators", "momenta"}));
            // BuildAdagradMomentumOptimizerComputation, in its order.
            const Reference ref = [=](float& w, std::vector<float>& s, float g, float lr) {
              float& acc = s[0];
              float& mom = s[1];
              if (beta2 == 1.0f)
                acc = acc + g * g;
              else
                acc = beta2 * acc + (1.0f - beta2) * g * g;
              const float k = 1.0f / exponent;
              const float scaled = std::pow(acc + epsilon, -k) * g;
              mom = momentum * mom + scaled;
              if (nesterov)
                w = w - lr * (momentum * mom + scaled);
              else
                w = w - lr * mom;
            };
            const std::string name = label("adagrad_momentum", {momentum, float(nesterov), exponent, beta2, epsilon});
            check_rule(name.c_str(), p, {0.0f, 0.0f}, ref);
            check_decay(name, p, {0.0f, 0.0f}, ref);
          }
}

void test_embedding_optimizers__adam(void** state) {
  Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_ADAM);
  p.adam.beta1 = 0.9f;
  p.adam.beta2 = 0.999f;
  for (float epsilon : {1e-7f, 0.01f})
    for (int sum_inside : {0, 1})
      for (int non_lazy : {0, 1})
        for (float initial : {0.0f, 0.25f}) {
          p.adam.epsilon = epsilon;
          p.adam.use_sum_inside_sqrt = sum_inside;
          p.adam.use_non_lazy_adam = non_lazy;
          p.adam.initial_m = initial;
          p.adam.initial_v = 2 * initial;
          std::unique_ptr<Optimizer> opt = p.parse();
          assert_int_equal(opt->kind(), TPU_EMBEDDING_OPTIMIZER_ADAM);
          CHECK((opt->slot_names() == std::vector<std::string>{"momenta", "velocities"}));
          // Lazy Adam updates the touched rows only; non-lazy Adam every row.
          CHECK(opt->updates_every_row() == (non_lazy != 0));
          // BuildAdamOptimizerComputation, no bias correction.
          const Reference ref = [=](float& w, std::vector<float>& s, float g, float lr) {
            float& m = s[0];
            float& v = s[1];
            m = 0.9f * m + (1.0f - 0.9f) * g;
            v = 0.999f * v + (1.0f - 0.999f) * g * g;
            const float denom = sum_inside ? std::sqrt(v + epsilon * epsilon) + 0.0f : std::sqrt(v + 0.0f) + epsilon;
            w = w - lr * m / denom;
          };
          const std::string name = label("adam", {epsilon, float(sum_inside), float(non_lazy), initial});
          check_rule(name.c_str(), p, {initial, 2 * initial}, ref);
          check_decay(name, p, {initial, 2 * initial}, ref);
        }
  // A zero gradient (an untouched row of non-lazy Adam) still moves the row by momentum.
  p.adam.use_non_lazy_adam = 1;
  p.adam.initial_m = 0;
  p.adam.initial_v = 0;
  std::unique_ptr<Optimizer> opt = p.parse();
  std::vector<float> w(kDim, 1.0f), m(kDim, 0.5f), v(kDim, 0.25f), zero(kDim, 0.0f), scratch(kDim);
  float* slots[] = {m.data(), v.data()};
  opt->apply(w.data(), slots, zero.data(), kDim, 0.1f, scratch.data());
  CHECK(w[0] < 1.0f && m[0] == 0.9f * 0.5f);
}

void test_embedding_optimizers__ftrl(void** state) {
  Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_FTRL);
  for (int by_lr : {0, 1})
    for (float beta : {0.0f, 0.5f})
      for (float l1 : {0.0f, 0.05f})
        for (float l2 : {0.0f, 0.1f})
          for (float power : {-0.5f, -0.3f, 0.0f})
            for (int allow_zero : {0, 1})
              for (float initial : {0.0f, 0.3f}) {
                Tensorflow__Tpu__FtrlParameters& q = p.ftrl;
                q.multiply_linear_by_lr = by_lr;
                q.beta = beta;
                q.l1 = l1;
                q.l2 = l2;
                q.lr_power = power;
                q.allow_zero_accumulator = allow_zero;
                q.initial_accum = initial;
                q.initial_linear = initial / 3;
                std::unique_ptr<Optimizer> opt = p.parse();
                assert_int_equal(opt->kind(), TPU_EMBEDDING_OPTIMIZER_FTRL);
                CHECK((opt->slot_names() == std::vector<std::string>{"accumulators", "linears"}));
                // BuildFtrlOptimizerComputation, in its order. allow_zero_accumulator
                // changes nothing (deprecated and ignored by TensorFlow).
                const Reference ref = [=](float& w, std::vector<float>& s, float g, float lr) {
                  float& acc = s[0];
                  float& lin = s[1];
                  const float old_acc = acc;
                  const float new_acc = old_acc + g * g;
                  const float power_old = std::pow(old_acc, -power);
                  const float power_new = std::pow(new_acc, -power);
                  const float delta_p = power_new - power_old;
                  float numer, denom;
                  if (by_lr) {
                    lin = lin + lr * g - delta_p * w;
                    const float lo = -(lr * l1), hi = lr * l1;
                    numer = l1 == 0.0f ? -lin : (lin < lo ? lo : lin > hi ? hi : lin) - lin;
                    denom = power_new + 2.0f * lr * l2 + beta;
                  } else {
                    lin = lin + g - delta_p * w / lr;
                    numer = l1 == 0.0f ? -lin : (lin < -l1 ? -l1 : lin > l1 ? l1 : lin) - lin;
                    denom = (power_new + beta) / lr + 2.0f * l2;
                  }
                  w = numer / denom;
                  acc = new_acc;
                };
                const std::string name =
                    label("ftrl", {float(by_lr), beta, l1, l2, power, float(allow_zero), initial});
                check_rule(name.c_str(), p, {initial == 0 ? 0.1f : initial, initial / 3}, ref);
                check_decay(name, p, {initial == 0 ? 0.1f : initial, initial / 3}, ref);
              }
  // With l1 large enough every weight is shrunk to exactly zero.
  p.ftrl.l1 = 100.0f;
  p.ftrl.multiply_linear_by_lr = 0;
  std::unique_ptr<Optimizer> opt = p.parse();
  std::vector<float> w(kDim, 0.2f), a(kDim, 0.1f), l(kDim, 0.0f), g(kDim, 0.3f), scratch(kDim);
  float* slots[] = {a.data(), l.data()};
  opt->apply(w.data(), slots, g.data(), kDim, 0.1f, scratch.data());
  for (float x : w) CHECK(x == 0.0f);
}

void test_embedding_optimizers__ftrl_zero_accumulator(void** state) {
  // A zero accumulator (as a load may set it) with a nonzero gradient, as TensorFlow's
  // program computes it: pow(0, 0.5) = 0, no NaN; allow_zero_accumulator changes nothing.
  Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_FTRL);
  p.ftrl.lr_power = -0.5f;
  std::vector<float> first;
  for (int allow_zero : {0, 1}) {
    p.ftrl.allow_zero_accumulator = allow_zero;
    std::unique_ptr<Optimizer> opt = p.parse();
    std::vector<float> w(kDim, 0.0f), a(kDim, 0.0f), l(kDim, 0.0f), g(kDim, 0.5f), scratch(kDim);
    float* slots[] = {a.data(), l.data()};
    opt->apply(w.data(), slots, g.data(), kDim, 0.1f, scratch.data());
    // a = 0.25, l = 0.5 - (0.5 - 0) * 0 / 0.1 = 0.5, w = -0.5 / (0.5 / 0.1) = -0.1.
    CHECK(a[0] == 0.25f && l[0] == 0.5f && w[0] == -0.5f / (0.5f / 0.1f));
    if (allow_zero)
      CHECK(w == first);
    else
      first = w;
  }
}

void test_embedding_optimizers__momentum(void** state) {
  Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_MOMENTUM);
  for (float momentum : {0.0f, 0.9f})
    for (int nesterov : {0, 1})
      for (float initial : {0.0f, 0.2f}) {
        p.momentum.momentum = momentum;
        p.momentum.use_nesterov = nesterov;
        p.momentum.initial_accum = initial;
        std::unique_ptr<Optimizer> opt = p.parse();
        assert_int_equal(opt->kind(), TPU_EMBEDDING_OPTIMIZER_MOMENTUM);
        CHECK(opt->slot_names() == std::vector<std::string>{"momenta"});
        // ApplyMomentum<CPUDevice>: accum = accum * momentum + grad;
        // var -= grad * lr + accum * momentum * lr (Nesterov) or var -= accum * lr.
        const Reference ref = [=](float& w, std::vector<float>& s, float g, float lr) {
          float& accum = s[0];
          accum = accum * momentum + g;
          const float step = nesterov ? g * lr + accum * momentum * lr : accum * lr;
          w -= step;
        };
        const std::string name = label("momentum", {momentum, float(nesterov), initial});
        check_rule(name.c_str(), p, {initial}, ref);
        check_decay(name, p, {initial}, ref);
      }
}

void test_embedding_optimizers__rms_prop(void** state) {
  Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_RMS_PROP);
  for (float rho : {0.9f, 0.5f})
    for (float momentum : {0.0f, 0.7f})
      for (float epsilon : {1e-6f, 0.1f})
        for (float initial : {0.0f, 0.4f}) {
          Tensorflow__Tpu__RmsPropParameters& q = p.rms_prop;
          q.rho = rho;
          q.momentum = momentum;
          q.epsilon = epsilon;
          q.initial_ms = initial;
          q.initial_mom = initial / 2;
          std::unique_ptr<Optimizer> opt = p.parse();
          assert_int_equal(opt->kind(), TPU_EMBEDDING_OPTIMIZER_RMS_PROP);
          CHECK((opt->slot_names() == std::vector<std::string>{"ms", "mom"}));
          // ApplyRMSProp<CPUDevice>: ms += (grad^2 - ms) * (1 - rho);
          // mom = mom * momentum + (grad * lr) / sqrt(ms + epsilon); var -= mom.
          const Reference ref = [=](float& w, std::vector<float>& s, float g, float lr) {
            float& ms = s[0];
            float& mom = s[1];
            ms += (g * g - ms) * (1.0f - rho);
            mom = mom * momentum + (g * lr) / std::sqrt(ms + epsilon);
            w -= mom;
          };
          const std::string name = label("rms_prop", {rho, momentum, epsilon, initial});
          check_rule(name.c_str(), p, {initial, initial / 2}, ref);
          check_decay(name, p, {initial, initial / 2}, ref);
        }
}

void test_embedding_optimizers__centered_rms_prop(void** state) {
  Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_CENTERED_RMS_PROP);
  for (float rho : {0.9f, 0.5f})
    for (float momentum : {0.0f, 0.7f})
      for (float epsilon : {1e-6f, 0.1f})
        for (float initial : {0.0f, 0.4f}) {
          Tensorflow__Tpu__CenteredRmsPropParameters& q = p.centered;
          q.rho = rho;
          q.momentum = momentum;
          q.epsilon = epsilon;
          q.initial_ms = initial;
          q.initial_mom = initial / 2;
          q.initial_mg = initial / 4;
          std::unique_ptr<Optimizer> opt = p.parse();
          assert_int_equal(opt->kind(), TPU_EMBEDDING_OPTIMIZER_CENTERED_RMS_PROP);
          CHECK((opt->slot_names() == std::vector<std::string>{"ms", "mom", "mg"}));
          // ApplyCenteredRMSProp<CPUDevice>.
          const Reference ref = [=](float& w, std::vector<float>& s, float g, float lr) {
            float& ms = s[0];
            float& mom = s[1];
            float& mg = s[2];
            ms += (g * g - ms) * (1.0f - rho);
            mg += (g - mg) * (1.0f - rho);
            const float denom = (ms - mg * mg) + epsilon;
            mom = mom * momentum + (g * lr) / std::sqrt(denom);
            w -= mom;
          };
          const std::string name = label("centered_rms_prop", {rho, momentum, epsilon, initial});
          check_rule(name.c_str(), p, {initial, initial / 2, initial / 4}, ref);
          check_decay(name, p, {initial, initial / 2, initial / 4}, ref);
        }
}

void test_embedding_optimizers__adadelta(void** state) {
  Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_ADADELTA);
  for (float rho : {0.95f, 0.5f})
    for (float epsilon : {1e-6f, 0.01f})
      for (float initial : {0.0f, 0.3f}) {
        p.adadelta.rho = rho;
        p.adadelta.epsilon = epsilon;
        p.adadelta.initial_accumulator = initial;
        p.adadelta.initial_update = initial / 3;
        std::unique_ptr<Optimizer> opt = p.parse();
        assert_int_equal(opt->kind(), TPU_EMBEDDING_OPTIMIZER_ADADELTA);
        CHECK((opt->slot_names() == std::vector<std::string>{"accumulators", "updates"}));
        // ApplyAdadelta<CPUDevice>: var is updated before accum_update.
        const Reference ref = [=](float& w, std::vector<float>& s, float g, float lr) {
          float& accum = s[0];
          float& accum_update = s[1];
          accum = accum * rho + g * g * (1.0f - rho);
          const float rsqrt = 1.0f / std::sqrt(accum + epsilon);
          const float update = std::sqrt(accum_update + epsilon) * rsqrt * g;
          w -= update * lr;
          accum_update = accum_update * rho + update * update * (1.0f - rho);
        };
        const std::string name = label("adadelta", {rho, epsilon, initial});
        check_rule(name.c_str(), p, {initial, initial / 3}, ref, 1.0f);
        check_decay(name, p, {initial, initial / 3}, ref, 1.0f);
      }
}

void test_embedding_optimizers__proximal_adagrad(void** state) {
  Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_PROXIMAL_ADAGRAD);
  for (float l1 : {0.0f, 0.05f, 2.0f})
    for (float l2 : {0.0f, 0.1f})
      for (float initial : {0.0f, 0.5f}) {
        p.proximal.l1 = l1;
        p.proximal.l2 = l2;
        p.proximal.initial_accumulator = initial;
        std::unique_ptr<Optimizer> opt = p.parse();
        assert_int_equal(opt->kind(), TPU_EMBEDDING_OPTIMIZER_PROXIMAL_ADAGRAD);
        CHECK(opt->slot_names() == std::vector<std::string>{"accumulators"});
        // ApplyProximalAdagrad<CPUDevice>.
        const Reference ref = [=](float& w, std::vector<float>& s, float g, float lr) {
          float& accum = s[0];
          accum += g * g;
          const float learning_rate = lr * (1.0f / std::sqrt(accum));
          const float prox = w - g * learning_rate;
          if (l1 > 0) {
            const float sgn = prox > 0 ? 1.0f : prox < 0 ? -1.0f : 0.0f;
            const float mag = std::fabs(prox) - learning_rate * l1;
            w = sgn * (mag > 0 ? mag : 0.0f) / (1.0f + l2 * learning_rate);
          } else {
            w = prox / (1.0f + l2 * learning_rate);
          }
        };
        const std::string name = label("proximal_adagrad", {l1, l2, initial});
        check_rule(name.c_str(), p, {initial == 0 ? 0.1f : initial}, ref);
        check_decay(name, p, {initial == 0 ? 0.1f : initial}, ref);
      }
}

// Gradient clipping, weight decay of the row, the update on the decayed row with the
// clipped gradient, then weight clipping.
void test_embedding_optimizers__clipping_and_weight_decay_order(void** state) {
  for (int by_lr : {0, 1}) {
    Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_ADAGRAD);
    p.clip_gradients(-0.4f, 0.3f);
    p.clip_weights(-0.6f, 0.5f);
    p.op.weight_decay_factor = 0.2f;
    p.op.multiply_weight_decay_factor_by_learning_rate = by_lr;
    const Reference ref = [=](float& w, std::vector<float>& s, float g, float lr) {
      const float clipped = g < -0.4f ? -0.4f : g > 0.3f ? 0.3f : g;
      const float decay = by_lr ? 0.2f * lr : 0.2f;
      w = w - decay * w;
      float& a = s[0];
      a = a + clipped * clipped;
      w = w - lr * clipped / std::sqrt(a);
      w = w < -0.6f ? -0.6f : w > 0.5f ? 0.5f : w;
    };
    check_rule(by_lr ? "pipeline, decay times lr" : "pipeline", p, {0.1f}, ref, 0.5f);
  }
  // The decay does not reach the gradient: Adagrad, lr 1, w = 2, g = 1, decay 0.5,
  // accumulator 0. Decoupled: w = 2 - 1 = 1, a = 1, w = 1 - 1/1 = 0. Were the decay added
  // to the gradient (g' = 1 + 0.5*2 = 2) the accumulator would be 4 and w = 1.
  {
    Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_ADAGRAD);
    p.op.weight_decay_factor = 0.5f;
    std::unique_ptr<Optimizer> opt = p.parse();
    float w = 2.0f, a = 0.0f, g = 1.0f, scratch;
    float* slots[] = {&a};
    opt->apply(&w, slots, &g, 1, 1.0f, &scratch);
    CHECK(a == 1.0f && w == 0.0f);
  }
  // Gradient limits clip the summed gradient alone, weight limits the updated row: SGD,
  // lr 1, w = 1, g = 2, gradient limit 1, decay 0.5, weight limits [-10, 0.9]:
  // w = 1 - 0.5 = 0.5, then 0.5 - 1 = -0.5.
  Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_STOCHASTIC_GRADIENT_DESCENT);
  p.clip_gradients(-1.0f, 1.0f);
  p.clip_weights(-10.0f, 0.9f);
  p.op.weight_decay_factor = 0.5f;
  std::unique_ptr<Optimizer> opt = p.parse();
  float w[2] = {1.0f, 0.5f}, g[2] = {2.0f, -3.0f}, scratch[2];
  opt->apply(w, nullptr, g, 2, 1.0f, scratch);
  CHECK(w[0] == -0.5f);
  // Second element: w = 0.5 - 0.25 = 0.25, g clipped to -1, w = 1.25, clipped to 0.9.
  CHECK(w[1] == 0.9f);
  // The caller's gradient is not written.
  CHECK(g[0] == 2.0f && g[1] == -3.0f);
  // Only the lower or the upper limit set: the other side is unbounded.
  Params q(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_STOCHASTIC_GRADIENT_DESCENT);
  q.clip_weights(-1.0f, 0.0f);
  q.wclip.upper = nullptr;
  opt = q.parse();
  float w2[2] = {0.0f, 0.0f}, g2[2] = {-5.0f, 5.0f};
  opt->apply(w2, nullptr, g2, 2, 1.0f, scratch);
  CHECK(w2[0] == 5.0f && w2[1] == -1.0f);
}

// The smallest case of issue 29: one SGD element, lr 0.1, weight_decay_factor 0.01, w 0.5,
// g 0.1. DecoupledWeightDecayExtension: w = 0.5 - 0.01 * 0.5 = 0.495, then SGD:
// 0.495 - 0.1 * 0.1 = 0.485 (coupled decay, g + d * w, would give 0.4895). With
// multiply_weight_decay_factor_by_learning_rate the factor is 0.01 * 0.1:
// w = 0.5 - 0.0005 = 0.4995, then 0.4895.
void test_embedding_optimizers__weight_decay_is_decoupled(void** state) {
  Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_STOCHASTIC_GRADIENT_DESCENT);
  p.op.weight_decay_factor = 0.01f;
  for (int by_lr : {0, 1}) {
    p.op.multiply_weight_decay_factor_by_learning_rate = by_lr;
    std::unique_ptr<Optimizer> opt = p.parse();
    float w = 0.5f, g = 0.1f, scratch;
    opt->apply(&w, nullptr, &g, 1, 0.1f, &scratch);
    const float d = by_lr ? 0.01f * 0.1f : 0.01f;
    float want = 0.5f - d * 0.5f;
    want = want - 0.1f * 0.1f;
    if (!same_bits(w, want)) CHECK_FAIL("by_lr %d: w %.9g, expected %.9g", by_lr, w, want);
    CHECK(std::fabs(w - (by_lr ? 0.4895f : 0.485f)) < 1e-6f);
  }
}

void test_embedding_optimizers__learning_rate(void** state) {
  Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_ADAGRAD);
  p.dynamic(2);
  std::unique_ptr<Optimizer> opt = p.parse();
  CHECK(opt->dynamic_tag() == 2);
  p.lr.constant = 0.25f;
  p.lr.learning_rate_case = TENSORFLOW__TPU__LEARNING_RATE__LEARNING_RATE_CONSTANT;
  opt = p.parse();
  CHECK(opt->dynamic_tag() == -1 && opt->constant_learning_rate() == 0.25f);
}

// fn() throws `code` whose message holds every fragment.
void expect_error(const std::function<void()>& fn, tpu_status code, std::initializer_list<const char*> fragments,
                  int line) {
  try {
    fn();
  } catch (const tpurt::Error& e) {
    bool ok = e.code() == code;
    for (const char* f : fragments) ok = ok && e.message().find(f) != std::string::npos;
    if (!ok) tpurt_test_failed_(__FILE__, line, "gave %s \"%s\"", tpu_status_name(e.code()), e.what());
    return;
  }
  tpurt_test_failed_(__FILE__, line, "succeeded; expected %s", tpu_status_name(code));
}
#define EXPECT_ERROR(call, code, ...) expect_error([&] { call; }, code, {__VA_ARGS__}, __LINE__)

void test_embedding_optimizers__parse_errors(void** state) {
  const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff};
  EXPECT_ERROR(Optimizer::parse(garbage, sizeof garbage, kTable), TPU_INVALID_ARGUMENT, "'tbl'",
               "not a serialized", "4 bytes");
  EXPECT_ERROR(Optimizer::parse(nullptr, 0, kTable), TPU_INVALID_ARGUMENT, "'tbl'", "without an optimizer");
  Params bounded(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_BOUNDED_ADAGRAD);
  EXPECT_ERROR(bounded.parse(), TPU_UNIMPLEMENTED, "'tbl'", "bounded_adagrad", "field 19");
  Params lion(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_LION);
  EXPECT_ERROR(lion.parse(), TPU_UNIMPLEMENTED, "'tbl'", "lion", "field 29");
  Params neg(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_STOCHASTIC_GRADIENT_DESCENT);
  neg.dynamic(-1);
  EXPECT_ERROR(neg.parse(), TPU_INVALID_ARGUMENT, "'tbl'", "tag -1");
}

// The values TensorFlow's optimizer classes refuse, each named with its table.
void test_embedding_optimizers__refused_parameters(void** state) {
  Params adagrad(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_ADAGRAD);
  adagrad.adagrad.initial_accumulator = -1.0f;
  EXPECT_ERROR(adagrad.parse(), TPU_INVALID_ARGUMENT, "'tbl'", "adagrad.initial_accumulator is -1");

  Params am(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_ADAGRAD_MOMENTUM);
  am.adagrad_momentum.exponent = 2;
  EXPECT_ERROR(am.parse(), TPU_INVALID_ARGUMENT, "'tbl'", "adagrad_momentum.epsilon is 0");
  am.adagrad_momentum.epsilon = 1e-8f;
  am.adagrad_momentum.exponent = -2;
  EXPECT_ERROR(am.parse(), TPU_INVALID_ARGUMENT, "'tbl'", "adagrad_momentum.exponent is -2");

  Params adam(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_ADAM);
  adam.adam.beta1 = 0.9f;
  adam.adam.beta2 = 0.999f;
  EXPECT_ERROR(adam.parse(), TPU_INVALID_ARGUMENT, "'tbl'", "adam.epsilon is 0");
  adam.adam.epsilon = 1e-7f;
  adam.adam.beta1 = 1.0f;
  EXPECT_ERROR(adam.parse(), TPU_INVALID_ARGUMENT, "'tbl'", "adam.beta1 is 1");
  adam.adam.beta1 = 0.9f;
  adam.adam.beta2 = -0.5f;
  EXPECT_ERROR(adam.parse(), TPU_INVALID_ARGUMENT, "'tbl'", "adam.beta2 is -0.5");

  Params ftrl(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_FTRL);
  ftrl.ftrl.lr_power = 0.5f;
  EXPECT_ERROR(ftrl.parse(), TPU_INVALID_ARGUMENT, "'tbl'", "ftrl.lr_power is 0.5");
  ftrl.ftrl.lr_power = -0.5f;
  ftrl.ftrl.l1 = -1;
  EXPECT_ERROR(ftrl.parse(), TPU_INVALID_ARGUMENT, "'tbl'", "ftrl.l1 is -1");
  ftrl.ftrl.l1 = 0;
  ftrl.ftrl.l2 = -2;
  EXPECT_ERROR(ftrl.parse(), TPU_INVALID_ARGUMENT, "'tbl'", "ftrl.l2 is -2");

  Params prox(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_PROXIMAL_ADAGRAD);
  prox.proximal.l1 = -0.25f;
  EXPECT_ERROR(prox.parse(), TPU_INVALID_ARGUMENT, "'tbl'", "proximal_adagrad.l1 is -0.25");
}

// ---- Through the engine: a system's table trained by each optimizer ----------------
// Two replicas on two cores, a table of 5 rows x 4 (DIV: rows 0-2 on core 0, 3-4 on
// core 1), one feature of one sample per replica, sum combiner: replica 0 looks up row
// 1, replica 1 rows 1 and 3. Row 1's gradient is the sum of both replicas', row 3's
// replica 1's. After 3 steps every variable of every row (retrieved under its
// TensorFlow name) equals Optimizer::apply run here on the same gradients; under
// non-lazy Adam the untouched rows moved by a zero gradient, else they did not move.
constexpr int kRows = 5, kWidth = 4, kEngineSteps = 3;

float engine_grad(int step, int replica, int j) { return grad_at(2 * step + replica, j + 1); }

struct EngineStep {
  int step = 0;
  bool fail_after_send = false;  // the computation fails after its updates are made
};

tpu_status engine_computation(tpu_replica_context* ctx, tpu_tensor* const*, int, tpu_tensor**, int, void* ud) {
  const int step = static_cast<EngineStep*>(ud)->step;
  int replica = 0;
  tpu_status st = tpu_replica_context_replica_id(ctx, &replica);
  if (st != TPU_OK) return st;
  const int64_t ids0[] = {1}, ids1[] = {1, 3};
  const int64_t splits0[] = {0, 1}, splits1[] = {0, 2};
  tpu_embedding_feature_batch batch = {};
  batch.feature = 0;
  batch.ids = replica == 0 ? ids0 : ids1;
  batch.num_ids = replica == 0 ? 1 : 2;
  batch.row_splits = replica == 0 ? splits0 : splits1;
  batch.num_row_splits = 2;
  batch.combiner = TPU_EMBEDDING_COMBINER_SUM;
  if ((st = tpu_embedding_enqueue(ctx, &batch, 1)) != TPU_OK) return st;
  tpu_tensor* activation = nullptr;
  if ((st = tpu_embedding_recv_activations(ctx, &activation, 1)) != TPU_OK) return st;
  tpu_tensor_release(activation);
  float g[kWidth];
  for (int j = 0; j < kWidth; ++j) g[j] = engine_grad(step, replica, j);
  const int64_t dims[2] = {1, kWidth};
  tpu_tensor* gradient = nullptr;
  if ((st = tpu_tensor_create(TPU_FLOAT, dims, 2, g, sizeof g, &gradient)) != TPU_OK) return st;
  st = tpu_embedding_send_gradients(ctx, &gradient, 1, nullptr, 0);
  tpu_tensor_release(gradient);
  if (st == TPU_OK && static_cast<EngineStep*>(ud)->fail_after_send && replica == 1) return TPU_DATA_LOSS;
  return st;
}

void check_engine(const char* what, const Params& p) {
  const std::vector<uint8_t> opt_bytes = p.pack();
  Tensorflow__Tpu__TPUEmbeddingConfiguration__TableDescriptor table =
      TENSORFLOW__TPU__TPUEMBEDDING_CONFIGURATION__TABLE_DESCRIPTOR__INIT;
  table.name = const_cast<char*>(kTable);
  table.vocabulary_size = kRows;
  table.dimension = kWidth;
  table.optimization_parameters.data = const_cast<uint8_t*>(opt_bytes.data());
  table.optimization_parameters.len = opt_bytes.size();
  Tensorflow__Tpu__TPUEmbeddingConfiguration__FeatureDescriptor feature =
      TENSORFLOW__TPU__TPUEMBEDDING_CONFIGURATION__FEATURE_DESCRIPTOR__INIT;
  int32_t shape[] = {1};
  feature.name = const_cast<char*>("f");
  feature.table_id = 0;
  feature.n_input_shape = 1;
  feature.input_shape = shape;
  Tensorflow__Tpu__TPUEmbeddingConfiguration config = TENSORFLOW__TPU__TPUEMBEDDING_CONFIGURATION__INIT;
  Tensorflow__Tpu__TPUEmbeddingConfiguration__TableDescriptor* tables[] = {&table};
  Tensorflow__Tpu__TPUEmbeddingConfiguration__FeatureDescriptor* features[] = {&feature};
  config.n_table_descriptor = 1;
  config.table_descriptor = tables;
  config.n_feature_descriptor = 1;
  config.feature_descriptor = features;
  config.mode = TENSORFLOW__TPU__TPUEMBEDDING_CONFIGURATION__MODE__TRAINING;
  std::vector<uint8_t> bytes(tensorflow__tpu__tpuembedding_configuration__get_packed_size(&config));
  tensorflow__tpu__tpuembedding_configuration__pack(&config, bytes.data());

  tpu_system_options options = TPU_SYSTEM_OPTIONS_INIT;
  options.num_cores = 2;
  options.embedding_config = bytes.data();
  options.embedding_config_len = bytes.size();
  tpu_system* system = nullptr;
  CHECK_OK(tpu_system_init(&options, &system));

  // Here: the same optimizer applied to the same rows and gradients.
  std::unique_ptr<Optimizer> opt = p.parse();
  const int nv = 1 + static_cast<int>(opt->slot_names().size());
  std::vector<std::vector<float>> vars(nv, std::vector<float>(kRows * kWidth));
  for (int i = 0; i < kRows * kWidth; ++i) vars[0][i] = 0.1f * static_cast<float>(i % 7) - 0.25f;
  for (int v = 1; v < nv; ++v) std::fill(vars[v].begin(), vars[v].end(), opt->slot_initial_values()[v - 1]);
  CHECK_OK(tpu_embedding_load(system, 0, 0, 0, kRows, vars[0].data(), vars[0].size()));
  for (int v = 0; v < nv; ++v) {
    char name[64];
    size_t len = 0;
    CHECK_OK(tpu_embedding_variable_name(system, 0, v, name, sizeof name, &len));
    CHECK(std::string(name) == (v == 0 ? std::string("parameters") : opt->slot_names()[v - 1]));
  }
  EngineStep step;
  std::vector<float> scratch(kWidth), zero(kWidth, 0.0f);
  for (step.step = 0; step.step < kEngineSteps; ++step.step) {
    CHECK_OK(tpu_replicate(system, engine_computation, &step, 2, 0, nullptr, 0, nullptr, nullptr));
    for (int row = 0; row < kRows; ++row) {
      std::vector<float> g(kWidth, 0.0f);
      for (int j = 0; j < kWidth; ++j) {
        if (row == 1) g[j] = engine_grad(step.step, 0, j) + engine_grad(step.step, 1, j);
        if (row == 3) g[j] = engine_grad(step.step, 1, j);
      }
      if (row != 1 && row != 3 && !opt->updates_every_row()) continue;
      std::vector<float*> slots(nv);
      for (int v = 1; v < nv; ++v) slots[v - 1] = vars[v].data() + row * kWidth;
      opt->apply(vars[0].data() + row * kWidth, slots.data(), row == 1 || row == 3 ? g.data() : zero.data(), kWidth,
                 p.lr.constant, scratch.data());
    }
  }
  // A step that fails after the rows were updated in place puts every variable of
  // them back (a row's variables lie side by side in the table: all of them, no more).
  step.fail_after_send = true;
  CHECK(tpu_replicate(system, engine_computation, &step, 2, 0, nullptr, 0, nullptr, nullptr) == TPU_DATA_LOSS);
  for (int v = 0; v < nv; ++v) {
    std::vector<float> got(kRows * kWidth);
    size_t count = 0;
    CHECK_OK(tpu_embedding_retrieve(system, 0, v, 0, kRows, got.data(), got.size(), &count));
    for (int i = 0; i < kRows * kWidth; ++i)
      if (!same_bits(got[i], vars[v][i]))
        CHECK_FAIL("%s: variable %d row %d element %d: engine %.9g, expected %.9g", what, v, i / kWidth,
                   i % kWidth, got[i], vars[v][i]);
  }
  CHECK_OK(tpu_system_release(system));
}

void test_embedding_optimizers__through_the_engine(void** state) {
  {
    Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_ADAM);
    p.adam.beta1 = 0.9f;
    p.adam.beta2 = 0.999f;
    p.adam.epsilon = 1e-7f;
    p.adam.use_sum_inside_sqrt = 1;
    check_engine("adam lazy", p);
    p.adam.use_non_lazy_adam = 1;
    p.op.weight_decay_factor = 0.01f;
    check_engine("adam non-lazy, weight decay", p);
  }
  {
    Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_FTRL);
    p.ftrl.lr_power = -0.5f;
    p.ftrl.l1 = 0.01f;
    p.ftrl.l2 = 0.1f;
    p.ftrl.beta = 0.2f;
    p.ftrl.multiply_linear_by_lr = 1;
    p.clip_gradients(-0.5f, 0.5f);
    p.clip_weights(-0.3f, 0.3f);
    check_engine("ftrl, clipping", p);
  }
  {
    Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_ADAGRAD_MOMENTUM);
    p.adagrad_momentum.momentum = 0.9f;
    p.adagrad_momentum.use_nesterov = 1;
    p.adagrad_momentum.exponent = 2;
    p.adagrad_momentum.beta2 = 1;
    p.adagrad_momentum.epsilon = 1e-10f;
    check_engine("adagrad_momentum", p);
  }
  {
    Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_MOMENTUM);
    p.momentum.momentum = 0.9f;
    check_engine("momentum", p);
  }
  {
    Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_RMS_PROP);
    p.rms_prop.rho = 0.9f;
    p.rms_prop.momentum = 0.5f;
    p.rms_prop.epsilon = 1e-6f;
    check_engine("rms_prop", p);
  }
  {
    Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_CENTERED_RMS_PROP);
    p.centered.rho = 0.9f;
    p.centered.momentum = 0.5f;
    p.centered.epsilon = 1e-6f;
    check_engine("centered_rms_prop", p);
  }
  {
    Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_ADADELTA);
    p.adadelta.rho = 0.95f;
    p.adadelta.epsilon = 1e-6f;
    check_engine("adadelta", p);
  }
  {
    Params p(TENSORFLOW__TPU__OPTIMIZATION_PARAMETERS__PARAMETERS_PROXIMAL_ADAGRAD);
    p.proximal.l1 = 0.01f;
    p.proximal.l2 = 0.05f;
    check_engine("proximal_adagrad", p);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_embedding_optimizers__sgd),
      cmocka_unit_test(test_embedding_optimizers__adagrad),
      cmocka_unit_test(test_embedding_optimizers__adagrad_momentum),
      cmocka_unit_test(test_embedding_optimizers__adam),
      cmocka_unit_test(test_embedding_optimizers__ftrl),
      cmocka_unit_test(test_embedding_optimizers__ftrl_zero_accumulator),
      cmocka_unit_test(test_embedding_optimizers__momentum),
      cmocka_unit_test(test_embedding_optimizers__rms_prop),
      cmocka_unit_test(test_embedding_optimizers__centered_rms_prop),
      cmocka_unit_test(test_embedding_optimizers__adadelta),
      cmocka_unit_test(test_embedding_optimizers__proximal_adagrad),
      cmocka_unit_test(test_embedding_optimizers__clipping_and_weight_decay_order),
      cmocka_unit_test(test_embedding_optimizers__weight_decay_is_decoupled),
      cmocka_unit_test(test_embedding_optimizers__learning_rate),
      cmocka_unit_test(test_embedding_optimizers__parse_errors),
      cmocka_unit_test(test_embedding_optimizers__refused_parameters),
      cmocka_unit_test(test_embedding_optimizers__through_the_engine),
  };
  return RUN_TESTS(argc, argv, tests, nullptr, nullptr);
}
