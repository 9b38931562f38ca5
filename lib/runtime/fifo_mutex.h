// A mutex that admits waiters in arrival order (a ticket lock), so steps submitted
// from several host threads run in call order.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace tpurt {

class FifoMutex {
 public:
  void lock() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t ticket = next_++;
    cv_.wait(lock, [&] { return serving_ == ticket; });
  }
  void unlock() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++serving_;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_ = 0;
  uint64_t serving_ = 0;
};

}  // namespace tpurt
