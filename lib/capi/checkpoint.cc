// C API: whole-system checkpoints (tpurt/checkpoint.h) over lib/checkpoint/.
#include "checkpoint/checkpoint.h"

#include <set>

#include "capi/api.h"
#include "capi/handles.h"
#include "core/options.h"

using namespace tpurt;

namespace {

constexpr size_t kCheckpointOptionsMinSize = offsetof(tpu_checkpoint_options, keep) + sizeof(int);

struct Resolved {
  int64_t timeout_ms;
  int keep;
};

Resolved resolve(const System& sys, const tpu_checkpoint_options* options) {
  Resolved r{sys.config().collective_timeout_ms, 0};
  if (options == nullptr) return r;
  if (options->struct_size < kCheckpointOptionsMinSize)
    invalid_argument("options->struct_size is ", options->struct_size, "; it must be at least ",
                     kCheckpointOptionsMinSize);
  if (options->timeout_ms < 0) invalid_argument("options->timeout_ms is ", options->timeout_ms, "; it must be >= 0");
  if (options->keep < 0) invalid_argument("options->keep is ", options->keep, "; it must be >= 0");
  if (options->timeout_ms > 0) r.timeout_ms = options->timeout_ms;
  r.keep = options->keep;
  return r;
}

void check_dir(const char* dir) {
  require_not_null(dir, "dir");
  if (*dir == '\0') invalid_argument("argument 'dir' is empty");
}

std::vector<std::string> check_names(const char* const* names, int num, const char* array) {
  if (num < 0) invalid_argument("num_tensors is ", num, "; it must be >= 0");
  if (num > 0) require_not_null(names, "names");
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (int i = 0; i < num; ++i) {
    if (names[i] == nullptr) invalid_argument("names[", i, "] is NULL");
    if (*names[i] == '\0') invalid_argument("names[", i, "] is empty");
    if (!seen.insert(names[i]).second) invalid_argument("names[", i, "] '", names[i], "' is given twice");
    out.emplace_back(names[i]);
  }
  if (num > 0) require_not_null(array, "tensors");
  return out;
}

}  // namespace

TPU_EXPORT tpu_status tpu_checkpoint_options_init(tpu_checkpoint_options* options, size_t struct_size) {
  return guarded([&] {
    require_not_null(options, "options");
    if (struct_size < kCheckpointOptionsMinSize)
      invalid_argument("struct_size is ", struct_size, "; it must be at least ", kCheckpointOptionsMinSize);
    const size_t n = std::min(struct_size, sizeof(tpu_checkpoint_options));
    std::memset(options, 0, n);
    options->struct_size = n;
  });
}

TPU_EXPORT tpu_status tpu_checkpoint_save(tpu_system* system, const char* dir, int64_t step,
                                          const char* const* names, tpu_tensor* const* tensors, int num_tensors,
                                          const tpu_checkpoint_options* options) {
  return guarded([&] {
    System& s = system_of(system);
    s.check_live();
    check_dir(dir);
    if (step < 0) invalid_argument("step is ", step, "; it must be >= 0");
    const std::vector<std::string> n =
        check_names(names, num_tensors, reinterpret_cast<const char*>(tensors));
    std::vector<checkpoint::NamedTensor> named;
    for (int i = 0; i < num_tensors; ++i) {
      if (tensors[i] == nullptr) invalid_argument("tensors[", i, "] is NULL");
      require_live(tensors[i], "tensors[", i, "]");
      named.push_back({n[i], tensors[i]});
    }
    const Resolved r = resolve(s, options);
    checkpoint::save(s, dir, step, named, r.timeout_ms, r.keep);
  });
}

TPU_EXPORT tpu_status tpu_checkpoint_latest(const char* dir, int64_t* step) {
  return guarded([&] {
    check_dir(dir);
    require_not_null(step, "step");
    *step = checkpoint::latest(dir);
  });
}

TPU_EXPORT tpu_status tpu_checkpoint_restore(tpu_system* system, const char* dir, int64_t step,
                                             const char* const* names, tpu_tensor** tensors, int num_tensors,
                                             int64_t* restored_step, const tpu_checkpoint_options* options) {
  return guarded([&] {
    System& s = system_of(system);
    s.check_live();
    check_dir(dir);
    if (step < -1) invalid_argument("step is ", step, "; it must be >= 0, or -1 for the newest");
    const std::vector<std::string> n = check_names(names, num_tensors, reinterpret_cast<const char*>(tensors));
    const Resolved r = resolve(s, options);
    std::vector<tpu_tensor*> out;
    const int64_t got = checkpoint::restore(s, dir, step, n, r.timeout_ms, &out);
    for (int i = 0; i < num_tensors; ++i) tensors[i] = out[i];
    if (restored_step != nullptr) *restored_step = got;
  });
}
