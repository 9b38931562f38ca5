/* Status names, version, dtype queries and the thread-local last error. */
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "tpurt.h"

#include "test_util.h"

/* The status table, from the header's map: the tests never list codes by hand. */
static const struct {
  int code;
  const char *ident; /* the enumerator without TPU_ */
  const char *name;
} kStatuses[] = {
#define XX(ident, value, str) {TPU_##ident, #ident, str},
    TPU_STATUS_MAP(XX)
#undef XX
};
enum { kNumStatuses = sizeof kStatuses / sizeof kStatuses[0] };

static int known_status(int code) {
  for (int i = 0; i < kNumStatuses; ++i)
    if (kStatuses[i].code == code) return i;
  return -1;
}

static void test_common__status_names(void **state) {
  (void)state;
  /* TensorFlow's canonical codes: 0..16 in order, each named as its enumerator. */
  assert_int_equal(kNumStatuses, 17);
  for (int i = 0; i < kNumStatuses; ++i) {
    assert_int_equal(kStatuses[i].code, i);
    assert_string_equal(kStatuses[i].name, kStatuses[i].ident);
  }
  for (int code = -2; code <= 40; ++code) {
    int k = known_status(code);
    assert_string_equal(tpu_status_name((tpu_status)code),
                        k >= 0 ? kStatuses[k].name : "UNKNOWN_STATUS");
  }
  static const int unknown[] = {100, INT_MAX, INT_MIN};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; ++i)
    assert_string_equal(tpu_status_name((tpu_status)unknown[i]), "UNKNOWN_STATUS");
}

/* The library's version string, the header's macros and TPU_VERSION_HEX agree, each
 * checked against the numbers parsed from the string. */
static void test_common__version(void **state) {
  (void)state;
  const char *v = tpu_version();
  assert_non_null(v);
  int major = -1, minor = -1, patch = -1, used = 0;
  assert_int_equal(sscanf(v, "%d.%d.%d%n", &major, &minor, &patch, &used), 3);
  assert_int_equal(v[used], '\0');
  assert_int_equal(major, TPU_VERSION_MAJOR);
  assert_int_equal(minor, TPU_VERSION_MINOR);
  assert_int_equal(patch, TPU_VERSION_PATCH);
  assert_true(minor < 256 && patch < 256);
  assert_int_equal(TPU_VERSION_HEX >> 16, major);
  assert_int_equal((TPU_VERSION_HEX >> 8) & 0xff, minor);
  assert_int_equal(TPU_VERSION_HEX & 0xff, patch);
}

/* The dtype table, from the header's map. */
static const struct {
  int dtype;
  const char *name;
  size_t size;
} kDtypes[] = {
#define XX(ident, value, str, size) {TPU_##ident, str, size},
    TPU_DTYPE_MAP(XX)
#undef XX
};
enum { kNumDtypes = sizeof kDtypes / sizeof kDtypes[0] };

static int known_dtype(int d) {
  for (int i = 0; i < kNumDtypes; ++i)
    if (kDtypes[i].dtype == d) return i;
  return -1;
}

/* The ABI is frozen: the first dtypes keep TensorFlow's DataType numbers, whatever is
 * appended to the map later. */
static void test_common__dtype_numbers_are_tensorflows(void **state) {
  (void)state;
  static const int tf_numbers[] = {1, 2, 3, 4, 5, 6, 8, 9, 10, 14, 19, 22, 23};
  const int n = (int)(sizeof tf_numbers / sizeof tf_numbers[0]);
  assert_true(kNumDtypes >= n);
  for (int i = 0; i < n; ++i) assert_int_equal(kDtypes[i].dtype, tf_numbers[i]);
  for (int i = 0; i < kNumDtypes; ++i)
    for (int j = i + 1; j < kNumDtypes; ++j) assert_int_not_equal(kDtypes[i].dtype, kDtypes[j].dtype);
}

static void assert_unknown_dtype(int d) {
  char number[32];
  size_t size = 12345;
  const char *name = "untouched";
  snprintf(number, sizeof number, "%d", d);
  tpu_clear_last_error();
  assert_int_equal(tpu_dtype_size((tpu_dtype)d, &size), TPU_INVALID_ARGUMENT);
  assert_non_null(strstr(tpu_last_error(), "dtype"));
  assert_non_null(strstr(tpu_last_error(), number));
  assert_int_equal(size, 12345); /* out-parameters are written only on success */
  tpu_clear_last_error();
  assert_int_equal(tpu_dtype_name((tpu_dtype)d, &name), TPU_INVALID_ARGUMENT);
  assert_non_null(strstr(tpu_last_error(), "dtype"));
  assert_string_equal(name, "untouched");
}

static void test_common__dtypes(void **state) {
  (void)state;
  for (int d = -2; d <= 40; ++d) {
    int k = known_dtype(d);
    if (k < 0) {
      assert_unknown_dtype(d);
      continue;
    }
    size_t size = 0;
    const char *name = NULL;
    CHECK_OK(tpu_dtype_size((tpu_dtype)d, &size));
    assert_int_equal(size, kDtypes[k].size);
    CHECK_OK(tpu_dtype_name((tpu_dtype)d, &name));
    assert_non_null(name);
    assert_string_equal(name, kDtypes[k].name);
  }
  assert_unknown_dtype(99);
  assert_unknown_dtype(101); /* TensorFlow's reference types (DT_FLOAT_REF) are not dtypes */
  assert_unknown_dtype(INT_MAX);
  assert_unknown_dtype(INT_MIN);
}

