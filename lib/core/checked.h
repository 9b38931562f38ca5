// Checked arithmetic for sizes (dimensions, element counts, byte sizes, offsets).
// Sizes come from callers, so a product or sum of them can overflow; these turn that
// into TPU_INVALID_ARGUMENT naming the quantity instead of a wrapped value.
#pragma once

#include <limits>

#include "core/status.h"

namespace tpurt {

// a * b, or throws "<what...> overflows: a * b is more than <max of T>".
template <typename T, typename... What>
T checked_mul(T a, T b, const What&... what) {
  T r;
  if (__builtin_mul_overflow(a, b, &r))
    invalid_argument(what..., " overflows: ", a, " * ", b, " is more than ",
                     std::numeric_limits<T>::max());
  return r;
}

// a + b, or throws "<what...> overflows: a + b is more than <max of T>".
template <typename T, typename... What>
T checked_add(T a, T b, const What&... what) {
  T r;
  if (__builtin_add_overflow(a, b, &r))
    invalid_argument(what..., " overflows: ", a, " + ", b, " is more than ",
                     std::numeric_limits<T>::max());
  return r;
}

}  // namespace tpurt
