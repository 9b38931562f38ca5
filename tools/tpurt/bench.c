/* tpurt bench: an nccl-tests-style sweep of one collective over message sizes.
 *
 * Method, the same as the MPI_Allreduce anchor bench/compare.sh runs: one
 * tpu_replicate step per size.
 * Each replica creates its input once, warms up, agrees with the others on an
 * iteration count, then times a loop of calls with CLOCK_MONOTONIC; time = mean per
 * call, max over replicas. The last call's output is checked element by element. */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#define FIXED_WARMUP 3
#define PROGRESS_BYTES ((size_t)1 << 20)
#define PROGRESS_REPLICAS 64
#define MAX_SIZES 64 /* factor >= 2 and sizes <= 2^40 give at most 42 */

/* What a step's computation reads (shared) and writes (one slot per replica). */
typedef struct bench_step {
  const bench_config *cfg;
  const bench_data *data;
  size_t count;
  bench_result *results;
} bench_step;

/* Replaces *v by its maximum over all participants (every core of every replica), so
 * they all pick the same counts. */
static tpu_status agree_max(tpu_replica_context *ctx, double *v) {
  tpu_tensor *x = NULL, *y = NULL;
  const void *p;
  tpu_collective_options everyone = TPU_COLLECTIVE_OPTIONS_INIT;
  everyone.group_mode = TPU_GROUP_MODE_FLATTENED_ID;
  RETURN_IF_ERROR(tpu_tensor_create(TPU_DOUBLE, NULL, 0, v, sizeof *v, &x));
  tpu_status status = tpu_all_reduce(ctx, x, TPU_REDUCE_MAX, NULL, &y, &everyone);
  if (status == TPU_OK) status = tpu_tensor_data(y, &p);
  if (status == TPU_OK) memcpy(v, p, sizeof *v);
  return first_error(status, first_error(tpu_tensor_release(y), tpu_tensor_release(x)));
}

/* Calls the collective `iters` times and releases each output, except the last one
 * when `last` is not NULL. *seconds gets the mean time per call. */
static tpu_status run_calls(tpu_replica_context *ctx, const bench_step *step, const tpu_tensor *x,
                            long iters, double *seconds, tpu_tensor **last) {
  double t0 = now_seconds();
  for (long it = 0; it < iters; it++) {
    tpu_tensor *out = NULL;
    RETURN_IF_ERROR(step->cfg->coll->call(ctx, x, step->cfg, &out));
    if (last && it == iters - 1)
      *last = out;
    else
      RETURN_IF_ERROR(tpu_tensor_release(out));
  }
  *seconds = (now_seconds() - t0) / (double)iters;
  return TPU_OK;
}

static long clamp_long(double v, long lo, long hi) {
  return v < (double)lo ? lo : v > (double)hi ? hi : (long)v;
}

/* Warms up and picks the timed loop's length: -n, or doubling batches until a tenth
 * of the target has passed (a first call may take a millisecond while the workers
 * settle, so a count derived from it warms up too little); the last batch's mean
 * sizes the loop to about target_seconds. agree_max keeps the replicas' counts equal. */
static tpu_status warm_up(tpu_replica_context *ctx, const bench_step *step, const tpu_tensor *x,
                          long *iters) {
  const bench_config *cfg = step->cfg;
  double per_call = 0, spent = 0;
  if (cfg->fixed_iters) {
    *iters = cfg->fixed_iters;
    return run_calls(ctx, step, x, FIXED_WARMUP, &per_call, NULL);
  }
  /* First the calls that grow the library's caches to their steady state (a shared
   * result needs a second buffer while the first is still held): a batch sized by
   * them would be timed with page faults in it. */
  RETURN_IF_ERROR(run_calls(ctx, step, x, FIXED_WARMUP, &per_call, NULL));
  for (long batch = 1; spent < 0.1 * cfg->target_seconds && batch <= 1L << 20; batch *= 2) {
    RETURN_IF_ERROR(run_calls(ctx, step, x, batch, &per_call, NULL));
    RETURN_IF_ERROR(agree_max(ctx, &per_call));
    spent += per_call * (double)batch;
  }
  *iters = clamp_long(cfg->target_seconds / (per_call > 1e-7 ? per_call : 1e-7), 5, 200000);
  return TPU_OK;
}

