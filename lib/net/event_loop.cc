#include "net/event_loop.h"

#include <signal.h>

#include "core/status.h"

namespace tpurt {
namespace net {

EventLoop::EventLoop() {
  int r = uv_loop_init(&loop_);
  if (r != 0) fail(TPU_INTERNAL, "uv_loop_init: ", uv_strerror(r));
  async_.data = this;
  r = uv_async_init(&loop_, &async_, &EventLoop::on_async);
  if (r != 0) {
    uv_loop_close(&loop_);
    fail(TPU_INTERNAL, "uv_async_init: ", uv_strerror(r));
  }
}

EventLoop::~EventLoop() { stop(); }

void EventLoop::start() {
  started_ = true;
  // libuv writes with write(2): a peer that closes as the loop writes to it would raise
  // SIGPIPE and end the caller's process. The loop thread is created with SIGPIPE
  // blocked (a new thread inherits the mask), so such a write fails with EPIPE instead;
  // the caller's own threads keep their mask.
  sigset_t pipe, before;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, &before);
  thread_ = std::thread([this] {
    thread_id_ = std::this_thread::get_id();
    uv_run(&loop_, UV_RUN_DEFAULT);
    // Handles their owners left open: close them (without callbacks) so that the
    // loop can end.
    uv_walk(&loop_, [](uv_handle_t* h, void*) { if (!uv_is_closing(h)) uv_close(h, nullptr); },
            nullptr);
    uv_run(&loop_, UV_RUN_DEFAULT);
  });
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

bool EventLoop::post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    posts_.push_back(std::move(fn));
  }
  uv_async_send(&async_);
  return true;
}

void EventLoop::run_posts() {
  for (;;) {
    std::deque<std::function<void()>> batch;
    {
      std::lock_guard<std::mutex> lock(mu_);
      batch.swap(posts_);
    }
    if (batch.empty()) return;
    for (auto& fn : batch) fn();
  }
}

void EventLoop::on_async(uv_async_t* handle) {
  EventLoop* self = static_cast<EventLoop*>(handle->data);
  self->run_posts();
  bool stopping;
  {
    std::lock_guard<std::mutex> lock(self->mu_);
    stopping = self->stopping_;
  }
  if (stopping) {
    self->run_posts();
    uv_close(reinterpret_cast<uv_handle_t*>(&self->async_), nullptr);
    uv_stop(&self->loop_);
  }
}

void EventLoop::stop() {
  if (stopped_) return;
  stopped_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  if (started_) {
    uv_async_send(&async_);
    if (thread_.joinable()) thread_.join();
  } else {
    // Never ran: the posts (their owners' closes) run here, then whatever is left.
    run_posts();
    uv_close(reinterpret_cast<uv_handle_t*>(&async_), nullptr);
    uv_run(&loop_, UV_RUN_NOWAIT);
    uv_walk(&loop_, [](uv_handle_t* h, void*) { if (!uv_is_closing(h)) uv_close(h, nullptr); },
            nullptr);
    uv_run(&loop_, UV_RUN_DEFAULT);
  }
  posts_.clear();
  uv_loop_close(&loop_);
}

}  // namespace net
}  // namespace tpurt
