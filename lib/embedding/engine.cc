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
#include "topology/group_modes.h"

namespace tpurt {
namespace embedding {

Engine::Engine(const std::string& config_bytes, int task_id, int num_tasks, int cores_per_task)
    : task_id_(task_id), num_tasks_(num_tasks), cores_per_task_(cores_per_task) {
  config_ = Config::parse(config_bytes, int64_t{num_tasks} * cores_per_task);
  for (const TableSpec& t : config_->tables) max_dimension_ = std::max(max_dimension_, t.dimension);
  for (const TableSpec& t : config_->tables)
    storage_.push_back(std::make_unique<TableStorage>(t, int64_t{task_id} * cores_per_task, cores_per_task));
}

Engine::~Engine() = default;

const TableSpec& Engine::table(int table) const {
  const int n = static_cast<int>(config_->tables.size());
  if (table < 0 || table >= n) fail(TPU_OUT_OF_RANGE, "table ", table, " is outside [0, ", n, ")");
  return config_->tables[table];
}

const FeatureSpec& Engine::feature(int feature) const {
  const int n = static_cast<int>(config_->features.size());
  if (feature < 0 || feature >= n) fail(TPU_OUT_OF_RANGE, "feature ", feature, " is outside [0, ", n, ")");
  return config_->features[feature];
}

void Engine::row_owner(int t, int64_t row, int* core, int64_t* shard_row) const {
  const TableSpec& spec = table(t);
  if (row < 0 || row >= spec.vocabulary_size)
    fail(TPU_OUT_OF_RANGE, "row ", row, " is outside table '", spec.name, "''s [0, ", spec.vocabulary_size, ")");
  *core = static_cast<int>(spec.shards.shard_of(row));
  *shard_row = spec.shards.shard_row(row);
}

namespace {
void check_rows(const TableSpec& spec, int variable, int num_variables, int64_t first_row, int64_t num_rows) {
  if (variable < 0 || variable >= num_variables)
    fail(TPU_OUT_OF_RANGE, "variable ", variable, " is outside [0, ", num_variables, ") for table '", spec.name,
         "'");
  if (num_rows < 0 || first_row < 0 || first_row > spec.vocabulary_size ||
      num_rows > spec.vocabulary_size - first_row)
    fail(TPU_OUT_OF_RANGE, "rows [", first_row, ", ", first_row, " + ", num_rows, ") are outside table '", spec.name,
         "''s [0, ", spec.vocabulary_size, ")");
}
}  // namespace

void Engine::load(int t, int variable, int64_t first_row, int64_t num_rows, const float* values,
                  size_t num_values) {
  const TableSpec& spec = table(t);
  TableStorage& s = *storage_[t];
  check_rows(spec, variable, s.num_variables(), first_row, num_rows);
  const size_t want = static_cast<size_t>(num_rows) * spec.dimension;
  if (num_values != want)
    invalid_argument("table '", spec.name, "': ", num_rows, " rows of dimension ", spec.dimension, " are ", want,
                     " values, but num_values is ", num_values);
  for (int64_t r = 0; r < num_rows; ++r)
    if (s.holds(first_row + r))
      std::memcpy(s.row(variable, first_row + r), values + r * spec.dimension, spec.dimension * sizeof(float));
}

void Engine::retrieve(int t, int variable, int64_t first_row, int64_t num_rows, float* out) const {
  const TableSpec& spec = table(t);
  const TableStorage& s = *storage_[t];
  check_rows(spec, variable, s.num_variables(), first_row, num_rows);
  for (int64_t r = 0; r < num_rows; ++r)
    if (s.holds(first_row + r))
      std::memcpy(out + r * spec.dimension, s.row(variable, first_row + r), spec.dimension * sizeof(float));
}

namespace {
constexpr uint32_t kClosed = 1u << 31;
}  // namespace

StepState::StepState() = default;
StepState::~StepState() = default;

std::string StepState::name_of(int participant) const { return participant_name(participant, cores_per_replica); }

bool StepState::enter_tables() {
  if ((gate_.fetch_add(1, std::memory_order_acq_rel) & kClosed) == 0) return true;
  gate_.fetch_sub(1, std::memory_order_acq_rel);
  return false;
}

void StepState::leave_tables() { gate_.fetch_sub(1, std::memory_order_acq_rel); }

void StepState::close_tables() {
  gate_.fetch_or(kClosed, std::memory_order_acq_rel);
  // Those inside copy and compute rows, with no waits: this ends.
  while ((gate_.load(std::memory_order_acquire) & ~kClosed) != 0) std::this_thread::yield();
}

bool StepState::closed() const { return (gate_.load(std::memory_order_acquire) & kClosed) != 0; }

TableAccess::TableAccess(StepState& step, int participant) : step_(step) {
  if (!step.enter_tables())
    fail(TPU_ABORTED, step.name_of(participant), "'s step has ended: it no longer reads or writes the embedding tables");
}

void StepState::reopen() { gate_.store(0, std::memory_order_release); }

std::shared_ptr<StepState> Engine::begin_step(const std::vector<int>& participant_task,
                                              const std::vector<int>& local, int cores_per_replica) {
  // A state a late computation still holds is its own: the new step gets another.
  if (!last_step_ || last_step_late_) last_step_ = std::make_shared<StepState>();
  last_step_late_ = false;
  StepState& step = *last_step_;
  step.reopen();
  step.participant_task = participant_task;
  step.cores_per_replica = cores_per_replica;
  const size_t P = participant_task.size();
  if (step.participants.size() < P) step.participants.resize(P);
  step.local.clear();
  if (num_tasks_ > 1) step.local = local;
  else
    for (size_t p = 0; p < P; ++p) step.local.push_back(static_cast<int>(p));
  for (int p : step.local) {
    if (!step.participants[p]) step.participants[p] = std::make_unique<ParticipantStep>();
    step.participants[p]->reset(config_->features.size(), config_->tables.size(), P);
  }
  step.servers.assign(num_tasks_, {});
  for (size_t p = 0; p < P; ++p) step.servers[participant_task[p]].push_back(static_cast<int>(p));
  return last_step_;
}

ParticipantStep& Engine::step_of(const Caller& caller) {
  // A computation its step gave up on gets no state (the runtime marks it before the
  // step ends), nor one whose step has ended.
  if (caller.given_up->load(std::memory_order_acquire)) fail(TPU_ABORTED, *caller.reason);
  const int p = caller.participant;
  if (caller.step == nullptr)
    fail(TPU_FAILED_PRECONDITION, "the embedding engine has no step for ", participant_name(p, 1));
  StepState& step = *caller.step;
  if (step.closed())
    fail(TPU_ABORTED, step.name_of(p), "'s step has ended; its embedding calls are refused");
  if (p < 0 || static_cast<size_t>(p) >= step.participant_task.size() || !step.participants[p])
    fail(TPU_FAILED_PRECONDITION, "the embedding engine has no step for ", step.name_of(p));
  return *step.participants[p];
}

void Engine::enqueue(const Caller& caller, const tpu_embedding_feature_batch* features,
                     int num_features) {
  ParticipantStep& st = step_of(caller);
  if (st.enqueued)
    invalid_argument("a second tpu_embedding_enqueue in one step (", caller.step->name_of(caller.participant),
                     "): a participant enqueues its features once per step");
  const int nf = static_cast<int>(config_->features.size());
  // Check everything before keeping anything: a refused enqueue leaves no trace.
  std::vector<char> seen(nf, 0);
  for (int i = 0; i < num_features; ++i) {
    const tpu_embedding_feature_batch& b = features[i];
    if (b.feature < 0 || b.feature >= nf)
      invalid_argument("features[", i, "] names feature ", b.feature, ", but the embedding configuration has ", nf,
                       " features");
    const FeatureSpec& f = config_->features[b.feature];
    const TableSpec& t = config_->tables[f.table];
    const std::string label = str_cat("feature '", f.name, "' (table '", t.name, "')");
    if (seen[b.feature]) invalid_argument(label, " is enqueued twice in one tpu_embedding_enqueue");
    seen[b.feature] = 1;
    if (b.combiner < TPU_EMBEDDING_COMBINER_SUM || b.combiner > TPU_EMBEDDING_COMBINER_SQRTN)
      invalid_argument(label, " has combiner ", static_cast<int>(b.combiner), "; it must be 0 (sum), 1 (mean) or 2 (sqrtn)");
    if (b.num_ids > 0 && b.ids == nullptr) invalid_argument(label, ": ids is NULL but num_ids is ", b.num_ids);
    if (b.num_ids > 0 && (b.sample_indices == nullptr) == (b.row_splits == nullptr))
      invalid_argument(label, " gives ", b.sample_indices ? "both sample_indices and row_splits" : "neither sample_indices nor row_splits",
                       " for its ", b.num_ids, " ids; give exactly one (COO or ragged)");
    if (b.num_ids > static_cast<size_t>(INT32_MAX))
      invalid_argument(label, " has ", b.num_ids, " ids; at most ", INT32_MAX, " per step");
    for (size_t k = 0; k < b.num_ids; ++k)
      if (b.ids[k] < 0 || b.ids[k] >= t.vocabulary_size)
        invalid_argument(label, ": id ", b.ids[k], " (ids[", k, "]) is outside [0, ", t.vocabulary_size, ")");
    if (b.row_splits != nullptr) {
      if (b.num_row_splits != static_cast<size_t>(f.samples) + 1)
        invalid_argument(label, " has ", b.num_row_splits, " row_splits, a batch of ",
                         b.num_row_splits ? b.num_row_splits - 1 : 0, " samples; the configuration's batch is ",
                         f.samples, " samples (", f.samples + 1, " row_splits)");
      if (b.row_splits[0] != 0) invalid_argument(label, ": row_splits[0] is ", b.row_splits[0], "; it must be 0");
      for (size_t s = 1; s < b.num_row_splits; ++s)
        if (b.row_splits[s] < b.row_splits[s - 1])
          invalid_argument(label, ": row_splits[", s, "] = ", b.row_splits[s], " is below row_splits[", s - 1,
                           "] = ", b.row_splits[s - 1]);
      if (b.row_splits[b.num_row_splits - 1] != static_cast<int64_t>(b.num_ids))
        invalid_argument(label, ": the last row split is ", b.row_splits[b.num_row_splits - 1], " but there are ",
                         b.num_ids, " ids");
    } else if (b.sample_indices != nullptr) {
      for (size_t k = 0; k < b.num_ids; ++k)
        if (b.sample_indices[k] < 0 || b.sample_indices[k] >= f.samples)
          invalid_argument(label, ": sample index ", b.sample_indices[k], " (sample_indices[", k,
                           "]) is outside the batch [0, ", f.samples, ")");
    }
    if (b.weights != nullptr)
      for (size_t k = 0; k < b.num_ids; ++k)
        if (!std::isfinite(b.weights[k]))
          invalid_argument(label, ": weight ", b.weights[k], " (weights[", k, "]) is not finite");
  }

  // Keep it: per id its sample and weight, per sample the combiner's denominator, and
  // per table the unique ids.
  for (int i = 0; i < num_features; ++i) {
    const tpu_embedding_feature_batch& b = features[i];
    const FeatureSpec& f = config_->features[b.feature];
    FeatureInput& in = st.features[b.feature];
    in.present = true;
    in.ids.assign(b.ids, b.ids + b.num_ids);
    in.sample.resize(b.num_ids);
    if (b.row_splits != nullptr) {
      for (int64_t s = 0; s < f.samples; ++s)
        for (int64_t k = b.row_splits[s]; k < b.row_splits[s + 1]; ++k) in.sample[k] = s;
    } else if (b.num_ids > 0) {
      in.sample.assign(b.sample_indices, b.sample_indices + b.num_ids);
    }
    if (b.weights) in.weight.assign(b.weights, b.weights + b.num_ids);
    else in.weight.assign(b.num_ids, 1.0f);
    in.denominator.assign(f.samples, b.combiner == TPU_EMBEDDING_COMBINER_SUM ? 1.0f : 0.0f);
    if (b.combiner == TPU_EMBEDDING_COMBINER_MEAN) {
      for (size_t k = 0; k < b.num_ids; ++k) in.denominator[in.sample[k]] += in.weight[k];
    } else if (b.combiner == TPU_EMBEDDING_COMBINER_SQRTN) {
      for (size_t k = 0; k < b.num_ids; ++k) in.denominator[in.sample[k]] += in.weight[k] * in.weight[k];
      for (float& d : in.denominator) d = std::sqrt(d);
    }
  }
  for (size_t t = 0; t < config_->tables.size(); ++t) {
    size_t ids = 0;
    for (int f = 0; f < nf; ++f)
      if (st.features[f].present && config_->features[f].table == static_cast<int>(t)) ids += st.features[f].ids.size();
    st.index.reset(ids);
    std::vector<int64_t>& unique = st.unique[t];
    for (int f = 0; f < nf; ++f) {
      FeatureInput& in = st.features[f];
      if (!in.present || config_->features[f].table != static_cast<int>(t)) continue;
      in.slot.resize(in.ids.size());
      for (size_t k = 0; k < in.ids.size(); ++k) {
        bool fresh = false;
        in.slot[k] = st.index.insert(in.ids[k], &fresh);
        if (fresh) unique.push_back(in.ids[k]);
      }
    }
  }
  st.enqueued = true;
}


}  // namespace embedding
}  // namespace tpurt
