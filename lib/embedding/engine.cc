#include "embedding/engine.h"

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstring>
#include <thread>

#include "collectives/communicator.h"
#include "core/status.h"
#include "core/tensor.h"
#include "embedding/exchange.h"
#include "embedding/id_index.h"
#include "topology/group_modes.h"

namespace tpurt {
namespace embedding {

// One feature's ids for the step, as one participant enqueued them.
struct FeatureInput {
  bool present = false;
  std::vector<int64_t> ids;
  std::vector<int64_t> sample;     // per id
  std::vector<float> weight;       // per id
  std::vector<float> denominator;  // per sample: 1, the weight sum (MEAN) or its sqrt-of-squares (SQRTN)
  std::vector<int32_t> slot;       // per id: its index among the table's unique ids
};

// A gradient contribution a server received: rows of its task, in the sender's order.
struct Received {
  std::vector<int32_t> table;
  std::vector<int64_t> row;
  std::vector<float> grad;  // row's dimension floats each, back to back
};

// One participant's state in the step. Only its own thread touches it during the step.
struct ParticipantStep {
  bool enqueued = false, received_activations = false, sent_gradients = false;
  std::vector<FeatureInput> features;          // by feature
  std::vector<std::vector<int64_t>> unique;    // by table: ids in first-occurrence order
  std::vector<std::vector<float>> rows;        // by table: the unique ids' rows (across tasks)
  std::vector<std::vector<int32_t>> server;    // by table: each unique id's server (across tasks)
  std::vector<std::vector<std::vector<int32_t>>> by_worker;  // by table, worker: unique indices (one process)
  std::vector<std::vector<float>> grads;       // by table: the unique ids' summed gradients
  std::vector<float> learning_rates;
  std::vector<Received> received;              // by sender (as a server, across tasks)
  // The rows this participant updated in place (as the worker for them) and their old
  // values, per table (each row's variables' dimension floats, back to back): put back
  // at step end unless the step succeeded everywhere.
  std::vector<std::vector<int64_t>> undo_rows;
  std::vector<std::vector<float>> undo_values;
  std::vector<size_t> undo_count;  // by table: the rows whose old values are kept (updated or about to be)
  // 0: not updating; 1: updating the tables; 2: done (end_step waits out a 1).
  std::atomic<int> updating{0};
  std::vector<float> sums, scratch;
  IdIndex index;

