// The update half of a step: gradients summed per row, applied in place with an undo
// log, kept or put back at step end.
#include "embedding/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "collectives/communicator.h"
#include "core/status.h"
#include "core/tensor.h"
#include "embedding/exchange.h"
#include "embedding/step_state.h"
#include "trace/trace.h"

namespace tpurt {
namespace embedding {

namespace {
const char* mode_name(tpu_embedding_mode m) {
  switch (m) {
    case TPU_EMBEDDING_MODE_UNSPECIFIED: return "UNSPECIFIED";
    case TPU_EMBEDDING_MODE_INFERENCE: return "INFERENCE";
    case TPU_EMBEDDING_MODE_TRAINING: return "TRAINING";
    case TPU_EMBEDDING_MODE_BACKWARD_PASS_ONLY: return "BACKWARD_PASS_ONLY";
  }
  return "unknown";
}
}  // namespace

void Engine::send_gradients(const Caller& caller, Communicator& comm, tpu_tensor* const* gradients,
                            int num_gradients, const float* learning_rates, int num_learning_rates) {
  trace::Span span("embedding update", "embedding");
  ParticipantStep& st = step_of(caller);
  StepState& step = *caller.step;
  const int nf = static_cast<int>(config_->features.size());
  if (config_->mode == TPU_EMBEDDING_MODE_INFERENCE)
    fail(TPU_FAILED_PRECONDITION, "the embedding configuration's mode is ", mode_name(config_->mode),
         ": it takes no gradients");
  if (!st.enqueued)
    invalid_argument(step.name_of(caller.participant), " sends embedding gradients before its tpu_embedding_enqueue");
  if (st.sent_gradients)
    invalid_argument(step.name_of(caller.participant), " sends embedding gradients twice in one step");
  if (num_gradients != nf)
    invalid_argument("num_gradients is ", num_gradients, " but the embedding configuration has ", nf, " features");
  if (num_learning_rates != config_->num_dynamic_tags)
    invalid_argument(num_learning_rates, " learning rates given, but the embedding configuration has ",
                     config_->num_dynamic_tags, " dynamic learning rate tags");
  for (int i = 0; i < num_learning_rates; ++i)
    if (!std::isfinite(learning_rates[i]))
      invalid_argument("learning rate ", i, " is ", learning_rates[i], "; it must be finite");
  for (int f = 0; f < nf; ++f) {
    const FeatureSpec& spec = config_->features[f];
    const TableSpec& t = config_->tables[spec.table];
    const std::string label = str_cat("feature '", spec.name, "' (table '", t.name, "')");
    const tpu_tensor* g = gradients[f];
    if (!st.features[f].present) {
      if (g != nullptr) invalid_argument("gradients[", f, "] is given for ", label, ", which was not enqueued");
      continue;
    }
    if (g == nullptr) invalid_argument("gradients[", f, "] is NULL but ", label, " was enqueued");
    require_live(g, "gradients[", f, "]");
    std::vector<int64_t> dims = spec.input_shape;
    dims.push_back(t.dimension);
    if (g->dtype != TPU_FLOAT || !has_shape(g, dims.data(), static_cast<int>(dims.size())))
      invalid_argument("the gradient of ", label, " is ", describe(g), "; it must be float32",
                       shape_string(dims.data(), static_cast<int>(dims.size())));
  }

  // A table whose optimizer updates every row changes rows on every task holding its
  // shards, and only a computation of the step there can (one process has them all).
  if (num_tasks_ > 1)
    for (const TableSpec& t : config_->tables) {
      if (!t.optimizer->updates_every_row()) continue;
      for (int task = 0; task < num_tasks_; ++task) {
        if (!step.servers[task].empty()) continue;
        for (int64_t shard = int64_t{task} * cores_per_task_; shard < int64_t{task + 1} * cores_per_task_; ++shard)
          if (t.shards.rows_in(shard) > 0)
            fail(TPU_FAILED_PRECONDITION, "task ", task, " holds shards of embedding table '", t.name,
                 "', whose optimizer updates every row, but runs no computation of this step; an embedding step ",
                 "needs a computation on every task");
      }
    }

  // Each unique row's gradient, summed from +0 over this participant's ids in feature
  // order. A row's first contribution writes its sum (0 + x, as the sum from zeros
  // would), so the sums are written once rather than zero-filled first.
  for (size_t t = 0; t < config_->tables.size(); ++t) {
    st.grads[t].resize(st.unique[t].size() * config_->tables[t].dimension);
    st.written[t].assign(st.unique[t].size(), 0);
  }
  for (int f = 0; f < nf; ++f) {
    const FeatureInput& in = st.features[f];
    if (!in.present) continue;
    const int t = config_->features[f].table;
    const int dim = config_->tables[t].dimension;
    const float* g = static_cast<const float*>(gradients[f]->data);
    float* acc = st.grads[t].data();
    uint8_t* written = st.written[t].data();
    for (size_t k = 0; k < in.ids.size(); ++k) {
      const float* gs = g + in.sample[k] * dim;
      const float d = in.denominator[in.sample[k]], w = in.weight[k];
      const int32_t slot = in.slot[k];
      float* a = acc + static_cast<size_t>(slot) * dim;
      if (d == 0.0f) continue;  // div_no_nan's gradient is zero there too
      const bool first = !written[slot];
      written[slot] = 1;
      if (d == 1.0f) {  // x / 1 is x exactly: the same sums without a division each
        if (first)
          for (int j = 0; j < dim; ++j) a[j] = 0.0f + gs[j] * w;
        else
          for (int j = 0; j < dim; ++j) a[j] += gs[j] * w;
        continue;
      }
      if (first)
        for (int j = 0; j < dim; ++j) a[j] = 0.0f + gs[j] / d * w;
      else
        for (int j = 0; j < dim; ++j) a[j] += gs[j] / d * w;
    }
  }
  for (size_t t = 0; t < config_->tables.size(); ++t) {  // rows whose every id had no gradient
    const size_t dim = config_->tables[t].dimension;
    for (size_t u = 0; u < st.written[t].size(); ++u)
      if (!st.written[t][u]) std::memset(st.grads[t].data() + u * dim, 0, dim * sizeof(float));
  }
  // In one process: which of the unique rows each worker updates, so that each reads
  // only its own.
  if (num_tasks_ == 1) {
    const int P = static_cast<int>(step.participant_task.size());
    for (size_t t = 0; t < config_->tables.size(); ++t) {
      std::vector<std::vector<int32_t>>& by = st.by_worker[t];
      by.resize(P);
      for (auto& v : by) v.clear();
      for (size_t u = 0; u < st.unique[t].size(); ++u) by[worker_of(step, st.unique[t][u])].push_back(static_cast<int32_t>(u));
    }
  }

  // Every participant gives the same learning rates; this also makes the call a
  // collective, so a participant that skips it is named, as is one that skipped
  // recv_activations (across tasks that is a collective of its own; in one process
  // it meets no one, so only this tells).
  agree_on_learning_rates(step, caller.participant, comm, learning_rates, num_learning_rates, st);
  if (num_tasks_ > 1) send_to_servers(step, caller.participant, comm, st);
  // Every participant's gradients are in (the collectives above returned everywhere):
  // this one updates its share of the rows, in parallel with the others, keeping the
  // old values for end_step to put back if the step fails anywhere.
  st.sent_gradients = true;
  update_rows(step, caller.participant, st);
}

void Engine::agree_on_learning_rates(const StepState& step, int me, Communicator& comm, const float* rates, int n,
                                     ParticipantStep& st) {
  const int64_t dims[1] = {1 + n};
  tpu_tensor* mine = new_tensor(TPU_FLOAT, dims, 1);
  float* m = static_cast<float*>(mutable_data(mine));
  // m[0]: whether this participant skipped the activations its mode gives.
  m[0] = !st.received_activations && config_->mode != TPU_EMBEDDING_MODE_BACKWARD_PASS_ONLY ? 1.0f : 0.0f;
  for (int i = 0; i < n; ++i) m[1 + i] = rates[i];
  tpu_tensor* all = nullptr;
  try {
    all = comm.all_gather(me, mine, 0, nullptr);
  } catch (...) {
    release(mine);
    throw;
  }
  release(mine);
  const float* a = static_cast<const float*>(all->data);
  const int P = static_cast<int>(step.participant_task.size());
  for (int q = 1; q < P; ++q)
    if (a[q * (1 + n)] != a[0]) {
      const std::string skipper = step.name_of(a[0] != 0.0f ? 0 : q);
      release(all);
      invalid_argument(skipper, " sends embedding gradients without having asked for its activations, ",
                       "which the others did (tpu_embedding_recv_activations is a collective of the step)");
    }
  for (int q = 1; q < P; ++q)
    if (std::memcmp(a + q * (1 + n), a, sizeof(float) * (1 + n)) != 0) {
      int tag = 0;
      while (tag < n && a[q * (1 + n) + 1 + tag] == a[1 + tag]) ++tag;
      const std::string first = step.name_of(0), other = step.name_of(q);
      const float x = a[1 + tag], y = a[q * (1 + n) + 1 + tag];
      release(all);
      invalid_argument("the participants disagree on dynamic learning rate ", tag, ": ", first, " gives ", x, ", ",
                       other, " gives ", y);
    }
  st.learning_rates.assign(a + 1, a + 1 + n);
  release(all);
}

// Across tasks: each unique row's summed gradient goes to its server, which keeps it
// for end_step by sender.
void Engine::send_to_servers(const StepState& step, int me, Communicator& comm, ParticipantStep& st) {
  const int P = static_cast<int>(step.participant_task.size());
  std::vector<size_t> count;
  route(step, st, &count);  // again: a participant may send without having asked for activations
  std::vector<std::vector<uint8_t>> out(P);
  for (int q = 0; q < P; ++q) out[q].reserve(count[q] * (kKeyBytes + max_dimension_ * sizeof(float)));
  for (size_t t = 0; t < config_->tables.size(); ++t) {
    const int dim = config_->tables[t].dimension;
    for (size_t u = 0; u < st.unique[t].size(); ++u) {
      const int64_t id = st.unique[t][u];
      std::vector<uint8_t>& m = out[st.server[t][u]];
      append(m, static_cast<int32_t>(t));
      append(m, id);
      append_floats(m, st.grads[t].data() + u * dim, dim);
    }
  }
  std::vector<std::vector<uint8_t>> in = exchange_bytes(comm, me, P, out);
  for (int q = 0; q < P; ++q) {
    Reader r(in[q], step.name_of(q));
    Received& rec = st.received[q];
    rec.table.reserve(in[q].size() / kKeyBytes);  // bounds: every entry is longer
    rec.row.reserve(in[q].size() / kKeyBytes);
    rec.grad.reserve(in[q].size() / sizeof(float));
    while (!r.done()) {
      const int32_t t = r.read<int32_t>();
      const int64_t id = r.read<int64_t>();
      if (t < 0 || static_cast<size_t>(t) >= config_->tables.size() || id < 0 ||
          id >= config_->tables[t].vocabulary_size || !storage_[t]->holds(id))
        fail(TPU_INTERNAL, step.name_of(q), " sent a gradient of row ", id, " of table ", t,
             ", which this task does not hold");
      const int dim = config_->tables[t].dimension;
      const uint8_t* g = r.take(dim * sizeof(float));
      rec.table.push_back(t);
      rec.row.push_back(id);
      const size_t at = rec.grad.size();
      rec.grad.resize(at + dim);
      std::memcpy(rec.grad.data() + at, g, dim * sizeof(float));
    }
  }
}

// The worker of a row in one process: a participant chosen by a hash of the row, so
// each computes the updates of about 1/P of the touched rows.
int Engine::worker_of(const StepState& step, int64_t row) const {
  const uint64_t h = static_cast<uint64_t>(row) * 0x9E3779B97F4A7C15ull;
  return static_cast<int>((h >> 32) % step.participant_task.size());
}

// Sums each of this participant's rows' gradients in participant order (the same order
// in one process and across tasks, so the sums are bit-identical) and applies the
// optimizer to them in place, keeping the old values. Nothing reads the tables any more
// in this step: every computation has sent its gradients, so it has had its activations.
void Engine::update_rows(StepState& step, int me, ParticipantStep& st) {
  const int P = static_cast<int>(step.participant_task.size());
  // Inside the gate from the first row kept to the last row written: end_step waits
  // for this to end, or this never begins. Even when an allocation fails halfway,
  // the rows kept so far are put back.
  TableAccess access(step, me);
  for (size_t t = 0; t < config_->tables.size(); ++t) {
    const TableSpec& spec = config_->tables[t];
    const int dim = spec.dimension;
    std::vector<int64_t>& rows = st.undo_rows[t];
    // sums only grows: a row's first gradient writes its sum (0 + g, as from zeros).
    std::vector<float>& sums = st.sums;
    st.index.reset(1024);
    auto add = [&](int64_t row, const float* g) {
      bool fresh = false;
      const int32_t i = st.index.insert(row, &fresh);
      float* acc;
      if (fresh) {
        rows.push_back(row);
        if (sums.size() < rows.size() * dim) sums.resize(std::max(2 * sums.size(), rows.size() * dim));
        acc = sums.data() + static_cast<size_t>(i) * dim;
        for (int j = 0; j < dim; ++j) acc[j] = 0.0f + g[j];
        return;
      }
      acc = sums.data() + static_cast<size_t>(i) * dim;
      for (int j = 0; j < dim; ++j) acc[j] += g[j];
    };
    for (int q = 0; q < P; ++q) {
      if (num_tasks_ == 1) {
        const ParticipantStep& from = *step.participants[q];
        for (int32_t u : from.by_worker[t][me]) add(from.unique[t][u], from.grads[t].data() + static_cast<size_t>(u) * dim);
      } else {
        const Received& rec = st.received[q];
        size_t at = 0;
        for (size_t e = 0; e < rec.table.size(); ++e) {
          if (rec.table[e] == static_cast<int32_t>(t)) add(rec.row[e], rec.grad.data() + at);
          at += config_->tables[rec.table[e]].dimension;
        }
      }
    }
    const Optimizer& opt = *spec.optimizer;
    const float lr = opt.dynamic_tag() >= 0 ? st.learning_rates[opt.dynamic_tag()] : opt.constant_learning_rate();
    TableStorage& s = *storage_[t];
    const int nv = s.num_variables();
    const size_t span = s.span_floats();  // a row's variables, side by side
    std::vector<float>& old = st.undo_values[t];  // only grows: each row's copy overwrites
    if (old.size() < rows.size() * span) old.resize(rows.size() * span);
    st.scratch.resize(dim);
    float* slots[kMaxVariables];
    for (size_t i = 0; i < rows.size(); ++i) {
      if (i + kPrefetchAhead < rows.size()) prefetch_row(s.row(0, rows[i + kPrefetchAhead]), static_cast<int>(span));
      float* w = s.row(0, rows[i]);
      std::memcpy(old.data() + i * span, w, span * sizeof(float));
      st.undo_count[t] = i + 1;
      for (int k = 1; k < nv; ++k) slots[k - 1] = w + k * dim;
      opt.apply(w, slots, sums.data() + i * dim, dim, lr, st.scratch.data());
    }
  }
}

// A failed step puts back the old values of every row its computations updated here; a
// successful one applies a non-lazy optimizer to the rows nobody touched.
void Engine::end_step(StepState& step, bool succeeded, bool late) {
  last_step_late_ = late;
  if (step.closed()) return;  // ended already
  step.close_tables();
  if (!succeeded) {
    for (int p : step.local)
      if (step.participants[p]) restore(*step.participants[p]);
    return;
  }
  const std::vector<float>* rates = nullptr;
  for (int p : step.local)
    if (step.participants[p] && step.participants[p]->sent_gradients) {
      rates = &step.participants[p]->learning_rates;
      break;
    }
  if (rates == nullptr) return;
  for (size_t t = 0; t < config_->tables.size(); ++t) {
    const TableSpec& spec = config_->tables[t];
    if (!spec.optimizer->updates_every_row()) continue;
    const int dim = spec.dimension;
    TableStorage& s = *storage_[t];
    const int nv = s.num_variables();
    commit_index_.reset(1024);
    bool fresh = false;
    for (int p : step.local)
      for (int64_t row : step.participants[p]->undo_rows[t]) commit_index_.insert(row, &fresh);
    const Optimizer& opt = *spec.optimizer;
    const float lr = opt.dynamic_tag() >= 0 ? (*rates)[opt.dynamic_tag()] : opt.constant_learning_rate();
    zeros_.assign(dim, 0.0f);
    scratch_.resize(dim);
    float* slots[kMaxVariables];
    for (int64_t row = 0; row < spec.vocabulary_size; ++row) {
      if (!s.holds(row)) continue;
      commit_index_.insert(row, &fresh);
      if (!fresh) continue;
      for (int k = 1; k < nv; ++k) slots[k - 1] = s.row(k, row);
      opt.apply(s.row(0, row), slots, zeros_.data(), dim, lr, scratch_.data());
    }
  }
}

// Called with the gate closed: nobody writes these rows any more.
void Engine::restore(ParticipantStep& st) {
  for (size_t t = 0; t < config_->tables.size(); ++t) {
    TableStorage& s = *storage_[t];
    const size_t span = s.span_floats();
    const std::vector<int64_t>& rows = st.undo_rows[t];
    for (size_t i = 0; i < st.undo_count[t]; ++i)
      std::memcpy(s.row(0, rows[i]), st.undo_values[t].data() + i * span, span * sizeof(float));
    st.undo_count[t] = 0;
  }
}


}  // namespace embedding
}  // namespace tpurt
