/* Reference measurements for tpurt bench: the machine's memcpy bandwidth (the ceiling
 * of any in-process collective) and the cost of an empty replicated step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define MEMCPY_BYTES ((size_t)64 << 20)
#define MEMCPY_REPS 10
#define STEP_WARMUP 200
#define STEP_DEFAULT 2000

struct bench_memcpy_probe {
  unsigned char *src, *dst;
  unsigned rep;
};

bench_memcpy_probe *bench_memcpy_probe_new(void) {
  bench_memcpy_probe *p = xcalloc(1, sizeof *p);
  p->src = xcalloc(MEMCPY_BYTES, 1);
  p->dst = xcalloc(MEMCPY_BYTES, 1);
  /* Touch every page first so the timed copies measure memory, not page faults. */
  memset(p->src, 1, MEMCPY_BYTES);
  memset(p->dst, 0, MEMCPY_BYTES);
  return p;
}

double bench_memcpy_probe_run(bench_memcpy_probe *p, int copies) {
  double best = 1e30;
  volatile unsigned char sink = 0;
  for (int c = 0; c < copies; c++) {
    double t0 = now_seconds();
    memcpy(p->dst, p->src, MEMCPY_BYTES);
    double t = now_seconds() - t0;
    sink ^= p->dst[(size_t)(p->rep++ % 4096) * 4096];  /* keeps the copy observable */
    if (t < best) best = t;
  }
  (void)sink;
  return 2.0 * (double)MEMCPY_BYTES / best / 1e9;
}

void bench_memcpy_probe_free(bench_memcpy_probe *p) {
  if (!p) return;
  free(p->src);
  free(p->dst);
  free(p);
}

double bench_memcpy_bandwidth(void) {
  bench_memcpy_probe *p = bench_memcpy_probe_new();
  bench_memcpy_probe_run(p, 1);  /* warms up */
  double gbps = bench_memcpy_probe_run(p, MEMCPY_REPS);
  bench_memcpy_probe_free(p);
  return gbps;
}

static tpu_status empty_computation(tpu_replica_context *ctx, tpu_tensor *const *inputs,
                                    int num_inputs, tpu_tensor **outputs, int num_outputs,
                                    void *user_data) {
  (void)ctx, (void)inputs, (void)num_inputs, (void)outputs, (void)num_outputs, (void)user_data;
  return TPU_OK;
}

int bench_empty_step(const bench_config *cfg) {
  long steps = cfg->fixed_iters ? cfg->fixed_iters : STEP_DEFAULT;
  double *us = xcalloc((size_t)steps, sizeof *us);
  tpu_system *system = start_system(cfg->replicas, NULL, cfg->pinning);
  for (long i = 0; i < STEP_WARMUP + steps; i++) {
    double t0 = now_seconds();
    CHECK(tpu_replicate(system, empty_computation, NULL, cfg->replicas, 0, NULL, 0,
                        NULL, NULL));
    if (i >= STEP_WARMUP) us[i - STEP_WARMUP] = (now_seconds() - t0) * 1e6;
  }
  CHECK(tpu_system_release(system));

  qsort(us, (size_t)steps, sizeof *us, compare_doubles);
  double median = us[steps / 2], p10 = us[steps / 10], p90 = us[steps * 9 / 10];
  /* A step is a meeting of its replicas and the caller: its floor is bare threads
   * meeting at a barrier, measured right after, in the same conditions. */
  double floor_us = bench_meeting_floor_us(cfg->replicas);
  if (cfg->csv) {
    printf("replicas,cpus,steps,median_us,p10_us,p90_us,meeting_floor_us\n");
    printf("%d,%d,%ld,%.3f,%.3f,%.3f,%.3f\n", cfg->replicas, online_cpus(), steps, median, p10, p90,
           floor_us);
  } else {
    printf("# tpurt bench --step: an empty tpu_replicate step, %d replicas on %d CPUs\n",
           cfg->replicas, online_cpus());
    printf("empty step: median %.2f us (p10 %.2f, p90 %.2f) over %ld steps after %d warm-up\n",
           median, p10, p90, steps, STEP_WARMUP);
    if (floor_us > 0)
      printf("meeting floor: %d bare threads meet at a barrier in %.2f us; the step takes %.2fx that\n",
             cfg->replicas, floor_us, median / floor_us);
  }
  free(us);
  return 0;
}
