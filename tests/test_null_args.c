/* Every public function, called with NULL for each pointer argument in turn (the
 * others valid): an error status whose message names the argument, or, where the
 * header gives NULL a meaning, that documented behaviour. Never a crash.
 * tests/check_null_args_coverage.sh fails when a public function is missing here.
 *
 * Checks also run on worker threads inside computations, where the test_util.h checks
 * count failures instead of failing (cmocka's asserts cannot be used there): each test
 * ends with CHECK_NO_WORKER_FAILURES(). */
#define _GNU_SOURCE /* mkdtemp */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tpurt.h"
#include "test_util.h"

#include "test_util.h"

/* ---- checks ------------------------------------------------------------------------ */

/* Does the message contain one of the '|'-separated names? */
static int names_one_of(const char *message, const char *names) {
  char buf[128];
  while (*names) {
    size_t n = strcspn(names, "|");
    snprintf(buf, sizeof buf, "%.*s", (int)n, names);
    if (strstr(message, buf)) return 1;
    names += n + (names[n] == '|');
  }
  return 0;
}

/* `got` must be `want`; an error must come with a message containing one of `names`. */
static void check_named(tpu_status got, tpu_status want, const char *names, const char *call,
                        const char *file, int line) {
  if (got != want)
    tpurt_test_failed_(file, line, "%s returned %s, expected %s (message: \"%s\")", call,
                       tpu_status_name(got), tpu_status_name(want), tpu_last_error());
  else if (want != TPU_OK && !names_one_of(tpu_last_error(), names))
    tpurt_test_failed_(file, line, "%s: message \"%s\" does not name %s", call, tpu_last_error(),
                       names);
}

/* The message is cleared first so that an old one cannot satisfy the check. */
#define CALL(call) (tpu_clear_last_error(), (call))
/* NULL is an error naming the argument, e.g. NULL_ARG(f(NULL), "'out'"). */
#define NULL_ARG(call, names) \
  check_named(CALL(call), TPU_INVALID_ARGUMENT, names, #call, __FILE__, __LINE__)
/* Where the header leaves NULL open: either accepted, or rejected naming the argument. */
#define NULL_EITHER(call, names)                                                             \
  do {                                                                                       \
    tpu_status either_ = CALL(call);                                                         \
    check_named(either_, either_ == TPU_OK ? TPU_OK : TPU_INVALID_ARGUMENT, names, #call,    \
                __FILE__, __LINE__);                                                         \
  } while (0)

/* f(args..., out): a NULL out fails. */
#define OUT_ARG(fn, ...) NULL_ARG(fn(__VA_ARGS__, NULL), "'out'")

/* f(args..., out, capacity, count), the out-array rule of tpurt/common.h: a size
 * query succeeds; NULL out with capacity > 0 and a NULL count fail. */
#define ARRAY_ARGS(fn, ...)                                             \
  do {                                                                  \
    _Alignas(8) char buf_[512];                                         \
    size_t count_ = 0;                                                  \
    CHECK_OK(fn(__VA_ARGS__, NULL, 0, &count_));                         \
    NULL_ARG(fn(__VA_ARGS__, NULL, 16, &count_), "'out'");              \
    NULL_ARG(fn(__VA_ARGS__, (void *)buf_, 16, NULL), "'count'");       \
  } while (0)

/* ---- fixtures ---------------------------------------------------------------------- */

enum { kCores = 2 };

static tpu_system_options system_options(void) {
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = kCores;
  o.close_on_failure = 0;          /* the failing steps below must not close it */
  o.collective_timeout_ms = time_limit_ms(20000); /* a hang fails the test instead of waiting minutes */
  return o;
}

/* A failed init or initialize_system must not leave a system running. */
static void assert_no_live_system(void) {
  tpu_system_options o = system_options();
  tpu_system *s = NULL;
  CHECK_OK(tpu_system_init(&o, &s));
  CHECK_OK(tpu_system_release(s));
}

static tpu_tensor *vector2(void) {
  const int64_t dims[1] = {2};
  const float data[2] = {1, 2};
  tpu_tensor *t = NULL;
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 1, data, sizeof data, &t));
  return t;
}

/* mesh [2,1,1,1]; `devices` 2: both positions filled, 1: position x=1 missing. */
static tpu_topology *topology(int devices) {
  const int32_t mesh[4] = {2, 1, 1, 1};
  const int32_t coords[8] = {0, 0, 0, 0, 1, 0, 0, 0};
  tpu_topology *t = NULL;
  CHECK_OK(tpu_topology_create(mesh, 4, coords, 1, devices, &t));
  return t;
}

/* ---- common and tensor ---------------------------------------------------------------- */

static void test_null_args__common(void **state) {
  (void)state;
  /* No pointer arguments: each must simply never return NULL. */
  CHECK(tpu_status_name(TPU_OK) != NULL);
  CHECK(tpu_status_name((tpu_status)-1) != NULL);
  tpu_clear_last_error();
  CHECK(tpu_last_error() != NULL);
  CHECK(tpu_version() != NULL);
  /* A NULL message is the empty message, not a crash. */
  CHECK(tpu_set_last_error(TPU_CANCELLED, NULL) == TPU_CANCELLED && tpu_last_error()[0] == 0);
  OUT_ARG(tpu_dtype_size, TPU_FLOAT);
  OUT_ARG(tpu_dtype_name, TPU_FLOAT);
  CHECK_NO_WORKER_FAILURES();
}

static int g_release_calls;
static void count_release(void *data, void *user_data) {
  (void)data;
  (void)user_data;
  g_release_calls++;
}

static void test_null_args__tensor(void **state) {
  (void)state;
  const int64_t dims[1] = {2};
  float data[2] = {1, 2};
  tpu_tensor *t = vector2(), *r = NULL;

  NULL_ARG(tpu_tensor_create(TPU_FLOAT, NULL, 1, data, sizeof data, &r), "'dims'");
  NULL_ARG(tpu_tensor_create(TPU_FLOAT, dims, 1, NULL, sizeof data, &r), "'data'");
  NULL_ARG(tpu_tensor_create(TPU_FLOAT, dims, 1, data, sizeof data, NULL), "'out'");
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, NULL, 0, NULL, 0, &r)); /* scalar, zero-filled */
  tpu_tensor_release(r);
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, dims, 1, NULL, 0, &r)); /* zero-filled */
  tpu_tensor_release(r);

  g_release_calls = 0;
  NULL_ARG(tpu_tensor_wrap(TPU_FLOAT, NULL, 1, data, sizeof data, count_release, NULL, &r),
           "'dims'");
  NULL_ARG(tpu_tensor_wrap(TPU_FLOAT, dims, 1, NULL, sizeof data, count_release, NULL, &r),
           "'data'");
  NULL_ARG(tpu_tensor_wrap(TPU_FLOAT, dims, 1, data, sizeof data, count_release, NULL, NULL),
           "'out'");
  CHECK(g_release_calls == 0); /* a failed wrap does not call release */
  CHECK_OK(tpu_tensor_wrap(TPU_FLOAT, dims, 1, data, sizeof data, NULL, NULL, &r));
  tpu_tensor_release(r);
  CHECK_OK(tpu_tensor_wrap(TPU_FLOAT, dims, 1, data, sizeof data, count_release, NULL, &r));
  tpu_tensor_release(r);
  CHECK(g_release_calls == 1);

  NULL_ARG(tpu_tensor_retain(NULL), "'tensor'");
  CHECK_OK(tpu_tensor_release(NULL));

  tpu_dtype dtype;
  int rank;
  int64_t n, got[1];
  size_t bytes;
  void *p;
  const void *cp;
  NULL_ARG(tpu_tensor_dtype(NULL, &dtype), "'tensor'");
  OUT_ARG(tpu_tensor_dtype, t);
  NULL_ARG(tpu_tensor_rank(NULL, &rank), "'tensor'");
  OUT_ARG(tpu_tensor_rank, t);
  NULL_ARG(tpu_tensor_dims(NULL, got, 1, &(size_t){0}), "'tensor'");
  NULL_ARG(tpu_tensor_dims(t, NULL, 1, &(size_t){0}), "'out'");
  NULL_ARG(tpu_tensor_dim(NULL, 0, &n), "'tensor'");
  OUT_ARG(tpu_tensor_dim, t, 0);
  NULL_ARG(tpu_tensor_num_elements(NULL, &n), "'tensor'");
  OUT_ARG(tpu_tensor_num_elements, t);
  NULL_ARG(tpu_tensor_byte_size(NULL, &bytes), "'tensor'");
  OUT_ARG(tpu_tensor_byte_size, t);
  NULL_ARG(tpu_tensor_data(NULL, &cp), "'tensor'");
  OUT_ARG(tpu_tensor_data, t);
  NULL_ARG(tpu_tensor_mutable_data(NULL, &p), "'tensor'");
  OUT_ARG(tpu_tensor_mutable_data, t);

  const int64_t flat[2] = {1, 2};
  NULL_ARG(tpu_tensor_reshape(NULL, flat, 2, &r), "'tensor'");
  NULL_ARG(tpu_tensor_reshape(t, NULL, 2, &r), "'dims'");
  OUT_ARG(tpu_tensor_reshape, t, flat, 2);
  NULL_ARG(tpu_tensor_cast(NULL, TPU_HALF, &r), "'tensor'");
  OUT_ARG(tpu_tensor_cast, t, TPU_HALF);

  /* A scalar: dims may be NULL for rank 0. */
  tpu_tensor *s = NULL;
  CHECK_OK(tpu_tensor_create(TPU_FLOAT, NULL, 0, data, sizeof(float), &s));
  CHECK_OK(tpu_tensor_dims(s, NULL, 0, &(size_t){0}));
  CHECK_OK(tpu_tensor_reshape(s, NULL, 0, &r));
  tpu_tensor_release(r);
  tpu_tensor_release(s);

  uint16_t h[2];
  NULL_ARG(tpu_float_to_bfloat16(NULL, h, 2), "'in'");
  NULL_ARG(tpu_float_to_bfloat16(data, NULL, 2), "'out'");
  CHECK_OK(tpu_float_to_bfloat16(NULL, NULL, 0));
  NULL_ARG(tpu_bfloat16_to_float(NULL, data, 2), "'in'");
  NULL_ARG(tpu_bfloat16_to_float(h, NULL, 2), "'out'");
  CHECK_OK(tpu_bfloat16_to_float(NULL, NULL, 0));
  NULL_ARG(tpu_float_to_half(NULL, h, 2), "'in'");
  NULL_ARG(tpu_float_to_half(data, NULL, 2), "'out'");
  CHECK_OK(tpu_float_to_half(NULL, NULL, 0));
  NULL_ARG(tpu_half_to_float(NULL, data, 2), "'in'");
  NULL_ARG(tpu_half_to_float(h, NULL, 2), "'out'");
  CHECK_OK(tpu_half_to_float(NULL, NULL, 0));

  tpu_tensor_release(t);
  CHECK_NO_WORKER_FAILURES();
}

