#define _POSIX_C_SOURCE 200809L
/* The cluster entry points in one process: tpu_initialize_tpu_system with a local
 * resolver, DTensor's initialize_accelerator_system in local mode, the key-value store
 * and barriers of a one-task system, option validation, and a cluster whose other task
 * never comes (the deadline names it). The multi-process cases are in
 * tests/check_cluster.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>
#include <string.h>

#include "tpurt.h"
#include "test_util.h"

static void clear_cluster_environment(void) {
  const char *vars[] = {"DTENSOR_JOBS", "DTENSOR_CLIENT_ID", "DTENSOR_JOB_NAME", "TF_CONFIG",
                        "SLURM_JOB_ID", "SLURM_PROCID", "OMPI_COMM_WORLD_SIZE", "TPU_NAME",
                        "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", "TPURT_CLUSTER_TOKEN"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
}

static tpu_status sum_fn(tpu_replica_context *ctx, tpu_tensor *const *in, int nin,
                         tpu_tensor **out, int nout, void *user) {
  (void)nin, (void)nout, (void)user;
  return tpu_cross_replica_sum(ctx, in[0], NULL, &out[0], NULL);
}

/* No cluster configured: a one-task system with the resolver's view, where a step runs
 * as with tpu_system_init; the topology comes back too. */
static void test_cluster__initialize_tpu_system_local(void **state) {
  (void)state;
  clear_cluster_environment();
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = 2;
  tpu_system *s = NULL;
  tpu_topology *t = NULL;
  CHECK_OK(tpu_initialize_tpu_system(NULL, &o, NULL, &s, &t));
  int tasks = 0, task = -1, devices = 0;
  CHECK_OK(tpu_system_num_tasks(s, &tasks));
  CHECK_OK(tpu_system_task_id(s, &task));
  CHECK_OK(tpu_topology_num_devices_per_task(t, &devices));
  CHECK(tasks == 1 && task == 0 && devices == 2);
  float v[2] = {1, 2};
  int64_t dims[1] = {1};
  tpu_tensor *in[2], *outs[2] = {NULL, NULL};
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 1, &v[0], sizeof v[0], &in[0]));
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 1, &v[1], sizeof v[1], &in[1]));
  CHECK_OK(tpu_replicate(s, sum_fn, NULL, 2, 1, in, 1, outs, NULL));
  const void *p;
  CHECK_OK(tpu_tensor_data(outs[1], &p));
  CHECK(*(const float *)p == 3.0f);
  for (int i = 0; i < 2; i++) {
    tpu_tensor_release(in[i]);
    tpu_tensor_release(outs[i]);
  }
  /* One system per process. */
  tpu_system *second = NULL;
  CHECK_ERROR(tpu_initialize_tpu_system(NULL, &o, NULL, &second, NULL), TPU_ALREADY_EXISTS,
              "already initialized");
  CHECK_OK(tpu_topology_release(t));
  CHECK_OK(tpu_system_release(s));

  /* An explicit local resolver. */
  tpu_cluster_resolver_options ro = TPU_CLUSTER_RESOLVER_OPTIONS_INIT;
  ro.tpu = "local";
  tpu_cluster_resolver *r = NULL;
  CHECK_OK(tpu_cluster_resolver_create(&ro, &r));
  CHECK_OK(tpu_initialize_tpu_system(r, &o, NULL, &s, NULL));
  CHECK_OK(tpu_system_release(s));
  CHECK_OK(tpu_cluster_resolver_release(r));
}

/* DTensor's entry point with DTENSOR_JOBS unset: local mode, the device type back, the
 * logical CPU count honoured; its errors; shutdown; reset_context. */
