// What the algorithms of a collective across tasks share (cluster_algorithms.h): which
// task runs each participant, this task's participants, the transport with its
// optional engines, the transfers of one call, and the leader's scratch buffers.
// Participants are numbered 0..n-1 (a step's, replica * k + core); a group row is a
// list of participants, and this task's are its local ones in increasing order.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <algorithm>
#include <vector>

#include "net/transport.h"

namespace tpurt {
namespace net {
class CollectiveOffload;
class PostedGather;
class SharedWindows;
}

// One collective call as the leader runs it: the transfers' sequence, digest and
// deadline, and every local participant's input and output (by local index; an
// output is NULL for a member that shares another's result).
struct ClusterCall {
  uint64_t seq = 0;
  uint64_t digest = 0;
  std::vector<const void*> input;
  std::vector<void*> output;
  net::Transport::Clock::time_point deadline;
};

// The rows of a group assignment.
// Rows of different sizes (group_size TPU_GROUP_SIZE_RAGGED): ids is the encoding, each
// row after its length, and starts[gi] the offset of row gi's first id.
struct Groups {
  const int32_t* ids;
  int num_groups;
  int group_size;
  std::vector<int64_t> starts = {};
  const int32_t* row(int gi) const {
    return starts.empty() ? ids + int64_t(gi) * group_size : ids + starts[gi];
  }
  int size(int gi) const { return starts.empty() ? group_size : ids[starts[gi] - 1]; }
  int max_size() const {
    int m = group_size;
    for (int gi = 0; gi < num_groups && !starts.empty(); ++gi) m = std::max(m, size(gi));
    return m;
  }
};

// The tasks of a group row, sorted, and each task's members in member order.
struct TaskSplit {
  std::vector<int> tasks;
  std::vector<std::vector<int>> members;  // by position in tasks: positions in the row
  int mine = -1;                          // this task's position in tasks, or -1
};

// One row of a collective's groups, as an algorithm gets it.
struct Row {
  const int32_t* ids;  // the participants, in member order
  int size;
  int index;  // the row's position among the groups: the base of its tags
  const TaskSplit& split;  // ClusterContext::split's
};

class ClusterContext {
 public:
  // task_of: every participant's task. check throws the step's failure; namer words
  // a task for messages (net::Transport::exchange's).
  ClusterContext(std::vector<int> task_of, int task_id, net::Transport* transport,
                 std::function<void()> check, std::function<std::string(int)> namer);
  ~ClusterContext();

  int num_participants() const { return static_cast<int>(task_of_.size()); }
  const std::vector<int>& task_of() const { return task_of_; }
  int task_of(int p) const { return task_of_[p]; }
  int task_id() const { return task_id_; }
  bool is_local(int p) const { return task_of_[p] == task_id_; }
  // A local participant's index among this task's (-1 for another task's).
  int local_index(int p) const { return local_index_[p]; }
  const std::vector<int>& local_participants() const { return local_; }
  // A participant's position among its task's participants.
  int index_on_task(int p) const { return index_on_task_[p]; }
  int participants_on(int task) const { return on_task_[task]; }
  int most_on_a_task() const { return most_on_a_task_; }
  int num_tasks() const { return static_cast<int>(on_task_.size()); }

  // A local participant's input and output in a call.
  const void* input(const ClusterCall& call, int p) const { return call.input[local_index_[p]]; }
  void* output(const ClusterCall& call, int p) const { return call.output[local_index_[p]]; }

  // The row's tasks and members, kept per distinct row: a step's collectives reuse a
  // few groups, and building one allocates (a fixed cost of every small collective).
  // The reference stays valid until kMaxSplits other rows have been split since.
  const TaskSplit& split(const int32_t* row, int size) const;

  net::Transport* transport() const { return transport_; }
  net::CollectiveOffload* offload() const { return offload_; }  // or nullptr
  net::SharedWindows* windows() const { return windows_; }      // or nullptr
  net::PostedGather* posts() const { return posts_; }           // or nullptr

  // One collective's transfers with the other tasks; tasks: those of the group, for
  // large transfers to go in rounds (NULL: all at once).
  void exchange(ClusterCall& call, std::vector<net::Send>& sends, std::vector<net::Recv>& recvs,
                const std::vector<int>* tasks = nullptr);
  void exchange_once(ClusterCall& call, std::vector<net::Send>& sends, std::vector<net::Recv>& recvs);
  const std::function<void()>& check() const { return check_; }
  const std::function<std::string(int)>& namer() const { return namer_; }

  // The leader's buffers, grown as needed and never cleared: a collective of the
  // same size again allocates and faults nothing.
  struct Buffer {
    std::unique_ptr<char[]> data;
    size_t capacity = 0;
  };
  static char* grow(Buffer* buffer, size_t bytes);
  Buffer received, partial, result;
  std::vector<char> gather_staging;  // gather_in_rounds()'s
  // gather_posted()'s: what this task posts, what it copies from each peer (at:
  // where each task's post starts there, by task; SIZE_MAX: not read), the transfers.
  struct PostPlan {
    std::vector<char> out, in;
    std::vector<size_t> at;
    std::vector<net::Recv> from;
    std::vector<int> rows;           // the groups with members here
    uint64_t digest = 0;             // the collective the plan is for
    const int32_t* ids = nullptr;    // nullptr: no plan
    std::vector<const void*> inputs;
  } post_plan;

 private:
  const std::vector<int> task_of_;
  const int task_id_;
  net::Transport* const transport_;
  net::CollectiveOffload* const offload_;
  net::SharedWindows* const windows_;
  net::PostedGather* const posts_;
  std::vector<int> local_;        // this task's participants, increasing
  std::vector<int> local_index_;  // by participant
  std::vector<int> index_on_task_;
  std::vector<int> on_task_;      // participants by task
  int most_on_a_task_ = 0;
  const std::function<void()> check_;
  const std::function<std::string(int)> namer_;
  struct CachedSplit {
    std::vector<int32_t> row;
    TaskSplit split;
  };
  static constexpr size_t kMaxSplits = 64;
  mutable std::deque<CachedSplit> splits_;  // the leader's alone, as the buffers above
};

}  // namespace tpurt
