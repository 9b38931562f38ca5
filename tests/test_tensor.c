/* Tensors (create, wrap, accessors, reshape, cast, reference counting) and the
 * float32 <-> bfloat16 / half buffer conversions, checked against references written
 * here independently of the library. */
#define _GNU_SOURCE /* fork, setrlimit */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tpurt.h"

#include "test_util.h"

/* A pointer no function may write: out-parameters are written only on success. */
#define SENTINEL ((tpu_tensor *)(uintptr_t)0x5e)

static uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static int64_t num_elements(const tpu_tensor *t) {
  int64_t n = -1;
  CHECK_OK(tpu_tensor_num_elements(t, &n));
  return n;
}

static const void *data_of(const tpu_tensor *t) {
  const void *p = NULL;
  CHECK_OK(tpu_tensor_data(t, &p));
  return p;
}

static void assert_shape(const tpu_tensor *t, tpu_dtype dtype, int rank, const int64_t *dims) {
  tpu_dtype d;
  int r = -1;
  int64_t got[TPU_MAX_RANK + 1];
  size_t bytes = 0, elem = 0;
  int64_t n = 1;
  CHECK_OK(tpu_tensor_dtype(t, &d));
  assert_int_equal(d, dtype);
  CHECK_OK(tpu_tensor_rank(t, &r));
  assert_int_equal(r, rank);
  CHECK_OK(tpu_tensor_dims(t, got, TPU_MAX_RANK + 1, &(size_t){0}));
  for (int i = 0; i < rank; ++i) {
    assert_int_equal(got[i], dims[i]);
    n *= dims[i];
  }
  assert_int_equal(num_elements(t), n);
  CHECK_OK(tpu_dtype_size(dtype, &elem));
  CHECK_OK(tpu_tensor_byte_size(t, &bytes));
  assert_int_equal(bytes, (size_t)n * elem);
}

/* ---- create ------------------------------------------------------------------- */

static void test_tensor__create_copies(void **state) {
  (void)state;
  const int64_t dims[2] = {2, 3};
  float src[6] = {1, 2, 3, 4, 5, 6};
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 2, src, sizeof src, &t));
  assert_shape(t, TPU_FLOAT, 2, dims);
  const float *p = data_of(t);
  assert_ptr_not_equal(p, src);
  assert_int_equal((uintptr_t)p % 64, 0);
  src[0] = 100; /* the tensor holds a copy */
  assert_true(p[0] == 1.0f && p[5] == 6.0f);
  CHECK_OK(tpu_tensor_release(t));
}

static void test_tensor__create_zero_filled(void **state) {
  (void)state;
  const int64_t dims[1] = {1000};
  tpu_tensor *t = NULL;
  /* A released block of the same size full of ones first: fresh memory is zero anyway,
   * a reused block is zero only if the library zeroed it. */
  CHECK_OK(tpu_tensor_create(TPU_INT64, dims, 1, NULL, 0, &t));
  const void *first = data_of(t);
  void *w = NULL;
  CHECK_OK(tpu_tensor_mutable_data(t, &w));
  assert_ptr_equal(w, first); /* not shared: no copy */
  memset(w, 0xff, 1000 * sizeof(int64_t));
  CHECK_OK(tpu_tensor_release(t));
  CHECK_OK(tpu_tensor_create(TPU_INT64, dims, 1, NULL, 0, &t));
  const int64_t *p = data_of(t);
  if ((const void *)p != first) print_message("the block was not reused: a weaker check\n");
  for (int i = 0; i < 1000; ++i) assert_int_equal(p[i], 0);
  CHECK_OK(tpu_tensor_release(t));
}

static void test_tensor__scalar(void **state) {
  (void)state;
  double v = 2.5;
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(TPU_DOUBLE, NULL, 0, &v, sizeof v, &t));
  assert_shape(t, TPU_DOUBLE, 0, NULL);
  assert_int_equal(num_elements(t), 1);
  assert_true(*(const double *)data_of(t) == 2.5);
  CHECK_OK(tpu_tensor_dims(t, NULL, 0, &(size_t){0})); /* dims may be NULL when the rank is 0 */
  int64_t d = 77;
  CHECK_ERROR(tpu_tensor_dim(t, 0, &d), TPU_OUT_OF_RANGE, "axis");
  CHECK_ERROR(tpu_tensor_dim(t, -1, &d), TPU_OUT_OF_RANGE, "axis");
  assert_int_equal(d, 77);
  CHECK_OK(tpu_tensor_release(t));
}

static void test_tensor__zero_size(void **state) {
  (void)state;
  const int64_t dims[3] = {3, 0, 5};
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 3, NULL, 0, &t));
  assert_shape(t, TPU_FLOAT, 3, dims);
  const void *p = (const void *)&dims;
  CHECK_OK(tpu_tensor_data(t, &p)); /* may give NULL, but succeeds */
  CHECK_OK(tpu_tensor_release(t));
  float dummy;
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 3, &dummy, 0, &t)); /* non-NULL data, 0 bytes */
  assert_int_equal(num_elements(t), 0);
  CHECK_OK(tpu_tensor_release(t));
  CHECK_OK(tpu_tensor_wrap(TPU_FLOAT, dims, 3, NULL, 0, NULL, NULL, &t));
  assert_int_equal(num_elements(t), 0);
  CHECK_OK(tpu_tensor_release(t));
  CHECK_ERROR(tpu_tensor_create(TPU_FLOAT, dims, 3, &dummy, 4, &t), TPU_INVALID_ARGUMENT,
               "data_bytes");
}

static void test_tensor__dims_and_dim(void **state) {
  (void)state;
  const int64_t dims[3] = {2, 3, 4};
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(TPU_INT8, dims, 3, NULL, 0, &t));
  int64_t got[3] = {0, 0, 0}, d = -5;
  CHECK_ERROR(tpu_tensor_dims(t, got, 2, &(size_t){0}), TPU_OUT_OF_RANGE, "capacity");
  assert_int_equal(got[0], 0);
  CHECK_OK(tpu_tensor_dims(t, got, 3, &(size_t){0}));
  assert_true(got[0] == 2 && got[1] == 3 && got[2] == 4);
  for (int axis = -3; axis < 3; ++axis) {
    CHECK_OK(tpu_tensor_dim(t, axis, &d));
    assert_int_equal(d, dims[axis < 0 ? axis + 3 : axis]);
  }
  d = -5;
  CHECK_ERROR(tpu_tensor_dim(t, 3, &d), TPU_OUT_OF_RANGE, "axis");
  CHECK_ERROR(tpu_tensor_dim(t, -4, &d), TPU_OUT_OF_RANGE, "axis");
  assert_int_equal(d, -5);
  CHECK_OK(tpu_tensor_release(t));
}

static void test_tensor__bad_shapes(void **state) {
  (void)state;
  tpu_tensor *t = SENTINEL;
  const int64_t overflow[2] = {INT64_MAX, 2};
  CHECK_ERROR(tpu_tensor_create(TPU_FLOAT, overflow, 2, NULL, 0, &t), TPU_INVALID_ARGUMENT,
               "overflow");
  CHECK_ERROR(tpu_tensor_wrap(TPU_FLOAT, overflow, 2, NULL, 0, NULL, NULL, &t),
               TPU_INVALID_ARGUMENT, "overflow");
  const int64_t overflow3[3] = {1LL << 32, 1LL << 31, 4};
  CHECK_ERROR(tpu_tensor_create(TPU_INT8, overflow3, 3, NULL, 0, &t), TPU_INVALID_ARGUMENT,
               "overflow");
  /* The element count fits in int64 but the byte size does not fit in size_t. */
  const int64_t bytes_overflow[1] = {INT64_MAX / 2};
  CHECK_ERROR(tpu_tensor_create(TPU_DOUBLE, bytes_overflow, 1, NULL, 0, &t),
               TPU_INVALID_ARGUMENT, "overflow");
  /* A zero dimension makes any count valid: 0 elements. */
  const int64_t zero_times_huge[2] = {0, INT64_MAX};
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, zero_times_huge, 2, NULL, 0, &t));
  assert_int_equal(num_elements(t), 0);
  CHECK_OK(tpu_tensor_release(t));
  t = SENTINEL;

  const int64_t negative[2] = {2, -1};
  CHECK_ERROR(tpu_tensor_create(TPU_FLOAT, negative, 2, NULL, 0, &t), TPU_INVALID_ARGUMENT,
               "negative");
  assert_non_null(strstr(tpu_last_error(), "-1"));
  const int64_t min[1] = {INT64_MIN};
  CHECK_ERROR(tpu_tensor_create(TPU_FLOAT, min, 1, NULL, 0, &t), TPU_INVALID_ARGUMENT,
               "negative");

  int64_t many[TPU_MAX_RANK + 1];
  for (int i = 0; i <= TPU_MAX_RANK; ++i) many[i] = 1;
  CHECK_ERROR(tpu_tensor_create(TPU_FLOAT, many, TPU_MAX_RANK + 1, NULL, 0, &t),
               TPU_INVALID_ARGUMENT, "rank");
  CHECK_ERROR(tpu_tensor_create(TPU_FLOAT, many, -1, NULL, 0, &t), TPU_INVALID_ARGUMENT,
               "rank");
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, many, TPU_MAX_RANK, NULL, 0, &t));
  CHECK_OK(tpu_tensor_release(t));
  t = SENTINEL;

  static const int unknown[] = {0, 7, 11, 99, -1};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; ++i) {
    CHECK_ERROR(tpu_tensor_create((tpu_dtype)unknown[i], NULL, 0, NULL, 0, &t),
                 TPU_INVALID_ARGUMENT, "dtype");
    CHECK_ERROR(tpu_tensor_wrap((tpu_dtype)unknown[i], NULL, 0, NULL, 0, NULL, NULL, &t),
                 TPU_INVALID_ARGUMENT, "dtype");
  }
  assert_ptr_equal(t, SENTINEL);
}

