#include "net/listener.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/status.h"
#include "net/handshake.h"

namespace tpurt {
namespace net {

Listener* Listener::open(uv_loop_t* loop, const std::string& address, Accepted on_accept) {
  std::string host, port;
  split_host_port(address, &host, &port, /*allow_zero_port=*/true);
  struct addrinfo hints;
  std::memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  struct addrinfo* list = nullptr;
  int g = getaddrinfo(host.c_str(), port.c_str(), &hints, &list);
  if (g != 0) fail(TPU_UNAVAILABLE, "cannot listen on ", address, ": ", gai_strerror(g));
  std::string last = "no address";
  bool in_use = false;  // another process holds the address: TPU_ALREADY_EXISTS
  int fd = -1;
  for (struct addrinfo* ai = list; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      last = std::strerror(errno);
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
      in_use = errno == EADDRINUSE;
      last = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(list);
  if (fd < 0) fail(in_use ? TPU_ALREADY_EXISTS : TPU_UNAVAILABLE, "cannot listen on ", address, ": ", last);
  Listener* l = new Listener(address, fd, std::move(on_accept));
  int r = uv_poll_init_socket(loop, &l->poll_, fd);
  if (r == 0) r = uv_poll_start(&l->poll_, UV_READABLE, &Listener::on_readable);
  if (r != 0) {
    ::close(fd);
    delete l;
    fail(TPU_INTERNAL, "cannot watch the listener on ", address, ": ", uv_strerror(r));
  }
  l->poll_.data = l;
  return l;
}

void Listener::on_readable(uv_poll_t* handle, int status, int events) {
  Listener* self = static_cast<Listener*>(handle->data);
  if (self->closed_) return;
  // Bounded per wake-up so that a flood cannot starve the loop.
  for (int i = 0; i < 64; ++i) {
    int fd = accept4(self->fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or an error of that one connection
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    self->on_accept_(fd);
  }
}

void Listener::close() {
  if (closed_) return;
  closed_ = true;
  uv_close(reinterpret_cast<uv_handle_t*>(&poll_), [](uv_handle_t* h) {
    Listener* self = static_cast<Listener*>(h->data);
    ::close(self->fd_);
    delete self;
  });
}

}  // namespace net
}  // namespace tpurt
