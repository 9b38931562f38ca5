/* One task of tests/check_cluster_lifetime.sh: the cluster's own lifetime.
 *
 *   lifetime_worker rounds N   N times in a row: initialise the TPU system (the
 *                              cluster from the environment: tpurt launch, or
 *                              DTENSOR_*), run one checked cross_replica_sum step,
 *                              release the system. The rounds vary which task
 *                              releases first: in some task 1 sleeps 0-50 ms before
 *                              or after its release, in others task 0 does.
 *   lifetime_worker step       one round (the flood tests), printing how long the
 *                              initialisation took.
 *
 * Each task prints "task T: SCENARIO ok" or what went wrong, and exits 0 only if every
 * check held. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpurt.h"

enum { kElements = 1024 };

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Replica r's element i in round k: small integers, so every sum is exact. */
static float input(int r, int k, int i) { return (float)((r + 1 + k) * (i % 7 + 1)); }

struct step {
  int round;
  int failed; /* replicas whose sum was wrong */
};

static tpu_status sum_fn(tpu_replica_context *ctx, tpu_tensor *const *in, int nin,
                         tpu_tensor **out, int nout, void *user) {
  (void)in, (void)nin, (void)out, (void)nout;
  struct step *st = user;
  int r = 0, n = 0;
  tpu_status s = tpu_replica_context_replica_id(ctx, &r);
  if (s == TPU_OK) s = tpu_replica_context_num_replicas(ctx, &n);
  if (s != TPU_OK) return s;
  float data[kElements];
  for (int i = 0; i < kElements; i++) data[i] = input(r, st->round, i);
  int64_t dims[1] = {kElements};
  tpu_tensor *x = NULL, *sum = NULL;
  s = tpu_tensor_create(TPU_FLOAT, dims, 1, data, sizeof data, &x);
  if (s == TPU_OK) s = tpu_cross_replica_sum(ctx, x, NULL, &sum, NULL);
  if (s == TPU_OK) {
    const float *got = NULL;
    tpu_tensor_data(sum, (const void **)&got);
    for (int i = 0; i < kElements; i++) {
      float want = 0;
      for (int q = 0; q < n; q++) want += input(q, st->round, i);
      if (got[i] != want) {
        fprintf(stderr, "round %d: replica %d: element %d is %g, not %g\n", st->round, r, i,
                (double)got[i], (double)want);
        __sync_fetch_and_add(&st->failed, 1);
        break;
      }
    }
  }
  tpu_tensor_release(x);
  tpu_tensor_release(sum);
  return s;
}

/* One round: init, one step, release. sleep_before/after: ms around the release. */
static int round_trip(int k, int verbose, long sleep_before_by[2], long sleep_after_by[2]) {
  tpu_system *system = NULL;
  tpu_system_options options = TPU_SYSTEM_OPTIONS_INIT;
  double t0 = now_s();
  tpu_status s = tpu_initialize_tpu_system(NULL, &options, NULL, &system, NULL);
  double init_s = now_s() - t0;
  if (s != TPU_OK) {
    printf("round %d: init: %s: %s (after %.1f s)\n", k, tpu_status_name(s), tpu_last_error(), init_s);
    return 1;
  }
  int task = 0, tasks = 0, cores = 0;
  tpu_system_task_id(system, &task);
  tpu_system_num_tasks(system, &tasks);
  tpu_system_num_cores(system, &cores);
  if (verbose) printf("task %d: init took %.1f s\n", task, init_s);
  /* The data plane asked for (TPURT_TRANSPORT) is the one the tasks chose. */
  const char *asked = getenv("TPURT_TRANSPORT");
  char transport[16] = "";
  size_t count = 0;
  tpu_system_transport(system, transport, sizeof transport, &count);
  int bad = 0;
  if (asked && *asked && strcmp(asked, "auto") != 0 && strcmp(asked, transport) != 0) {
    printf("task %d: round %d: TPURT_TRANSPORT=%s but the transport is %s\n", task, k, asked, transport);
    bad = 1;
  }
  struct step st = {k, 0};
  s = tpu_replicate(system, sum_fn, &st, tasks * cores, 0, NULL, 0, NULL, NULL);
  if (s != TPU_OK || st.failed) {
    printf("task %d: round %d: step: %s: %s (%d wrong sums)\n", task, k, tpu_status_name(s),
           s == TPU_OK ? "" : tpu_last_error(), st.failed);
    bad = 1;
  }
  if (task < 2 && sleep_before_by[task] > 0) sleep_ms(sleep_before_by[task]);
  s = tpu_system_release(system);
  if (s != TPU_OK) {
    printf("task %d: round %d: release: %s: %s\n", task, k, tpu_status_name(s), tpu_last_error());
    bad = 1;
  }
  if (task < 2 && sleep_after_by[task] > 0) sleep_ms(sleep_after_by[task]);
  if (!bad && verbose) printf("task %d: round %d ok\n", task, k);
  return bad;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *scenario = argc > 1 ? argv[1] : "";
  const char *id = getenv("DTENSOR_CLIENT_ID");
  if (!id) id = getenv("OMPI_COMM_WORLD_RANK");
  int task = id ? atoi(id) : -1;
  if (!strcmp(scenario, "rounds")) {
    int rounds = argc > 2 ? atoi(argv[2]) : 20;
    for (int k = 0; k < rounds; k++) {
      /* Who lingers, and where: task 1 before its release (task 0 releases first),
       * task 1 after it (task 1 re-registers last), task 0 before (task 1 releases
       * first and re-registers while task 0's service still runs), task 0 after. */
      long ms = (k * 17) % 51;
      long before[2] = {0, 0}, after[2] = {0, 0};
      switch (k % 5) {
        case 0: break;
        case 1: before[1] = ms; break;
        case 2: after[1] = ms; break;
        case 3: before[0] = ms; break;
        case 4: after[0] = ms; break;
      }
      if (round_trip(k, 0, before, after)) {
        printf("task %d: rounds FAILED in round %d of %d\n", task, k, rounds);
        return 1;
      }
    }
    printf("task %d: rounds ok (%d rounds)\n", task, rounds);
    return 0;
  }
  if (!strcmp(scenario, "step")) {
    long none[2] = {0, 0};
    if (round_trip(0, 1, none, none)) {
      printf("task %d: step FAILED\n", task);
      return 1;
    }
    printf("task %d: step ok\n", task);
    return 0;
  }
  fprintf(stderr, "usage: lifetime_worker rounds N | step\n");
  return 2;
}