static tpu_status bench_computation(tpu_replica_context *ctx, tpu_tensor *const *inputs,
                                    int num_inputs, tpu_tensor **outputs, int num_outputs,
                                    void *user_data) {
  (void)inputs, (void)num_inputs, (void)outputs, (void)num_outputs;
  const bench_step *step = user_data;
  int r, c, k;
  RETURN_IF_ERROR(tpu_replica_context_replica_id(ctx, &r));
  RETURN_IF_ERROR(tpu_replica_context_logical_core(ctx, &c));
  const int cores = step->cfg->cores_per_replica;
  switch (step->cfg->coll_options.group_mode) {  /* the position in the mode's group */
    case TPU_GROUP_MODE_CROSS_REPLICA: k = r; break;
    case TPU_GROUP_MODE_CROSS_PARTITION: k = c; break;
    default: k = r * cores + c; break;
  }
  bench_result *result = &step->results[r * cores + c];
  tpu_tensor *x = NULL, *last = NULL;
  RETURN_IF_ERROR(bench_make_input(step->cfg, step->data, k, step->count, &x));
  tpu_status status = warm_up(ctx, step, x, &result->iters);
  if (status == TPU_OK) status = tpu_barrier(ctx, NULL);  /* start the timed loops together */
  if (status == TPU_OK)
    status = run_calls(ctx, step, x, result->iters, &result->seconds_per_call, &last);
  if (status == TPU_OK && step->cfg->check)
    status = bench_count_wrong(step->cfg, step->data, k, step->count, last, &result->wrong);
  return first_error(status, first_error(tpu_tensor_release(last), tpu_tensor_release(x)));
}

/* Input elements per replica for `bytes`, rounded up: whole elements, and a multiple
 * of the group size where the collective splits its input. */
static size_t element_count(const bench_config *cfg, size_t bytes) {
  size_t count = (bytes + cfg->elem_size - 1) / cfg->elem_size, n = (size_t)cfg->group_size;
  if (cfg->coll->split) count = (count + n - 1) / n * n;
  return count;
}

