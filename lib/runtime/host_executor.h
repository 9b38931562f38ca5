// The host thread ("tpurt-host") that runs outside-compilation functions for the
// replicas, one at a time in request order, while each caller blocks.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/function_ref.h"
#include "tpurt/replicate.h"

namespace tpurt {

class Communicator;
class System;

class HostExecutor {
 public:
  HostExecutor() = default;
  ~HostExecutor();
  HostExecutor(const HostExecutor&) = delete;
  HostExecutor& operator=(const HostExecutor&) = delete;

  // Starts the thread; it holds `keepalive` until it exits.
  void start(const std::shared_ptr<System>& keepalive);
  // Stops the thread: joins it, or detaches it if it is inside a function that an
  // abandoned step left running.
  void stop();

  // Runs fn(replica, user_data) on the host thread and returns its status; on
  // failure *message gets the function's last error. If `comm` is aborted while the
  // request still waits in the queue, it is dropped and TPU_ABORTED returned.
  tpu_status call(tpu_host_fn fn, void* user_data, int replica, const Communicator& comm,
                  std::string* message);
  // The tensor form: fn(replica, inputs, num_inputs, outputs, num_outputs, user_data)
  // with the inputs borrowed. On success outputs[0..num_outputs) get the function's
  // references; otherwise they stay unchanged and whatever it set is released. A
  // NULL output after TPU_OK is TPU_INVALID_ARGUMENT naming it.
  tpu_status call_tensors(tpu_host_tensors_fn fn, void* user_data, int replica,
                          tpu_tensor* const* inputs, int num_inputs, tpu_tensor** outputs,
                          int num_outputs, const Communicator& comm, std::string* message);

 private:
  struct Request;
  void loop();
  // Runs body on the host thread; the rest as call().
  tpu_status run(FunctionRef<tpu_status()> body, int replica, const Communicator& comm,
                 std::string* message);

  std::mutex mu_;
  std::condition_variable work_cv_;  // a request arrived, or stop
  std::condition_variable done_cv_;  // a request finished
  std::deque<Request*> queue_;
  bool stopping_ = false;
  bool busy_ = false;  // inside a function
  std::thread thread_;
};

}  // namespace tpurt
