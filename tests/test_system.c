/* The TPU system: options and their validation, one live system per process,
 * shutdown semantics, the topology it reports, its worker threads. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tpurt.h>

#include "test_util.h"
#include "proto_writer.h"

TEST_SYSTEM_FIXTURE

static tpu_system_options options_for(int cores) {
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = cores;
  return o;
}

static void start(const tpu_system_options *o) {
  tpu_status st = tpu_system_init(o, &g_sys);
  if (st != TPU_OK) fail_msg("tpu_system_init: %s: %s", tpu_status_name(st), tpu_last_error());
}

static void expect_init_error(const tpu_system_options *o, const char *fragment) {
  tpu_system *s = NULL;
  CHECK_ERROR(tpu_system_init(o, &s), TPU_INVALID_ARGUMENT, fragment);
  assert_null(s);
}

static tpu_status empty(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                        tpu_tensor **out, int no, void *user) {
  return TPU_OK;
}

static tpu_status failing(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                          tpu_tensor **out, int no, void *user) {
  return tpu_replica_context_fail(ctx, TPU_ABORTED, "on purpose");
}

static void test_system__init_query_shutdown(void **state) {
  tpu_system_options o = options_for(4);
  o.job_name = "worker";
  start(&o);
  int n = 0, closed = 1;
  CHECK_OK(tpu_system_num_cores(g_sys, &n));
  assert_int_equal(n, 4);
  char buf[64];
  size_t len = 0;
  CHECK_OK(tpu_system_job_name(g_sys, buf, sizeof buf, &len));
  assert_string_equal(buf, "worker");
  CHECK_OK(tpu_system_device_type(g_sys, buf, sizeof buf, &len));
  assert_string_equal(buf, "TPU");
  CHECK_OK(tpu_system_embedding_config(g_sys, NULL, 0, &len));
  assert_int_equal(len, 0);
  CHECK_OK(tpu_system_is_closed(g_sys, &closed));
  assert_int_equal(closed, 0);

  CHECK_OK(tpu_system_shutdown(g_sys));
  CHECK_OK(tpu_system_shutdown(g_sys)); /* idempotent */
  CHECK_OK(tpu_system_is_closed(g_sys, &closed));
  assert_int_equal(closed, 1);
  CHECK_ERROR(tpu_system_num_cores(g_sys, &n), TPU_FAILED_PRECONDITION, "shut down");
  CHECK_ERROR(tpu_system_serialized_topology(g_sys, NULL, 0, &len), TPU_FAILED_PRECONDITION,
               "shut down");
  CHECK_ERROR(tpu_replicate(g_sys, empty, NULL, 1, 0, NULL, 0, NULL, NULL),
               TPU_FAILED_PRECONDITION, "shut down");
}

/* A one-task system has no data plane between tasks: "none", with a reason. Both
 * strings follow the out-array rule (size query, too small a buffer, exact fit). */
static void test_system__transport_of_one_task(void **state) {
  tpu_system_options o = options_for(2);
  start(&o);
  char buf[256];
  size_t len = 0;
  CHECK_OK(tpu_system_transport(g_sys, NULL, 0, &len));
  assert_int_equal(len, strlen("none"));
  CHECK_ERROR(tpu_system_transport(g_sys, buf, len, &len), TPU_OUT_OF_RANGE, "too small");
  CHECK_OK(tpu_system_transport(g_sys, buf, len + 1, &len));
  assert_string_equal(buf, "none");

  CHECK_OK(tpu_system_transport_reason(g_sys, NULL, 0, &len));
  assert_true(len > 0 && len < sizeof buf);
  size_t need = len;
  CHECK_ERROR(tpu_system_transport_reason(g_sys, buf, 1, &len), TPU_OUT_OF_RANGE, "too small");
  assert_int_equal(len, need); /* the full length, even when the buffer is too small */
  CHECK_OK(tpu_system_transport_reason(g_sys, buf, need + 1, &len));
  assert_int_equal(strlen(buf), need);

  CHECK_OK(tpu_system_shutdown(g_sys));
  CHECK_ERROR(tpu_system_transport(g_sys, buf, sizeof buf, &len), TPU_FAILED_PRECONDITION, "shut down");
  CHECK_ERROR(tpu_system_transport_reason(g_sys, buf, sizeof buf, &len), TPU_FAILED_PRECONDITION,
              "shut down");
}

