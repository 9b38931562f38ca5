#include "runtime/shard_gather.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "collectives/communicator.h"
#include "core/checked.h"
#include "core/dtype.h"
#include "core/tensor_ops.h"
#include "runtime/replica_context.h"

namespace tpurt {
namespace {

std::string describe(const ShardOutputMeta& m) {
  return str_cat(dtype_name(m.dtype), shape_string(m.dims, m.rank));
}

tpu_status fail_participant(tpu_replica_context* ctx, const Error& e) {
  ctx->fail_code = e.code();
  ctx->fail_message = e.message();
  return e.code();
}

ShardOutputMeta meta_of(const Tensor* t) {
  ShardOutputMeta m;
  if (t == nullptr) return m;
  m.present = true;
  m.dtype = t->dtype;
  m.rank = t->rank;
  std::copy(t->dims, t->dims + t->rank, m.dims);
  return m;
}

size_t bytes_of(const ShardOutputMeta& m) {
  if (!m.present) return 0;
  int64_t count;
  size_t bytes;
  check_shape(m.dtype, m.dims, m.rank, &count, &bytes);
  return bytes;
}

// Where each output's bytes travel: outputs gathered from all shards in the block each
// participant all-gathers (a region as large as the largest shard's output), shard
// 0's other outputs in the block it broadcasts. Regions start at multiples of 64
// bytes, so that views of them are aligned for any dtype.
struct ByteLayout {
  std::vector<size_t> offset;  // [output]
  size_t gathered = 0;         // the block each participant all-gathers
  size_t broadcast = 0;        // the block participant 0 broadcasts
};

constexpr size_t kRegionAlign = 64;

ByteLayout layout_of(const ShardOutputSpec& spec, const ShardOutputMeta* metas) {
  ByteLayout l;
  l.offset.resize(spec.num_outputs);
  for (int o = 0; o < spec.num_outputs; ++o) {
    const bool all = spec.from_all[o];
    size_t region = 0;
    for (int s = 0; s < (all ? spec.num_shards : 1); ++s)
      region = std::max(region, bytes_of(metas[static_cast<size_t>(s) * spec.num_outputs + o]));
    size_t& block = all ? l.gathered : l.broadcast;
    block = checked_add(block, (kRegionAlign - block % kRegionAlign) % kRegionAlign,
                        "the bytes of tpu_shard's outputs");
    l.offset[o] = block;
    block = checked_add(block, region, "the bytes of tpu_shard's outputs");
  }
  return l;
}

// Per output: present, dtype, rank, dims.
constexpr int kMetaWidth = 3 + TPU_MAX_RANK;

class ChainStage : public StepStage {
 public:
  ChainStage(std::shared_ptr<const StepStage> first, std::shared_ptr<const StepStage> second)
      : first_(std::move(first)), second_(std::move(second)) {}
  tpu_status before(tpu_replica_context* ctx, std::vector<tpu_tensor*>* inputs) const override {
    const size_t given = inputs->size();
    tpu_status status = first_->before(ctx, inputs);
    if (status != TPU_OK) return status;
    status = second_->before(ctx, inputs);
    // The participant leaves without after(): first's part is undone here.
    if (status != TPU_OK) first_->after(ctx, status, inputs, given, nullptr, 0);
    return status;
  }
  tpu_status after(tpu_replica_context* ctx, tpu_status status, std::vector<tpu_tensor*>* inputs,
                   size_t num_given, tpu_tensor** outputs, int num_outputs) const override {
    status = first_->after(ctx, status, inputs, num_given, outputs, num_outputs);
    return second_->after(ctx, status, inputs, num_given, outputs, num_outputs);
  }