static void test_cluster__initialize_accelerator_system_local(void **state) {
  (void)state;
  clear_cluster_environment();
  tpu_system *s = NULL;
  char type[8];
  size_t len = 0;
  CHECK_OK(tpu_initialize_accelerator_system(NULL, 1, 3, 0, &s, type, sizeof type, &len));
  CHECK(len == 3 && strcmp(type, "TPU") == 0);
  int cores = 0;
  CHECK_OK(tpu_system_num_cores(s, &cores));
  CHECK(cores == 3);
  /* Already initialized; then reset_context shuts the old one down first. */
  tpu_system *again = NULL;
  CHECK_ERROR(tpu_initialize_multi_client("cpu", 1, 1, 0, &again, type, sizeof type, &len),
              TPU_ALREADY_EXISTS, "already initialized");
  CHECK_OK(tpu_initialize_multi_client("cpu", 1, 1, 1, &again, type, sizeof type, &len));
  CHECK(strcmp(type, "CPU") == 0);
  int closed = 0;
  CHECK_OK(tpu_system_is_closed(s, &closed));
  CHECK(closed);
  CHECK_OK(tpu_system_release(s));
  CHECK_OK(tpu_shutdown_accelerator_system(again));
  CHECK_ERROR(tpu_shutdown_accelerator_system(again), TPU_FAILED_PRECONDITION, "not initialized");
  CHECK_OK(tpu_system_release(again));

  CHECK_ERROR(tpu_initialize_accelerator_system("gpu", 1, 0, 0, &s, NULL, 0, &len),
              TPU_INVALID_ARGUMENT, "GPU");
  CHECK_ERROR(tpu_initialize_accelerator_system("xpu", 1, 0, 0, &s, NULL, 0, &len),
              TPU_INVALID_ARGUMENT, "Unknown device_type xpu. Allowed values are CPU, GPU, or TPU");
  CHECK_ERROR(tpu_initialize_accelerator_system(NULL, 1, -2, 0, &s, NULL, 0, &len),
              TPU_INVALID_ARGUMENT, "num_logical_cpu_devices is -2");
  /* Too small a buffer for the type: nothing is left running. */
  CHECK_ERROR(tpu_initialize_accelerator_system(NULL, 1, 1, 0, &s, type, 2, &len),
              TPU_OUT_OF_RANGE, "device type");
  CHECK_OK(tpu_initialize_accelerator_system(NULL, 1, 1, 0, &s, NULL, 0, &len));
  CHECK_OK(tpu_system_release(s));
}

/* A one-task system keeps the store in process, with the service's semantics. */
static void test_cluster__kv_and_barrier_one_task(void **state) {
  (void)state;
  clear_cluster_environment();
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = 1;
  tpu_system *s = NULL;
  CHECK_OK(tpu_initialize_tpu_system(NULL, &o, NULL, &s, NULL));
  char buf[16];
  size_t len = 0;
  CHECK_OK(tpu_kv_set(s, "///a//b/", "xy", 2));
  CHECK_ERROR(tpu_kv_set(s, "a/b", "z", 1), TPU_ALREADY_EXISTS, "a/b");
  CHECK_OK(tpu_kv_get(s, "a/b", 1000, buf, sizeof buf, &len));
  CHECK(len == 2 && memcmp(buf, "xy", 2) == 0);
  CHECK_OK(tpu_kv_set(s, "a/b/c", "", 0));
  CHECK_OK(tpu_kv_set(s, "a/bc", "1", 1));
  CHECK_ERROR(tpu_kv_get(s, "nothing", 50, buf, sizeof buf, &len), TPU_DEADLINE_EXCEEDED, "nothing");
  CHECK_ERROR(tpu_kv_get(s, "a/b", 0, buf, sizeof buf, &len), TPU_INVALID_ARGUMENT, "timeout_ms");
  CHECK_ERROR(tpu_kv_try_get(s, "nothing", buf, sizeof buf, &len), TPU_NOT_FOUND, "nothing");
  CHECK_ERROR(tpu_kv_set(s, "//", "v", 1), TPU_INVALID_ARGUMENT, "");
  CHECK_OK(tpu_kv_delete(s, "a/b"));  /* and a/b/c, not a/bc */
  CHECK_ERROR(tpu_kv_try_get(s, "a/b/c", buf, sizeof buf, &len), TPU_NOT_FOUND, "a/b/c");
  CHECK_OK(tpu_kv_try_get(s, "a/bc", buf, sizeof buf, &len));
  CHECK_OK(tpu_kv_delete(s, "never/set")); /* removing nothing is not an error */
  CHECK_OK(tpu_wait_at_barrier(s, "b", 1000, NULL, 0));
  int32_t zero = 0, five = 5;
  CHECK_OK(tpu_wait_at_barrier(s, "b", 1000, &zero, 1));
  CHECK_ERROR(tpu_wait_at_barrier(s, "b", 1000, &five, 1), TPU_INVALID_ARGUMENT, "task 5");
  CHECK_ERROR(tpu_wait_at_barrier(s, "b", -1, NULL, 0), TPU_INVALID_ARGUMENT, "timeout_ms");
  /* tpurt's own names between tasks are out of users' reach. */
  CHECK_ERROR(tpu_kv_set(s, "__tpurt/transport/choice/0", "x", 1), TPU_INVALID_ARGUMENT,
              "'__tpurt/transport/choice/0' begins with '__tpurt/'");
  CHECK_ERROR(tpu_kv_set(s, "//__tpurt//x", "x", 1), TPU_INVALID_ARGUMENT, "reserved");
  CHECK_ERROR(tpu_kv_delete(s, "__tpurt"), TPU_INVALID_ARGUMENT, "reserved");
  CHECK_ERROR(tpu_wait_at_barrier(s, "__tpurt/transport/shm-attached", 1000, NULL, 0),
              TPU_INVALID_ARGUMENT, "barrier id");
  CHECK_OK(tpu_kv_set(s, "_tpurt/x", "x", 1));
  CHECK_OK(tpu_system_shutdown(s));
  CHECK_ERROR(tpu_kv_set(s, "late", "v", 1), TPU_FAILED_PRECONDITION, "shut down");
  CHECK_OK(tpu_system_release(s));
}

