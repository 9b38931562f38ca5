/* One task of tests/check_checkpoint_cluster.sh: whole-system checkpoints across tasks.
 *
 *   checkpoint_worker save DIR SHARDING STEP  load every row of two tables with values
 *       from value() below, save STEP with a tensor "w" that differs on every task
 *   checkpoint_worker restore DIR SHARDING STEP  restore the newest checkpoint: it must
 *       be STEP, "w" task 0's, and every row this task now holds value()'s, bit for bit
 *   checkpoint_worker refuse DIR SHARDING CODE  the restore must fail with CODE on this
 *       task, and no row held here may change
 *   checkpoint_worker skip DIR SHARDING T  task T stays away; every other task's
 *       restore must fail with TPU_DEADLINE_EXCEEDED naming task T
 *   checkpoint_worker skip-save DIR SHARDING T  the same for a save of step 50
 *   checkpoint_worker save-refused DIR SHARDING CODE  a save of step 50 must fail with
 *       CODE on this task
 *
 * SHARDING is DIV_DEFAULT or MOD; the cluster (tasks, cores) is tpurt launch's. Each
 * task prints "task T: MODE ok rows=N" (the rows it checked) or what went wrong, and
 * exits 0 only if every check held. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpurt.h"

#define MAX_FLOATS (1000 * 8)

static const char kConfig[] =
    "{\"table_descriptor\": ["
    " {\"name\": \"big\", \"vocabulary_size\": 1000, \"dimension\": 8, \"optimization_parameters\":"
    "  {\"learning_rate\": {\"constant\": 0.1}, \"adagrad\": {\"initial_accumulator\": 0.1}}},"
    " {\"name\": \"small\", \"vocabulary_size\": 37, \"dimension\": 3, \"optimization_parameters\":"
    "  {\"learning_rate\": {\"constant\": 0.1}, \"adam\": {\"epsilon\": 1e-8}}}],"
    " \"feature_descriptor\": [{\"name\": \"f\", \"table_id\": 0, \"input_shape\": [4]}],"
    " \"sharding_strategy\": \"%s\"}";

static int g_task;
static int g_failed;

#define CHECK(cond, ...)                      \
  do {                                        \
    if (!(cond)) {                            \
      printf("task %d: ", g_task);            \
      printf(__VA_ARGS__);                    \
      printf("\n");                           \
      g_failed = 1;                           \
    }                                         \
  } while (0)
#define OK(call) CHECK((call) == TPU_OK, "%s: %s", #call, tpu_last_error())

/* The bits of element i of `row` of variable `var` of `table` (splitmix64). */
static uint32_t value(int table, int var, int64_t row, int i) {
  uint64_t z = ((uint64_t)table << 56) ^ ((uint64_t)var << 48) ^ ((uint64_t)row << 16) ^ (uint64_t)i;
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (uint32_t)(z ^ (z >> 31));
}

static tpu_system *start(const char *sharding) {
  static unsigned char cfg[4096];
  char json[2048];
  size_t n = 0;
  snprintf(json, sizeof json, kConfig, sharding);
  OK(tpu_embedding_config_from_json(json, cfg, sizeof cfg, &n));
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.embedding_config = cfg;
  o.embedding_config_len = n;
  o.collective_timeout_ms = 20000;
  tpu_system *s = NULL;
  tpu_status st = tpu_initialize_tpu_system(NULL, &o, NULL, &s, NULL);
  if (st != TPU_OK) {
    printf("task ?: init: %s: %s\n", tpu_status_name(st), tpu_last_error());
    exit(1);
  }
  tpu_system_task_id(s, &g_task);
  return s;
}

static void load_all(tpu_system *s) {
  static float vals[MAX_FLOATS];
  for (int t = 0; t < 2; ++t) {
    int64_t vocab;
    int32_t dim;
    int vars;
    OK(tpu_embedding_table_shape(s, t, &vocab, &dim));
    OK(tpu_embedding_table_num_variables(s, t, &vars));
    for (int v = 0; v < vars; ++v) {
      for (int64_t r = 0; r < vocab; ++r)
        for (int i = 0; i < dim; ++i) {
          uint32_t b = value(t, v, r, i);
          memcpy(&vals[r * dim + i], &b, 4);
        }
      OK(tpu_embedding_load(s, t, v, 0, vocab, vals, (size_t)(vocab * dim)));
    }
  }
}

/* Checks the rows held here against value() (want == NULL) or against `want`, the
 * same tables read before; or, with `snap`, only copies them there. Returns the rows
 * held here. */
