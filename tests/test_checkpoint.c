/* Whole-system checkpoints (issue 31 part 1) in one process, from the header alone
 * (tpurt/checkpoint.h):
 * - round trip: every variable of every table and the dense tensors come back bit for
 *   bit, with the step;
 * - resharding: saved on 4 cores DIV, restored on 3 cores MOD, 8 cores, 1 core;
 * - refusals by name with nothing loaded: truncated and longer shard files, a flipped
 *   byte, a manifest that does not parse, another configuration (dimension,
 *   vocabulary, optimizer, a missing table), a tensor the checkpoint lacks, a step
 *   that is not there, a complete step saved again, bad arguments;
 * - crash leftovers: a directory without manifest, a temporary file, a broken
 *   manifest: ignored by latest and restore, and the step saved again over them;
 * - keep: the older checkpoints go. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tpurt.h>

#include "test_util.h"

TEST_SYSTEM_FIXTURE

static char g_dir[256];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static int make_dir(void **state) {
  (void)state;
  const char *tmp = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/tpurt-ckpt-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (mkdtemp(g_dir) == NULL) return -1;
  return 0;
}

static int teardown(void **state) {
  release_system(state);
  nftw(g_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}

/* ---- systems ----------------------------------------------------------------------- */

/* ta: 37 x 3, SGD; tb: 23 x 2, Adam (momenta, velocities). %d: ta's dimension, %d:
 * tb's vocabulary, %s: tb's optimizer, %s: sharding. */
static const char kConfig[] =
    "{\"table_descriptor\": ["
    " {\"name\": \"ta\", \"vocabulary_size\": 37, \"dimension\": %d, \"optimization_parameters\":"
    "  {\"learning_rate\": {\"constant\": 0.5}, \"stochastic_gradient_descent\": {}}}%s],"
    " \"feature_descriptor\": [{\"name\": \"fa\", \"table_id\": 0, \"input_shape\": [4]}],"
    " \"sharding_strategy\": \"%s\"}";
static const char kTableB[] =
    ", {\"name\": \"tb\", \"vocabulary_size\": %d, \"dimension\": 2, \"optimization_parameters\":"
    "  {\"learning_rate\": {\"constant\": 0.1}, %s}}";

#define ADAM "\"adam\": {\"epsilon\": 1e-8}"
#define ADAGRAD "\"adagrad\": {}"

static unsigned char g_cfg[8192];

static tpu_system *start_with(int cores, int dim_a, int vocab_b, const char *opt_b, const char *sharding) {
  release_system(NULL);
  char b[512] = "", json[2048];
  if (opt_b != NULL) snprintf(b, sizeof b, kTableB, vocab_b, opt_b);
  snprintf(json, sizeof json, kConfig, dim_a, b, sharding);
  size_t n = 0;
  CHECK_OK(tpu_embedding_config_from_json(json, g_cfg, sizeof g_cfg, &n));
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = cores;
  o.collective_timeout_ms = time_limit_ms(20000);
  o.embedding_config = g_cfg;
  o.embedding_config_len = n;
  CHECK_OK(tpu_system_init(&o, &g_sys));
  return g_sys;
}

static tpu_system *start(int cores, const char *sharding) { return start_with(cores, 3, 23, ADAM, sharding); }

/* ---- table contents ---------------------------------------------------------------- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rng(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)g_rng;
}

#define MAXV 256 /* floats of one variable of a table (37 x 3) */

/* Every variable of every table: random bit patterns (a NaN's payload included) that a
 * conversion or a misplaced row would change. */
static void fill_random(tpu_system *s) {
  int tables = 0;
  CHECK_OK(tpu_embedding_num_tables(s, &tables));
  for (int t = 0; t < tables; ++t) {
    int64_t vocab;
    int32_t dim;
    int vars;
    CHECK_OK(tpu_embedding_table_shape(s, t, &vocab, &dim));
    CHECK_OK(tpu_embedding_table_num_variables(s, t, &vars));
    for (int v = 0; v < vars; ++v) {
      float vals[MAXV];
      for (int64_t i = 0; i < vocab * dim; ++i) {
        uint32_t bits = rng();
        memcpy(&vals[i], &bits, 4);
      }
      CHECK_OK(tpu_embedding_load(s, t, v, 0, vocab, vals, (size_t)(vocab * dim)));
    }
  }
}