/* TPURT_TRANSPORT takes one of four words; anything else is refused at init, by name. */
static void test_cluster__transport_variable(void **state) {
  (void)state;
  clear_cluster_environment();
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = 1;
  tpu_system *s = NULL;
  const char *bad[] = {"SHM", "shm ", "tcp,shm", "0"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("TPURT_TRANSPORT", bad[i], 1);
    CHECK_ERROR(tpu_system_init(&o, &s), TPU_INVALID_ARGUMENT, bad[i]);
    CHECK(s == NULL);
  }
  const char *good[] = {"auto", "tcp", "shm", "mpi", ""};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    setenv("TPURT_TRANSPORT", good[i], 1);
    CHECK_OK(tpu_system_init(&o, &s));
    CHECK_OK(tpu_system_release(s));
    s = NULL;
  }
  unsetenv("TPURT_TRANSPORT");
}

/* Cluster options are checked before anything starts, and a cluster whose other task
 * never registers ends at the init deadline naming it. */
static void test_cluster__options_and_missing_task(void **state) {
  (void)state;
  clear_cluster_environment();
  setenv("DTENSOR_JOBS", "127.0.0.1:29301,127.0.0.1:29302", 1);
  setenv("DTENSOR_CLIENT_ID", "0", 1);
  tpu_cluster_options co = TPU_CLUSTER_OPTIONS_INIT;
  tpu_system *s = NULL;
  co.heartbeat_interval_ms = -1;
  CHECK_ERROR(tpu_initialize_tpu_system(NULL, NULL, &co, &s, NULL), TPU_INVALID_ARGUMENT,
              "heartbeat_interval_ms is -1");
  co.heartbeat_interval_ms = 5000;
  co.heartbeat_timeout_ms = 1000;
  CHECK_ERROR(tpu_initialize_tpu_system(NULL, NULL, &co, &s, NULL), TPU_INVALID_ARGUMENT,
              "must be shorter than the heartbeat timeout");
  co = (tpu_cluster_options)TPU_CLUSTER_OPTIONS_INIT;
  co.struct_size = 3;
  CHECK_ERROR(tpu_initialize_tpu_system(NULL, NULL, &co, &s, NULL), TPU_INVALID_ARGUMENT,
              "struct_size");
  co = (tpu_cluster_options)TPU_CLUSTER_OPTIONS_INIT;
  co.init_timeout_ms = 500;
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = 1;
  CHECK_ERROR(tpu_initialize_tpu_system(NULL, &o, &co, &s, NULL), TPU_DEADLINE_EXCEEDED, "task 1");
  CHECK(s == NULL);
  /* Nothing was left behind: a local system starts. */
  clear_cluster_environment();
  CHECK_OK(tpu_initialize_tpu_system(NULL, &o, NULL, &s, NULL));
  CHECK_OK(tpu_system_release(s));
}