/* ---- topology, device and group assignment --------------------------------------------- */

static void test_null_args__topology(void **state) {
  (void)state;
  const int32_t mesh[4] = {2, 1, 1, 1};
  const int32_t coords[8] = {0, 0, 0, 0, 1, 0, 0, 0};
  tpu_topology *t = topology(2), *partial = topology(1), *r = NULL;

  NULL_ARG(tpu_topology_create(NULL, 4, coords, 1, 2, &r), "'mesh_shape'");
  NULL_ARG(tpu_topology_create(mesh, 4, NULL, 1, 2, &r), "'device_coordinates'");
  OUT_ARG(tpu_topology_create, mesh, 4, coords, 1, 2);

  unsigned char bytes[256];
  size_t len = 0;
  CHECK_OK(tpu_topology_serialize(t, bytes, sizeof bytes, &len));
  NULL_ARG(tpu_topology_parse(NULL, len, &r), "'bytes'");
  OUT_ARG(tpu_topology_parse, bytes, len);
  NULL_ARG(tpu_topology_serialize(NULL, bytes, sizeof bytes, &len), "'topology'");
  ARRAY_ARGS(tpu_topology_serialize, t);
  CHECK_OK(tpu_topology_release(NULL));

  int32_t c[4] = {0, 0, 0, 0};
  int v = 0, w = 0;
  NULL_ARG(tpu_topology_mesh_shape(NULL, c, TPU_MESH_RANK, &(size_t){0}), "'topology'");
  ARRAY_ARGS(tpu_topology_mesh_shape, t);
  NULL_ARG(tpu_topology_mesh_rank(NULL, &v), "'topology'");
  OUT_ARG(tpu_topology_mesh_rank, t);
  NULL_ARG(tpu_topology_num_tasks(NULL, &v), "'topology'");
  OUT_ARG(tpu_topology_num_tasks, t);
  NULL_ARG(tpu_topology_num_devices_per_task(NULL, &v), "'topology'");
  OUT_ARG(tpu_topology_num_devices_per_task, t);
  NULL_ARG(tpu_topology_device_coordinates(NULL, 0, 0, c, TPU_MESH_RANK, &(size_t){0}), "'topology'");
  ARRAY_ARGS(tpu_topology_device_coordinates, t, 0, 0);
  NULL_ARG(tpu_topology_task_ordinal_at_coordinates(NULL, c, TPU_MESH_RANK, &v), "'topology'");
  NULL_ARG(tpu_topology_task_ordinal_at_coordinates(t, NULL, TPU_MESH_RANK, &v), "'coords'");
  OUT_ARG(tpu_topology_task_ordinal_at_coordinates, t, c, TPU_MESH_RANK);
  NULL_ARG(tpu_topology_device_ordinal_at_coordinates(NULL, c, TPU_MESH_RANK, &v), "'topology'");
  NULL_ARG(tpu_topology_device_ordinal_at_coordinates(t, NULL, TPU_MESH_RANK, &v), "'coords'");
  OUT_ARG(tpu_topology_device_ordinal_at_coordinates, t, c, TPU_MESH_RANK);
  NULL_ARG(tpu_topology_num_missing_devices(NULL, &v), "'topology'");
  OUT_ARG(tpu_topology_num_missing_devices, partial);
  NULL_ARG(tpu_topology_missing_device(NULL, 0, c, TPU_MESH_RANK, &(size_t){0}), "'topology'");
  ARRAY_ARGS(tpu_topology_missing_device, partial, 0);

  char name[256];
  NULL_ARG(tpu_topology_tpu_device_name(NULL, c, TPU_MESH_RANK, "worker", name, sizeof name, &len), "'topology'");
  NULL_ARG(tpu_topology_tpu_device_name(t, NULL, TPU_MESH_RANK, "worker", name, sizeof name, &len), "'coords'");
  CHECK_OK(tpu_topology_tpu_device_name(t, c, TPU_MESH_RANK, NULL, name, sizeof name, &len)); /* no job part */
  CHECK(strstr(name, "/job:") == NULL);
  ARRAY_ARGS(tpu_topology_tpu_device_name, t, c, TPU_MESH_RANK, "worker");
  NULL_ARG(tpu_topology_cpu_device_name(NULL, c, TPU_MESH_RANK, "worker", name, sizeof name, &len), "'topology'");
  NULL_ARG(tpu_topology_cpu_device_name(t, NULL, TPU_MESH_RANK, "worker", name, sizeof name, &len), "'coords'");
  CHECK_OK(tpu_topology_cpu_device_name(t, c, TPU_MESH_RANK, NULL, name, sizeof name, &len));
  CHECK(strstr(name, "/job:") == NULL);
  ARRAY_ARGS(tpu_topology_cpu_device_name, t, c, TPU_MESH_RANK, "worker");
  NULL_ARG(tpu_topology_hardware_feature(NULL, &v, &w), "'topology'");
  NULL_ARG(tpu_topology_hardware_feature(t, NULL, &w), "'embedding_feature'");
  NULL_ARG(tpu_topology_hardware_feature(t, &v, NULL), "'num_embedding_devices_per_chip'");

  /* The header does not give a NULL job or device type a meaning here. */
  NULL_EITHER(tpu_device_name(NULL, 0, "TPU", 0, name, sizeof name, &len), "'job'");
  NULL_EITHER(tpu_device_name("worker", 0, NULL, 0, name, sizeof name, &len), "'device_type'");
  ARRAY_ARGS(tpu_device_name, "worker", 0, "TPU", 0);
  ARRAY_ARGS(tpu_core, 0);

  tpu_topology_release(partial);
  tpu_topology_release(t);
  CHECK_NO_WORKER_FAILURES();
}