 private:
  const std::shared_ptr<const StepStage> first_, second_;
};

}  // namespace

ShardVerdict check_shard_outputs(const ShardOutputSpec& spec, const ShardOutputMeta* metas) {
  ShardVerdict v;
  const int n = spec.num_shards, no = spec.num_outputs;
  v.axes.assign(no, 0);
  int at = 0;  // the shard the check under way is about
  try {
    for (int o = 0; o < no; ++o) {
      if (!spec.from_all[o]) continue;  // shard 0's, whatever it is
      auto meta = [&](int s) -> const ShardOutputMeta& { return metas[static_cast<size_t>(s) * no + o]; };
      const ShardOutputMeta& first = meta(0);
      for (int s = 0; s < n; ++s) {
        at = s;
        const ShardOutputMeta& m = meta(s);
        if (!m.present)
          invalid_argument("shard ", s, " left output ", o,
                           " NULL; outputs gathered from all shards must be tensors");
        if (m.dtype != first.dtype || m.rank != first.rank)
          invalid_argument("shards have mismatched output shapes: shard 0 output ", o, " is ",
                           describe(first), " but shard ", s, "'s is ", describe(m));
      }
      at = 0;
      const int rank = first.rank;
      // Scalars are stacked, whatever the axis.
      const int axis = rank == 0 ? 0
          : normalize_axis(spec.axes[o], rank, str_cat("output ", o, ": output_shard_axes[", o, "] =").c_str());
      int64_t dims[TPU_MAX_RANK] = {0};
      std::copy(first.dims, first.dims + rank, dims);
      for (int s = 1; s < n; ++s) {
        at = s;
        const ShardOutputMeta& m = meta(s);
        for (int d = 0; d < rank; ++d)
          if (d != axis && m.dims[d] != first.dims[d])
            invalid_argument("shards have mismatched output shapes: shard 0 output ", o, " is ",
                             describe(first), " but shard ", s, "'s is ", describe(m),
                             " (they may differ only along output_shard_axes[", o, "] = ", axis, ")");
        if (rank > 0)
          dims[axis] = checked_add(dims[axis], m.dims[axis], "dimension ", axis, " of output ", o,
                                   " concatenated from ", n, " shards");
      }
      at = 0;
      if (rank == 0) dims[0] = n;
      int64_t count;
      size_t bytes;
      try {
        check_shape(first.dtype, dims, rank == 0 ? 1 : rank, &count, &bytes);
      } catch (const Error& e) {
        fail(e.code(), "output ", o, " concatenated from ", n, " shards: ", e.message());
      }
      v.axes[o] = axis;
    }
  } catch (const Error& e) {
    v.shard = at;
    v.code = e.code();
    v.message = e.message();
  }
  return v;
}

std::shared_ptr<const StepStage> chain_stages(std::shared_ptr<const StepStage> first,
                                              std::shared_ptr<const StepStage> second) {
  if (!first) return second;
  if (!second) return first;
  return std::make_shared<ChainStage>(std::move(first), std::move(second));
}

ShardGatherStage::ShardGatherStage(ShardOutputSpec spec, int cores_per_replica, bool across_tasks)
    : spec_(std::move(spec)), cores_(cores_per_replica), across_tasks_(across_tasks),
      metas_(across_tasks ? 0 : static_cast<size_t>(spec_.num_shards) * spec_.num_outputs) {}

tpu_status ShardGatherStage::after(tpu_replica_context* ctx, tpu_status status, std::vector<tpu_tensor*>*,
                                   size_t, tpu_tensor** outputs, int num_outputs) const {
  if (ctx->late.load(std::memory_order_acquire) || num_outputs != spec_.num_outputs) return status;
  if (!across_tasks_) return check_here(ctx, status, outputs);
  if (status != TPU_OK) return status;
  try {
    return gather(ctx, outputs);
  } catch (const Error& e) {
    return fail_participant(ctx, e);
  }
}

// One task: the last participant to leave checks every shard's outputs. A failure is
// the shard's at fault (Communicator::reject), as across tasks, whoever finds it.
tpu_status ShardGatherStage::check_here(tpu_replica_context* ctx, tpu_status status,
                                        tpu_tensor** outputs) const {
  const int participants = spec_.num_shards * cores_;
  ShardVerdict v;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (status != TPU_OK) failed_ = true;
    else if (ctx->logical_core == 0)
      for (int o = 0; o < spec_.num_outputs; ++o)
        metas_[static_cast<size_t>(ctx->replica_id) * spec_.num_outputs + o] = meta_of(outputs[o]);
    if (++arrived_ < participants || failed_) return status;
    v = check_shard_outputs(spec_, metas_.data());
  }
  if (v.code == TPU_OK) return TPU_OK;
  const Error e(v.code, v.message);
  ctx->comm->reject(v.shard * cores_, e);
  return fail_participant(ctx, e);
}

