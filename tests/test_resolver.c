/* Cluster resolution (tpu_cluster_resolver_*): every source (TPU name, TF_CONFIG,
 * DTENSOR_*, Slurm, Open MPI) and AUTO's order, their defaults, overrides and
 * malformed inputs, master()'s forms, the cluster spec as JSON, enter/exit, NULL
 * arguments, and random bytes as TF_CONFIG and as a Slurm host list. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tpurt.h>
#include <tpurt/cluster.h>

#include "test_util.h"

/* Every variable the resolver reads: each case starts with none of them set. */
static const char *const kVars[] = {
    "DTENSOR_JOBS", "DTENSOR_CLIENT_ID", "DTENSOR_JOB_NAME", "DTENSOR_NUM_CLIENTS",
    "DTENSOR_USE_PARALLEL_EXECUTOR", "TF_CONFIG", "SLURM_JOB_ID", "SLURM_PROCID",
    "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
    "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_LOCALID",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_MCA_orte_hnp_uri", "TPURT_TASK_ADDRESSES",
    "TPURT_COORDINATOR_ADDRESS", "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", "TPU_NAME", "TPU_CONFIG",
    "TPURT_NUM_CORES"};

static tpu_cluster_resolver *g_r;

static int clear_env(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof kVars / sizeof kVars[0]; ++i) unsetenv(kVars[i]);
  return 0;
}

static int release_resolver(void **state) {
  (void)state;
  tpu_cluster_resolver_release(g_r);
  g_r = NULL;
  return 0;
}

static tpu_cluster_resolver_options opts(int source) {
  tpu_cluster_resolver_options o = TPU_CLUSTER_RESOLVER_OPTIONS_INIT;
  o.source = source;
  return o;
}

/* Resolves into g_r (released first, and by the teardown). */
static void create(const tpu_cluster_resolver_options *o) {
  tpu_cluster_resolver_release(g_r);
  g_r = NULL;
  tpu_status st = tpu_cluster_resolver_create(o, &g_r);
  if (st != TPU_OK)
    fail_msg("tpu_cluster_resolver_create: %s: %s", tpu_status_name(st), tpu_last_error());
}

#define EXPECT_CREATE_ERROR(o, code, fragment)                    \
  do {                                                            \
    tpu_cluster_resolver *r_ = NULL;                              \
    CHECK_ERROR(tpu_cluster_resolver_create((o), &r_), (code), (fragment)); \
    assert_null(r_);                                              \
  } while (0)

typedef tpu_status (*string_getter)(const tpu_cluster_resolver *, char *, size_t, size_t *);

/* A string property of g_r, in a static buffer (valid until the next call). */
static const char *get(string_getter fn) {
  static char buf[4096];
  size_t n = 0;
  CHECK_OK(fn(g_r, buf, sizeof buf, &n));
  assert_int_equal(n, strlen(buf));
  return buf;
}

static const char *spec(void) { return get(tpu_cluster_resolver_cluster_spec); }

static const char *master(const char *type, int id, const char *rpc) {
  static char buf[512];
  size_t n = 0;
  CHECK_OK(tpu_cluster_resolver_master(g_r, type, id, rpc, buf, sizeof buf, &n));
  return buf;
}

static const char *address(const char *job, int id) {
  static char buf[512];
  size_t n = 0;
  CHECK_OK(tpu_cluster_resolver_task_address(g_r, job, id, buf, sizeof buf, &n));
  return buf;
}

static int num_tasks(const char *job) {
  int n = -1;
  CHECK_OK(tpu_cluster_resolver_num_tasks(g_r, job, &n));
  return n;
}

static int source(void) {
  int s = -1;
  CHECK_OK(tpu_cluster_resolver_source(g_r, &s));
  return s;
}

static int task_id(void) {
  int id = -2;
  CHECK_OK(tpu_cluster_resolver_task_id(g_r, &id));
  return id;
}

static int is_local(void) {
  return strcmp(get(tpu_cluster_resolver_tpu_name), "local") == 0 && strcmp(spec(), "{}") == 0;
}

/* ---- TPU name ---------------------------------------------------------------- */

static void test_resolver__auto_nothing_set_is_local(void **state) {
  create(NULL);
  assert_int_equal(source(), TPU_RESOLVER_TPU);
  assert_true(is_local());
  assert_string_equal(get(tpu_cluster_resolver_tpu_name), "local");
  assert_string_equal(spec(), "{}");
  assert_string_equal(master(NULL, -1, NULL), "");
  assert_string_equal(master("worker", 3, "grpc"), "");
  assert_string_equal(get(tpu_cluster_resolver_job_name), "worker");
  assert_int_equal(task_id(), 0);
  assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "");
  assert_string_equal(get(tpu_cluster_resolver_environment), "");
  int n;
  CHECK_ERROR(tpu_cluster_resolver_num_tasks(g_r, NULL, &n), TPU_NOT_FOUND, "'worker'");
  size_t len;
  CHECK_ERROR(tpu_cluster_resolver_task_address(g_r, NULL, 0, NULL, 0, &len), TPU_NOT_FOUND,
              "not in the cluster spec");

  tpu_cluster_resolver_options o = opts(TPU_RESOLVER_TPU);
  o.tpu = "local";
  o.job_name = "tpu_worker";
  o.environment = "google";
  create(&o);
  assert_true(is_local());
  assert_string_equal(get(tpu_cluster_resolver_job_name), "tpu_worker");
  assert_string_equal(get(tpu_cluster_resolver_environment), "google");
}

static void test_resolver__tpu_source_needs_a_name(void **state) {
  tpu_cluster_resolver_options o = opts(TPU_RESOLVER_TPU);
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "Please provide a TPU Name to connect to.");
  o.tpu = "";
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "TPU_NAME");
}

static void test_resolver__tpu_grpc_endpoints(void **state) {
  tpu_cluster_resolver_options o = opts(TPU_RESOLVER_TPU);
  o.tpu = "grpc://10.0.0.2,grpc://10.0.0.3:9000,10.0.0.4:1";
  create(&o);
  assert_int_equal(source(), TPU_RESOLVER_TPU);
  assert_string_equal(get(tpu_cluster_resolver_tpu_name), o.tpu);
  assert_string_equal(spec(), "{\"worker\":[\"10.0.0.2:8470\",\"10.0.0.3:9000\",\"10.0.0.4:1\"]}");
  assert_int_equal(num_tasks(NULL), 3);
  assert_int_equal(num_tasks("worker"), 3);
  assert_string_equal(address(NULL, 1), "10.0.0.3:9000");
  assert_string_equal(master(NULL, -1, NULL), "grpc://10.0.0.2:8470");
  /* rpc_layer is ignored: always grpc */
  assert_string_equal(master("worker", 2, "http"), "grpc://10.0.0.4:1");
  assert_string_equal(master(NULL, 1, ""), "grpc://10.0.0.3:9000");
  assert_string_equal(get(tpu_cluster_resolver_rpc_layer), "grpc");
  assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "10.0.0.2:8470");
  size_t len;
  CHECK_ERROR(tpu_cluster_resolver_master(g_r, "worker", 3, NULL, NULL, 0, &len),
              TPU_INVALID_ARGUMENT, "No task with index 3 in job 'worker'");
  CHECK_ERROR(tpu_cluster_resolver_master(g_r, "ps", 0, NULL, NULL, 0, &len),
              TPU_INVALID_ARGUMENT, "No such job in cluster: 'ps'");
  CHECK_ERROR(tpu_cluster_resolver_master(g_r, NULL, -2, NULL, NULL, 0, &len),
              TPU_INVALID_ARGUMENT, "-2");
  CHECK_ERROR(tpu_cluster_resolver_task_address(g_r, "worker", 3, NULL, 0, &len), TPU_NOT_FOUND,
              "has no task 3 (it has 3");
  CHECK_ERROR(tpu_cluster_resolver_task_address(g_r, "worker", -1, NULL, 0, &len), TPU_NOT_FOUND,
              "no task -1");
  int n;
  CHECK_ERROR(tpu_cluster_resolver_num_tasks(g_r, "ps", &n), TPU_NOT_FOUND, "'ps'");

  /* IPv6 in brackets; the port default applies to it too */
  o.tpu = "grpc://[::1]:5,grpc://[fe80::1%eth0]";
  o.job_name = "tpu_worker";
  create(&o);
  assert_string_equal(spec(), "{\"tpu_worker\":[\"[::1]:5\",\"[fe80::1%eth0]:8470\"]}");
  assert_string_equal(master(NULL, -1, NULL), "grpc://[::1]:5");
  assert_string_equal(get(tpu_cluster_resolver_job_name), "tpu_worker");
}

/* TensorFlow's tpu/client/client.py _environment_var_to_network_endpoints gives a
 * grpc:// name without a port _DEFAULT_ENDPOINT_PORT 8470, and
 * TPUClusterResolver.master formats it with format_master_url(master, 'grpc'), whatever
 * rpc_layer says; a task not in the spec is ClusterSpec.task_address's ValueError. */