/* A TPUEmbeddingConfiguration on the wire: table_descriptor {name "t",
 * vocabulary_size 10, dimension `dim`, optimization_parameters {stochastic_gradient_descent
 * {}}}, mode TRAINING. */
static size_t embedding_config(unsigned char dim, unsigned char *out) {
  const unsigned char bytes[] = {0x0a, 0x0b, 0x0a, 0x01, 't', 0x10, 0x0a, 0x18, dim,
                                 0x2a, 0x02, 0x22, 0x00, 0x10, 0x02};
  memcpy(out, bytes, sizeof bytes);
  return sizeof bytes;
}

static void test_system__embedding_config_is_validated_and_kept(void **state) {
  unsigned char config[16], back[16];
  tpu_system_options o = options_for(2);
  o.embedding_config = config;
  o.embedding_config_len = embedding_config(0, config);
  expect_init_error(&o, "dimension");

  o.embedding_config_len = embedding_config(4, config);
  start(&o);
  size_t len = 0;
  CHECK_OK(tpu_system_embedding_config(g_sys, back, sizeof back, &len));
  assert_int_equal(len, o.embedding_config_len);
  assert_memory_equal(back, config, len);
}

static void test_system__one_live_system(void **state) {
  tpu_system_options o = options_for(2);
  start(&o);
  tpu_system *second = NULL;
  CHECK_ERROR(tpu_system_init(&o, &second), TPU_ALREADY_EXISTS, "already initialized");
  assert_null(second);
  CHECK_OK(tpu_system_shutdown(g_sys));
  /* After a shutdown a new system starts, even before the old handle is released. */
  CHECK_OK(tpu_system_init(&o, &second));
  CHECK_OK(tpu_replicate(second, empty, NULL, 2, 0, NULL, 0, NULL, NULL));
  CHECK_OK(tpu_system_release(second));
  CHECK_OK(tpu_system_release(NULL));
}

static void test_system__options_validation(void **state) {
  tpu_system_options o = options_for(2);
  o.struct_size = offsetof(tpu_system_options, embedding_config);
  expect_init_error(&o, "struct_size");

  o = options_for(-1);
  expect_init_error(&o, "num_cores");

  o = options_for(3);
  o.mesh_shape[0] = 2, o.mesh_shape[1] = 2, o.mesh_shape[2] = 1, o.mesh_shape[3] = 1;
  expect_init_error(&o, "mesh_shape");
  o.mesh_shape[0] = 3, o.mesh_shape[1] = 0;
  expect_init_error(&o, "mesh_shape[1]");

  o = options_for(2);
  o.device_type = "GPU";
  expect_init_error(&o, "'GPU'");
  o = options_for(2);
  o.job_name = "a/b";
  expect_init_error(&o, "job_name");
  o = options_for(2);
  o.pin_threads = 7;
  expect_init_error(&o, "pin_threads is 7");
  o = options_for(2);
  o.collective_timeout_ms = -1;
  expect_init_error(&o, "collective_timeout_ms");
  o = options_for(2);
  o.embedding_config_len = 4;
  expect_init_error(&o, "embedding_config");
  static const unsigned char garbage[] = {0xff, 0xff, 0xff, 0xff, 0xff};
  o.embedding_config = garbage;
  o.embedding_config_len = sizeof garbage;
  tpu_system *s = NULL;
  assert_int_equal(tpu_system_init(&o, &s), TPU_INVALID_ARGUMENT);
  assert_null(s);

  /* A struct from a newer tpurt header (larger than this library knows) is rejected:
   * it may ask for settings this library would silently ignore. */
  struct {
    tpu_system_options o;
    char tail[32];
  } big;
  memset(&big, 0, sizeof big);
  CHECK_ERROR(tpu_system_options_init(&big.o, sizeof big), TPU_INVALID_ARGUMENT, "struct_size");
  big.o.struct_size = sizeof big;
  expect_init_error(&big.o, "struct_size is");
  assert_int_equal(tpu_system_options_init(&o, 8), TPU_INVALID_ARGUMENT);

  /* An older caller's smaller struct (1.0 ends at embedding_config_len) reads as
   * zeros beyond its size; the device type is case-insensitive. */
  struct {
    tpu_system_options o;
  } old;
  memset(&old, 0xAB, sizeof old); /* garbage past the old size must not be read */
  const size_t old_size = offsetof(tpu_system_options, embedding_config_len) + sizeof(size_t);
  assert_int_equal(tpu_system_options_init(&old.o, old_size), TPU_OK);
  assert_int_equal(old.o.struct_size, old_size);
  old.o.num_cores = 2;
  old.o.device_type = "cpu";
  start(&old.o);
  char buf[8];
  size_t len = 0;
  CHECK_OK(tpu_system_device_type(g_sys, buf, sizeof buf, &len));
  assert_string_equal(buf, "CPU");
}