static void test_tensor__data_bytes_mismatch(void **state) {
  (void)state;
  const int64_t dims[2] = {2, 3};
  float buf[7] = {0};
  tpu_tensor *t = SENTINEL;
  CHECK_ERROR(tpu_tensor_create(TPU_FLOAT, dims, 2, buf, 20, &t), TPU_INVALID_ARGUMENT,
               "data_bytes");
  /* The message names both sizes. */
  assert_non_null(strstr(tpu_last_error(), "20"));
  assert_non_null(strstr(tpu_last_error(), "24"));
  CHECK_ERROR(tpu_tensor_create(TPU_FLOAT, dims, 2, buf, 28, &t), TPU_INVALID_ARGUMENT, "28");
  CHECK_ERROR(tpu_tensor_create(TPU_FLOAT, dims, 2, NULL, 24, &t), TPU_INVALID_ARGUMENT,
               "'data'");
  CHECK_ERROR(tpu_tensor_wrap(TPU_FLOAT, dims, 2, buf, 20, NULL, NULL, &t),
               TPU_INVALID_ARGUMENT, "data_bytes");
  assert_non_null(strstr(tpu_last_error(), "24"));
  CHECK_ERROR(tpu_tensor_wrap(TPU_FLOAT, dims, 2, NULL, 24, NULL, NULL, &t),
               TPU_INVALID_ARGUMENT, "'data'");
  assert_ptr_equal(t, SENTINEL);
}

/* The allocation fails, not a size check: RESOURCE_EXHAUSTED naming out of memory. */
static void check_out_of_memory(tpu_status s, const tpu_tensor *t) {
  CHECK(s == TPU_RESOURCE_EXHAUSTED);
  CHECK(strstr(tpu_last_error(), "out of memory") != NULL);
  CHECK(t == SENTINEL);
}

static void test_tensor__out_of_memory(void **state) {
  (void)state;
  /* 2^48 bytes, the largest size the shape checks accept, is more address space than
   * a process gets without asking for it (47 bits on x86-64, 48 at most on arm64). */
  const int64_t dims[1] = {INT64_C(1) << 46};
  tpu_tensor *t = SENTINEL;
  tpu_clear_last_error();
  check_out_of_memory(tpu_tensor_create(TPU_FLOAT, dims, 1, NULL, 0, &t), t);
}

/* An ordinary 256 MiB tensor in a child whose address space is capped 64 MiB above
 * what it uses. The cap is set after start, above the sanitizers' shadow reservations
 * (a cap set before start makes them fail), and their own small mappings fit in the
 * headroom, so this runs under SANITIZE=address and thread too. */
static void test_tensor__out_of_memory_under_rlimit(void **state) {
  (void)state;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld", &pages) != 1) _exit(2);
    fclose(f);
    rlim_t cap = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)64 << 20);
    struct rlimit lim = {cap, cap};
    if (setrlimit(RLIMIT_AS, &lim) != 0) _exit(3);
    const int64_t dims[1] = {INT64_C(64) << 20};
    tpu_tensor *t = SENTINEL;
    tpu_status s = tpu_tensor_create(TPU_FLOAT, dims, 1, NULL, 0, &t);
    _exit(s == TPU_RESOURCE_EXHAUSTED && strstr(tpu_last_error(), "out of memory") && t == SENTINEL
              ? 0
              : 1);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

/* Cached buffers give their address space back when a new one would not fit: in a
 * child capped 150 MiB above what it uses, a released 100 MiB tensor (a 112 MiB block,
 * kept by the cache) leaves room for an 80 MiB one only once the cache lets it go. */
static void test_tensor__cached_buffers_yield_to_a_new_one(void **state) {
  (void)state;
  if (getenv("TPURT_TENSOR_CACHE_MB")) skip(); /* the default cache is what is tested */
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld", &pages) != 1) _exit(2);
    fclose(f);
    rlim_t cap = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)150 << 20);
    struct rlimit lim = {cap, cap};
    if (setrlimit(RLIMIT_AS, &lim) != 0) _exit(3);
    const int64_t big[1] = {INT64_C(25) << 20}, smaller[1] = {INT64_C(20) << 20};
    tpu_tensor *t = NULL;
    if (tpu_tensor_create(TPU_FLOAT, big, 1, NULL, 0, &t) != TPU_OK) _exit(4);
    if (tpu_tensor_release(t) != TPU_OK) _exit(5);
    _exit(tpu_tensor_create(TPU_FLOAT, smaller, 1, NULL, 0, &t) == TPU_OK ? 0 : 1);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- wrap and the release callback -------------------------------------------- */

typedef struct {
  int calls;
  void *data;
  void *user_data;
} release_log;

static void log_release(void *data, void *user_data) {
  release_log *log = user_data;
  log->calls++;
  log->data = data;
  log->user_data = user_data;
}

static void test_tensor__wrap_borrows(void **state) {
  (void)state;
  const int64_t dims[1] = {4};
  int32_t buf[4] = {1, 2, 3, 4};
  release_log log = {0, NULL, NULL};
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_wrap(TPU_INT32, dims, 1, buf, sizeof buf, log_release, &log, &t));
  assert_ptr_equal(data_of(t), buf);
  buf[2] = 30; /* borrowed: the tensor sees the caller's writes */
  assert_int_equal(((const int32_t *)data_of(t))[2], 30);
  CHECK_OK(tpu_tensor_retain(t));
  CHECK_OK(tpu_tensor_release(t));
  assert_int_equal(log.calls, 0);
  CHECK_OK(tpu_tensor_release(t));
  assert_int_equal(log.calls, 1);
  assert_ptr_equal(log.data, buf);
  assert_ptr_equal(log.user_data, &log);

  /* NULL release: nothing to call. */
  CHECK_OK(tpu_tensor_wrap(TPU_INT32, dims, 1, buf, sizeof buf, NULL, NULL, &t));
  CHECK_OK(tpu_tensor_release(t));

  /* A failed wrap does not call release. */
  log.calls = 0;
  const int64_t bad[1] = {-4};
  CHECK_ERROR(tpu_tensor_wrap(TPU_INT32, bad, 1, buf, sizeof buf, log_release, &log, &t),
               TPU_INVALID_ARGUMENT, "negative");
  CHECK_ERROR(tpu_tensor_wrap(TPU_INT32, dims, 1, buf, 3, log_release, &log, &t),
               TPU_INVALID_ARGUMENT, "data_bytes");
  CHECK_ERROR(tpu_tensor_wrap(TPU_INT32, dims, 1, buf, sizeof buf, log_release, &log, NULL),
               TPU_INVALID_ARGUMENT, "'out'");
  assert_int_equal(log.calls, 0);
}

/* The callback runs once, when the last of the tensor and its views goes. */
static void wrap_with_views(int order) {
  const int64_t dims[2] = {2, 6};
  const int64_t flat[1] = {12};
  const int64_t cube[3] = {2, 2, 3};
  float buf[12] = {0};
  release_log log = {0, NULL, NULL};
  tpu_tensor *t = NULL, *v1 = NULL, *v2 = NULL;
  CHECK_OK(tpu_tensor_wrap(TPU_FLOAT, dims, 2, buf, sizeof buf, log_release, &log, &t));
  CHECK_OK(tpu_tensor_reshape(t, flat, 1, &v1));
  CHECK_OK(tpu_tensor_reshape(v1, cube, 3, &v2)); /* a view of a view */
  assert_ptr_equal(data_of(v1), buf);
  assert_ptr_equal(data_of(v2), buf);
  buf[11] = 5; /* the caller's own write: no copy-on-write, every handle sees it */
  assert_true(((const float *)data_of(t))[11] == 5 && ((const float *)data_of(v2))[11] == 5);
  tpu_tensor *seq[3][3] = {{t, v1, v2}, {v2, v1, t}, {v1, t, v2}};
  for (int i = 0; i < 3; ++i) {
    assert_int_equal(log.calls, 0);
    CHECK_OK(tpu_tensor_release(seq[order][i]));
  }
  assert_int_equal(log.calls, 1);
  assert_ptr_equal(log.data, buf);
}

static void test_tensor__wrap_views_release_order(void **state) {
  (void)state;
  for (int order = 0; order < 3; ++order) wrap_with_views(order);
}

/* ---- reshape ---------------------------------------------------------------------- */

