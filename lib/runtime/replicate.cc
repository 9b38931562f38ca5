#include "runtime/replicate.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/checked.h"
#include "core/dtype.h"
#include "runtime/tensor_ops.h"

namespace tpurt {
namespace {

// Tensors the runtime made for one call (padded inputs, shard pieces, staged
// outputs), released when the call ends.
class OwnedTensors {
 public:
  explicit OwnedTensors(size_t n = 0) : v_(n, nullptr) {}
  ~OwnedTensors() {
    for (Tensor* t : v_) release(t);
  }
  OwnedTensors(const OwnedTensors&) = delete;
  OwnedTensors& operator=(const OwnedTensors&) = delete;
  Tensor** data() { return v_.data(); }
  Tensor*& operator[](size_t i) { return v_[i]; }
  Tensor* take(size_t i) { return std::exchange(v_[i], nullptr); }
  void reserve(size_t n) { v_.reserve(n); }
  void push_back(Tensor* t) { v_.push_back(t); }  // after reserve: never throws

 private:
  std::vector<Tensor*> v_;
};

void check_counts(tpu_computation_fn computation, int num_inputs, tpu_tensor* const* inputs,
                  int num_outputs, tpu_tensor** outputs) {
  if (computation == nullptr) invalid_argument("argument 'computation' is NULL");
  if (num_inputs < 0) invalid_argument("num_inputs is ", num_inputs, "; it must be >= 0");
  if (num_outputs < 0) invalid_argument("num_outputs is ", num_outputs, "; it must be >= 0");
  if (num_inputs > 0) require_not_null(inputs, "inputs");
  if (num_outputs > 0) require_not_null(outputs, "outputs");
}

// maximum_shapes (spec §4.2): the inputs each replica gets, padded, followed by one
// int32 scalar per padded (input, dimension) with the replica's real size.
struct PaddedInputs {
  std::vector<tpu_tensor*> inputs;  // [replica][input + extras]
  OwnedTensors owned;
  int num_inputs = 0;
};

void pad_inputs(int num_replicas, int num_inputs, tpu_tensor* const* inputs,
                const tpu_shape* maximum_shapes, PaddedInputs* out) {
  auto input = [&](int r, int i) { return inputs[static_cast<int64_t>(r) * num_inputs + i]; };
  struct PaddedDim {
    int input, dim;
  };
  std::vector<PaddedDim> padded;
  std::vector<int64_t> targets(static_cast<size_t>(num_inputs) * TPU_MAX_RANK);
  for (int i = 0; i < num_inputs; ++i) {
    const tpu_shape& max = maximum_shapes[i];
    if (max.rank == -1) continue;  // never padded
    if (max.rank < 0 || max.rank > TPU_MAX_RANK)
      invalid_argument("maximum_shapes[", i, "].rank is ", max.rank, "; it must be in [0, ",
                       TPU_MAX_RANK, "], or -1 to leave input ", i, " unpadded");
    for (int r = 0; r < num_replicas; ++r)
      if (input(r, i)->rank != max.rank)
        invalid_argument("maximum_shapes[", i, "] has rank ", max.rank, " but replica ", r,
                         " input ", i, " is ", describe(input(r, i)));
    int64_t* target = &targets[static_cast<size_t>(i) * TPU_MAX_RANK];
    for (int d = 0; d < max.rank; ++d) {
      if (max.dims[d] < -1)
        invalid_argument("maximum_shapes[", i, "].dims[", d, "] is ", max.dims[d],
                         "; it must be >= 0, or -1 for the largest size");
      int largest = 0;
      bool differs = false;
      for (int r = 0; r < num_replicas; ++r) {
        differs |= input(r, i)->dims[d] != input(0, i)->dims[d];
        if (input(r, i)->dims[d] > input(largest, i)->dims[d]) largest = r;
      }
      target[d] = input(0, i)->dims[d];
      if (!differs) continue;
      const int64_t largest_size = input(largest, i)->dims[d];
      // At least 2: XLA cannot represent a dynamic size of 1.
      target[d] = std::max<int64_t>(max.dims[d] == -1 ? largest_size : max.dims[d], 2);
      if (target[d] < largest_size)
        invalid_argument("replica ", largest, " input ", i, " (", describe(input(largest, i)),
                         ") has size ", largest_size, " in dimension ", d,
                         ", more than maximum_shapes[", i, "].dims[", d, "] = ", max.dims[d]);
      if (largest_size > INT32_MAX)  // the real size travels as an int32 scalar
        invalid_argument("replica ", largest, " input ", i, " (", describe(input(largest, i)),
                         ") has size ", largest_size, " in dimension ", d,
                         ", more than the int32 real-size input of a padded dimension can hold");
      padded.push_back({i, d});
    }
  }
  if (padded.empty()) return;

  const int width = checked_add(num_inputs, static_cast<int>(padded.size()),
                                "the input count with the real-size inputs of padded dimensions");
  out->num_inputs = width;
  out->inputs.resize(static_cast<size_t>(num_replicas) * width);
  out->owned.reserve(out->inputs.size());
  for (int r = 0; r < num_replicas; ++r) {
    tpu_tensor** row = &out->inputs[static_cast<size_t>(r) * width];
    for (int i = 0; i < num_inputs; ++i) {
      Tensor* t = input(r, i);
      const int64_t* target = &targets[static_cast<size_t>(i) * TPU_MAX_RANK];
      const bool pad = maximum_shapes[i].rank != -1 && !std::equal(target, target + t->rank, t->dims);
      row[i] = t;
      if (pad) {
        row[i] = pad_tensor(t, target);
        out->owned.push_back(row[i]);
      }
    }
    for (size_t k = 0; k < padded.size(); ++k) {
      const int32_t size = static_cast<int32_t>(input(r, padded[k].input)->dims[padded[k].dim]);
      Tensor* s = new_tensor_uninitialized(TPU_INT32, nullptr, 0);
      *static_cast<int32_t*>(s->data) = size;
      out->owned.push_back(s);
      row[num_inputs + k] = s;
    }
  }
}

int normalize_axis(int axis, int rank) { return axis < 0 ? axis + rank : axis; }

}  // namespace

void replicate(System& system, tpu_computation_fn computation, void* user_data,
               int num_replicas, int num_inputs, tpu_tensor* const* inputs,
               const tpu_device_assignment* device_assignment, const tpu_shape* maximum_shapes,
               int num_outputs, tpu_tensor** outputs) {
  system.check_can_start_step();
  check_counts(computation, num_inputs, inputs, num_outputs, outputs);
  if (num_replicas < 0) invalid_argument("num_replicas is ", num_replicas, "; it must be >= 0");
  if (num_replicas == 0) return;
  system.check_num_replicas(num_replicas, device_assignment);
  for (int r = 0; r < num_replicas; ++r) {
    for (int i = 0; i < num_inputs; ++i) {
      const Tensor* t = inputs[static_cast<int64_t>(r) * num_inputs + i];
      if (t == nullptr) invalid_argument("replica ", r, " input ", i, " is NULL");
      if (t->dtype != inputs[i]->dtype)
        invalid_argument("Replicas must have matching input types: replica ", r, " input ", i,
                         " is ", dtype_name(t->dtype), " but replica 0's is ",
                         dtype_name(inputs[i]->dtype));
    }
  }
  StepSpec spec(computation, user_data, num_replicas, num_inputs, num_outputs, inputs);
  PaddedInputs padded;
  if (maximum_shapes != nullptr && num_replicas > 1) {
    pad_inputs(num_replicas, num_inputs, inputs, maximum_shapes, &padded);
    if (padded.num_inputs > 0) {
      spec.inputs = padded.inputs.data();
      spec.num_inputs = padded.num_inputs;
    }
  }
  system.run_step(spec, device_assignment, outputs);
}

void shard(System& system, tpu_computation_fn computation, void* user_data, int num_inputs,
           tpu_tensor* const* inputs, int num_shards, const int* input_shard_axes,
           const int* outputs_from_all_shards, const int* output_shard_axes,
           const tpu_device_assignment* device_assignment, int num_outputs,
           tpu_tensor** outputs) {
  system.check_can_start_step();
  check_counts(computation, num_inputs, inputs, num_outputs, outputs);
  if (num_shards <= 0) invalid_argument("num_shards must be a positive integer, got ", num_shards);
  system.check_num_replicas(num_shards, device_assignment);

  OwnedTensors pieces(static_cast<size_t>(num_shards) * num_inputs);
  for (int i = 0; i < num_inputs; ++i) {
    Tensor* t = inputs[i];
    if (t == nullptr) invalid_argument("input ", i, " is NULL");
    const int given = input_shard_axes ? input_shard_axes[i] : 0;
    if (t->rank == 0)
      invalid_argument("input ", i, " is a scalar (", describe(t), ") and cannot be split into ",
                       num_shards, " shards");
    const int axis = normalize_axis(given, t->rank);
    if (axis < 0 || axis >= t->rank)
      invalid_argument("input_shard_axes[", i, "] = ", given, " is out of range for input ", i,
                       " (", describe(t), ")");
    if (t->dims[axis] % num_shards != 0)
      invalid_argument("input ", i, " (", describe(t), ") cannot be split into ", num_shards,
                       " shards along axis ", axis, ": size ", t->dims[axis],
                       " is not divisible by ", num_shards);
    for (int s = 0; s < num_shards; ++s)
      pieces[static_cast<size_t>(s) * num_inputs + i] = split_piece(t, axis, num_shards, s);
  }

  StepSpec spec(computation, user_data, num_shards, num_inputs, num_outputs, pieces.data());
  OwnedTensors staged(static_cast<size_t>(num_shards) * num_outputs);
  system.run_step(spec, device_assignment, staged.data());

  OwnedTensors results(num_outputs);
  std::vector<Tensor*> parts(num_shards);
  for (int o = 0; o < num_outputs; ++o) {
    if (outputs_from_all_shards && !outputs_from_all_shards[o]) {
      results[o] = staged.take(o);  // shard 0's
      continue;
    }
    for (int s = 0; s < num_shards; ++s) {
      parts[s] = staged[static_cast<size_t>(s) * num_outputs + o];
      if (parts[s] == nullptr)
        invalid_argument("shard ", s, " left output ", o,
                         " NULL; outputs gathered from all shards must be tensors");
      if (parts[s]->dtype != parts[0]->dtype || parts[s]->rank != parts[0]->rank)
        invalid_argument("shards have mismatched output shapes: shard 0 output ", o, " is ",
                         describe(parts[0]), " but shard ", s, "'s is ", describe(parts[s]));
    }
    const int rank = parts[0]->rank;
    const int given = output_shard_axes ? output_shard_axes[o] : 0;
    const int axis = normalize_axis(given, rank);
    if (rank > 0 && (axis < 0 || axis >= rank))
      invalid_argument("output_shard_axes[", o, "] = ", given, " is out of range for output ", o,
                       " (", describe(parts[0]), ")");
    // Checked here so that concat_tensors' sum of the sizes cannot overflow.
    int64_t concat_size = rank > 0 ? parts[0]->dims[axis] : 0;
    for (int s = 1; s < num_shards; ++s) {
      for (int d = 0; d < rank; ++d)
        if (d != axis && parts[s]->dims[d] != parts[0]->dims[d])
          invalid_argument("shards have mismatched output shapes: shard 0 output ", o, " is ",
                           describe(parts[0]), " but shard ", s, "'s is ", describe(parts[s]),
                           " (they may differ only along output_shard_axes[", o, "] = ", axis, ")");
      if (rank > 0)
        concat_size = checked_add(concat_size, parts[s]->dims[axis], "dimension ", axis,
                                  " of output ", o, " concatenated from ", num_shards, " shards");
    }
    results[o] = concat_tensors(parts.data(), num_shards, axis);
  }
  for (int o = 0; o < num_outputs; ++o) outputs[o] = results.take(o);
}

}  // namespace tpurt
