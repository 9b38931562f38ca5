// The update rules, one file each: make_<name>(params) from the parsed
// OptimizationParameters (its oneof member is set).
#pragma once

#include <memory>

#include "embedding/optimizer.h"
#include "optimization_parameters.pb-c.h"

namespace tpurt {
namespace embedding {

using OptimizationParameters = Tensorflow__Tpu__OptimizationParameters;

std::unique_ptr<UpdateRule> make_sgd(const OptimizationParameters& p);
std::unique_ptr<UpdateRule> make_adagrad(const OptimizationParameters& p);

}  // namespace embedding
}  // namespace tpurt
