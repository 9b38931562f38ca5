// Status names, last error, version and dtype queries.
#include "capi/api.h"
#include "capi/handles.h"
#include "core/dtype.h"

namespace tpurt {

void check_out_array(const void* out, size_t capacity, size_t* count, size_t n, size_t extra,
                     const char* what) {
  require_not_null(count, "count");
  if (out == nullptr && capacity != 0)
    invalid_argument("argument 'out' is NULL but capacity is ", capacity);
  *count = n;
  if (out == nullptr) return;  // a size query
  if (capacity < n + extra)
    fail(TPU_OUT_OF_RANGE, "capacity ", capacity, " is too small for ", what, " (", n,
         extra ? " characters and a NUL)" : ")");
}

void copy_string_out(const std::string& s, char* out, size_t capacity, size_t* count,
                     const char* what) {
  check_out_array(out, capacity, count, s.size(), 1, what);
  if (out == nullptr) return;
  std::memcpy(out, s.data(), s.size());
  out[s.size()] = '\0';
}

void copy_bytes_out(const std::string& bytes, void* out, size_t capacity, size_t* count,
                    const char* what) {
  copy_array_out(bytes.data(), bytes.size(), static_cast<char*>(out), capacity, count, what);
}

}  // namespace tpurt

using namespace tpurt;

#define TPU_STR2(x) #x
#define TPU_STR(x) TPU_STR2(x)

TPU_EXPORT const char* tpu_status_name(tpu_status status) { return status_name(status); }
TPU_EXPORT const char* tpu_last_error(void) { return last_error(); }
TPU_EXPORT void tpu_clear_last_error(void) { clear_last_error(); }
TPU_EXPORT tpu_status tpu_set_last_error(tpu_status code, const char* message) {
  if (code == TPU_OK)
    return set_last_error(TPU_INVALID_ARGUMENT, "tpu_set_last_error needs an error code, not TPU_OK");
  return set_last_error(code, message ? message : "");
}
TPU_EXPORT const char* tpu_version(void) {
  return TPU_STR(TPU_VERSION_MAJOR) "." TPU_STR(TPU_VERSION_MINOR) "." TPU_STR(TPU_VERSION_PATCH);
}

TPU_EXPORT tpu_status tpu_dtype_size(tpu_dtype dtype, size_t* out) {
  return guarded([&] {
    require_not_null(out, "out");
    *out = checked_dtype_size(dtype);
  });
}

TPU_EXPORT tpu_status tpu_dtype_name(tpu_dtype dtype, const char** out) {
  return guarded([&] {
    require_not_null(out, "out");
    *out = checked_dtype_name(dtype);
  });
}
