#include "runtime/host_executor.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "collectives/communicator.h"
#include "core/status.h"
#include "core/tensor.h"
#include "runtime/executor.h"

namespace tpurt {

struct HostExecutor::Request {
  explicit Request(FunctionRef<tpu_status()> b) : body(b) {}
  FunctionRef<tpu_status()> body;
  bool done = false;
  tpu_status status = TPU_OK;
  std::string message;
};

HostExecutor::~HostExecutor() {
  if (thread_.joinable()) stop();
}

void HostExecutor::start(const std::shared_ptr<System>& keepalive) {
  thread_ = std::thread([this, keepalive] { loop(); });
}

void HostExecutor::stop() {
  bool busy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    busy = busy_;
  }
  work_cv_.notify_all();
  if (!thread_.joinable()) return;
  if (busy) thread_.detach();
  else thread_.join();
}

void HostExecutor::loop() {
  pthread_setname_np(pthread_self(), "tpurt-host");
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    Request* req = queue_.front();
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    clear_last_error();
    tpu_status status;
    {
      UserCodeScope scope;
      try {
        status = req->body();
      } catch (...) {
        status = set_last_error(TPU_INTERNAL, "the outside-compilation function threw a C++ exception");
      }
    }
    std::string message;
    if (status != TPU_OK)
      message = *last_error() ? last_error()
                              : str_cat("outside compilation returned ", status_name(status));
    lock.lock();
    busy_ = false;
    req->status = status;
    req->message = std::move(message);
    req->done = true;
    done_cv_.notify_all();
  }
}

tpu_status HostExecutor::call(tpu_host_fn fn, void* user_data, int replica,
                              const Communicator& comm, std::string* message) {
  return run([&] { return fn(replica, user_data); }, replica, comm, message);
}

tpu_status HostExecutor::call_tensors(tpu_host_tensors_fn fn, void* user_data, int replica,
                                      tpu_tensor* const* inputs, int num_inputs,
                                      tpu_tensor** outputs, int num_outputs,
                                      const Communicator& comm, std::string* message) {
  // The function fills a scratch array: the caller's outputs change only on success.
  std::vector<tpu_tensor*> made(static_cast<size_t>(num_outputs), nullptr);
  tpu_status st = run([&] { return fn(replica, inputs, num_inputs, made.data(), num_outputs, user_data); },
                      replica, comm, message);
  for (int o = 0; st == TPU_OK && o < num_outputs; ++o)
    if (made[o] == nullptr) {
      st = TPU_INVALID_ARGUMENT;
      *message = str_cat("outside compilation for replica ", replica, " returned TPU_OK but left output ",
                         o, " of ", num_outputs, " NULL");
    }
  if (st != TPU_OK) {
    for (tpu_tensor* t : made) release(t);
    return st;
  }
  std::copy(made.begin(), made.end(), outputs);
  return TPU_OK;
}

tpu_status HostExecutor::run(FunctionRef<tpu_status()> body, int replica, const Communicator& comm,
                             std::string* message) {
  Request req(body);
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) {
    *message = "the TPU system is shut down";
    return TPU_FAILED_PRECONDITION;
  }
  queue_.push_back(&req);
  work_cv_.notify_one();
  // Short slices: an abort of the step is polled, not signalled.
  while (!done_cv_.wait_for(lock, std::chrono::milliseconds(2), [&] { return req.done; })) {
    auto it = std::find(queue_.begin(), queue_.end(), &req);
    if (it == queue_.end()) continue;  // running: it must finish, it uses req
    if (comm.aborted() || stopping_) {
      queue_.erase(it);
      *message = str_cat("outside compilation for replica ", replica,
                         " was cancelled: the step failed before it ran");
      return TPU_ABORTED;
    }
  }
  *message = std::move(req.message);
  return req.status;
}

}  // namespace tpurt
