// The embedding engine of one task: the tables' shards held here, and the step's
// lookups and gradients. The runtime brackets every step with begin_step / end_step
// under its step lock; the participants call enqueue, recv_activations and
// send_gradients from their threads in between. Once every computation has sent its
// gradients, each updates its share of the rows in place, keeping the old values;
// end_step puts them back unless the step succeeded on every task.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "embedding/config.h"
#include "embedding/id_index.h"
#include "embedding/table.h"
#include "tpurt/embedding.h"
#include "tpurt/tensor.h"

namespace tpurt {

class Communicator;

namespace embedding {

struct ParticipantStep;
struct FeatureInput;

// A computation calling into the engine: its participant id, and the runtime's mark
// of a computation its step gave up on (with why), read under the engine's lock.
struct Caller {
  int participant;
  const std::atomic<bool>* given_up;
  const std::string* reason;
};

class Engine {
 public:
  // This task's part of a system of num_tasks x cores_per_task cores.
  Engine(const std::string& config_bytes, int task_id, int num_tasks, int cores_per_task);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const Config& config() const { return *config_; }
  // Checked indices (TPU_OUT_OF_RANGE naming the index and the count).
  const TableSpec& table(int table) const;
  const FeatureSpec& feature(int feature) const;
  void row_owner(int table, int64_t row, int* core, int64_t* shard_row) const;

  // Host access; the caller holds the runtime's step lock.
  void load(int table, int variable, int64_t first_row, int64_t num_rows, const float* values,
            size_t num_values);
  // Fills the rows held here; returns nothing about the others.
  void retrieve(int table, int variable, int64_t first_row, int64_t num_rows, float* out) const;

  // The step's participants: participant_task[p] for every participant, `local` those
  // running here; cores_per_replica names them ("replica R core C").
  void begin_step(const std::vector<int>& participant_task, const std::vector<int>& local,
                  int cores_per_replica);
  // Keeps the step's updates if it succeeded everywhere, else puts the old rows back.
  // late: some computation of the step has not returned (it keeps its state).
  void end_step(bool succeeded, bool late);

  void enqueue(const Caller& caller, const tpu_embedding_feature_batch* features,
               int num_features);
  void recv_activations(const Caller& caller, Communicator& comm, tpu_tensor** out,
                        int num_activations);
  void send_gradients(const Caller& caller, Communicator& comm,
                      tpu_tensor* const* gradients, int num_gradients,
                      const float* learning_rates, int num_learning_rates);

 private:
  std::shared_ptr<ParticipantStep> step_of(const Caller& caller);
  std::string name_of(int participant) const;
  void combine(const FeatureInput& in, const FeatureSpec& f, const float* const* rows, float* out) const;
  // The computation that serves a row in this step (across tasks).
  int server_of(int64_t row, const TableSpec& spec) const;
  void route(ParticipantStep& st, std::vector<size_t>* per_server_ids) const;
  void fetch_rows(int me, Communicator& comm, ParticipantStep& st);
  void agree_on_learning_rates(int me, Communicator& comm, const float* rates, int n, ParticipantStep& st);
  void send_to_servers(int me, Communicator& comm, ParticipantStep& st);
  int worker_of(int64_t row) const;
  void update_rows(int me, ParticipantStep& st);
  void restore(ParticipantStep& st);

  std::unique_ptr<Config> config_;
  int task_id_, num_tasks_, cores_per_task_;
  std::vector<std::unique_ptr<TableStorage>> storage_;  // one per table

  // The step in flight (guarded by the runtime's step lock between steps; each
  // participant touches only its own entry during the step). step_mu_ orders a late
  // computation's step_of against the step's end and the next step's begin.
  std::mutex step_mu_;
  bool step_open_ = false;
  int cores_per_replica_ = 1;
  std::vector<int> participant_task_;
  std::vector<std::shared_ptr<ParticipantStep>> participants_;  // by participant id; local only
  bool last_step_late_ = false;
  std::vector<int> local_;                  // the participants whose state is here
  std::vector<std::vector<int>> servers_;   // by task: its participants in this step
  int max_dimension_ = 0;

  // end_step's working space (non-lazy optimizers), kept between steps.
  IdIndex commit_index_;
  std::vector<float> scratch_, zeros_;
};

}  // namespace embedding
}  // namespace tpurt
