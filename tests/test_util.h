/* Helpers shared by the cmocka tests, C and C++. Include after <cmocka.h> and <tpurt.h>
 * (in C++ after every other header too: cmocka defines a macro named fail()).
 *
 *   CHECK_OK(call)                    the call returns TPU_OK
 *   CHECK_ERROR(call, code, fragment) it returns `code` and the message contains `fragment`
 *   CHECK(cond)                       the condition holds
 *   CHECK_FAIL(fmt, ...)              fails with a printf-style message
 *
 * Each reports the caller's file and line, the call and the last error. cmocka's
 * asserts jump back to the test's frame, so they are safe only on the test's own
 * thread (the process's main thread, where cmocka runs every case). On any other
 * thread (a computation, a host function, a thread the test starts) these macros
 * print and count the failure instead; the test calls CHECK_NO_WORKER_FAILURES()
 * after the join, and RUN_TESTS fails the binary if failures are left unclaimed.
 *
 * Every binary's main is
 *   int main(int argc, char **argv) {
 *     const struct CMUnitTest tests[] = {cmocka_unit_test(test_<area>__<case>), ...};
 *     return RUN_TESTS(argc, argv, tests, group_setup, group_teardown);
 *   }
 * and runs only the cases whose name matches `binary PATTERN` or, without an argument,
 * $TPURT_TEST_FILTER (cmocka's pattern: `*` any run of characters, `?` one);
 * `binary --list` prints the case names, one a line, and runs none. tests/run_tests.sh
 * (`make test`) runs each case in its own process that way, e.g.
 *   build/tests/test_tensor test_tensor__cast
 *   make test T='*bf16*'
 *
 * time_limit(seconds) and time_limit_ms(ms) scale a wall-clock limit by
 * TPURT_TEST_TIMEOUT_MULTIPLIER (below). */
#ifndef TPURT_TEST_UTIL_H
#define TPURT_TEST_UTIL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_t tpurt_test_main_thread_;
static pthread_mutex_t tpurt_test_mu_ = PTHREAD_MUTEX_INITIALIZER;
static int tpurt_test_worker_failures_;

/* Constructors run on the main thread, before main. */
__attribute__((constructor)) static void tpurt_test_note_main_thread_(void) {
  tpurt_test_main_thread_ = pthread_self();
}

__attribute__((format(printf, 3, 4))) static inline void tpurt_test_failed_(const char *file,
                                                                            int line,
                                                                            const char *fmt,
                                                                            ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (pthread_equal(pthread_self(), tpurt_test_main_thread_)) {
    print_error("%s:%d: %s\n", file, line, msg);
    _fail(file, line);
  }
  pthread_mutex_lock(&tpurt_test_mu_);
  ++tpurt_test_worker_failures_;
  fprintf(stderr, "%s:%d: (off the test's thread) %s\n", file, line, msg);
  pthread_mutex_unlock(&tpurt_test_mu_);
}

/* Failures counted on other threads since the last call; resets the count. */
static inline int tpurt_test_take_worker_failures_(void) {
  pthread_mutex_lock(&tpurt_test_mu_);
  int n = tpurt_test_worker_failures_;
  tpurt_test_worker_failures_ = 0;
  pthread_mutex_unlock(&tpurt_test_mu_);
  return n;
}

#define CHECK_OK(call)                                                                    \
  do {                                                                                    \
    tpu_status tpurt_s_ = (call);                                                         \
    if (tpurt_s_ != TPU_OK)                                                               \
      tpurt_test_failed_(__FILE__, __LINE__, "%s gave %s: \"%s\"", #call,                 \
                         tpu_status_name(tpurt_s_), tpu_last_error());                    \
  } while (0)

/* The last error is cleared first so that an older message cannot satisfy the check. */
#define CHECK_ERROR(call, code, fragment)                                                 \
  do {                                                                                    \
    tpu_clear_last_error();                                                               \
    tpu_status tpurt_s_ = (call);                                                         \
    const char *tpurt_f_ = (fragment);                                                    \
    if (tpurt_s_ != (code) || strstr(tpu_last_error(), tpurt_f_) == NULL)                 \
      tpurt_test_failed_(__FILE__, __LINE__, "%s gave %s \"%s\"; expected %s with \"%s\"", \
                         #call, tpu_status_name(tpurt_s_), tpu_last_error(),              \
                         tpu_status_name(code), tpurt_f_);                                \
  } while (0)

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) tpurt_test_failed_(__FILE__, __LINE__, "%s is false", #cond);   \
  } while (0)

