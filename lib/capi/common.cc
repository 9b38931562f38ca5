// Status names, last error, version and dtype queries.
#include "capi/api.h"
#include "core/dtype.h"

namespace tpurt {

void copy_string_out(const std::string& s, char* buf, size_t cap, size_t* len, const char* what) {
  require_not_null(len, "len");
  if (buf == nullptr && cap != 0) invalid_argument("argument 'buf' is NULL but cap is ", cap);
  *len = s.size();
  if (buf == nullptr) return;
  if (cap <= s.size())
    fail(TPU_OUT_OF_RANGE, "buffer of ", cap, " bytes is too small for ", what, " (",
         s.size() + 1, " bytes with NUL)");
  std::memcpy(buf, s.data(), s.size());
  buf[s.size()] = '\0';
}

void copy_bytes_out(const std::string& bytes, void* buf, size_t cap, size_t* len,
                    const char* what) {
  require_not_null(len, "len");
  if (buf == nullptr && cap != 0) invalid_argument("argument 'buf' is NULL but cap is ", cap);
  *len = bytes.size();
  if (buf == nullptr) return;
  if (cap < bytes.size())
    fail(TPU_OUT_OF_RANGE, "buffer of ", cap, " bytes is too small for ", what, " (",
         bytes.size(), " bytes)");
  if (!bytes.empty()) std::memcpy(buf, bytes.data(), bytes.size());
}

}  // namespace tpurt

using namespace tpurt;

#define TPU_STR2(x) #x
#define TPU_STR(x) TPU_STR2(x)

TPU_EXPORT const char* tpu_status_name(tpu_status status) { return status_name(status); }
TPU_EXPORT const char* tpu_last_error(void) { return last_error(); }
TPU_EXPORT void tpu_clear_last_error(void) { clear_last_error(); }
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