static void test_tensor__reshape(void **state) {
  (void)state;
  const int64_t dims[2] = {4, 6};
  tpu_tensor *t = NULL, *r = NULL;
  CHECK_OK(tpu_tensor_create(TPU_INT16, dims, 2, NULL, 0, &t));

  const int64_t to[3] = {2, -1, 3};
  CHECK_OK(tpu_tensor_reshape(t, to, 3, &r));
  const int64_t inferred[3] = {2, 4, 3};
  assert_shape(r, TPU_INT16, 3, inferred);
  assert_shape(t, TPU_INT16, 2, dims); /* the source's shape is unchanged */
  assert_ptr_equal(data_of(r), data_of(t));
  CHECK_OK(tpu_tensor_release(r));

  r = SENTINEL;
  const int64_t wrong[2] = {5, 5};
  CHECK_ERROR(tpu_tensor_reshape(t, wrong, 2, &r), TPU_INVALID_ARGUMENT, "24");
  assert_non_null(strstr(tpu_last_error(), "25")); /* both counts named */
  const int64_t two_unknown[2] = {-1, -1};
  CHECK_ERROR(tpu_tensor_reshape(t, two_unknown, 2, &r), TPU_INVALID_ARGUMENT, "-1");
  const int64_t not_divisible[2] = {-1, 5};
  CHECK_ERROR(tpu_tensor_reshape(t, not_divisible, 2, &r), TPU_INVALID_ARGUMENT, "reshape");
  const int64_t negative[2] = {-2, -12};
  CHECK_ERROR(tpu_tensor_reshape(t, negative, 2, &r), TPU_INVALID_ARGUMENT, "negative");
  const int64_t overflow[3] = {INT64_MAX, 2, -1};
  CHECK_ERROR(tpu_tensor_reshape(t, overflow, 3, &r), TPU_INVALID_ARGUMENT, "overflow");
  int64_t many[TPU_MAX_RANK + 1];
  for (int i = 0; i <= TPU_MAX_RANK; ++i) many[i] = 1;
  many[0] = 24;
  CHECK_ERROR(tpu_tensor_reshape(t, many, TPU_MAX_RANK + 1, &r), TPU_INVALID_ARGUMENT, "rank");
  CHECK_ERROR(tpu_tensor_reshape(t, NULL, 0, &r), TPU_INVALID_ARGUMENT, "24");
  assert_ptr_equal(r, SENTINEL);
  CHECK_OK(tpu_tensor_release(t));

  /* One element <-> scalar. */
  const int64_t one[3] = {1, 1, 1};
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, one, 3, NULL, 0, &t));
  CHECK_OK(tpu_tensor_reshape(t, NULL, 0, &r));
  assert_shape(r, TPU_FLOAT, 0, NULL);
  CHECK_OK(tpu_tensor_release(r));
  CHECK_OK(tpu_tensor_release(t));

  /* -1 cannot be inferred for an empty tensor when another dimension is 0. */
  const int64_t empty[2] = {0, 4};
  const int64_t infer_empty[2] = {-1, 0};
  const int64_t ok_empty[3] = {2, 0, 7};
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, empty, 2, NULL, 0, &t));
  CHECK_ERROR(tpu_tensor_reshape(t, infer_empty, 2, &r), TPU_INVALID_ARGUMENT, "reshape");
  CHECK_OK(tpu_tensor_reshape(t, ok_empty, 3, &r));
  assert_int_equal(num_elements(r), 0);
  CHECK_OK(tpu_tensor_release(r));
  CHECK_OK(tpu_tensor_release(t));
}

/* ---- cast ------------------------------------------------------------------------- */

static tpu_tensor *vector(tpu_dtype dtype, const void *data, int64_t n) {
  size_t elem = 0;
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_dtype_size(dtype, &elem));
  CHECK_OK(tpu_tensor_create(dtype, &n, 1, data, (size_t)n * elem, &t));
  return t;
}

static tpu_tensor *cast(const tpu_tensor *t, tpu_dtype to) {
  tpu_tensor *out = NULL;
  CHECK_OK(tpu_tensor_cast(t, to, &out));
  return out;
}

/* Floats beyond an integer type's range saturate, NaN gives 0 (tensor.h): a plain
 * C conversion would be undefined behaviour (UBSan's float-cast-overflow). */
static void test_tensor__cast_saturates(void **state) {
  (void)state;
  const double d[] = {NAN, INFINITY, -INFINITY, 3e9, -3e9, 1e300, -1e300, 300.5, -300.5,
                      127.9, -128.9, 255.9, -0.9, 9.3e18, 1.9e19, 2147483647.5};
  enum { N = sizeof d / sizeof d[0] };
  tpu_tensor *t = vector(TPU_DOUBLE, d, N);
  tpu_tensor *i32 = cast(t, TPU_INT32), *i8 = cast(t, TPU_INT8), *u8 = cast(t, TPU_UINT8);
  tpu_tensor *i16 = cast(t, TPU_INT16), *u32 = cast(t, TPU_UINT32), *i64 = cast(t, TPU_INT64);
  tpu_tensor *u64 = cast(t, TPU_UINT64);
  const int32_t want32[N] = {0, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN,
                             300, -300, 127, -128, 255, 0, INT32_MAX, INT32_MAX, INT32_MAX};
  const int8_t want8[N] = {0, 127, -128, 127, -128, 127, -128, 127, -128, 127, -128, 127, 0,
                           127, 127, 127};
  const uint8_t wantu8[N] = {0, 255, 0, 255, 0, 255, 0, 255, 0, 127, 0, 255, 0, 255, 255, 255};
  const int16_t want16[N] = {0, INT16_MAX, INT16_MIN, INT16_MAX, INT16_MIN, INT16_MAX, INT16_MIN,
                             300, -300, 127, -128, 255, 0, INT16_MAX, INT16_MAX, INT16_MAX};
  const uint32_t wantu32[N] = {0, UINT32_MAX, 0, 3000000000u, 0, UINT32_MAX, 0, 300, 0, 127, 0,
                               255, 0, UINT32_MAX, UINT32_MAX, 2147483647u};
  const int64_t want64[N] = {0, INT64_MAX, INT64_MIN, 3000000000, -3000000000, INT64_MAX, INT64_MIN,
                             300, -300, 127, -128, 255, 0, INT64_MAX /* 9.3e18 > 2^63 */, INT64_MAX,
                             2147483647};
  const uint64_t wantu64[N] = {0, UINT64_MAX, 0, 3000000000u, 0, UINT64_MAX, 0, 300, 0, 127, 0,
                               255, 0, 9300000000000000000u, UINT64_MAX /* 1.9e19 > 2^64 */, 2147483647u};
  assert_memory_equal(data_of(i32), want32, sizeof want32);
  assert_memory_equal(data_of(i8), want8, sizeof want8);
  assert_memory_equal(data_of(u8), wantu8, sizeof wantu8);
  assert_memory_equal(data_of(i16), want16, sizeof want16);
  assert_memory_equal(data_of(u32), wantu32, sizeof wantu32);
  assert_memory_equal(data_of(i64), want64, sizeof want64);
  assert_memory_equal(data_of(u64), wantu64, sizeof wantu64);
  /* From float32, bfloat16 and half alike (all go through the same conversion). */
  const float f[3] = {NAN, 1e20f, -1e20f};
  tpu_tensor *tf = vector(TPU_FLOAT, f, 3);
  tpu_tensor *bf = cast(tf, TPU_BFLOAT16), *hf = cast(tf, TPU_HALF);
  const int32_t wantf[3] = {0, INT32_MAX, INT32_MIN};
  tpu_tensor *fi = cast(tf, TPU_INT32), *bi = cast(bf, TPU_INT32), *hi = cast(hf, TPU_INT32);
  assert_memory_equal(data_of(fi), wantf, sizeof wantf);
  assert_memory_equal(data_of(bi), wantf, sizeof wantf);
  assert_memory_equal(data_of(hi), wantf, sizeof wantf); /* 1e20 is inf as half */
  tpu_tensor *all[] = {t, i32, i8, u8, i16, u32, i64, u64, tf, bf, hf, fi, bi, hi};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) CHECK_OK(tpu_tensor_release(all[i]));
}

static void test_tensor__cast(void **state) {
  (void)state;
  const float f[6] = {1.75f, -1.75f, 0.0f, 3.0f, 1.00390625f /* 1 + 2^-8: a bf16 tie */, 65520.0f};
  tpu_tensor *t = vector(TPU_FLOAT, f, 6);

  tpu_tensor *i32 = cast(t, TPU_INT32);
  const int64_t six[1] = {6};
  assert_shape(i32, TPU_INT32, 1, six);
  const int32_t *pi = data_of(i32);
  assert_true(pi[0] == 1 && pi[1] == -1 && pi[2] == 0 && pi[3] == 3); /* truncation */

  tpu_tensor *bf = cast(t, TPU_BFLOAT16);
  const uint16_t *pb = data_of(bf);
  assert_int_equal(pb[0], 0x3FE0);
  assert_int_equal(pb[4], 0x3F80); /* tie to even */
  tpu_tensor *h = cast(t, TPU_HALF);
  const uint16_t *ph = data_of(h);
  assert_int_equal(ph[0], 0x3F00);
  assert_int_equal(ph[5], 0x7C00); /* 65520 overflows half */

  tpu_tensor *back = cast(bf, TPU_FLOAT);
  assert_true(((const float *)data_of(back))[1] == -1.75f);
  tpu_tensor *i8 = cast(i32, TPU_INT8);
  assert_int_equal(((const int8_t *)data_of(i8))[1], -1);
  tpu_tensor *d = cast(i32, TPU_DOUBLE);
  assert_true(((const double *)data_of(d))[3] == 3.0);
  tpu_tensor *same = cast(t, TPU_FLOAT);
  assert_ptr_not_equal(data_of(same), data_of(t));
  assert_memory_equal(data_of(same), f, sizeof f);

  tpu_tensor *r = SENTINEL;
  CHECK_ERROR(tpu_tensor_cast(t, TPU_BOOL, &r), TPU_INVALID_ARGUMENT, "bool");
  CHECK_ERROR(tpu_tensor_cast(t, TPU_COMPLEX64, &r), TPU_INVALID_ARGUMENT, "complex64");
  CHECK_ERROR(tpu_tensor_cast(t, (tpu_dtype)7, &r), TPU_INVALID_ARGUMENT, "dtype");
  assert_ptr_equal(r, SENTINEL);

  const uint8_t b[2] = {0, 1};
  tpu_tensor *bt = vector(TPU_BOOL, b, 2);
  tpu_tensor *bb = cast(bt, TPU_BOOL);
  assert_memory_equal(data_of(bb), b, 2);
  CHECK_ERROR(tpu_tensor_cast(bt, TPU_FLOAT, &r), TPU_INVALID_ARGUMENT, "bool");
  const float c[4] = {1, -2, 3.5f, 4};
  tpu_tensor *ct = vector(TPU_COMPLEX64, c, 2);
  tpu_tensor *cc = cast(ct, TPU_COMPLEX64);
  assert_memory_equal(data_of(cc), c, sizeof c);
  CHECK_ERROR(tpu_tensor_cast(ct, TPU_FLOAT, &r), TPU_INVALID_ARGUMENT, "complex64");
  assert_ptr_equal(r, SENTINEL);

  tpu_tensor *all[] = {t, i32, bf, h, back, i8, d, same, bt, bb, ct, cc};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) CHECK_OK(tpu_tensor_release(all[i]));
}