static void test_resolver__tpu_grpc_name_gets_port_8470(void **state) {
  tpu_cluster_resolver_options o = opts(TPU_RESOLVER_TPU);
  o.tpu = "grpc://10.240.1.2";
  create(&o);
  assert_string_equal(spec(), "{\"worker\":[\"10.240.1.2:8470\"]}");
  assert_string_equal(master(NULL, -1, NULL), "grpc://10.240.1.2:8470");
  assert_string_equal(master(NULL, -1, "http"), "grpc://10.240.1.2:8470");
  assert_string_equal(master("worker", 0, ""), "grpc://10.240.1.2:8470");
  assert_string_equal(get(tpu_cluster_resolver_get_master), "grpc://10.240.1.2:8470");
  size_t len;
  CHECK_ERROR(tpu_cluster_resolver_master(g_r, "worker", 1, NULL, NULL, 0, &len),
              TPU_INVALID_ARGUMENT, "No task with index 1 in job 'worker' (it has 1 task(s))");
  CHECK_ERROR(tpu_cluster_resolver_master(g_r, "tpu_worker", 0, "grpc", NULL, 0, &len),
              TPU_INVALID_ARGUMENT, "No such job in cluster: 'tpu_worker' (jobs: 'worker')");
}

/* TensorFlow's client.py _get_tpu_name: a tpu of '' is falsy, as None is, so the
 * name comes from KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS or TPU_NAME, and with neither it is
 * Client's ValueError "Please provide a TPU Name to connect to.". */
static void test_resolver__empty_tpu_is_none_given(void **state) {
  tpu_cluster_resolver_options o = opts(TPU_RESOLVER_TPU);
  o.tpu = "";
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "Please provide a TPU Name to connect to.");
  setenv("TPU_NAME", "grpc://10.0.0.9", 1);
  create(&o);
  assert_string_equal(get(tpu_cluster_resolver_tpu_name), "grpc://10.0.0.9");
  assert_string_equal(get(tpu_cluster_resolver_get_master), "grpc://10.0.0.9:8470");
  tpu_cluster_resolver_options none = opts(TPU_RESOLVER_TPU); /* tpu NULL: the same */
  create(&none);
  assert_string_equal(get(tpu_cluster_resolver_tpu_name), "grpc://10.0.0.9");
}

/* TensorFlow's TPUClusterResolver.get_master: self.master(), for every source here. */
static void test_resolver__get_master(void **state) {
  create(NULL); /* local */
  assert_string_equal(get(tpu_cluster_resolver_get_master), "");
  setenv("TF_CONFIG", "{\"cluster\": {\"worker\": [\"a:1\", \"b:2\"]},"
                      " \"task\": {\"type\": \"worker\", \"index\": 1}, \"rpc_layer\": \"grpc\"}", 1);
  create(NULL);
  assert_string_equal(get(tpu_cluster_resolver_get_master), master(NULL, -1, NULL));
  assert_string_equal(get(tpu_cluster_resolver_get_master), "grpc://b:2");
  size_t n = 0;
  CHECK_OK(tpu_cluster_resolver_get_master(g_r, NULL, 0, &n)); /* a size query */
  assert_int_equal(n, strlen("grpc://b:2"));
}

static void test_resolver__tpu_name_from_the_environment(void **state) {
  setenv("TPU_NAME", "grpc://b:2", 1);
  create(NULL);
  assert_string_equal(spec(), "{\"worker\":[\"b:2\"]}");
  setenv("KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", "grpc://a:1", 1);
  create(NULL);
  assert_string_equal(spec(), "{\"worker\":[\"a:1\"]}");
  assert_string_equal(get(tpu_cluster_resolver_tpu_name), "grpc://a:1");
  /* options->tpu wins */
  tpu_cluster_resolver_options o = opts(TPU_RESOLVER_TPU);
  o.tpu = "grpc://c:3";
  create(&o);
  assert_string_equal(spec(), "{\"worker\":[\"c:3\"]}");
  unsetenv("KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS");
  setenv("TPU_NAME", "local", 1);
  create(NULL);
  assert_true(is_local());
}

static void test_resolver__cloud_tpu_name_is_not_found(void **state) {
  tpu_cluster_resolver_options o = opts(TPU_RESOLVER_TPU);
  o.tpu = "my-tpu";
  EXPECT_CREATE_ERROR(&o, TPU_NOT_FOUND, "'my-tpu' (from options->tpu)");
  EXPECT_CREATE_ERROR(&o, TPU_NOT_FOUND, "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS, TPU_NAME");
  EXPECT_CREATE_ERROR(&o, TPU_NOT_FOUND, "grpc://host:port");
  setenv("TPU_NAME", "node-1", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_NOT_FOUND, "'node-1' (from TPU_NAME)");
  o.tpu = "10.0.0.1:8470"; /* no grpc:// */
  EXPECT_CREATE_ERROR(&o, TPU_NOT_FOUND, "no Cloud TPU API");
}

static void test_resolver__tpu_bad_endpoints(void **state) {
  tpu_cluster_resolver_options o = opts(TPU_RESOLVER_TPU);
  o.tpu = "grpc://a:1,grpc://a:1";
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "duplicate address 'a:1'");
  o.tpu = "grpc://a,grpc://a:8470";
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "duplicate address 'a:8470'");
  const char *bad[] = {"grpc://a:0",  "grpc://a:65536", "grpc://a:b",  "grpc://:5",
                       "grpc://",     "grpc://a:1,",    "grpc://::1",  "grpc://[::1",
                       "grpc://a:1:2", "grpc://[]:1",   "grpc://a b:1", "grpc://a:",
                       "grpc://[::1]x", "grpc://a:123456"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    o.tpu = bad[i];
    EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "invalid address");
    EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "options->tpu");
  }
  setenv("KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", "grpc://x:99999", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "'x:99999' in KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS");
}

static void test_resolver__coordinator_options(void **state) {
  tpu_cluster_resolver_options o = opts(TPU_RESOLVER_TPU);
  o.tpu = "grpc://a:1,grpc://b:2";
  o.coordinator_name = "coordinator";
  o.coordinator_address = "c:3";
  create(&o);
  assert_string_equal(spec(), "{\"coordinator\":[\"c:3\"],\"worker\":[\"a:1\",\"b:2\"]}");
  assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "c:3");
  assert_int_equal(num_tasks("coordinator"), 1);
  assert_string_equal(master(NULL, -1, NULL), "grpc://a:1");

  o.coordinator_name = NULL; /* the address alone: the service's, no job */
  create(&o);
  assert_string_equal(spec(), "{\"worker\":[\"a:1\",\"b:2\"]}");
  assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "c:3");

  o.coordinator_name = "coordinator";
  o.coordinator_address = NULL;
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "needs options->coordinator_address");
  o.coordinator_name = "worker";
  o.coordinator_address = "c:3";
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "already a job");
  o.coordinator_name = NULL;
  o.coordinator_address = "c";
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "'c' in options->coordinator_address");
  o.coordinator_name = "";
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "coordinator_name");

  /* local: no network, the coordinator options change nothing */
  o.tpu = "local";
  o.coordinator_name = "coordinator";
  o.coordinator_address = "c:3";
  create(&o);
  assert_string_equal(spec(), "{}");
  assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "");
}

/* ---- TF_CONFIG --------------------------------------------------------------- */

#define TF_CLUSTER                                                                     \
  "\"cluster\": {\"chief\": [\"h0:2222\"], \"worker\": [\"h1:2222\", \"h2:2222\"], " \
  "\"ps\": [\"h3:2222\"]}"