  void reset(size_t num_features, size_t num_tables, size_t participants) {
    enqueued = received_activations = sent_gradients = false;
    features.resize(num_features);
    for (FeatureInput& f : features) f.present = false;
    unique.resize(num_tables);
    rows.resize(num_tables);
    server.resize(num_tables);
    by_worker.resize(num_tables);
    grads.resize(num_tables);
    undo_rows.resize(num_tables);
    undo_values.resize(num_tables);
    undo_count.assign(num_tables, 0);
    updating.store(0, std::memory_order_relaxed);
    for (auto& u : unique) u.clear();
    for (auto& r : undo_rows) r.clear();
    for (auto& v : undo_values) v.clear();
    received.resize(participants);
    for (Received& r : received) {
      r.table.clear();
      r.row.clear();
      r.grad.clear();
    }
    learning_rates.clear();
  }
};

namespace {

template <typename T>
void append(std::vector<uint8_t>& out, const T& v) {
  const size_t n = out.size();
  out.resize(n + sizeof(T));
  std::memcpy(out.data() + n, &v, sizeof(T));
}

void append_floats(std::vector<uint8_t>& out, const float* p, size_t n) {
  const size_t at = out.size();
  out.resize(at + n * sizeof(float));
  if (n) std::memcpy(out.data() + at, p, n * sizeof(float));
}

// Reads a peer's message; a short one is an error of the data plane, never a crash.
class Reader {
 public:
  Reader(const std::vector<uint8_t>& bytes, const std::string& from) : b_(bytes), from_(from) {}
  bool done() const { return at_ == b_.size(); }
  template <typename T>
  T read() {
    T v;
    need(sizeof(T));
    std::memcpy(&v, b_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  const uint8_t* take(size_t n) {
    need(n);
    const uint8_t* p = b_.data() + at_;
    at_ += n;
    return p;
  }

 private:
  void need(size_t n) {
    if (b_.size() - at_ < n)
      fail(TPU_INTERNAL, "a malformed embedding message from ", from_, ": ", b_.size(), " bytes, ", at_ + n,
           " needed");
  }
  const std::vector<uint8_t>& b_;
  std::string from_;
  size_t at_ = 0;
};

// Rows are read in id order, scattered over tables far larger than the caches: asking
// for the rows a few ids ahead overlaps their misses instead of paying them one by one.
constexpr size_t kPrefetchAhead = 8;
inline void prefetch_row(const float* row, int dim) {
  const char* p = reinterpret_cast<const char*>(row);
  for (size_t at = 0; at < dim * sizeof(float); at += 64) __builtin_prefetch(p + at);
}

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

void Engine::begin_step(const std::vector<int>& participant_task, const std::vector<int>& local,
                        int cores_per_replica) {
  std::lock_guard<std::mutex> lock(step_mu_);
  participant_task_ = participant_task;
  cores_per_replica_ = cores_per_replica;
  const size_t P = participant_task.size();
  if (participants_.size() < P) participants_.resize(P);
  const std::vector<int> everyone = [&] {
    std::vector<int> v(P);
    for (size_t p = 0; p < P; ++p) v[p] = static_cast<int>(p);
    return v;
  }();
  for (int p : num_tasks_ > 1 ? local : everyone) {
    // A computation left running by a late step keeps its old state (it holds a
    // reference); the new step gets state of its own.
    if (!participants_[p] || last_step_late_) participants_[p] = std::make_shared<ParticipantStep>();
    participants_[p]->reset(config_->features.size(), config_->tables.size(), P);
  }
  local_ = num_tasks_ > 1 ? local : everyone;
  servers_.assign(num_tasks_, {});
  for (size_t p = 0; p < P; ++p) servers_[participant_task[p]].push_back(static_cast<int>(p));
  step_open_ = true;
}

std::string Engine::name_of(int participant) const { return participant_name(participant, cores_per_replica_); }

std::shared_ptr<ParticipantStep> Engine::step_of(const Caller& caller) {
  std::lock_guard<std::mutex> lock(step_mu_);
  // A computation its step gave up on gets no state (the runtime marks it before the
  // step ends; the next step's state is not its own).
  if (caller.given_up->load(std::memory_order_acquire)) fail(TPU_ABORTED, *caller.reason);
  const int p = caller.participant;
  if (!step_open_ || p < 0 || static_cast<size_t>(p) >= participant_task_.size() || !participants_[p])
    fail(TPU_FAILED_PRECONDITION, "the embedding engine has no step for ", name_of(p));
  return participants_[p];
}

void Engine::enqueue(const Caller& caller, const tpu_embedding_feature_batch* features,
                     int num_features) {
  const std::shared_ptr<ParticipantStep> held = step_of(caller);
  ParticipantStep& st = *held;
  if (st.enqueued)
    invalid_argument("a second tpu_embedding_enqueue in one step (", name_of(caller.participant),
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

// TensorFlow's combiners: the weighted sum, then div_no_nan by the denominator.
void Engine::combine(const FeatureInput& in, const FeatureSpec& f, const float* const* rows, float* out) const {
  const int dim = config_->tables[f.table].dimension;
  const size_t n = in.ids.size();
  for (size_t k = 0; k < n; ++k) {
    if (k + kPrefetchAhead < n) prefetch_row(rows[k + kPrefetchAhead], dim);
    float* o = out + in.sample[k] * dim;
    const float* r = rows[k];
    const float w = in.weight[k];
    for (int j = 0; j < dim; ++j) o[j] += w * r[j];
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
  const std::shared_ptr<ParticipantStep> held = step_of(caller);
  ParticipantStep& st = *held;
  const int nf = static_cast<int>(config_->features.size());
  if (num_activations != nf)
    invalid_argument("num_activations is ", num_activations, " but the embedding configuration has ", nf,
                     " features");
  for (int f = 0; f < nf; ++f) out[f] = nullptr;
  if (config_->mode == TPU_EMBEDDING_MODE_BACKWARD_PASS_ONLY)
    fail(TPU_FAILED_PRECONDITION, "the embedding configuration's mode is BACKWARD_PASS_ONLY: it gives no activations");
  if (!st.enqueued)
    invalid_argument(name_of(caller.participant), " asks for embedding activations before its tpu_embedding_enqueue");
  if (st.received_activations)
    invalid_argument(name_of(caller.participant), " asks for embedding activations twice in one step");
  if (st.sent_gradients)
    invalid_argument(name_of(caller.participant), " asks for embedding activations after sending its gradients ",
                     "(the step's updates may have begun)");
  if (num_tasks_ > 1) fetch_rows(caller.participant, comm, st);

  std::vector<tpu_tensor*> made(nf, nullptr);
  try {
    std::vector<const float*> rows;
    for (int f = 0; f < nf; ++f) {
      const FeatureInput& in = st.features[f];
      if (!in.present) continue;
      const FeatureSpec& spec = config_->features[f];
      const int t = spec.table;
      const int dim = config_->tables[t].dimension;
      std::vector<int64_t> dims = spec.input_shape;
      dims.push_back(dim);
      made[f] = new_tensor(TPU_FLOAT, dims.data(), static_cast<int>(dims.size()));
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
// computations and the exchange's messages, padded to the longest, stay even.
int Engine::server_of(int64_t row, const TableSpec& spec) const {
  const int64_t task = spec.shards.shard_of(row) / cores_per_task_;
  const std::vector<int>& servers = servers_[task];
  if (servers.empty())
    fail(TPU_FAILED_PRECONDITION, "task ", task, " holds shards of embedding table '", spec.name,
         "' but runs no computation of this step; an embedding step needs a computation on every task");
  const uint64_t h = static_cast<uint64_t>(row) * 0x9E3779B97F4A7C15ull;
  return servers[(h >> 32) % servers.size()];
}

// The server of each of this participant's unique ids, and how many go to each server.
void Engine::route(ParticipantStep& st, std::vector<size_t>* per_server_ids) const {
  per_server_ids->assign(participant_task_.size(), 0);
  for (size_t t = 0; t < config_->tables.size(); ++t) {
    const TableSpec& spec = config_->tables[t];
    std::vector<int32_t>& to = st.server[t];
    to.resize(st.unique[t].size());
    for (size_t u = 0; u < st.unique[t].size(); ++u) {
      to[u] = server_of(st.unique[t][u], spec);
      ++(*per_server_ids)[to[u]];
    }
  }
}

namespace {
constexpr size_t kKeyBytes = sizeof(int32_t) + sizeof(int64_t);  // (table, row)
}  // namespace

// Across tasks: each unique id goes to a computation on the task holding its row (the
// server), which answers with the rows in the order asked.
void Engine::fetch_rows(int me, Communicator& comm, ParticipantStep& st) {
  const int P = static_cast<int>(participant_task_.size());
  std::vector<size_t> count;
  route(st, &count);
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
  for (int q = 0; q < P; ++q) {
    answer[q].reserve(asked[q].size() / kKeyBytes * max_dimension_ * sizeof(float));
    Reader r(asked[q], name_of(q));
    while (!r.done()) {
      const int32_t t = r.read<int32_t>();
      const int64_t id = r.read<int64_t>();
      if (t < 0 || static_cast<size_t>(t) >= config_->tables.size() || id < 0 ||
          id >= config_->tables[t].vocabulary_size || !storage_[t]->holds(id))
        fail(TPU_INTERNAL, name_of(q), " asked for row ", id, " of table ", t, ", which this task does not hold");
      append_floats(answer[q], storage_[t]->row(0, id), config_->tables[t].dimension);
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
        fail(TPU_INTERNAL, "a malformed embedding answer from ", name_of(s), ": ", answered[s].size(), " bytes");
      std::memcpy(st.rows[t].data() + u * dim, answered[s].data() + at[s], bytes);
      at[s] += bytes;
    }
  }
}

void Engine::send_gradients(const Caller& caller, Communicator& comm, tpu_tensor* const* gradients,
                            int num_gradients, const float* learning_rates, int num_learning_rates) {
  const std::shared_ptr<ParticipantStep> held = step_of(caller);
  ParticipantStep& st = *held;
  const int nf = static_cast<int>(config_->features.size());
  if (config_->mode == TPU_EMBEDDING_MODE_INFERENCE)
    fail(TPU_FAILED_PRECONDITION, "the embedding configuration's mode is ", mode_name(config_->mode),
         ": it takes no gradients");
  if (!st.enqueued)
    invalid_argument(name_of(caller.participant), " sends embedding gradients before its tpu_embedding_enqueue");
  if (st.sent_gradients)
    invalid_argument(name_of(caller.participant), " sends embedding gradients twice in one step");
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
        if (!servers_[task].empty()) continue;
        for (int64_t shard = int64_t{task} * cores_per_task_; shard < int64_t{task + 1} * cores_per_task_; ++shard)
          if (t.shards.rows_in(shard) > 0)
            fail(TPU_FAILED_PRECONDITION, "task ", task, " holds shards of embedding table '", t.name,
                 "', whose optimizer updates every row, but runs no computation of this step; an embedding step ",
                 "needs a computation on every task");
      }
    }

  // Each unique row's gradient, summed over this participant's ids in feature order.
  for (size_t t = 0; t < config_->tables.size(); ++t)
    st.grads[t].assign(st.unique[t].size() * config_->tables[t].dimension, 0.0f);
  for (int f = 0; f < nf; ++f) {
    const FeatureInput& in = st.features[f];
    if (!in.present) continue;
    const int t = config_->features[f].table;
    const int dim = config_->tables[t].dimension;
    const float* g = static_cast<const float*>(gradients[f]->data);
    float* acc = st.grads[t].data();
    for (size_t k = 0; k < in.ids.size(); ++k) {
      const float* gs = g + in.sample[k] * dim;
      const float d = in.denominator[in.sample[k]], w = in.weight[k];
      float* a = acc + static_cast<size_t>(in.slot[k]) * dim;
      if (d == 0.0f) continue;  // div_no_nan's gradient is zero there too
      if (d == 1.0f) {  // x / 1 is x exactly: the same sums without a division each
        for (int j = 0; j < dim; ++j) a[j] += gs[j] * w;
        continue;
      }
      for (int j = 0; j < dim; ++j) a[j] += gs[j] / d * w;
    }
  }
  // In one process: which of the unique rows each worker updates, so that each reads
  // only its own.
  if (num_tasks_ == 1) {
    const int P = static_cast<int>(participant_task_.size());
    for (size_t t = 0; t < config_->tables.size(); ++t) {
      std::vector<std::vector<int32_t>>& by = st.by_worker[t];
      by.resize(P);
      for (auto& v : by) v.clear();
      for (size_t u = 0; u < st.unique[t].size(); ++u) by[worker_of(st.unique[t][u])].push_back(static_cast<int32_t>(u));
    }
  }

  // Every participant gives the same learning rates; this also makes the call a
  // collective, so a participant that skips it is named.
  agree_on_learning_rates(caller.participant, comm, learning_rates, num_learning_rates, st);
  if (num_tasks_ > 1) send_to_servers(caller.participant, comm, st);
  // Every participant's gradients are in (the collectives above returned everywhere):
  // this one updates its share of the rows, in parallel with the others, keeping the
  // old values for end_step to put back if the step fails anywhere.
  st.sent_gradients = true;
  update_rows(caller.participant, st);
}

void Engine::agree_on_learning_rates(int me, Communicator& comm, const float* rates, int n, ParticipantStep& st) {
  const int64_t dims[1] = {1 + n};
  tpu_tensor* mine = new_tensor(TPU_FLOAT, dims, 1);
  float* m = static_cast<float*>(mutable_data(mine));
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
  const int P = static_cast<int>(participant_task_.size());
  for (int q = 1; q < P; ++q)
    if (std::memcmp(a + q * (1 + n), a, sizeof(float) * (1 + n)) != 0) {
      int tag = 0;
      while (tag < n && a[q * (1 + n) + 1 + tag] == a[1 + tag]) ++tag;
      const std::string first = name_of(0), other = name_of(q);
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
void Engine::send_to_servers(int me, Communicator& comm, ParticipantStep& st) {
  const int P = static_cast<int>(participant_task_.size());
  std::vector<size_t> count;
  route(st, &count);  // again: a participant may send without having asked for activations
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
    Reader r(in[q], name_of(q));
    Received& rec = st.received[q];
    rec.table.reserve(in[q].size() / kKeyBytes);  // bounds: every entry is longer
    rec.row.reserve(in[q].size() / kKeyBytes);
    rec.grad.reserve(in[q].size() / sizeof(float));
    while (!r.done()) {
      const int32_t t = r.read<int32_t>();
      const int64_t id = r.read<int64_t>();
      if (t < 0 || static_cast<size_t>(t) >= config_->tables.size() || id < 0 ||
          id >= config_->tables[t].vocabulary_size || !storage_[t]->holds(id))
        fail(TPU_INTERNAL, name_of(q), " sent a gradient of row ", id, " of table ", t,
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
int Engine::worker_of(int64_t row) const {
  const uint64_t h = static_cast<uint64_t>(row) * 0x9E3779B97F4A7C15ull;
  return static_cast<int>((h >> 32) % participant_task_.size());
}

// Sums each of this participant's rows' gradients in participant order (the same order
// in one process and across tasks, so the sums are bit-identical) and applies the
// optimizer to them in place, keeping the old values. Nothing reads the tables any more
// in this step: every computation has sent its gradients, so it has had its activations.
void Engine::update_rows(int me, ParticipantStep& st) {
  const int P = static_cast<int>(participant_task_.size());
  st.updating.store(1, std::memory_order_release);
  // Done, even when an allocation fails halfway: the rows kept so far are put back.
  struct Done {
    std::atomic<int>& flag;
    ~Done() { flag.store(2, std::memory_order_release); }
  } done{st.updating};
  for (size_t t = 0; t < config_->tables.size(); ++t) {
    const TableSpec& spec = config_->tables[t];
    const int dim = spec.dimension;
    std::vector<int64_t>& rows = st.undo_rows[t];
    std::vector<float>& sums = st.sums;
    sums.clear();
    st.index.reset(1024);
    auto add = [&](int64_t row, const float* g) {
      bool fresh = false;
      const int32_t i = st.index.insert(row, &fresh);
      if (fresh) {
        rows.push_back(row);
        sums.resize(sums.size() + dim, 0.0f);
      }
      float* acc = sums.data() + static_cast<size_t>(i) * dim;
      for (int j = 0; j < dim; ++j) acc[j] += g[j];
    };
    for (int q = 0; q < P; ++q) {
      if (num_tasks_ == 1) {
        const ParticipantStep& from = *participants_[q];
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
    std::vector<float>& old = st.undo_values[t];
    old.resize(rows.size() * nv * dim);
    st.scratch.resize(dim);
    float* slots[kMaxVariables];
    for (size_t i = 0; i < rows.size(); ++i) {
      if (i + kPrefetchAhead < rows.size())
        for (int k = 0; k < nv; ++k) prefetch_row(s.row(k, rows[i + kPrefetchAhead]), dim);
      float* keep = old.data() + i * nv * dim;
      for (int k = 0; k < nv; ++k) std::memcpy(keep + k * dim, s.row(k, rows[i]), dim * sizeof(float));
      st.undo_count[t] = i + 1;
      for (int k = 1; k < nv; ++k) slots[k - 1] = s.row(k, rows[i]);
      opt.apply(s.row(0, rows[i]), slots, sums.data() + i * dim, dim, lr, st.scratch.data());
    }
  }
}

// A failed step puts back the old values of every row its computations updated here; a
// successful one applies a non-lazy optimizer to the rows nobody touched.
void Engine::end_step(bool succeeded, bool late) {
  std::lock_guard<std::mutex> lock(step_mu_);
  last_step_late_ = late;
  if (!step_open_) return;
  step_open_ = false;
  if (!succeeded) {
    for (int p : local_)
      if (participants_[p]) restore(*participants_[p]);
    return;
  }
  const std::vector<float>* rates = nullptr;
  for (int p : local_)
    if (participants_[p] && participants_[p]->sent_gradients) {
      rates = &participants_[p]->learning_rates;
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
    for (int p : local_)
      for (int64_t row : participants_[p]->undo_rows[t]) commit_index_.insert(row, &fresh);
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

void Engine::restore(ParticipantStep& st) {
  // A computation still updating (a late one) is pure arithmetic with no waits: let it
  // finish before its rows are put back, for a bounded time.
  for (int spins = 0; st.updating.load(std::memory_order_acquire) == 1 && spins < 100000; ++spins)
    std::this_thread::yield();
  if (st.updating.load(std::memory_order_acquire) == 0) return;
  for (size_t t = 0; t < config_->tables.size(); ++t) {
    TableStorage& s = *storage_[t];
    const int dim = config_->tables[t].dimension, nv = s.num_variables();
    const std::vector<int64_t>& rows = st.undo_rows[t];
    for (size_t i = 0; i < st.undo_count[t]; ++i) {
      const float* keep = st.undo_values[t].data() + i * nv * dim;
      for (int k = 0; k < nv; ++k) std::memcpy(s.row(k, rows[i]), keep + k * dim, dim * sizeof(float));
    }
  }
  st.updating.store(0, std::memory_order_release);
}

}  // namespace embedding
}  // namespace tpurt
