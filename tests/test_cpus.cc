// Internal unit test of core/cpus: the usable CPUs follow the affinity mask, and
// worker placement pins round-robin over them exactly when the mode asks for it.
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
extern "C" {  // cmocka.h has no C++ linkage of its own
#include <cmocka.h>
}

#include <vector>

#include "core/cpus.h"
#include "tpurt/system.h"
#include "test_util.h"

static void test_cpus__usable_follow_affinity_mask(void **) {
  std::vector<int> all = tpurt::usable_cpus();
  assert_true(!all.empty());
  for (size_t i = 1; i < all.size(); ++i) assert_true(all[i - 1] < all[i]);
  assert_int_equal(tpurt::num_usable_cpus(), (int)all.size());

  // Narrowed to its last CPU, this thread sees only that one.
  cpu_set_t saved, one;
  assert_int_equal(sched_getaffinity(0, sizeof saved, &saved), 0);
  CPU_ZERO(&one);
  CPU_SET(all.back(), &one);
  assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
  std::vector<int> narrowed = tpurt::usable_cpus();
  int narrowed_count = tpurt::num_usable_cpus();
  sched_setaffinity(0, sizeof saved, &saved);
  assert_int_equal((int)narrowed.size(), 1);
  assert_int_equal(narrowed[0], all.back());
  assert_int_equal(narrowed_count, 1);
}

static void test_cpus__placement_by_mode(void **) {
  std::vector<int> cpus = tpurt::usable_cpus();
  const int n = (int)cpus.size();
  assert_true(tpurt::worker_placement(TPU_PIN_NEVER, 2 * n + 1).empty());
  assert_true(tpurt::worker_placement(TPU_PIN_AUTO, n).empty());  // no more workers than CPUs

  for (int mode : {TPU_PIN_AUTO, TPU_PIN_ALWAYS}) {
    std::vector<int> p = tpurt::worker_placement(mode, 2 * n + 1);
    assert_int_equal((int)p.size(), 2 * n + 1);
    for (int i = 0; i < 2 * n + 1; ++i) assert_int_equal(p[i], cpus[i % n]);
  }
  std::vector<int> always = tpurt::worker_placement(TPU_PIN_ALWAYS, 1);
  assert_int_equal((int)always.size(), 1);
  assert_int_equal(always[0], cpus[0]);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cpus__usable_follow_affinity_mask),
      cmocka_unit_test(test_cpus__placement_by_mode),
  };
  return RUN_TESTS(argc, argv, tests, nullptr, nullptr);
}