/* Every table's every variable, in one buffer: [table][variable][row][dim]. */
static size_t snapshot(tpu_system *s, uint32_t *out) {
  int tables = 0;
  size_t at = 0;
  CHECK_OK(tpu_embedding_num_tables(s, &tables));
  for (int t = 0; t < tables; ++t) {
    int64_t vocab;
    int32_t dim;
    int vars;
    CHECK_OK(tpu_embedding_table_shape(s, t, &vocab, &dim));
    CHECK_OK(tpu_embedding_table_num_variables(s, t, &vars));
    for (int v = 0; v < vars; ++v) {
      size_t n = 0;
      CHECK_OK(tpu_embedding_retrieve(s, t, v, 0, vocab, (float *)(out + at), MAXV, &n));
      at += n;
    }
  }
  return at;
}

#define SNAP 2048

static void expect_tables(tpu_system *s, const uint32_t *want, size_t n) {
  uint32_t got[SNAP];
  size_t m = snapshot(s, got);
  CHECK(m == n);
  for (size_t i = 0; i < n && i < m; ++i)
    if (got[i] != want[i]) {
      CHECK_FAIL("word %zu: got %08x, want %08x", i, got[i], want[i]);
      return;
    }
}

static tpu_tensor *tensor_of(tpu_dtype dtype, const int64_t *dims, int rank, const void *data) {
  size_t size = 0, bytes;
  CHECK_OK(tpu_dtype_size(dtype, &size));
  bytes = size;
  for (int i = 0; i < rank; ++i) bytes *= (size_t)dims[i];
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(dtype, dims, rank, data, bytes, &t));
  return t;
}

static void path_in(char *out, size_t cap, int64_t step, const char *file) {
  snprintf(out, cap, "%s/ckpt-%lld/%s", g_dir, (long long)step, file);
}

/* ---- cases ------------------------------------------------------------------------- */

static void test_checkpoint__round_trip(void **state) {
  (void)state;
  tpu_system *s = start(4, "MOD");
  fill_random(s);
  uint32_t before[SNAP];
  size_t n = snapshot(s, before);
  const float w[6] = {1.5f, -0.0f, 3.25f, 1e-30f, -7.0f, 0.125f};
  const int64_t ids[4] = {-1, 0, INT64_MAX, 42};
  const int64_t wd[2] = {2, 3}, idd[1] = {4};
  tpu_tensor *in[3] = {tensor_of(TPU_FLOAT, wd, 2, w), tensor_of(TPU_INT64, idd, 1, ids),
                       tensor_of(TPU_FLOAT, NULL, 0, w)};
  const char *names[3] = {"dense/w", "ids", "scalar"};
  CHECK_OK(tpu_checkpoint_save(s, g_dir, 7, names, in, 3, NULL));
  int64_t latest = -1;
  CHECK_OK(tpu_checkpoint_latest(g_dir, &latest));
  CHECK(latest == 7);

  fill_random(s); /* the restore must bring the saved rows back */
  tpu_tensor *out[2] = {NULL, NULL};
  const char *want[2] = {"ids", "dense/w"};
  int64_t step = -1;
  CHECK_OK(tpu_checkpoint_restore(s, g_dir, -1, want, out, 2, &step, NULL));
  CHECK(step == 7);
  expect_tables(s, before, n);
  const void *p;
  tpu_dtype dt;
  int64_t dims[4];
  size_t rank;
  CHECK_OK(tpu_tensor_dtype(out[0], &dt));
  CHECK(dt == TPU_INT64);
  CHECK_OK(tpu_tensor_dims(out[0], dims, 4, &rank));
  CHECK(rank == 1 && dims[0] == 4);
  CHECK_OK(tpu_tensor_data(out[0], &p));
  CHECK(memcmp(p, ids, sizeof ids) == 0);
  CHECK_OK(tpu_tensor_dims(out[1], dims, 4, &rank));
  CHECK(rank == 2 && dims[0] == 2 && dims[1] == 3);
  CHECK_OK(tpu_tensor_data(out[1], &p));
  CHECK(memcmp(p, w, sizeof w) == 0);
  for (int i = 0; i < 3; ++i) tpu_tensor_release(in[i]);
  for (int i = 0; i < 2; ++i) tpu_tensor_release(out[i]);

  /* Saved again under the same step: refused, the checkpoint untouched. */
  CHECK_ERROR(tpu_checkpoint_save(s, g_dir, 7, NULL, NULL, 0, NULL), TPU_ALREADY_EXISTS, "ckpt-7");
  /* A system without tables saves and restores its tensors alone. */
  release_system(NULL);
  CHECK_OK(tpu_system_init(NULL, &g_sys));
  CHECK_ERROR(tpu_checkpoint_restore(g_sys, g_dir, 7, NULL, NULL, 0, NULL, NULL), TPU_FAILED_PRECONDITION,
              "holds table 'ta', which the system does not have");
  CHECK_OK(tpu_checkpoint_save(g_sys, g_dir, 8, NULL, NULL, 0, NULL));
  CHECK_OK(tpu_checkpoint_restore(g_sys, g_dir, -1, NULL, NULL, 0, &step, NULL));
  CHECK(step == 8);
}

