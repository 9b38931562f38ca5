#include "net/tcp_transport.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/status.h"

namespace tpurt {
namespace net {
namespace {

// How long a waiting thread retries its sockets before it sleeps in poll(): a
// sleep costs a wake-up of tens of microseconds, longer than a small frame takes
// to arrive from a peer that is already sending.
constexpr auto kSpin = std::chrono::microseconds(50);

// What pads a frame a failed collective left half-sent.
const char g_zeros[64 * 1024] = {};
constexpr size_t kSinkBytes = 64 * 1024;  // discarded payload is read in these

std::string errno_text(int err) { return std::strerror(err); }

}  // namespace

// One peer's connection and the frame in flight each way. A frame once started is
// always finished (a failed step pads what it had not sent with zeros and drains
// what it had not read), so the byte stream never loses its framing.
struct TcpTransport::Peer {
  int id = -1;
  int fd = -1;
  std::string lost;  // why the connection is unusable; "" while it works

  // Sending: the frame in flight, and the position in the exchange's list.
  unsigned char out_header[kFrameHeaderBytes];
  size_t out_header_left = 0;
  const char* out_data = nullptr;  // nullptr: zeros (padding after a failure)
  uint64_t out_left = 0;
  std::vector<const Send*> sends;
  size_t send_index = 0;
  uint64_t send_offset = 0;

  // Receiving: the frame in flight, and the position in the exchange's list.
  unsigned char in_header[kFrameHeaderBytes];
  size_t in_header_got = 0;
  bool in_payload = false;
  char* in_dest = nullptr;  // nullptr: discard
  uint64_t in_left = 0;
  bool in_end = false;      // the frame in flight ends the step
  std::string end_payload;
  std::vector<const Recv*> recvs;
  size_t recv_index = 0;
  uint64_t recv_offset = 0;

  // The peer's END for the current step, once read.
  bool ended = false;
  StepOutcome outcome;
  bool end_sent = false;

  bool sending() const { return out_header_left > 0 || out_left > 0 || send_index < sends.size(); }
  bool receiving() const { return in_header_got > 0 || in_payload || recv_index < recvs.size(); }
};

TcpTransport::TcpTransport(int num_tasks, int task_id)
    : num_tasks_(num_tasks), task_id_(task_id), peers_(new Peer[num_tasks]),
      sink_(new char[kSinkBytes]) {
  for (int i = 0; i < num_tasks; ++i) peers_[i].id = i;
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) tpurt::fail(TPU_RESOURCE_EXHAUSTED, "eventfd: ", errno_text(errno));
}

TcpTransport::~TcpTransport() {
  for (int i = 0; i < num_tasks_; ++i)
    if (peers_[i].fd >= 0) ::close(peers_[i].fd);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void TcpTransport::attach(int peer, int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  if (peer < 0 || peer >= num_tasks_ || peer == task_id_ ||
      (peers_[peer].fd >= 0 && peers_[peer].lost.empty())) {
    ::close(fd);
    return;
  }
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  Peer& p = peers_[peer];
  if (p.fd >= 0) ::close(p.fd);
  p = Peer{};
  p.id = peer;
  p.fd = fd;
  attached_.notify_all();
}

void TcpTransport::wait_connected(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  auto all = [&] {
    for (int i = 0; i < num_tasks_; ++i)
      if (i != task_id_ && peers_[i].fd < 0) return false;
    return true;
  };
  if (attached_.wait_for(lock, std::chrono::milliseconds(timeout_ms), all)) return;
  std::string missing;
  for (int i = 0; i < num_tasks_; ++i)
    if (i != task_id_ && peers_[i].fd < 0) missing += str_cat(missing.empty() ? "" : ", ", i);
  tpurt::fail(TPU_DEADLINE_EXCEEDED, "task ", task_id_, " has no data connection from task(s) ",
              missing, " after ", timeout_ms, " ms");
}

void TcpTransport::fail(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.empty()) failed_ = message;
  }
  has_failed_.store(true, std::memory_order_release);
  interrupt();
}

void TcpTransport::throw_failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  tpurt::fail(TPU_UNAVAILABLE, failed_);
}

void TcpTransport::interrupt() {
  interrupted_.store(true, std::memory_order_release);
  uint64_t one = 1;
  ssize_t ignored = ::write(wake_fd_, &one, sizeof one);
  (void)ignored;
}