static void test_resolver__tf_config(void **state) {
  setenv("TF_CONFIG",
         "{" TF_CLUSTER ", \"task\": {\"type\": \"worker\", \"index\": 1}, \"rpc_layer\": \"grpc\"}",
         1);
  create(NULL);
  assert_int_equal(source(), TPU_RESOLVER_TF_CONFIG);
  assert_string_equal(
      spec(), "{\"chief\":[\"h0:2222\"],\"ps\":[\"h3:2222\"],\"worker\":[\"h1:2222\",\"h2:2222\"]}");
  assert_string_equal(get(tpu_cluster_resolver_job_name), "worker");
  assert_int_equal(task_id(), 1);
  assert_string_equal(get(tpu_cluster_resolver_rpc_layer), "grpc");
  assert_string_equal(master(NULL, -1, NULL), "grpc://h2:2222");
  assert_string_equal(master("ps", 0, NULL), "grpc://h3:2222");
  assert_string_equal(master("chief", 0, "http"), "http://h0:2222");
  assert_string_equal(master(NULL, 0, ""), "h1:2222");
  assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "h0:2222"); /* the chief */
  assert_int_equal(num_tasks(NULL), 2);
  assert_int_equal(num_tasks("ps"), 1);
  assert_string_equal(address("chief", 0), "h0:2222");
  assert_string_equal(get(tpu_cluster_resolver_tpu_name), "TF_CONFIG");
  tpu_cluster_resolver_options o = opts(TPU_RESOLVER_TF_CONFIG);
  create(&o);
  assert_int_equal(source(), TPU_RESOLVER_TF_CONFIG);

  /* no rpc_layer: bare addresses; session_master verbatim */
  setenv("TF_CONFIG", "{" TF_CLUSTER ", \"task\": {\"type\": \"ps\", \"index\": 0}}", 1);
  create(NULL);
  assert_string_equal(master(NULL, -1, NULL), "h3:2222");
  assert_string_equal(get(tpu_cluster_resolver_rpc_layer), "");
  setenv("TF_CONFIG",
         "{" TF_CLUSTER ", \"task\": {\"type\": \"ps\", \"index\": 0}, \"session_master\": \"x://y\"}",
         1);
  create(NULL);
  assert_string_equal(master(NULL, -1, NULL), "x://y");
  assert_string_equal(master("worker", 1, "grpc"), "x://y");

  /* one job with one task: master "" */
  setenv("TF_CONFIG",
         "{\"cluster\": {\"worker\": [\"h1:2222\"]}, \"task\": {\"type\": \"worker\"}, "
         "\"rpc_layer\": \"grpc\"}",
         1);
  create(NULL);
  assert_string_equal(master(NULL, -1, NULL), "");
  assert_int_equal(task_id(), 0); /* index not given: 0 */
  assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "h1:2222");
  /* no chief: the workers' task 0 leads */
  setenv("TF_CONFIG",
         "{\"cluster\": {\"worker\": [\"w0:1\", \"w1:1\"], \"ps\": [\"p0:1\"]}, "
         "\"task\": {\"type\": \"ps\", \"index\": 0}}",
         1);
  create(NULL);
  assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "w0:1");
}

static void test_resolver__tf_config_overrides(void **state) {
  setenv("TF_CONFIG",
         "{" TF_CLUSTER ", \"task\": {\"type\": \"worker\", \"index\": 1}, \"rpc_layer\": \"grpc\"}",
         1);
  tpu_cluster_resolver_options o = opts(TPU_RESOLVER_TF_CONFIG);
  o.task_id = 0; /* with task_type NULL: no override (zeroed options) */
  create(&o);
  assert_int_equal(task_id(), 1);
  o.task_id = -1;
  o.task_type = "ps";
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "task index 1"); /* ps has one task */
  o.task_id = 0;
  o.rpc_layer = "grpc+verbs";
  create(&o);
  assert_string_equal(get(tpu_cluster_resolver_job_name), "ps");
  assert_int_equal(task_id(), 0);
  assert_string_equal(master(NULL, -1, NULL), "grpc+verbs://h3:2222");
  assert_string_equal(get(tpu_cluster_resolver_rpc_layer), "grpc+verbs");
  o.task_type = NULL;
  o.task_id = 0;
  o.rpc_layer = "";
  create(&o);
  assert_int_equal(task_id(), 1);
  assert_string_equal(master(NULL, -1, NULL), "h2:2222");
  o.task_type = "chief";
  create(&o);
  assert_int_equal(task_id(), 0);
  o.task_type = NULL;
  o.task_id = 2;
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "has 2 task(s)");
  o.task_id = -2;
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "options->task_id is -2");
}

static void test_resolver__tf_config_sparse_job(void **state) {
  setenv("TF_CONFIG",
         "{\"cluster\": {\"worker\": {\"3\": \"h3:1\", \"1\": \"h1:1\"}, \"chief\": [\"c:1\"]}, "
         "\"task\": {\"type\": \"worker\", \"index\": 3}}",
         1);
  create(NULL);
  assert_string_equal(spec(), "{\"chief\":[\"c:1\"],\"worker\":{\"1\":\"h1:1\",\"3\":\"h3:1\"}}");
  assert_int_equal(num_tasks("worker"), 2);
  assert_int_equal(task_id(), 3);
  assert_string_equal(address("worker", 1), "h1:1");
  assert_string_equal(master(NULL, -1, NULL), "h3:1");
  size_t len;
  CHECK_ERROR(tpu_cluster_resolver_task_address(g_r, "worker", 0, NULL, 0, &len), TPU_NOT_FOUND,
              "no task 0 (it has 2");
  CHECK_ERROR(tpu_cluster_resolver_task_address(g_r, "worker", 2, NULL, 0, &len), TPU_NOT_FOUND,
              "no task 2");
  setenv("TF_CONFIG",
         "{\"cluster\": {\"worker\": {\"1\": \"h1:1\"}}, \"task\": {\"type\": \"worker\", "
         "\"index\": 0}}",
         1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "task index 0");
  /* Jobs at the largest index: 16 are 2^20 task slots, 17 are too many (more would be
   * gigabytes) */
  char json[1024];
  for (int jobs = 16; jobs <= 17; ++jobs) {
    strcpy(json, "{\"task\": {\"type\": \"j0\", \"index\": 65535}, \"cluster\": {");
    for (int j = 0; j < jobs; ++j)
      snprintf(json + strlen(json), sizeof json - strlen(json), "%s\"j%d\": {\"65535\": \"h%d:1\"}",
               j ? ", " : "", j, j);
    strcat(json, "}}");
    setenv("TF_CONFIG", json, 1);
    if (jobs == 16)
      create(NULL);
    else
      EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "more than 1048576 task slots");
  }
}

static void expect_tf_config_error(const char *json, const char *fragment) {
  setenv("TF_CONFIG", json, 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, fragment);
  tpu_cluster_resolver_options o = opts(TPU_RESOLVER_TF_CONFIG);
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, fragment);
}

static void test_resolver__tf_config_malformed(void **state) {
  expect_tf_config_error("{\"cluster\": ", "TF_CONFIG is not valid JSON: ");
  expect_tf_config_error("{\n\"cluster\": x}", "at line 2 column");
  expect_tf_config_error("[1]", "TF_CONFIG is a list; expected a JSON object");
  expect_tf_config_error("{\"cluster\": [\"a:1\"]}", "\"cluster\" is a list");
  expect_tf_config_error("{\"cluster\": {\"worker\": \"a:1\"}}", "cluster.worker is a string");
  expect_tf_config_error("{\"cluster\": {\"worker\": [\"a:1\", 5]}}", "cluster.worker[1] is an integer");
  expect_tf_config_error("{\"cluster\": {\"worker\": [\"a\"]}}", "'a' in TF_CONFIG's cluster.worker[0]");
  expect_tf_config_error("{\"cluster\": {\"worker\": {\"x\": \"a:1\"}}}", "task index 'x'");
  expect_tf_config_error("{\"cluster\": {\"worker\": {\"-1\": \"a:1\"}}}", "task index '-1'");
  expect_tf_config_error("{\"cluster\": {\"worker\": {\"99999999\": \"a:1\"}}}", "task index '99999999'");
  expect_tf_config_error("{\"cluster\": {\"worker\": {\"0\": 1}}}", "cluster.worker.0 is an integer");
  expect_tf_config_error("{\"cluster\": {\"worker\": [\"a:1\", \"a:1\"]}, \"task\": {\"type\": \"worker\"}}",
                         "duplicate address 'a:1' in TF_CONFIG's cluster.worker");
  expect_tf_config_error("{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": [1]}", "\"task\" is a list");
  expect_tf_config_error("{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"type\": 5}}",
                         "task.type is an integer");
  expect_tf_config_error("{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"type\": \"worker\", \"index\": \"0\"}}",
                         "task.index is a string");
  expect_tf_config_error("{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 1.0}}",
                         "task.index is a number");
  expect_tf_config_error("{\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 2}}",
                         "task index 2 of TF_CONFIG's task (worker) is out of range: job 'worker' has 2");
  expect_tf_config_error("{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"type\": \"worker\", \"index\": -1}}",
                         "task index -1");
  expect_tf_config_error("{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"type\": \"ps\"}}",
                         "task.type 'ps' is not a job");
  expect_tf_config_error("{\"cluster\": {\"worker\": []}, \"task\": {\"type\": \"worker\"}}", "has 0 task(s)");
  expect_tf_config_error("{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"type\": \"worker\"}, \"rpc_layer\": 1}",
                         "rpc_layer is an integer");
  expect_tf_config_error("{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"type\": \"worker\"}, \"session_master\": []}",
                         "session_master is a list");
}

