/* The cases tests/check_runner.sh gives the runner: one passes, one fails, one hangs
 * ignoring SIGTERM with a child that holds its output open, one exits before cmocka
 * says OK, one skips. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

#include "tpurt.h"
#include "test_util.h"

static void runner_fixture__passes(void **state) {
  (void)state;
  printf("fixture: output of the passing case\n");
}

static void runner_fixture__fails(void **state) {
  (void)state;
  printf("fixture: output before the failure\n");
  fflush(stdout);
  CHECK_FAIL("fixture: the failing check");
}

static void runner_fixture__hangs(void **state) {
  (void)state;
  signal(SIGTERM, SIG_IGN); /* only SIGKILL ends it, and its child */
  pid_t child = fork();
  if (child == 0)
    for (;;) pause();
  const char *pid_file = getenv("FIXTURE_CHILD_PID_FILE");
  FILE *f = pid_file ? fopen(pid_file, "w") : NULL;
  if (f) {
    fprintf(f, "%d\n", (int)child);
    fclose(f);
  }
  printf("fixture: hanging\n");
  fflush(stdout);
  for (;;) pause();
}

static void runner_fixture__exits_early(void **state) {
  (void)state;
  exit(0);
}

static void runner_fixture__skips(void **state) {
  (void)state;
  skip();
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(runner_fixture__passes),
      cmocka_unit_test(runner_fixture__fails),
      cmocka_unit_test(runner_fixture__hangs),
      cmocka_unit_test(runner_fixture__exits_early),
      cmocka_unit_test(runner_fixture__skips),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