/* Saved on one shape, restored on another: every row and slot on its new owner. */
static void test_checkpoint__reshard(void **state) {
  (void)state;
  static const struct {
    int from_cores;
    const char *from;
    int to_cores;
    const char *to;
  } cases[] = {{4, "DIV_DEFAULT", 3, "MOD"}, {4, "MOD", 8, "DIV_DEFAULT"}, {3, "DIV_DEFAULT", 1, "DIV_DEFAULT"},
               {8, "MOD", 5, "MOD"},         {1, "MOD", 4, "DIV_DEFAULT"}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    tpu_system *s = start(cases[c].from_cores, cases[c].from);
    fill_random(s);
    uint32_t before[SNAP];
    size_t n = snapshot(s, before);
    CHECK_OK(tpu_checkpoint_save(s, g_dir, (int64_t)c, NULL, NULL, 0, NULL));
    s = start(cases[c].to_cores, cases[c].to);
    int64_t step = -1;
    CHECK_OK(tpu_checkpoint_restore(s, g_dir, (int64_t)c, NULL, NULL, 0, &step, NULL));
    CHECK(step == (int64_t)c);
    expect_tables(s, before, n);
  }
}

/* A restore that is refused names why and leaves every table as it was. */
static void expect_refused(tpu_system *s, int64_t step, tpu_status code, const char *fragment) {
  uint32_t before[SNAP];
  size_t n = snapshot(s, before);
  tpu_tensor *out = (tpu_tensor *)0x1;
  const char *name = "w";
  int64_t got = -5;
  CHECK_ERROR(tpu_checkpoint_restore(s, g_dir, step, &name, &out, 1, &got, NULL), code, fragment);
  CHECK(out == (tpu_tensor *)0x1 && got == -5); /* outputs untouched */
  expect_tables(s, before, n);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

static void test_checkpoint__refusals(void **state) {
  (void)state;
  tpu_system *s = start(2, "DIV_DEFAULT");
  fill_random(s);
  const float w[2] = {1, 2};
  const int64_t d[1] = {2};
  tpu_tensor *t = tensor_of(TPU_FLOAT, d, 1, w);
  const char *name = "w";
  for (int64_t step = 1; step <= 4; ++step) CHECK_OK(tpu_checkpoint_save(s, g_dir, step, &name, &t, 1, NULL));
  tpu_tensor_release(t);
  fill_random(s);
  char path[512];

  /* 1: a shard truncated; 2: a byte flipped; 3: a shard file gone; 4: the manifest broken */
  path_in(path, sizeof path, 1, "table-0-task-0.bin");
  CHECK(truncate(path, 12) == 0);
  expect_refused(s, 1, TPU_DATA_LOSS, "table-0-task-0.bin is truncated: 12 bytes");
  path_in(path, sizeof path, 2, "table-1-task-0.bin");
  FILE *f = fopen(path, "r+b");
  CHECK(f != NULL);
  if (f) {
    fseek(f, 5, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, 5, SEEK_SET);
    fputc(ch ^ 0x10, f);
    fclose(f);
  }
  expect_refused(s, 2, TPU_DATA_LOSS, "table-1-task-0.bin has SHA-256");
  path_in(path, sizeof path, 3, "tensors.bin");
  CHECK(unlink(path) == 0);
  expect_refused(s, 3, TPU_DATA_LOSS, "tensors.bin is missing");
  path_in(path, sizeof path, 4, "manifest.json");
  write_file(path, "{\"format\": \"tpurt-checkpoint\", \"version\": 1, \"step\": \"4\"}");
  expect_refused(s, 4, TPU_DATA_LOSS, "manifest.json: step: expected an integer");
  expect_refused(s, 9, TPU_NOT_FOUND, "no complete checkpoint of step 9");
  /* longer than its manifest says */
  path_in(path, sizeof path, 2, "table-1-task-0.bin");
  f = fopen(path, "ab");
  if (f) {
    fputc(0, f);
    fclose(f);
  }
  expect_refused(s, 2, TPU_DATA_LOSS, "is too long");

  /* Every checkpoint above is broken: the newest complete one is the newest that parses. */
  int64_t latest = -1;
  CHECK_OK(tpu_checkpoint_latest(g_dir, &latest));
  CHECK(latest == 3);

  /* Another configuration, each difference named. */
  t = tensor_of(TPU_FLOAT, d, 1, w);
  CHECK_OK(tpu_checkpoint_save(s, g_dir, 10, &name, &t, 1, NULL));
  tpu_tensor_release(t);
  s = start_with(2, 4, 23, ADAM, "DIV_DEFAULT");
  fill_random(s);
  expect_refused(s, 10, TPU_FAILED_PRECONDITION, "table 'ta' has dimension 3, the system's 4");
  s = start_with(2, 3, 24, ADAM, "MOD");
  fill_random(s);
  expect_refused(s, 10, TPU_FAILED_PRECONDITION, "table 'tb' has vocabulary_size 23, the system's 24");
  s = start_with(2, 3, 23, ADAGRAD, "MOD");
  fill_random(s);
  expect_refused(s, 10, TPU_FAILED_PRECONDITION, "table 'tb' has optimizer adam, the system's adagrad");
  s = start_with(2, 3, 23, NULL, "MOD");
  fill_random(s);
  expect_refused(s, 10, TPU_FAILED_PRECONDITION, "holds table 'tb', which the system does not have");
  /* the right configuration, a tensor the checkpoint lacks */
  s = start(3, "MOD");
  fill_random(s);
  uint32_t before[SNAP];
  size_t n = snapshot(s, before);
  const char *names[2] = {"w", "bias"};
  tpu_tensor *out[2] = {NULL, NULL};
  CHECK_ERROR(tpu_checkpoint_restore(s, g_dir, 10, names, out, 2, NULL, NULL), TPU_NOT_FOUND,
              "holds no tensor named 'bias'");
  CHECK(out[0] == NULL && out[1] == NULL);
  expect_tables(s, before, n);
}

static void test_checkpoint__crash_leftovers(void **state) {
  (void)state;
  tpu_system *s = start(2, "MOD");
  fill_random(s);
  uint32_t saved[SNAP];
  size_t n = snapshot(s, saved);
  CHECK_OK(tpu_checkpoint_save(s, g_dir, 5, NULL, NULL, 0, NULL));
  /* A save of step 9 that died: shards written, one temporary, no manifest; step 12
   * with a manifest cut short; a stray file and directory. */
  char path[512];
  snprintf(path, sizeof path, "%s/ckpt-9", g_dir);
  CHECK(mkdir(path, 0777) == 0);
  path_in(path, sizeof path, 9, "table-0-task-0.bin");
  write_file(path, "partial");
  path_in(path, sizeof path, 9, "manifest.json.tmp-0");
  write_file(path, "{\"format\": \"tpurt-che");
  snprintf(path, sizeof path, "%s/ckpt-12", g_dir);
  CHECK(mkdir(path, 0777) == 0);
  path_in(path, sizeof path, 12, "manifest.json");
  write_file(path, "{\"format\": \"tpurt-checkpoint\", \"vers");
  snprintf(path, sizeof path, "%s/ckpt-x1", g_dir);
  CHECK(mkdir(path, 0777) == 0);
  snprintf(path, sizeof path, "%s/notes.txt", g_dir);
  write_file(path, "not a checkpoint");

  int64_t latest = -1, step = -1;
  CHECK_OK(tpu_checkpoint_latest(g_dir, &latest));
  CHECK(latest == 5);
  fill_random(s);
  CHECK_OK(tpu_checkpoint_restore(s, g_dir, -1, NULL, NULL, 0, &step, NULL));
  CHECK(step == 5);
  expect_tables(s, saved, n);
  /* Step 9 saved again over its leftovers: complete, and the newest. */
  fill_random(s);
  n = snapshot(s, saved);
  CHECK_OK(tpu_checkpoint_save(s, g_dir, 9, NULL, NULL, 0, NULL));
  path_in(path, sizeof path, 9, "manifest.json.tmp-0");
  CHECK(access(path, F_OK) != 0); /* task 0's temporary name: written over, renamed */
  CHECK_OK(tpu_checkpoint_latest(g_dir, &latest));
  CHECK(latest == 9);
  fill_random(s);
  CHECK_OK(tpu_checkpoint_restore(s, g_dir, -1, NULL, NULL, 0, &step, NULL));
  CHECK(step == 9);
  expect_tables(s, saved, n);
  /* No checkpoint at all */
  snprintf(path, sizeof path, "%s/empty", g_dir);
  CHECK_ERROR(tpu_checkpoint_latest(path, &latest), TPU_NOT_FOUND, "no complete checkpoint in");
  CHECK_ERROR(tpu_checkpoint_restore(s, path, -1, NULL, NULL, 0, NULL, NULL), TPU_NOT_FOUND, path);
}

static void test_checkpoint__keep(void **state) {
  (void)state;
  tpu_system *s = start(2, "DIV_DEFAULT");
  tpu_checkpoint_options o = TPU_CHECKPOINT_OPTIONS_INIT;
  o.keep = 2;
  char path[512];
  snprintf(path, sizeof path, "%s/ckpt-0", g_dir); /* an older save that died */
  CHECK(mkdir(path, 0777) == 0);
  for (int64_t step = 1; step <= 4; ++step) CHECK_OK(tpu_checkpoint_save(s, g_dir, step, NULL, NULL, 0, &o));
  for (int64_t step = 0; step <= 4; ++step) {
    path_in(path, sizeof path, step, "");
    CHECK((access(path, F_OK) == 0) == (step >= 3));
  }
}

static void test_checkpoint__arguments(void **state) {
  (void)state;
  tpu_system *s = start(1, "MOD");
  const int64_t d[1] = {1};
  const float one = 1;
  tpu_tensor *t = tensor_of(TPU_FLOAT, d, 1, &one);
  const char *two[2] = {"a", "a"};
  tpu_tensor *ts[2] = {t, t};
  CHECK_ERROR(tpu_checkpoint_save(s, g_dir, -1, NULL, NULL, 0, NULL), TPU_INVALID_ARGUMENT, "step is -1");
  CHECK_ERROR(tpu_checkpoint_save(s, "", 1, NULL, NULL, 0, NULL), TPU_INVALID_ARGUMENT, "'dir' is empty");
  CHECK_ERROR(tpu_checkpoint_save(s, g_dir, 1, two, ts, 2, NULL), TPU_INVALID_ARGUMENT, "names[1] 'a' is given twice");
  CHECK_ERROR(tpu_checkpoint_save(s, g_dir, 1, two, ts, -1, NULL), TPU_INVALID_ARGUMENT, "num_tensors is -1");
  tpu_tensor *null_t[1] = {NULL};
  CHECK_ERROR(tpu_checkpoint_save(s, g_dir, 1, two, null_t, 1, NULL), TPU_INVALID_ARGUMENT, "tensors[0] is NULL");
  tpu_checkpoint_options o = TPU_CHECKPOINT_OPTIONS_INIT;
  o.keep = -2;
  CHECK_ERROR(tpu_checkpoint_save(s, g_dir, 1, NULL, NULL, 0, &o), TPU_INVALID_ARGUMENT, "options->keep is -2");
  o.keep = 0;
  o.struct_size = 4;
  CHECK_ERROR(tpu_checkpoint_save(s, g_dir, 1, NULL, NULL, 0, &o), TPU_INVALID_ARGUMENT, "options->struct_size is 4");
  CHECK_ERROR(tpu_checkpoint_restore(s, g_dir, -2, NULL, NULL, 0, NULL, NULL), TPU_INVALID_ARGUMENT, "step is -2");
  CHECK_ERROR(tpu_checkpoint_options_init(&o, 3), TPU_INVALID_ARGUMENT, "struct_size is 3");
  CHECK_OK(tpu_checkpoint_options_init(&o, sizeof o));
  CHECK(o.struct_size == sizeof o && o.timeout_ms == 0 && o.keep == 0);
  /* A directory that cannot be made is named with its errno's status. */
  char path[512];
  snprintf(path, sizeof path, "%s/file", g_dir);
  write_file(path, "x");
  snprintf(path, sizeof path, "%s/file/sub", g_dir);
  CHECK_ERROR(tpu_checkpoint_save(s, path, 1, NULL, NULL, 0, NULL), TPU_NOT_FOUND, path);
  int64_t latest = 0;
  CHECK_ERROR(tpu_checkpoint_latest(g_dir, &latest), TPU_NOT_FOUND, g_dir); /* nothing was saved */
  tpu_tensor_release(t);
}

/* From inside a computation: refused, as tpu_embedding_load is. */
static tpu_status save_inside(tpu_replica_context *ctx, tpu_tensor *const *in, int nin, tpu_tensor **out, int nout,
                              void *user) {
  (void)in, (void)nin, (void)out, (void)nout, (void)user;
  tpu_system *s = NULL;
  CHECK_OK(tpu_replica_context_system(ctx, &s));
  CHECK_ERROR(tpu_checkpoint_save(s, g_dir, 1, NULL, NULL, 0, NULL), TPU_FAILED_PRECONDITION, "inside a computation");
  CHECK_ERROR(tpu_checkpoint_restore(s, g_dir, -1, NULL, NULL, 0, NULL, NULL), TPU_FAILED_PRECONDITION,
              "inside a computation");
  return TPU_OK;
}

static void test_checkpoint__inside_a_computation(void **state) {
  (void)state;
  tpu_system *s = start(2, "MOD");
  CHECK_OK(tpu_checkpoint_save(s, g_dir, 0, NULL, NULL, 0, NULL));
  CHECK_OK(tpu_replicate(s, save_inside, NULL, 2, 0, NULL, 0, NULL, NULL));
  CHECK_NO_WORKER_FAILURES();
  int64_t latest = -1;
  CHECK_OK(tpu_checkpoint_latest(g_dir, &latest));
  CHECK(latest == 0);
  char path[512];
  snprintf(path, sizeof path, "%s/ckpt-1", g_dir);
  CHECK(access(path, F_OK) != 0); /* refused before anything was written */
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_checkpoint__round_trip, make_dir, teardown),
      cmocka_unit_test_setup_teardown(test_checkpoint__reshard, make_dir, teardown),
      cmocka_unit_test_setup_teardown(test_checkpoint__refusals, make_dir, teardown),
      cmocka_unit_test_setup_teardown(test_checkpoint__crash_leftovers, make_dir, teardown),
      cmocka_unit_test_setup_teardown(test_checkpoint__keep, make_dir, teardown),
      cmocka_unit_test_setup_teardown(test_checkpoint__arguments, make_dir, teardown),
      cmocka_unit_test_setup_teardown(test_checkpoint__inside_a_computation, make_dir, teardown),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