static void test_resolver__tf_config_without_cluster(void **state) {
  /* AUTO goes on to the next source; the TF_CONFIG source is local */
  setenv("TF_CONFIG", "{\"task\": {\"type\": \"worker\", \"index\": 0}, \"rpc_layer\": \"grpc\"}", 1);
  create(NULL);
  assert_int_equal(source(), TPU_RESOLVER_TPU);
  assert_true(is_local());
  assert_string_equal(get(tpu_cluster_resolver_rpc_layer), "grpc");
  setenv("TF_CONFIG", "{\"cluster\": {}}", 1);
  setenv("TPU_NAME", "grpc://t:1", 1);
  create(NULL);
  assert_string_equal(spec(), "{\"worker\":[\"t:1\"]}");
  assert_string_equal(get(tpu_cluster_resolver_rpc_layer), "grpc");
  assert_int_equal(task_id(), 0);

  tpu_cluster_resolver_options o = opts(TPU_RESOLVER_TF_CONFIG);
  create(&o);
  assert_int_equal(source(), TPU_RESOLVER_TF_CONFIG);
  assert_string_equal(spec(), "{}");
  assert_string_equal(master(NULL, -1, NULL), "");
  assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "");
  setenv("TF_CONFIG", "{\"session_master\": \"grpc://m:1\"}", 1); /* read even so */
  create(&o);
  assert_string_equal(master(NULL, -1, NULL), "grpc://m:1");
  unsetenv("TF_CONFIG");
  create(&o);
  assert_string_equal(spec(), "{}");
  setenv("TF_CONFIG", "", 1);
  create(&o);
  assert_string_equal(spec(), "{}");
}

/* ---- DTensor ------------------------------------------------------------------ */

static void test_resolver__dtensor(void **state) {
  setenv("DTENSOR_JOBS", "localhost:1,localhost:2,localhost:3", 1);
  setenv("DTENSOR_CLIENT_ID", "2", 1);
  setenv("DTENSOR_NUM_CLIENTS", "7", 1); /* removed from DTensor: ignored */
  create(NULL);
  assert_int_equal(source(), TPU_RESOLVER_DTENSOR);
  assert_string_equal(spec(), "{\"worker\":[\"localhost:1\",\"localhost:2\",\"localhost:3\"]}");
  assert_int_equal(task_id(), 2);
  assert_string_equal(get(tpu_cluster_resolver_job_name), "worker");
  assert_string_equal(get(tpu_cluster_resolver_tpu_name), "localhost:1,localhost:2,localhost:3");
  assert_string_equal(master(NULL, -1, NULL), "grpc://localhost:3");
  assert_string_equal(master(NULL, 0, ""), "localhost:1");
  assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "localhost:1");
  assert_int_equal(num_tasks(NULL), 3);

  setenv("DTENSOR_JOB_NAME", "trainer", 1);
  create(NULL);
  assert_string_equal(get(tpu_cluster_resolver_job_name), "trainer");
  tpu_cluster_resolver_options o = opts(TPU_RESOLVER_DTENSOR);
  o.job_name = "mine";
  create(&o);
  assert_string_equal(spec(), "{\"mine\":[\"localhost:1\",\"localhost:2\",\"localhost:3\"]}");

  /* one client: job "localhost", one task, not local */
  unsetenv("DTENSOR_JOB_NAME");
  unsetenv("DTENSOR_CLIENT_ID");
  setenv("DTENSOR_JOBS", "127.0.0.1:7000", 1);
  create(NULL);
  assert_string_equal(spec(), "{\"localhost\":[\"127.0.0.1:7000\"]}");
  assert_int_equal(task_id(), 0);
  assert_string_equal(master(NULL, -1, NULL), "grpc://127.0.0.1:7000");
  assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "127.0.0.1:7000");

  /* DTENSOR_JOBS comes before every other source */
  setenv("TF_CONFIG", "{" TF_CLUSTER ", \"task\": {\"type\": \"ps\"}}", 1);
  setenv("SLURM_JOB_ID", "1", 1);
  create(NULL);
  assert_int_equal(source(), TPU_RESOLVER_DTENSOR);
}

static void test_resolver__dtensor_malformed(void **state) {
  tpu_cluster_resolver_options o = opts(TPU_RESOLVER_DTENSOR);
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "DTENSOR_JOBS is not set");
  setenv("DTENSOR_JOBS", "a:1,b:2,c:3", 1);
  setenv("DTENSOR_CLIENT_ID", "-1", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "DTENSOR_CLIENT_ID (=-1) must be >= 0");
  setenv("DTENSOR_CLIENT_ID", "3", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "DTENSOR_CLIENT_ID (=3) must be < 3");
  setenv("DTENSOR_CLIENT_ID", "1x", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "DTENSOR_CLIENT_ID='1x' is not an integer");
  setenv("DTENSOR_CLIENT_ID", "", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "not an integer");
  setenv("DTENSOR_CLIENT_ID", "99999999999999999999", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "not an integer");
  setenv("DTENSOR_CLIENT_ID", "+1", 1); /* Python's int() takes it */
  create(NULL);
  assert_int_equal(task_id(), 1);
  unsetenv("DTENSOR_CLIENT_ID");

  setenv("DTENSOR_JOBS", "", 1); /* local: one client */
  setenv("DTENSOR_CLIENT_ID", "1", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "DTENSOR_CLIENT_ID (=1) must be < 1");
  unsetenv("DTENSOR_CLIENT_ID");
  setenv("DTENSOR_JOBS", "a:1,b:2,a:1", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "duplicate address 'a:1' in DTENSOR_JOBS");
  setenv("DTENSOR_JOBS", "a:1,b", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "'b' in DTENSOR_JOBS entry 1");
  setenv("DTENSOR_JOBS", "/bns/cell/job/0,/bns/cell/job/1", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_UNIMPLEMENTED, "/bns/");
  setenv("DTENSOR_JOBS", "a:1", 1);
  setenv("DTENSOR_USE_PARALLEL_EXECUTOR", "pw", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_UNIMPLEMENTED, "Pathways");
  setenv("DTENSOR_USE_PARALLEL_EXECUTOR", "other", 1);
  create(NULL);
}

/* DTensor's config.py: DTENSOR_JOBS set but empty is local mode (no jobs; one client,
 * id 0, job "localhost"). */
static void test_resolver__dtensor_empty_jobs_is_local(void **state) {
  setenv("DTENSOR_JOBS", "", 1);
  const int sources[] = {TPU_RESOLVER_AUTO, TPU_RESOLVER_DTENSOR};
  for (int i = 0; i < 2; ++i) {
    tpu_cluster_resolver_options o = opts(sources[i]);
    create(&o);
    assert_int_equal(source(), TPU_RESOLVER_DTENSOR);
    assert_string_equal(spec(), "{}");
    assert_int_equal(task_id(), 0);
    assert_string_equal(get(tpu_cluster_resolver_job_name), "localhost");
    assert_string_equal(master(NULL, -1, NULL), "");
    assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "");
  }
  setenv("DTENSOR_CLIENT_ID", "0", 1);
  setenv("DTENSOR_JOB_NAME", "trainer", 1);
  create(NULL);
  assert_string_equal(get(tpu_cluster_resolver_job_name), "trainer");
  assert_string_equal(spec(), "{}");
  /* a system starts from it, alone */
  setenv("TPURT_NUM_CORES", "1", 1);
  tpu_system *system = NULL;
  CHECK_OK(tpu_initialize_tpu_system(g_r, NULL, NULL, &system, NULL));
  int tasks = 0;
  CHECK_OK(tpu_system_num_tasks(system, &tasks));
  assert_int_equal(tasks, 1);
  CHECK_OK(tpu_system_shutdown(system));
  tpu_system_release(system);
}

/* DTensor's config.job_name(): os.environ.get(DTENSOR_JOB_NAME, default), so a set but
 * empty name is "", not the default; no system starts under it. */
static void test_resolver__dtensor_empty_job_name(void **state) {
  setenv("DTENSOR_JOB_NAME", "", 1);
  setenv("DTENSOR_JOBS", "a:1,b:2", 1);
  create(NULL);
  assert_string_equal(get(tpu_cluster_resolver_job_name), "");
  assert_string_equal(spec(), "{\"\":[\"a:1\",\"b:2\"]}");
  setenv("DTENSOR_JOBS", "", 1); /* local mode */
  create(NULL);
  assert_string_equal(get(tpu_cluster_resolver_job_name), "");
  tpu_system *system = NULL;
  CHECK_ERROR(tpu_initialize_tpu_system(g_r, NULL, NULL, &system, NULL), TPU_INVALID_ARGUMENT,
              "DTENSOR_JOB_NAME is set but empty");
  assert_null(system);
}

/* DTensor's local mode: config.job_name() is DTENSOR_JOB_NAME, and local_devices() names
 * the devices after it; the system started from the resolver uses the same job. A local
 * TPU resolver's job ("worker", TPUClusterResolver('local')) leaves them localhost's. */