static void test_null_args__device_assignment(void **state) {
  (void)state;
  tpu_topology *t = topology(2), *rt = NULL;
  tpu_device_assignment *da = NULL, *r = NULL;
  const int32_t ones[4] = {1, 1, 1, 1};
  const int32_t cores[8] = {0, 0, 0, 0, 1, 0, 0, 0};

  NULL_ARG(tpu_device_assignment_build(NULL, ones, 4, ones, 4, 2, TPU_DEVICE_ORDER_AUTO, &r),
           "'topology'");
  /* NULL computation_shape / computation_stride: all ones. */
  CHECK_OK(tpu_device_assignment_build(t, NULL, 0, ones, 4, 2, TPU_DEVICE_ORDER_AUTO, &r));
  tpu_device_assignment_release(r);
  CHECK_OK(tpu_device_assignment_build(t, ones, 4, NULL, 0, 2, TPU_DEVICE_ORDER_AUTO, &r));
  tpu_device_assignment_release(r);
  OUT_ARG(tpu_device_assignment_build, t, NULL, 0, NULL, 0, 2, TPU_DEVICE_ORDER_AUTO);

  NULL_ARG(tpu_device_assignment_create(NULL, cores, 2, 1, &r), "'topology'");
  NULL_ARG(tpu_device_assignment_create(t, NULL, 2, 1, &r), "'core_assignment'");
  OUT_ARG(tpu_device_assignment_create, t, cores, 2, 1);
  CHECK_OK(tpu_device_assignment_release(NULL));
  CHECK_OK(tpu_device_assignment_create(t, cores, 2, 1, &da));

  int v = 0, ids[4];
  size_t count = 0;
  int32_t c[8];
  NULL_ARG(tpu_device_assignment_topology(NULL, &rt), "'assignment'");
  OUT_ARG(tpu_device_assignment_topology, da);
  NULL_ARG(tpu_device_assignment_num_replicas(NULL, &v), "'assignment'");
  OUT_ARG(tpu_device_assignment_num_replicas, da);
  NULL_ARG(tpu_device_assignment_num_cores_per_replica(NULL, &v), "'assignment'");
  OUT_ARG(tpu_device_assignment_num_cores_per_replica, da);
  NULL_ARG(tpu_device_assignment_core_assignment(NULL, c, 8, &(size_t){0}), "'assignment'");
  NULL_ARG(tpu_device_assignment_core_assignment(da, NULL, 8, &(size_t){0}), "'out'");
  NULL_ARG(tpu_device_assignment_coordinates(NULL, 0, 0, c, TPU_MESH_RANK, &(size_t){0}), "'assignment'");
  ARRAY_ARGS(tpu_device_assignment_coordinates, da, 0, 0);
  NULL_ARG(tpu_device_assignment_task(NULL, 0, 0, &v), "'assignment'");
  OUT_ARG(tpu_device_assignment_task, da, 0, 0);
  NULL_ARG(tpu_device_assignment_tpu_ordinal(NULL, 0, 0, &v), "'assignment'");
  OUT_ARG(tpu_device_assignment_tpu_ordinal, da, 0, 0);

  char name[256];
  size_t len;
  NULL_ARG(tpu_device_assignment_tpu_device(NULL, 0, 0, "worker", name, sizeof name, &len),
           "'assignment'");
  CHECK_OK(tpu_device_assignment_tpu_device(da, 0, 0, NULL, name, sizeof name, &len));
  CHECK(strstr(name, "/job:") == NULL);
  ARRAY_ARGS(tpu_device_assignment_tpu_device, da, 0, 0, "worker");
  NULL_ARG(tpu_device_assignment_host_device(NULL, 0, 0, "worker", name, sizeof name, &len),
           "'assignment'");
  CHECK_OK(tpu_device_assignment_host_device(da, 0, 0, NULL, name, sizeof name, &len));
  CHECK(strstr(name, "/job:") == NULL);
  ARRAY_ARGS(tpu_device_assignment_host_device, da, 0, 0, "worker");

  NULL_ARG(tpu_device_assignment_lookup_replicas(NULL, 0, 0, ids, 4, &count), "'assignment'");
  CHECK_OK(tpu_device_assignment_lookup_replicas(da, 0, 0, NULL, 0, &count)); /* a count query */
  CHECK(count == 2);
  NULL_ARG(tpu_device_assignment_lookup_replicas(da, 0, 0, NULL, 4, &count), "'out'");
  NULL_ARG(tpu_device_assignment_lookup_replicas(da, 0, 0, ids, 4, NULL), "'count'");

  /* NULL groups mean one group of all replicas elsewhere; the header leaves it open here. */
  NULL_EITHER(tpu_group_assignment_validate(NULL, 2), "'groups'");
  const tpu_group_assignment no_ids = {NULL, 1, 2};
  NULL_ARG(tpu_group_assignment_validate(&no_ids, 2), "replica_ids");
  /* Groups of different sizes: every pointer but storage (NULL with capacity 0 is a
   * size query, the out-array rule). */
  const int32_t rag_ids[3] = {0, 1, 2}, rag_sizes[2] = {2, 1};
  int32_t rag[5];
  tpu_group_assignment rag_out;
  NULL_ARG(tpu_group_assignment_ragged(NULL, rag_sizes, 2, rag, 5, &count, &rag_out), "'replica_ids'");
  NULL_ARG(tpu_group_assignment_ragged(rag_ids, NULL, 2, rag, 5, &count, &rag_out), "'group_sizes'");
  NULL_ARG(tpu_group_assignment_ragged(rag_ids, rag_sizes, 2, NULL, 5, &count, &rag_out), "'storage'");
  NULL_ARG(tpu_group_assignment_ragged(rag_ids, rag_sizes, 2, rag, 5, NULL, &rag_out), "'count'");
  NULL_ARG(tpu_group_assignment_ragged(rag_ids, rag_sizes, 2, rag, 5, &count, NULL), "'out'");
  CHECK_OK(tpu_group_assignment_ragged(rag_ids, rag_sizes, 2, NULL, 0, &count, &rag_out));
  CHECK(count == 5);

  tpu_device_assignment_release(da);
  tpu_topology_release(t);
  CHECK_NO_WORKER_FAILURES();
}

/* ---- mesh (1.3) ---------------------------------------------------------------------- */

static void test_null_args__mesh(void **state) {
  (void)state;
  tpu_topology *t = topology(2);
  const int32_t cores[8] = {0, 0, 0, 0, 1, 0, 0, 0};
  tpu_device_assignment *da = NULL, *rda = NULL;
  CHECK_OK(tpu_device_assignment_create(t, cores, 2, 1, &da));
  const char *names[1] = {"batch"};
  const int64_t sizes[1] = {2};
  tpu_mesh *m = NULL, *r = NULL;

  NULL_ARG(tpu_mesh_create(NULL, names, sizes, 1, &r), "'assignment'");
  NULL_ARG(tpu_mesh_create(da, NULL, sizes, 1, &r), "'axis_names'");
  NULL_ARG(tpu_mesh_create(da, names, NULL, 1, &r), "'axis_sizes'");
  NULL_ARG(tpu_mesh_create(da, (const char *[]){NULL}, sizes, 1, &r), "axis_names[0] is NULL");
  OUT_ARG(tpu_mesh_create, da, names, sizes, 1);
  NULL_ARG(tpu_mesh_create_from_topology(NULL, names, sizes, 1, &r), "'topology'");
  NULL_ARG(tpu_mesh_create_from_topology(t, NULL, sizes, 1, &r), "'axis_names'");
  NULL_ARG(tpu_mesh_create_from_topology(t, names, NULL, 1, &r), "'axis_sizes'");
  OUT_ARG(tpu_mesh_create_from_topology, t, names, sizes, 1);
  CHECK_OK(tpu_mesh_release(NULL));
  CHECK_OK(tpu_mesh_create(da, names, sizes, 1, &m));

  int v = 0;
  int64_t n = 0, coords[1];
  char name[16];
  size_t len = 0;
  tpu_group_assignment g;
  NULL_ARG(tpu_mesh_device_assignment(NULL, &rda), "'mesh'");
  OUT_ARG(tpu_mesh_device_assignment, m);
  NULL_ARG(tpu_mesh_num_axes(NULL, &v), "'mesh'");
  OUT_ARG(tpu_mesh_num_axes, m);
  NULL_ARG(tpu_mesh_size(NULL, &n), "'mesh'");
  OUT_ARG(tpu_mesh_size, m);
  NULL_ARG(tpu_mesh_axis_name(NULL, 0, name, sizeof name, &len), "'mesh'");
  ARRAY_ARGS(tpu_mesh_axis_name, m, 0);
  NULL_ARG(tpu_mesh_axis_size(NULL, 0, &n), "'mesh'");
  OUT_ARG(tpu_mesh_axis_size, m, 0);
  NULL_ARG(tpu_mesh_axis_index(NULL, "batch", &v), "'mesh'");
  NULL_ARG(tpu_mesh_axis_index(m, NULL, &v), "'name'");
  OUT_ARG(tpu_mesh_axis_index, m, "batch");
  NULL_ARG(tpu_mesh_coordinates(NULL, 0, 0, coords, 1, &len), "'mesh'");
  ARRAY_ARGS(tpu_mesh_coordinates, m, 0, 0);
  NULL_ARG(tpu_mesh_axis_groups(NULL, names, 1, &g, &v), "'mesh'");
  NULL_ARG(tpu_mesh_axis_groups(m, NULL, 1, &g, &v), "'axes'");
  NULL_ARG(tpu_mesh_axis_groups(m, (const char *[]){NULL}, 1, &g, &v), "axes[0] is NULL");
  NULL_ARG(tpu_mesh_axis_groups(m, names, 1, NULL, &v), "'groups'");
  NULL_ARG(tpu_mesh_axis_groups(m, names, 1, &g, NULL), "'group_mode'");

  tpu_mesh_release(m);
  tpu_device_assignment_release(da);
  tpu_topology_release(t);
  CHECK_NO_WORKER_FAILURES();
}

/* ---- system start-up (no system may be live) -------------------------------------------- */

