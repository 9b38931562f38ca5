// The update rules, one file each: make_<name>(params, table) from the parsed
// OptimizationParameters (its oneof member is set). Each file cites the TensorFlow
// function whose formula and order of operations it follows.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "embedding/optimizer.h"
#include "optimization_parameters.pb-c.h"

namespace tpurt {
namespace embedding {

using OptimizationParameters = Tensorflow__Tpu__OptimizationParameters;

std::unique_ptr<UpdateRule> make_sgd(const OptimizationParameters& p, const std::string& table);
std::unique_ptr<UpdateRule> make_adagrad(const OptimizationParameters& p, const std::string& table);
std::unique_ptr<UpdateRule> make_adagrad_momentum(const OptimizationParameters& p, const std::string& table);
std::unique_ptr<UpdateRule> make_adam(const OptimizationParameters& p, const std::string& table);
std::unique_ptr<UpdateRule> make_ftrl(const OptimizationParameters& p, const std::string& table);
std::unique_ptr<UpdateRule> make_momentum(const OptimizationParameters& p, const std::string& table);
std::unique_ptr<UpdateRule> make_rms_prop(const OptimizationParameters& p, const std::string& table);
std::unique_ptr<UpdateRule> make_centered_rms_prop(const OptimizationParameters& p, const std::string& table);
std::unique_ptr<UpdateRule> make_adadelta(const OptimizationParameters& p, const std::string& table);
std::unique_ptr<UpdateRule> make_proximal_adagrad(const OptimizationParameters& p, const std::string& table);

// TPU_INVALID_ARGUMENT "table 'T': <optimizer>.<field> is <value>; <rule>" unless ok:
// the checks TensorFlow's optimizer classes make (each file says which).
inline void require_param(bool ok, const std::string& table, const char* field, float value, const char* rule) {
  if (!ok) invalid_argument("table '", table, "': ", field, " is ", value, "; ", rule);
}

// A TensorFlow 1.x initial slot value (0 when not set, proto3) or TensorFlow 2's default.
inline float initial_or(float tf1_value, float tf2_default) { return tf1_value != 0 ? tf1_value : tf2_default; }

}  // namespace embedding
}  // namespace tpurt