static void test_resolver__dtensor_local_job_names_the_system(void **state) {
  setenv("TPURT_NUM_CORES", "1", 1);
  setenv("DTENSOR_JOBS", "", 1);
  setenv("DTENSOR_JOB_NAME", "trainer", 1);
  create(NULL);
  tpu_system *system = NULL;
  CHECK_OK(tpu_initialize_tpu_system(g_r, NULL, NULL, &system, NULL));
  char job[64];
  size_t n = 0;
  CHECK_OK(tpu_system_job_name(system, job, sizeof job, &n));
  assert_string_equal(job, get(tpu_cluster_resolver_job_name));
  assert_string_equal(job, "trainer");
  CHECK_OK(tpu_system_shutdown(system));
  tpu_system_release(system);
  /* DTensor's own entry point reads the same variables */
  system = NULL;
  char type[8];
  CHECK_OK(tpu_initialize_accelerator_system("CPU", 1, 0, 0, &system, type, sizeof type, &n));
  CHECK_OK(tpu_system_job_name(system, job, sizeof job, &n));
  assert_string_equal(job, "trainer");
  CHECK_OK(tpu_shutdown_accelerator_system(system));
  tpu_system_release(system);

  unsetenv("DTENSOR_JOBS");
  unsetenv("DTENSOR_JOB_NAME");
  tpu_cluster_resolver_options o = opts(TPU_RESOLVER_TPU);
  o.tpu = "local";
  create(&o);
  assert_string_equal(get(tpu_cluster_resolver_job_name), "worker");
  system = NULL;
  CHECK_OK(tpu_initialize_tpu_system(g_r, NULL, NULL, &system, NULL));
  CHECK_OK(tpu_system_job_name(system, job, sizeof job, &n));
  assert_string_equal(job, "localhost");
  CHECK_OK(tpu_system_shutdown(system));
  tpu_system_release(system);
  unsetenv("TPURT_NUM_CORES");
}

/* TensorFlow's TFConfigClusterResolver: a cluster without a task type resolves and
 * master() is ''; tpurt cannot start a system from it (it is none of the tasks). */
static void test_resolver__tf_config_cluster_without_task(void **state) {
  const char *configs[] = {"{" TF_CLUSTER "}", "{" TF_CLUSTER ", \"task\": {}}",
                           "{" TF_CLUSTER ", \"task\": {\"index\": 1}, \"rpc_layer\": \"grpc\"}"};
  for (size_t i = 0; i < sizeof configs / sizeof *configs; ++i) {
    setenv("TF_CONFIG", configs[i], 1);
    create(NULL);
    assert_int_equal(source(), TPU_RESOLVER_TF_CONFIG);
    assert_string_equal(
        spec(), "{\"chief\":[\"h0:2222\"],\"ps\":[\"h3:2222\"],\"worker\":[\"h1:2222\",\"h2:2222\"]}");
    assert_string_equal(master(NULL, -1, NULL), "");
    assert_string_equal(get(tpu_cluster_resolver_job_name), "");
    assert_string_equal(master("worker", 1, ""), "h2:2222"); /* a named task has one */
    assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "h0:2222");
    tpu_system *system = NULL;
    CHECK_ERROR(tpu_initialize_tpu_system(g_r, NULL, NULL, &system, NULL), TPU_INVALID_ARGUMENT,
                "no task.type");
    assert_null(system);
  }
}

/* ---- Slurm -------------------------------------------------------------------- */

static void set_slurm_step(void) {
  setenv("SLURM_JOB_ID", "12345", 1);
  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_STEP_NUM_TASKS", "6", 1);
  setenv("SLURM_STEP_NODELIST", "node[01-02],gpu7", 1);
  setenv("SLURM_STEP_TASKS_PER_NODE", "2(x2),2", 1);
}

static void test_resolver__slurm(void **state) {
  set_slurm_step();
  create(NULL);
  assert_int_equal(source(), TPU_RESOLVER_SLURM);
  assert_string_equal(spec(),
                      "{\"worker\":[\"node01:8888\",\"node01:8889\",\"node02:8888\","
                      "\"node02:8889\",\"gpu7:8888\",\"gpu7:8889\"]}");
  assert_int_equal(task_id(), 3);
  assert_string_equal(get(tpu_cluster_resolver_job_name), "worker");
  assert_string_equal(get(tpu_cluster_resolver_rpc_layer), "grpc");
  assert_string_equal(master(NULL, -1, NULL), "grpc://node02:8889");
  assert_string_equal(master(NULL, 4, ""), "gpu7:8888");
  /* JAX's port: 61440 + 12345 % 4096 = 61497, on the first host */
  assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "node01:61497");
  assert_string_equal(get(tpu_cluster_resolver_tpu_name), "slurm");

  tpu_cluster_resolver_options o = opts(TPU_RESOLVER_SLURM);
  o.port_base = 9000;
  o.job_name = "trainer";
  o.rpc_layer = "grpc+ib";
  create(&o);
  assert_string_equal(address("trainer", 5), "gpu7:9001");
  assert_string_equal(master(NULL, -1, NULL), "grpc+ib://node02:9001");
  o.coordinator_address = "head:1";
  create(&o);
  assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "head:1");
  unsetenv("SLURM_JOB_ID"); /* only needed for the coordinator's port */
  create(&o);
  o.coordinator_address = NULL;
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "SLURM_JOB_ID not found in environment");
  setenv("SLURM_JOB_ID", "-5", 1);
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "SLURM_JOB_ID='-5'");

  /* the job's variables stand in for the step's */
  set_slurm_step();
  unsetenv("SLURM_STEP_NUM_TASKS");
  unsetenv("SLURM_STEP_NODELIST");
  unsetenv("SLURM_STEP_TASKS_PER_NODE");
  setenv("SLURM_NTASKS", "3", 1);
  setenv("SLURM_JOB_NODELIST", "n[8-10]", 1);
  setenv("SLURM_TASKS_PER_NODE", "1(x3)", 1);
  setenv("SLURM_PROCID", "2", 1);
  setenv("SLURM_LOCALID", "0", 1);
  create(NULL);
  assert_string_equal(spec(), "{\"worker\":[\"n8:8888\",\"n9:8888\",\"n10:8888\"]}");
  assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "n8:61497");
  setenv("SLURM_LOCALID", "1", 1); /* not block order */
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "--distribution=block");
}

static void test_resolver__slurm_host_lists(void **state) {
  set_slurm_step();
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_STEP_NUM_TASKS", "6", 1);
  setenv("SLURM_STEP_TASKS_PER_NODE", "1(x6)", 1);
  setenv("SLURM_STEP_NODELIST", "r[1-2]n[08-10]", 1);
  create(NULL);
  assert_string_equal(spec(),
                      "{\"worker\":[\"r1n08:8888\",\"r1n09:8888\",\"r1n10:8888\","
                      "\"r2n08:8888\",\"r2n09:8888\",\"r2n10:8888\"]}");
  setenv("SLURM_STEP_NODELIST", "a-1.x,n[008-009,7],m[3]", 1);
  setenv("SLURM_STEP_NUM_TASKS", "5", 1);
  setenv("SLURM_STEP_TASKS_PER_NODE", "1(x5)", 1);
  create(NULL);
  assert_string_equal(spec(),
                      "{\"worker\":[\"a-1.x:8888\",\"n008:8888\",\"n009:8888\",\"n7:8888\","
                      "\"m3:8888\"]}");
  assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "a-1.x:61497");

  const char *bad[] = {"n[",      "n[1-",     "n[]",       "n[3-1]",       "n1,,n2",
                       "n1,",     ",n1",      "n[1-2]]",   "n[a]",         "n[1-2-3]",
                       "n[[1]]",  " n1",      "n1 ",       "n[1,]",        "n[-1]",
                       "n[1-]",   "n:1",      "n[1234567890]", "n\x01",    "n[1]x[",
                       "n[0-999999999]",       "n[0-99999],m[0-99999]",   "a[0-300]b[0-300]"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    setenv("SLURM_STEP_NODELIST", bad[i], 1);
    EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "Invalid hostlist format in SLURM_STEP_NODELIST");
  }
  setenv("SLURM_STEP_NODELIST", "n[0-999999999]", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "more than 65536 hosts");
  setenv("SLURM_STEP_NODELIST", "a[0-300]b[0-300]", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "more than 65536 hosts");
  /* a name past DNS's 253 characters: with 65536 hosts, gigabytes */
  char long_name[300];
  memset(long_name, 'a', 249);
  strcpy(long_name + 249, "[0-65535]"); /* up to 249 + 5 characters */
  setenv("SLURM_STEP_NODELIST", long_name, 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "a host name of 254 characters (at most 253)");
  memset(long_name, 'a', 253);
  long_name[253] = '\0';
  setenv("SLURM_STEP_NODELIST", long_name, 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "has 1 hosts"); /* 253 is a host */
  /* 65536 hosts is the limit, not an error */
  setenv("SLURM_STEP_NODELIST", "n[00000-65535]", 1);
  setenv("SLURM_STEP_NUM_TASKS", "65536", 1);
  setenv("SLURM_STEP_TASKS_PER_NODE", "1(x65536)", 1);
  create(NULL);
  assert_int_equal(num_tasks(NULL), 65536);
  assert_string_equal(address(NULL, 65535), "n65535:8888");
}