static void test_null_args__system_init(void **state) {
  (void)state;
  tpu_system_options o = system_options();
  tpu_system *s = NULL;
  NULL_ARG(tpu_system_options_init(NULL, sizeof o), "'options'");
  tpu_step_options so;
  NULL_ARG(tpu_step_options_init(NULL, sizeof so), "'options'");
  CHECK_OK(tpu_step_options_init(&so, sizeof so));
  tpu_collective_options co;
  NULL_ARG(tpu_collective_options_init(NULL, sizeof co), "'options'");
  CHECK_OK(tpu_collective_options_init(&co, sizeof co));

  NULL_ARG(tpu_system_init(&o, NULL), "'out'");
  CHECK_NO_WORKER_FAILURES();
  assert_no_live_system();
  CHECK_OK(tpu_system_init(NULL, &s)); /* defaults */
  CHECK_NO_WORKER_FAILURES();
  CHECK_OK(tpu_system_release(s));

  unsigned char buf[1024];
  size_t len = 0;
  s = NULL;
  NULL_ARG(tpu_initialize_system(&o, NULL, buf, sizeof buf, &len), "'out'");
  NULL_ARG(tpu_initialize_system(&o, &s, NULL, sizeof buf, &len), "'topology'");
  NULL_ARG(tpu_initialize_system(&o, &s, buf, sizeof buf, NULL), "'count'");
  CHECK_NO_WORKER_FAILURES();
  assert_null(s);
  assert_no_live_system();
  CHECK_OK(tpu_initialize_system(NULL, &s, buf, sizeof buf, &len));
  CHECK_NO_WORKER_FAILURES();
  CHECK_OK(tpu_system_release(s));
  /* A size query still starts the system. */
  CHECK_OK(tpu_initialize_system(&o, &s, NULL, 0, &len));
  CHECK_NO_WORKER_FAILURES();
  assert_true(len > 0);
  CHECK_OK(tpu_system_release(s));

  NULL_ARG(tpu_system_shutdown(NULL), "'system'");
  CHECK_OK(tpu_system_release(NULL));
  CHECK_NO_WORKER_FAILURES();
}

/* ---- with a live system ------------------------------------------------------------------- */

typedef struct {
  tpu_system *system;
  tpu_device_assignment *assignment;
  tpu_infeed_queue *infeed;
  tpu_outfeed_queue *outfeed;
  tpu_tensor *x; /* float32 [2] */
} fixture;

static int setup_system(void **state) {
  static fixture f;
  tpu_system_options o = system_options();
  const tpu_dtype dtypes[1] = {TPU_FLOAT};
  tpu_shape shapes[1];
  memset(shapes, 0, sizeof shapes);
  shapes[0].rank = 1;
  shapes[0].dims[0] = 2;
  if (tpu_system_init(&o, &f.system) != TPU_OK ||
      tpu_system_default_device_assignment(f.system, kCores, &f.assignment) != TPU_OK ||
      tpu_infeed_queue_create(f.system, kCores, 1, dtypes, shapes, 0, &f.infeed) != TPU_OK ||
      tpu_outfeed_queue_create(f.system, kCores, 1, dtypes, shapes, 0, &f.outfeed) != TPU_OK) {
    fprintf(stderr, "setup: %s\n", tpu_last_error());
    return -1;
  }
  f.x = vector2();
  *state = &f;
  return 0;
}

static int teardown_system(void **state) {
  fixture *f = *state;
  tpu_tensor_release(f->x);
  tpu_infeed_queue_release(f->infeed);
  tpu_outfeed_queue_release(f->outfeed);
  tpu_device_assignment_release(f->assignment);
  return tpu_system_release(f->system) == TPU_OK ? 0 : -1;
}

static void test_null_args__system_queries(void **state) {
  fixture *f = *state;
  tpu_system_options o = system_options();
  tpu_system *s = f->system;
  tpu_topology *t = NULL;
  tpu_device_assignment *da = NULL;
  int v = 0;
  size_t len;
  char buf[1024];

  NULL_ARG(tpu_system_options_init(NULL, sizeof o), "'options'");
  NULL_ARG(tpu_system_num_cores(NULL, &v), "'system'");
  OUT_ARG(tpu_system_num_cores, s);
  NULL_ARG(tpu_system_topology(NULL, &t), "'system'");
  OUT_ARG(tpu_system_topology, s);
  NULL_ARG(tpu_system_is_closed(NULL, &v), "'system'");
  OUT_ARG(tpu_system_is_closed, s);
  NULL_ARG(tpu_system_default_device_assignment(NULL, kCores, &da), "'system'");
  OUT_ARG(tpu_system_default_device_assignment, s, kCores);
  NULL_ARG(tpu_system_serialized_topology(NULL, buf, sizeof buf, &len), "'system'");
  ARRAY_ARGS(tpu_system_serialized_topology, s);
  NULL_ARG(tpu_system_job_name(NULL, buf, sizeof buf, &len), "'system'");
  ARRAY_ARGS(tpu_system_job_name, s);
  NULL_ARG(tpu_system_device_type(NULL, buf, sizeof buf, &len), "'system'");
  ARRAY_ARGS(tpu_system_device_type, s);
  NULL_ARG(tpu_system_transport(NULL, buf, sizeof buf, &len), "'system'");
  ARRAY_ARGS(tpu_system_transport, s);
  NULL_ARG(tpu_system_transport_reason(NULL, buf, sizeof buf, &len), "'system'");
  ARRAY_ARGS(tpu_system_transport_reason, s);
  NULL_ARG(tpu_system_embedding_config(NULL, buf, sizeof buf, &len), "'system'");
  ARRAY_ARGS(tpu_system_embedding_config, s);
  CHECK_NO_WORKER_FAILURES();
}

static tpu_status host_ok(int replica_id, void *user_data) {
  (void)replica_id;
  (void)user_data;
  return TPU_OK;
}

/* Hands its one input back as its one output. */
static tpu_status host_tensors_echo(int replica_id, tpu_tensor *const *inputs, int num_inputs,
                                    tpu_tensor **outputs, int num_outputs, void *user_data) {
  (void)replica_id, (void)num_inputs, (void)num_outputs, (void)user_data;
  outputs[0] = inputs[0];
  return tpu_tensor_retain(inputs[0]);
}

/* Each output o gets input o (or NULL). */
static tpu_status identity(tpu_replica_context *ctx, tpu_tensor *const *inputs, int num_inputs,
                           tpu_tensor **outputs, int num_outputs, void *user_data) {
  (void)ctx;
  (void)user_data;
  for (int o = 0; o < num_outputs; ++o) {
    outputs[o] = NULL;
    if (o < num_inputs && tpu_tensor_retain(inputs[o]) == TPU_OK) outputs[o] = inputs[o];
  }
  return TPU_OK;
}

/* Each collective, with x and out replaced by NULL in turn. Every replica runs the
 * same sequence, so the successful calls meet as collectives. */
static void collectives_with_nulls(tpu_replica_context *ctx, const tpu_tensor *x) {
  const int32_t pairs[4] = {0, 1, 1, 0};
  tpu_tensor *out = NULL;

  NULL_ARG(tpu_cross_replica_sum(ctx, NULL, NULL, &out, NULL), "'x'");
  NULL_ARG(tpu_cross_replica_sum(ctx, x, NULL, NULL, NULL), "'out'");
  CHECK_OK(tpu_cross_replica_sum(ctx, x, NULL, &out, NULL)); /* one group of every replica */
  tpu_tensor_release(out);

  NULL_ARG(tpu_all_reduce(ctx, NULL, TPU_REDUCE_MAX, NULL, &out, NULL), "'x'");
  NULL_ARG(tpu_all_reduce(ctx, x, TPU_REDUCE_MAX, NULL, NULL, NULL), "'out'");
  CHECK_OK(tpu_all_reduce(ctx, x, TPU_REDUCE_MAX, NULL, &out, NULL));
  tpu_tensor_release(out);

  NULL_ARG(tpu_all_gather(ctx, NULL, 0, NULL, &out, NULL), "'x'");
  NULL_ARG(tpu_all_gather(ctx, x, 0, NULL, NULL, NULL), "'out'");
  CHECK_OK(tpu_all_gather(ctx, x, 0, NULL, &out, NULL));
  tpu_tensor_release(out);

  NULL_ARG(tpu_reduce_scatter(ctx, NULL, TPU_REDUCE_SUM, 0, NULL, &out, NULL), "'x'");
  NULL_ARG(tpu_reduce_scatter(ctx, x, TPU_REDUCE_SUM, 0, NULL, NULL, NULL), "'out'");
  CHECK_OK(tpu_reduce_scatter(ctx, x, TPU_REDUCE_SUM, 0, NULL, &out, NULL));
  tpu_tensor_release(out);

  NULL_ARG(tpu_all_to_all(ctx, NULL, 0, 0, kCores, NULL, &out, NULL), "'x'");
  NULL_ARG(tpu_all_to_all(ctx, x, 0, 0, kCores, NULL, NULL, NULL), "'out'");
  CHECK_OK(tpu_all_to_all(ctx, x, 0, 0, kCores, NULL, &out, NULL));
  tpu_tensor_release(out);

  NULL_ARG(tpu_collective_permute(ctx, NULL, pairs, 2, &out, NULL), "'x'");
  NULL_ARG(tpu_collective_permute(ctx, x, pairs, 2, NULL, NULL), "'out'");
  CHECK_OK(tpu_collective_permute(ctx, x, pairs, 2, &out, NULL));
  tpu_tensor_release(out);

  NULL_ARG(tpu_broadcast(ctx, NULL, 0, NULL, &out, NULL), "'x'");
  NULL_ARG(tpu_broadcast(ctx, x, 0, NULL, NULL, NULL), "'out'");
  CHECK_OK(tpu_broadcast(ctx, x, 0, NULL, &out, NULL));
  tpu_tensor_release(out);

  CHECK_OK(tpu_barrier(ctx, NULL));
  CHECK_OK(tpu_bfloat16_scope_enter(ctx));
  CHECK_OK(tpu_bfloat16_scope_exit(ctx));
}

