/* One task of tests/check_verdict.sh: one verdict on every task (issue 27, section 2).
 *
 *   verdict_worker KIND LAYOUT
 *
 * 2 replicas x 2 cores (participant p = replica * 2 + core) run one step in which every
 * participant calls one collective, and replica 1 core 1 (participant 3, "the culprit")
 * does something wrong, by KIND:
 *   mode    passes CROSS_PARTITION where the others pass CROSS_REPLICA (NULL groups)
 *   groups  passes groups {{0},{1}} where the others pass {{0,1}} (CROSS_REPLICA)
 *   badarg  a reduce-scatter of a tensor of 3 elements where the others have 4 (its
 *           scatter axis is not divisible by the group size: it alone finds the error)
 *   skip    returns without calling the collective
 *   fail    returns TPU_INTERNAL (tpu_replica_context_fail) without calling it
 *   late    sleeps 1.6 collective deadlines before calling it (past its
 *           peers' deadline and the vote's grace, before the step gives up on it at 2)
 * LAYOUT places the participants (4 cores in all, the default assignment's global core g
 * on task g / cores-per-task): "local" puts each cross-replica group {0,2}, {1,3} on
 * one task when there are 2 tasks; "span" puts replica 0 on one task, replica 1 on
 * the other. (One process, or 4 tasks of 1 core: the same either way.) "all" is span's
 * placement, with one group of every participant: the collectives are in
 * CROSS_REPLICA_AND_PARTITION mode (the culprit's "mode": CROSS_PARTITION; "groups":
 * {{0,1}} against the culprit's {{0},{1}}), so that every group spans every task and the
 * tasks' vote rides on their data exchange.
 *
 * Every participant of this task prints one line
 *   verdict P<p> <what> <STATUS> culprit=<yes|no>
 * (what: "collective" for the collective's status, "returned" for a culprit that did
 * not call it; culprit=yes when the message names "replica 1 core 1") and, after it,
 *   verdict P<p> message <the message>
 * The task then prints "task T: step STATUS: message". Exit 0 unless the setup failed.
 * Environment: VERDICT_TIMEOUT_MS, the collective deadline (default 2000);
 * VERDICT_ELEMENTS, the elements of each participant's tensor (default 4; the culprit's
 * badarg tensor has one less): over MPI, above 512 the all-reduce is MPI_Iallreduce.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpurt.h"

static const char *g_kind;
static int g_task;
static int64_t g_timeout_ms = 2000;
static int g_all;  /* LAYOUT "all": one group of everyone */
static int64_t g_elements = 4;

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static void report(int p, const char *what, tpu_status s, const char *msg) {
  /* One write per line pair: the participants print concurrently. */
  char line[4096];
  snprintf(line, sizeof line, "verdict P%d %s %s culprit=%s\nverdict P%d message %s\n", p, what,
           tpu_status_name(s), msg && strstr(msg, "replica 1 core 1") ? "yes" : "no", p, msg ? msg : "");
  fputs(line, stdout);
  fflush(stdout);
}

