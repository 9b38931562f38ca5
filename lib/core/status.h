// Errors inside the library: a C++ exception carrying a tpu_status, turned into a
// status and the thread-local message at the C boundary (lib/capi/api.h).
#pragma once

#include <exception>
#include <sstream>
#include <string>
#include <utility>

#include "core/handle.h"
#include "tpurt/common.h"

namespace tpurt {

class Error : public std::exception {
 public:
  Error(tpu_status code, std::string message) : code_(code), message_(std::move(message)) {}
  tpu_status code() const noexcept { return code_; }
  const char* what() const noexcept override { return message_.c_str(); }
  const std::string& message() const noexcept { return message_; }

 private:
  tpu_status code_;
  std::string message_;
};

// Concatenates any streamable values into a string.
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

template <typename... Args>
[[noreturn]] void fail(tpu_status code, const Args&... args) {
  throw Error(code, str_cat(args...));
}

template <typename... Args>
[[noreturn]] void invalid_argument(const Args&... args) {
  throw Error(TPU_INVALID_ARGUMENT, str_cat(args...));
}

// Throws TPU_INVALID_ARGUMENT "argument 'name' is NULL" for a null pointer and, for a
// C handle (core/handle.h), "argument 'name' is not a live tpu_X (...)" unless its
// magic word is its type's: the one check of every handle that enters the C ABI.
template <typename T>
inline void require_not_null(const T* p, const char* name) {
  if (p == nullptr) invalid_argument("argument '", name, "' is NULL");
  if constexpr (HandleType<T>::kIsHandle)
    if (__builtin_expect(!is_live_handle(p), 0)) not_a_live_handle(name, HandleType<T>::kName);
}

// The same check for a handle known not to be NULL, an element of an array: its name
// is built (from `what`) only for the message, e.g. require_live(t, "inputs[", i, "]").
template <typename T, typename... Args>
inline void require_live(const T* p, const Args&... what) {
  static_assert(HandleType<T>::kIsHandle, "require_live takes a C handle");
  if (__builtin_expect(!is_live_handle(p), 0))
    not_a_live_handle(str_cat(what...).c_str(), HandleType<T>::kName);
}

// Sets the calling thread's last error and returns code.
tpu_status set_last_error(tpu_status code, const std::string& message);
const char* last_error();
void clear_last_error();

// tpu_status_name: the name in TPU_STATUS_MAP, or "UNKNOWN_STATUS".
const char* status_name(tpu_status code);
// Whether code is in TPU_STATUS_MAP (a computation may return any int).
bool is_status(tpu_status code);

}  // namespace tpurt