void TcpTransport::drain_interrupts() {
  uint64_t value;
  while (::read(wake_fd_, &value, sizeof value) > 0) {
  }
  interrupted_.store(false, std::memory_order_release);
}

void TcpTransport::lose(Peer& p, const std::string& why) {
  if (getenv("TPURT_LOG")) fprintf(stderr, "task %d loses %d: %s\n", task_id_, p.id, why.c_str());
  std::lock_guard<std::mutex> lock(mu_);
  if (p.lost.empty()) p.lost = why;
  if (p.fd >= 0) ::shutdown(p.fd, SHUT_RDWR);
}

void TcpTransport::begin_step(uint64_t step) {
  if (has_failed_.load(std::memory_order_acquire)) throw_failed();
  step_ = step;
  for (int i = 0; i < num_tasks_; ++i) {
    Peer& p = peers_[i];
    if (i == task_id_) continue;
    if (!p.lost.empty())
      tpurt::fail(TPU_UNAVAILABLE, "the data connection to task ", i, " is gone (", p.lost,
                  "); the cluster must be restarted");
    p.ended = false;
    p.end_sent = false;
    p.outcome = StepOutcome{};
  }
}

void TcpTransport::start_frame(Peer& p, const FrameHeader& h, const void* data) {
  encode_header(h, p.out_header);
  p.out_header_left = kFrameHeaderBytes;
  p.out_data = static_cast<const char*>(data);
  p.out_left = h.length;
}

TcpTransport::Progress TcpTransport::pump_send(Peer& p) {
  bool advanced = false;
  for (;;) {
    if (p.out_header_left == 0 && p.out_left == 0) {
      if (p.send_index == p.sends.size()) return Progress::kDone;
      const Send& s = *p.sends[p.send_index];
      const uint64_t chunk = std::min(kFramePayloadBytes, s.bytes - p.send_offset);
      FrameHeader h;
      h.type = static_cast<uint16_t>(FrameType::kData);
      h.tag = s.tag;
      h.step = step_;
      h.seq = seq_;
      h.digest = digest_;
      h.offset = p.send_offset;
      h.length = chunk;
      start_frame(p, h, static_cast<const char*>(s.data) + p.send_offset);
      p.send_offset += chunk;
      if (p.send_offset == s.bytes) {
        ++p.send_index;
        p.send_offset = 0;
      }
    }
    iovec iov[2];
    int n = 0;
    if (p.out_header_left > 0)
      iov[n++] = {p.out_header + (kFrameHeaderBytes - p.out_header_left), p.out_header_left};
    if (p.out_left > 0)
      iov[n++] = {const_cast<char*>(p.out_data ? p.out_data : g_zeros),
                  p.out_data ? p.out_left : std::min<uint64_t>(p.out_left, sizeof g_zeros)};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    ssize_t sent = ::sendmsg(p.fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return advanced ? Progress::kAdvanced : Progress::kBlocked;
      lose(p, str_cat("send failed: ", errno_text(errno)));
      return Progress::kDone;
    }
    advanced = true;
    size_t k = static_cast<size_t>(sent);
    const size_t from_header = std::min(k, p.out_header_left);
    p.out_header_left -= from_header;
    k -= from_header;
    p.out_left -= k;
    if (p.out_data) p.out_data += k;
  }
}