static void print_header(const bench_config *cfg, double memcpy_gbps, double floor_us) {
  int n = cfg->group_size, groups = cfg->replicas / cfg->group_size;
  const bench_collective *coll = cfg->coll;
  double ceiling = memcpy_gbps * coll->ceiling(n);
  /* Results shared per group (the default) are written once; the collectives that
   * never share one have the private ceiling in both modes. */
  double shared_ceiling = coll->ceiling_shared ? memcpy_gbps * coll->ceiling_shared(n) : ceiling;
  const char *shared_formula = coll->ceiling_shared ? coll->ceiling_shared_formula : coll->ceiling_formula;
  if (cfg->csv) {
    /* busbw_ceiling_GBps: private results (--private, and tasks); _shared_: the default. */
    printf("# collective=%s,replicas=%d,cpus=%d,memcpy_GBps=%.3f,busbw_ceiling_GBps=%.3f,"
           "busbw_ceiling_shared_GBps=%.3f,meeting_floor_us=%.3f,private_results=%d,"
           "cores_per_replica=%d,group_mode=%s,group_size=%d\n",
           coll->name, cfg->replicas, online_cpus(), memcpy_gbps, ceiling, shared_ceiling,
           floor_us, cfg->private_results, cfg->cores_per_replica, cfg->group_mode_name, n);
    if (cfg->tasks) printf("# tasks=%d,transport=%s\n", cfg->tasks, cfg->transport);
    printf("size,count,type,redop,time_us,algbw_GBps,busbw_GBps,wrong\n");
    return;
  }
  printf("# tpurt bench: %s, %d replicas (logical cores) on %d CPUs, runtime %s\n",
         coll->name, cfg->replicas, online_cpus(), tpu_version());
  if (cfg->cores_per_replica > 1 || cfg->coll_options.group_mode != TPU_GROUP_MODE_CROSS_REPLICA)
    printf("# %d replicas of %d cores; group mode %s: %d group(s) of %d, at once\n",
           cfg->replicas / cfg->cores_per_replica, cfg->cores_per_replica,
           cfg->group_mode_name, groups, n);
  if (cfg->fixed_iters)
    printf("# iterations: %ld per size after %d warm-up\n", cfg->fixed_iters, FIXED_WARMUP);
  else
    printf("# iterations: adaptive, timed loop ~%.2f s per size (at least 5), after warm-up\n",
           cfg->target_seconds);
  printf("# time: mean per call, max over replicas; size: per-replica input; algbw = size/time;\n"
         "# busbw = %s; GB = 1e9 B\n", coll->bus_formula);
  printf("# memcpy bandwidth B = %.2f GB/s (64 MiB, one thread, bytes read + written)\n",
         memcpy_gbps);
  printf("# results: %s\n", cfg->private_results
             ? "a private copy per replica (--private)"
             : "one buffer shared by each group's members (copy-on-write)");
  printf("# reading each input it needs once and writing its output, %s cannot beat, once the\n"
         "# data outgrow the caches (P = %d):\n"
         "#   busbw = %s = %.2f GB/s with a private copy per replica (--private)%s\n"
         "#   busbw = %s = %.2f GB/s with one result shared per group (default)%s\n",
         coll->name, n, coll->ceiling_formula, ceiling, cfg->private_results ? "  <- this run" : "",
         shared_formula, shared_ceiling, cfg->private_results ? "" : "  <- this run");
  if (cfg->tasks)
    printf("# meeting floor: not measured (the replicas are in %d tasks)\n#\n", cfg->tasks);
  else if (groups > 1)
    printf("# meeting floor: not measured (%d groups meet at once)\n#\n", groups);
  else if (floor_us < 0)
    printf("# meeting floor: could not be measured (threads could not start)\n#\n");
  else
    printf("# meeting floor: %d bare threads meet at a barrier in %.2f us, waiting as tpurt does\n"
           "# with no tpurt code; no collective among %d replicas can take less\n#\n",
           n, floor_us, n);
  printf("# %10s  %10s  %9s  %6s  %11s  %11s  %11s  %6s\n", "size", "count", "type", "redop",
         "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
}

static void print_row(const bench_config *cfg, size_t bytes, size_t count, double seconds,
                      int64_t wrong) {
  double algbw = (double)bytes / seconds / 1e9;
  double busbw = algbw * cfg->coll->bus_factor(cfg->group_size);
  const char *redop = cfg->coll->reduces ? cfg->op_name : "none";
  char wrong_text[32] = "N/A";
  if (cfg->check) snprintf(wrong_text, sizeof wrong_text, "%lld", (long long)wrong);
  if (cfg->csv)
    printf("%zu,%zu,%s,%s,%.3f,%.4f,%.4f,%s\n", bytes, count, cfg->dtype_name, redop,
           seconds * 1e6, algbw, busbw, wrong_text);
  else
    printf("  %10zu  %10zu  %9s  %6s  %11.2f  %11.3f  %11.3f  %6s\n", bytes, count,
           cfg->dtype_name, redop, seconds * 1e6, algbw, busbw, wrong_text);
  fflush(stdout);
}

/* Progress on stderr for the slow steps (large sizes, or more replicas than a quick
 * step allows): one overwritten line on a terminal, else one line per size. */
static void progress(const bench_config *cfg, size_t bytes, int done) {
  static int tty = -1;
  char human[32];
  if (bytes < PROGRESS_BYTES && cfg->replicas <= PROGRESS_REPLICAS) return;
  if (tty < 0) tty = isatty(STDERR_FILENO);
  if (done) {
    if (tty) fputs("\r\033[K", stderr);
  } else {
    fprintf(stderr, tty ? "tpurt bench: %s %s ...\r" : "tpurt bench: %s %s ...\n",
            cfg->coll->name, format_bytes((double)bytes, human, sizeof human));
  }
}

static double physical_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (double)pages * (double)page : 1e18;
}

/* The requested sizes, ascending: -e and its quotients by the factor down to -b, then
 * -b itself if the quotients miss it. Anchored at -e, so the sizes quoted most (the
 * largest, usually powers of two: 1 MiB, 16 MiB) are measured, and both ends are. */
