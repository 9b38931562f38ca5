// The embedding engine of one task: the tables' shards held here, and the step's
// lookups and gradients. The runtime brackets every step with begin_step / end_step
// under its step lock; the participants call enqueue, recv_activations and
// send_gradients from their threads in between. Once every computation has sent its
// gradients, each updates its share of the rows in place, keeping the old values;
// end_step puts them back unless the step succeeded on every task.
//
// Each step's state is a StepState of its own, held by the runtime's step (and so by
// a computation that overruns it); the next step never shares it. Every read or write
// of the tables by a computation happens inside the state's gate, which end_step
// closes (waiting out the readers and writers inside, whose work is arithmetic with
// no waits) before it keeps or puts back the rows: after that no computation of the
// step touches the tables, late or not.
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

// One step's state (engine.h): its participants, and each local one's lookups,
// gradients and undo log.
class StepState {
 public:
  StepState();
  ~StepState();
  StepState(const StepState&) = delete;
  StepState& operator=(const StepState&) = delete;

  std::string name_of(int participant) const;

  std::vector<int> participant_task;  // by participant
  std::vector<int> local;             // the participants whose state is here
  std::vector<std::vector<int>> servers;  // by task: its participants in this step
  int cores_per_replica = 1;
  std::vector<std::unique_ptr<ParticipantStep>> participants;  // by participant id; local only

  // The tables' gate: false once end_step has closed it (nothing entered then).
  bool enter_tables();
  void leave_tables();
  // Closes the gate and waits until nobody is inside.
  void close_tables();
  bool closed() const;
  void reopen();

 private:
  std::atomic<uint32_t> gate_{0};  // kClosed | the computations inside
};

// A computation's reading or writing of the tables, for its scope: TPU_ABORTED when
// the step has ended (its gate is closed).
class TableAccess {
 public:
  TableAccess(StepState& step, int participant);
  ~TableAccess() { step_.leave_tables(); }
  TableAccess(const TableAccess&) = delete;
  TableAccess& operator=(const TableAccess&) = delete;

 private:
  StepState& step_;
};

// A computation calling into the engine: its participant id, its step's state, and
// the runtime's mark of a computation its step gave up on (with why).
struct Caller {
  int participant;
  StepState* step;  // NULL: the computation's step has no embedding state
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
  // running here; cores_per_replica names them ("replica R core C"). The caller holds
  // the state for the step and passes it to end_step.
  std::shared_ptr<StepState> begin_step(const std::vector<int>& participant_task,
                                        const std::vector<int>& local, int cores_per_replica);
  // Closes the step's gate, then keeps its updates if it succeeded everywhere, else
  // puts the old rows back. late: some computation of the step has not returned (it
  // keeps the state; the next step gets a new one).
  void end_step(StepState& step, bool succeeded, bool late);

  void enqueue(const Caller& caller, const tpu_embedding_feature_batch* features,
               int num_features);
  void recv_activations(const Caller& caller, Communicator& comm, tpu_tensor** out,
                        int num_activations);
  void send_gradients(const Caller& caller, Communicator& comm,
                      tpu_tensor* const* gradients, int num_gradients,
                      const float* learning_rates, int num_learning_rates);

 private:
  ParticipantStep& step_of(const Caller& caller);
  void combine(const FeatureInput& in, const FeatureSpec& f, const float* const* rows, float* out) const;
  // The computation that serves a row in this step (across tasks).
  int server_of(const StepState& step, int64_t row, const TableSpec& spec) const;
  void route(const StepState& step, ParticipantStep& st, std::vector<size_t>* per_server_ids) const;
  void fetch_rows(StepState& step, int me, Communicator& comm, ParticipantStep& st);
  void agree_on_learning_rates(const StepState& step, int me, Communicator& comm, const float* rates, int n,
                               ParticipantStep& st);
  void send_to_servers(const StepState& step, int me, Communicator& comm, ParticipantStep& st);
  int worker_of(const StepState& step, int64_t row) const;
  void update_rows(StepState& step, int me, ParticipantStep& st);
  void restore(ParticipantStep& st);

  std::unique_ptr<Config> config_;
  int task_id_, num_tasks_, cores_per_task_;
  std::vector<std::unique_ptr<TableStorage>> storage_;  // one per table
  int max_dimension_ = 0;

  // The last step's state, reused by the next unless a computation of it was late
  // (guarded by the runtime's step lock).
  std::shared_ptr<StepState> last_step_;
  bool last_step_late_ = false;

  // end_step's working space (non-lazy optimizers), kept between steps.
  IdIndex commit_index_;
  std::vector<float> scratch_, zeros_;
};

}  // namespace embedding
}  // namespace tpurt