TcpTransport::Progress TcpTransport::pump_recv(Peer& p, const std::function<std::string(int)>& name,
                                               bool ending) {
  bool advanced = false;
  for (;;) {
    if (!ending && !p.receiving()) return Progress::kDone;
    if (ending && p.ended && !p.in_payload && p.in_header_got == 0) return Progress::kDone;
    ssize_t got;
    if (!p.in_payload) {
      got = ::recv(p.fd, p.in_header + p.in_header_got, kFrameHeaderBytes - p.in_header_got,
                   MSG_DONTWAIT);
    } else {
      char* dest = p.in_dest ? p.in_dest
                   : p.in_end ? nullptr
                              : sink_.get();
      size_t want = p.in_dest ? p.in_left : std::min<uint64_t>(p.in_left, kSinkBytes);
      if (p.in_end) {
        const size_t have = p.end_payload.size();
        p.end_payload.resize(have + p.in_left);
        dest = &p.end_payload[have];
        want = p.in_left;
        got = ::recv(p.fd, dest, want, MSG_DONTWAIT);
        p.end_payload.resize(have + (got > 0 ? got : 0));
      } else {
        got = ::recv(p.fd, dest, want, MSG_DONTWAIT);
      }
    }
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return advanced ? Progress::kAdvanced : Progress::kBlocked;
      lose(p, str_cat("receive failed: ", errno_text(errno)));
      tpurt::fail(TPU_UNAVAILABLE, name(p.id), ": data connection failed: ", errno_text(errno));
    }
    if (got == 0) {
      lose(p, "closed by the peer");
      tpurt::fail(TPU_UNAVAILABLE, name(p.id), ": data connection closed");
    }
    advanced = true;
    if (!p.in_payload) {
      p.in_header_got += static_cast<size_t>(got);
      if (p.in_header_got < kFrameHeaderBytes) continue;
      FrameHeader h;
      std::string bad = decode_header(p.in_header, &h);
      if (bad.empty() && h.type != static_cast<uint16_t>(FrameType::kData))
        bad = str_cat("a frame of type ", h.type, " on a data connection");
      if (bad.empty() && h.step != step_)
        bad = str_cat("a frame of step ", h.step, " during step ", step_);
      if (bad.empty() && h.tag == kEndTag && h.length > kMaxEndPayloadBytes)
        bad = str_cat("a step-end frame of ", h.length, " bytes");
      if (!bad.empty()) {
        lose(p, "malformed frame: " + bad);
        tpurt::fail(TPU_UNAVAILABLE, name(p.id), ": malformed frame on the data connection (", bad,
                    "); connection closed");
      }
      p.in_header_got = 0;
      p.in_payload = true;
      p.in_left = h.length;
      p.in_dest = nullptr;
      p.in_end = h.tag == kEndTag;
      p.end_payload.clear();
      if (!p.in_end && !ending) {
        if (h.seq != seq_ || h.digest != digest_)
          tpurt::fail(TPU_INVALID_ARGUMENT, name(p.id), " is in collective #", h.seq,
                      " of the step (descriptor digest ", std::hex, h.digest, std::dec,
                      ") while this task is in collective #", seq_, " (digest ", std::hex,
                      digest_, std::dec,
                      "): the tasks' replicas called different collectives, or with different "
                      "dtypes, shapes, operations or groups");
        if (p.recv_index == p.recvs.size()) {
          lose(p, "unexpected data");
          tpurt::fail(TPU_UNAVAILABLE, name(p.id), " sent more data for collective #", seq_,
                      " than it needs; connection closed");
        }
        const Recv& r = *p.recvs[p.recv_index];
        const uint64_t expect = std::min(kFramePayloadBytes, r.bytes - p.recv_offset);
        if (h.tag != r.tag || h.offset != p.recv_offset || h.length != expect) {
          lose(p, "frame out of order");
          tpurt::fail(TPU_UNAVAILABLE, name(p.id), " sent tag ", h.tag, " offset ", h.offset,
                      " length ", h.length, " where tag ", r.tag, " offset ", p.recv_offset,
                      " length ", expect, " was due; connection closed");
        }
        p.in_dest = static_cast<char*>(r.data) + p.recv_offset;
        p.recv_offset += expect;
        if (p.recv_offset == r.bytes) {
          ++p.recv_index;
          p.recv_offset = 0;
        }
      }
    } else {
      p.in_left -= static_cast<uint64_t>(got);
      if (p.in_dest) p.in_dest += got;
    }
    if (p.in_payload && p.in_left == 0) {
      p.in_payload = false;
      if (p.in_end) {
        p.in_end = false;
        p.ended = true;
        const std::string& e = p.end_payload;
        if (e.size() < 8) {
          lose(p, "short step-end frame");
          tpurt::fail(TPU_UNAVAILABLE, name(p.id), ": malformed step-end frame; connection closed");
        }
        int32_t code, origin;
        std::memcpy(&code, e.data(), 4);
        std::memcpy(&origin, e.data() + 4, 4);
        p.outcome.code = is_status(static_cast<tpu_status>(code)) ? static_cast<tpu_status>(code)
                                                                   : TPU_UNKNOWN;
        p.outcome.origin_replica = origin;
        p.outcome.message = e.substr(8);
        if (!ending) {
          if (p.outcome.code != TPU_OK)
            tpurt::fail(TPU_ABORTED, p.outcome.message);
          tpurt::fail(TPU_FAILED_PRECONDITION, name(p.id),
                      " finished the step without calling collective #", seq_,
                      ", which this task's replicas are in");
        }
      }
    }
  }
}