/* Zero means default: {sizeof o} and zeros is the init macro is the init function. */
static void test_system__zeroed_options_are_defaults(void **state) {
  tpu_system_options zeroed;
  memset(&zeroed, 0, sizeof zeroed);
  zeroed.struct_size = sizeof zeroed;
  const tpu_system_options macro = TPU_SYSTEM_OPTIONS_INIT;
  tpu_system_options fn;
  memset(&fn, 0xAB, sizeof fn);
  assert_int_equal(tpu_system_options_init(&fn, sizeof fn), TPU_OK);
  const tpu_system_options *all[3] = {&zeroed, &macro, &fn};
  for (int i = 0; i < 3; ++i) { /* field by field: padding bytes are unspecified */
    const tpu_system_options *o = all[i];
    assert_int_equal(o->struct_size, sizeof *o);
    assert_int_equal(o->num_cores, 0);
    for (int d = 0; d < 4; ++d) assert_int_equal(o->mesh_shape[d], 0);
    assert_null(o->job_name);
    assert_null(o->device_type);
    assert_int_equal(o->pin_threads, TPU_PIN_AUTO);
    assert_int_equal(o->collective_timeout_ms, 0);
    assert_int_equal(o->close_on_failure, 0); /* TF2: a failed step keeps the system */
    assert_null(o->embedding_config);
    assert_int_equal(o->embedding_config_len, 0);
  }

  /* And it runs like the defaults: every CPU a core, the system open after a failure. */
  start(&zeroed);
  int n = 0, closed = 1;
  assert_int_equal(tpu_system_num_cores(g_sys, &n), TPU_OK);
  assert_int_equal(n, (int)sysconf(_SC_NPROCESSORS_ONLN));
  CHECK_ERROR(tpu_replicate(g_sys, failing, NULL, 1, 0, NULL, 0, NULL, NULL), TPU_ABORTED,
               "replica 0: on purpose");
  assert_int_equal(tpu_system_is_closed(g_sys, &closed), TPU_OK);
  assert_int_equal(closed, 0);
  assert_int_equal(tpu_replicate(g_sys, empty, NULL, 1, 0, NULL, 0, NULL, NULL), TPU_OK);
}

static void test_system__num_cores_defaults(void **state) {
  start(NULL);
  int n = 0;
  CHECK_OK(tpu_system_num_cores(g_sys, &n));
  assert_int_equal(n, (int)sysconf(_SC_NPROCESSORS_ONLN));
  tpu_system_release(g_sys);
  g_sys = NULL;

  setenv("TPURT_NUM_CORES", "3", 1);
  tpu_system_options o = options_for(0);
  start(&o);
  CHECK_OK(tpu_system_num_cores(g_sys, &n));
  assert_int_equal(n, 3);
  tpu_system_release(g_sys);
  g_sys = NULL;

  setenv("TPURT_NUM_CORES", "3x", 1);
  expect_init_error(&o, "TPURT_NUM_CORES");
  o.num_cores = 2; /* a bad value fails init even when an explicit count is given */
  expect_init_error(&o, "TPURT_NUM_CORES='3x'");
  setenv("TPURT_NUM_CORES", "3", 1);
  start(&o); /* an explicit count wins over a good value */
  unsetenv("TPURT_NUM_CORES");
  CHECK_OK(tpu_system_num_cores(g_sys, &n));
  assert_int_equal(n, 2);
}

/* cluster.h's rule for DTensor's shutdown_accelerator_system: it shuts the system
 * down and leaves the handle to its one releaser, tpu_system_release. A caller that
 * follows the header leaks nothing (run under make SANITIZE=address: LeakSanitizer). */