/* ---- reference counting across threads -------------------------------------------- */

enum { kThreads = 8, kIterations = 100000 };

static void *retain_release_loop(void *arg) {
  tpu_tensor *t = arg;
  for (int i = 0; i < kIterations; ++i) {
    if (tpu_tensor_retain(t) != TPU_OK || tpu_tensor_release(t) != TPU_OK) return arg;
  }
  return NULL;
}

static void count_release(void *data, void *user_data) {
  (void)data;
  __atomic_fetch_add((int *)user_data, 1, __ATOMIC_SEQ_CST);
}

static void test_tensor__refcount_threads(void **state) {
  (void)state;
  static float buf[16];
  int calls = 0;
  const int64_t dims[1] = {16};
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_wrap(TPU_FLOAT, dims, 1, buf, sizeof buf, count_release, &calls, &t));
  pthread_t th[kThreads];
  for (int i = 0; i < kThreads; ++i)
    assert_int_equal(pthread_create(&th[i], NULL, retain_release_loop, t), 0);
  for (int i = 0; i < kThreads; ++i) {
    void *failed = NULL;
    assert_int_equal(pthread_join(th[i], &failed), 0);
    assert_null(failed);
  }
  assert_int_equal(__atomic_load_n(&calls, __ATOMIC_SEQ_CST), 0);
  CHECK_OK(tpu_tensor_release(t));
  assert_int_equal(__atomic_load_n(&calls, __ATOMIC_SEQ_CST), 1);
}

/* ---- copy-on-write ----------------------------------------------------------------- */

static void *mutable_of(tpu_tensor *t) {
  void *p = NULL;
  CHECK_OK(tpu_tensor_mutable_data(t, &p));
  return p;
}

static void test_tensor__mutable_data_unshared(void **state) {
  (void)state;
  const int64_t dims[1] = {4};
  const float src[4] = {1, 2, 3, 4};
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 1, src, sizeof src, &t));
  const void *read = data_of(t);
  float *w = mutable_of(t);
  assert_ptr_equal(w, read); /* no other handle uses the buffer: no copy */
  w[0] = 9;
  assert_true(((const float *)data_of(t))[0] == 9.0f);
  assert_ptr_equal(mutable_of(t), w); /* stable */
  /* A retained handle is still one tensor: its holders see one buffer. */
  CHECK_OK(tpu_tensor_retain(t));
  assert_ptr_equal(mutable_of(t), w);
  CHECK_OK(tpu_tensor_release(t));
  CHECK_OK(tpu_tensor_release(t));
}

static void test_tensor__reshape_copy_on_write(void **state) {
  (void)state;
  const int64_t dims[2] = {2, 3}, flat[1] = {6}, other[2] = {3, 2};
  const int32_t src[6] = {0, 1, 2, 3, 4, 5};
  tpu_tensor *t = NULL, *r = NULL, *r2 = NULL;
  CHECK_OK(tpu_tensor_create(TPU_INT32, dims, 2, src, sizeof src, &t));
  CHECK_OK(tpu_tensor_reshape(t, flat, 1, &r));
  assert_ptr_equal(data_of(r), data_of(t)); /* shared until written */

  /* Writing the view copies it first: the source keeps its values. */
  int32_t *rw = mutable_of(r);
  assert_ptr_not_equal(rw, data_of(t));
  assert_memory_equal(rw, src, sizeof src);
  rw[0] = 100;
  assert_int_equal(((const int32_t *)data_of(t))[0], 0);
  assert_int_equal(((const int32_t *)data_of(r))[0], 100);

  /* The source is alone in its buffer now: written in place. */
  const void *before = data_of(t);
  int32_t *tw = mutable_of(t);
  assert_ptr_equal(tw, before);

  /* A reshape of a tensor whose mutable pointer was taken copies, so that pointer
   * stays private and stable. */
  CHECK_OK(tpu_tensor_reshape(t, other, 2, &r2));
  assert_ptr_not_equal(data_of(r2), tw);
  tw[1] = 7;
  assert_ptr_equal(mutable_of(t), tw);
  assert_int_equal(((const int32_t *)data_of(r2))[1], 1);
  CHECK_OK(tpu_tensor_release(r2));
  CHECK_OK(tpu_tensor_release(t)); /* the view outlives the source */
  assert_int_equal(((const int32_t *)data_of(r))[5], 5);
  CHECK_OK(tpu_tensor_release(r));

  /* The other way round: writing the source leaves the view alone. */
  CHECK_OK(tpu_tensor_create(TPU_INT32, dims, 2, src, sizeof src, &t));
  CHECK_OK(tpu_tensor_reshape(t, flat, 1, &r));
  int32_t *w = mutable_of(t);
  w[3] = -1;
  assert_ptr_not_equal(data_of(r), w);
  assert_int_equal(((const int32_t *)data_of(r))[3], 3);
  CHECK_OK(tpu_tensor_release(r));
  CHECK_OK(tpu_tensor_release(t));
}

static void test_tensor__wrap_mutable(void **state) {
  (void)state;
  const int64_t dims[1] = {4}, cube[2] = {2, 2};
  int32_t buf[4] = {1, 2, 3, 4};
  release_log log = {0, NULL, NULL};
  tpu_tensor *w = NULL, *v = NULL;
  CHECK_OK(tpu_tensor_wrap(TPU_INT32, dims, 1, buf, sizeof buf, log_release, &log, &w));
  assert_ptr_equal(mutable_of(w), buf); /* the caller's buffer: writing it is why one wraps */
  CHECK_OK(tpu_tensor_release(w));
  assert_int_equal(log.calls, 1);

  /* Shared with a view, a wrapped buffer is copied like any other. */
  log.calls = 0;
  CHECK_OK(tpu_tensor_wrap(TPU_INT32, dims, 1, buf, sizeof buf, log_release, &log, &w));
  CHECK_OK(tpu_tensor_reshape(w, cube, 2, &v));
  int32_t *p = mutable_of(w);
  assert_ptr_not_equal(p, buf);
  p[0] = 42;
  assert_int_equal(buf[0], 1);
  assert_ptr_equal(data_of(v), buf);
  CHECK_OK(tpu_tensor_release(v)); /* no handle uses buf any more */
  assert_int_equal(log.calls, 1);
  assert_int_equal(((const int32_t *)data_of(w))[0], 42);
  CHECK_OK(tpu_tensor_release(w));
  assert_int_equal(log.calls, 1);
}

/* tensor.h: copying a shared buffer may run out of memory (TPU_RESOURCE_EXHAUSTED) and
 * leaves the tensor unchanged. In a child capped 32 MiB above what it uses, a 64 MiB
 * buffer shared with a reshape cannot be copied; once alone it is written in place. */
static void test_tensor__mutable_data_out_of_memory_leaves_the_tensor(void **state) {
  (void)state;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    const int64_t dims[1] = {INT64_C(16) << 20}, flat[2] = {INT64_C(4) << 20, 4};
    tpu_tensor *t = NULL, *r = NULL;
    size_t released = 0;
    float *src = calloc((size_t)dims[0], sizeof(float)); /* not mutable_data: t must share */
    if (src == NULL) _exit(5);
    src[7] = 7;
    if (tpu_tensor_create(TPU_FLOAT, dims, 1, src, (size_t)dims[0] * sizeof(float), &t) != TPU_OK) _exit(4);
    free(src);
    if (tpu_tensor_reshape(t, flat, 2, &r) != TPU_OK) _exit(6);
    if (tpu_tensor_cache_trim(0, &released) != TPU_OK) _exit(7); /* no cached block to reuse */
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld", &pages) != 1) _exit(2);
    fclose(f);
    rlim_t cap = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)32 << 20);
    struct rlimit lim = {cap, cap};
    if (setrlimit(RLIMIT_AS, &lim) != 0) _exit(3);
    const void *before = NULL, *after = NULL;
    void *p = SENTINEL;
    if (tpu_tensor_data(r, &before) != TPU_OK) _exit(8);
    if (tpu_tensor_mutable_data(r, &p) != TPU_RESOURCE_EXHAUSTED || p != SENTINEL) _exit(1);
    if (tpu_tensor_data(r, &after) != TPU_OK || after != before || ((const float *)after)[7] != 7) _exit(9);
    if (tpu_tensor_release(t) != TPU_OK) _exit(10);
    /* Alone in its buffer now: no copy is needed. */
    _exit(tpu_tensor_mutable_data(r, &p) == TPU_OK && p == before ? 0 : 11);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- shared collective results -------------------------------------------------- */

