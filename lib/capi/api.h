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

// Copies s into the caller's (buf, cap, len) per the string out-parameter rule.
void copy_string_out(const std::string& s, char* buf, size_t cap, size_t* len, const char* what);
// The same for bytes (no NUL terminator).
void copy_bytes_out(const std::string& bytes, void* buf, size_t cap, size_t* len, const char* what);

}  // namespace tpurt