/* Inside a computation: the context functions with every other pointer NULL in turn. */
static void in_replica(tpu_replica_context *ctx, tpu_tensor *x, const fixture *f) {
  OUT_ARG(tpu_replica_context_replica_id, ctx);
  OUT_ARG(tpu_replica_context_num_replicas, ctx);
  OUT_ARG(tpu_replica_context_core, ctx);
  OUT_ARG(tpu_replica_context_num_cores_per_replica, ctx);
  OUT_ARG(tpu_replica_context_logical_core, ctx);
  ARRAY_ARGS(tpu_replica_context_device_name, ctx);
  NULL_ARG(tpu_outside_compilation(ctx, NULL, NULL), "'fn'");
  CHECK_OK(tpu_outside_compilation(ctx, host_ok, NULL)); /* user_data may be NULL */
  {
    tpu_tensor *ins[1] = {x}, *outs[1] = {NULL};
    NULL_ARG(tpu_outside_compilation_tensors(ctx, NULL, NULL, ins, 1, outs, 1), "'fn'");
    NULL_ARG(tpu_outside_compilation_tensors(ctx, host_tensors_echo, NULL, NULL, 1, outs, 1), "'inputs'");
    NULL_ARG(tpu_outside_compilation_tensors(ctx, host_tensors_echo, NULL, ins, 1, NULL, 1), "'outputs'");
    CHECK_OK(tpu_outside_compilation_tensors(ctx, host_tensors_echo, NULL, ins, 1, outs, 1));
    tpu_tensor_release(outs[0]);
  }

  collectives_with_nulls(ctx, x);

  tpu_tensor *tuple[1] = {x};
  tpu_tensor *const null_tuple[1] = {NULL};
  NULL_ARG(tpu_infeed_dequeue(ctx, NULL, tuple, 1), "'queue'");
  NULL_ARG(tpu_infeed_dequeue(ctx, f->infeed, NULL, 1), "'tuple'");
  NULL_ARG(tpu_outfeed_enqueue(ctx, NULL, tuple, 1), "'queue'");
  NULL_ARG(tpu_outfeed_enqueue(ctx, f->outfeed, NULL, 1), "'tuple'");
  NULL_ARG(tpu_outfeed_enqueue(ctx, f->outfeed, null_tuple, 1), "tuple|element");
}

/* Arguments a collective may only find wrong when the participants meet; such an error
 * cancels the rest of the step, so each runs in a step of its own. */
static void null_group_ids(tpu_replica_context *ctx, tpu_tensor *x, const fixture *f) {
  const tpu_group_assignment no_ids = {NULL, 1, kCores};
  tpu_tensor *out = NULL;
  (void)f;
  NULL_ARG(tpu_cross_replica_sum(ctx, x, &no_ids, &out, NULL), "replica_ids");
}

static void null_pairs(tpu_replica_context *ctx, tpu_tensor *x, const fixture *f) {
  tpu_tensor *out = NULL;
  (void)f;
  NULL_ARG(tpu_collective_permute(ctx, x, NULL, 2, &out, NULL), "'source_target_pairs'");
}

static void null_pairs_none(tpu_replica_context *ctx, tpu_tensor *x, const fixture *f) {
  tpu_tensor *out = NULL;
  (void)f;
  /* No pairs: everybody gets zeros; the header does not say whether NULL is fine then. */
  NULL_EITHER(tpu_collective_permute(ctx, x, NULL, 0, &out, NULL), "'source_target_pairs'");
  tpu_tensor_release(out);
}

typedef void (*replica_check)(tpu_replica_context *ctx, tpu_tensor *x, const fixture *f);
typedef struct {
  const fixture *f;
  replica_check check;
} check_step;

static tpu_status run_check(tpu_replica_context *ctx, tpu_tensor *const *inputs, int num_inputs,
                            tpu_tensor **outputs, int num_outputs, void *user_data) {
  const check_step *step = user_data;
  (void)num_inputs;
  for (int o = 0; o < num_outputs; ++o) outputs[o] = NULL;
  step->check(ctx, inputs[0], step->f);
  return TPU_OK;
}

/* Runs `check` in every replica; `may_fail`: a collective error may fail the step. */
static void run_in_replicas(const fixture *f, replica_check check, int may_fail) {
  check_step step = {f, check};
  tpu_tensor *inputs[kCores] = {f->x, f->x};
  tpu_status st = tpu_replicate(f->system, run_check, &step, kCores, 1, inputs, 0, NULL, NULL);
  if (!(st == TPU_OK || (may_fail && st == TPU_INVALID_ARGUMENT)))
    fail_msg("tpu_replicate: %s: %s", tpu_status_name(st), tpu_last_error());
}

static void test_null_args__replica_context(void **state) {
  fixture *f = *state;
  run_in_replicas(f, in_replica, 0);
  CHECK_NO_WORKER_FAILURES();
  run_in_replicas(f, null_group_ids, 1);
  CHECK_NO_WORKER_FAILURES();
  run_in_replicas(f, null_pairs, 1);
  CHECK_NO_WORKER_FAILURES();
  run_in_replicas(f, null_pairs_none, 1);
  CHECK_NO_WORKER_FAILURES();

  /* ctx == NULL, from the host; every other argument valid. */
  int v;
  size_t len;
  char buf[256];
  tpu_tensor *out = NULL;
  tpu_tensor *tuple[1] = {f->x};
  const int32_t pairs[2] = {0, 1};
  NULL_ARG(tpu_replica_context_replica_id(NULL, &v), "'ctx'");
  NULL_ARG(tpu_replica_context_num_replicas(NULL, &v), "'ctx'");
  NULL_ARG(tpu_replica_context_core(NULL, &v), "'ctx'");
  NULL_ARG(tpu_replica_context_num_cores_per_replica(NULL, &v), "'ctx'");
  NULL_ARG(tpu_replica_context_logical_core(NULL, &v), "'ctx'");
  NULL_ARG(tpu_replica_context_device_name(NULL, buf, sizeof buf, &len), "'ctx'");
  NULL_ARG(tpu_replica_context_fail(NULL, TPU_DATA_LOSS, "why"), "'ctx'");
  NULL_ARG(tpu_outside_compilation(NULL, host_ok, NULL), "'ctx'");
  NULL_ARG(tpu_outside_compilation_tensors(NULL, host_tensors_echo, NULL, NULL, 0, NULL, 0), "'ctx'");
  NULL_ARG(tpu_cross_replica_sum(NULL, f->x, NULL, &out, NULL), "'ctx'");
  NULL_ARG(tpu_all_reduce(NULL, f->x, TPU_REDUCE_SUM, NULL, &out, NULL), "'ctx'");
  NULL_ARG(tpu_all_gather(NULL, f->x, 0, NULL, &out, NULL), "'ctx'");
  NULL_ARG(tpu_reduce_scatter(NULL, f->x, TPU_REDUCE_SUM, 0, NULL, &out, NULL), "'ctx'");
  NULL_ARG(tpu_all_to_all(NULL, f->x, 0, 0, kCores, NULL, &out, NULL), "'ctx'");
  NULL_ARG(tpu_collective_permute(NULL, f->x, pairs, 1, &out, NULL), "'ctx'");
  NULL_ARG(tpu_broadcast(NULL, f->x, 0, NULL, &out, NULL), "'ctx'");
  NULL_ARG(tpu_barrier(NULL, NULL), "'ctx'");
  NULL_ARG(tpu_bfloat16_scope_enter(NULL), "'ctx'");
  NULL_ARG(tpu_bfloat16_scope_exit(NULL), "'ctx'");
  NULL_ARG(tpu_infeed_dequeue(NULL, f->infeed, tuple, 1), "'ctx'");
  NULL_ARG(tpu_outfeed_enqueue(NULL, f->outfeed, tuple, 1), "'ctx'");
  CHECK_NO_WORKER_FAILURES();
}