static tpu_status step_fn(tpu_replica_context *ctx, tpu_tensor *const *in, int nin, tpu_tensor **out,
                          int nout, void *user) {
  (void)in, (void)nin, (void)out, (void)nout, (void)user;
  int r = -1, c = -1;
  tpu_replica_context_replica_id(ctx, &r);
  tpu_replica_context_logical_core(ctx, &c);
  const int p = r * 2 + c, culprit = p == 3;
  tpu_collective_options o = TPU_COLLECTIVE_OPTIONS_INIT;
  o.group_mode = g_all ? TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION : TPU_GROUP_MODE_CROSS_REPLICA;
  const int32_t together[2] = {0, 1}, apart[2] = {0, 1};
  tpu_group_assignment g_together = {together, 1, 2}, g_apart = {apart, 2, 1};
  const tpu_group_assignment *groups = NULL;
  int64_t len = g_elements;
  if (culprit && !strcmp(g_kind, "badarg")) len = g_elements - 1;
  float *v = calloc((size_t)g_elements, sizeof *v);
  if (v == NULL) return TPU_RESOURCE_EXHAUSTED;
  for (int64_t i = 0; i < g_elements; i++) v[i] = i == 0 ? (float)p : (float)(i % 4);
  tpu_tensor *x = NULL, *y = NULL;
  tpu_status made = tpu_tensor_create(TPU_FLOAT, &len, 1, v, sizeof(float) * (size_t)len, &x);
  free(v);
  if (made != TPU_OK) return TPU_INTERNAL;
  if (!strcmp(g_kind, "mode") && culprit) o.group_mode = TPU_GROUP_MODE_CROSS_PARTITION;
  if (!strcmp(g_kind, "groups")) groups = culprit ? &g_apart : &g_together;
  if (culprit && !strcmp(g_kind, "skip")) {
    tpu_tensor_release(x);
    report(p, "returned", TPU_OK, "skipped the collective");
    return TPU_OK;
  }
  if (culprit && !strcmp(g_kind, "fail")) {
    tpu_tensor_release(x);
    report(p, "returned", TPU_INTERNAL, "failed on purpose");
    return tpu_replica_context_fail(ctx, TPU_INTERNAL, "failed on purpose");
  }
  if (culprit && !strcmp(g_kind, "late")) sleep_ms((long)(g_timeout_ms * 8 / 5));
  tpu_status s;
  if (!strcmp(g_kind, "badarg")) s = tpu_reduce_scatter(ctx, x, TPU_REDUCE_SUM, 0, NULL, &y, &o);
  else s = tpu_all_reduce(ctx, x, TPU_REDUCE_SUM, groups, &y, &o);
  report(p, "collective", s, s == TPU_OK ? "" : tpu_last_error());
  tpu_tensor_release(y);
  tpu_tensor_release(x);
  return s;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: verdict_worker mode|groups|badarg|skip|fail|late local|span|all\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  g_kind = argv[1];
  g_all = !strcmp(argv[2], "all");
  const int span = g_all || !strcmp(argv[2], "span");
  const char *t = getenv("VERDICT_TIMEOUT_MS");
  if (t) g_timeout_ms = atoll(t);
  const char *e = getenv("VERDICT_ELEMENTS");
  if (e && atoll(e) >= 2) g_elements = atoll(e);
  tpu_system_options options = TPU_SYSTEM_OPTIONS_INIT;
  options.collective_timeout_ms = g_timeout_ms;
  tpu_system *system = NULL;
  tpu_status s = tpu_initialize_tpu_system(NULL, &options, NULL, &system, NULL);
  if (s != TPU_OK) {
    printf("init: %s: %s\n", tpu_status_name(s), tpu_last_error());
    return 3;
  }
  int tasks = 1, local = 0;
  tpu_system_task_id(system, &g_task);
  tpu_system_num_tasks(system, &tasks);
  tpu_system_num_cores(system, &local);
  if (tasks * local != 4) {
    printf("task %d: verdict_worker needs 4 cores in all, not %d\n", g_task, tasks * local);
    return 3;
  }
  /* Participant q on the default assignment's global core global[q]. */
  const int global_local[4] = {0, 2, 1, 3}, global_span[4] = {0, 1, 2, 3};
  const int *global = span ? global_span : global_local;
  tpu_device_assignment *def = NULL, *da = NULL;
  tpu_topology *topology = NULL;
  int32_t coords[4 * 4], layout[4 * 4];
  size_t count = 0;
  if (tpu_system_default_device_assignment(system, 4, &def) != TPU_OK ||
      tpu_device_assignment_core_assignment(def, coords, 16, &count) != TPU_OK || count != 16 ||
      tpu_device_assignment_topology(def, &topology) != TPU_OK) {
    printf("task %d: default assignment: %s\n", g_task, tpu_last_error());
    return 3;
  }
  for (int q = 0; q < 4; q++) memcpy(&layout[4 * q], &coords[4 * global[q]], 4 * sizeof *coords);
  if (tpu_device_assignment_create(topology, layout, 2, 2, &da) != TPU_OK) {
    printf("task %d: assignment: %s\n", g_task, tpu_last_error());
    return 3;
  }
  tpu_step_options so = TPU_STEP_OPTIONS_INIT;
  so.device_assignment = da;
  s = tpu_replicate(system, step_fn, NULL, 2, 0, NULL, 0, NULL, &so);
  printf("task %d: step %s: %s\n", g_task, tpu_status_name(s), s == TPU_OK ? "" : tpu_last_error());
  tpu_device_assignment_release(da);
  tpu_device_assignment_release(def);
  tpu_topology_release(topology);
  tpu_system_shutdown(system);
  tpu_system_release(system);
  return 0;
}
