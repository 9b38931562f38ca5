// StreamTransport's state per peer, shared by stream_transport.cc (frames and
// collectives) and stream_transport_end.cc (the end of a step, and of a task).
// Internal to lib/net.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "net/stream_transport.h"

namespace tpurt {
namespace net {

// One peer's connection and the frame in flight each way. A frame once started is
// always finished (a failed step pads what it had not sent with zeros and drains
// what it had not read), so the byte stream never loses its framing.
struct StreamTransport::Peer {
  int id = -1;
  std::atomic<Link*> link{nullptr};  // owned by links_
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
  bool in_end = false;      // the frame in flight ends the step (or is a farewell)
  bool in_farewell = false;
  std::string end_payload;
  std::vector<const Recv*> recvs;
  size_t recv_index = 0;
  uint64_t recv_offset = 0;

  // The peer's END for the current step, once read.
  bool ended = false;
  StepOutcome outcome;
  bool end_sent = false;
  // The peer's farewell, once read: it has left, for every later step.
  bool left = false;
  StepOutcome left_why;
  bool farewell_sent = false;

  bool sending() const { return out_header_left > 0 || out_left > 0 || send_index < sends.size(); }
  // A header begun or kept while nothing is due (peek_votes) waits for the exchange
  // that expects the peer's next frame: it does not make the peer one to read now.
  bool receiving() const { return in_payload || recv_index < recvs.size(); }

  // The exchange's transfers are dropped (what is in flight is finished elsewhere).
  void drop_sends() {
    sends.clear();
    send_index = 0;
    send_offset = 0;
  }
  void drop_transfers() {
    drop_sends();
    recvs.clear();
    recv_index = 0;
    recv_offset = 0;
  }

  // A new stream starts with no frame in flight.
  void reset_stream() {
    lost.clear();
    out_header_left = 0;
    out_data = nullptr;
    out_left = 0;
    in_header_got = 0;
    in_payload = false;
    in_dest = nullptr;
    in_left = 0;
    in_end = false;
    in_farewell = false;
    end_payload.clear();
    ended = false;
    outcome = StepOutcome{};
    end_sent = false;
    left = false;
    left_why = StepOutcome{};
    farewell_sent = false;
  }
};

// An END or farewell payload: code, origin replica, message (bounded).
std::string encode_outcome(const StepOutcome& o);

}  // namespace net
}  // namespace tpurt