static void test_system__shutdown_accelerator_system_then_release(void **state) {
  if (getenv("DTENSOR_JOBS")) skip(); /* local mode only */
  char type[8];
  size_t len = 0;
  CHECK_OK(tpu_initialize_accelerator_system("CPU", 1, 2, 0, &g_sys, type, sizeof type, &len));
  assert_string_equal(type, "CPU");
  CHECK_OK(tpu_shutdown_accelerator_system(g_sys));
  int closed = 0;
  CHECK_OK(tpu_system_is_closed(g_sys, &closed)); /* the handle is still the caller's */
  assert_int_equal(closed, 1);
  CHECK_ERROR(tpu_shutdown_accelerator_system(g_sys), TPU_FAILED_PRECONDITION, "not initialized");
  /* A new system may start while the old handle is unreleased. */
  tpu_system *next = NULL;
  CHECK_OK(tpu_initialize_accelerator_system(NULL, 1, 1, 0, &next, NULL, 0, &len));
  CHECK_OK(tpu_shutdown_accelerator_system(next));
  CHECK_OK(tpu_system_release(next));
  CHECK_OK(tpu_system_release(g_sys));
  g_sys = NULL;
}

/* Every variable the library reads is checked at every init, whether or not this
 * system reads it (a one-task system never joins a cluster): a bad value fails
 * tpu_system_init with TPU_INVALID_ARGUMENT naming the variable and the value. */
static void test_system__bad_environment_fails_every_init(void **state) {
  const char *bad[] = {"abc", " 5", "5 ", "1e3", "-1", "+5", "0x10", "99999999999999999999999"};
  tpu_system_options o = options_for(1);
  char want[128];
  int checked = 0;
  for (int i = 0;; i++) {
    const char *name;
    int64_t value;
    tpu_status st = tpu_environment_variable(i, &name, &value);
    if (st == TPU_OUT_OF_RANGE) break;
    CHECK_OK(st);
    if (getenv(name)) continue; /* the caller's own setting is not ours to change */
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
      setenv(name, bad[k], 1);
      snprintf(want, sizeof want, "environment variable %s='%s'", name, bad[k]);
      expect_init_error(&o, want);
      CHECK_ERROR(tpu_environment_variable(i, &name, &value), TPU_INVALID_ARGUMENT, want);
    }
    /* 0 where the range starts at 1 (the ring's at 4096). */
    const int zero_ok = !strcmp(name, "TPURT_YIELD_NS") || !strcmp(name, "TPURT_TENSOR_CACHE_MB");
    setenv(name, "0", 1);
    snprintf(want, sizeof want, "%s='0'", name);
    if (zero_ok) {
      start(&o);
      CHECK_OK(tpu_system_release(g_sys));
      g_sys = NULL;
    } else {
      expect_init_error(&o, want);
    }
    unsetenv(name);
    start(&o); /* unset again: init works */
    CHECK_OK(tpu_system_release(g_sys));
    g_sys = NULL;
    checked++;
  }
  assert_true(checked >= 1);
  /* The five of the issue, by name, and a ring that is not a power of two. */
  const char *named[] = {"TPURT_INIT_TIMEOUT_MS", "TPURT_HEARTBEAT_INTERVAL_MS",
                         "TPURT_HEARTBEAT_TIMEOUT_MS", "TPURT_SHUTDOWN_BARRIER_TIMEOUT_MS",
                         "TPURT_SHM_RING_BYTES"};
  for (size_t k = 0; k < sizeof named / sizeof named[0]; k++) {
    if (getenv(named[k])) continue;
    setenv(named[k], "abc", 1);
    snprintf(want, sizeof want, "%s='abc'", named[k]);
    expect_init_error(&o, want);
    unsetenv(named[k]);
  }
  if (!getenv("TPURT_SHM_RING_BYTES")) {
    setenv("TPURT_SHM_RING_BYTES", "5000", 1);
    expect_init_error(&o, "TPURT_SHM_RING_BYTES='5000' is not a decimal integer power of two");
    setenv("TPURT_SHM_RING_BYTES", "8192", 1);
    start(&o);
    unsetenv("TPURT_SHM_RING_BYTES");
  }
}

