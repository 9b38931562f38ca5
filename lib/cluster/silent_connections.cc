#include "cluster/silent_connections.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "net/handshake.h"

namespace tpurt {

struct SilentConnections::Entry {
  uv_poll_t poll;
  int fd;
  int64_t since;
  SilentConnections* owner;
  std::list<Entry*>::iterator pos;
};

namespace {

enum FirstBytes { kBytes, kSilent, kGone };

// Whether fd has sent something (without reading it).
FirstBytes first_bytes(int fd) {
  char c;
  ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return kBytes;
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return kSilent;
  return kGone;
}

}  // namespace

size_t SilentConnections::capacity_for(uint64_t fd_limit) {
  // Half of what is left after the process's own files (cores' transports, peers,
  // handshakes in flight), between 16 and 1024.
  uint64_t spare = fd_limit > 512 ? (fd_limit - 512) / 2 : 0;
  if (spare < 16) spare = 16;
  if (spare > 1024) spare = 1024;
  return static_cast<size_t>(spare);
}

SilentConnections* SilentConnections::open(uv_loop_t* loop, size_t capacity, int64_t deadline_ms,
                                           Ready ready) {
  SilentConnections* s = new SilentConnections(loop, capacity < 1 ? 1 : capacity, deadline_ms,
                                               std::move(ready));
  uv_timer_init(loop, &s->timer_);
  s->timer_.data = s;
  int64_t every = deadline_ms / 4 > 50 ? deadline_ms / 4 : 50;
  uv_timer_start(&s->timer_, [](uv_timer_t* t) { static_cast<SilentConnections*>(t->data)->expire(); },
                 every, every);
  return s;
}

void SilentConnections::add(int fd) {
  if (closed_) {
    ::close(fd);
    return;
  }
  switch (first_bytes(fd)) {
    case kBytes:  // a real task's hello comes with its connect
      ready_(fd);
      return;
    case kGone:  // ended or failed before a byte: nothing to hand on
      ::close(fd);
      ++dropped_;
      return;
    case kSilent:
      break;
  }
  while (held_.size() >= capacity_) drop(held_.front());
  Entry* e = new Entry();
  e->fd = fd;
  e->since = net::now_ms();
  e->owner = this;
  int r = uv_poll_init_socket(loop_, &e->poll, fd);
  if (r != 0) {
    delete e;
    ++dropped_;
    ::close(fd);
    return;
  }
  e->poll.data = e;
  r = uv_poll_start(&e->poll, UV_READABLE | UV_DISCONNECT, [](uv_poll_t* p, int, int) {
    Entry* e = static_cast<Entry*>(p->data);
    SilentConnections* self = e->owner;
    int fd = e->fd;
    switch (first_bytes(fd)) {
      case kSilent:  // a spurious wake-up
        return;
      case kGone:
        self->drop(e);
        return;
      case kBytes:
        break;
    }
    self->release(e);
    // Blocking again, as accepted (uv_poll_init_socket made it non-blocking).
    int flags = fcntl(fd, F_GETFL, 0);
    if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    self->ready_(fd);
  });
  if (r != 0) {
    uv_close(reinterpret_cast<uv_handle_t*>(&e->poll),
             [](uv_handle_t* h) { delete static_cast<Entry*>(h->data); });
    ++dropped_;
    ::close(fd);
    return;
  }
  e->pos = held_.insert(held_.end(), e);
}

void SilentConnections::release(Entry* e) {
  held_.erase(e->pos);
  // uv_poll_stop takes the fd out of epoll at once: it may be closed or watched anew.
  uv_poll_stop(&e->poll);
  uv_close(reinterpret_cast<uv_handle_t*>(&e->poll),
           [](uv_handle_t* h) { delete static_cast<Entry*>(h->data); });
}

void SilentConnections::drop(Entry* e) {
  int fd = e->fd;
  release(e);
  // A reset, not an orderly close: no TIME_WAIT left behind per dropped connection.
  struct linger l = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  ::close(fd);
  ++dropped_;
}

void SilentConnections::expire() {
  int64_t now = net::now_ms();
  while (!held_.empty() && now - held_.front()->since >= deadline_ms_) drop(held_.front());
}

void SilentConnections::close() {
  if (closed_) return;
  closed_ = true;
  while (!held_.empty()) drop(held_.front());
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_),
           [](uv_handle_t* h) { delete static_cast<SilentConnections*>(h->data); });
}

}  // namespace tpurt