static void test_resolver__slurm_malformed(void **state) {
  const char *required[] = {"SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST",
                            "SLURM_STEP_TASKS_PER_NODE"};
  tpu_cluster_resolver_options o = opts(TPU_RESOLVER_SLURM);
  char fragment[128];
  for (size_t i = 0; i < 4; ++i) {
    set_slurm_step();
    unsetenv(required[i]);
    snprintf(fragment, sizeof fragment,
             "%s not found in environment. Not running inside a SLURM step?", required[i]);
    EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, fragment);
    EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, fragment);
    setenv(required[i], "", 1); /* empty is unset */
    EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, fragment);
  }
  set_slurm_step();
  setenv("SLURM_STEP_NUM_TASKS", "5", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "Requested 5 tasks");
  setenv("SLURM_STEP_NUM_TASKS", "0", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "SLURM_STEP_NUM_TASKS is 0");
  setenv("SLURM_STEP_NUM_TASKS", "six", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "SLURM_STEP_NUM_TASKS='six'");
  set_slurm_step();
  setenv("SLURM_PROCID", "6", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "SLURM_PROCID='6' is not a decimal integer in [0, 6)");
  set_slurm_step();
  setenv("SLURM_STEP_TASKS_PER_NODE", "2(x2)", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "has 2 entries but SLURM_STEP_NODELIST");
  const char *bad_tpn[] = {"2(x", "x", "2(x0)", "2(3)", "2,", "", "(x2)", "2(x2)3",
                           "1(x99999999)"};
  for (size_t i = 0; i < sizeof bad_tpn / sizeof bad_tpn[0]; ++i) {
    setenv("SLURM_STEP_TASKS_PER_NODE", bad_tpn[i], 1);
    if (bad_tpn[i][0] == '\0')
      EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "SLURM_STEP_TASKS_PER_NODE not found");
    else
      EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "Invalid tasks-per-node list format");
  }
  set_slurm_step();
  o.port_base = 65535; /* the second task of a host would need 65536 */
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "above 65535");
  o.port_base = 65534;
  create(&o);
  o.port_base = -1;
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "port_base is -1");
  setenv("SLURM_STEP_NODELIST", "n[1-2],n1", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "duplicate address 'n1:8888'");
}

/* ---- Open MPI ------------------------------------------------------------------- */

static void set_ompi(const char *rank, const char *size, const char *local_size) {
  setenv("OMPI_COMM_WORLD_RANK", rank, 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", rank, 1);
  setenv("OMPI_COMM_WORLD_SIZE", size, 1);
  if (local_size) setenv("OMPI_COMM_WORLD_LOCAL_SIZE", local_size, 1);
}

static void test_resolver__openmpi(void **state) {
  set_ompi("2", "4", "4");
  create(NULL);
  assert_int_equal(source(), TPU_RESOLVER_OPENMPI);
  assert_string_equal(spec(),
                      "{\"worker\":[\"127.0.0.1:8888\",\"127.0.0.1:8889\",\"127.0.0.1:8890\","
                      "\"127.0.0.1:8891\"]}");
  assert_int_equal(task_id(), 2);
  assert_string_equal(master(NULL, -1, NULL), "grpc://127.0.0.1:8890");
  assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "127.0.0.1:8888");
  assert_string_equal(get(tpu_cluster_resolver_tpu_name), "openmpi");

  /* JAX's ORTE coordinator: the launcher's first IP, 61440 + (jobid / 4096) % 4096 */
  setenv("OMPI_MCA_orte_hnp_uri", "1531576320.0;tcp://10.96.0.1,10.148.0.1,10.108.0.1:34911", 1);
  create(NULL);
  assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "10.96.0.1:62624");
  setenv("OMPI_MCA_orte_hnp_uri",
         "1314521088.0;tcp6://[fe80::b9b:ac5d:9cf0:b858,2620:10d:c083:150e::3000:2]:43370", 1);
  create(NULL);
  assert_string_equal(get(tpu_cluster_resolver_coordinator_address),
                      "[fe80::b9b:ac5d:9cf0:b858]:62880");
  setenv("OMPI_MCA_orte_hnp_uri", "garbage", 1);
  create(NULL);
  assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "127.0.0.1:8888");
  setenv("TPURT_COORDINATOR_ADDRESS", "head:5", 1);
  create(NULL);
  assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "head:5");
  tpu_cluster_resolver_options o = opts(TPU_RESOLVER_OPENMPI);
  o.coordinator_address = "opt:6";
  o.port_base = 20000;
  create(&o);
  assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "opt:6");
  assert_string_equal(address(NULL, 3), "127.0.0.1:20003");
  setenv("TPURT_COORDINATOR_ADDRESS", "head", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "'head' in TPURT_COORDINATOR_ADDRESS");
  unsetenv("TPURT_COORDINATOR_ADDRESS");

  /* ranks on several hosts: TPURT_TASK_ADDRESSES says where */
  set_ompi("1", "3", "2");
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "set TPURT_TASK_ADDRESSES");
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "OMPI_COMM_WORLD_LOCAL_SIZE=unset");
  setenv("TPURT_TASK_ADDRESSES", "h0:1,h1:1,h2:1", 1);
  unsetenv("OMPI_MCA_orte_hnp_uri");
  create(NULL);
  assert_string_equal(spec(), "{\"worker\":[\"h0:1\",\"h1:1\",\"h2:1\"]}");
  assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "h0:1");
  setenv("TPURT_TASK_ADDRESSES", "h0:1,h1:1", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "TPURT_TASK_ADDRESSES has 2 entries");
  setenv("TPURT_TASK_ADDRESSES", "h0:1,h1:1,h0:1", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "duplicate address 'h0:1'");
  setenv("TPURT_TASK_ADDRESSES", "h0:1,h1,h2:1", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "TPURT_TASK_ADDRESSES entry 1");
}

static void test_resolver__openmpi_malformed(void **state) {
  tpu_cluster_resolver_options o = opts(TPU_RESOLVER_OPENMPI);
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "OMPI_COMM_WORLD_SIZE not found in environment");
  set_ompi("0", "2", "2");
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "OMPI_COMM_WORLD_LOCAL_RANK not found");
  set_ompi("2", "2", "2");
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "OMPI_COMM_WORLD_RANK='2'");
  set_ompi("x", "2", "2");
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "OMPI_COMM_WORLD_RANK='x'");
  set_ompi("0", "0", "0");
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "OMPI_COMM_WORLD_SIZE is 0");
}

/* ---- AUTO's order, options, the C surface ------------------------------------- */

static void test_resolver__auto_order(void **state) {
  setenv("TPU_NAME", "grpc://t:1", 1);
  create(NULL);
  assert_int_equal(source(), TPU_RESOLVER_TPU);
  set_ompi("0", "1", "1");
  create(NULL);
  assert_int_equal(source(), TPU_RESOLVER_OPENMPI);
  set_slurm_step();
  create(NULL);
  assert_int_equal(source(), TPU_RESOLVER_SLURM);
  setenv("TF_CONFIG", "{" TF_CLUSTER ", \"task\": {\"type\": \"ps\"}}", 1);
  create(NULL);
  assert_int_equal(source(), TPU_RESOLVER_TF_CONFIG);
  setenv("DTENSOR_JOBS", "d:1", 1);
  create(NULL);
  assert_int_equal(source(), TPU_RESOLVER_DTENSOR);
  /* explicit sources ignore the others */
  tpu_cluster_resolver_options o = opts(TPU_RESOLVER_SLURM);
  create(&o);
  assert_int_equal(source(), TPU_RESOLVER_SLURM);
  o = opts(TPU_RESOLVER_TPU);
  create(&o);
  assert_string_equal(spec(), "{\"worker\":[\"t:1\"]}");
  /* a malformed TF_CONFIG is reported under AUTO too, not skipped */
  unsetenv("DTENSOR_JOBS");
  setenv("TF_CONFIG", "{", 1);
  EXPECT_CREATE_ERROR(NULL, TPU_INVALID_ARGUMENT, "TF_CONFIG is not valid JSON");
}