static void test_common__dtype_null_out(void **state) {
  (void)state;
  assert_int_equal(tpu_dtype_size(TPU_FLOAT, NULL), TPU_INVALID_ARGUMENT);
  assert_non_null(strstr(tpu_last_error(), "'out'"));
  tpu_clear_last_error();
  assert_int_equal(tpu_dtype_name(TPU_FLOAT, NULL), TPU_INVALID_ARGUMENT);
  assert_non_null(strstr(tpu_last_error(), "'out'"));
}

static void test_common__last_error_and_clear(void **state) {
  (void)state;
  size_t size;
  tpu_clear_last_error();
  assert_non_null(tpu_last_error());
  assert_string_equal(tpu_last_error(), "");
  assert_int_equal(tpu_dtype_size((tpu_dtype)7, &size), TPU_INVALID_ARGUMENT);
  assert_string_not_equal(tpu_last_error(), "");
  char kept[256];
  snprintf(kept, sizeof kept, "%s", tpu_last_error());
  /* Success leaves the message of an earlier failure alone. */
  CHECK_OK(tpu_dtype_size(TPU_FLOAT, &size));
  assert_string_equal(tpu_last_error(), kept);
  tpu_clear_last_error();
  assert_string_equal(tpu_last_error(), "");
}

typedef struct {
  char seen_at_start[256];
  char own_error[256];
} thread_result;

static void *error_thread(void *arg) {
  thread_result *r = arg;
  size_t size;
  snprintf(r->seen_at_start, sizeof r->seen_at_start, "%s", tpu_last_error());
  tpu_dtype_size((tpu_dtype)99, &size);
  snprintf(r->own_error, sizeof r->own_error, "%s", tpu_last_error());
  return NULL;
}

static void test_common__last_error_is_thread_local(void **state) {
  (void)state;
  size_t size;
  assert_int_equal(tpu_dtype_size((tpu_dtype)7, &size), TPU_INVALID_ARGUMENT);
  char mine[256];
  snprintf(mine, sizeof mine, "%s", tpu_last_error());
  assert_non_null(strstr(mine, "7"));

  thread_result r;
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, error_thread, &r), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
  /* The other thread saw none of this thread's error, and its own did not leak back. */
  assert_string_equal(r.seen_at_start, "");
  assert_non_null(strstr(r.own_error, "99"));
  assert_string_equal(tpu_last_error(), mine);

  /* Clearing is per thread too. */
  tpu_clear_last_error();
  assert_string_equal(tpu_last_error(), "");
}

static void *names_from_a_thread(void *arg) {
  const char **p = arg;
  p[0] = tpu_status_name(TPU_ABORTED);
  p[1] = tpu_version();
  if (tpu_dtype_name(TPU_BFLOAT16, &p[2]) != TPU_OK) p[2] = NULL;
  return NULL;
}

/* "Static storage": every call, on any thread, gives the same pointer. "Valid until
 * the next failing tpurt call": the pointer tpu_last_error gave still reads its
 * message after successful calls. tpu_set_last_error copies `message`; with TPU_OK
 * the last error is its own refusal, not `message`. */
static void test_common__static_strings_and_last_error_lifetime(void **state) {
  (void)state;
  const char *mine[3], *theirs[3] = {NULL, NULL, NULL};
  mine[0] = tpu_status_name(TPU_ABORTED);
  mine[1] = tpu_version();
  CHECK_OK(tpu_dtype_name(TPU_BFLOAT16, &mine[2]));
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, names_from_a_thread, theirs), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
  for (int i = 0; i < 3; ++i) assert_ptr_equal(mine[i], theirs[i]);
  assert_ptr_equal(tpu_status_name(TPU_ABORTED), mine[0]);
  assert_ptr_equal(tpu_version(), mine[1]);

  size_t size;
  assert_int_equal(tpu_dtype_size((tpu_dtype)7, &size), TPU_INVALID_ARGUMENT);
  const char *p = tpu_last_error();
  char kept[256];
  snprintf(kept, sizeof kept, "%s", p);
  const char *name;
  for (int i = 0; i < 100; ++i) {
    CHECK_OK(tpu_dtype_size(TPU_FLOAT, &size));
    CHECK_OK(tpu_dtype_name(TPU_INT8, &name));
  }
  assert_string_equal(p, kept);

  char message[16] = "original";
  assert_int_equal(tpu_set_last_error(TPU_NOT_FOUND, message), TPU_NOT_FOUND);
  strcpy(message, "changed");
  assert_string_equal(tpu_last_error(), "original");
  assert_int_equal(tpu_set_last_error(TPU_OK, "fine"), TPU_INVALID_ARGUMENT);
  assert_null(strstr(tpu_last_error(), "fine"));
  assert_non_null(strstr(tpu_last_error(), "TPU_OK"));
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_common__status_names),
      cmocka_unit_test(test_common__version),
      cmocka_unit_test(test_common__dtypes),
      cmocka_unit_test(test_common__dtype_numbers_are_tensorflows),
      cmocka_unit_test(test_common__dtype_null_out),
      cmocka_unit_test(test_common__last_error_and_clear),
      cmocka_unit_test(test_common__last_error_is_thread_local),
      cmocka_unit_test(test_common__static_strings_and_last_error_lifetime),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
