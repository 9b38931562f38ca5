/* tpurt bench --embedding: the embedding engine's step, lookups plus Adagrad updates.
 *
 * One table of VOCABULARY x DIM float32 rows with Adagrad, one feature of IDS ids per
 * replica per step (one id a sample, SUM), drawn from a Zipf distribution so that rows
 * repeat within a step, as in click logs. A step is one tpu_replicate: every replica
 * enqueues its ids, receives the activations and sends a constant gradient; the engine
 * applies Adagrad to each touched row at the step's end. Reported: lookups/s (ids),
 * updates/s (unique rows updated), and the bytes the step must move at least (a row
 * read per lookup; per updated row, the row and its accumulator read and written)
 * per second, against the memcpy bandwidth measured beside the steps. Per-phase times
 * (enqueue, recv_activations, send_gradients inside the computation, the rest of the
 * step: the engine's step end and the runtime) say where the time goes.
 *
 * Before timing, one step from a zero table is checked row by row against Adagrad
 * written out: row r ends at -lr g / sqrt(a0 + g^2), g its gradient G summed over its
 * occurrences (in float, in the engine's order).
 *
 * The ceiling: on a shared 2-CPU host one memcpy measurement swings by a quarter
 * between runs (other processes, the host's caches), so it is no stable denominator.
 * The timed steps run in ROUNDS rounds, each after a short memcpy run (the best of
 * MEMCPY_COPIES copies of 64 MiB) in the same conditions; reported are the median
 * memcpy and the median of the rounds' ratios of GB/s moved to their memcpy. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench.h"

#define VOCABULARY 1000000
#define DIM 64
#define IDS 1024             /* per replica per step */
#define ZIPF_S 1.05          /* exponent: P(rank k) ~ 1 / k^s */
#define BATCHES 16           /* distinct steps of ids, cycled */
#define LR 0.01f
#define INITIAL_ACCUMULATOR 0.1f
#define GRADIENT 0.001f      /* every activation's gradient */
#define WARMUP_STEPS 3
#define TARGET_SECONDS 2.0
#define MIN_STEPS 10
#define ROUNDS 9             /* of timed steps, each beside its own memcpy run */
#define MEMCPY_COPIES 3      /* a round's memcpy run: the best of these */

enum { PHASE_ENQUEUE, PHASE_RECV, PHASE_SEND, PHASES };
static const char *const phase_names[PHASES] = {"enqueue", "recv_activations", "send_gradients"};

typedef struct emb_run {
  int replicas, batch;          /* batch: which of the BATCHES this step uses */
  const int64_t *ids;           /* [BATCHES][replicas][IDS] */
  const int64_t *iota;          /* [IDS] */
  tpu_tensor *gradient;         /* [IDS, DIM] of GRADIENT, shared (read only) */
  double *phase_us;             /* [replicas][PHASES] of the last step */
} emb_run;

static tpu_status emb_step(tpu_replica_context *ctx, tpu_tensor *const *inputs, int num_inputs,
                           tpu_tensor **outputs, int num_outputs, void *user_data) {
  (void)inputs, (void)num_inputs, (void)outputs, (void)num_outputs;
  const emb_run *run = user_data;
  int r;
  RETURN_IF_ERROR(tpu_replica_context_replica_id(ctx, &r));
  tpu_embedding_feature_batch batch = {
      .feature = 0, .ids = run->ids + ((size_t)run->batch * run->replicas + r) * IDS,
      .num_ids = IDS, .sample_indices = run->iota, .combiner = TPU_EMBEDDING_COMBINER_SUM};
  double *us = run->phase_us + (size_t)r * PHASES, t0 = now_seconds(), t1, t2;
  RETURN_IF_ERROR(tpu_embedding_enqueue(ctx, &batch, 1));
  tpu_tensor *act = NULL;
  t1 = now_seconds();
  RETURN_IF_ERROR(tpu_embedding_recv_activations(ctx, &act, 1));
  t2 = now_seconds();
  tpu_status status = tpu_embedding_send_gradients(ctx, &run->gradient, 1, NULL, 0);
  us[PHASE_ENQUEUE] = (t1 - t0) * 1e6;
  us[PHASE_RECV] = (t2 - t1) * 1e6;
  us[PHASE_SEND] = (now_seconds() - t2) * 1e6;
  return first_error(status, tpu_tensor_release(act));
}

/* Zipf(ZIPF_S) ranks over the vocabulary by inverse CDF, each rank mapped to a row by a
 * fixed bijection (popular rows are spread over the table, as hashed ids are). */
