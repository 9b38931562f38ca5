#include "cluster/coordination_conn.h"

#include <fcntl.h>
#include <unistd.h>

#include "core/status.h"

namespace tpurt {
namespace wire {
namespace {

struct WriteRequest {
  uv_write_t req;
  std::string data;
  ControlConnection* conn;
};

}  // namespace

ControlConnection* ControlConnection::open(uv_loop_t* loop, int fd, std::string peer,
                                           MessageFn on_message, CloseFn on_close) {
  ControlConnection* c = new ControlConnection();
  c->peer_ = std::move(peer);
  c->on_message_ = std::move(on_message);
  c->on_close_ = std::move(on_close);
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  uv_tcp_init(loop, &c->tcp_);
  c->tcp_.data = c;
  int r = uv_tcp_open(&c->tcp_, fd);
  if (r == 0) r = uv_read_start(reinterpret_cast<uv_stream_t*>(&c->tcp_), &on_alloc, &on_read);
  if (r != 0) {
    // The handle owns fd only once uv_tcp_open succeeded; close it ourselves otherwise.
    uv_os_fd_t owned;
    if (uv_fileno(reinterpret_cast<uv_handle_t*>(&c->tcp_), &owned) != 0) ::close(fd);
    c->on_close_ = nullptr;  // the caller learns it from the nullptr
    c->close_(str_cat("cannot watch the connection: ", uv_strerror(r)), false);
    return nullptr;
  }
  return c;
}

void ControlConnection::on_alloc(uv_handle_t* h, size_t, uv_buf_t* buf) {
  ControlConnection* c = static_cast<ControlConnection*>(h->data);
  buf->base = c->read_buf_;
  buf->len = sizeof c->read_buf_;
}

void ControlConnection::on_read(uv_stream_t* s, ssize_t n, const uv_buf_t* buf) {
  ControlConnection* c = static_cast<ControlConnection*>(s->data);
  if (c->closed_) return;
  if (n < 0) {
    c->close_(n == UV_EOF ? "connection closed" : str_cat("connection lost: ", uv_strerror(n)),
              true);
    return;
  }
  if (n == 0) return;
  c->reader_.append(buf->base, static_cast<size_t>(n));
  while (!c->closed_) {
    net::FrameHeader h;
    std::string payload, error;
    int got = c->reader_.next(&h, &payload, &error);
    if (got == 0) return;
    if (got < 0) {
      log(str_cat("closing the connection from ", c->peer_, ": malformed frame: ", error));
      c->close_(str_cat("malformed frame: ", error), false);
      return;
    }
    EnvelopePtr e =
        parse_envelope(reinterpret_cast<const unsigned char*>(payload.data()), payload.size(),
                       &error);
    if (!e) {
      log(str_cat("closing the connection from ", c->peer_, ": malformed message: ", error));
      c->close_(str_cat("malformed message: ", error), false);
      return;
    }
    c->on_message_(h, std::move(e));
  }
}

void ControlConnection::send(std::string frame) {
  if (closed_) return;
  uv_stream_t* stream = reinterpret_cast<uv_stream_t*>(&tcp_);
  size_t sent = 0;
  // Straight into the socket when nothing is queued: no wait for the next loop
  // turn (step aborts), and a frame written before a close() is not cancelled.
  if (uv_stream_get_write_queue_size(stream) == 0) {
    uv_buf_t b = uv_buf_init(&frame[0], static_cast<unsigned int>(frame.size()));
    int n = uv_try_write(stream, &b, 1);
    if (n > 0) sent = static_cast<size_t>(n);
    if (sent == frame.size()) return;
  }
  WriteRequest* w = new WriteRequest();
  w->data = frame.substr(sent);
  w->conn = this;
  uv_buf_t b = uv_buf_init(&w->data[0], static_cast<unsigned int>(w->data.size()));
  int r = uv_write(&w->req, reinterpret_cast<uv_stream_t*>(&tcp_), &b, 1,
                   [](uv_write_t* req, int status) {
                     WriteRequest* w = reinterpret_cast<WriteRequest*>(req);
                     // UV_ECANCELED: the handle closed with the write queued.
                     if (status < 0 && status != UV_ECANCELED && !w->conn->closed_)
                       w->conn->close_(str_cat("connection lost: ", uv_strerror(status)), true);
                     delete w;
                   });
  if (r != 0) {
    delete w;
    close_(str_cat("connection lost: ", uv_strerror(r)), true);
  }
}

void ControlConnection::close_(const std::string& reason, bool by_peer) {
  if (closed_) return;
  closed_ = true;
  CloseFn fn = std::move(on_close_);
  on_close_ = nullptr;  // on_message_ may be running: it stays until the object goes
  uv_close(reinterpret_cast<uv_handle_t*>(&tcp_),
           [](uv_handle_t* h) { delete static_cast<ControlConnection*>(h->data); });
  if (fn) fn(reason, by_peer);
}

}  // namespace wire
}  // namespace tpurt