enum { kCowReplicas = 4, kCowCount = 4096, kCowRounds = 40 }; /* 16 KiB: above inline size */

TEST_SYSTEM_FIXTURE

static void start_system(int private_results) {
  tpu_system_options opts = TPU_SYSTEM_OPTIONS_INIT;
  opts.num_cores = kCowReplicas;
  opts.private_collective_results = private_results;
  release_system(NULL);
  CHECK_OK(tpu_system_init(&opts, &g_sys));
}

static float cow_input(int replica, int64_t i) { return (float)(replica * 1000 + i % 997); }

static tpu_status cow_make_input(int replica, const int64_t *dims, int rank, tpu_tensor **out) {
  int64_t n = 1;
  for (int a = 0; a < rank; ++a) n *= dims[a];
  tpu_status st = tpu_tensor_create(TPU_FLOAT, dims, rank, NULL, 0, out);
  void *p = NULL;
  if (st == TPU_OK) st = tpu_tensor_mutable_data(*out, &p);
  for (int64_t i = 0; st == TPU_OK && i < n; ++i) ((float *)p)[i] = cow_input(replica, i);
  return st;
}

/* What the replicas record; the test asserts on its own thread after the step. */
typedef struct cow_run {
  const void *shared[kCowReplicas];  /* tpu_tensor_data of each replica's result */
  void *written[kCowReplicas];       /* writers: their mutable pointer */
  const void *last[kCowReplicas];    /* replica 0: mutable pointer once alone */
  long wrong[kCowReplicas];          /* elements that were not what they should be */
} cow_run;

static int replica_of(tpu_replica_context *ctx) {
  int k = -1;
  tpu_replica_context_replica_id(ctx, &k);
  return k;
}

/* Even replicas read the shared sum over and over while odd ones write their own copy
 * through tpu_tensor_mutable_data: readers never see a write, writers see only theirs. */
static tpu_status cow_readers_and_writers(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                          tpu_tensor **out, int no, void *user) {
  cow_run *run = user;
  const int k = replica_of(ctx);
  const int64_t dims[1] = {kCowCount};
  tpu_tensor *x = NULL, *y = NULL;
  tpu_status st = cow_make_input(k, dims, 1, &x);
  if (st == TPU_OK) st = tpu_cross_replica_sum(ctx, x, NULL, &y, NULL);
  const void *shared = NULL;
  if (st == TPU_OK) st = tpu_tensor_data(y, &shared);
  run->shared[k] = shared;
  if (st == TPU_OK) st = tpu_barrier(ctx, NULL); /* every replica holds its result */
  for (int round = 0; st == TPU_OK && round < kCowRounds; ++round) {
    if (k % 2 == 0) {
      for (int64_t i = 0; i < kCowCount; ++i) {
        float want = 0;
        for (int r = 0; r < kCowReplicas; ++r) want += cow_input(r, i);
        run->wrong[k] += ((const float *)shared)[i] != want;
      }
    } else {
      void *p = NULL;
      st = tpu_tensor_mutable_data(y, &p);
      if (round > 0 && p != run->written[k]) run->wrong[k]++; /* the pointer is stable */
      run->written[k] = p;
      float *f = p;
      for (int64_t i = 0; i < kCowCount; ++i) f[i] = (float)(-k - round);
      for (int64_t i = 0; i < kCowCount; ++i) run->wrong[k] += f[i] != (float)(-k - round);
    }
  }
  /* Once the writers have their copies and replica 2 let go, replica 0 is the buffer's
   * only user: it writes in place. */
  if (st == TPU_OK) st = tpu_barrier(ctx, NULL);
  if (st == TPU_OK && k == 2) st = tpu_tensor_release(y), y = NULL;
  if (st == TPU_OK) st = tpu_barrier(ctx, NULL);
  if (st == TPU_OK && k == 0) {
    void *p = NULL;
    st = tpu_tensor_mutable_data(y, &p);
    run->last[k] = p;
  }
  tpu_tensor_release(y);
  tpu_tensor_release(x);
  return st;
}

static void test_tensor__cow_readers_and_writers(void **state) {
  (void)state;
  start_system(0);
  cow_run run;
  memset(&run, 0, sizeof run);
  CHECK_OK(tpu_replicate(g_sys, cow_readers_and_writers, &run, kCowReplicas, 0, NULL, 0, NULL, NULL));
  for (int k = 0; k < kCowReplicas; ++k) {
    assert_int_equal(run.wrong[k], 0);
    assert_ptr_equal(run.shared[k], run.shared[0]); /* one buffer for the group */
  }
  assert_non_null(run.written[1]);
  assert_ptr_not_equal(run.written[1], run.shared[0]);
  assert_ptr_not_equal(run.written[3], run.shared[0]);
  assert_ptr_not_equal(run.written[1], run.written[3]);
  assert_ptr_equal(run.last[0], run.shared[0]);
}

/* Groups {0, 1} and {2, 3}: all-reduce, all-gather along each axis and broadcast.
 * Records each result's buffer and counts wrong elements. */
enum { kGroupRows = 1024, kGroupCols = 80, kGroupOps = 4 }; /* 320 KiB inputs */

typedef struct group_run {
  const void *data[kGroupOps][kCowReplicas];
  long wrong[kCowReplicas];
} group_run;

static float group_expected(int op, int k, int64_t r, int64_t c) {
  const int first = k / 2 * 2;
  switch (op) {
    case 0: return cow_input(first, r * kGroupCols + c) + cow_input(first + 1, r * kGroupCols + c);
    case 1: return cow_input(first + (int)(r / kGroupRows), r % kGroupRows * kGroupCols + c);
    case 2: return cow_input(first + (int)(c / kGroupCols), r * kGroupCols + c % kGroupCols);
    default: return cow_input(first + 1, r * kGroupCols + c);
  }
}

static tpu_status group_results(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                tpu_tensor **out, int no, void *user) {
  group_run *run = user;
  const int k = replica_of(ctx);
  const int64_t dims[2] = {kGroupRows, kGroupCols};
  static const int32_t ids[4] = {0, 1, 2, 3};
  const tpu_group_assignment groups = {ids, 2, 2};
  tpu_tensor *x = NULL, *y[kGroupOps] = {NULL};
  tpu_status st = cow_make_input(k, dims, 2, &x);
  if (st == TPU_OK) st = tpu_cross_replica_sum(ctx, x, &groups, &y[0], NULL);
  if (st == TPU_OK) st = tpu_all_gather(ctx, x, 0, &groups, &y[1], NULL);
  if (st == TPU_OK) st = tpu_all_gather(ctx, x, 1, &groups, &y[2], NULL);
  if (st == TPU_OK) st = tpu_broadcast(ctx, x, 1, &groups, &y[3], NULL);
  for (int op = 0; st == TPU_OK && op < kGroupOps; ++op) {
    int64_t shape[2];
    const void *p = NULL;
    st = tpu_tensor_dims(y[op], shape, 2, &(size_t){0});
    if (st == TPU_OK) st = tpu_tensor_data(y[op], &p);
    run->data[op][k] = p;
    for (int64_t r = 0; st == TPU_OK && r < shape[0]; ++r)
      for (int64_t c = 0; c < shape[1]; ++c)
        run->wrong[k] += ((const float *)p)[r * shape[1] + c] != group_expected(op, k, r, c);
  }
  /* Every result stays alive until all are recorded: distinct buffers have distinct
   * addresses. */
  if (st == TPU_OK) st = tpu_barrier(ctx, NULL);
  for (int op = 0; op < kGroupOps; ++op) tpu_tensor_release(y[op]);
  tpu_tensor_release(x);
  return st;
}

static void test_tensor__group_results_shared(void **state) {
  (void)state;
  start_system(0);
  group_run run;
  memset(&run, 0, sizeof run);
  CHECK_OK(tpu_replicate(g_sys, group_results, &run, kCowReplicas, 0, NULL, 0, NULL, NULL));
  for (int k = 0; k < kCowReplicas; ++k) assert_int_equal(run.wrong[k], 0);
  for (int op = 0; op < kGroupOps; ++op) {
    assert_ptr_equal(run.data[op][0], run.data[op][1]);
    assert_ptr_equal(run.data[op][2], run.data[op][3]);
    assert_ptr_not_equal(run.data[op][0], run.data[op][2]);
  }
}

static void test_tensor__group_results_private(void **state) {
  (void)state;
  start_system(1);
  group_run run;
  memset(&run, 0, sizeof run);
  CHECK_OK(tpu_replicate(g_sys, group_results, &run, kCowReplicas, 0, NULL, 0, NULL, NULL));
  for (int k = 0; k < kCowReplicas; ++k) assert_int_equal(run.wrong[k], 0);
  for (int op = 0; op < kGroupOps; ++op)
    for (int a = 0; a < kCowReplicas; ++a)
      for (int b = a + 1; b < kCowReplicas; ++b) assert_ptr_not_equal(run.data[op][a], run.data[op][b]);
}

/* A piece of a sharded input whose rows start 64-byte aligned shares the input's
 * buffer; a write through it copies first, so the caller's input keeps its values. */
typedef struct {
  const void *piece[kCowReplicas], *written[kCowReplicas];
} piece_run;

static tpu_status write_piece(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                              tpu_tensor **out, int no, void *user) {
  piece_run *run = user;
  const int k = replica_of(ctx);
  void *w = NULL;
  tpu_status st = tpu_tensor_data(in[0], &run->piece[k]);
  if (st == TPU_OK) st = tpu_tensor_mutable_data(in[0], &w);
  if (st == TPU_OK) ((float *)w)[0] = -1;
  run->written[k] = w;
  return st;
}