static int sweep_sizes(const bench_config *cfg, size_t *sizes) {
  size_t down[MAX_SIZES];
  int n = 0;
  for (size_t b = cfg->max_bytes; b >= cfg->min_bytes && n < MAX_SIZES - 1; b /= (size_t)cfg->factor)
    down[n++] = b;
  if (down[n - 1] != cfg->min_bytes) down[n++] = cfg->min_bytes;
  for (int i = 0; i < n; i++) sizes[i] = down[n - 1 - i];
  return n;
}

/* Every size the bench measures differently from the request is announced (the row
 * shows the size measured): elements are whole, and split collectives need a multiple
 * of the replica count. */
static void note_rounding(const bench_config *cfg, size_t requested, size_t measured,
                          int repeated) {
  char why[128];
  if (measured == requested) return;
  if (cfg->coll->split)
    snprintf(why, sizeof why, "a multiple of %d whole %s elements (%s splits its input over "
             "the group)", cfg->group_size, cfg->dtype_name, cfg->coll->name);
  else
    snprintf(why, sizeof why, "whole %s elements", cfg->dtype_name);
  fprintf(stderr, "tpurt bench: %zu B rounded up to %zu B, %s%s\n", requested, measured, why,
          repeated ? "; measured already" : "");
}

/* The group size of the mode's default groups (tpu_group_mode) among cfg->replicas
 * cores in replicas of cfg->cores_per_replica, and the permute's ring over a group. */
static void set_groups(bench_config *cfg) {
  int k = cfg->cores_per_replica, n = cfg->replicas;
  if (n % k)
    usage_error("bench", "--cores-per-replica %d does not divide the %d cores", k, n);
  switch (cfg->coll_options.group_mode) {
    case TPU_GROUP_MODE_CROSS_REPLICA: cfg->group_size = n / k; break;
    case TPU_GROUP_MODE_CROSS_PARTITION: cfg->group_size = k; break;
    default: cfg->group_size = n; break;
  }
  free(cfg->permute_pairs);
  cfg->permute_pairs = xcalloc((size_t)cfg->group_size * 2, sizeof *cfg->permute_pairs);
  for (int p = 0; p < cfg->group_size; p++) {  /* the ring p -> p+1 */
    cfg->permute_pairs[2 * p] = p;
    cfg->permute_pairs[2 * p + 1] = (p + 1) % cfg->group_size;
  }
}

/* One task of `tpurt bench --tasks N` (under tpurt launch, or mpirun for --transport
 * mpi): the system spans every task, the replicas are all their cores, and task 0
 * alone prints. The output names the transport the library chose, never the one asked
 * for: a --transport the library did not choose ends the task with exit 1. */
static tpu_system *start_task(bench_config *cfg) {
  tpu_system_options options = TPU_SYSTEM_OPTIONS_INIT;
  tpu_system *system = NULL;
  options.pin_threads = cfg->pinning;
  options.private_collective_results = cfg->private_results;
  CHECK_DOING(tpu_initialize_tpu_system(NULL, &options, NULL, &system, NULL),
              "cannot join the tasks' system");
  int local, tasks, task;
  CHECK(tpu_system_num_cores(system, &local));
  CHECK(tpu_system_num_tasks(system, &tasks));
  CHECK(tpu_system_task_id(system, &task));
  cfg->replicas = local * tasks;
  set_groups(cfg);
  /* Every task checks: they all run the same transport, and a task that stopped
   * quietly would leave the others' messages to a race with the launcher's SIGTERM. */
  char *transport = system_string(tpu_system_transport, system, "reading the transport");
  char *reason = system_string(tpu_system_transport_reason, system, "reading why that transport");
  const char *requested = getenv("TPURT_BENCH_TRANSPORT");
  if (requested && strcmp(requested, transport)) {
    fprintf(stderr, "tpurt bench: task %d: --transport %s was asked for, but the library chose "
            "%s (%s); not measuring %s under the name %s\n", task, requested, transport, reason,
            transport, requested);
    exit(1);
  }
  if (task != 0 && !freopen("/dev/null", "w", stdout)) exit(1);
  cfg->tasks = tasks;
  cfg->transport = transport;
  const char *launcher = requested && !strcmp(requested, "mpi") ? "mpirun" : "tpurt launch";
  printf("# %d tasks of %d core(s) on this host, transport %s (%s), started by %s\n", tasks,
         local, transport, reason, launcher);
  free(reason);
  return system;
}

