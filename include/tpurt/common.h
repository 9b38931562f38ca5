/* tpurt/common.h: export macro, version, status codes, data types, errors.
 *
 * Conventions for the whole API:
 * - Every function returns tpu_status (TPU_OK = 0) unless it only names a value
 *   (tpu_status_name, tpu_last_error, tpu_version). Results come back through
 *   out-parameters, which are written only on success (the one exception: *count
 *   of an out-array, below).
 * - On failure the calling thread's message (tpu_last_error) names the offending
 *   argument or value. Success leaves the message of an earlier failure alone.
 * - Handles are opaque. Whatever a function returns through `T **out` belongs to
 *   the caller and is freed with that type's one releasing function, which accepts
 *   NULL. Strings are copied into caller buffers (the out-array rule below).
 * - Options structs start with `size_t struct_size`; initialise them with their
 *   *_INIT macro or *_init function. Zero means default in every field, and a NULL
 *   options pointer means all defaults. Fields are only ever appended.
 * - Functions are safe to call from any thread unless their comment says otherwise.
 *
 * Out-arrays, strings and bytes follow one rule: (T *out, size_t capacity,
 * size_t *count). On success, and on TPU_OUT_OF_RANGE, *count receives the full
 * count: elements for arrays, bytes for bytes, characters without the NUL for
 * strings. out == NULL with capacity == 0 is a size query and succeeds; a capacity
 * below the count (for strings: not above it, the NUL needs room) gives
 * TPU_OUT_OF_RANGE and writes nothing to out. Input arrays come with their count
 * beside them, or with a count argument that the comment names.
 * docs/ABI.md holds the full rules: versioning, struct growth, ownership.
 */
#ifndef TPURT_COMMON_H
#define TPURT_COMMON_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#  if defined(TPURT_BUILDING)
#    define TPU_API __declspec(dllexport)
#  else
#    define TPU_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__)
#  define TPU_API __attribute__((visibility("default")))
#else
#  define TPU_API
#endif

/* In C++ the enums get a fixed underlying type, so that any int a C caller or a
 * binding passes is a value the library can check and reject, not undefined behaviour. */
#ifdef __cplusplus
#  define TPU_ENUM(name) enum name : int
#else
#  define TPU_ENUM(name) enum name
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The runtime version. The ABI is stable within a major version. */
#define TPU_VERSION_MAJOR 1
#define TPU_VERSION_MINOR 4
#define TPU_VERSION_PATCH 0
#define TPU_VERSION_HEX ((TPU_VERSION_MAJOR << 16) | (TPU_VERSION_MINOR << 8) | TPU_VERSION_PATCH)

/* The tables behind tpu_status and tpu_dtype, one entry a line, as libuv's
 * UV_ERRNO_MAP: the enums, the library's lookups and the tests are all built from
 * these, so a code or a dtype is added here and nowhere else. Callers may expand
 * them too, with a macro XX taking the entry's arguments:
 *   #define XX(name, value, str) case TPU_##name: return str;
 *
 * XX(name, value, str): TensorFlow's canonical codes, same numbers; str is
 * tpu_status_name's answer. */
#define TPU_STATUS_MAP(XX)                          \
  XX(OK, 0, "OK")                                   \
  XX(CANCELLED, 1, "CANCELLED")                     \
  XX(UNKNOWN, 2, "UNKNOWN")                         \
  XX(INVALID_ARGUMENT, 3, "INVALID_ARGUMENT")       \
  XX(DEADLINE_EXCEEDED, 4, "DEADLINE_EXCEEDED")     \
  XX(NOT_FOUND, 5, "NOT_FOUND")                     \
  XX(ALREADY_EXISTS, 6, "ALREADY_EXISTS")           \
  XX(PERMISSION_DENIED, 7, "PERMISSION_DENIED")     \
  XX(RESOURCE_EXHAUSTED, 8, "RESOURCE_EXHAUSTED")   \
  XX(FAILED_PRECONDITION, 9, "FAILED_PRECONDITION") \
  XX(ABORTED, 10, "ABORTED")                        \
  XX(OUT_OF_RANGE, 11, "OUT_OF_RANGE")              \
  XX(UNIMPLEMENTED, 12, "UNIMPLEMENTED")            \
  XX(INTERNAL, 13, "INTERNAL")                      \
  XX(UNAVAILABLE, 14, "UNAVAILABLE")                \
  XX(DATA_LOSS, 15, "DATA_LOSS")                    \
  XX(UNAUTHENTICATED, 16, "UNAUTHENTICATED")