void TcpTransport::wait_ready(const std::vector<int>& readers, const std::vector<int>& writers,
                              Clock::time_point until) {
  std::vector<pollfd> fds;
  fds.reserve(readers.size() + writers.size() + 1);
  fds.push_back({wake_fd_, POLLIN, 0});
  for (int i : readers) fds.push_back({peers_[i].fd, POLLIN, 0});
  for (int i : writers) fds.push_back({peers_[i].fd, POLLOUT, 0});
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
  if (left <= 0) return;
  ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left + 1, 1000)));
}

void TcpTransport::exchange(uint64_t seq, uint64_t digest, const Send* sends, size_t num_sends,
                            const Recv* recvs, size_t num_recvs, Clock::time_point deadline,
                            const std::function<void()>& check,
                            const std::function<std::string(int)>& name) {
  std::lock_guard<std::mutex> driving(drive_mu_);
  if (has_failed_.load(std::memory_order_acquire)) throw_failed();
  seq_ = seq;
  digest_ = digest;
  for (int i = 0; i < num_tasks_; ++i) {
    peers_[i].sends.clear();
    peers_[i].recvs.clear();
    peers_[i].send_index = peers_[i].recv_index = 0;
    peers_[i].send_offset = peers_[i].recv_offset = 0;
  }
  auto peer_of = [&](int peer, const char* what) -> Peer& {
    if (peer < 0 || peer >= num_tasks_ || peer == task_id_)
      tpurt::fail(TPU_INTERNAL, what, " names task ", peer, " of ", num_tasks_);
    Peer& p = peers_[peer];
    if (!p.lost.empty())
      tpurt::fail(TPU_UNAVAILABLE, name(peer), ": the data connection is gone (", p.lost, ")");
    return p;
  };
  for (size_t i = 0; i < num_sends; ++i) peer_of(sends[i].peer, "a send").sends.push_back(&sends[i]);
  for (size_t i = 0; i < num_recvs; ++i) peer_of(recvs[i].peer, "a receive").recvs.push_back(&recvs[i]);

  std::vector<int> readers, writers;
  auto spin_until = Clock::now() + kSpin;
  for (;;) {
    if (interrupted_.load(std::memory_order_acquire)) {
      drain_interrupts();
      if (has_failed_.load(std::memory_order_acquire)) throw_failed();
      check();
    }
    bool advanced = false;
    readers.clear();
    writers.clear();
    for (int i = 0; i < num_tasks_; ++i) {
      Peer& p = peers_[i];
      if (i == task_id_ || (!p.sending() && !p.receiving())) continue;
      if (!p.lost.empty())
        tpurt::fail(TPU_UNAVAILABLE, name(i), ": the data connection is gone (", p.lost, ")");
      if (p.sending()) {
        Progress s = pump_send(p);
        if (!p.lost.empty())
          tpurt::fail(TPU_UNAVAILABLE, name(i), ": the data connection is gone (", p.lost, ")");
        advanced |= s == Progress::kAdvanced;
        if (p.sending()) writers.push_back(i);
      }
      if (p.receiving()) {
        advanced |= pump_recv(p, name, false) == Progress::kAdvanced;
        if (p.receiving()) readers.push_back(i);
      }
    }
    if (readers.empty() && writers.empty()) return;
    const auto now = Clock::now();
    if (advanced) {
      spin_until = now + kSpin;
      continue;
    }
    if (now >= deadline) {
      std::string owing;
      for (int i : readers) owing += str_cat(owing.empty() ? "" : "; ", name(i));
      std::string stuck;
      for (int i : writers) stuck += str_cat(stuck.empty() ? "" : "; ", name(i));
      tpurt::fail(TPU_DEADLINE_EXCEEDED, "collective #", seq_, " of the step did not complete: ",
                  owing.empty() ? "" : "no data arrived from ", owing,
                  owing.empty() || stuck.empty() ? "" : ", and ",
                  stuck.empty() ? "" : "nothing could be sent to ", stuck,
                  " before the collective deadline (the task is stopped, hung, or has not "
                  "reached this collective)");
    }
    if (now < spin_until) {
      sched_yield();
      continue;
    }
    wait_ready(readers, writers, deadline);
  }
}

