// The wire's one frame format, shared by the coordination service and the data
// plane: a fixed 56-byte little-endian header, then `length` payload bytes (a
// protobuf-c message from proto/wire.proto for control frames, raw bytes for data).
// Every length is checked against a bound before anything is allocated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tpurt {
namespace net {

constexpr uint32_t kFrameMagic = 0x54505554;  // "TUPT" read little-endian: "TPUT"
constexpr uint16_t kWireVersion = 1;
constexpr size_t kFrameHeaderBytes = 56;
// A control message above this is malformed (the largest legitimate one is a
// key-value entry or a topology).
constexpr uint64_t kMaxControlBytes = 16u << 20;
// One data frame's payload; collectives split larger transfers.
constexpr uint64_t kMaxDataBytes = 64u << 20;

enum class FrameType : uint16_t {
  kControl = 1,  // payload: a wire.proto Envelope
  kData = 2,     // payload: raw bytes of collective `seq` of step `step`
};

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint16_t version = kWireVersion;
  uint16_t type = 0;      // FrameType
  uint32_t tag = 0;       // data: which transfer of the collective (phase, chunk)
  uint32_t flags = 0;     // reserved, 0
  uint64_t step = 0;      // data: the step; control: 0
  uint64_t seq = 0;       // data: the collective's number in the step; control: request id
  uint64_t digest = 0;    // data: the collective's descriptor digest (peers must agree)
  uint64_t offset = 0;    // data: byte offset of the payload in the transfer
  uint64_t length = 0;    // payload bytes
};

void encode_header(const FrameHeader& h, unsigned char out[kFrameHeaderBytes]);
// Decodes and validates magic, version, type, flags and the length bound of the
// type. Returns "" when valid, else what is wrong (for the connection's error).
std::string decode_header(const unsigned char in[kFrameHeaderBytes], FrameHeader* h);

}  // namespace net
}  // namespace tpurt
