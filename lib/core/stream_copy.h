// Copies that bypass the cache: for outputs too large to stay cached, an ordinary
// store first reads each line (read-for-ownership), a third more memory traffic.
#pragma once

#include <cstddef>

namespace tpurt {

// Copies n bytes with non-temporal stores where dst is 16-byte aligned (plain
// memcpy otherwise and for the tail). Call stream_fence() before publishing.
void stream_copy(void* dst, const void* src, size_t n);
void stream_fence();

}  // namespace tpurt
