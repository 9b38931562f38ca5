#include "net/stream_transport.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/deadline.h"
#include "core/status.h"
#include "net/stream_peer.h"

namespace tpurt {
namespace net {
namespace {

// What pads a frame a failed collective left half-sent.
const char g_zeros[64 * 1024] = {};
constexpr size_t kSinkBytes = 64 * 1024;  // discarded payload is read in these

}  // namespace

StreamTransport::StreamTransport(int num_tasks, int task_id, std::chrono::microseconds spin)
    : num_tasks_(num_tasks), task_id_(task_id), spin_(spin), peers_(new Peer[num_tasks]),
      sink_(new char[kSinkBytes]) {
  for (int i = 0; i < num_tasks; ++i) peers_[i].id = i;
}

StreamTransport::~StreamTransport() = default;

void StreamTransport::drop_links() {
  std::lock_guard<std::mutex> lock(mu_);
  for (int i = 0; i < num_tasks_; ++i) peers_[i].link.store(nullptr);
  for (auto& l : links_) l->shutdown();
  links_.clear();
}

Link* StreamTransport::link(int peer) const {
  return peers_[peer].link.load(std::memory_order_acquire);
}

bool StreamTransport::attach_link(int peer, std::unique_ptr<Link> link) {
  std::lock_guard<std::mutex> lock(mu_);
  if (peer < 0 || peer >= num_tasks_ || peer == task_id_ ||
      (peers_[peer].link.load() != nullptr && peers_[peer].lost.empty()))
    return false;
  Peer& p = peers_[peer];
  if (Link* old = p.link.load()) old->shutdown();  // kept in links_: the driver may hold it
  p.reset_stream();
  links_.push_back(std::move(link));
  p.link.store(links_.back().get(), std::memory_order_release);
  attached_.notify_all();
  return true;
}

bool StreamTransport::wait_attached(int64_t timeout_ms, std::string* missing) {
  std::unique_lock<std::mutex> lock(mu_);
  auto all = [&] {
    for (int i = 0; i < num_tasks_; ++i)
      if (i != task_id_ && peers_[i].link.load() == nullptr) return false;
    return true;
  };
  if (wait_for_ms(attached_, lock, timeout_ms, all)) return true;
  missing->clear();
  for (int i = 0; i < num_tasks_; ++i)
    if (i != task_id_ && peers_[i].link.load() == nullptr)
      *missing += str_cat(missing->empty() ? "" : ", ", i);
  return false;
}

void StreamTransport::fail(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.empty()) failed_ = message;
  }
  has_failed_.store(true, std::memory_order_release);
  interrupt();
}

void StreamTransport::throw_failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  tpurt::fail(TPU_UNAVAILABLE, failed_);
}

void StreamTransport::interrupt() {
  interrupted_.store(true, std::memory_order_release);
  wake();
}

void StreamTransport::drain_interrupts() {
  clear_wakes();
  interrupted_.store(false, std::memory_order_release);
}

void StreamTransport::lose(Peer& p, const std::string& why) {
  if (getenv("TPURT_LOG")) fprintf(stderr, "task %d loses %d: %s\n", task_id_, p.id, why.c_str());
  std::lock_guard<std::mutex> lock(mu_);
  if (p.lost.empty()) p.lost = why;
  if (Link* l = p.link.load()) l->shutdown();
}

void StreamTransport::idle(Clock::duration) { sched_yield(); }

void StreamTransport::begin_step(uint64_t step) {
  if (has_failed_.load(std::memory_order_acquire)) throw_failed();
  step_ = step;
  for (int i = 0; i < num_tasks_; ++i) {
    Peer& p = peers_[i];
    if (i == task_id_) continue;
    if (p.left) tpurt::fail(p.left_why.code, p.left_why.message);
    if (!p.lost.empty())
      tpurt::fail(TPU_UNAVAILABLE, "the data connection to task ", i, " is gone (", p.lost,
                  "); the cluster must be restarted");
    p.ended = false;
    p.end_sent = false;
    p.outcome = StepOutcome{};
  }
}