static void test_system__topology(void **state) {
  tpu_system_options o = options_for(4);
  o.mesh_shape[0] = 2, o.mesh_shape[1] = 1, o.mesh_shape[2] = 1, o.mesh_shape[3] = 2;
  size_t len = 0;
  CHECK_OK(tpu_initialize_system(&o, &g_sys, NULL, 0, &len));
  assert_true(len > 0);
  unsigned char bytes[512], again[512];
  size_t len2 = 0;
  CHECK_OK(tpu_system_serialized_topology(g_sys, bytes, sizeof bytes, &len2));
  assert_int_equal(len2, len);

  tpu_topology *topo = NULL;
  CHECK_OK(tpu_topology_parse(bytes, len, &topo));
  int32_t mesh[4], c[4];
  int tasks = 0, devices = 0;
  CHECK_OK(tpu_topology_mesh_shape(topo, mesh, TPU_MESH_RANK, &(size_t){0}));
  assert_int_equal(mesh[0], 2);
  assert_int_equal(mesh[3], 2);
  CHECK_OK(tpu_topology_num_tasks(topo, &tasks));
  CHECK_OK(tpu_topology_num_devices_per_task(topo, &devices));
  assert_int_equal(tasks, 1);
  assert_int_equal(devices, 4);
  for (int d = 0; d < 4; ++d) { /* dense order: core fastest, then x */
    CHECK_OK(tpu_topology_device_coordinates(topo, 0, d, c, TPU_MESH_RANK, &(size_t){0}));
    assert_int_equal(c[3], d % 2);
    assert_int_equal(c[0], d / 2);
    assert_int_equal(c[1], 0);
    assert_int_equal(c[2], 0);
  }
  tpu_topology_release(topo);

  /* tpu_initialize_system's bytes are the system's; a small buffer starts nothing. */
  CHECK_OK(tpu_system_shutdown(g_sys));
  tpu_system_release(g_sys);
  g_sys = NULL;
  CHECK_ERROR(tpu_initialize_system(&o, &g_sys, again, 3, &len2), TPU_OUT_OF_RANGE, "too small");
  assert_null(g_sys);
  CHECK_OK(tpu_initialize_system(&o, &g_sys, again, sizeof again, &len2));
  assert_int_equal(len2, len);
  assert_memory_equal(again, bytes, len);

  CHECK_OK(tpu_system_topology(g_sys, &topo));
  memset(again, 0, sizeof again); /* still holds the same bytes from above */
  CHECK_OK(tpu_topology_serialize(topo, again, sizeof again, &len2));
  assert_int_equal(len2, len);
  assert_memory_equal(again, bytes, len);
  tpu_topology_release(topo);

  tpu_device_assignment *da = NULL;
  CHECK_OK(tpu_system_default_device_assignment(g_sys, 4, &da));
  int replicas = 0;
  CHECK_OK(tpu_device_assignment_num_replicas(da, &replicas));
  assert_int_equal(replicas, 4);
  for (int r = 0; r < 4; ++r) {
    int ordinal = -1;
    CHECK_OK(tpu_device_assignment_tpu_ordinal(da, r, 0, &ordinal));
    assert_int_equal(ordinal, r);
  }
  tpu_device_assignment_release(da);
  CHECK_ERROR(tpu_system_default_device_assignment(g_sys, 3, &da), TPU_INVALID_ARGUMENT,
               "'num_replicas' must be equal to 1 or 4");
}

