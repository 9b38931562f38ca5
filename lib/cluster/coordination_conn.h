// One established control connection inside the loop (an agent's link to the
// service, or the service's side of it): frames in through wire::FrameReader and
// wire::parse_envelope, frames out through uv_write. Loop thread only.
#pragma once

#include <uv.h>

#include <functional>
#include <string>

#include "net/control_wire.h"

namespace tpurt {
namespace wire {

class ControlConnection {
 public:
  using MessageFn = std::function<void(const net::FrameHeader&, EnvelopePtr)>;
  // reason: "connection closed", "malformed frame: ...", or the closer's words.
  using CloseFn = std::function<void(const std::string& reason, bool by_peer)>;

  // Adopts the connected socket fd (from dial or accept_handshake). The object
  // deletes itself after close(); on_close runs once, inside close().
  static ControlConnection* open(uv_loop_t* loop, int fd, std::string peer, MessageFn on_message,
                                 CloseFn on_close);
  void send(std::string frame);
  void close(const std::string& reason) { close_(reason, false); }
  bool closed() const { return closed_; }
  const std::string& peer() const { return peer_; }

 private:
  ControlConnection() = default;
  void close_(const std::string& reason, bool by_peer);
  static void on_alloc(uv_handle_t* h, size_t suggested, uv_buf_t* buf);
  static void on_read(uv_stream_t* s, ssize_t n, const uv_buf_t* buf);

  uv_tcp_t tcp_;
  std::string peer_;
  MessageFn on_message_;
  CloseFn on_close_;
  FrameReader reader_;
  char read_buf_[64 * 1024];
  bool closed_ = false;
};

}  // namespace wire
}  // namespace tpurt