static void test_tensor__sharded_input_pieces_share_the_buffer(void **state) {
  (void)state;
  start_system(0);
  const int64_t dims[2] = {kCowReplicas, 16}; /* rows of 64 bytes */
  float v[kCowReplicas * 16];
  for (int i = 0; i < kCowReplicas * 16; ++i) v[i] = cow_input(0, i);
  tpu_tensor *x = NULL; /* created from data: a handle written through would not share */
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 2, v, sizeof v, &x));
  const float *base = data_of(x);
  piece_run run;
  memset(&run, 0, sizeof run);
  CHECK_OK(tpu_batch_parallel(g_sys, write_piece, &run, 1, &x, kCowReplicas, 0, NULL, NULL));
  for (int k = 0; k < kCowReplicas; ++k) {
    assert_ptr_equal(run.piece[k], base + 16 * k);
    assert_ptr_not_equal(run.written[k], run.piece[k]);
  }
  assert_memory_equal(base, v, sizeof v);
  CHECK_OK(tpu_tensor_release(x));
}

/* ---- bfloat16 ---------------------------------------------------------------------- */

/* Reference: keep the high 16 bits, rounding on the low 16 to nearest, ties to even.
 * A carry out of the mantissa correctly bumps the exponent (and gives inf). */
static uint16_t ref_float_to_bf16(uint32_t u) {
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16 & 0x8000u) | 0x7FC0u);
  uint32_t hi = u >> 16, lo = u & 0xFFFFu;
  if (lo > 0x8000u || (lo == 0x8000u && (hi & 1u))) hi++;
  return (uint16_t)hi;
}

static uint16_t bf16(float f) {
  uint16_t h = 0;
  CHECK_OK(tpu_float_to_bfloat16(&f, &h, 1));
  return h;
}

static void test_tensor__bf16_round_trip_all(void **state) {
  (void)state;
  static uint16_t in[65536], back[65536];
  static float f[65536];
  for (uint32_t i = 0; i < 65536; ++i) in[i] = (uint16_t)i;
  CHECK_OK(tpu_bfloat16_to_float(in, f, 65536));
  CHECK_OK(tpu_float_to_bfloat16(f, back, 65536));
  for (uint32_t i = 0; i < 65536; ++i) {
    if (f2u(f[i]) != i << 16) fail_msg("bf16 %04x -> float %08x", i, f2u(f[i]));
    int nan = (i & 0x7F80u) == 0x7F80u && (i & 0x7Fu) != 0;
    uint16_t want = nan ? (uint16_t)((i & 0x8000u) | 0x7FC0u) : (uint16_t)i;
    if (back[i] != want) fail_msg("bf16 %04x -> float -> %04x, want %04x", i, back[i], want);
  }
}

enum { kChunk = 1 << 16, kStride = 97 };

static void test_tensor__bf16_stride(void **state) {
  (void)state;
  static float in[kChunk];
  static uint16_t out[kChunk];
  uint64_t u = 0;
  while (u < (UINT64_C(1) << 32)) {
    size_t n = 0;
    for (; n < kChunk && u < (UINT64_C(1) << 32); ++n, u += kStride) in[n] = u2f((uint32_t)u);
    CHECK_OK(tpu_float_to_bfloat16(in, out, n));
    for (size_t i = 0; i < n; ++i) {
      uint16_t want = ref_float_to_bf16(f2u(in[i]));
      if (out[i] != want) fail_msg("float %08x -> bf16 %04x, want %04x", f2u(in[i]), out[i], want);
    }
  }
}

/* Every bf16 midpoint is a tie that goes to the even neighbour; one ulp either side
 * goes to the nearer one. Covers the carry into the exponent and the overflow. */
static void test_tensor__bf16_ties(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    if ((h & 0x7F80u) == 0x7F80u) continue; /* inf / NaN */
    uint32_t mid = h << 16 | 0x8000u;
    uint16_t even = (h & 1u) ? (uint16_t)(h + 1) : (uint16_t)h;
    assert_int_equal(bf16(u2f(mid)), even);
    assert_int_equal(bf16(u2f(mid - 1)), h);
    assert_int_equal(bf16(u2f(mid + 1)), h + 1);
  }
}

static void test_tensor__bf16_specials(void **state) {
  (void)state;
  assert_int_equal(bf16(u2f(0x3F808000u)), 0x3F80);
  assert_int_equal(bf16(u2f(0x3F818000u)), 0x3F82);
  assert_int_equal(bf16(u2f(0x3F808001u)), 0x3F81);
  assert_int_equal(bf16(1.0f), 0x3F80);
  assert_int_equal(bf16(-2.0f), 0xC000);
  /* overflow */
  assert_int_equal(bf16(u2f(0x7F7FFFFFu)), 0x7F80);  /* FLT_MAX -> +inf */
  assert_int_equal(bf16(u2f(0xFF7FFFFFu)), 0xFF80);
  assert_int_equal(bf16(u2f(0x7F7F7FFFu)), 0x7F7F);  /* just below the midpoint */
  assert_int_equal(bf16(INFINITY), 0x7F80);
  assert_int_equal(bf16(-INFINITY), 0xFF80);
  /* zeros and subnormals */
  assert_int_equal(bf16(0.0f), 0x0000);
  assert_int_equal(bf16(-0.0f), 0x8000);
  assert_int_equal(bf16(u2f(0x00000001u)), 0x0000);
  assert_int_equal(bf16(u2f(0x80000001u)), 0x8000);
  assert_int_equal(bf16(u2f(0x00008000u)), 0x0000); /* tie, even */
  assert_int_equal(bf16(u2f(0x00018000u)), 0x0002); /* tie, even */
  assert_int_equal(bf16(u2f(0x00010000u)), 0x0001);
  assert_int_equal(bf16(u2f(0x007FFFFFu)), 0x0080); /* largest subnormal rounds to min normal */
  /* NaN: quiet, sign kept, payload dropped */
  assert_int_equal(bf16(NAN), 0x7FC0);
  assert_int_equal(bf16(-NAN), 0xFFC0);
  assert_int_equal(bf16(u2f(0x7F800001u)), 0x7FC0); /* signalling NaN must not become inf */
  assert_int_equal(bf16(u2f(0xFF800001u)), 0xFFC0);
  assert_int_equal(bf16(u2f(0x7FFFFFFFu)), 0x7FC0);
  assert_int_equal(bf16(u2f(0x7FA12345u)), 0x7FC0);
}

/* ---- half -------------------------------------------------------------------------- */

/* Reference by double arithmetic: scale to units of the destination ulp and let
 * rint() (round to nearest even, the default mode) do the rounding. */
static uint16_t ref_float_to_half(float f) {
  uint16_t sign = signbit(f) ? 0x8000u : 0;
  if (isnan(f)) return sign | 0x7E00u;
  double x = fabs((double)f);
  if (x < 0x1p-14) return sign | (uint16_t)rint(ldexp(x, 24)); /* 1024 = min normal */
  int e;
  frexp(x, &e);                        /* x in [2^(e-1), 2^e) */
  e -= 1;                              /* x in [2^e, 2^(e+1)) */
  double m = rint(ldexp(x, 10 - e)); /* in [1024, 2048] */
  if (m == 2048) {
    m = 1024;
    e++;
  }
  if (e > 15) return sign | 0x7C00u;
  return sign | (uint16_t)((e + 15) << 10 | ((int)m - 1024));
}

/* The exact value of a half bit pattern (inf reads as 2^16 for midpoints). */
static double half_value(uint32_t h) {
  uint32_t exp = h >> 10 & 0x1Fu, man = h & 0x3FFu;
  double v = exp == 0 ? ldexp(man, -24) : ldexp(1024 + man, (int)exp - 25);
  return (h & 0x8000u) ? -v : v;
}

static uint16_t half(float f) {
  uint16_t h = 0;
  CHECK_OK(tpu_float_to_half(&f, &h, 1));
  return h;
}

static void test_tensor__half_round_trip_all(void **state) {
  (void)state;
  static uint16_t in[65536], back[65536];
  static float f[65536];
  for (uint32_t i = 0; i < 65536; ++i) in[i] = (uint16_t)i;
  CHECK_OK(tpu_half_to_float(in, f, 65536));
  CHECK_OK(tpu_float_to_half(f, back, 65536));
  for (uint32_t i = 0; i < 65536; ++i) {
    int special = (i & 0x7C00u) == 0x7C00u;
    int nan = special && (i & 0x3FFu) != 0;
    if (nan) {
      if (!isnan(f[i]) || !signbit(f[i]) != !(i & 0x8000u))
        fail_msg("half %04x -> float %08x, want a NaN of the same sign", i, f2u(f[i]));
    } else if (special) {
      if (f[i] != ((i & 0x8000u) ? -INFINITY : INFINITY)) fail_msg("half %04x is not inf", i);
    } else if ((double)f[i] != half_value(i) || !signbit(f[i]) != !signbit(half_value(i))) {
      fail_msg("half %04x -> float %08x, want %.17g", i, f2u(f[i]), half_value(i));
    }
    uint16_t want = nan ? (uint16_t)((i & 0x8000u) | 0x7E00u) : (uint16_t)i;
    if (back[i] != want) fail_msg("half %04x -> float -> %04x, want %04x", i, back[i], want);
  }
}