static tpu_status fail_without_message(tpu_replica_context *ctx, tpu_tensor *const *inputs,
                                       int num_inputs, tpu_tensor **outputs, int num_outputs,
                                       void *user_data) {
  (void)inputs, (void)num_inputs, (void)outputs, (void)num_outputs, (void)user_data;
  return tpu_replica_context_fail(ctx, TPU_DATA_LOSS, NULL);
}

static void test_null_args__fail_null_message(void **state) {
  fixture *f = *state;
  /* The header leaves a NULL message open: the step fails with the code, or the call
   * rejects it, which the computation returns. Either way nothing crashes. */
  tpu_status st = tpu_rewrite(f->system, fail_without_message, NULL, 0, NULL, 0, NULL, NULL);
  assert_true(st == TPU_DATA_LOSS || st == TPU_INVALID_ARGUMENT);
  int closed = 1;
  CHECK_OK(tpu_system_is_closed(f->system, &closed));
  assert_int_equal(closed, 0);
}

static void test_null_args__replicate(void **state) {
  fixture *f = *state;
  tpu_system *s = f->system;
  tpu_tensor *in[kCores] = {f->x, f->x};
  tpu_tensor *const with_null[kCores] = {f->x, NULL};
  tpu_tensor *out[kCores] = {NULL, NULL};

  NULL_ARG(tpu_replicate(NULL, identity, NULL, kCores, 1, in, 1, out, NULL), "'system'");
  NULL_ARG(tpu_replicate(s, NULL, NULL, kCores, 1, in, 1, out, NULL), "'computation'");
  NULL_ARG(tpu_replicate(s, identity, NULL, kCores, 1, NULL, 1, out, NULL), "'inputs'");
  NULL_ARG(tpu_replicate(s, identity, NULL, kCores, 1, with_null, 1, out, NULL), "input");
  NULL_ARG(tpu_replicate(s, identity, NULL, kCores, 1, in, 1, NULL, NULL), "'outputs'");
  /* user_data, device_assignment and maximum_shapes may be NULL. */
  CHECK_OK(tpu_replicate(s, identity, NULL, kCores, 1, in, 1, out, NULL));
  CHECK(out[0] == f->x && out[1] == f->x);
  tpu_tensor_release(out[0]);
  tpu_tensor_release(out[1]);
  CHECK_OK(tpu_replicate(s, identity, NULL, kCores, 1, in, 1, out, STEP_OPTIONS(f->assignment, NULL, 0)));
  tpu_tensor_release(out[0]);
  tpu_tensor_release(out[1]);
  /* No inputs or outputs: the arrays may be NULL. */
  CHECK_OK(tpu_replicate(s, identity, NULL, kCores, 0, NULL, 0, NULL, NULL));

  NULL_ARG(tpu_rewrite(NULL, identity, NULL, 1, in, 1, out, NULL), "'system'");
  NULL_ARG(tpu_rewrite(s, NULL, NULL, 1, in, 1, out, NULL), "'computation'");
  NULL_ARG(tpu_rewrite(s, identity, NULL, 1, NULL, 1, out, NULL), "'inputs'");
  NULL_ARG(tpu_rewrite(s, identity, NULL, 1, with_null + 1, 1, out, NULL), "input");
  NULL_ARG(tpu_rewrite(s, identity, NULL, 1, in, 1, NULL, NULL), "'outputs'");
  CHECK_OK(tpu_rewrite(s, identity, NULL, 1, in, 1, out, NULL));
  tpu_tensor_release(out[0]);

  NULL_ARG(tpu_shard(NULL, identity, NULL, 1, in, kCores, NULL, NULL, NULL, 1, out, NULL),
           "'system'");
  NULL_ARG(tpu_shard(s, NULL, NULL, 1, in, kCores, NULL, NULL, NULL, 1, out, NULL),
           "'computation'");
  NULL_ARG(tpu_shard(s, identity, NULL, 1, NULL, kCores, NULL, NULL, NULL, 1, out, NULL),
           "'inputs'");
  NULL_ARG(tpu_shard(s, identity, NULL, 1, in, kCores, NULL, NULL, NULL, 1, NULL, NULL),
           "'outputs'");
  /* The axis and flag arrays may be NULL (all 0, all true). */
  CHECK_OK(tpu_shard(s, identity, NULL, 1, in, kCores, NULL, NULL, NULL, 1, out, NULL));
  tpu_tensor_release(out[0]);

  NULL_ARG(tpu_batch_parallel(NULL, identity, NULL, 1, in, kCores, 1, out, NULL), "'system'");
  NULL_ARG(tpu_batch_parallel(s, NULL, NULL, 1, in, kCores, 1, out, NULL), "'computation'");
  NULL_ARG(tpu_batch_parallel(s, identity, NULL, 1, NULL, kCores, 1, out, NULL), "'inputs'");
  NULL_ARG(tpu_batch_parallel(s, identity, NULL, 1, in, kCores, 1, NULL, NULL), "'outputs'");
  CHECK_OK(tpu_batch_parallel(s, identity, NULL, 1, in, kCores, 1, out, NULL));
  tpu_tensor_release(out[0]);

  /* Caller threads (1.4): join and leave name their NULLs; a NULL computation is
   * allowed only with caller_threads (the step then needs joined threads). */
  tpu_joined_step joined = TPU_JOINED_STEP_INIT;
  NULL_ARG(tpu_step_join(NULL, 0, 0, &joined), "'system'");
  NULL_ARG(tpu_step_join(s, 0, 0, NULL), "'out'");
  NULL_ARG(tpu_step_join_cancel(NULL, 0), "'system'");
  NULL_ARG(tpu_step_leave(NULL, TPU_OK, NULL, 0), "'ctx'");
  CHECK_NO_WORKER_FAILURES();
}

static void test_null_args__feed(void **state) {
  fixture *f = *state;
  tpu_system *s = f->system;
  const tpu_dtype dtypes[1] = {TPU_FLOAT};
  tpu_shape shapes[1];
  memset(shapes, 0, sizeof shapes);
  shapes[0].rank = 1;
  shapes[0].dims[0] = 2;
  tpu_infeed_queue *iq = NULL;
  tpu_outfeed_queue *oq = NULL;

  NULL_ARG(tpu_infeed_queue_create(NULL, kCores, 1, dtypes, shapes, 0, &iq), "'system'");
  NULL_ARG(tpu_infeed_queue_create(s, kCores, 1, NULL, shapes, 0, &iq), "'dtypes'");
  NULL_ARG(tpu_infeed_queue_create(s, kCores, 1, dtypes, NULL, 0, &iq), "'shapes'");
  OUT_ARG(tpu_infeed_queue_create, s, kCores, 1, dtypes, shapes, 0);
  CHECK_OK(tpu_infeed_queue_release(NULL));
  NULL_ARG(tpu_outfeed_queue_create(NULL, kCores, 1, dtypes, shapes, 0, &oq), "'system'");
  NULL_ARG(tpu_outfeed_queue_create(s, kCores, 1, NULL, shapes, 0, &oq), "'dtypes'");
  NULL_ARG(tpu_outfeed_queue_create(s, kCores, 1, dtypes, NULL, 0, &oq), "'shapes'");
  OUT_ARG(tpu_outfeed_queue_create, s, kCores, 1, dtypes, shapes, 0);
  CHECK_OK(tpu_outfeed_queue_release(NULL));

  tpu_tensor *tuple[1] = {f->x};
  tpu_tensor *const null_tuple[1] = {NULL};
  NULL_ARG(tpu_infeed_enqueue(NULL, 0, tuple, 1), "'queue'");
  NULL_ARG(tpu_infeed_enqueue(f->infeed, 0, NULL, 1), "'tuple'");
  NULL_ARG(tpu_infeed_enqueue(f->infeed, 0, null_tuple, 1), "tuple|element");
  const int shard_dims[1] = {0};
  NULL_ARG(tpu_infeed_queue_set_shard_dimensions(NULL, shard_dims, 1), "'queue'");
  NULL_ARG(tpu_infeed_queue_set_shard_dimensions(f->infeed, NULL, 1), "'shard_dimensions'");
  NULL_ARG(tpu_outfeed_dequeue(NULL, 0, tuple, 1), "'queue'");
  NULL_ARG(tpu_outfeed_dequeue(f->outfeed, 0, NULL, 1), "'tuple'");
  CHECK_NO_WORKER_FAILURES();
}

static void test_null_args__environment_and_cache(void **state) {
  (void)state;
  const char *name = NULL;
  int64_t value = 0;
  size_t released = 0;
  NULL_ARG(tpu_environment_variable(0, NULL, &value), "'name'");
  NULL_ARG(tpu_environment_variable(0, &name, NULL), "'value'");
  NULL_ARG(tpu_tensor_cache_trim(0, NULL), "'released'");
  CHECK_OK(tpu_tensor_cache_trim(0, &released));
  CHECK_NO_WORKER_FAILURES();
}