static int64_t check_rows(tpu_system *s, const uint32_t *want, uint32_t *snap) {
  static float got[MAX_FLOATS];
  int cores = 0;
  int64_t rows = 0;
  size_t at = 0;
  tpu_system_num_cores(s, &cores);
  for (int t = 0; t < 2; ++t) {
    int64_t vocab;
    int32_t dim;
    int vars;
    OK(tpu_embedding_table_shape(s, t, &vocab, &dim));
    OK(tpu_embedding_table_num_variables(s, t, &vars));
    for (int v = 0; v < vars; ++v) {
      size_t n = 0;
      OK(tpu_embedding_retrieve(s, t, v, 0, vocab, got, MAX_FLOATS, &n));
      for (int64_t r = 0; r < vocab; ++r) {
        int core;
        int64_t shard_row;
        OK(tpu_embedding_row_owner(s, t, r, &core, &shard_row));
        if (core / cores != g_task) continue;
        if (v == 0) ++rows;
        for (int i = 0; i < dim; ++i) {
          uint32_t b;
          memcpy(&b, &got[r * dim + i], 4);
          if (snap) {
            snap[at++] = b;
            continue;
          }
          const uint32_t expect = want ? want[at] : value(t, v, r, i);
          ++at;
          if (b != expect) {
            CHECK(0, "table %d variable %d row %lld element %d: %08x, want %08x", t, v, (long long)r, i, b,
                  expect);
            return rows;
          }
        }
      }
    }
  }
  return rows;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc != 5) {
    fprintf(stderr, "usage: checkpoint_worker save|restore|refuse|skip DIR SHARDING ARG\n");
    return 2;
  }
  const char *mode = argv[1], *dir = argv[2];
  tpu_system *s = start(argv[3]);
  int64_t rows = 0;
  const char *name = "w";
  if (!strcmp(mode, "save")) {
    load_all(s);
    const float w[3] = {(float)g_task, 2.5f, -1.0f};
    const int64_t d[1] = {3};
    tpu_tensor *t = NULL;
    OK(tpu_tensor_create(TPU_FLOAT, d, 1, w, sizeof w, &t));
    OK(tpu_checkpoint_save(s, dir, atoll(argv[4]), &name, &t, 1, NULL));
    tpu_tensor_release(t);
    rows = check_rows(s, NULL, NULL);
  } else if (!strcmp(mode, "restore")) {
    tpu_tensor *t = NULL;
    int64_t step = -1;
    OK(tpu_checkpoint_restore(s, dir, -1, &name, &t, 1, &step, NULL));
    CHECK(step == atoll(argv[4]), "restored step %lld, want %s", (long long)step, argv[4]);
    if (t) {
      const float *p = NULL;
      tpu_tensor_data(t, (const void **)&p);
      CHECK(p[0] == 0.0f && p[1] == 2.5f && p[2] == -1.0f, "w is {%g, %g, %g}, not task 0's", p[0], p[1], p[2]);
      tpu_tensor_release(t);
    }
    rows = check_rows(s, NULL, NULL);
  } else if (!strcmp(mode, "refuse") || !strcmp(mode, "skip")) {
    static uint32_t before[4 * MAX_FLOATS];
    const int skipper = atoi(argv[4]);
    rows = check_rows(s, NULL, before);
    if (!strcmp(mode, "skip") && g_task == skipper) {
      struct timespec ts = {5, 0}; /* past the others' timeout */
      nanosleep(&ts, NULL);
    } else {
      tpu_checkpoint_options o = TPU_CHECKPOINT_OPTIONS_INIT;
      o.timeout_ms = 3000;
      tpu_tensor *t = NULL;
      tpu_status st = tpu_checkpoint_restore(s, dir, -1, &name, &t, 1, NULL, &o);
      char want_task[32];
      snprintf(want_task, sizeof want_task, "task %d", skipper);
      if (!strcmp(mode, "refuse")) {
        CHECK(st == (tpu_status)atoi(argv[4]), "restore gave %s (%s), want status %s", tpu_status_name(st),
              tpu_last_error(), argv[4]);
      } else {
        CHECK(st == TPU_DEADLINE_EXCEEDED && strstr(tpu_last_error(), want_task),
              "restore gave %s (%s), want DEADLINE_EXCEEDED naming %s", tpu_status_name(st), tpu_last_error(),
              want_task);
      }
      printf("task %d: refused: %s: %s\n", g_task, tpu_status_name(st), tpu_last_error());
      CHECK(t == NULL, "a refused restore gave a tensor");
      check_rows(s, before, NULL);
    }
  } else if (!strcmp(mode, "skip-save") || !strcmp(mode, "save-refused")) {
    const int arg = atoi(argv[4]);
    if (!strcmp(mode, "skip-save") && g_task == arg) {
      struct timespec ts = {5, 0}; /* past the others' timeout */
      nanosleep(&ts, NULL);
    } else {
      tpu_checkpoint_options o = TPU_CHECKPOINT_OPTIONS_INIT;
      o.timeout_ms = 3000;
      tpu_status st = tpu_checkpoint_save(s, dir, 50, NULL, NULL, 0, &o);
      char want_task[32];
      snprintf(want_task, sizeof want_task, "task %d", arg);
      if (!strcmp(mode, "save-refused"))
        CHECK(st == (tpu_status)arg, "save gave %s (%s), want status %s", tpu_status_name(st), tpu_last_error(),
              argv[4]);
      else
        CHECK(st == TPU_DEADLINE_EXCEEDED && strstr(tpu_last_error(), want_task),
              "save gave %s (%s), want DEADLINE_EXCEEDED naming %s", tpu_status_name(st), tpu_last_error(),
              want_task);
      printf("task %d: refused: %s: %s\n", g_task, tpu_status_name(st), tpu_last_error());
    }
  } else {
    fprintf(stderr, "checkpoint_worker: unknown mode '%s'\n", mode);
    return 2;
  }
  tpu_status st = tpu_system_shutdown(s);
  CHECK(st == TPU_OK, "shutdown: %s", tpu_last_error());
  tpu_system_release(s);
  if (!g_failed) printf("task %d: %s ok rows=%lld\n", g_task, mode, (long long)rows);
  return g_failed;
}