static void test_tensor__half_stride(void **state) {
  (void)state;
  static float in[kChunk];
  static uint16_t out[kChunk];
  uint64_t u = 0;
  while (u < (UINT64_C(1) << 32)) {
    size_t n = 0;
    for (; n < kChunk && u < (UINT64_C(1) << 32); ++n, u += kStride) in[n] = u2f((uint32_t)u);
    CHECK_OK(tpu_float_to_half(in, out, n));
    for (size_t i = 0; i < n; ++i) {
      uint16_t want = ref_float_to_half(in[i]);
      if (out[i] != want) fail_msg("float %08x -> half %04x, want %04x", f2u(in[i]), out[i], want);
    }
  }
}

/* Every midpoint between neighbouring halves (exact in float), normal and subnormal,
 * goes to the even one; one float ulp either side goes to the nearer one. */
static void test_tensor__half_ties(void **state) {
  (void)state;
  for (uint32_t s = 0; s <= 0x8000u; s += 0x8000u) {
    for (uint32_t h = s; h < (s | 0x7C00u); ++h) {
      float mid = (float)((half_value(h) + half_value(h + 1)) / 2);
      assert_true((double)mid == (half_value(h) + half_value(h + 1)) / 2);
      uint16_t even = (h & 1u) ? (uint16_t)(h + 1) : (uint16_t)h;
      assert_int_equal(half(mid), even);
      uint32_t m = f2u(mid); /* in magnitude order for either sign */
      assert_int_equal(half(u2f(m - 1)), h);
      assert_int_equal(half(u2f(m + 1)), h + 1);
    }
  }
}

static void test_tensor__half_specials(void **state) {
  (void)state;
  assert_int_equal(half(1.0f), 0x3C00);
  assert_int_equal(half(-2.0f), 0xC000);
  assert_int_equal(half(65504.0f), 0x7BFF);
  assert_int_equal(half(65519.0f), 0x7BFF);
  assert_int_equal(half(65520.0f), 0x7C00);
  assert_int_equal(half(-65520.0f), 0xFC00);
  assert_int_equal(half(1e10f), 0x7C00);
  assert_int_equal(half(u2f(0x7F7FFFFFu)), 0x7C00);
  assert_int_equal(half(INFINITY), 0x7C00);
  assert_int_equal(half(-INFINITY), 0xFC00);
  assert_int_equal(half(0.0f), 0x0000);
  assert_int_equal(half(-0.0f), 0x8000);
  /* subnormals: 2^-24 is the smallest */
  assert_int_equal(half(0x1p-24f), 0x0001);
  assert_int_equal(half(0x1p-25f), 0x0000);      /* tie, even */
  assert_int_equal(half(0x1.8p-24f), 0x0002);    /* tie, even */
  assert_int_equal(half(0x1.000002p-25f), 0x0001);
  assert_int_equal(half(-0x1p-24f), 0x8001);
  assert_int_equal(half(0x1p-14f), 0x0400);      /* smallest normal */
  assert_int_equal(half(0x1.ff8p-15f), 0x03FF);  /* largest subnormal */
  assert_int_equal(half(0x1.ffcp-15f), 0x0400);  /* tie between it and min normal: even */
  assert_int_equal(half(u2f(0x00000001u)), 0x0000);
  assert_int_equal(half(u2f(0x80000001u)), 0x8000);
  /* NaN: quiet, sign kept */
  assert_int_equal(half(NAN), 0x7E00);
  assert_int_equal(half(-NAN), 0xFE00);
  assert_int_equal(half(u2f(0x7F800001u)), 0x7E00);
  assert_int_equal(half(u2f(0xFF800001u)), 0xFE00);
  assert_int_equal(half(u2f(0x7FFFFFFFu)), 0x7E00);
}

/* ---- conversion arguments ------------------------------------------------------------ */

static void test_tensor__conversion_args(void **state) {
  (void)state;
  float f[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint16_t h[8] = {0};
  /* count 0: pointers may be NULL */
  CHECK_OK(tpu_float_to_bfloat16(NULL, NULL, 0));
  CHECK_OK(tpu_bfloat16_to_float(NULL, NULL, 0));
  CHECK_OK(tpu_float_to_half(NULL, NULL, 0));
  CHECK_OK(tpu_half_to_float(NULL, NULL, 0));
  CHECK_OK(tpu_float_to_half(f, h, 0));

  CHECK_ERROR(tpu_float_to_bfloat16(NULL, h, 1), TPU_INVALID_ARGUMENT, "'in'");
  CHECK_ERROR(tpu_float_to_bfloat16(f, NULL, 1), TPU_INVALID_ARGUMENT, "'out'");
  CHECK_ERROR(tpu_half_to_float(NULL, f, 1), TPU_INVALID_ARGUMENT, "'in'");
  CHECK_ERROR(tpu_half_to_float(h, NULL, 1), TPU_INVALID_ARGUMENT, "'out'");

  /* Overlap is rejected, and nothing is written. */
  union {
    float f[8];
    uint16_t h[16];
  } u;
  memcpy(u.f, f, sizeof f);
  CHECK_ERROR(tpu_float_to_bfloat16(u.f, u.h, 8), TPU_INVALID_ARGUMENT, "overlap");
  CHECK_ERROR(tpu_float_to_half(u.f + 7, u.h + 15, 1), TPU_INVALID_ARGUMENT, "overlap");
  CHECK_ERROR(tpu_float_to_half(u.f + 1, u.h, 4), TPU_INVALID_ARGUMENT, "overlap");
  CHECK_ERROR(tpu_bfloat16_to_float(u.h + 2, u.f, 4), TPU_INVALID_ARGUMENT, "overlap");
  CHECK_ERROR(tpu_half_to_float(u.h + 14, u.f + 7, 1), TPU_INVALID_ARGUMENT, "overlap");
  /* A count whose byte size does not fit in size_t is refused, not wrapped. */
  CHECK_ERROR(tpu_float_to_bfloat16(u.f, u.h, SIZE_MAX / 4 + 2), TPU_INVALID_ARGUMENT,
               "the size of 'in' (count");
  assert_memory_equal(u.f, f, sizeof f);
  /* Adjacent is not overlapping: in = u.f[0..4) is bytes [0,16), out = bytes [16,24). */
  CHECK_OK(tpu_float_to_half(u.f, u.h + 8, 4));
  assert_int_equal(u.h[8], 0x3C00);
  CHECK_OK(tpu_half_to_float(u.h + 8, u.f, 4));
  assert_true(u.f[3] == 4.0f);
}

/* ---- the tensor block cache ---------------------------------------------------- */

/* Creates and releases `count` zero-filled float tensors of `bytes` each, all alive
 * at once, as the replicas' outputs of one collective are. */
static void create_and_release(int count, size_t bytes) {
  tpu_tensor *t[8];
  int64_t dims[1] = {(int64_t)(bytes / sizeof(float))};
  assert_true(count <= 8);
  for (int i = 0; i < count; i++) CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 1, NULL, 0, &t[i]));
  for (int i = 0; i < count; i++) CHECK_OK(tpu_tensor_release(t[i]));
}

static void test_tensor__cache_trim(void **state) {
  (void)state;
  const size_t mib = 1 << 20;
  size_t released = 0, rest = 0;
  CHECK_OK(tpu_tensor_cache_trim(0, &released)); /* start empty */
  CHECK_OK(tpu_tensor_cache_trim(0, &released));
  assert_int_equal(released, 0);

  /* Under 256 KiB a buffer is not kept here (malloc's own lists serve it). */
  create_and_release(4, (size_t)128 << 10);
  CHECK_OK(tpu_tensor_cache_trim(0, &released));
  assert_int_equal(released, 0);

  create_and_release(2, mib);
  create_and_release(1, 4 * mib);
  /* Nothing beyond keep_bytes is cached: nothing is released. */
  CHECK_OK(tpu_tensor_cache_trim((size_t)1 << 40, &released));
  assert_int_equal(released, 0);
  /* Largest first: keeping 3 MiB releases the 4 MiB buffer and keeps both 1 MiB ones. */
  CHECK_OK(tpu_tensor_cache_trim(3 * mib, &released));
  assert_true(released >= 4 * mib && released < 6 * mib);
  CHECK_OK(tpu_tensor_cache_trim(0, &rest));
  assert_true(rest >= 2 * mib && rest <= 3 * mib);
  CHECK_OK(tpu_tensor_cache_trim(0, &released));
  assert_int_equal(released, 0);

  CHECK_ERROR(tpu_tensor_cache_trim(0, NULL), TPU_INVALID_ARGUMENT, "'released'");
}