void StreamTransport::start_frame(Peer& p, const FrameHeader& h, const void* data) {
  encode_header(h, p.out_header);
  p.out_header_left = kFrameHeaderBytes;
  p.out_data = static_cast<const char*>(data);
  p.out_left = h.length;
}

void StreamTransport::start_control_frame(Peer& p, uint32_t tag, const std::string& payload) {
  FrameHeader h;
  h.type = static_cast<uint16_t>(FrameType::kData);
  h.tag = tag;
  h.step = step_;
  h.length = payload.size();
  start_frame(p, h, payload.data());
}

StreamTransport::Progress StreamTransport::pump_send(Peer& p) {
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
    std::string error;
    const int64_t sent = p.link.load(std::memory_order_relaxed)->send(iov, n, &error);
    if (sent == 0) return advanced ? Progress::kAdvanced : Progress::kBlocked;
    if (sent < 0) {
      lose(p, str_cat("send failed: ", error));
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

StreamTransport::Progress StreamTransport::pump_recv(Peer& p, const std::function<std::string(int)>& name,
                                                     bool ending, bool probing) {
  bool advanced = false;
  for (;;) {
    if (!ending && !probing && !p.receiving()) return Progress::kDone;
    if (ending && p.ended && !p.in_payload && p.in_header_got == 0) return Progress::kDone;
    Link* link = p.link.load(std::memory_order_relaxed);
    std::string error;
    int64_t got;
    // A header read whole but left for the next exchange (a vote's frame, VoteCalled).
    const bool kept = !p.in_payload && p.in_header_got == kFrameHeaderBytes;
    if (kept) {
      got = 0;
    } else if (!p.in_payload) {
      got = link->recv(p.in_header + p.in_header_got, kFrameHeaderBytes - p.in_header_got, &error);
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
        got = link->recv(dest, want, &error);
        p.end_payload.resize(have + (got > 0 ? got : 0));
      } else {
        got = link->recv(dest, want, &error);
      }
    }
    if (got == 0 && !kept) return advanced ? Progress::kAdvanced : Progress::kBlocked;
    if (got == Link::kClosed) {
      lose(p, "closed by the peer");
      tpurt::fail(TPU_UNAVAILABLE, name(p.id), ": data connection closed");
    }
    if (got < 0) {
      lose(p, str_cat("receive failed: ", error));
      tpurt::fail(TPU_UNAVAILABLE, name(p.id), ": data connection failed: ", error);
    }
    advanced = true;
    if (!p.in_payload) {
      p.in_header_got += static_cast<size_t>(got);
      if (p.in_header_got < kFrameHeaderBytes) continue;
      FrameHeader h;
      std::string bad = decode_header(p.in_header, &h);
      if (bad.empty() && h.type != static_cast<uint16_t>(FrameType::kData))
        bad = str_cat("a frame of type ", h.type, " on a data connection");
      const bool farewell = h.tag == kFarewellTag;  // of whatever step the peer left in
      if (bad.empty() && h.step != step_ && !farewell)
        bad = str_cat("a frame of step ", h.step, " during step ", step_);
      if (bad.empty() && (h.tag == kEndTag || farewell) && h.length > kMaxEndPayloadBytes)
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
      p.in_end = h.tag == kEndTag || farewell;
      p.in_farewell = farewell;
      p.end_payload.clear();
      if (!p.in_end && !ending) {
        if (h.seq == seq_ && h.digest == kVoteDigest && digest_ != kVoteDigest) {
          // The peer votes on this collective instead of sending its data: the vote's
          // exchange reads the frame.
          p.in_payload = false;
          p.in_left = 0;
          p.in_header_got = kFrameHeaderBytes;
          throw VoteCalled(TPU_ABORTED, str_cat(name(p.id), " called a vote on collective #", seq_));
        }
        if (h.seq == seq_ && h.digest != kVoteDigest && digest_ == kVoteDigest) {
          if (p.in_left == 0) p.in_payload = false;
          continue;  // the collective's own data, sent before its vote: discarded
        }
        if (h.seq != seq_ || h.digest != digest_) {
          const std::string why =
              str_cat(name(p.id), " is in collective #", h.seq, " of the step (descriptor digest ",
                      std::hex, h.digest, std::dec, ") while this task is in collective #", seq_,
                      " (digest ", std::hex, digest_, std::dec,
                      "): the tasks' replicas called different collectives, or with different "
                      "dtypes, shapes, operations or groups");
          if (h.seq == seq_) throw PeerDisagrees(TPU_INVALID_ARGUMENT, why);
          tpurt::fail(TPU_INVALID_ARGUMENT, why);
        }
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
        if (p.in_farewell) {
          p.in_farewell = false;
          if (p.outcome.code == TPU_OK) p.outcome.code = TPU_FAILED_PRECONDITION;
          p.left = true;
          p.left_why = p.outcome;
        }
        if (!ending && !probing && digest_ == kVoteDigest && !p.left) {
          // A vote goes on without it (its frames in flight to it are finished).
          p.drop_transfers();
          return Progress::kAdvanced;
        }
        if (!ending) throw_peer_ended(p, name);
      }
    }
  }
}

void StreamTransport::exchange(uint64_t seq, uint64_t digest, const Send* sends, size_t num_sends,
                            const Recv* recvs, size_t num_recvs, Clock::time_point deadline,
                            const std::function<void()>& check,
                            const std::function<std::string(int)>& name) {
  std::lock_guard<DriveLock> driving(drive_mu_);
  if (has_failed_.load(std::memory_order_acquire)) throw_failed();
  seq_ = seq;
  digest_ = digest;
  for (int i = 0; i < num_tasks_; ++i) {
    peers_[i].sends.clear();
    peers_[i].recvs.clear();
    peers_[i].send_index = peers_[i].recv_index = 0;
    peers_[i].send_offset = peers_[i].recv_offset = 0;
  }
  // In a vote, a peer that ended the step (or leaves) is passed over, not thrown: the
  // others' ballots still come (vote_skipped() says which ones did not).
  const bool voting = digest == kVoteDigest;
  auto peer_of = [&](int peer, const char* what) -> Peer* {
    if (peer < 0 || peer >= num_tasks_ || peer == task_id_)
      tpurt::fail(TPU_INTERNAL, what, " names task ", peer, " of ", num_tasks_);
    Peer& p = peers_[peer];
    if (p.link.load(std::memory_order_acquire) == nullptr)
      tpurt::fail(TPU_UNAVAILABLE, name(peer), ": no data connection");
    // A peer whose END this step was read (by an earlier exchange of the step): its
    // step is over, whatever this exchange is (a vote after a failed collective).
    if (voting && (p.left || p.ended)) return nullptr;
    if (p.left || p.ended) throw_peer_ended(p, name);
    if (!p.lost.empty()) throw_gone(p, name);
    return &p;
  };
  for (size_t i = 0; i < num_sends; ++i)
    if (Peer* p = peer_of(sends[i].peer, "a send")) p->sends.push_back(&sends[i]);
  for (size_t i = 0; i < num_recvs; ++i)
    if (Peer* p = peer_of(recvs[i].peer, "a receive")) p->recvs.push_back(&recvs[i]);

  std::vector<int> readers, writers;
  // The spin starts at the first round without progress: a round that makes progress
  // reads no clock.
  Clock::time_point spin_until{};
  bool spinning = false;
  for (;;) {
    poll_interrupts(check);
    bool advanced = false;
    readers.clear();
    writers.clear();
    for (int i = 0; i < num_tasks_; ++i) {
      Peer& p = peers_[i];
      if (i == task_id_ || (!p.sending() && !p.receiving())) continue;
      if (!p.lost.empty()) throw_gone(p, name);
      if (p.sending()) {
        Progress s = pump_send(p);
        if (!p.lost.empty()) throw_gone(p, name);
        advanced |= s == Progress::kAdvanced;
        if (p.sending()) writers.push_back(i);
      }
      if (p.receiving()) {
        advanced |= pump_recv(p, name, false) == Progress::kAdvanced;
        if (p.receiving()) readers.push_back(i);
      }
    }
    if (readers.empty() && writers.empty()) return;
    if (advanced) {
      spinning = false;
      continue;
    }
    const auto now = Clock::now();
    if (!spinning) {
      spinning = true;
      spin_until = now + spin_;
    }
    if (now >= deadline) missed_deadline(readers, writers, name);
    if (now < spin_until) {
      idle(now - (spin_until - spin_));
      continue;
    }
    wait_ready(readers, writers, deadline);
  }
}

void StreamTransport::poll_interrupts(const std::function<void()>& check) {
  if (!interrupted_.load(std::memory_order_acquire)) return;
  drain_interrupts();
  throw_if_failed();
  check();
}

bool StreamTransport::vote_skipped(int peer) const {
  const Peer& p = peers_[peer];
  return p.left || p.ended;
}

void StreamTransport::throw_if_ended(int peer, const std::function<std::string(int)>& name) {
  Peer& p = peers_[peer];
  if (p.left || p.ended) throw_peer_ended(p, name);
}

void StreamTransport::peek_votes(uint64_t seq, const std::function<std::string(int)>& name) {
  std::lock_guard<DriveLock> driving(drive_mu_);
  for (int i = 0; i < num_tasks_; ++i) {
    Peer& p = peers_[i];
    Link* link = p.link.load(std::memory_order_acquire);
    if (i == task_id_ || link == nullptr || !p.lost.empty() || p.left || p.ended || p.in_payload) continue;
    if (p.in_header_got < kFrameHeaderBytes) {
      std::string error;
      const int64_t got = link->recv(p.in_header + p.in_header_got, kFrameHeaderBytes - p.in_header_got, &error);
      if (got <= 0) continue;  // nothing yet (a lost link shows at the next exchange)
      p.in_header_got += static_cast<size_t>(got);
      if (p.in_header_got < kFrameHeaderBytes) continue;
    }
    // A whole header, kept for the next exchange, which checks it as any other.
    FrameHeader h;
    if (!decode_header(p.in_header, &h).empty() || h.step != step_) continue;
    // (An END is no sign: a peer done with the step's last collective ends the step.
    // One that gave up on this task voted first.)
    if (h.seq == seq && h.digest == kVoteDigest && h.tag != kEndTag && h.tag != kFarewellTag)
      throw VoteCalled(TPU_ABORTED, str_cat(name(i), " voted after sending its data of collective #", seq));
  }
}

void StreamTransport::probe(int peer, const std::function<std::string(int)>& name) {
  Peer& p = peers_[peer];
  if (p.link.load(std::memory_order_acquire) == nullptr)
    tpurt::fail(TPU_UNAVAILABLE, name(peer), ": no data connection");
  if (p.left || p.ended) throw_peer_ended(p, name);
  if (!p.lost.empty()) throw_gone(p, name);
  p.recvs.clear();
  p.recv_index = 0;
  p.recv_offset = 0;
  pump_recv(p, name, false, /*probing=*/true);
}

void StreamTransport::missed_deadline(const std::vector<int>& owing, const std::vector<int>& stuck,
                                      const std::function<std::string(int)>& name) const {
  std::string from, to;
  for (int i : owing) from += str_cat(from.empty() ? "" : "; ", name(i));
  for (int i : stuck) to += str_cat(to.empty() ? "" : "; ", name(i));
  tpurt::fail(TPU_DEADLINE_EXCEEDED, "collective #", seq_, " of the step did not complete: ",
              from.empty() ? "" : "no data arrived from ", from,
              from.empty() || to.empty() ? "" : ", and ",
              to.empty() ? "" : "nothing could be sent to ", to,
              " before the collective deadline (the task is stopped, hung, or has not "
              "reached this collective)");
}

}  // namespace net
}  // namespace tpurt
