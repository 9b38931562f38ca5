/* tpurt bench: shared types of the sweep (bench.c), the collectives it measures
 * (bench_ops.c), input patterns and result checks (bench_data.c), the reference
 * measurements (bench_ref.c) and the relaunch as tasks (bench_launch.c). */
#ifndef TPURT_TOOL_BENCH_H
#define TPURT_TOOL_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

/* Input values repeat with this period in the element index, so every expected value
 * comes from a small table. */
#define BENCH_PERIOD 7

typedef struct bench_config bench_config;

/* One measurable collective. Replica k's output is `segments` runs (1, or one per
 * replica when `per_replica_segments`) of equal length; `source` says where a run
 * comes from. */
typedef struct bench_collective {
  const char *name;
  int reduces;              /* -o applies; some runs are reductions over all replicas */
  int split;                /* the input count must be a multiple of the replica count */
  int gathers;              /* the output has replicas times the input's elements */
  int scatters;             /* the output has 1/replicas of the input's elements */
  int per_replica_segments;
  /* nccl-tests' busbw / algbw for n replicas (algbw from the per-replica input). */
  double (*bus_factor)(int n);
  const char *bus_formula;  /* the same, for the header */
  /* The busbw ceiling over the memcpy bandwidth B for n replicas: the least memory
   * traffic of a call (every input it needs read once, every replica's output
   * written) moved at B. */
  double (*ceiling)(int n);
  const char *ceiling_formula;  /* the same, for the header */
  /* The same when the group's members share one result (the default): it is written
   * once, not once per replica. NULL for the collectives whose results are never
   * shared (each replica's differs): their ceiling is the same in both modes. */
  double (*ceiling_shared)(int n);
  const char *ceiling_shared_formula;
  tpu_status (*call)(tpu_replica_context *ctx, const tpu_tensor *x, const bench_config *cfg,
                     tpu_tensor **out);
  /* Run `seg` (of length seg_len) of replica k's output holds the input of replica
   * *src (-1: the reduction over all replicas) from element *start on. */
  void (*source)(int n, int k, int seg, size_t seg_len, int *src, size_t *start);
} bench_collective;

/* Looks a collective up by name (NULL if unknown); bench_collective_names lists
 * them all, for messages. */
const bench_collective *bench_find_collective(const char *name);
extern const char bench_collective_names[];

struct bench_config {
  const bench_collective *coll;
  tpu_dtype dtype;
  size_t elem_size;
  const char *dtype_name;
  tpu_reduce_op op;
  const char *op_name;
  int replicas;             /* participants: the step's logical cores */
  /* --cores-per-replica K and --group-mode: replicas / K replicas of K cores; every
   * collective runs with coll_options.group_mode and the mode's default groups, of
   * group_size participants each. Inputs, checks and bus factors are per group. */
  int cores_per_replica;
  tpu_collective_options coll_options;
  const char *group_mode_name;
  int group_size;
  size_t min_bytes, max_bytes;
  long factor;
  long fixed_iters;         /* 0: adaptive */
  double target_seconds;    /* adaptive: timed loop length per size */
  int csv, check;
  int pinning;              /* tpu_thread_pinning of the system's workers */
  int private_results;      /* tpu_system_options.private_collective_results */
  int32_t *permute_pairs;   /* collective_permute: the ring p -> p+1 of group positions,
                               [group_size][2] */
  int tasks;                /* a task of tpurt bench --tasks: their number; else 0 */
  char *transport;          /* in a task: the transport the library chose (freed) */
};

/* What one replica measured in a step. */
typedef struct bench_result {
  double seconds_per_call;
  long iters;
  int64_t wrong;
} bench_result;

/* The expected data of one sweep, computed once on the host. */
typedef struct bench_data {
  unsigned char *patterns;  /* [replicas][BENCH_PERIOD] encoded input elements */
  double *expected;         /* [replicas + 1][BENCH_PERIOD]: row 0 the reduction,
                               row 1 + r replica r's input, as the dtype holds them */
} bench_data;

/* Parses a --group-mode name into a tpu_group_mode; 0 if unknown. bench_group_mode_names
 * lists them. */
int bench_parse_group_mode(const char *name, int *out);
extern const char bench_group_mode_names[];

/* Parses a dtype name ("float32", "bf16", ...) or a reduction name; 0 if unknown. */
int bench_parse_dtype(const char *name, tpu_dtype *out);
int bench_parse_op(const char *name, tpu_reduce_op *out);

void bench_data_init(bench_data *data, const bench_config *cfg);
void bench_data_free(bench_data *data);

/* Inside a computation: the input of `count` elements of the participant at position
 * k of its group, and the number of elements of its output that differ from the
 * expected values. */
tpu_status bench_make_input(const bench_config *cfg, const bench_data *data, int k, size_t count,
                            tpu_tensor **out);
tpu_status bench_count_wrong(const bench_config *cfg, const bench_data *data, int k,
                             size_t count, const tpu_tensor *output, int64_t *wrong);

/* Reference measurements: memcpy bandwidth in GB/s (bytes read + written), and the
 * empty replicated step. */
double bench_memcpy_bandwidth(void);
/* The same copy as short runs beside other work: buffers of 64 MiB touched once at
 * creation; a run is the best of `copies` copies, in GB/s. */
typedef struct bench_memcpy_probe bench_memcpy_probe;
bench_memcpy_probe *bench_memcpy_probe_new(void);
double bench_memcpy_probe_run(bench_memcpy_probe *p, int copies);
void bench_memcpy_probe_free(bench_memcpy_probe *p);
/* The meeting floor: us per barrier of `threads` bare threads waiting as tpurt does
 * (bench_floor.c), or a negative value if it could not be measured. */
double bench_meeting_floor_us(int threads);
int bench_empty_step(const bench_config *cfg);

/* --tasks (bench_launch.c): the names --transport takes, and the relaunch as `tasks`
 * tasks under tpurt launch, or mpirun for "mpi" (transport NULL: tpurt launch, the
 * environment's TPURT_TRANSPORT left alone), killed after `timeout` seconds. Returns
 * only on failure, with the exit status. */
extern const char bench_transport_names[];
int bench_valid_transport(const char *name);
int bench_relaunch(int argc, char **argv, long tasks, long cores, const char *transport,
                   long timeout);

/* --embedding (bench_embedding.c): the embedding engine's step; replicas of one
 * process (a task of --tasks takes its cores from the launcher), steps 0 for ~2 s,
 * pinning a tpu_thread_pinning, check: verify the first step. The exit status. */
#define BENCH_EMBEDDING_REPLICAS 8
int bench_embedding(int replicas, long steps, int pinning, int check);

#endif /* TPURT_TOOL_BENCH_H */