static void test_null_args__cluster_resolver(void **state) {
  (void)state;
  tpu_cluster_resolver_options ro = TPU_CLUSTER_RESOLVER_OPTIONS_INIT;
  tpu_cluster_options co;
  tpu_cluster_resolver *r = NULL;
  int v = 0;
  NULL_ARG(tpu_cluster_resolver_options_init(NULL, sizeof ro), "'options'");
  NULL_ARG(tpu_cluster_options_init(NULL, sizeof co), "'options'");
  CHECK_OK(tpu_cluster_options_init(&co, sizeof co));
  ro.tpu = "grpc://10.0.0.1:8470,10.0.0.2";
  OUT_ARG(tpu_cluster_resolver_create, &ro);
  CHECK_OK(tpu_cluster_resolver_create(&ro, &r));
  NULL_ARG(tpu_cluster_resolver_source(NULL, &v), "'resolver'");
  OUT_ARG(tpu_cluster_resolver_source, r);
  NULL_ARG(tpu_cluster_resolver_task_id(NULL, &v), "'resolver'");
  OUT_ARG(tpu_cluster_resolver_task_id, r);
  NULL_ARG(tpu_cluster_resolver_num_accelerators(NULL, &v), "'resolver'");
  OUT_ARG(tpu_cluster_resolver_num_accelerators, r);
  NULL_ARG(tpu_cluster_resolver_num_tasks(NULL, NULL, &v), "'resolver'");
  OUT_ARG(tpu_cluster_resolver_num_tasks, r, NULL);
  ARRAY_ARGS(tpu_cluster_resolver_tpu_name, r);
  ARRAY_ARGS(tpu_cluster_resolver_cluster_spec, r);
  ARRAY_ARGS(tpu_cluster_resolver_task_address, r, NULL, 1);
  ARRAY_ARGS(tpu_cluster_resolver_master, r, NULL, -1, NULL);
  ARRAY_ARGS(tpu_cluster_resolver_get_master, r);
  NULL_ARG(tpu_cluster_resolver_task_num_accelerators(NULL, NULL, -1, &v), "'resolver'");
  OUT_ARG(tpu_cluster_resolver_task_num_accelerators, r, NULL, -1);
  ARRAY_ARGS(tpu_cluster_resolver_job_name, r);
  ARRAY_ARGS(tpu_cluster_resolver_rpc_layer, r);
  ARRAY_ARGS(tpu_cluster_resolver_environment, r);
  ARRAY_ARGS(tpu_cluster_resolver_coordinator_address, r);
  NULL_ARG(tpu_cluster_resolver_enter(NULL), "'resolver'");
  NULL_ARG(tpu_cluster_resolver_exit(NULL), "'resolver'");
  CHECK_OK(tpu_cluster_resolver_release(r));
  CHECK_OK(tpu_cluster_resolver_release(NULL));

  /* The entry points: a NULL system out starts nothing. */
  size_t len = 0;
  char type[8];
  NULL_ARG(tpu_initialize_tpu_system(NULL, NULL, NULL, NULL, NULL), "'system'");
  NULL_ARG(tpu_initialize_accelerator_system(NULL, 1, 0, 0, NULL, type, sizeof type, &len), "'system'");
  NULL_ARG(tpu_initialize_multi_client(NULL, 1, 0, 0, NULL, type, sizeof type, &len), "'system'");
  tpu_system *s = NULL;
  NULL_ARG(tpu_initialize_accelerator_system(NULL, 1, 0, 0, &s, type, sizeof type, NULL), "'count'");
  NULL_ARG(tpu_shutdown_accelerator_system(NULL), "'system'");
  assert_null(s);
  assert_no_live_system();
  CHECK_NO_WORKER_FAILURES();
}

static void test_null_args__cluster_system(void **state) {
  fixture *f = *state;
  tpu_system *s = f->system;
  int v = 0;
  char buf[16];
  size_t len = 0;
  NULL_ARG(tpu_system_num_tasks(NULL, &v), "'system'");
  OUT_ARG(tpu_system_num_tasks, s);
  NULL_ARG(tpu_system_task_id(NULL, &v), "'system'");
  OUT_ARG(tpu_system_task_id, s);
  NULL_ARG(tpu_kv_set(NULL, "k", "v", 1), "'system'");
  NULL_ARG(tpu_kv_set(s, NULL, "v", 1), "'key'");
  NULL_ARG(tpu_kv_set(s, "k", NULL, 1), "'value'");
  CHECK_OK(tpu_kv_set(s, "null-args/k", "v", 1));
  NULL_ARG(tpu_kv_get(NULL, "k", 10, buf, sizeof buf, &len), "'system'");
  NULL_ARG(tpu_kv_get(s, NULL, 10, buf, sizeof buf, &len), "'key'");
  ARRAY_ARGS(tpu_kv_get, s, "null-args/k", 1000);
  NULL_ARG(tpu_kv_try_get(NULL, "k", buf, sizeof buf, &len), "'system'");
  NULL_ARG(tpu_kv_try_get(s, NULL, buf, sizeof buf, &len), "'key'");
  ARRAY_ARGS(tpu_kv_try_get, s, "null-args/k");
  NULL_ARG(tpu_kv_delete(NULL, "k"), "'system'");
  NULL_ARG(tpu_kv_delete(s, NULL), "'key'");
  CHECK_OK(tpu_kv_delete(s, "null-args"));
  NULL_ARG(tpu_wait_at_barrier(NULL, "b", 10, NULL, 0), "'system'");
  NULL_ARG(tpu_wait_at_barrier(s, NULL, 10, NULL, 0), "'id'");
  NULL_ARG(tpu_wait_at_barrier(s, "b", 10, NULL, 1), "'tasks'");
  CHECK_NO_WORKER_FAILURES();
}

/* ---- embeddings ---------------------------------------------------------------------- */

static const char kEmbeddingJson[] =
    "{\"table_descriptor\": [{\"name\": \"t\", \"vocabulary_size\": 4, \"dimension\": 2,"
    " \"optimization_parameters\": {\"learning_rate\": {\"constant\": 0.5},"
    " \"stochastic_gradient_descent\": {}}}],"
    " \"feature_descriptor\": [{\"name\": \"f\", \"table_id\": 0, \"input_shape\": [2]}]}";

/* Inside a computation: the step's functions with each pointer NULL in turn, then a
 * whole good step. */
static tpu_status embedding_step(tpu_replica_context *ctx, tpu_tensor *const *inputs, int num_inputs,
                                 tpu_tensor **outputs, int num_outputs, void *user_data) {
  (void)inputs, (void)num_inputs, (void)outputs, (void)num_outputs, (void)user_data;
  tpu_system *sys = NULL;
  NULL_ARG(tpu_replica_context_system(ctx, NULL), "'out'");
  CHECK_OK(tpu_replica_context_system(ctx, &sys));
  CHECK(sys != NULL);
  const int64_t ids[2] = {1, 3}, samples[2] = {0, 1};
  tpu_embedding_feature_batch b = {0, ids, 2, samples, NULL, 0, NULL, TPU_EMBEDDING_COMBINER_SUM};
  NULL_ARG(tpu_embedding_enqueue(ctx, NULL, 1), "'features'");
  tpu_embedding_feature_batch no_ids = b;
  no_ids.ids = NULL;
  NULL_ARG(tpu_embedding_enqueue(ctx, &no_ids, 1), "ids");
  CHECK_OK(tpu_embedding_enqueue(ctx, &b, 1));
  tpu_tensor *acts[1] = {NULL};
  NULL_ARG(tpu_embedding_recv_activations(ctx, NULL, 1), "'activations'");
  CHECK_OK(tpu_embedding_recv_activations(ctx, acts, 1));
  NULL_ARG(tpu_embedding_send_gradients(ctx, NULL, 1, NULL, 0), "'gradients'");
  NULL_ARG(tpu_embedding_send_gradients(ctx, acts, 1, NULL, 1), "'learning_rates'");
  CHECK_OK(tpu_embedding_send_gradients(ctx, acts, 1, NULL, 0)); /* no dynamic rates: NULL, 0 */
  tpu_tensor_release(acts[0]);
  return TPU_OK;
}

