// The lookup half of a step: activations, in one process or fetched across tasks.
#include "embedding/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "collectives/communicator.h"
#include "core/status.h"
#include "core/tensor.h"
#include "embedding/exchange.h"
#include "embedding/step_state.h"
#include "trace/trace.h"

namespace tpurt {
namespace embedding {

// TensorFlow's combiner (embedding_ops.embedding_lookup_sparse with weights): rows times
// weights, then math_ops.segment_sum, whose CPU kernel (SegmentReductionOp in
// tensorflow/core/kernels/segment_reduction_ops_impl.h) copies a segment of one element
// (`out_slice = in_slice`) and reduces a longer one with Eigen's SumReducer, which starts
// from +0 and adds the elements in order. The two differ only for a -0.0: a sample of one
// id whose weighted row holds -0.0 keeps it, a sum from +0 would not. `out` is not
// initialized: each sample's first id writes it (from +0 when more follow), so the
// activations are written once rather than zero-filled first.
void Engine::combine(const FeatureInput& in, const FeatureSpec& f, const float* const* rows, float* out) const {
  const int dim = config_->tables[f.table].dimension;
  const size_t n = in.ids.size();
  std::vector<uint32_t> ids_of(static_cast<size_t>(f.samples), 0);
  for (size_t k = 0; k < n; ++k) ++ids_of[in.sample[k]];
  for (int64_t s = 0; s < f.samples; ++s)
    if (ids_of[s] == 0) std::memset(out + s * dim, 0, dim * sizeof(float));
  std::vector<uint8_t> started(static_cast<size_t>(f.samples), 0);
  for (size_t k = 0; k < n; ++k) {
    if (k + kPrefetchAhead < n) prefetch_row(rows[k + kPrefetchAhead], dim);
    const int64_t s = in.sample[k];
    float* o = out + s * dim;
    const float* r = rows[k];
    const float w = in.weight[k];
    if (ids_of[s] == 1)
      for (int j = 0; j < dim; ++j) o[j] = w * r[j];
    else if (!started[s])
      for (int j = 0; j < dim; ++j) o[j] = 0.0f + w * r[j];
    else
      for (int j = 0; j < dim; ++j) o[j] += w * r[j];
    started[s] = 1;
  }
  for (int64_t s = 0; s < f.samples; ++s) {
    const float d = in.denominator[s];
    if (d == 1.0f) continue;
    float* o = out + s * dim;
    for (int j = 0; j < dim; ++j) o[j] = d == 0.0f ? 0.0f : o[j] / d;
  }
}

void Engine::recv_activations(const Caller& caller, Communicator& comm, tpu_tensor** out,
                              int num_activations) {
  trace::Span span("embedding lookup", "embedding");
  ParticipantStep& st = step_of(caller);
  StepState& step = *caller.step;
  const int nf = static_cast<int>(config_->features.size());
  if (num_activations != nf)
    invalid_argument("num_activations is ", num_activations, " but the embedding configuration has ", nf,
                     " features");
  for (int f = 0; f < nf; ++f) out[f] = nullptr;
  if (config_->mode == TPU_EMBEDDING_MODE_BACKWARD_PASS_ONLY)
    fail(TPU_FAILED_PRECONDITION, "the embedding configuration's mode is BACKWARD_PASS_ONLY: it gives no activations");
  if (!st.enqueued)
    invalid_argument(step.name_of(caller.participant), " asks for embedding activations before its tpu_embedding_enqueue");
  if (st.received_activations)
    invalid_argument(step.name_of(caller.participant), " asks for embedding activations twice in one step");
  if (st.sent_gradients)
    invalid_argument(step.name_of(caller.participant), " asks for embedding activations after sending its gradients ",
                     "(the step's updates may have begun)");
  if (num_tasks_ > 1) fetch_rows(step, caller.participant, comm, st);

  std::vector<tpu_tensor*> made(nf, nullptr);
  try {
    // In one process the rows are read from the tables themselves.
    std::optional<TableAccess> access;
    if (num_tasks_ == 1) access.emplace(step, caller.participant);
    std::vector<const float*> rows;
    for (int f = 0; f < nf; ++f) {
      const FeatureInput& in = st.features[f];
      if (!in.present) continue;
      const FeatureSpec& spec = config_->features[f];
      const int t = spec.table;
      const int dim = config_->tables[t].dimension;
      std::vector<int64_t> dims = spec.input_shape;
      dims.push_back(dim);
      made[f] = new_tensor_uninitialized(TPU_FLOAT, dims.data(), static_cast<int>(dims.size()));
      rows.resize(in.ids.size());
      for (size_t k = 0; k < in.ids.size(); ++k)
        rows[k] = num_tasks_ > 1 ? st.rows[t].data() + static_cast<size_t>(in.slot[k]) * dim
                                 : storage_[t]->row(0, in.ids[k]);
      combine(in, spec, rows.data(), static_cast<float*>(mutable_data(made[f])));
    }
  } catch (...) {
    for (tpu_tensor* t : made)
      if (t) release(t);
    throw;
  }
  for (int f = 0; f < nf; ++f) out[f] = made[f];
  st.received_activations = true;
}

// Any computation on a row's task can serve it (the task's memory holds all its shards):
// one chosen by a hash of the row, so hot rows of one shard spread over the task's
// computations and the serving stays even.
int Engine::server_of(const StepState& step, int64_t row, const TableSpec& spec) const {
  const int64_t task = spec.shards.shard_of(row) / cores_per_task_;
  const std::vector<int>& servers = step.servers[task];
  if (servers.empty())
    fail(TPU_FAILED_PRECONDITION, "task ", task, " holds shards of embedding table '", spec.name,
         "' but runs no computation of this step; an embedding step needs a computation on every task");
  const uint64_t h = static_cast<uint64_t>(row) * 0x9E3779B97F4A7C15ull;
  return servers[(h >> 32) % servers.size()];
}

// The server of each of this participant's unique ids, and how many go to each server.
void Engine::route(const StepState& step, ParticipantStep& st, std::vector<size_t>* per_server_ids) const {
  per_server_ids->assign(step.participant_task.size(), 0);
  for (size_t t = 0; t < config_->tables.size(); ++t) {
    const TableSpec& spec = config_->tables[t];
    std::vector<int32_t>& to = st.server[t];
    to.resize(st.unique[t].size());
    for (size_t u = 0; u < st.unique[t].size(); ++u) {
      to[u] = server_of(step, st.unique[t][u], spec);
      ++(*per_server_ids)[to[u]];
    }
  }
}

// Across tasks: each unique id goes to a computation on the task holding its row (the
// server), which answers with the rows in the order asked.
void Engine::fetch_rows(StepState& step, int me, Communicator& comm, ParticipantStep& st) {
  const int P = static_cast<int>(step.participant_task.size());
  std::vector<size_t> count;
  route(step, st, &count);
  std::vector<std::vector<uint8_t>> ask(P);
  for (int q = 0; q < P; ++q) ask[q].reserve(count[q] * kKeyBytes);
  for (size_t t = 0; t < config_->tables.size(); ++t)
    for (size_t u = 0; u < st.unique[t].size(); ++u) {
      std::vector<uint8_t>& m = ask[st.server[t][u]];
      append(m, static_cast<int32_t>(t));
      append(m, st.unique[t][u]);
    }
  std::vector<std::vector<uint8_t>> asked = exchange_bytes(comm, me, P, ask);
  std::vector<std::vector<uint8_t>> answer(P);
  {  // only the reading of the rows: the exchanges around it wait for the others
    TableAccess access(step, me);
    for (int q = 0; q < P; ++q) {
      answer[q].reserve(asked[q].size() / kKeyBytes * max_dimension_ * sizeof(float));
      Reader r(asked[q], step.name_of(q));
      while (!r.done()) {
        const int32_t t = r.read<int32_t>();
        const int64_t id = r.read<int64_t>();
        if (t < 0 || static_cast<size_t>(t) >= config_->tables.size() || id < 0 ||
            id >= config_->tables[t].vocabulary_size || !storage_[t]->holds(id))
          fail(TPU_INTERNAL, step.name_of(q), " asked for row ", id, " of table ", t, ", which this task does not hold");
        append_floats(answer[q], storage_[t]->row(0, id), config_->tables[t].dimension);
      }
    }
  }
  std::vector<std::vector<uint8_t>> answered = exchange_bytes(comm, me, P, answer);
  std::vector<size_t> at(P, 0);
  for (size_t t = 0; t < config_->tables.size(); ++t) {
    const int dim = config_->tables[t].dimension;
    const size_t bytes = dim * sizeof(float);
    st.rows[t].resize(st.unique[t].size() * dim);
    for (size_t u = 0; u < st.unique[t].size(); ++u) {
      const int s = st.server[t][u];
      if (at[s] > answered[s].size() || answered[s].size() - at[s] < bytes)
        fail(TPU_INTERNAL, "a malformed embedding answer from ", step.name_of(s), ": ", answered[s].size(), " bytes");
      std::memcpy(st.rows[t].data() + u * dim, answered[s].data() + at[s], bytes);
      at[s] += bytes;
    }
  }
}

}  // namespace embedding
}  // namespace tpurt