/* Counts this process's threads named `name_prefix` and how many are asleep. */
static void count_threads(const char *name_prefix, int *total, int *sleeping) {
  *total = *sleeping = 0;
  DIR *dir = opendir("/proc/self/task");
  assert_non_null(dir);
  struct dirent *e;
  while ((e = readdir(dir)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[300], comm[64] = "", stat[512] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    if (!fgets(comm, sizeof comm, f)) comm[0] = 0;
    fclose(f);
    if (strncmp(comm, name_prefix, strlen(name_prefix)) != 0) continue;
    snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
    f = fopen(path, "r");
    if (!f) continue;
    if (!fgets(stat, sizeof stat, f)) stat[0] = 0;
    fclose(f);
    const char *paren = strrchr(stat, ')'); /* "pid (comm) S ..." */
    ++*total;
    if (paren && paren[1] == ' ' && paren[2] == 'S') ++*sleeping;
  }
  closedir(dir);
}

static void test_system__workers_named_and_asleep_when_idle(void **state) {
  tpu_system_options o = options_for(8);
  start(&o);
  for (int i = 0; i < 100; ++i)
    CHECK_OK(tpu_replicate(g_sys, empty, NULL, 8, 0, NULL, 0, NULL, NULL));
  int total = 0, sleeping = 0, host = 0, host_sleeping = 0;
  /* Idle workers stop spinning within a few ms; allow a loaded machine 2 s. */
  for (int i = 0; i < time_limit(2.0) * 100 && sleeping < 8; ++i) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
    count_threads("tpurt-core-", &total, &sleeping);
  }
  assert_int_equal(total, 8);
  assert_int_equal(sleeping, 8);
  count_threads("tpurt-host", &host, &host_sleeping);
  assert_int_equal(host, 1);
  CHECK_OK(tpu_system_shutdown(g_sys));
  count_threads("tpurt-core-", &total, &sleeping);
  assert_int_equal(total, 0);
}

static tpu_status call_shutdown(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                tpu_tensor **out, int no, void *user) {
  tpu_status st = tpu_system_shutdown((tpu_system *)user);
  return st == TPU_FAILED_PRECONDITION && strstr(tpu_last_error(), "inside a computation")
             ? TPU_OK
             : TPU_INTERNAL;
}

static void test_system__shutdown_inside_computation(void **state) {
  tpu_system_options o = options_for(2);
  start(&o);
  CHECK_OK(tpu_replicate(g_sys, call_shutdown, g_sys, 2, 0, NULL, 0, NULL, NULL));
  int closed = 1;
  CHECK_OK(tpu_system_is_closed(g_sys, &closed));
  assert_int_equal(closed, 0);
}

typedef struct {
  int cpu[16];       /* sched_getcpu() per core */
  int mask_size[16]; /* CPUs in the worker's affinity mask */
} placement;

static tpu_status record_placement(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                   tpu_tensor **out, int no, void *user) {
  int core = 0;
  tpu_replica_context_core(ctx, &core);
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return TPU_INTERNAL;
  ((placement *)user)->cpu[core] = sched_getcpu();
  ((placement *)user)->mask_size[core] = CPU_COUNT(&set);
  return TPU_OK;
}

/* The CPUs this thread may use, ascending; returns how many. */
static int usable_cpus(int *ids, int cap) {
  cpu_set_t set;
  CPU_ZERO(&set);
  assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
  int n = 0;
  for (int c = 0; c < CPU_SETSIZE && n < cap; ++c)
    if (CPU_ISSET(c, &set)) ids[n++] = c;
  return n;
}

/* Runs one step on a fresh system of `cores` cores with `pinning`. */
static placement run_placement(int cores, int pinning) {
  tpu_system_options o = options_for(cores);
  o.pin_threads = pinning;
  start(&o);
  placement p;
  memset(&p, -1, sizeof p);
  CHECK_OK(tpu_replicate(g_sys, record_placement, &p, cores, 0, NULL, 0, NULL, NULL));
  tpu_system_release(g_sys);
  g_sys = NULL;
  return p;
}

static void expect_pinned(const placement *p, int cores, const int *ids, int n) {
  for (int c = 0; c < cores; ++c) {
    assert_int_equal(p->mask_size[c], 1);
    assert_int_equal(p->cpu[c], ids[c % n]);
  }
}

static void test_system__thread_pinning(void **state) {
  int ids[64];
  const int n = usable_cpus(ids, 64);
  if (n > 14) skip();  /* the oversubscribed case below needs n + 2 <= 16 cores */

  placement p = run_placement(4, TPU_PIN_ALWAYS);
  expect_pinned(&p, 4, ids, n);

  /* AUTO pins only when the cores outnumber the usable CPUs, round-robin. */
  p = run_placement(n + 2, TPU_PIN_AUTO);
  expect_pinned(&p, n + 2, ids, n);
  if (n > 1) {
    p = run_placement(n, TPU_PIN_AUTO);
    for (int c = 0; c < n; ++c) assert_int_equal(p.mask_size[c], n);
  }

  p = run_placement(n + 2, TPU_PIN_NEVER);
  for (int c = 0; c < n + 2; ++c) assert_int_equal(p.mask_size[c], n);
}