static int run_sweep(const bench_config *cfg_in) {
  bench_config copy = *cfg_in, *cfg = &copy;
  const int tasks = getenv("TPURT_BENCH_TASKS") != NULL;
  tpu_system *system = tasks ? start_task(cfg) : NULL;
  if (!tasks) set_groups(cfg);
  int n = cfg->replicas, g = cfg->group_size;
  const bench_collective *coll = cfg->coll;
  size_t sizes[MAX_SIZES];
  int num_sizes = sweep_sizes(cfg, sizes);
  check_environment();  /* before the reference measurements, which take a while */
  bench_data data;
  bench_data_init(&data, cfg);
  bench_result *results = xcalloc((size_t)n, sizeof *results);
  /* The meeting floor is of threads in one process: no floor for tasks. */
  print_header(cfg, bench_memcpy_bandwidth(),
               tasks || g < n ? -1 : bench_meeting_floor_us(n));
  if (!tasks) {
    tpu_system_options options = TPU_SYSTEM_OPTIONS_INIT;
    options.num_cores = n;
    options.pin_threads = cfg->pinning;
    options.private_collective_results = cfg->private_results;
    CHECK_DOING(tpu_system_init(&options, &system), "cannot start a system");
  }
  int cores;
  tpu_device_assignment *assignment =
      assign_replicas(system, cfg->cores_per_replica, "bench", &cores);
  tpu_step_options step_options = TPU_STEP_OPTIONS_INIT;
  step_options.device_assignment = assignment;

  int64_t total_wrong = 0;
  size_t previous = 0;
  for (int i = 0; i < num_sizes; i++) {
    size_t count = element_count(cfg, sizes[i]);
    size_t in_bytes = count * cfg->elem_size;
    note_rounding(cfg, sizes[i], in_bytes, count == previous);
    if (count == previous) continue;
    previous = count;
    size_t out_bytes = coll->gathers ? in_bytes * g : coll->scatters ? in_bytes / g : in_bytes;
    double need = (double)n * (double)(in_bytes + out_bytes);
    if (need > physical_memory() / 2) {
      char human[32];
      fprintf(stderr, "tpurt bench: stopping before %zu bytes: the step needs %s, more than "
              "half of the memory\n", in_bytes, format_bytes(need, human, sizeof human));
      break;
    }
    memset(results, 0, (size_t)n * sizeof *results);
    bench_step step = {cfg, &data, count, results};
    progress(cfg, in_bytes, 0);
    CHECK(tpu_replicate(system, bench_computation, &step, n / cfg->cores_per_replica, 0, NULL,
                        0, NULL, &step_options));
    progress(cfg, in_bytes, 1);
    double slowest = 0;
    int64_t wrong = 0;
    for (int r = 0; r < n; r++) {
      if (results[r].seconds_per_call > slowest) slowest = results[r].seconds_per_call;
      wrong += results[r].wrong;
    }
    print_row(cfg, in_bytes, count, slowest, wrong);
    total_wrong += wrong;
  }

  CHECK(tpu_device_assignment_release(assignment));
  CHECK(tpu_system_release(system));
  free(cfg->transport);
  free(cfg->permute_pairs);
  free(results);
  bench_data_free(&data);
  if (total_wrong) {
    fprintf(stderr, "tpurt bench: %lld wrong elements\n", (long long)total_wrong);
    return 1;
  }
  return 0;
}