/* The value the library works with for an environment variable (-1: not listed). */
static int64_t env_value_of(const char *name) {
  const char *n = NULL;
  int64_t v = -1;
  for (int i = 0; tpu_environment_variable(i, &n, &v) == TPU_OK; i++)
    if (strcmp(n, name) == 0) return v;
  return -1;
}

/* Cluster options: a zero field is the default (300000, 1000, 10000 and 60000 ms),
 * or the environment's value when set; a nonzero field wins. The heartbeat check
 * shows the values used: it runs before any connection. */
static void test_cluster__options_default_from_environment(void **state) {
  (void)state;
  clear_cluster_environment();
  const char *vars[] = {"TPURT_INIT_TIMEOUT_MS", "TPURT_HEARTBEAT_INTERVAL_MS",
                        "TPURT_HEARTBEAT_TIMEOUT_MS", "TPURT_SHUTDOWN_BARRIER_TIMEOUT_MS"};
  for (size_t i = 0; i < 4; i++) unsetenv(vars[i]);
  CHECK(env_value_of("TPURT_INIT_TIMEOUT_MS") == 300000);
  CHECK(env_value_of("TPURT_HEARTBEAT_INTERVAL_MS") == 1000);
  CHECK(env_value_of("TPURT_HEARTBEAT_TIMEOUT_MS") == 10000);
  CHECK(env_value_of("TPURT_SHUTDOWN_BARRIER_TIMEOUT_MS") == 60000);
  setenv("DTENSOR_JOBS", "127.0.0.1:29311,127.0.0.1:29312", 1);
  tpu_cluster_options co = TPU_CLUSTER_OPTIONS_INIT;
  tpu_system *s = NULL;
  co.heartbeat_interval_ms = 10000;
  CHECK_ERROR(tpu_initialize_tpu_system(NULL, NULL, &co, &s, NULL), TPU_INVALID_ARGUMENT,
              "(10000 ms) must be shorter than the heartbeat timeout (10000 ms)");
  co.heartbeat_interval_ms = 0;
  co.heartbeat_timeout_ms = 1000;
  CHECK_ERROR(tpu_initialize_tpu_system(NULL, NULL, &co, &s, NULL), TPU_INVALID_ARGUMENT,
              "interval (1000 ms) must be shorter than the heartbeat timeout (1000 ms)");
  setenv("TPURT_HEARTBEAT_INTERVAL_MS", "5000", 1);
  setenv("TPURT_HEARTBEAT_TIMEOUT_MS", "4000", 1);
  CHECK_ERROR(tpu_initialize_tpu_system(NULL, NULL, NULL, &s, NULL), TPU_INVALID_ARGUMENT,
              "interval (5000 ms) must be shorter than the heartbeat timeout (4000 ms)");
  co = (tpu_cluster_options)TPU_CLUSTER_OPTIONS_INIT;
  co.heartbeat_interval_ms = 4500;
  CHECK_ERROR(tpu_initialize_tpu_system(NULL, NULL, &co, &s, NULL), TPU_INVALID_ARGUMENT,
              "interval (4500 ms) must be shorter than the heartbeat timeout (4000 ms)");
  unsetenv("TPURT_HEARTBEAT_INTERVAL_MS");
  unsetenv("TPURT_HEARTBEAT_TIMEOUT_MS");
  /* The init deadline from the environment: task 1 never comes. */
  setenv("TPURT_INIT_TIMEOUT_MS", "300", 1);
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = 1;
  const double start = now();
  tpu_status st = tpu_initialize_tpu_system(NULL, &o, NULL, &s, NULL);
  unsetenv("TPURT_INIT_TIMEOUT_MS");
  CHECK(st == TPU_DEADLINE_EXCEEDED && strstr(tpu_last_error(), "task 1") != NULL);
  CHECK(now() - start < time_limit(30));
  CHECK(s == NULL);
  clear_cluster_environment();
}

