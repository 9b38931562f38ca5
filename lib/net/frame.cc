#include "net/frame.h"

#include <cstring>

#include "core/status.h"

namespace tpurt {
namespace net {
namespace {

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
void put16(unsigned char* p, uint16_t v) {
  for (int i = 0; i < 2; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void put32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void put64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
#endif
uint64_t get(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

void encode_header(const FrameHeader& h, unsigned char out[kFrameHeaderBytes]) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  // The wire's order is the host's: the fields are copied as they are (a frame per
  // small transfer makes this path hot).
  std::memcpy(out, &h.magic, 4);
  std::memcpy(out + 4, &h.version, 2);
  std::memcpy(out + 6, &h.type, 2);
  std::memcpy(out + 8, &h.tag, 4);
  std::memcpy(out + 12, &h.flags, 4);
  std::memcpy(out + 16, &h.step, 8);
  std::memcpy(out + 24, &h.seq, 8);
  std::memcpy(out + 32, &h.digest, 8);
  std::memcpy(out + 40, &h.offset, 8);
  std::memcpy(out + 48, &h.length, 8);
#else
  put32(out, h.magic);
  put16(out + 4, h.version);
  put16(out + 6, h.type);
  put32(out + 8, h.tag);
  put32(out + 12, h.flags);
  put64(out + 16, h.step);
  put64(out + 24, h.seq);
  put64(out + 32, h.digest);
  put64(out + 40, h.offset);
  put64(out + 48, h.length);
#endif
}

std::string decode_header(const unsigned char in[kFrameHeaderBytes], FrameHeader* h) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  std::memcpy(&h->magic, in, 4);
  std::memcpy(&h->version, in + 4, 2);
  std::memcpy(&h->type, in + 6, 2);
  std::memcpy(&h->tag, in + 8, 4);
  std::memcpy(&h->flags, in + 12, 4);
  std::memcpy(&h->step, in + 16, 8);
  std::memcpy(&h->seq, in + 24, 8);
  std::memcpy(&h->digest, in + 32, 8);
  std::memcpy(&h->offset, in + 40, 8);
  std::memcpy(&h->length, in + 48, 8);
  if (h->magic == kFrameMagic && h->version == kWireVersion && h->flags == 0 &&
      h->type == static_cast<uint16_t>(FrameType::kData) && h->length <= kMaxDataBytes)
    return "";  // the common case; anything else is judged below
#endif
  h->magic = static_cast<uint32_t>(get(in, 4));
  h->version = static_cast<uint16_t>(get(in + 4, 2));
  h->type = static_cast<uint16_t>(get(in + 6, 2));
  h->tag = static_cast<uint32_t>(get(in + 8, 4));
  h->flags = static_cast<uint32_t>(get(in + 12, 4));
  h->step = get(in + 16, 8);
  h->seq = get(in + 24, 8);
  h->digest = get(in + 32, 8);
  h->offset = get(in + 40, 8);
  h->length = get(in + 48, 8);
  if (h->magic != kFrameMagic) return str_cat("bad magic 0x", std::hex, h->magic);
  if (h->version != kWireVersion)
    return str_cat("wire version ", h->version, ", this build speaks ", kWireVersion);
  if (h->flags != 0) return str_cat("reserved flags 0x", std::hex, h->flags, " set");
  switch (static_cast<FrameType>(h->type)) {
    case FrameType::kControl:
      if (h->length > kMaxControlBytes)
        return str_cat("control frame of ", h->length, " bytes (at most ", kMaxControlBytes, ")");
      return "";
    case FrameType::kData:
      if (h->length > kMaxDataBytes)
        return str_cat("data frame of ", h->length, " bytes (at most ", kMaxDataBytes, ")");
      return "";
  }
  return str_cat("unknown frame type ", h->type);
}

}  // namespace net
}  // namespace tpurt