static const char bench_usage[] =
    "usage: tpurt bench [options]\n"
    "An nccl-tests-style sweep of one collective over message sizes, every result checked.\n"
    "\n"
    "  -c, --collective C   all_reduce (default), cross_replica_sum, all_gather,\n"
    "                       reduce_scatter, all_to_all, collective_permute, broadcast,\n"
    "                       empty (= --step)\n"
    "  -b, --minbytes MIN   smallest per-replica input, K/M/G suffixes (default 8)\n"
    "  -e, --maxbytes MAX   largest per-replica input, measured (default 64M); the sizes\n"
    "                       are MAX, MAX/F, MAX/F^2, ... down to MIN, and MIN\n"
    "  -f, --stepfactor F   size ratio between rows (default 4)\n"
    "  -r, --replicas R     replicas = logical cores (default: online CPUs); with\n"
    "                       --cores-per-replica K, R/K replicas of K cores\n"
    "  --cores-per-replica K  cores of each replica (default 1): participant (replica\n"
    "                       r, core c) runs on core r*K + c\n"
    "  --group-mode M       the collectives' group mode, with its default groups:\n"
    "                       cross-replica (default; the replicas, one group per logical\n"
    "                       core), cross-partition (the K cores of each replica),\n"
    "                       cross-replica-and-partition or flattened (everyone)\n"
    "  -d, --datatype T     float32 (default), float64, bfloat16, float16, int8, int16,\n"
    "                       int32, int64, uint8, uint32, uint64\n"
    "  -o, --op OP          sum (default), prod, min, max, mean\n"
    "  -n, --iters N        fixed iterations per size (default: adaptive, ~0.3 s)\n"
    "  --pin MODE           worker pinning: auto (default), always, never\n"
    "  --private            a private copy of each result per replica (default: one\n"
    "                       buffer shared by a group's members, copy-on-write)\n"
    "  --csv                comma-separated rows instead of the table\n"
    "  --check, --no-check  verify the last call's output, exit 1 if wrong (default on)\n"
    "  --step               median time of an empty replicated step instead\n"
    "  --tasks N            run the sweep across N local tasks (processes), started by\n"
    "                       tpurt launch (mpirun for --transport mpi), over the transport\n"
    "                       the library chooses, which the output names with the reason;\n"
    "                       -r is ignored\n"
    "  --cores-per-task C   cores of each task with --tasks (default 1)\n"
    "  --transport T        with --tasks: how the tasks exchange data, tcp or shm (under\n"
    "                       tpurt launch) or mpi (under mpirun --oversubscribe on\n"
    "                       loopback; needs mpirun and the plugin libtpurt_mpi.so from\n"
    "                       `make mpi`, or TPURT_MPI_PLUGIN); sets TPURT_TRANSPORT for\n"
    "                       the tasks, and fails (exit 1) if the library chooses\n"
    "                       another (default: the environment's TPURT_TRANSPORT, auto\n"
    "                       if unset)\n"
    "  --timeout SECONDS    with --tasks: stop the tasks and fail after SECONDS\n"
    "                       (default 3600)\n"
    "  --embedding          instead: the embedding engine's step on a 1M x 64 float32\n"
    "                       table with Adagrad, 1024 Zipf-distributed ids per replica\n"
    "                       (-r, default 8; with --tasks, --cores-per-task each) per\n"
    "                       step: lookups/s, updates/s (unique rows) and the bytes moved\n"
    "                       per second against the memcpy bandwidth, with per-phase\n"
    "                       times; -n steps (default: ~2 s); the first step is checked\n"
    "  -h, --help           this text\n"
    "A size that is not a whole number of elements (or, for reduce_scatter and\n"
    "all_to_all, of R elements) is rounded up, with a note on stderr; rows show the\n"
    "size measured.\n";

enum { OPT_PIN = 256, OPT_CSV, OPT_CHECK, OPT_NO_CHECK, OPT_STEP, OPT_PRIVATE, OPT_TASKS,
       OPT_CORES_PER_TASK, OPT_TRANSPORT, OPT_TIMEOUT, OPT_CORES_PER_REPLICA, OPT_GROUP_MODE,
       OPT_EMBEDDING };

/* --timeout's default: a bound on a whole sweep of tasks, far above a normal one. */
#define TASKS_TIMEOUT_DEFAULT 3600

