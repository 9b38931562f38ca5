// A listening TCP socket watched by a libuv loop: accepted connections are handed
// over as plain blocking fds (the handshake runs on its own thread, outside the loop).
#pragma once

#include <uv.h>

#include <functional>
#include <string>

namespace tpurt {
namespace net {

class Listener {
 public:
  // Called on the loop thread for each accepted connection; the callee owns fd.
  using Accepted = std::function<void(int fd)>;

  // Binds and listens on address (host:port) at once, so that a taken port throws
  // here (TPU_ALREADY_EXISTS when another socket holds it, else TPU_UNAVAILABLE,
  // naming the address); accepts once the loop runs. Call
  // before the loop thread starts or on it. The object deletes itself on close().
  static Listener* open(uv_loop_t* loop, const std::string& address, Accepted on_accept);
  // Stops listening; on the loop thread.
  void close();
  const std::string& address() const { return address_; }

 private:
  Listener(std::string address, int fd, Accepted on_accept)
      : address_(std::move(address)), fd_(fd), on_accept_(std::move(on_accept)) {}
  static void on_readable(uv_poll_t* handle, int status, int events);

  std::string address_;
  int fd_;
  Accepted on_accept_;
  uv_poll_t poll_;
  bool closed_ = false;
};

}  // namespace net
}  // namespace tpurt
