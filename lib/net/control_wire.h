// The control messages on the wire: packing an Envelope into a frame, and the one
// parsing path every listening port uses (the handshake, the service, the agent
// and tests/fuzz/fuzz_wire.cc): frame header bounds, protobuf unpack, then the
// fields each message needs. Anything that does not hold is an error string; the
// caller closes that connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "net/frame.h"
#include "wire.pb-c.h"

namespace tpurt {
namespace wire {

using Envelope = Tpurt__Wire__Envelope;

struct EnvelopeDeleter {
  void operator()(Envelope* e) const;
};
using EnvelopePtr = std::unique_ptr<Envelope, EnvelopeDeleter>;

// A handshake frame above this is malformed.
constexpr uint64_t kMaxHandshakeBytes = 4096;
constexpr size_t kNonceBytes = 32;

// The frame (header with `seq`, then the packed envelope).
std::string pack_frame(uint64_t seq, const Envelope& envelope);

// Unpacks a control payload and checks it (validate). nullptr and *error otherwise.
EnvelopePtr parse_envelope(const unsigned char* data, size_t size, std::string* error);

// "" when every message the envelope holds has the fields it needs.
std::string validate(const Envelope& envelope);

// The name of the envelope's message ("register", ...), for errors.
const char* message_name(const Envelope& envelope);

// Accumulates a control connection's bytes and yields whole frames. Lengths are
// checked (net::decode_header, and max_payload) before any payload is buffered.
class FrameReader {
 public:
  explicit FrameReader(uint64_t max_payload = net::kMaxControlBytes) : max_payload_(max_payload) {}
  void append(const char* data, size_t size);
  // 1: a frame (*header, *payload); 0: more bytes needed; -1: malformed (*error).
  int next(net::FrameHeader* header, std::string* payload, std::string* error);
  size_t buffered() const { return buffer_.size() - start_; }

 private:
  uint64_t max_payload_;
  std::string buffer_;
  size_t start_ = 0;
};

std::string bytes(const ProtobufCBinaryData& data);
ProtobufCBinaryData binary(const std::string& s);  // points into s

// Writes to stderr when the environment has TPURT_LOG; silent otherwise.
void log(const std::string& message);

}  // namespace wire
}  // namespace tpurt
