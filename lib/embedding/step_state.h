// The engine's per-step state of one computation, and what the engine's files share:
// the messages across tasks and the row prefetch.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/status.h"
#include "embedding/id_index.h"

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
  std::vector<std::vector<uint8_t>> written;   // by table: whether a unique id's sum has a term
  std::vector<float> learning_rates;
  std::vector<Received> received;              // by sender (as a server, across tasks)
  // The rows this participant updated in place (as the worker for them) and their old
  // values, per table (each row's variables' dimension floats, back to back): put back
  // at step end unless the step succeeded everywhere.
  std::vector<std::vector<int64_t>> undo_rows;
  std::vector<std::vector<float>> undo_values;
  std::vector<size_t> undo_count;  // by table: the rows whose old values are kept (updated or about to be)
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
    written.resize(num_tables);
    undo_rows.resize(num_tables);
    undo_values.resize(num_tables);
    undo_count.assign(num_tables, 0);
    for (auto& u : unique) u.clear();
    for (auto& r : undo_rows) r.clear();
    received.resize(participants);
    for (Received& r : received) {
      r.table.clear();
      r.row.clear();
      r.grad.clear();
    }
    learning_rates.clear();
  }
};

// (table, row): the key of a row in the messages across tasks.
constexpr size_t kKeyBytes = sizeof(int32_t) + sizeof(int64_t);

template <typename T>
inline void append(std::vector<uint8_t>& out, const T& v) {
  const size_t n = out.size();
  out.resize(n + sizeof(T));
  std::memcpy(out.data() + n, &v, sizeof(T));
}

inline void append_floats(std::vector<uint8_t>& out, const float* p, size_t n) {
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
// Rows are read in id order, scattered over tables far larger than the caches: asking
// for the rows a few ids ahead overlaps their misses instead of paying them one by one.
constexpr size_t kPrefetchAhead = 8;
inline void prefetch_row(const float* row, int dim) {
  const char* p = reinterpret_cast<const char*>(row);
  for (size_t at = 0; at < dim * sizeof(float); at += 64) __builtin_prefetch(p + at);
}

}  // namespace embedding
}  // namespace tpurt