/* Pinning stays inside the process's affinity mask (taskset, cpusets): it must not
 * move a worker onto a CPU the process was not given. */
static void test_system__pinning_respects_affinity(void **state) {
  int ids[64];
  const int n = usable_cpus(ids, 64);
  if (n < 2) skip();
  cpu_set_t saved, only_last;
  assert_int_equal(sched_getaffinity(0, sizeof saved, &saved), 0);
  CPU_ZERO(&only_last);
  CPU_SET(ids[n - 1], &only_last);
  assert_int_equal(sched_setaffinity(0, sizeof only_last, &only_last), 0);
  placement p = run_placement(3, TPU_PIN_ALWAYS);
  assert_int_equal(sched_setaffinity(0, sizeof saved, &saved), 0);
  const int last[1] = {ids[n - 1]};
  expect_pinned(&p, 3, last, 1);
}

/* ---- embedding configuration bytes: hostile input --------------------------------- */

/* A TPUEmbeddingConfiguration that uses every field, with `mode` and
 * `sharding_strategy` as given (any int32, as the wire allows). */
static pbuf embedding_proto(int32_t mode, int32_t sharding) {
  pbuf p = {{0}, 0}, m = {{0}, 0};
  put_bytes(&m, 1, "a", 1);
  put_int(&m, 2, 100);
  put_int(&m, 3, 8);
  put_int(&m, 4, 2);
  put_bytes(&m, 5, "\x22\x00", 2); /* optimization_parameters {stochastic_gradient_descent {}} */
  put_message(&p, 1, &m);
  m.n = 0;
  put_bytes(&m, 1, "bb", 2);
  put_int(&m, 2, INT64_C(1) << 20);
  put_int(&m, 3, 4);
  put_bytes(&m, 5, "\x22\x00", 2);
  put_message(&p, 1, &m);
  put_int(&p, 2, mode);
  put_int(&p, 3, 16);
  put_int(&p, 4, 1);
  put_int(&p, 5, 8);
  put_int(&p, 6, sharding);
  put_int(&p, 7, 1);
  put_bytes(&p, 9, "/tmp/profile", 12);
  m.n = 0;
  put_bytes(&m, 1, "f", 1);
  put_int(&m, 2, 1);
  const unsigned char shape[] = {4, 2};
  put_bytes(&m, 3, shape, sizeof shape); /* packed input_shape [4, 2] */
  put_message(&p, 10, &m);
  m.n = 0;
  put_int(&m, 1, 1);
  put_int(&m, 2, 2);
  put_message(&p, 11, &m);
  return p;
}

/* Starting a one-core system with these bytes either works or fails with a message
 * and TPU_INVALID_ARGUMENT, TPU_UNIMPLEMENTED (an optimizer tpurt does not build) or
 * TPU_RESOURCE_EXHAUSTED (a table beyond the machine's memory); sanitizer builds catch
 * anything worse. */
static tpu_status init_with_embedding(const void *bytes, size_t n) {
  tpu_system_options o = options_for(1);
  o.embedding_config = n ? bytes : "";
  o.embedding_config_len = n;
  tpu_system *s = NULL;
  tpu_status st = tpu_system_init(&o, &s);
  if (st == TPU_OK) {
    CHECK_OK(tpu_system_release(s));
  } else {
    if ((st != TPU_INVALID_ARGUMENT && st != TPU_UNIMPLEMENTED && st != TPU_RESOURCE_EXHAUSTED) ||
        tpu_last_error()[0] == '\0')
      fail_msg("%zu bytes: %s \"%s\"", n, tpu_status_name(st), tpu_last_error());
    assert_null(s);
  }
  return st;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rng(void) { /* xorshift64: reproducible */
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 32);
}