#define CHECK_FAIL(...) tpurt_test_failed_(__FILE__, __LINE__, __VA_ARGS__)

/* After joining the threads a test started (or after tpu_replicate returned): fails
 * if a check failed on one of them. */
#define CHECK_NO_WORKER_FAILURES()                                                       \
  do {                                                                                   \
    int tpurt_n_ = tpurt_test_take_worker_failures_();                                   \
    if (tpurt_n_ != 0)                                                                   \
      tpurt_test_failed_(__FILE__, __LINE__, "%d check(s) failed off the test's thread", \
                         tpurt_n_);                                                      \
  } while (0)

/* Every wall-clock limit in the tests (an upper bound on a duration, a deadline that
 * only guards against a hang) goes through these: TPURT_TEST_TIMEOUT_MULTIPLIER
 * (default 1) scales them for slow builds such as the sanitizers'. */
static inline double timeout_multiplier(void) {
  const char *v = getenv("TPURT_TEST_TIMEOUT_MULTIPLIER");
  if (v == NULL || *v == '\0') return 1.0;
  char *end = NULL;
  double m = strtod(v, &end);
  if (*end != '\0' || !(m > 0 && m <= 1000)) {
    fprintf(stderr, "TPURT_TEST_TIMEOUT_MULTIPLIER=\"%s\": expected a number in (0, 1000]\n", v);
    exit(2);
  }
  return m;
}

/* The test's system: TEST_SYSTEM_FIXTURE defines g_sys and a teardown, release_system,
 * that releases it even when an assertion ended the case early. */
#define TEST_SYSTEM_FIXTURE                                   \
  static tpu_system *g_sys;                                   \
  static int release_system(void **state) {                   \
    (void)state;                                              \
    tpu_system_release(g_sys);                                \
    g_sys = NULL;                                             \
    return 0;                                                 \
  }

/* A pointer to step options with a device assignment and maximum_shapes (NULL
 * and 0 for none), the rest default. */
#define STEP_OPTIONS(da, shapes, num_shapes) \
  (&(tpu_step_options){.struct_size = sizeof(tpu_step_options), .device_assignment = (da), \
                       .maximum_shapes = (shapes), .num_maximum_shapes = (num_shapes)})

static inline double time_limit(double seconds) { return seconds * timeout_multiplier(); }
static inline int64_t time_limit_ms(int64_t ms) {
  return (int64_t)((double)ms * timeout_multiplier());
}

static inline int tpurt_run_tests(int argc, char **argv, const char *group,
                                  const struct CMUnitTest *tests, size_t n,
                                  CMFixtureFunction setup, CMFixtureFunction teardown) {
  if (argc == 2 && strcmp(argv[1], "--list") == 0) {
    for (size_t i = 0; i < n; ++i) printf("%s\n", tests[i].name);
    return 0;
  }
  const char *filter = argc > 1 ? argv[1] : getenv("TPURT_TEST_FILTER");
  if (argc > 2 || (filter && filter[0] == '-')) {
    fprintf(stderr,
            "usage: %s [PATTERN | --list]  (or TPURT_TEST_FILTER=PATTERN; '*' and '?' match)\n",
            argv[0]);
    return 2;
  }
  timeout_multiplier(); /* a bad value stops the binary before any case runs */
  if (filter && *filter) cmocka_set_test_filter(filter);
  int failed = _cmocka_run_group_tests(group, tests, n, setup, teardown);
  int lost = tpurt_test_take_worker_failures_();
  if (lost) fprintf(stderr, "%s: %d unclaimed check(s) failed off the test's thread\n", group, lost);
  return failed + lost;
}

#define RUN_TESTS(argc, argv, tests, setup, teardown)                                     \
  tpurt_run_tests((argc), (argv), #tests, (tests), sizeof(tests) / sizeof((tests)[0]), \
                  (setup), (teardown))

/* Seconds on the monotonic clock. */
static inline double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif /* TPURT_TEST_UTIL_H */