static void test_resolver__options(void **state) {
  tpu_cluster_resolver_options o;
  memset(&o, 0xab, sizeof o);
  CHECK_OK(tpu_cluster_resolver_options_init(&o, sizeof o));
  assert_int_equal(o.struct_size, sizeof o);
  assert_int_equal(o.source, 0);
  assert_null(o.tpu);
  assert_null(o.task_type);
  assert_int_equal(o.task_id, -1);
  assert_int_equal(o.port_base, 0);
  CHECK_ERROR(tpu_cluster_resolver_options_init(&o, sizeof o + 8), TPU_INVALID_ARGUMENT,
              "struct_size");
  CHECK_ERROR(tpu_cluster_resolver_options_init(&o, 8), TPU_INVALID_ARGUMENT, "struct_size");
  CHECK_ERROR(tpu_cluster_resolver_options_init(NULL, sizeof o), TPU_INVALID_ARGUMENT,
              "'options'");
  create(&o);
  assert_true(is_local());

  o.struct_size = sizeof o + 8;
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "tpu_cluster_resolver_options.struct_size");
  o.struct_size = 4;
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "tpu_cluster_resolver_options.struct_size");
  o = opts(6);
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "options->source is 6");
  o = opts(-1);
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "options->source is -1");
  o = opts(0);
  o.port_base = 65536;
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "port_base is 65536");
  o = opts(0);
  o.job_name = "";
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "options->job_name");
  o = opts(TPU_RESOLVER_TPU);
  o.tpu = "grpc://a:1";
  o.job_name = "\xff\xfe";
  EXPECT_CREATE_ERROR(&o, TPU_INVALID_ARGUMENT, "not valid UTF-8");
}

static void test_resolver__num_accelerators(void **state) {
  create(NULL);
  int n = 0;
  CHECK_OK(tpu_cluster_resolver_num_accelerators(g_r, &n));
  assert_true(n >= 1);
  setenv("TPURT_NUM_CORES", "3", 1); /* read at each call, as tpu_system_init does */
  CHECK_OK(tpu_cluster_resolver_num_accelerators(g_r, &n));
  assert_int_equal(n, 3);
  setenv("TPURT_NUM_CORES", "lots", 1);
  CHECK_ERROR(tpu_cluster_resolver_num_accelerators(g_r, &n), TPU_INVALID_ARGUMENT,
              "TPURT_NUM_CORES='lots'");
  unsetenv("TPURT_NUM_CORES");
}

/* TensorFlow's ClusterResolver.num_accelerators(task_type, task_id, config_proto) counts
 * the devices of master(task_type, task_id); TPUClusterResolver's checks every host has
 * the same count. tpurt's tasks all have the same cores, so any task's count is this
 * one's; the task must be in the spec, as master() (ValueError). */
static void test_resolver__task_num_accelerators(void **state) {
  setenv("TPURT_NUM_CORES", "3", 1);
  setenv("TF_CONFIG", "{\"cluster\": {\"worker\": [\"a:1\", \"b:2\"], \"ps\": [\"c:3\"]},"
                      " \"task\": {\"type\": \"worker\", \"index\": 1}}", 1);
  create(NULL);
  int n = 0;
  CHECK_OK(tpu_cluster_resolver_task_num_accelerators(g_r, NULL, -1, &n));
  assert_int_equal(n, 3);
  n = 0;
  CHECK_OK(tpu_cluster_resolver_task_num_accelerators(g_r, "worker", 0, &n));
  assert_int_equal(n, 3);
  n = 0;
  CHECK_OK(tpu_cluster_resolver_task_num_accelerators(g_r, "ps", 0, &n));
  assert_int_equal(n, 3);
  CHECK_ERROR(tpu_cluster_resolver_task_num_accelerators(g_r, "worker", 2, &n),
              TPU_INVALID_ARGUMENT, "No task with index 2 in job 'worker'");
  CHECK_ERROR(tpu_cluster_resolver_task_num_accelerators(g_r, "chief", 0, &n),
              TPU_INVALID_ARGUMENT, "No such job in cluster: 'chief'");
  CHECK_ERROR(tpu_cluster_resolver_task_num_accelerators(g_r, NULL, -2, &n),
              TPU_INVALID_ARGUMENT, "-2");
  CHECK_ERROR(tpu_cluster_resolver_task_num_accelerators(g_r, NULL, -1, NULL),
              TPU_INVALID_ARGUMENT, "out");
  unsetenv("TF_CONFIG");
  create(NULL); /* local: its own task only, the arguments ignored (TPUClusterResolver's) */
  CHECK_OK(tpu_cluster_resolver_task_num_accelerators(g_r, "worker", 5, &n));
  assert_int_equal(n, 3);
  unsetenv("TPURT_NUM_CORES");
}

static void test_resolver__enter_exit(void **state) {
  create(NULL);
  CHECK_ERROR(tpu_cluster_resolver_exit(g_r), TPU_FAILED_PRECONDITION, "without a matching enter");
  CHECK_OK(tpu_cluster_resolver_enter(g_r));
  CHECK_OK(tpu_cluster_resolver_enter(g_r));
  CHECK_OK(tpu_cluster_resolver_exit(g_r));
  CHECK_OK(tpu_cluster_resolver_exit(g_r));
  CHECK_ERROR(tpu_cluster_resolver_exit(g_r), TPU_FAILED_PRECONDITION, "exit");
}

static void test_resolver__out_arrays(void **state) {
  tpu_cluster_resolver_options o = opts(TPU_RESOLVER_TPU);
  o.tpu = "grpc://abc:1";
  create(&o);
  size_t n = 0;
  CHECK_OK(tpu_cluster_resolver_cluster_spec(g_r, NULL, 0, &n)); /* a size query */
  assert_int_equal(n, strlen("{\"worker\":[\"abc:1\"]}"));
  char small[5] = "xxxx";
  CHECK_ERROR(tpu_cluster_resolver_cluster_spec(g_r, small, sizeof small, &n), TPU_OUT_OF_RANGE,
              "the cluster spec");
  assert_int_equal(n, strlen("{\"worker\":[\"abc:1\"]}"));
  assert_string_equal(small, "xxxx");
  char exact[6];
  CHECK_ERROR(tpu_cluster_resolver_task_address(g_r, NULL, 0, exact, 5, &n), TPU_OUT_OF_RANGE,
              "task address");
  CHECK_OK(tpu_cluster_resolver_task_address(g_r, NULL, 0, exact, 6, &n));
  assert_string_equal(exact, "abc:1");
  CHECK_ERROR(tpu_cluster_resolver_master(g_r, NULL, -1, NULL, NULL, 3, &n), TPU_INVALID_ARGUMENT,
              "'out' is NULL but capacity is 3");
}

static void test_resolver__null_arguments(void **state) {
  create(NULL);
  char buf[64];
  size_t n;
  int i;
  const char *what = "argument 'resolver' is NULL";
  CHECK_ERROR(tpu_cluster_resolver_create(NULL, NULL), TPU_INVALID_ARGUMENT, "'out'");
  CHECK_OK(tpu_cluster_resolver_release(NULL));
  CHECK_ERROR(tpu_cluster_resolver_source(NULL, &i), TPU_INVALID_ARGUMENT, what);
  CHECK_ERROR(tpu_cluster_resolver_source(g_r, NULL), TPU_INVALID_ARGUMENT, "'out'");
  CHECK_ERROR(tpu_cluster_resolver_num_tasks(NULL, NULL, &i), TPU_INVALID_ARGUMENT, what);
  CHECK_ERROR(tpu_cluster_resolver_num_tasks(g_r, NULL, NULL), TPU_INVALID_ARGUMENT, "'out'");
  CHECK_ERROR(tpu_cluster_resolver_task_id(NULL, &i), TPU_INVALID_ARGUMENT, what);
  CHECK_ERROR(tpu_cluster_resolver_task_id(g_r, NULL), TPU_INVALID_ARGUMENT, "'out'");
  CHECK_ERROR(tpu_cluster_resolver_num_accelerators(NULL, &i), TPU_INVALID_ARGUMENT, what);
  CHECK_ERROR(tpu_cluster_resolver_num_accelerators(g_r, NULL), TPU_INVALID_ARGUMENT, "'out'");
  CHECK_ERROR(tpu_cluster_resolver_enter(NULL), TPU_INVALID_ARGUMENT, what);
  CHECK_ERROR(tpu_cluster_resolver_exit(NULL), TPU_INVALID_ARGUMENT, what);
  CHECK_ERROR(tpu_cluster_resolver_task_address(NULL, NULL, 0, buf, sizeof buf, &n),
              TPU_INVALID_ARGUMENT, what);
  CHECK_ERROR(tpu_cluster_resolver_master(NULL, NULL, -1, NULL, buf, sizeof buf, &n),
              TPU_INVALID_ARGUMENT, what);
  CHECK_ERROR(tpu_cluster_resolver_master(g_r, NULL, -1, NULL, buf, sizeof buf, NULL),
              TPU_INVALID_ARGUMENT, "'count'");
  string_getter getters[] = {tpu_cluster_resolver_tpu_name, tpu_cluster_resolver_cluster_spec,
                             tpu_cluster_resolver_job_name, tpu_cluster_resolver_rpc_layer,
                             tpu_cluster_resolver_environment,
                             tpu_cluster_resolver_coordinator_address};
  for (size_t k = 0; k < sizeof getters / sizeof getters[0]; ++k) {
    CHECK_ERROR(getters[k](NULL, buf, sizeof buf, &n), TPU_INVALID_ARGUMENT, what);
    CHECK_ERROR(getters[k](g_r, buf, sizeof buf, NULL), TPU_INVALID_ARGUMENT, "'count'");
    CHECK_ERROR(getters[k](g_r, NULL, 4, &n), TPU_INVALID_ARGUMENT, "'out' is NULL");
  }
}