/* This process's CPU time (every thread, user + system) in seconds. */
static double cpu_seconds(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + (double)u.ru_stime.tv_sec +
         u.ru_stime.tv_usec * 1e-6;
}

static void make_ids(int64_t *ids, size_t n) {
  double *cdf = xcalloc(VOCABULARY, sizeof *cdf), sum = 0;
  for (int64_t k = 0; k < VOCABULARY; k++) cdf[k] = sum += pow((double)(k + 1), -ZIPF_S);
  uint64_t s = 11;
  for (size_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(s >> 11) / (double)(1ull << 53) * sum;
    int64_t lo = 0, hi = VOCABULARY - 1;
    while (lo < hi) {
      int64_t mid = (lo + hi) / 2;
      if (cdf[mid] < u) lo = mid + 1;
      else hi = mid;
    }
    ids[i] = (int64_t)((uint64_t)lo * 999983u % VOCABULARY); /* 999983 is prime */
  }
  free(cdf);
}

/* Unique ids of one step (all replicas). */
static int64_t unique_ids(const int64_t *ids, size_t n, unsigned char *seen) {
  int64_t unique = 0;
  for (size_t i = 0; i < n; i++)
    if (!seen[ids[i]]) seen[ids[i]] = 1, unique++;
  for (size_t i = 0; i < n; i++) seen[ids[i]] = 0;
  return unique;
}

/* Each row's summed gradient of one step as the engine forms it in float: per replica
 * GRADIENT once per occurrence, then the replicas' sums in replica order. */
static void step_gradients(const int64_t *ids, int replicas, float *grad) {
  float *part = xcalloc(VOCABULARY, sizeof *part);
  for (int r = 0; r < replicas; r++) {
    const int64_t *mine = ids + (size_t)r * IDS;
    for (int i = 0; i < IDS; i++) part[mine[i]] += GRADIENT;
    for (int i = 0; i < IDS; i++) grad[mine[i]] += part[mine[i]], part[mine[i]] = 0;
  }
  free(part);
}

/* Step 0 from a zero table: every row held here against Adagrad written out (rows not
 * looked up stay 0). Returns the number of wrong rows. */
static int64_t check_first_step(tpu_system *system, const float *grad, int task, int local) {
  float *rows = xcalloc((size_t)VOCABULARY * DIM, sizeof *rows);
  size_t n;
  CHECK_DOING(tpu_embedding_retrieve(system, 0, 0, 0, VOCABULARY, rows, (size_t)VOCABULARY * DIM, &n),
              "retrieving the table");
  int64_t wrong = 0;
  for (int64_t row = 0; row < VOCABULARY; row++) {
    int core;
    int64_t shard_row;
    CHECK(tpu_embedding_row_owner(system, 0, row, &core, &shard_row));
    if (core / local != task) continue;
    const float g = grad[row], a = INITIAL_ACCUMULATOR + g * g;
    const float want = g != 0 ? 0.0f - LR * g / sqrtf(a) : 0.0f;
    for (int j = 0; j < DIM; j++)
      if (fabsf(rows[row * DIM + j] - want) > 1e-6f * fabsf(want)) {
        if (!wrong)
          fprintf(stderr, "tpurt bench: row %lld (gradient %g) holds %g at %d, not %g\n",
                  (long long)row, g, rows[row * DIM + j], j, want);
        wrong++;
        break;
      }
  }
  free(rows);
  return wrong;
}

