// Whole-system checkpoints (tpurt/checkpoint.h): each task writes its shards of every
// embedding table, task 0 the dense tensors and, once every task has reported its files
// through the coordination store, the manifest. Restore validates everything on every
// task, the tasks agree, and only then is any row loaded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tpurt/tensor.h"

namespace tpurt {

class System;

namespace checkpoint {

struct NamedTensor {
  std::string name;
  const tpu_tensor* tensor;
};

void save(System& system, const std::string& dir, int64_t step, const std::vector<NamedTensor>& tensors,
          int64_t timeout_ms, int keep);

// The newest complete checkpoint's step; TPU_NOT_FOUND naming dir if none.
int64_t latest(const std::string& dir);

// step -1: the newest. out[i] gets a new tensor named names[i] (on success only).
int64_t restore(System& system, const std::string& dir, int64_t step, const std::vector<std::string>& names,
                int64_t timeout_ms, std::vector<tpu_tensor*>* out);

}  // namespace checkpoint
}  // namespace tpurt