tpu_status ShardGatherStage::gather(tpu_replica_context* ctx, tpu_tensor** outputs) const {
  const int no = spec_.num_outputs, n = spec_.num_shards;
  const bool holds = ctx->logical_core == 0;  // a shard's output is its core 0's
  Communicator& comm = *ctx->comm;
  const int64_t width = static_cast<int64_t>(kMetaWidth) * no;
  TensorRef mine(new_tensor(TPU_INT64, &width, 1));
  int64_t* m = static_cast<int64_t*>(mine->data);
  for (int o = 0; holds && o < no; ++o) {
    const Tensor* t = outputs[o];
    if (t == nullptr) continue;
    int64_t* mo = m + static_cast<size_t>(o) * kMetaWidth;
    mo[0] = 1;
    mo[1] = t->dtype;
    mo[2] = t->rank;
    std::copy(t->dims, t->dims + t->rank, mo + 3);
  }
  TensorRef all(comm.all_gather(ctx->participant, mine.get(), 0, nullptr));
  std::vector<ShardOutputMeta> metas(static_cast<size_t>(n) * no);
  const int64_t* a = static_cast<const int64_t*>(all->data);
  for (int s = 0; s < n; ++s)
    for (int o = 0; o < no; ++o) {
      const int64_t* mo = a + static_cast<size_t>(s) * cores_ * width + static_cast<size_t>(o) * kMetaWidth;
      ShardOutputMeta& sm = metas[static_cast<size_t>(s) * no + o];
      sm.present = mo[0] != 0;
      sm.dtype = static_cast<tpu_dtype>(mo[1]);
      sm.rank = static_cast<int>(mo[2]);
      if (sm.present && (sm.rank < 0 || sm.rank > TPU_MAX_RANK || !is_valid_dtype(sm.dtype)))
        fail(TPU_INTERNAL, "shard ", s, " output ", o, ": a malformed description (dtype ", mo[1], ", rank ",
             mo[2], ") came back from the all-gather");
      if (sm.present) std::copy(mo + 3, mo + 3 + sm.rank, sm.dims);
      else sm.rank = 0;
    }
  // Every participant finds the same verdict; the shard at fault alone fails, so that
  // every task reports its error (the others learn it when the step ends).
  ShardVerdict v = check_shard_outputs(spec_, metas.data());
  if (v.code != TPU_OK)
    return ctx->participant == v.shard * cores_ ? fail_participant(ctx, Error(v.code, v.message)) : TPU_OK;

  const ByteLayout l = layout_of(spec_, metas.data());
  TensorRef gathered, broadcast;
  if (l.gathered > 0) {
    const int64_t size = static_cast<int64_t>(l.gathered);
    TensorRef block(new_tensor(TPU_UINT8, &size, 1));
    for (int o = 0; holds && o < no; ++o)
      if (spec_.from_all[o] && outputs[o] && outputs[o]->byte_size)
        std::memcpy(static_cast<char*>(block->data) + l.offset[o], outputs[o]->data, outputs[o]->byte_size);
    gathered.reset(comm.all_gather(ctx->participant, block.get(), 0, nullptr));
  }
  if (l.broadcast > 0) {
    const int64_t size = static_cast<int64_t>(l.broadcast);
    TensorRef block(new_tensor(TPU_UINT8, &size, 1));
    for (int o = 0; ctx->participant == 0 && o < no; ++o)
      if (!spec_.from_all[o] && outputs[o] && outputs[o]->byte_size)
        std::memcpy(static_cast<char*>(block->data) + l.offset[o], outputs[o]->data, outputs[o]->byte_size);
    broadcast.reset(comm.broadcast(ctx->participant, block.get(), 0, nullptr));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!have_) {
    metas_ = std::move(metas);
    gathered_ = std::move(gathered);
    broadcast_ = std::move(broadcast);
    have_ = true;
  }
  return TPU_OK;
}