static void test_null_args__embedding(void **state) {
  (void)state;
  unsigned char bytes[512];
  size_t n = 0;
  NULL_ARG(tpu_embedding_config_from_json(NULL, bytes, sizeof bytes, &n), "'json'");
  NULL_ARG(tpu_embedding_config_from_json(kEmbeddingJson, bytes, sizeof bytes, NULL), "'count'");
  NULL_ARG(tpu_embedding_config_from_json(kEmbeddingJson, NULL, 16, &n), "'out'");
  CHECK_OK(tpu_embedding_config_from_json(kEmbeddingJson, NULL, 0, &n)); /* a size query */
  CHECK_OK(tpu_embedding_config_from_json(kEmbeddingJson, bytes, sizeof bytes, &n));
  tpu_system_options o = system_options();
  o.embedding_config = bytes;
  o.embedding_config_len = n;
  tpu_system *s = NULL;
  CHECK_OK(tpu_system_init(&o, &s));

  int v = 0;
  int32_t dim = 0;
  int64_t rows = 0, shard_row = 0;
  char name[64];
  size_t len = 0;
  float values[2] = {1, 2};
  tpu_embedding_mode mode;
  tpu_embedding_optimizer opt;
  NULL_ARG(tpu_embedding_mode_of(NULL, &mode), "'system'");
  NULL_ARG(tpu_embedding_mode_of(s, NULL), "'out'");
  NULL_ARG(tpu_embedding_num_tables(NULL, &v), "'system'");
  OUT_ARG(tpu_embedding_num_tables, s);
  NULL_ARG(tpu_embedding_table_index(NULL, "t", &v), "'system'");
  NULL_ARG(tpu_embedding_table_index(s, NULL, &v), "'name'");
  NULL_ARG(tpu_embedding_table_index(s, "t", NULL), "'out'");
  NULL_ARG(tpu_embedding_table_name(NULL, 0, name, sizeof name, &len), "'system'");
  ARRAY_ARGS(tpu_embedding_table_name, s, 0);
  NULL_ARG(tpu_embedding_table_shape(NULL, 0, &rows, &dim), "'system'");
  NULL_ARG(tpu_embedding_table_shape(s, 0, NULL, &dim), "'vocabulary_size'");
  NULL_ARG(tpu_embedding_table_shape(s, 0, &rows, NULL), "'dimension'");
  NULL_ARG(tpu_embedding_table_optimizer(NULL, 0, &opt), "'system'");
  NULL_ARG(tpu_embedding_table_optimizer(s, 0, NULL), "'out'");
  NULL_ARG(tpu_embedding_table_num_variables(NULL, 0, &v), "'system'");
  OUT_ARG(tpu_embedding_table_num_variables, s, 0);
  NULL_ARG(tpu_embedding_variable_name(NULL, 0, 0, name, sizeof name, &len), "'system'");
  ARRAY_ARGS(tpu_embedding_variable_name, s, 0, 0);
  NULL_ARG(tpu_embedding_row_owner(NULL, 0, 0, &v, &shard_row), "'system'");
  NULL_ARG(tpu_embedding_row_owner(s, 0, 0, NULL, &shard_row), "'core'");
  NULL_ARG(tpu_embedding_row_owner(s, 0, 0, &v, NULL), "'shard_row'");
  NULL_ARG(tpu_embedding_num_features(NULL, &v), "'system'");
  OUT_ARG(tpu_embedding_num_features, s);
  NULL_ARG(tpu_embedding_feature_index(NULL, "f", &v), "'system'");
  NULL_ARG(tpu_embedding_feature_index(s, NULL, &v), "'name'");
  NULL_ARG(tpu_embedding_feature_index(s, "f", NULL), "'out'");
  NULL_ARG(tpu_embedding_feature_name(NULL, 0, name, sizeof name, &len), "'system'");
  ARRAY_ARGS(tpu_embedding_feature_name, s, 0);
  NULL_ARG(tpu_embedding_feature_table(NULL, 0, &v), "'system'");
  NULL_ARG(tpu_embedding_feature_table(s, 0, NULL), "'table'");
  NULL_ARG(tpu_embedding_feature_shape(NULL, 0, &rows, 1, &len), "'system'");
  ARRAY_ARGS(tpu_embedding_feature_shape, s, 0);
  NULL_ARG(tpu_embedding_load(NULL, 0, 0, 0, 1, values, 2), "'system'");
  NULL_ARG(tpu_embedding_load(s, 0, 0, 0, 1, NULL, 2), "'values'");
  CHECK_OK(tpu_embedding_load(s, 0, 0, 0, 0, NULL, 0)); /* no rows, no values */
  NULL_ARG(tpu_embedding_retrieve(NULL, 0, 0, 0, 1, values, 2, &len), "'system'");
  ARRAY_ARGS(tpu_embedding_retrieve, s, 0, 0, 0, 1);

  /* The step's functions from the host: no context. */
  tpu_tensor *t = vector2();
  const int64_t ids[1] = {0}, samples[1] = {0};
  tpu_embedding_feature_batch b = {0, ids, 1, samples, NULL, 0, NULL, TPU_EMBEDDING_COMBINER_SUM};
  tpu_system *got = NULL;
  NULL_ARG(tpu_replica_context_system(NULL, &got), "'ctx'");
  NULL_ARG(tpu_embedding_enqueue(NULL, &b, 1), "'ctx'");
  NULL_ARG(tpu_embedding_recv_activations(NULL, &t, 1), "'ctx'");
  NULL_ARG(tpu_embedding_send_gradients(NULL, &t, 1, NULL, 0), "'ctx'");
  tpu_tensor_release(t);

  CHECK_OK(tpu_replicate(s, embedding_step, NULL, kCores, 0, NULL, 0, NULL, NULL));
  CHECK_NO_WORKER_FAILURES();
  CHECK_OK(tpu_system_release(s));
}

static void test_null_args__checkpoint(void **state) {
  fixture *f = *state;
  tpu_system *s = f->system;
  char dir[] = "/tmp/tpurt-null-args-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  tpu_tensor *t = vector2(), *out = NULL;
  const char *name = "w";
  int64_t step = 0;
  tpu_checkpoint_options o = TPU_CHECKPOINT_OPTIONS_INIT;
  NULL_ARG(tpu_checkpoint_options_init(NULL, sizeof o), "'options'");
  NULL_ARG(tpu_checkpoint_save(NULL, dir, 1, &name, &t, 1, NULL), "'system'");
  NULL_ARG(tpu_checkpoint_save(s, NULL, 1, &name, &t, 1, NULL), "'dir'");
  NULL_ARG(tpu_checkpoint_save(s, dir, 1, NULL, &t, 1, NULL), "'names'");
  NULL_ARG(tpu_checkpoint_save(s, dir, 1, &name, NULL, 1, NULL), "'tensors'");
  NULL_ARG(tpu_checkpoint_save(s, dir, 1, (const char *[]){NULL}, &t, 1, NULL), "names[0] is NULL");
  NULL_ARG(tpu_checkpoint_save(s, dir, 1, &name, (tpu_tensor *[]){NULL}, 1, NULL), "tensors[0] is NULL");
  NULL_ARG(tpu_checkpoint_latest(NULL, &step), "'dir'");
  NULL_ARG(tpu_checkpoint_latest(dir, NULL), "'step'");
  /* NULL names and tensors with no tensors, and NULL options, are allowed */
  CHECK_OK(tpu_checkpoint_save(s, dir, 1, NULL, NULL, 0, NULL));
  CHECK_OK(tpu_checkpoint_save(s, dir, 2, &name, &t, 1, NULL));
  NULL_ARG(tpu_checkpoint_restore(NULL, dir, -1, &name, &out, 1, &step, NULL), "'system'");
  NULL_ARG(tpu_checkpoint_restore(s, NULL, -1, &name, &out, 1, &step, NULL), "'dir'");
  NULL_ARG(tpu_checkpoint_restore(s, dir, -1, NULL, &out, 1, &step, NULL), "'names'");
  NULL_ARG(tpu_checkpoint_restore(s, dir, -1, &name, NULL, 1, &step, NULL), "'tensors'");
  CHECK_OK(tpu_checkpoint_restore(s, dir, -1, &name, &out, 1, NULL, NULL)); /* restored_step may be NULL */
  CHECK(out != NULL);
  tpu_tensor_release(out);
  tpu_tensor_release(t);
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
}

int main(int argc, char **argv) {
  const struct CMUnitTest no_system[] = {
      cmocka_unit_test(test_null_args__common),
      cmocka_unit_test(test_null_args__tensor),
      cmocka_unit_test(test_null_args__topology),
      cmocka_unit_test(test_null_args__device_assignment),
      cmocka_unit_test(test_null_args__mesh),
      cmocka_unit_test(test_null_args__system_init),
      cmocka_unit_test(test_null_args__environment_and_cache),
      cmocka_unit_test(test_null_args__cluster_resolver),
      cmocka_unit_test(test_null_args__embedding),
  };
  const struct CMUnitTest with_system[] = {
      cmocka_unit_test(test_null_args__system_queries),
      cmocka_unit_test(test_null_args__replica_context),
      cmocka_unit_test(test_null_args__replicate),
      cmocka_unit_test(test_null_args__feed),
      cmocka_unit_test(test_null_args__fail_null_message),
      cmocka_unit_test(test_null_args__cluster_system),
      cmocka_unit_test(test_null_args__checkpoint),
  };
  int failed = RUN_TESTS(argc, argv, no_system, NULL, NULL);
  failed += RUN_TESTS(argc, argv, with_system, setup_system, teardown_system);
  return failed;
}
