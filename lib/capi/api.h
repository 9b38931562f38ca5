// The C boundary: every exported function body runs inside guarded(), which turns
// tpurt::Error and any other exception into a status plus the thread-local message.
#pragma once

#include <cstring>
#include <new>
#include <string>

#include "core/status.h"
#include "tpurt.h"

#define TPU_EXPORT extern "C" TPU_API

namespace tpurt {

template <typename Fn>
tpu_status guarded(Fn&& body) noexcept {
  try {
    body();
    return TPU_OK;
  } catch (const Error& e) {
    return set_last_error(e.code(), e.message());
  } catch (const std::bad_alloc&) {
    return set_last_error(TPU_RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return set_last_error(TPU_INTERNAL, str_cat("internal error: ", e.what()));
  } catch (...) {
    return set_last_error(TPU_INTERNAL, "internal error: unknown exception");
  }
}

// The out-array rule (tpurt/common.h): *count gets the full count, out NULL with
// capacity 0 is a size query, too small a capacity is TPU_OUT_OF_RANGE naming `what`.
// `extra` is the room the terminator needs (1 for strings).
void check_out_array(const void* out, size_t capacity, size_t* count, size_t n, size_t extra,
                     const char* what);

template <typename T>
void copy_array_out(const T* data, size_t n, T* out, size_t capacity, size_t* count,
                    const char* what) {
  check_out_array(out, capacity, count, n, 0, what);
  if (out != nullptr && n > 0) std::memcpy(out, data, n * sizeof(T));
}

// Strings get a NUL after the count characters; bytes get none.
void copy_string_out(const std::string& s, char* out, size_t capacity, size_t* count,
                     const char* what);
void copy_bytes_out(const std::string& bytes, void* out, size_t capacity, size_t* count,
                    const char* what);

}  // namespace tpurt
