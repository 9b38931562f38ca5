// One libuv loop on its own thread. Other threads hand it work with post(); the
// loop's own handles are touched only from that thread.
#pragma once

#include <uv.h>

#include <atomic>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace tpurt {
namespace net {

class EventLoop {
 public:
  EventLoop();
  ~EventLoop();  // stop()
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  void start();
  // Runs fn on the loop thread soon. False (fn dropped, not run) once stop began.
  bool post(std::function<void()> fn);
  // Runs the posts still queued, then closes every handle still open (their owners
  // must have closed them first, in a post, for their close callbacks to run) and
  // joins the thread. Idempotent; not from the loop thread.
  void stop();
  bool on_loop_thread() const { return std::this_thread::get_id() == thread_id_; }
  uv_loop_t* loop() { return &loop_; }

 private:
  static void on_async(uv_async_t* handle);
  void run_posts();

  uv_loop_t loop_;
  uv_async_t async_;
  std::thread thread_;
  std::atomic<std::thread::id> thread_id_{};
  std::mutex mu_;
  std::deque<std::function<void()>> posts_;
  bool stopping_ = false;  // guarded by mu_
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace net
}  // namespace tpurt