/* XX(name, value, str, size): TensorFlow's DataType numbers; str is
 * tpu_dtype_name's answer and size tpu_dtype_size's (bytes per element). */
#define TPU_DTYPE_MAP(XX)              \
  XX(FLOAT, 1, "float32", 4)           \
  XX(DOUBLE, 2, "float64", 8)          \
  XX(INT32, 3, "int32", 4)             \
  XX(UINT8, 4, "uint8", 1)             \
  XX(INT16, 5, "int16", 2)             \
  XX(INT8, 6, "int8", 1)               \
  XX(COMPLEX64, 8, "complex64", 8)     \
  XX(INT64, 9, "int64", 8)             \
  XX(BOOL, 10, "bool", 1)              \
  XX(BFLOAT16, 14, "bfloat16", 2)      \
  XX(HALF, 19, "float16", 2)           \
  XX(UINT32, 22, "uint32", 4)          \
  XX(UINT64, 23, "uint64", 8)

#define TPU_STATUS_ENUMERATOR_(name, value, str) TPU_##name = value,
#define TPU_DTYPE_ENUMERATOR_(name, value, str, size) TPU_##name = value,

/* Status codes: TPU_OK, TPU_CANCELLED, ... (TPU_STATUS_MAP). */
typedef TPU_ENUM(tpu_status) { TPU_STATUS_MAP(TPU_STATUS_ENUMERATOR_) } tpu_status;

/* Data types: TPU_FLOAT, TPU_DOUBLE, ... (TPU_DTYPE_MAP). */
typedef TPU_ENUM(tpu_dtype) { TPU_DTYPE_MAP(TPU_DTYPE_ENUMERATOR_) } tpu_dtype;

#undef TPU_STATUS_ENUMERATOR_
#undef TPU_DTYPE_ENUMERATOR_

/* The largest tensor rank tpurt accepts. */
#define TPU_MAX_RANK 16

/* The canonical name of a status code ("OK", "INVALID_ARGUMENT", ...), or
 * "UNKNOWN_STATUS" for a value that is not a code. Static storage; never NULL. */
TPU_API const char *tpu_status_name(tpu_status status);

/* The calling thread's message for its most recent failed call, or "" if none.
 * Valid until the next failing tpurt call on this thread. Never NULL. */
TPU_API const char *tpu_last_error(void);

/* Forgets the calling thread's last error message. */
TPU_API void tpu_clear_last_error(void);

/* Makes `message` (copied; NULL: "") the calling thread's last error and returns
 * `code`. For callbacks that have no replica context to fail, such as the host
 * function of tpu_outside_compilation: a binding catches its language's exception
 * there and says why through this, so the replica sees the original message.
 * code must not be TPU_OK: that call fails with TPU_INVALID_ARGUMENT, and its own
 * message, not `message`, becomes the last error. */
TPU_API tpu_status tpu_set_last_error(tpu_status code, const char *message);

/* The runtime's version as "MAJOR.MINOR.PATCH". Static storage; never NULL. */
TPU_API const char *tpu_version(void);

/* Bytes per element of `dtype` into *out (bfloat16 2, complex64 8, bool 1).
 * TPU_INVALID_ARGUMENT for an unknown dtype or NULL out. */
TPU_API tpu_status tpu_dtype_size(tpu_dtype dtype, size_t *out);

/* The name of `dtype` ("float32", "bfloat16", ...) into *out (static storage).
 * TPU_INVALID_ARGUMENT for an unknown dtype or NULL out. */
TPU_API tpu_status tpu_dtype_name(tpu_dtype dtype, const char **out);

#ifdef __cplusplus
}
#endif

#endif /* TPURT_COMMON_H */
