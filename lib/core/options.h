// Options structs of the C ABI: `size_t struct_size` first, fields only appended,
// zero meaning default in every field. A caller built against an older header passes
// a smaller struct_size (at least the first release's, min_size); its missing tail
// reads as zeros. A larger struct_size than this library knows means the caller was
// built against a newer tpurt and may have asked for settings this one lacks: that
// is rejected rather than silently ignored.
#pragma once

#include <cstddef>
#include <cstring>

#include "core/status.h"

namespace tpurt {

inline void check_struct_size(size_t struct_size, size_t min_size, size_t max_size,
                              const char* type) {
  if (struct_size < min_size || struct_size > max_size)
    invalid_argument(type, ".struct_size is ", struct_size, "; this tpurt accepts ", min_size,
                     " to ", max_size, " (initialise it with the _INIT macro or the _init function;"
                     " a larger size comes from a newer tpurt header than this library)");
}

// The caller's options with the tail it did not pass zeroed; all zeros for NULL.
template <typename T>
T read_options(const T* options, size_t min_size, const char* type) {
  T copy;
  std::memset(static_cast<void*>(&copy), 0, sizeof copy);
  copy.struct_size = sizeof copy;
  if (options == nullptr) return copy;
  check_struct_size(options->struct_size, min_size, sizeof(T), type);
  std::memcpy(static_cast<void*>(&copy), options, options->struct_size);
  copy.struct_size = sizeof copy;
  return copy;
}

// The _init functions: zeros (the defaults) and the caller's struct_size.
template <typename T>
void init_options(T* options, size_t struct_size, size_t min_size, const char* type) {
  require_not_null(options, "options");
  check_struct_size(struct_size, min_size, sizeof(T), type);
  std::memset(static_cast<void*>(options), 0, struct_size);
  options->struct_size = struct_size;
}

}  // namespace tpurt