int bench_embedding(int replicas, long fixed_steps, int pinning, int check) {
  const char *in_tasks = getenv("TPURT_BENCH_TASKS");
  char json[1024];
  snprintf(json, sizeof json,
           "{\"table_descriptor\": [{\"name\": \"table\", \"vocabulary_size\": %d, \"dimension\": %d,"
           " \"optimization_parameters\": {\"learning_rate\": {\"constant\": %g},"
           " \"adagrad\": {\"initial_accumulator\": %g}}}],"
           " \"feature_descriptor\": [{\"name\": \"ids\", \"table_id\": 0, \"input_shape\": [%d]}],"
           " \"mode\": \"TRAINING\"}",
           VOCABULARY, DIM, (double)LR, (double)INITIAL_ACCUMULATOR, IDS);
  /* In a task of --tasks: the launcher's TPURT_NUM_CORES cores each, all tasks' replicas. */
  tpu_system *system = start_embedding_system(in_tasks ? 0 : replicas, json, pinning);
  int tasks, task, local;
  CHECK(tpu_system_num_tasks(system, &tasks));
  CHECK(tpu_system_task_id(system, &task));
  CHECK(tpu_system_num_cores(system, &local));
  const int R = local * tasks;
  char *transport = system_string(tpu_system_transport, system, "reading the transport");
  bench_memcpy_probe *probe = bench_memcpy_probe_new();
  bench_memcpy_probe_run(probe, 1); /* warms up */

  const size_t per_batch = (size_t)R * IDS;
  int64_t *ids = xcalloc(per_batch * BATCHES, sizeof *ids), *iota = xcalloc(IDS, sizeof *iota);
  make_ids(ids, per_batch * BATCHES);
  for (int i = 0; i < IDS; i++) iota[i] = i;
  unsigned char *seen = xcalloc(VOCABULARY, 1);
  float *grad0 = xcalloc(VOCABULARY, sizeof *grad0);
  int64_t unique[BATCHES];
  for (int b = 0; b < BATCHES; b++) unique[b] = unique_ids(ids + b * per_batch, per_batch, seen);
  step_gradients(ids, R, grad0);

  float *g = xcalloc((size_t)IDS * DIM, sizeof *g);
  for (size_t i = 0; i < (size_t)IDS * DIM; i++) g[i] = GRADIENT;
  const int64_t gdims[2] = {IDS, DIM};
  emb_run run = {.replicas = R, .ids = ids, .iota = iota,
                 .phase_us = xcalloc((size_t)R * PHASES, sizeof(double))};
  CHECK(tpu_tensor_create(TPU_FLOAT, gdims, 2, g, (size_t)IDS * DIM * sizeof *g, &run.gradient));
  free(g);

  const int printer = task == 0;
  if (printer) {
    printf("# tpurt bench --embedding: table %d x %d float32, Adagrad; %d replicas x %d ids a step "
           "(Zipf s=%.2f, %d batches cycled)\n", VOCABULARY, DIM, R, IDS, ZIPF_S, BATCHES);
    if (tasks > 1) printf("# %d tasks of %d core(s), transport %s\n", tasks, local, transport);
  }
  /* Step 0, checked. */
  run.batch = 0;
  CHECK_DOING(tpu_replicate(system, emb_step, &run, R, 0, NULL, 0, NULL, NULL), "running a step");
  int64_t wrong = check ? check_first_step(system, grad0, task, local) : 0;
  if (check && printer)
    printf("# step 0 from a zero table against Adagrad written out: %s\n", wrong ? "WRONG" : "ok");

  for (int s = 1; s <= WARMUP_STEPS; s++) {
    run.batch = s % BATCHES;
    CHECK_DOING(tpu_replicate(system, emb_step, &run, R, 0, NULL, 0, NULL, NULL), "running a step");
  }
  /* Timed steps: fixed, or until TARGET_SECONDS (every task runs the same count: the
   * first task's clock decides, by the count it would reach, agreed in advance). */
  long steps = fixed_steps;
  double t_probe = now_seconds();
  if (!steps) {
    for (int s = 0; s < MIN_STEPS; s++) {
      run.batch = s % BATCHES;
      CHECK_DOING(tpu_replicate(system, emb_step, &run, R, 0, NULL, 0, NULL, NULL), "running a step");
    }
    steps = (long)(TARGET_SECONDS / ((now_seconds() - t_probe) / MIN_STEPS));
    if (steps < MIN_STEPS) steps = MIN_STEPS;
    if (tasks > 1) steps = MIN_STEPS * 20; /* tasks must agree without talking: fixed */
  }
  double *step_us = xcalloc((size_t)steps, sizeof *step_us);
  double (*phase)[PHASES] = xcalloc((size_t)steps, sizeof *phase); /* slowest local replica */
  const double row_bytes = DIM * sizeof(float);
  const int rounds = steps < ROUNDS ? (int)steps : ROUNDS;
  double round_memcpy[ROUNDS], round_pct[ROUNDS];
  int64_t lookups = 0, updates = 0;
  double elapsed = 0, cpu = 0;
  long s = 0;
  for (int k = 0; k < rounds; k++) {
    round_memcpy[k] = bench_memcpy_probe_run(probe, MEMCPY_COPIES);
    const long end = steps * (k + 1) / rounds;
    int64_t round_bytes = 0;
    double t0 = now_seconds(), cpu0 = cpu_seconds();
    for (; s < end; s++) {
      run.batch = (int)(s % BATCHES);
      double ts = now_seconds();
      CHECK_DOING(tpu_replicate(system, emb_step, &run, R, 0, NULL, 0, NULL, NULL), "running a step");
      step_us[s] = (now_seconds() - ts) * 1e6;
      for (int r = task * local; r < task * local + local; r++)
        for (int p = 0; p < PHASES; p++)
          if (run.phase_us[(size_t)r * PHASES + p] > phase[s][p]) phase[s][p] = run.phase_us[(size_t)r * PHASES + p];
      lookups += (int64_t)per_batch;
      updates += unique[run.batch];
      round_bytes += (int64_t)per_batch + 4 * unique[run.batch];
    }
    const double t = now_seconds() - t0;
    elapsed += t, cpu += cpu_seconds() - cpu0;
    round_pct[k] = 100 * (double)round_bytes * row_bytes / t / 1e9 / round_memcpy[k];
  }
  bench_memcpy_probe_free(probe);
  const double bytes = (double)lookups * row_bytes + (double)updates * 4 * row_bytes;
  const double gbps = bytes / elapsed / 1e9;
  double memcpy_sorted[ROUNDS];
  memcpy(memcpy_sorted, round_memcpy, sizeof round_memcpy);
  qsort(memcpy_sorted, (size_t)rounds, sizeof *memcpy_sorted, compare_doubles);
  const double memcpy_gbps = memcpy_sorted[rounds / 2];
  qsort(round_pct, (size_t)rounds, sizeof *round_pct, compare_doubles);
  const double pct = round_pct[rounds / 2];
  if (printer) {
    printf("# memcpy bandwidth B = %.2f GB/s: median of %d runs (each the best of %d copies of 64 MiB,\n"
           "#   one thread, bytes read + written), one before each of %d rounds of steps; %.2f-%.2f GB/s\n",
           memcpy_gbps, rounds, MEMCPY_COPIES, rounds, memcpy_sorted[0], memcpy_sorted[rounds - 1]);
    printf("# %% of memcpy: the median of the rounds' GB/s moved / their memcpy (%.1f%%-%.1f%%)\n",
           round_pct[0], round_pct[rounds - 1]);
    double *col = xcalloc((size_t)steps, sizeof *col), med[PHASES];
    for (int p = 0; p < PHASES; p++) {
      for (long s = 0; s < steps; s++) col[s] = phase[s][p];
      qsort(col, (size_t)steps, sizeof *col, compare_doubles);
      med[p] = col[steps / 2];
    }
    memcpy(col, step_us, (size_t)steps * sizeof *col);
    qsort(col, (size_t)steps, sizeof *col, compare_doubles);
    const double step_med = col[steps / 2];
    printf("# %ld steps in %.3f s; per step %.0f lookups, %.0f unique rows updated\n", steps, elapsed,
           (double)lookups / steps, (double)updates / steps);
    printf("%-24s %14.0f\n%-24s %14.0f\n", "lookups/s", lookups / elapsed, "updates/s",
           updates / elapsed);
    printf("%-24s %14.3f  (%.1f%% of memcpy %.2f GB/s)\n", "GB/s moved", gbps, pct, memcpy_gbps);
    printf("%-24s %14.1f\n", "step us (median)", step_med);
    double in_phases = 0;
    for (int p = 0; p < PHASES; p++) {
      printf("%-24s %14.1f\n", phase_names[p], med[p]);
      in_phases += med[p];
    }
    printf("%-24s %14.1f  (step end: updates, runtime)\n", "rest", step_med - in_phases);
    /* Below the step time times the CPUs: the threads waited, for each other or for
     * CPUs other processes hold. */
    printf("%-24s %14.1f  (this process, all threads, mean)\n", "CPU us a step", cpu / steps * 1e6);
    printf("csv:steps_per_s,lookups_per_s,updates_per_s,GBps,memcpy_GBps,pct_of_memcpy\n"
           "csv:%.2f,%.0f,%.0f,%.4f,%.3f,%.2f\n", steps / elapsed, lookups / elapsed,
           updates / elapsed, gbps, memcpy_gbps, pct);
    free(col);
  }
  CHECK(tpu_tensor_release(run.gradient));
  CHECK(tpu_system_release(system));
  free(step_us), free(phase), free(ids), free(iota), free(seen), free(grad0), free(run.phase_us);
  free(transport);
  if (wrong) {
    fprintf(stderr, "tpurt bench: %lld rows wrong after the first step\n", (long long)wrong);
    return 1;
  }
  return 0;
}
