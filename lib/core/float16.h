// bfloat16 and IEEE half conversions, bit-exact with TensorFlow (Eigen): round to
// nearest even, NaN -> quiet NaN keeping the sign. Inline: the collectives use them
// in their inner loops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tpurt {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u) & 0xffc0u;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_half(float f) {
  uint32_t u = float_bits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;        // NaN: quiet, sign kept
  if (a >= 0x477ff000u) return sign | 0x7c00u;       // rounds to >= 65520: inf
  if (a < 0x38800000u) {                              // below the smallest normal half
    // Subnormal half: scale into [0, 1024] ulps of 2^-24 with round-to-nearest-even
    // done by the FPU on the addition.
    float m = bits_float(a) + 0.5f;  // 0.5 = 2^-1: mantissa bits now hold value/2^-24
    return sign | static_cast<uint16_t>(float_bits(m) - float_bits(0.5f));
  }
  uint32_t odd = (a >> 13) & 1u;
  a += 0xc8000fffu + odd;  // rebias exponent (-112 << 23) and round to nearest even
  return sign | static_cast<uint16_t>(a >> 13);
}

inline float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    float v = static_cast<float>(man) * (1.0f / 16777216.0f);  // man * 2^-24
    return bits_float(float_bits(v) | sign);
  }
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}

// The same over arrays of n elements.
inline void float_to_bf16(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
}
inline void bf16_to_float(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
}
inline void float_to_half(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = float_to_half(in[i]);
}
inline void half_to_float(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = half_to_float(in[i]);
}

}  // namespace tpurt