static int cmd_bench(int argc, char **argv) {
  static const struct option longopts[] = {
      {"collective", required_argument, NULL, 'c'}, {"minbytes", required_argument, NULL, 'b'},
      {"maxbytes", required_argument, NULL, 'e'},   {"stepfactor", required_argument, NULL, 'f'},
      {"replicas", required_argument, NULL, 'r'},   {"datatype", required_argument, NULL, 'd'},
      {"op", required_argument, NULL, 'o'},         {"iters", required_argument, NULL, 'n'},
      {"pin", required_argument, NULL, OPT_PIN},    {"csv", no_argument, NULL, OPT_CSV},
      {"check", no_argument, NULL, OPT_CHECK},      {"no-check", no_argument, NULL, OPT_NO_CHECK},
      {"step", no_argument, NULL, OPT_STEP},        {"help", no_argument, NULL, 'h'},
      {"private", no_argument, NULL, OPT_PRIVATE},
      {"tasks", required_argument, NULL, OPT_TASKS},
      {"cores-per-task", required_argument, NULL, OPT_CORES_PER_TASK},
      {"transport", required_argument, NULL, OPT_TRANSPORT},
      {"timeout", required_argument, NULL, OPT_TIMEOUT},
      {"cores-per-replica", required_argument, NULL, OPT_CORES_PER_REPLICA},
      {"group-mode", required_argument, NULL, OPT_GROUP_MODE},
      {"embedding", no_argument, NULL, OPT_EMBEDDING},
      {NULL, 0, NULL, 0}};
  long tasks = 0, cores_per_task = 0, timeout = 0;
  const char *transport = NULL;
  bench_config cfg = {.coll = bench_find_collective("all_reduce"),
                      .dtype = TPU_FLOAT,
                      .op = TPU_REDUCE_SUM,
                      .op_name = "sum",
                      .replicas = online_cpus(),
                      .cores_per_replica = 1,
                      .coll_options = TPU_COLLECTIVE_OPTIONS_INIT,
                      .group_mode_name = "cross-replica",
                      .min_bytes = 8,
                      .max_bytes = (size_t)64 << 20,
                      .factor = 4,
                      .target_seconds = 0.3,
                      .check = 1};
  int step = 0, op_given = 0, embedding = 0, replicas_given = 0;
  const char *sweep_option = NULL; /* an option of the sweep, which --embedding refuses */
  for (int c; (c = next_option("bench", argc, argv, "c:b:e:f:r:d:o:n:h", longopts)) != -1;) {
    const char *v = optarg;
    if ((c < 256 && strchr("cbefdo", c)) || c == OPT_CORES_PER_REPLICA ||
        c == OPT_GROUP_MODE || c == OPT_PRIVATE)
      for (const struct option *o = longopts; o->name; o++)
        if (o->val == c) sweep_option = o->name;
    switch (c) {
      case 'c':
        step = !strcmp(v, "empty");
        if (!step && !(cfg.coll = bench_find_collective(v)))
          usage_error("bench", "--collective: unknown collective '%s' (one of: %s)", v,
                      bench_collective_names);
        break;
      case 'b': cfg.min_bytes = parse_bytes("bench", "--minbytes", v); break;
      case 'e': cfg.max_bytes = parse_bytes("bench", "--maxbytes", v); break;
      case 'f': cfg.factor = parse_long("bench", "--stepfactor", v, 2, 1024); break;
      case 'r':
        cfg.replicas = (int)parse_long("bench", "--replicas", v, 1, 4096);
        replicas_given = 1;
        break;
      case 'd':
        if (!bench_parse_dtype(v, &cfg.dtype))
          usage_error("bench", "--datatype: unknown dtype '%s' (float32, float64, bfloat16, "
                      "float16, int8, int16, int32, int64, uint8, uint32, uint64)", v);
        break;
      case 'o':
        if (!bench_parse_op(v, &cfg.op))
          usage_error("bench", "--op: unknown reduction '%s' (sum, prod, min, max, mean)", v);
        cfg.op_name = v;
        op_given = 1;
        break;
      case 'n': cfg.fixed_iters = parse_long("bench", "--iters", v, 1, 100000000); break;
      case OPT_PIN:
        if (!strcmp(v, "auto")) cfg.pinning = TPU_PIN_AUTO;
        else if (!strcmp(v, "always")) cfg.pinning = TPU_PIN_ALWAYS;
        else if (!strcmp(v, "never")) cfg.pinning = TPU_PIN_NEVER;
        else usage_error("bench", "--pin: '%s' is not auto, always or never", v);
        break;
      case OPT_CSV: cfg.csv = 1; break;
      case OPT_CHECK: cfg.check = 1; break;
      case OPT_NO_CHECK: cfg.check = 0; break;
      case OPT_STEP: step = 1; break;
      case OPT_PRIVATE: cfg.private_results = 1; break;
      case OPT_TASKS: tasks = parse_long("bench", "--tasks", v, 1, 1024); break;
      case OPT_CORES_PER_TASK:
        cores_per_task = parse_long("bench", "--cores-per-task", v, 1, 4096);
        break;
      case OPT_TRANSPORT:
        if (!bench_valid_transport(v))
          usage_error("bench", "--transport: unknown transport '%s' (%s)", v,
                      bench_transport_names);
        transport = v;
        break;
      case OPT_TIMEOUT: timeout = parse_long("bench", "--timeout", v, 1, 1000000); break;
      case OPT_CORES_PER_REPLICA:
        cfg.cores_per_replica = (int)parse_long("bench", "--cores-per-replica", v, 1, 4096);
        break;
      case OPT_GROUP_MODE:
        if (!bench_parse_group_mode(v, &cfg.coll_options.group_mode))
          usage_error("bench", "--group-mode: unknown group mode '%s' (%s)", v,
                      bench_group_mode_names);
        cfg.group_mode_name = v;
        break;
      case OPT_EMBEDDING: embedding = 1; break;
      case 'h': return print_usage(bench_usage);
    }
  }
  if (transport && tasks == 0 && !getenv("TPURT_BENCH_TASKS"))
    usage_error("bench", "--transport %s: needs --tasks N (it is how tasks exchange data)",
                transport);
  if (timeout && tasks == 0 && !getenv("TPURT_BENCH_TASKS"))
    usage_error("bench", "--timeout %ld: needs --tasks N (it bounds the tasks)", timeout);
  if (cores_per_task && tasks == 0 && !getenv("TPURT_BENCH_TASKS"))
    usage_error("bench", "--cores-per-task %ld: needs --tasks N (-r sets the replicas of one process)",
                cores_per_task);
  if (!cores_per_task) cores_per_task = 1;
  if (!timeout) timeout = TASKS_TIMEOUT_DEFAULT;
  if (tasks > 0 && !getenv("TPURT_BENCH_TASKS")) {
    if (step) usage_error("bench", "--tasks: --step measures one process");
    return bench_relaunch(argc, argv, tasks, cores_per_task, transport, timeout);
  }
  if (embedding && (step || sweep_option))
    usage_error("bench", "--embedding: measures the embedding step; not with --%s",
                sweep_option ? sweep_option : "step");
  if (embedding)
    return bench_embedding(replicas_given ? cfg.replicas : BENCH_EMBEDDING_REPLICAS,
                           cfg.fixed_iters, cfg.pinning, cfg.check);
  if (step && cfg.cores_per_replica > 1)
    usage_error("bench", "--step: measures replicas of one core (--cores-per-replica %d)",
                cfg.cores_per_replica);
  if (step) return bench_empty_step(&cfg);
  if (cfg.coll_options.group_mode == TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION &&
      !strcmp(cfg.coll->name, "collective_permute"))
    usage_error("bench", "--group-mode cross-replica-and-partition: collective_permute has no "
                "such mode (XLA's rule); use flattened");

  if (cfg.min_bytes > cfg.max_bytes)
    usage_error("bench", "--minbytes %zu is larger than --maxbytes %zu", cfg.min_bytes,
                cfg.max_bytes);
  if (op_given && !cfg.coll->reduces)
    usage_error("bench", "--op: %s does not reduce", cfg.coll->name);
  if (!strcmp(cfg.coll->name, "cross_replica_sum") && cfg.op != TPU_REDUCE_SUM)
    usage_error("bench", "--op: cross_replica_sum always sums (use -c all_reduce -o %s)",
                cfg.op_name);
  CHECK(tpu_dtype_size(cfg.dtype, &cfg.elem_size));
  CHECK(tpu_dtype_name(cfg.dtype, &cfg.dtype_name));

  return run_sweep(&cfg);
}

const tool_command bench_command = {"bench", "nccl-tests-style sweep of one collective",
                                    bench_usage, cmd_bench};