static long minor_faults(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

/* The default cache holds the steady state of the benchmarks' 8-replica 16 MiB
 * all-reduce (8 outputs alive, then released, every call): the second round of
 * buffers comes from the cache and touches no new page. */
static void test_tensor__cache_default_holds_16mib_x8(void **state) {
  (void)state;
  size_t released;
  if (getenv("TPURT_TENSOR_CACHE_MB")) skip(); /* the default is what is tested */
  create_and_release(8, (size_t)16 << 20);
  long before = minor_faults();
  create_and_release(8, (size_t)16 << 20);
  long faults = minor_faults() - before;
  /* Fresh buffers would fault at least once per 2 MiB huge page: 64 times. */
  assert_true(faults < 8);
  CHECK_OK(tpu_tensor_cache_trim(0, &released));
  assert_true(released >= (size_t)128 << 20);
}

/* Beyond the resident limit (256 MiB by default) freed buffers are kept lazily: a
 * 256 MiB all-reduce's outputs (320 MiB blocks, one per replica with private results)
 * come back from the cache and touch no new page. */
static void test_tensor__cache_keeps_blocks_beyond_the_limit(void **state) {
  (void)state;
  size_t released;
  if (getenv("TPURT_TENSOR_CACHE_MB")) skip(); /* the default is what is tested */
  CHECK_OK(tpu_tensor_cache_trim(0, &released));
  create_and_release(2, (size_t)200 << 20); /* 400 MiB: more than the limit */
  long before = minor_faults();
  create_and_release(2, (size_t)200 << 20);
  long faults = minor_faults() - before;
  /* Fresh buffers would fault at least once per 2 MiB huge page: 200 times. */
  assert_true(faults < 8);
  CHECK_OK(tpu_tensor_cache_trim(0, &released));
  assert_true(released >= (size_t)400 << 20);
  CHECK_OK(tpu_tensor_cache_trim(0, &released));
  assert_int_equal(released, 0);
}

/* tensor.h's bound, with TPURT_TENSOR_CACHE_MB=4: freed buffers stay cached up to 4 MiB
 * resident, then up to a quarter of the memory and at most 256 buffers lazily, the
 * oldest given back first; tpu_tensor_cache_trim gives back both kinds, so more than
 * the 4 MiB. The variable is read by the process's first freed buffer (each case runs
 * in a process of its own, tests/run_tests.sh). */
static void test_tensor__cache_bound_with_a_small_limit(void **state) {
  (void)state;
  enum { kCount = 300 };
  const size_t mib = (size_t)1 << 20;
  size_t released = 0, block = 0;
  if (getenv("TPURT_TENSOR_CACHE_MB")) skip(); /* the case sets it */
  setenv("TPURT_TENSOR_CACHE_MB", "4", 1);
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const size_t quarter = (size_t)pages * (size_t)page / 4;
  CHECK_OK(tpu_tensor_cache_trim(0, &released));
  /* One buffer's block (its size class, with the tensor's header). */
  create_and_release(1, (size_t)256 << 10);
  CHECK_OK(tpu_tensor_cache_trim(0, &block));
  assert_true(block >= (size_t)256 << 10 && block < (size_t)512 << 10);
  if ((size_t)256 * block > quarter) skip(); /* a machine with under 128 MiB */

  tpu_tensor **t = calloc(kCount, sizeof *t);
  assert_non_null(t);
  int64_t dims[1] = {(int64_t)(((size_t)256 << 10) / sizeof(float))};
  for (int i = 0; i < kCount; i++) CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 1, NULL, 0, &t[i]));
  for (int i = 0; i < kCount; i++) CHECK_OK(tpu_tensor_release(t[i]));
  free(t);
  const size_t resident = 4 * mib / block * block;
  CHECK_OK(tpu_tensor_cache_trim(0, &released));
  if (released != resident + 256 * block)
    CHECK_FAIL("released %zu bytes; expected %zu resident (4 MiB) + 256 lazy blocks of %zu", released,
               resident, block);
  assert_true(released > 4 * mib && released <= 4 * mib + quarter);
  CHECK_OK(tpu_tensor_cache_trim(0, &released));
  assert_int_equal(released, 0);
  unsetenv("TPURT_TENSOR_CACHE_MB");
}

/* TPURT_TENSOR_CACHE_MB=0 keeps nothing, resident or lazy. */
static void test_tensor__cache_off_keeps_nothing(void **state) {
  (void)state;
  size_t released = 1;
  if (getenv("TPURT_TENSOR_CACHE_MB")) skip(); /* the case sets it */
  setenv("TPURT_TENSOR_CACHE_MB", "0", 1);
  create_and_release(4, (size_t)2 << 20);
  CHECK_OK(tpu_tensor_cache_trim(0, &released));
  assert_int_equal(released, 0);
  unsetenv("TPURT_TENSOR_CACHE_MB");
}

/* TPURT_TENSOR_CACHE_MB is read once, by the first freed buffer: a bad value cannot
 * be reported there, so tpu_system_init rejects it, naming the variable and value. */
static void test_tensor__cache_env_rejected_at_init(void **state) {
  (void)state;
  const char *bad[] = {"12abc", "-1", " 5", "1048577", "99999999999999999999"};
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  tpu_system *system = NULL;
  int64_t value = 0;
  const char *name = NULL;
  char want[64];
  if (getenv("TPURT_TENSOR_CACHE_MB")) skip(); /* the default is checked below */
  o.num_cores = 1;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("TPURT_TENSOR_CACHE_MB", bad[i], 1);
    snprintf(want, sizeof want, "TPURT_TENSOR_CACHE_MB='%s'", bad[i]);
    CHECK_ERROR(tpu_system_init(&o, &system), TPU_INVALID_ARGUMENT, want);
    assert_null(system);
    CHECK_ERROR(tpu_environment_variable(2, &name, &value), TPU_INVALID_ARGUMENT, want);
  }
  unsetenv("TPURT_TENSOR_CACHE_MB");
  CHECK_OK(tpu_system_init(&o, &system));
  CHECK_OK(tpu_system_release(system));

  /* Every variable by index, with its effective value; the cache's is the default. */
  const char *names[] = {"TPURT_NUM_CORES", "TPURT_YIELD_NS", "TPURT_TENSOR_CACHE_MB",
                         "TPURT_INIT_TIMEOUT_MS", "TPURT_HEARTBEAT_INTERVAL_MS",
                         "TPURT_HEARTBEAT_TIMEOUT_MS", "TPURT_SHUTDOWN_BARRIER_TIMEOUT_MS",
                         "TPURT_SHM_RING_BYTES"};
  /* The ring size's 0: chosen by the cluster's size. */
  const int64_t defaults[] = {-1, -1, 256, 300000, 1000, 10000, 60000, 0};
  for (int i = 0; i < 8; i++) {
    CHECK_OK(tpu_environment_variable(i, &name, &value));
    assert_string_equal(name, names[i]);
    assert_true(value >= 1 || ((i == 1 || i == 7) && value == 0));
    if (defaults[i] >= 0 && !getenv(names[i])) assert_int_equal(value, defaults[i]);
  }
  CHECK_ERROR(tpu_environment_variable(8, &name, &value), TPU_OUT_OF_RANGE, "index 8");
  /* Sizes of rings are powers of two, within bounds. */
  const char *bad_rings[] = {"5000", "2048", "134217728", "0x1000"};
  for (size_t i = 0; i < sizeof bad_rings / sizeof bad_rings[0]; i++) {
    setenv("TPURT_SHM_RING_BYTES", bad_rings[i], 1);
    CHECK_ERROR(tpu_environment_variable(7, &name, &value), TPU_INVALID_ARGUMENT, "power of two");
  }
  setenv("TPURT_SHM_RING_BYTES", "65536", 1);
  CHECK_OK(tpu_environment_variable(7, &name, &value));
  assert_int_equal(value, 65536);
  unsetenv("TPURT_SHM_RING_BYTES");
  CHECK_ERROR(tpu_environment_variable(-1, &name, &value), TPU_OUT_OF_RANGE, "index -1");
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tensor__create_copies),
      cmocka_unit_test(test_tensor__create_zero_filled),
      cmocka_unit_test(test_tensor__scalar),
      cmocka_unit_test(test_tensor__zero_size),
      cmocka_unit_test(test_tensor__dims_and_dim),
      cmocka_unit_test(test_tensor__bad_shapes),
      cmocka_unit_test(test_tensor__data_bytes_mismatch),
      cmocka_unit_test(test_tensor__out_of_memory),
      cmocka_unit_test(test_tensor__out_of_memory_under_rlimit),
      cmocka_unit_test(test_tensor__cached_buffers_yield_to_a_new_one),
      cmocka_unit_test(test_tensor__wrap_borrows),
      cmocka_unit_test(test_tensor__wrap_views_release_order),
      cmocka_unit_test(test_tensor__reshape),
      cmocka_unit_test(test_tensor__cast),
      cmocka_unit_test(test_tensor__cast_saturates),
      cmocka_unit_test(test_tensor__refcount_threads),
      cmocka_unit_test(test_tensor__mutable_data_unshared),
      cmocka_unit_test(test_tensor__reshape_copy_on_write),
      cmocka_unit_test(test_tensor__wrap_mutable),
      cmocka_unit_test(test_tensor__mutable_data_out_of_memory_leaves_the_tensor),
      cmocka_unit_test_teardown(test_tensor__cow_readers_and_writers, release_system),
      cmocka_unit_test_teardown(test_tensor__group_results_shared, release_system),
      cmocka_unit_test_teardown(test_tensor__group_results_private, release_system),
      cmocka_unit_test_teardown(test_tensor__sharded_input_pieces_share_the_buffer, release_system),
      cmocka_unit_test(test_tensor__bf16_round_trip_all),
      cmocka_unit_test(test_tensor__bf16_stride),
      cmocka_unit_test(test_tensor__bf16_ties),
      cmocka_unit_test(test_tensor__bf16_specials),
      cmocka_unit_test(test_tensor__half_round_trip_all),
      cmocka_unit_test(test_tensor__half_stride),
      cmocka_unit_test(test_tensor__half_ties),
      cmocka_unit_test(test_tensor__half_specials),
      cmocka_unit_test(test_tensor__conversion_args),
      cmocka_unit_test(test_tensor__cache_trim),
      cmocka_unit_test(test_tensor__cache_keeps_blocks_beyond_the_limit),
      cmocka_unit_test(test_tensor__cache_bound_with_a_small_limit),
      cmocka_unit_test(test_tensor__cache_off_keeps_nothing),
      cmocka_unit_test(test_tensor__cache_default_holds_16mib_x8),
      cmocka_unit_test(test_tensor__cache_env_rejected_at_init),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
