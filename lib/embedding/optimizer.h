// A table's optimizer, from TensorFlow's OptimizationParameters bytes: the learning
// rate, the clipping and weight decay every optimizer shares, and the update of one
// row by its summed gradient. One file per update rule in optimizers/; the order of
// the shared steps around it is written down in optimizer.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "tpurt/embedding.h"

namespace tpurt {
namespace embedding {

// One optimizer's update rule: a pure function of (row, slots, summed gradient, learning
// rate) over `dim` elements: the row is already decayed, the gradient already clipped
// (optimizer.cc).
class UpdateRule {
 public:
  virtual ~UpdateRule() = default;
  // The slot variables, without "parameters", with TensorFlow's names and initial values.
  virtual std::vector<std::string> slot_names() const = 0;
  virtual std::vector<float> slot_initial_values() const = 0;
  // row[dim] and slots[i][dim] are updated in place; grad[dim] is the step's sum.
  virtual void update(float* row, float* const* slots, const float* grad, int dim,
                      float learning_rate) const = 0;
  // Whether every row is updated each step, touched or not (non-lazy Adam): the engine
  // then applies a zero gradient to the untouched rows.
  virtual bool updates_every_row() const { return false; }
};

struct ClipRange {
  float lower = -std::numeric_limits<float>::infinity();
  float upper = std::numeric_limits<float>::infinity();
  bool enabled() const;
};

class Optimizer {
 public:
  // Parses OptimizationParameters bytes for table `table` (named in errors):
  // TPU_INVALID_ARGUMENT for bytes that do not parse or values out of range (a dynamic
  // tag below 0, an optimizer parameter TensorFlow's classes refuse, naming the field
  // and value), TPU_UNIMPLEMENTED naming an optimizer tpurt does not build, and
  // TPU_INVALID_ARGUMENT when no optimizer is set.
  static std::unique_ptr<Optimizer> parse(const void* bytes, size_t len, const std::string& table);

  tpu_embedding_optimizer kind() const { return kind_; }
  const char* kind_name() const;
  // -1: a constant learning rate; else the tag of SendTPUEmbeddingGradients' rates.
  int dynamic_tag() const { return dynamic_tag_; }
  float constant_learning_rate() const { return constant_lr_; }
  const std::vector<std::string>& slot_names() const { return slot_names_; }
  const std::vector<float>& slot_initial_values() const { return slot_initial_; }
  bool updates_every_row() const { return rule_->updates_every_row(); }

  // Applies one row's summed gradient: gradient clipping, weight decay (of the row, not
  // added to the gradient), the update rule, weight clipping. scratch[dim] is the caller's working space.
  void apply(float* row, float* const* slots, const float* grad, int dim, float learning_rate,
             float* scratch) const;

 private:
  tpu_embedding_optimizer kind_ = TPU_EMBEDDING_OPTIMIZER_SGD;
  int dynamic_tag_ = -1;
  float constant_lr_ = 0;
  ClipRange weight_clip_, gradient_clip_;
  float weight_decay_ = 0;
  bool decay_by_learning_rate_ = false;
  std::unique_ptr<UpdateRule> rule_;
  std::vector<std::string> slot_names_;
  std::vector<float> slot_initial_;
};

}  // namespace embedding
}  // namespace tpurt
