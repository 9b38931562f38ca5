#include "core/stream_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace tpurt {

void stream_copy(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  if ((reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
    auto* d = static_cast<__m128i*>(dst);
    auto* s = static_cast<const __m128i*>(src);
    size_t blocks = n / 64;
    for (size_t i = 0; i < blocks; ++i, d += 4, s += 4) {
      __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1);
      __m128i c = _mm_loadu_si128(s + 2), e = _mm_loadu_si128(s + 3);
      _mm_stream_si128(d, a);
      _mm_stream_si128(d + 1, b);
      _mm_stream_si128(d + 2, c);
      _mm_stream_si128(d + 3, e);
    }
    size_t done = blocks * 64;
    if (done < n) std::memcpy(static_cast<char*>(dst) + done, static_cast<const char*>(src) + done, n - done);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

void stream_fence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

}  // namespace tpurt
