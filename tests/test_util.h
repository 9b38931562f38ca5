/* Helpers shared by the cmocka tests. Include after <cmocka.h> and <tpurt.h>. */
#ifndef TPURT_TEST_UTIL_H
#define TPURT_TEST_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Fails the test, naming the call, unless it returns TPU_OK. */
#define EXPECT_OK(call)                                                                      \
  do {                                                                                       \
    tpu_status s_ = (call);                                                                  \
    if (s_ != TPU_OK) {                                                                      \
      print_error("%s:%d: %s gave %s: %s\n", __FILE__, __LINE__, #call, tpu_status_name(s_), \
                  tpu_last_error());                                                         \
      fail();                                                                                \
    }                                                                                        \
  } while (0)

/* Fails the test unless `got` is `want` and the last error contains `fragment`. */
static inline void expect_error(tpu_status got, tpu_status want, const char *fragment) {
  if (got != want || strstr(tpu_last_error(), fragment) == NULL)
    fail_msg("expected %s with \"%s\", got %s: \"%s\"", tpu_status_name(want), fragment,
             tpu_status_name(got), tpu_last_error());
}

/* A pointer to step options with a device assignment and maximum_shapes (NULL
 * and 0 for none), the rest default. */
#define STEP_OPTIONS(da, shapes, num_shapes) \
  (&(tpu_step_options){sizeof(tpu_step_options), (da), (shapes), (num_shapes), 0, 0, NULL})

/* A wall-clock limit in ms scaled by TPURT_TEST_TIMEOUT_MULTIPLIER (default 1), for
 * slow builds such as the sanitizers'. */
static inline int64_t scaled_ms(int64_t ms) {
  const char *m = getenv("TPURT_TEST_TIMEOUT_MULTIPLIER");
  double f = m ? atof(m) : 1.0;
  return (int64_t)((double)ms * (f > 0 ? f : 1.0));
}

/* Seconds on the monotonic clock. */
static inline double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif /* TPURT_TEST_UTIL_H */