/* DTensor's entry point: enable_coordination_service 0 is refused when DTENSOR_JOBS
 * names more than one client (tpurt joins tasks only through the service) and
 * accepted for one; num_logical_cpu_devices 0 is the default core count. */
static void test_cluster__accelerator_system_arguments(void **state) {
  (void)state;
  clear_cluster_environment();
  setenv("DTENSOR_JOBS", "127.0.0.1:29313,127.0.0.1:29314", 1);
  tpu_system *s = NULL;
  size_t len = 0;
  CHECK_ERROR(tpu_initialize_accelerator_system(NULL, 0, 1, 0, &s, NULL, 0, &len),
              TPU_INVALID_ARGUMENT, "enable_coordination_service is 0");
  CHECK(s == NULL);
  setenv("DTENSOR_JOBS", "127.0.0.1:29315", 1);
  setenv("TPURT_NUM_CORES", "3", 1);
  CHECK_OK(tpu_initialize_accelerator_system("cpu", 0, 0, 0, &s, NULL, 0, &len));
  int cores = 0, tasks = 0;
  CHECK_OK(tpu_system_num_cores(s, &cores));
  CHECK_OK(tpu_system_num_tasks(s, &tasks));
  CHECK(cores == 3 && tasks == 1);
  CHECK_OK(tpu_shutdown_accelerator_system(s)); /* one task: not multi-client */
  CHECK_OK(tpu_system_release(s));
  unsetenv("TPURT_NUM_CORES");
  clear_cluster_environment();
}

#define AT(type, field, offset, size)                  \
  do {                                                 \
    CHECK(offsetof(type, field) == (offset));          \
    CHECK(sizeof(((type *)0)->field) == (size));       \
  } while (0)

/* "Fields are only ever appended": the cluster options' layouts of 1.x, field by field
 * (LP64; a field moved or resized breaks callers built against an older header). */
static void test_cluster__options_fields_keep_their_offsets(void **state) {
  (void)state;
  if (sizeof(void *) != 8 || sizeof(size_t) != 8 || sizeof(int) != 4) skip();
  AT(tpu_cluster_resolver_options, struct_size, 0, 8);
  AT(tpu_cluster_resolver_options, source, 8, 4);
  AT(tpu_cluster_resolver_options, tpu, 16, 8);
  AT(tpu_cluster_resolver_options, job_name, 24, 8);
  AT(tpu_cluster_resolver_options, coordinator_name, 32, 8);
  AT(tpu_cluster_resolver_options, coordinator_address, 40, 8);
  AT(tpu_cluster_resolver_options, task_type, 48, 8);
  AT(tpu_cluster_resolver_options, task_id, 56, 4);
  AT(tpu_cluster_resolver_options, rpc_layer, 64, 8);
  AT(tpu_cluster_resolver_options, environment, 72, 8);
  AT(tpu_cluster_resolver_options, port_base, 80, 4);
  AT(tpu_cluster_options, struct_size, 0, 8);
  AT(tpu_cluster_options, init_timeout_ms, 8, 8);
  AT(tpu_cluster_options, heartbeat_interval_ms, 16, 8);
  AT(tpu_cluster_options, heartbeat_timeout_ms, 24, 8);
  AT(tpu_cluster_options, shutdown_barrier_timeout_ms, 32, 8);
  AT(tpu_cluster_options, token, 40, 8);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cluster__initialize_tpu_system_local),
      cmocka_unit_test(test_cluster__initialize_accelerator_system_local),
      cmocka_unit_test(test_cluster__kv_and_barrier_one_task),
      cmocka_unit_test(test_cluster__transport_variable),
      cmocka_unit_test(test_cluster__options_and_missing_task),
      cmocka_unit_test(test_cluster__options_default_from_environment),
      cmocka_unit_test(test_cluster__accelerator_system_arguments),
      cmocka_unit_test(test_cluster__options_fields_keep_their_offsets),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
