#include "net/tcp_transport.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/status.h"

namespace tpurt {
namespace net {
namespace {

// How long a waiting thread retries its sockets before it sleeps in poll(): a
// sleep costs a wake-up of tens of microseconds, longer than a small frame takes
// to arrive from a peer that is already sending.
constexpr auto kSpin = std::chrono::microseconds(50);

std::string errno_text(int err) { return std::strerror(err); }

}  // namespace

SocketLink::SocketLink(int fd) : fd_(fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

SocketLink::~SocketLink() { ::close(fd_); }

int64_t SocketLink::send(const iovec* iov, int n, std::string* error) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = n;
  for (;;) {
    const ssize_t sent = ::sendmsg(fd_, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent >= 0) return sent;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    *error = errno_text(errno);
    return kError;
  }
}

int64_t SocketLink::recv(void* dest, size_t bytes, std::string* error) {
  for (;;) {
    const ssize_t got = ::recv(fd_, dest, bytes, MSG_DONTWAIT);
    if (got > 0) return got;
    if (got == 0) return kClosed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    *error = errno_text(errno);
    return kError;
  }
}

void SocketLink::shutdown() { ::shutdown(fd_, SHUT_RDWR); }

TcpTransport::TcpTransport(int num_tasks, int task_id)
    : StreamTransport(num_tasks, task_id, kSpin) {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) tpurt::fail(TPU_RESOURCE_EXHAUSTED, "eventfd: ", errno_text(errno));
}

TcpTransport::~TcpTransport() {
  drop_links();
  ::close(wake_fd_);
}

void TcpTransport::attach(int peer, int fd) {
  std::unique_ptr<Link> link(new SocketLink(fd));
  attach_link(peer, std::move(link));  // a refused link closes its socket
}

void TcpTransport::wait_connected(int64_t timeout_ms) {
  std::string missing;
  if (wait_attached(timeout_ms, &missing)) return;
  tpurt::fail(TPU_DEADLINE_EXCEEDED, "task ", task_id_, " has no data connection from task(s) ",
              missing, " after ", timeout_ms, " ms");
}

void TcpTransport::wake() {
  uint64_t one = 1;
  ssize_t ignored = ::write(wake_fd_, &one, sizeof one);
  (void)ignored;
}

void TcpTransport::clear_wakes() {
  uint64_t value;
  while (::read(wake_fd_, &value, sizeof value) > 0) {
  }
}

void TcpTransport::wait_ready(const std::vector<int>& readers, const std::vector<int>& writers,
                              Clock::time_point until) {
  std::vector<pollfd> fds;
  fds.reserve(readers.size() + writers.size() + 1);
  fds.push_back({wake_fd_, POLLIN, 0});
  for (int i : readers) fds.push_back({static_cast<SocketLink*>(link(i))->fd(), POLLIN, 0});
  for (int i : writers) fds.push_back({static_cast<SocketLink*>(link(i))->fd(), POLLOUT, 0});
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
  if (left <= 0) return;
  ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left + 1, 1000)));
}

}  // namespace net
}  // namespace tpurt