bool TcpTransport::end_step(const StepOutcome& mine, int64_t timeout_ms, StepOutcome* remote,
                            const std::function<std::string(int)>& name) {
  // A late replica's leader, interrupted by the step's abort, leaves exchange() first.
  std::lock_guard<std::mutex> driving(drive_mu_);
  if (num_tasks_ == 1 || has_failed_.load(std::memory_order_acquire)) return false;
  std::string end_payload(8 + mine.message.size(), '\0');
  const int32_t code = mine.code, origin = mine.origin_replica;
  std::memcpy(&end_payload[0], &code, 4);
  std::memcpy(&end_payload[4], &origin, 4);
  std::memcpy(&end_payload[8], mine.message.data(), mine.message.size());
  if (end_payload.size() > kMaxEndPayloadBytes) end_payload.resize(kMaxEndPayloadBytes);

  for (int i = 0; i < num_tasks_; ++i) {
    Peer& p = peers_[i];
    if (i == task_id_ || !p.lost.empty()) continue;
    // What a failed collective left unsent is not sent: the rest of the frame in
    // flight becomes zeros, the transfers after it are dropped.
    if (p.out_left > 0) p.out_data = nullptr;
    p.sends.clear();
    p.send_index = 0;
    p.send_offset = 0;
    p.recvs.clear();
    p.recv_index = 0;
    p.recv_offset = 0;
    if (p.in_payload && !p.in_end) p.in_dest = nullptr;  // drain, not deliver
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  bool failed = false;
  std::vector<int> readers, writers;
  for (;;) {
    // A lost task ends the cluster: nobody waits for the others' step ends then.
    if (has_failed_.load(std::memory_order_acquire)) return false;
    readers.clear();
    writers.clear();
    bool advanced = false;
    for (int i = 0; i < num_tasks_; ++i) {
      Peer& p = peers_[i];
      if (i == task_id_ || !p.lost.empty()) continue;
      if (!p.end_sent && p.out_header_left == 0 && p.out_left == 0 && p.sends.empty()) {
        FrameHeader h;
        h.type = static_cast<uint16_t>(FrameType::kData);
        h.tag = kEndTag;
        h.step = step_;
        h.length = end_payload.size();
        start_frame(p, h, end_payload.data());
        p.end_sent = true;
      }
      if (p.out_header_left > 0 || p.out_left > 0) {
        advanced |= pump_send(p) == Progress::kAdvanced;
        if (!p.lost.empty()) continue;
      }
      // Until the END frame is out: a padded frame finishing first starts it next round.
      if (p.out_header_left > 0 || p.out_left > 0 || !p.end_sent) writers.push_back(i);
      try {
        advanced |= pump_recv(p, name, true) == Progress::kAdvanced;
      } catch (const Error& e) {
        if (getenv("TPURT_LOG")) fprintf(stderr, "end_step: %s\n", e.message().c_str());
        continue;  // the peer is lost; its failure reaches us through coordination
      }
      if (!(p.ended && !p.in_payload && p.in_header_got == 0)) readers.push_back(i);
    }
    if (readers.empty() && writers.empty()) break;
    if (advanced) continue;
    if (Clock::now() >= deadline) {
      for (int i : readers) lose(peers_[i], str_cat("did not end step ", step_, " within ", timeout_ms, " ms"));
      for (int i : writers) lose(peers_[i], str_cat("did not take the end of step ", step_, " within ", timeout_ms, " ms"));
      break;
    }
    wait_ready(readers, writers, deadline);
  }
  // The failure to report: a task's own error before the aborts it caused elsewhere.
  for (int i = 0; i < num_tasks_; ++i) {
    Peer& p = peers_[i];
    if (i == task_id_ || !p.ended || p.outcome.code == TPU_OK) continue;
    if (failed && !(remote->code == TPU_ABORTED && p.outcome.code != TPU_ABORTED)) continue;
    *remote = p.outcome;
    failed = true;
  }
  return failed;
}

}  // namespace net
}  // namespace tpurt