void ShardGatherStage::finish(Tensor* const* local, tpu_tensor** outputs) const {
  const int no = spec_.num_outputs, n = spec_.num_shards;
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ShardOutputMeta> metas;
  if (across_tasks_) {
    if (!have_)
      fail(TPU_INTERNAL, "tpu_shard: the step succeeded but no participant of this task gathered the shards' outputs");
    metas = metas_;
  } else {
    metas.resize(static_cast<size_t>(n) * no);
    for (size_t i = 0; i < metas.size(); ++i) metas[i] = meta_of(local[i]);
  }
  // The step checked them already: this cannot fail.
  const ShardVerdict v = check_shard_outputs(spec_, metas.data());
  if (v.code != TPU_OK)
    fail(TPU_INTERNAL, "tpu_shard: shard ", v.shard, "'s outputs passed the step's checks but now: ", v.message);
  const ByteLayout l = across_tasks_ ? layout_of(spec_, metas.data()) : ByteLayout{};
  TensorRefs results(no);
  std::vector<Tensor*> parts(n);  // one task: the shards' outputs
  for (int o = 0; o < no; ++o) {
    const ShardOutputMeta& first = metas[o];
    if (!spec_.from_all[o]) {
      if (!across_tasks_) {
        if (local[o]) retain(local[o]);
        results[o] = local[o];
      } else if (first.present) {
        results[o] = new_tensor_uninitialized(first.dtype, first.dims, first.rank);
        if (results[o]->byte_size)
          std::memcpy(results[o]->data, static_cast<const char*>(broadcast_->data) + l.offset[o],
                      results[o]->byte_size);
      }
      continue;
    }
    if (!across_tasks_) {
      for (int s = 0; s < n; ++s) parts[s] = local[static_cast<size_t>(s) * no + o];
      results[o] = concat_tensors(parts.data(), n, v.axes[o]);
      continue;
    }
    // Shard s's output: its bytes in participant s * cores' block, row-major. The
    // dimensions before the axis agree: each of their indices takes each shard's run.
    const int axis = v.axes[o];
    int64_t dims[TPU_MAX_RANK] = {0};
    std::copy(first.dims, first.dims + first.rank, dims);
    if (first.rank == 0) dims[0] = n;
    else
      for (int s = 1; s < n; ++s) dims[axis] += metas[static_cast<size_t>(s) * no + o].dims[axis];
    results[o] = new_tensor_uninitialized(first.dtype, dims, first.rank == 0 ? 1 : first.rank);
    const size_t esize = dtype_size(first.dtype);
    int64_t outer = 1;
    for (int d = 0; d < axis && first.rank > 0; ++d) outer *= first.dims[d];
    std::vector<size_t> run(n);  // the bytes of shard s per index before the axis
    for (int s = 0; s < n; ++s) {
      const ShardOutputMeta& m = metas[static_cast<size_t>(s) * no + o];
      run[s] = esize;
      for (int d = axis; d < m.rank; ++d) run[s] *= static_cast<size_t>(m.dims[d]);
    }
    char* to = static_cast<char*>(results[o]->data);
    const char* base = static_cast<const char*>(gathered_.get() ? gathered_->data : nullptr);
    for (int64_t i = 0; i < outer; ++i)
      for (int s = 0; s < n; ++s) {
        if (run[s] == 0) continue;
        const size_t at = static_cast<size_t>(s) * cores_ * l.gathered + l.offset[o] + static_cast<size_t>(i) * run[s];
        std::memcpy(to, base + at, run[s]);
        to += run[s];
      }
  }
  for (int o = 0; o < no; ++o) outputs[o] = results.take(o);
}

}  // namespace tpurt