static void test_system__embedding_config_enums_out_of_range(void **state) {
  pbuf p = embedding_proto(2, 1);
  CHECK_OK(init_with_embedding(p.b, p.n));
  /* Values outside the enums (a C++ enum cannot hold -1: reading it was undefined). */
  const int32_t bad[] = {-1, 4, INT32_MIN, INT32_MAX};
  char want[128];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    p = embedding_proto(bad[i], 0);
    snprintf(want, sizeof want, "TPUEmbeddingConfiguration mode %d is not UNSPECIFIED (0)", bad[i]);
    CHECK_ERROR(init_with_embedding(p.b, p.n), TPU_INVALID_ARGUMENT, want);
    p = embedding_proto(0, bad[i] == 4 ? 2 : bad[i]);
    snprintf(want, sizeof want, "TPUEmbeddingConfiguration sharding_strategy %d is not",
             bad[i] == 4 ? 2 : bad[i]);
    CHECK_ERROR(init_with_embedding(p.b, p.n), TPU_INVALID_ARGUMENT, want);
  }
}

/* As test_topology's parse fuzz: every truncation, random mutations of a valid
 * configuration, and random bytes. */
static void test_system__embedding_config_fuzz(void **state) {
  const pbuf valid = embedding_proto(1, 1);
  int accepted = 0, rejected = 0;
  for (size_t n = 0; n <= valid.n; ++n)
    init_with_embedding(valid.b, n) == TPU_OK ? ++accepted : ++rejected;
  unsigned char b[sizeof valid.b];
  for (int iter = 0; iter < 5000; ++iter) {
    size_t n = valid.n;
    memcpy(b, valid.b, n);
    int edits = 1 + (int)(rng() % 4);
    for (int e = 0; e < edits && n > 0; ++e) {
      size_t at = rng() % n;
      switch (rng() % 6) {
        case 0: b[at] ^= (unsigned char)(1u << (rng() % 8)); break;
        case 1: b[at] = (unsigned char)rng(); break;
        case 2: n = at; break; /* truncate */
        case 3:                /* insert a random byte */
          if (n < sizeof b - 1) {
            memmove(b + at + 1, b + at, n - at);
            b[at] = (unsigned char)rng();
            ++n;
          }
          break;
        case 4: /* a varint of all ones: -1 in whatever field is there */
          if (n + 10 < sizeof b) {
            memmove(b + at + 10, b + at, n - at);
            memset(b + at, 0xff, 9);
            b[at + 9] = 0x01;
            n += 10;
          }
          break;
        default: /* duplicate a slice */
          if (n + (n - at) < sizeof b) {
            memcpy(b + n, b + at, n - at);
            n += n - at;
          }
          break;
      }
    }
    init_with_embedding(b, n) == TPU_OK ? ++accepted : ++rejected;
  }
  for (int iter = 0; iter < 2000; ++iter) {
    size_t n = rng() % 64;
    for (size_t i = 0; i < n; ++i) b[i] = (unsigned char)rng();
    init_with_embedding(b, n) == TPU_OK ? ++accepted : ++rejected;
  }
  /* Both outcomes were exercised, so the mutations reached the validation. */
  assert_true(accepted > 50);
  assert_true(rejected > 50);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_system__init_query_shutdown, release_system),
      cmocka_unit_test_teardown(test_system__transport_of_one_task, release_system),
      cmocka_unit_test_teardown(test_system__embedding_config_is_validated_and_kept, release_system),
      cmocka_unit_test_teardown(test_system__embedding_config_enums_out_of_range, release_system),
      cmocka_unit_test_teardown(test_system__embedding_config_fuzz, release_system),
      cmocka_unit_test_teardown(test_system__one_live_system, release_system),
      cmocka_unit_test_teardown(test_system__options_validation, release_system),
      cmocka_unit_test_teardown(test_system__zeroed_options_are_defaults, release_system),
      cmocka_unit_test_teardown(test_system__num_cores_defaults, release_system),
      cmocka_unit_test_teardown(test_system__bad_environment_fails_every_init, release_system),
      cmocka_unit_test_teardown(test_system__shutdown_accelerator_system_then_release, release_system),
      cmocka_unit_test_teardown(test_system__topology, release_system),
      cmocka_unit_test_teardown(test_system__workers_named_and_asleep_when_idle, release_system),
      cmocka_unit_test_teardown(test_system__shutdown_inside_computation, release_system),
      cmocka_unit_test_teardown(test_system__thread_pinning, release_system),
      cmocka_unit_test_teardown(test_system__pinning_respects_affinity, release_system),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