/* ---- Random input --------------------------------------------------------------- */

/* A string of 0 to 63 bytes: half the time any byte but NUL, else drawn from the
 * characters the parsers care about, so that the random strings get past the first
 * character often. */
static void random_text(char *buf, const char *alphabet) {
  int len = rand() % 64;
  int any = rand() % 2;
  size_t k = strlen(alphabet);
  for (int i = 0; i < len; ++i)
    buf[i] = any ? (char)(1 + rand() % 255) : alphabet[(size_t)rand() % k];
  buf[len] = '\0';
}

static void expect_ok_or_invalid(const tpu_cluster_resolver_options *o, const char *var,
                                 const char *value) {
  tpu_cluster_resolver *r = NULL;
  tpu_status st = tpu_cluster_resolver_create(o, &r);
  if (st != TPU_OK && st != TPU_INVALID_ARGUMENT)
    CHECK_FAIL("%s='%s' gave %s: %s", var, value, tpu_status_name(st), tpu_last_error());
  if (st == TPU_OK) { /* whatever resolved must be queryable */
    char buf[1 << 16];
    size_t n;
    CHECK_OK(tpu_cluster_resolver_cluster_spec(r, buf, sizeof buf, &n));
    tpu_status m = tpu_cluster_resolver_master(r, NULL, -1, NULL, buf, sizeof buf, &n);
    CHECK(m == TPU_OK || m == TPU_INVALID_ARGUMENT);
  }
  tpu_cluster_resolver_release(r);
}

static void test_resolver__random_tf_config(void **state) {
  srand(20261123);
  tpu_cluster_resolver_options o = opts(TPU_RESOLVER_TF_CONFIG);
  char text[80];
  for (int i = 0; i < 2000; ++i) {
    random_text(text, "{}[]\":,0123 cluster task type index worker h:1 -.\\u");
    setenv("TF_CONFIG", text, 1);
    expect_ok_or_invalid(&o, "TF_CONFIG", text);
    expect_ok_or_invalid(NULL, "TF_CONFIG", text);
  }
  /* and near-valid ones: a valid document with one byte replaced */
  const char *valid =
      "{\"cluster\":{\"worker\":[\"h0:1\",\"h1:2\"],\"ps\":{\"0\":\"p:3\"}},"
      "\"task\":{\"type\":\"worker\",\"index\":1},\"rpc_layer\":\"grpc\"}";
  char doc[256];
  for (int i = 0; i < 2000; ++i) {
    strcpy(doc, valid);
    doc[(size_t)rand() % strlen(valid)] = (char)(1 + rand() % 255);
    setenv("TF_CONFIG", doc, 1);
    expect_ok_or_invalid(&o, "TF_CONFIG", doc);
  }
}

static void test_resolver__random_host_lists(void **state) {
  srand(11232026);
  set_slurm_step();
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_STEP_NUM_TASKS", "1", 1);
  setenv("SLURM_STEP_TASKS_PER_NODE", "1", 1);
  char text[80];
  int ok = 0;
  for (int i = 0; i < 2000; ++i) {
    random_text(text, "n[]-,0123456789");
    setenv("SLURM_STEP_NODELIST", text, 1);
    expect_ok_or_invalid(NULL, "SLURM_STEP_NODELIST", text);
    random_text(text, "0123(x),");
    setenv("SLURM_STEP_TASKS_PER_NODE", text, 1);
    expect_ok_or_invalid(NULL, "SLURM_STEP_TASKS_PER_NODE", text);
    setenv("SLURM_STEP_TASKS_PER_NODE", "1", 1);
    /* one well-formed single host must resolve */
    snprintf(text, sizeof text, "h%d[%d]", rand() % 100, rand() % 1000);
    setenv("SLURM_STEP_NODELIST", text, 1);
    tpu_cluster_resolver *r = NULL;
    if (tpu_cluster_resolver_create(NULL, &r) == TPU_OK) ++ok;
    tpu_cluster_resolver_release(r);
  }
  assert_int_equal(ok, 2000);
}

/* ---- Contracts (cluster.h's sentences) ------------------------------------------ */

/* "A resolver is a snapshot": what create read stays, whatever the environment does
 * after; a new resolver sees the change. */
static void test_resolver__is_a_snapshot(void **state) {
  setenv("TF_CONFIG",
         "{" TF_CLUSTER ", \"task\": {\"type\": \"worker\", \"index\": 1}, \"rpc_layer\": \"grpc\"}",
         1);
  create(NULL);
  setenv("TF_CONFIG",
         "{\"cluster\": {\"worker\": [\"x:1\"]}, \"task\": {\"type\": \"worker\"}, "
         "\"rpc_layer\": \"http\", \"session_master\": \"s://m\"}",
         1);
  setenv("DTENSOR_JOBS", "d:1,d:2", 1);
  assert_int_equal(source(), TPU_RESOLVER_TF_CONFIG);
  assert_string_equal(
      spec(), "{\"chief\":[\"h0:2222\"],\"ps\":[\"h3:2222\"],\"worker\":[\"h1:2222\",\"h2:2222\"]}");
  assert_int_equal(task_id(), 1);
  assert_int_equal(num_tasks(NULL), 2);
  assert_string_equal(address("worker", 0), "h1:2222");
  assert_string_equal(master(NULL, -1, NULL), "grpc://h2:2222");
  assert_string_equal(get(tpu_cluster_resolver_rpc_layer), "grpc");
  assert_string_equal(get(tpu_cluster_resolver_coordinator_address), "h0:2222");
  unsetenv("DTENSOR_JOBS");
  create(NULL);
  assert_string_equal(spec(), "{\"worker\":[\"x:1\"]}");
  assert_string_equal(master(NULL, -1, NULL), "s://m");
}

/* "Zero/NULL means default in every field": {sizeof o} and zeros resolve as NULL
 * options do (task_id 0 with task_type NULL overrides nothing, port_base 0 is 8888);
 * the TPU source says grpc whatever options->rpc_layer says. */
static void test_resolver__zeroed_options_are_defaults(void **state) {
  tpu_cluster_resolver_options z;
  memset(&z, 0, sizeof z);
  z.struct_size = sizeof z;
  setenv("TF_CONFIG",
         "{" TF_CLUSTER ", \"task\": {\"type\": \"worker\", \"index\": 1}, \"rpc_layer\": \"grpc\"}",
         1);
  create(&z);
  assert_int_equal(source(), TPU_RESOLVER_TF_CONFIG);
  assert_int_equal(task_id(), 1);
  assert_string_equal(get(tpu_cluster_resolver_job_name), "worker");
  assert_string_equal(master(NULL, -1, NULL), "grpc://h2:2222");
  assert_string_equal(get(tpu_cluster_resolver_environment), "");
  unsetenv("TF_CONFIG");
  set_slurm_step();
  create(&z);
  assert_int_equal(source(), TPU_RESOLVER_SLURM);
  assert_string_equal(get(tpu_cluster_resolver_job_name), "worker");
  assert_string_equal(address(NULL, 0), "node01:8888");
  z.source = TPU_RESOLVER_TPU;
  z.tpu = "grpc://a:1";
  z.rpc_layer = "http";
  create(&z);
  assert_string_equal(get(tpu_cluster_resolver_rpc_layer), "grpc");
  assert_string_equal(master(NULL, -1, NULL), "grpc://a:1");
}

#define T(name) cmocka_unit_test_setup_teardown(test_resolver__##name, clear_env, release_resolver)

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      T(auto_nothing_set_is_local), T(tpu_source_needs_a_name), T(tpu_grpc_endpoints),
      T(tpu_name_from_the_environment), T(cloud_tpu_name_is_not_found), T(tpu_bad_endpoints),
      T(coordinator_options), T(tf_config), T(tf_config_overrides), T(tf_config_sparse_job),
      T(tf_config_malformed), T(tf_config_without_cluster), T(dtensor), T(dtensor_malformed),
      T(dtensor_empty_jobs_is_local), T(tf_config_cluster_without_task),
      T(slurm), T(slurm_host_lists), T(slurm_malformed), T(openmpi), T(openmpi_malformed),
      T(auto_order), T(options), T(num_accelerators), T(enter_exit), T(out_arrays),
      T(null_arguments), T(random_tf_config), T(random_host_lists), T(is_a_snapshot),
      T(zeroed_options_are_defaults), T(tpu_grpc_name_gets_port_8470), T(empty_tpu_is_none_given),
      T(get_master), T(task_num_accelerators), T(dtensor_empty_job_name),
      T(dtensor_local_job_names_the_system),
  };
  return RUN_TESTS(argc, argv, tests, clear_env, NULL);
}
