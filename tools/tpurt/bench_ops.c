/* The collectives tpurt bench measures: how to call each one, where its output comes
 * from, and its nccl-tests bus-bandwidth factor. All run with the group mode's default
 * groups (one group of every replica by default), n being the group size. */
#include <string.h>

#include "bench.h"

static double bus_all_reduce(int n) { return 2.0 * (n - 1) / n; }
static double bus_spread(int n) { return (double)(n - 1) / n; }
/* all_gather: busbw counts the larger (output) buffer, n times the input. */
static double bus_gather(int n) { return (double)(n - 1); }
static double bus_one(int n) { (void)n; return 1.0; }

/* Ceilings, busbw / B. Per call, with S the per-replica input: all-reduce reads P*S
 * and writes P*S; all-gather reads P*S and writes P*P*S; reduce-scatter reads P*S and
 * writes S; all-to-all and the permute read and write P*S; broadcast reads the
 * root's S and writes P*S. busbw = bus_factor * S / (traffic / B). */
static double ceiling_all_reduce(int n) { return (double)(n - 1) / ((double)n * n); }
static double ceiling_gather_scatter(int n) { return (double)(n - 1) / ((double)n * (n + 1)); }
static double ceiling_all_to_all(int n) { return (double)(n - 1) / (2.0 * n * n); }
static double ceiling_permute(int n) { return 1.0 / (2.0 * n); }
static double ceiling_broadcast(int n) { return 1.0 / (n + 1.0); }
/* With one result shared per group it is written once: all-reduce reads P*S and
 * writes S; all-gather reads P*S and writes P*S; broadcast reads S and writes S. */
static double ceiling_all_reduce_shared(int n) { return 2.0 * (n - 1) / ((double)n * (n + 1)); }
static double ceiling_gather_shared(int n) { return (double)(n - 1) / (2.0 * n); }
static double ceiling_broadcast_shared(int n) { (void)n; return 0.5; }

static tpu_status call_all_reduce(tpu_replica_context *ctx, const tpu_tensor *x,
                                  const bench_config *cfg, tpu_tensor **out) {
  return tpu_all_reduce(ctx, x, cfg->op, NULL, out, &cfg->coll_options);
}
static tpu_status call_cross_replica_sum(tpu_replica_context *ctx, const tpu_tensor *x,
                                         const bench_config *cfg, tpu_tensor **out) {
  return tpu_cross_replica_sum(ctx, x, NULL, out, &cfg->coll_options);
}
static tpu_status call_all_gather(tpu_replica_context *ctx, const tpu_tensor *x,
                                  const bench_config *cfg, tpu_tensor **out) {
  return tpu_all_gather(ctx, x, 0, NULL, out, &cfg->coll_options);
}
static tpu_status call_reduce_scatter(tpu_replica_context *ctx, const tpu_tensor *x,
                                      const bench_config *cfg, tpu_tensor **out) {
  return tpu_reduce_scatter(ctx, x, cfg->op, 0, NULL, out, &cfg->coll_options);
}
static tpu_status call_all_to_all(tpu_replica_context *ctx, const tpu_tensor *x,
                                  const bench_config *cfg, tpu_tensor **out) {
  return tpu_all_to_all(ctx, x, 0, 0, cfg->group_size, NULL, out, &cfg->coll_options);
}
static tpu_status call_permute(tpu_replica_context *ctx, const tpu_tensor *x,
                               const bench_config *cfg, tpu_tensor **out) {
  return tpu_collective_permute(ctx, x, cfg->permute_pairs, cfg->group_size, out,
                                &cfg->coll_options);
}
static tpu_status call_broadcast(tpu_replica_context *ctx, const tpu_tensor *x,
                                 const bench_config *cfg, tpu_tensor **out) {
  return tpu_broadcast(ctx, x, 0, NULL, out, &cfg->coll_options);
}

static void from_reduction(int n, int k, int seg, size_t len, int *src, size_t *start) {
  (void)n, (void)k, (void)seg, (void)len;
  *src = -1;
  *start = 0;
}
static void from_reduced_block(int n, int k, int seg, size_t len, int *src, size_t *start) {
  (void)n, (void)seg;
  *src = -1;
  *start = (size_t)k * len;
}
static void from_each_replica(int n, int k, int seg, size_t len, int *src, size_t *start) {
  (void)n, (void)k, (void)len;
  *src = seg;
  *start = 0;
}
static void from_each_replicas_block(int n, int k, int seg, size_t len, int *src,
                                     size_t *start) {
  (void)n;
  *src = seg;
  *start = (size_t)k * len;
}
static void from_ring_predecessor(int n, int k, int seg, size_t len, int *src, size_t *start) {
  (void)seg, (void)len;
  *src = (k + n - 1) % n;
  *start = 0;
}
static void from_root(int n, int k, int seg, size_t len, int *src, size_t *start) {
  (void)n, (void)k, (void)seg, (void)len;
  *src = 0;
  *start = 0;
}

static const bench_collective collectives[] = {
    {.name = "all_reduce", .reduces = 1, .bus_factor = bus_all_reduce,
     .bus_formula = "algbw * 2(n-1)/n", .ceiling = ceiling_all_reduce,
     .ceiling_formula = "B(P-1)/P^2", .ceiling_shared = ceiling_all_reduce_shared,
     .ceiling_shared_formula = "2B(P-1)/(P(P+1))", .call = call_all_reduce,
     .source = from_reduction},
    {.name = "cross_replica_sum", .reduces = 1, .bus_factor = bus_all_reduce,
     .bus_formula = "algbw * 2(n-1)/n", .ceiling = ceiling_all_reduce,
     .ceiling_formula = "B(P-1)/P^2", .ceiling_shared = ceiling_all_reduce_shared,
     .ceiling_shared_formula = "2B(P-1)/(P(P+1))", .call = call_cross_replica_sum,
     .source = from_reduction},
    {.name = "all_gather", .gathers = 1, .per_replica_segments = 1, .bus_factor = bus_gather,
     .bus_formula = "(n * size)/time * (n-1)/n, the output being the larger buffer",
     .ceiling = ceiling_gather_scatter, .ceiling_formula = "B(P-1)/(P(P+1))",
     .ceiling_shared = ceiling_gather_shared, .ceiling_shared_formula = "B(P-1)/(2P)",
     .call = call_all_gather, .source = from_each_replica},
    {.name = "reduce_scatter", .reduces = 1, .split = 1, .scatters = 1,
     .bus_factor = bus_spread, .bus_formula = "algbw * (n-1)/n",
     .ceiling = ceiling_gather_scatter, .ceiling_formula = "B(P-1)/(P(P+1))",
     .call = call_reduce_scatter, .source = from_reduced_block},
    {.name = "all_to_all", .split = 1, .per_replica_segments = 1, .bus_factor = bus_spread,
     .bus_formula = "algbw * (n-1)/n", .ceiling = ceiling_all_to_all,
     .ceiling_formula = "B(P-1)/(2P^2)", .call = call_all_to_all,
     .source = from_each_replicas_block},
    {.name = "collective_permute", .bus_factor = bus_one, .bus_formula = "algbw",
     .ceiling = ceiling_permute, .ceiling_formula = "B/(2P)", .call = call_permute,
     .source = from_ring_predecessor},
    {.name = "broadcast", .bus_factor = bus_one, .bus_formula = "algbw",
     .ceiling = ceiling_broadcast, .ceiling_formula = "B/(P+1)",
     .ceiling_shared = ceiling_broadcast_shared, .ceiling_shared_formula = "B/2",
     .call = call_broadcast,
     .source = from_root},
};

const char bench_collective_names[] =
    "all_reduce, cross_replica_sum, all_gather, reduce_scatter, all_to_all, "
    "collective_permute, broadcast, empty";

/* Indexed by tpu_group_mode. */
static const char *const group_mode_names[] = {"cross-replica", "cross-partition",
                                               "cross-replica-and-partition", "flattened"};
const char bench_group_mode_names[] =
    "cross-replica, cross-partition, cross-replica-and-partition, flattened";

int bench_parse_group_mode(const char *name, int *out) {
  for (int i = 0; i < (int)(sizeof group_mode_names / sizeof group_mode_names[0]); i++)
    if (!strcmp(name, group_mode_names[i])) return *out = i, 1;
  return 0;
}

const bench_collective *bench_find_collective(const char *name) {
  for (size_t i = 0; i < sizeof collectives / sizeof collectives[0]; i++)
    if (!strcmp(collectives[i].name, name)) return &collectives[i];
  return NULL;
}
