/* Topology, TopologyProto, device names and the device assignment C API: accessors,
 * error cases, NULL arguments, buffers, and parse robustness on hostile bytes. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <tpurt.h>

#include "test_util.h"
#include "proto_writer.h"

/* v3-8: mesh [2,2,1,2], one task, 8 devices, core fastest then x then y. */
static const int32_t kMesh38[4] = {2, 2, 1, 2};
static const int32_t kCoords38[32] = {0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 1,
                                      0, 1, 0, 0, 0, 1, 0, 1, 1, 1, 0, 0, 1, 1, 0, 1};

static tpu_topology *v38(void) {
  tpu_topology *t = NULL;
  CHECK_OK(tpu_topology_create(kMesh38, 4, kCoords38, 1, 8, &t));
  return t;
}

/* v3-8 without chip (1,1): 6 devices. */
static tpu_topology *v38_missing(void) {
  tpu_topology *t = NULL;
  CHECK_OK(tpu_topology_create(kMesh38, 4, kCoords38, 1, 6, &t));
  return t;
}

/* ---- a tiny protobuf writer, for hand-made TopologyProto bytes ------------------- */

static pbuf proto(const int32_t *mesh, size_t mesh_n, int32_t tasks, int32_t per_task,
                  const int32_t *coords, size_t coords_n) {
  pbuf p = {{0}, 0};
  put_packed(&p, 1, mesh, mesh_n);
  if (tasks) put_int(&p, 2, tasks);
  if (per_task) put_int(&p, 3, per_task);
  if (coords_n) put_packed(&p, 4, coords, coords_n);
  return p;
}

static tpu_status parse(const pbuf *p, tpu_topology **t) {
  return tpu_topology_parse(p->b, p->n, t);
}

/* ---- topology ------------------------------------------------------------------ */

static void test_topology__accessors(void **state) {
  (void)state;
  tpu_topology *t = v38();
  int32_t m[4], c[4];
  int v;
  CHECK_OK(tpu_topology_mesh_shape(t, m, TPU_MESH_RANK, &(size_t){0}));
  assert_memory_equal(m, kMesh38, sizeof(m));
  CHECK_OK(tpu_topology_mesh_rank(t, &v));
  assert_int_equal(v, TPU_MESH_RANK);
  CHECK_OK(tpu_topology_num_tasks(t, &v));
  assert_int_equal(v, 1);
  CHECK_OK(tpu_topology_num_devices_per_task(t, &v));
  assert_int_equal(v, 8);
  for (int d = 0; d < 8; ++d) {
    CHECK_OK(tpu_topology_device_coordinates(t, 0, d, c, TPU_MESH_RANK, &(size_t){0}));
    assert_memory_equal(c, &kCoords38[d * 4], sizeof(c));
    CHECK_OK(tpu_topology_task_ordinal_at_coordinates(t, c, TPU_MESH_RANK, &v));
    assert_int_equal(v, 0);
    CHECK_OK(tpu_topology_device_ordinal_at_coordinates(t, c, TPU_MESH_RANK, &v));
    assert_int_equal(v, d);
  }
  CHECK_OK(tpu_topology_num_missing_devices(t, &v));
  assert_int_equal(v, 0);
  int feature = -1, per_chip = -1;
  CHECK_OK(tpu_topology_hardware_feature(t, &feature, &per_chip));
  assert_int_equal(feature, 0);
  assert_int_equal(per_chip, 0);

  CHECK_ERROR(tpu_topology_device_coordinates(t, 1, 0, c, TPU_MESH_RANK, &(size_t){0}), TPU_OUT_OF_RANGE, "task 1");
  CHECK_ERROR(tpu_topology_device_coordinates(t, -1, 0, c, TPU_MESH_RANK, &(size_t){0}), TPU_OUT_OF_RANGE, "task -1");
  CHECK_ERROR(tpu_topology_device_coordinates(t, 0, 8, c, TPU_MESH_RANK, &(size_t){0}), TPU_OUT_OF_RANGE, "device 8");
  const int32_t outside[4] = {0, 2, 0, 0}, negative[4] = {0, 0, 0, -1};
  CHECK_ERROR(tpu_topology_task_ordinal_at_coordinates(t, outside, TPU_MESH_RANK, &v), TPU_INVALID_ARGUMENT,
             "(0, 2, 0, 0)");
  CHECK_ERROR(tpu_topology_device_ordinal_at_coordinates(t, negative, TPU_MESH_RANK, &v), TPU_INVALID_ARGUMENT,
             "(0, 0, 0, -1)");
  CHECK_ERROR(tpu_topology_missing_device(t, 0, c, TPU_MESH_RANK, &(size_t){0}), TPU_OUT_OF_RANGE, "index 0");
  tpu_topology_release(t);
}

static void test_topology__local_layout_serializes_like_tf(void **state) {
  (void)state;
  /* Mesh [1,1,1,1], 1 task, 1 device: the spec's example bytes. */
  static const unsigned char want[] = {0x0a, 0x04, 1,    1,    1, 1, 0x10, 1,
                                       0x18, 1,    0x22, 0x04, 0, 0, 0,    0};
  const int32_t mesh[4] = {1, 1, 1, 1}, coords[4] = {0, 0, 0, 0};
  tpu_topology *t = NULL;
  CHECK_OK(tpu_topology_create(mesh, 4, coords, 1, 1, &t));
  unsigned char buf[64];
  size_t len = 0;
  CHECK_OK(tpu_topology_serialize(t, NULL, 0, &len)); /* size query */
  assert_int_equal(len, sizeof(want));
  CHECK_OK(tpu_topology_serialize(t, buf, sizeof(buf), &len));
  assert_int_equal(len, sizeof(want));
  assert_memory_equal(buf, want, sizeof(want));
  CHECK_ERROR(tpu_topology_serialize(t, buf, sizeof(want) - 1, &len), TPU_OUT_OF_RANGE, "too small");
  CHECK_ERROR(tpu_topology_serialize(t, NULL, 4, &len), TPU_INVALID_ARGUMENT, "\'out\'");
  CHECK_ERROR(tpu_topology_serialize(t, buf, sizeof(buf), NULL), TPU_INVALID_ARGUMENT, "\'count\'");
  tpu_topology_release(t);

  /* Zero tasks: fields 2-4 are omitted entirely. */
  CHECK_OK(tpu_topology_create(mesh, 4, NULL, 0, 0, &t));
  CHECK_OK(tpu_topology_serialize(t, buf, sizeof(buf), &len));
  assert_int_equal(len, 6);
  assert_memory_equal(buf, want, 6);
  tpu_topology_release(t);
}

static void test_topology__names(void **state) {
  (void)state;
  tpu_topology *t = v38();
  char buf[128];
  size_t len = 0;
  const int32_t c[4] = {1, 1, 0, 1};
  CHECK_OK(tpu_topology_tpu_device_name(t, c, TPU_MESH_RANK, "worker", buf, sizeof(buf), &len));
  assert_string_equal(buf, "/job:worker/task:0/device:TPU:7");
  assert_int_equal(len, strlen(buf));
  CHECK_OK(tpu_topology_tpu_device_name(t, c, TPU_MESH_RANK, NULL, buf, sizeof(buf), &len));
  assert_string_equal(buf, "/task:0/device:TPU:7");
  CHECK_OK(tpu_topology_cpu_device_name(t, c, TPU_MESH_RANK, "worker", buf, sizeof(buf), &len));
  assert_string_equal(buf, "/job:worker/task:0/device:CPU:0");
  CHECK_OK(tpu_topology_cpu_device_name(t, c, TPU_MESH_RANK, NULL, buf, sizeof(buf), &len));
  assert_string_equal(buf, "/task:0/device:CPU:0");
  CHECK_ERROR(tpu_topology_tpu_device_name(t, c, TPU_MESH_RANK, "a/b", buf, sizeof(buf), &len),
             TPU_INVALID_ARGUMENT, "a/b");

  /* Size query, then exactly-too-small (no room for the NUL). */
  CHECK_OK(tpu_topology_tpu_device_name(t, c, TPU_MESH_RANK, NULL, NULL, 0, &len));
  assert_int_equal(len, strlen("/task:0/device:TPU:7"));
  memset(buf, 'x', sizeof(buf));
  CHECK_ERROR(tpu_topology_tpu_device_name(t, c, TPU_MESH_RANK, NULL, buf, len, &len), TPU_OUT_OF_RANGE,
             "too small");
  assert_int_equal(buf[0], 'x');

  CHECK_OK(tpu_device_name("worker", 2, "TPU", 3, buf, sizeof(buf), &len));
  assert_string_equal(buf, "/job:worker/replica:0/task:2/device:TPU:3");
  CHECK_OK(tpu_device_name("localhost", 0, "CPU", 0, buf, sizeof(buf), &len));
  assert_string_equal(buf, "/job:localhost/replica:0/task:0/device:CPU:0");
  CHECK_OK(tpu_device_name(NULL, 1, "TPU", 0, buf, sizeof(buf), &len));
  assert_string_equal(buf, "/replica:0/task:1/device:TPU:0");
  CHECK_ERROR(tpu_device_name("worker", 0, "GPU", 0, buf, sizeof(buf), &len), TPU_INVALID_ARGUMENT,
             "GPU");
  CHECK_ERROR(tpu_device_name("worker", 0, NULL, 0, buf, sizeof(buf), &len), TPU_INVALID_ARGUMENT,
             "device_type");
  CHECK_ERROR(tpu_device_name("worker", -1, "TPU", 0, buf, sizeof(buf), &len), TPU_OUT_OF_RANGE,
             "task -1");
  CHECK_ERROR(tpu_device_name("worker", 0, "TPU", -2, buf, sizeof(buf), &len), TPU_OUT_OF_RANGE,
             "device -2");
  CHECK_ERROR(tpu_device_name("worker", 0, "TPU", 0, buf, 5, &len), TPU_OUT_OF_RANGE, "too small");

  CHECK_OK(tpu_core(0, buf, sizeof(buf), &len));
  assert_string_equal(buf, "device:TPU_REPLICATED_CORE:0");
  CHECK_OK(tpu_core(13, buf, sizeof(buf), &len));
  assert_string_equal(buf, "device:TPU_REPLICATED_CORE:13");
  CHECK_ERROR(tpu_core(-1, buf, sizeof(buf), &len), TPU_OUT_OF_RANGE, "-1");
  CHECK_ERROR(tpu_core(1, buf, sizeof(buf), NULL), TPU_INVALID_ARGUMENT, "\'count\'");
  tpu_topology_release(t);
}

static void test_topology__missing_devices(void **state) {
  (void)state;
  tpu_topology *t = v38_missing();
  int n = -1, v;
  int32_t c[4];
  CHECK_OK(tpu_topology_num_missing_devices(t, &n));
  assert_int_equal(n, 2);
  const int32_t want0[4] = {1, 1, 0, 0}, want1[4] = {1, 1, 0, 1};
  CHECK_OK(tpu_topology_missing_device(t, 0, c, TPU_MESH_RANK, &(size_t){0}));
  assert_memory_equal(c, want0, sizeof(c));
  CHECK_OK(tpu_topology_missing_device(t, 1, c, TPU_MESH_RANK, &(size_t){0}));
  assert_memory_equal(c, want1, sizeof(c));
  CHECK_ERROR(tpu_topology_missing_device(t, 2, c, TPU_MESH_RANK, &(size_t){0}), TPU_OUT_OF_RANGE, "2");
  CHECK_ERROR(tpu_topology_missing_device(t, -1, c, TPU_MESH_RANK, &(size_t){0}), TPU_OUT_OF_RANGE, "-1");
  CHECK_ERROR(tpu_topology_task_ordinal_at_coordinates(t, want0, TPU_MESH_RANK, &v), TPU_NOT_FOUND, "(1, 1, 0, 0)");
  CHECK_ERROR(tpu_topology_device_ordinal_at_coordinates(t, want1, TPU_MESH_RANK, &v), TPU_NOT_FOUND,
             "(1, 1, 0, 1)");
  char buf[64];
  size_t len;
  CHECK_ERROR(tpu_topology_tpu_device_name(t, want0, TPU_MESH_RANK, NULL, buf, sizeof(buf), &len), TPU_NOT_FOUND,
             "(1, 1, 0, 0)");
  CHECK_ERROR(tpu_topology_cpu_device_name(t, want0, TPU_MESH_RANK, NULL, buf, sizeof(buf), &len), TPU_NOT_FOUND,
             "(1, 1, 0, 0)");
  tpu_topology_release(t);

  /* Row-major order, x slowest: only (1,0) of a 2x2 mesh is present. */
  const int32_t mesh[4] = {2, 2, 1, 1}, one[4] = {1, 0, 0, 0};
  CHECK_OK(tpu_topology_create(mesh, 4, one, 1, 1, &t));
  CHECK_OK(tpu_topology_num_missing_devices(t, &n));
  assert_int_equal(n, 3);
  const int32_t order[3][4] = {{0, 0, 0, 0}, {0, 1, 0, 0}, {1, 1, 0, 0}};
  for (int i = 0; i < 3; ++i) {
    CHECK_OK(tpu_topology_missing_device(t, i, c, TPU_MESH_RANK, &(size_t){0}));
    assert_memory_equal(c, order[i], sizeof(c));
  }
  tpu_topology_release(t);

  /* Zero tasks: every position is missing. */
  const int32_t mesh1[4] = {1, 1, 1, 1};
  pbuf p = proto(mesh1, 4, 0, 0, NULL, 0);
  CHECK_OK(parse(&p, &t));
  CHECK_OK(tpu_topology_num_tasks(t, &v));
  assert_int_equal(v, 0);
  CHECK_OK(tpu_topology_num_missing_devices(t, &n));
  assert_int_equal(n, 1);
  tpu_topology_release(t);
}

static void test_topology__create_errors(void **state) {
  (void)state;
  tpu_topology *t = NULL;
  const int32_t mesh0[4] = {1, 0, 1, 1}, mesh1[4] = {1, 1, 1, 1};
  const int32_t neg[4] = {0, 0, -1, 0}, out[4] = {2, 0, 0, 0};
  const int32_t dup[8] = {0, 0, 0, 1, 0, 0, 0, 1};
  CHECK_ERROR(tpu_topology_create(kMesh38, 3, kCoords38, 1, 8, &t), TPU_INVALID_ARGUMENT,
             "mesh_rank is 3");
  CHECK_ERROR(tpu_topology_create(kMesh38, 5, kCoords38, 1, 8, &t), TPU_INVALID_ARGUMENT,
             "mesh_rank is 5");
  CHECK_ERROR(tpu_topology_create(mesh0, 4, NULL, 0, 0, &t), TPU_INVALID_ARGUMENT, "[1 0 1 1]");
  CHECK_ERROR(tpu_topology_create(mesh1, 4, NULL, -1, 1, &t), TPU_INVALID_ARGUMENT,
             "num_tasks must be >= 0; got -1");
  CHECK_ERROR(tpu_topology_create(mesh1, 4, NULL, 1, -3, &t), TPU_INVALID_ARGUMENT, "got -3");
  CHECK_ERROR(tpu_topology_create(mesh1, 4, neg, 1, 1, &t), TPU_INVALID_ARGUMENT, "(0, 0, -1, 0)");
  CHECK_ERROR(tpu_topology_create(kMesh38, 4, out, 1, 1, &t), TPU_INVALID_ARGUMENT, "(2, 0, 0, 0)");
  CHECK_ERROR(tpu_topology_create(kMesh38, 4, out, 1, 1, &t), TPU_INVALID_ARGUMENT,
             "outside of mesh shape [2 2 1 2]");
  CHECK_ERROR(tpu_topology_create(kMesh38, 4, dup, 1, 2, &t), TPU_INVALID_ARGUMENT,
             "duplicate device coordinate (0, 0, 0, 1)");
  CHECK_ERROR(tpu_topology_create(kMesh38, 4, dup, 2, 1, &t), TPU_INVALID_ARGUMENT,
             "task 1 device 0");
  /* More devices than mesh positions: some coordinate repeats or falls outside. */
  CHECK_ERROR(tpu_topology_create(mesh1, 4, dup, 2, 1, &t), TPU_INVALID_ARGUMENT, "outside");
  /* Counts that would overflow or allocate without bound. */
  CHECK_ERROR(tpu_topology_create(mesh1, 4, kCoords38, 65536, 65536, &t), TPU_INVALID_ARGUMENT,
             "4294967296");
  CHECK_ERROR(tpu_topology_create(mesh1, 4, kCoords38, 2147483647, 2147483647, &t),
             TPU_INVALID_ARGUMENT, "devices");
  const int32_t huge[4] = {2048, 2048, 1, 1},
                huge2[4] = {2147483647, 2147483647, 2147483647, 2147483647};
  CHECK_ERROR(tpu_topology_create(huge, 4, NULL, 0, 0, &t), TPU_INVALID_ARGUMENT, "positions");
  CHECK_ERROR(tpu_topology_create(huge2, 4, NULL, 0, 0, &t), TPU_INVALID_ARGUMENT, "positions");
  assert_null(t);

  CHECK_ERROR(tpu_topology_create(NULL, 4, kCoords38, 1, 8, &t), TPU_INVALID_ARGUMENT,
             "'mesh_shape'");
  CHECK_ERROR(tpu_topology_create(kMesh38, 4, NULL, 1, 8, &t), TPU_INVALID_ARGUMENT,
             "'device_coordinates'");
  CHECK_ERROR(tpu_topology_create(kMesh38, 4, kCoords38, 1, 8, NULL), TPU_INVALID_ARGUMENT, "'out'");
  assert_null(t);
}

static void test_topology__parse(void **state) {
  (void)state;
  tpu_topology *t = NULL;
  unsigned char buf[512];
  size_t len;
  int v;

  /* Packed and unpacked repeated fields both parse; bytes come back verbatim. */
  pbuf packed = proto(kMesh38, 4, 1, 8, kCoords38, 32);
  pbuf unpacked = {{0}, 0};
  put_unpacked(&unpacked, 1, kMesh38, 4);
  put_int(&unpacked, 2, 1);
  put_int(&unpacked, 3, 8);
  put_unpacked(&unpacked, 4, kCoords38, 32);
  put_int(&unpacked, 15, 7); /* an unknown field is ignored */
  const pbuf *forms[2] = {&packed, &unpacked};
  for (int i = 0; i < 2; ++i) {
    CHECK_OK(parse(forms[i], &t));
    CHECK_OK(tpu_topology_num_devices_per_task(t, &v));
    assert_int_equal(v, 8);
    CHECK_OK(tpu_topology_serialize(t, buf, sizeof(buf), &len));
    assert_int_equal(len, forms[i]->n);
    assert_memory_equal(buf, forms[i]->b, len);
    tpu_topology_release(t);
    t = NULL;
  }

  /* A created topology serializes exactly like the packed hand-made bytes. */
  t = v38();
  CHECK_OK(tpu_topology_serialize(t, buf, sizeof(buf), &len));
  assert_int_equal(len, packed.n);
  assert_memory_equal(buf, packed.b, len);
  tpu_topology_release(t);

  /* Field 5: TPUHardwareFeature{V2, 4}. */
  pbuf hw = packed;
  static const unsigned char field5[] = {0x2a, 0x04, 0x08, 0x02, 0x10, 0x04};
  memcpy(hw.b + hw.n, field5, sizeof(field5));
  hw.n += sizeof(field5);
  CHECK_OK(parse(&hw, &t));
  int feature = -1, per_chip = -1;
  CHECK_OK(tpu_topology_hardware_feature(t, &feature, &per_chip));
  assert_int_equal(feature, 2);
  assert_int_equal(per_chip, 4);
  CHECK_OK(tpu_topology_serialize(t, buf, sizeof(buf), &len));
  assert_int_equal(len, hw.n);
  assert_memory_equal(buf, hw.b, len);
  CHECK_ERROR(tpu_topology_hardware_feature(t, NULL, &per_chip), TPU_INVALID_ARGUMENT,
             "embedding_feature");
  tpu_topology_release(t);
  t = NULL;

  /* An embedding_feature outside the enum (3280408092 is -1014559204 as the int32 it
   * decodes to): rejected, naming the field, not loaded as the enum type (undefined
   * behaviour: clang's -fsanitize=undefined reports it). */
  const int64_t bad_features[] = {3280408092ll, 3, -1, INT32_MAX, INT32_MIN};
  for (size_t i = 0; i < sizeof bad_features / sizeof bad_features[0]; ++i) {
    pbuf feature = {{0}, 0}, bad = packed;
    put_int(&feature, 1, bad_features[i]);
    put_int(&feature, 2, 4);
    put_message(&bad, 5, &feature);
    char want[160];
    snprintf(want, sizeof want,
             "TopologyProto tpu_hardware_feature.embedding_feature %d is not UNSUPPORTED (0), V1 (1) "
             "or V2 (2)", (int32_t)(uint32_t)bad_features[i]);
    t = NULL;
    CHECK_ERROR(parse(&bad, &t), TPU_INVALID_ARGUMENT, want);
    assert_null(t);
  }

  /* Errors, each with its reason. */
  static const unsigned char garbage[] = {0xff, 0xff, 0xff, 0xff};
  CHECK_ERROR(tpu_topology_parse(garbage, sizeof(garbage), &t), TPU_INVALID_ARGUMENT,
             "not a serialized");
  CHECK_ERROR(tpu_topology_parse(packed.b, packed.n - 1, &t), TPU_INVALID_ARGUMENT,
             "not a serialized");
  CHECK_ERROR(tpu_topology_parse(NULL, 0, &t), TPU_INVALID_ARGUMENT, "mesh_shape");
  CHECK_ERROR(tpu_topology_parse(packed.b, 0, &t), TPU_INVALID_ARGUMENT, "got []");
  CHECK_ERROR(tpu_topology_parse(NULL, 3, &t), TPU_INVALID_ARGUMENT, "'bytes'");
  CHECK_ERROR(tpu_topology_parse(packed.b, packed.n, NULL), TPU_INVALID_ARGUMENT, "'out'");

  const int32_t rank3[3] = {2, 2, 2}, mesh1[4] = {1, 1, 1, 1}, zero[8] = {0};
  const int32_t neg[4] = {0, 0, -1, 0}, out[4] = {0, 1, 0, 0};
  pbuf p = proto(rank3, 3, 1, 1, zero, 3);
  CHECK_ERROR(parse(&p, &t), TPU_INVALID_ARGUMENT, "[2 2 2]");
  p = proto(mesh1, 4, -1, 1, NULL, 0);
  CHECK_ERROR(parse(&p, &t), TPU_INVALID_ARGUMENT, "num_tasks must be >= 0; got -1");
  p = proto(mesh1, 4, 1, -1, NULL, 0);
  CHECK_ERROR(parse(&p, &t), TPU_INVALID_ARGUMENT, "num_tpu_devices_per_task must be >= 0; got -1");
  p = proto(mesh1, 4, 1, 2, zero, 4);
  CHECK_ERROR(parse(&p, &t), TPU_INVALID_ARGUMENT, "got 4");
  p = proto(mesh1, 4, 1, 1, neg, 4);
  CHECK_ERROR(parse(&p, &t), TPU_INVALID_ARGUMENT, "(0, 0, -1, 0)");
  p = proto(mesh1, 4, 1, 1, out, 4);
  CHECK_ERROR(parse(&p, &t), TPU_INVALID_ARGUMENT, "outside of mesh shape");
  p = proto(kMesh38, 4, 1, 2, zero, 8);
  CHECK_ERROR(parse(&p, &t), TPU_INVALID_ARGUMENT, "duplicate device coordinate (0, 0, 0, 0)");
  /* Lengths that would overflow num_tasks * devices * 4, or a huge mesh. */
  p = proto(mesh1, 4, 2147483647, 2147483647, zero, 4);
  CHECK_ERROR(parse(&p, &t), TPU_INVALID_ARGUMENT, "devices");
  p = proto(mesh1, 4, 1073741824, 4, zero, 4);
  CHECK_ERROR(parse(&p, &t), TPU_INVALID_ARGUMENT, "devices");
  const int32_t huge[4] = {2147483647, 2147483647, 2147483647, 2147483647};
  p = proto(huge, 4, 0, 0, NULL, 0);
  CHECK_ERROR(parse(&p, &t), TPU_INVALID_ARGUMENT, "positions");
  /* A length prefix far beyond the buffer. */
  static const unsigned char long_len[] = {0x22, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x00};
  CHECK_ERROR(tpu_topology_parse(long_len, sizeof(long_len), &t), TPU_INVALID_ARGUMENT,
             "not a serialized");
  assert_null(t);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 32);
}

/* Parsing must give OK or INVALID_ARGUMENT; an accepted topology is self-consistent and
 * round-trips. */
static void parse_hostile(const unsigned char *b, size_t n) {
  tpu_topology *t = NULL;
  tpu_status s = tpu_topology_parse(b, n, &t);
  if (s != TPU_OK) {
    if (s != TPU_INVALID_ARGUMENT || tpu_last_error()[0] == '\0') {
      print_error("parse of %zu bytes gave %s \"%s\"\n", n, tpu_status_name(s), tpu_last_error());
      fail();
    }
    assert_null(t);
    return;
  }
  int32_t mesh[4], c[4];
  int tasks, per_task, missing, v;
  CHECK_OK(tpu_topology_mesh_shape(t, mesh, TPU_MESH_RANK, &(size_t){0}));
  CHECK_OK(tpu_topology_num_tasks(t, &tasks));
  CHECK_OK(tpu_topology_num_devices_per_task(t, &per_task));
  CHECK_OK(tpu_topology_num_missing_devices(t, &missing));
  assert_int_equal((int64_t)tasks * per_task + missing,
                   (int64_t)mesh[0] * mesh[1] * mesh[2] * mesh[3]);
  for (int i = 0; i < tasks * per_task && i < 64; ++i) {
    CHECK_OK(tpu_topology_device_coordinates(t, i / per_task, i % per_task, c, TPU_MESH_RANK, &(size_t){0}));
    CHECK_OK(tpu_topology_task_ordinal_at_coordinates(t, c, TPU_MESH_RANK, &v));
    assert_int_equal(v, i / per_task);
  }
  unsigned char again[1024];
  size_t len = 0;
  CHECK_OK(tpu_topology_serialize(t, again, sizeof(again), &len));
  assert_int_equal(len, n);
  assert_memory_equal(again, b, n);
  tpu_topology_release(t);
}

static void test_topology__parse_fuzz(void **state) {
  (void)state;
  pbuf valid = proto(kMesh38, 4, 1, 8, kCoords38, 32);
  /* Every truncation. */
  for (size_t n = 0; n <= valid.n; ++n) parse_hostile(valid.b, n);
  /* 10000 random mutations of a valid proto. */
  unsigned char b[600];
  for (int iter = 0; iter < 10000; ++iter) {
    size_t n = valid.n;
    memcpy(b, valid.b, n);
    int edits = 1 + (int)(rng() % 4);
    for (int e = 0; e < edits && n > 0; ++e) {
      size_t at = rng() % n;
      switch (rng() % 5) {
        case 0:
          b[at] ^= (unsigned char)(1u << (rng() % 8));
          break;
        case 1:
          b[at] = (unsigned char)rng();
          break;
        case 2:
          n = at;
          break; /* truncate */
        case 3:  /* insert a random byte */
          if (n < sizeof(b) - 1) {
            memmove(b + at + 1, b + at, n - at);
            b[at] = (unsigned char)rng();
            ++n;
          }
          break;
        default: /* duplicate a slice */
          if (n + (n - at) < sizeof(b)) {
            memcpy(b + n, b + at, n - at);
            n += n - at;
          }
          break;
      }
    }
    parse_hostile(b, n);
  }
  /* Random garbage. */
  for (int iter = 0; iter < 2000; ++iter) {
    size_t n = rng() % 64;
    for (size_t i = 0; i < n; ++i) b[i] = (unsigned char)rng();
    parse_hostile(b, n);
  }
}

static void test_topology__null_handles(void **state) {
  (void)state;
  int v;
  int32_t c[4] = {0, 0, 0, 0};
  char buf[32];
  size_t len;
  CHECK_OK(tpu_topology_release(NULL));
  CHECK_OK(tpu_device_assignment_release(NULL));
  CHECK_ERROR(tpu_topology_mesh_shape(NULL, c, TPU_MESH_RANK, &(size_t){0}), TPU_INVALID_ARGUMENT, "'topology'");
  CHECK_ERROR(tpu_topology_mesh_rank(NULL, &v), TPU_INVALID_ARGUMENT, "'topology'");
  CHECK_ERROR(tpu_topology_num_tasks(NULL, &v), TPU_INVALID_ARGUMENT, "'topology'");
  CHECK_ERROR(tpu_topology_num_devices_per_task(NULL, &v), TPU_INVALID_ARGUMENT, "'topology'");
  CHECK_ERROR(tpu_topology_device_coordinates(NULL, 0, 0, c, TPU_MESH_RANK, &(size_t){0}), TPU_INVALID_ARGUMENT, "'topology'");
  CHECK_ERROR(tpu_topology_task_ordinal_at_coordinates(NULL, c, TPU_MESH_RANK, &v), TPU_INVALID_ARGUMENT,
             "'topology'");
  CHECK_ERROR(tpu_topology_device_ordinal_at_coordinates(NULL, c, TPU_MESH_RANK, &v), TPU_INVALID_ARGUMENT,
             "'topology'");
  CHECK_ERROR(tpu_topology_num_missing_devices(NULL, &v), TPU_INVALID_ARGUMENT, "'topology'");
  CHECK_ERROR(tpu_topology_missing_device(NULL, 0, c, TPU_MESH_RANK, &(size_t){0}), TPU_INVALID_ARGUMENT, "'topology'");
  CHECK_ERROR(tpu_topology_tpu_device_name(NULL, c, TPU_MESH_RANK, NULL, buf, sizeof(buf), &len),
             TPU_INVALID_ARGUMENT, "'topology'");
  CHECK_ERROR(tpu_topology_cpu_device_name(NULL, c, TPU_MESH_RANK, NULL, buf, sizeof(buf), &len),
             TPU_INVALID_ARGUMENT, "'topology'");
  CHECK_ERROR(tpu_topology_hardware_feature(NULL, &v, &v), TPU_INVALID_ARGUMENT, "'topology'");
  CHECK_ERROR(tpu_topology_serialize(NULL, buf, sizeof(buf), &len), TPU_INVALID_ARGUMENT,
             "'topology'");

  tpu_topology *t = v38();
  CHECK_ERROR(tpu_topology_mesh_shape(t, NULL, TPU_MESH_RANK, &(size_t){0}), TPU_INVALID_ARGUMENT, "'out'");
  CHECK_ERROR(tpu_topology_mesh_rank(t, NULL), TPU_INVALID_ARGUMENT, "'out'");
  CHECK_ERROR(tpu_topology_num_tasks(t, NULL), TPU_INVALID_ARGUMENT, "'out'");
  CHECK_ERROR(tpu_topology_num_devices_per_task(t, NULL), TPU_INVALID_ARGUMENT, "'out'");
  CHECK_ERROR(tpu_topology_device_coordinates(t, 0, 0, NULL, TPU_MESH_RANK, &(size_t){0}), TPU_INVALID_ARGUMENT, "'out'");
  CHECK_ERROR(tpu_topology_task_ordinal_at_coordinates(t, NULL, TPU_MESH_RANK, &v), TPU_INVALID_ARGUMENT,
             "'coords'");
  CHECK_ERROR(tpu_topology_task_ordinal_at_coordinates(t, c, TPU_MESH_RANK, NULL), TPU_INVALID_ARGUMENT, "'out'");
  CHECK_ERROR(tpu_topology_device_ordinal_at_coordinates(t, NULL, TPU_MESH_RANK, &v), TPU_INVALID_ARGUMENT,
             "'coords'");
  CHECK_ERROR(tpu_topology_num_missing_devices(t, NULL), TPU_INVALID_ARGUMENT, "'out'");
  CHECK_ERROR(tpu_topology_tpu_device_name(t, NULL, TPU_MESH_RANK, NULL, buf, sizeof(buf), &len),
             TPU_INVALID_ARGUMENT, "'coords'");
  CHECK_ERROR(tpu_topology_cpu_device_name(t, c, TPU_MESH_RANK, NULL, buf, sizeof(buf), NULL), TPU_INVALID_ARGUMENT,
             "\'count\'");
  CHECK_ERROR(tpu_topology_hardware_feature(t, &v, NULL), TPU_INVALID_ARGUMENT,
             "num_embedding_devices_per_chip");

  tpu_device_assignment *da = NULL;
  CHECK_OK(tpu_device_assignment_build(t, NULL, 0, NULL, 0, 2, TPU_DEVICE_ORDER_AUTO, &da));
  tpu_topology *tt = NULL;
  CHECK_ERROR(tpu_device_assignment_build(NULL, NULL, 0, NULL, 0, 1, TPU_DEVICE_ORDER_AUTO, &da),
             TPU_INVALID_ARGUMENT, "'topology'");
  CHECK_ERROR(tpu_device_assignment_build(t, NULL, 0, NULL, 0, 1, TPU_DEVICE_ORDER_AUTO, NULL),
             TPU_INVALID_ARGUMENT, "'out'");
  CHECK_ERROR(tpu_device_assignment_create(NULL, c, 1, 1, &da), TPU_INVALID_ARGUMENT, "'topology'");
  CHECK_ERROR(tpu_device_assignment_create(t, c, 1, 1, NULL), TPU_INVALID_ARGUMENT, "'out'");
  CHECK_ERROR(tpu_device_assignment_topology(NULL, &tt), TPU_INVALID_ARGUMENT, "'assignment'");
  CHECK_ERROR(tpu_device_assignment_topology(da, NULL), TPU_INVALID_ARGUMENT, "'out'");
  CHECK_ERROR(tpu_device_assignment_num_replicas(NULL, &v), TPU_INVALID_ARGUMENT, "'assignment'");
  CHECK_ERROR(tpu_device_assignment_num_replicas(da, NULL), TPU_INVALID_ARGUMENT, "'out'");
  CHECK_ERROR(tpu_device_assignment_num_cores_per_replica(NULL, &v), TPU_INVALID_ARGUMENT,
             "'assignment'");
  CHECK_ERROR(tpu_device_assignment_num_cores_per_replica(da, NULL), TPU_INVALID_ARGUMENT, "'out'");
  CHECK_ERROR(tpu_device_assignment_core_assignment(NULL, c, 4, &(size_t){0}), TPU_INVALID_ARGUMENT,
             "'assignment'");
  CHECK_ERROR(tpu_device_assignment_core_assignment(da, NULL, 8, &(size_t){0}), TPU_INVALID_ARGUMENT, "'out'");
  CHECK_ERROR(tpu_device_assignment_coordinates(NULL, 0, 0, c, TPU_MESH_RANK, &(size_t){0}), TPU_INVALID_ARGUMENT,
             "'assignment'");
  CHECK_ERROR(tpu_device_assignment_coordinates(da, 0, 0, NULL, TPU_MESH_RANK, &(size_t){0}), TPU_INVALID_ARGUMENT, "'out'");
  CHECK_ERROR(tpu_device_assignment_task(NULL, 0, 0, &v), TPU_INVALID_ARGUMENT, "'assignment'");
  CHECK_ERROR(tpu_device_assignment_task(da, 0, 0, NULL), TPU_INVALID_ARGUMENT, "'out'");
  CHECK_ERROR(tpu_device_assignment_tpu_ordinal(NULL, 0, 0, &v), TPU_INVALID_ARGUMENT,
             "'assignment'");
  CHECK_ERROR(tpu_device_assignment_tpu_ordinal(da, 0, 0, NULL), TPU_INVALID_ARGUMENT, "'out'");
  CHECK_ERROR(tpu_device_assignment_tpu_device(NULL, 0, 0, NULL, buf, sizeof(buf), &len),
             TPU_INVALID_ARGUMENT, "'assignment'");
  CHECK_ERROR(tpu_device_assignment_tpu_device(da, 0, 0, NULL, buf, sizeof(buf), NULL),
             TPU_INVALID_ARGUMENT, "\'count\'");
  CHECK_ERROR(tpu_device_assignment_host_device(NULL, 0, 0, NULL, buf, sizeof(buf), &len),
             TPU_INVALID_ARGUMENT, "'assignment'");
  CHECK_ERROR(tpu_device_assignment_host_device(da, 0, 0, NULL, NULL, 8, &len), TPU_INVALID_ARGUMENT,
             "\'out\'");
  int out[4];
  size_t n = 0;
  CHECK_ERROR(tpu_device_assignment_lookup_replicas(NULL, 0, 0, out, 4, &n), TPU_INVALID_ARGUMENT,
             "'assignment'");
  CHECK_ERROR(tpu_device_assignment_lookup_replicas(da, 0, 0, out, 4, NULL), TPU_INVALID_ARGUMENT,
             "'count'");
  CHECK_ERROR(tpu_device_assignment_lookup_replicas(da, 0, 0, NULL, 4, &n), TPU_INVALID_ARGUMENT,
             "'out'");
  tpu_device_assignment_release(da);
  tpu_topology_release(t);
}

/* ---- device assignment --------------------------------------------------------- */

static void test_topology__assignment_accessors(void **state) {
  (void)state;
  tpu_topology *t = v38();
  tpu_device_assignment *da = NULL;
  const int32_t cs[4] = {1, 1, 1, 2};
  CHECK_OK(tpu_device_assignment_build(t, cs, 4, NULL, 0, 4, TPU_DEVICE_ORDER_MESH, &da));
  tpu_topology_release(t); /* the assignment keeps its topology alive */
  int v;
  CHECK_OK(tpu_device_assignment_num_replicas(da, &v));
  assert_int_equal(v, 4);
  CHECK_OK(tpu_device_assignment_num_cores_per_replica(da, &v));
  assert_int_equal(v, 2);
  /* MESH order: chips (0,0) (1,0) (0,1) (1,1), both cores each (spec §3.3). */
  const int32_t chips[4][2] = {{0, 0}, {1, 0}, {0, 1}, {1, 1}};
  int32_t all[32], c[4];
  CHECK_OK(tpu_device_assignment_core_assignment(da, all, 32, &(size_t){0}));
  for (int r = 0; r < 4; ++r)
    for (int k = 0; k < 2; ++k) {
      const int32_t want[4] = {chips[r][0], chips[r][1], 0, k};
      CHECK_OK(tpu_device_assignment_coordinates(da, r, k, c, TPU_MESH_RANK, &(size_t){0}));
      assert_memory_equal(c, want, sizeof(c));
      assert_memory_equal(&all[(r * 2 + k) * 4], want, sizeof(c));
      CHECK_OK(tpu_device_assignment_tpu_ordinal(da, r, k, &v));
      assert_int_equal(v, (chips[r][1] * 2 + chips[r][0]) * 2 + k);
      CHECK_OK(tpu_device_assignment_task(da, r, k, &v));
      assert_int_equal(v, 0);
    }
  CHECK_ERROR(tpu_device_assignment_core_assignment(da, all, 31, &(size_t){0}), TPU_OUT_OF_RANGE, "31");
  CHECK_ERROR(tpu_device_assignment_coordinates(da, 4, 0, c, TPU_MESH_RANK, &(size_t){0}), TPU_OUT_OF_RANGE, "replica 4");
  CHECK_ERROR(tpu_device_assignment_coordinates(da, -1, 0, c, TPU_MESH_RANK, &(size_t){0}), TPU_OUT_OF_RANGE, "replica -1");
  CHECK_ERROR(tpu_device_assignment_task(da, 0, 2, &v), TPU_OUT_OF_RANGE, "logical_core 2");
  CHECK_ERROR(tpu_device_assignment_tpu_ordinal(da, 0, -1, &v), TPU_OUT_OF_RANGE, "logical_core -1");
  char buf[64];
  size_t len;
  CHECK_ERROR(tpu_device_assignment_tpu_device(da, 9, 0, NULL, buf, sizeof(buf), &len),
             TPU_OUT_OF_RANGE, "replica 9");
  CHECK_OK(tpu_device_assignment_tpu_device(da, 3, 1, "worker", buf, sizeof(buf), &len));
  assert_string_equal(buf, "/job:worker/task:0/device:TPU:7");
  CHECK_ERROR(tpu_device_assignment_tpu_device(da, 3, 1, "worker", buf, len, &len), TPU_OUT_OF_RANGE,
             "too small");
  CHECK_OK(tpu_device_assignment_host_device(da, 3, 1, "worker", buf, sizeof(buf), &len));
  assert_string_equal(buf, "/job:worker/task:0/device:CPU:0");

  tpu_topology *back = NULL;
  CHECK_OK(tpu_device_assignment_topology(da, &back));
  CHECK_OK(tpu_topology_num_devices_per_task(back, &v));
  assert_int_equal(v, 8);
  tpu_topology_release(back);

  /* lookup_replicas: query, copy, too small. */
  int out[8];
  size_t count = 0;
  CHECK_OK(tpu_device_assignment_lookup_replicas(da, 0, 1, NULL, 0, &count));
  assert_int_equal(count, 4);
  CHECK_OK(tpu_device_assignment_lookup_replicas(da, 0, 1, out, 8, &count));
  for (int i = 0; i < 4; ++i) assert_int_equal(out[i], i);
  count = 0;
  CHECK_ERROR(tpu_device_assignment_lookup_replicas(da, 0, 1, out, 3, &count), TPU_OUT_OF_RANGE,
             "capacity 3");
  assert_int_equal(count, 4);
  /* A task or logical core beyond the assignment is not found, as in TensorFlow. */
  CHECK_ERROR(tpu_device_assignment_lookup_replicas(da, 1, 0, out, 8, &count), TPU_NOT_FOUND,
             "Can not find any replica in task: 1 contains logical_core: 0");
  CHECK_ERROR(tpu_device_assignment_lookup_replicas(da, 0, 2, out, 8, &count), TPU_NOT_FOUND,
             "Can not find any replica in task: 0 contains logical_core: 2");
  CHECK_ERROR(tpu_device_assignment_lookup_replicas(da, -1, -1, out, 8, &count), TPU_NOT_FOUND,
             "task: -1 contains logical_core: -1");
  tpu_device_assignment_release(da);
}

static void test_topology__lookup_not_found(void **state) {
  (void)state;
  /* Two tasks; 2 replicas all live in task 0, none in task 1. */
  const int32_t mesh[4] = {2, 2, 1, 1};
  const int32_t coords[16] = {0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0};
  tpu_topology *t = NULL;
  CHECK_OK(tpu_topology_create(mesh, 4, coords, 2, 2, &t));
  tpu_device_assignment *da = NULL;
  CHECK_OK(tpu_device_assignment_build(t, NULL, 0, NULL, 0, 2, TPU_DEVICE_ORDER_AUTO, &da));
  int out[4];
  size_t count = 0;
  CHECK_OK(tpu_device_assignment_lookup_replicas(da, 0, 0, out, 4, &count));
  assert_int_equal(count, 2);
  CHECK_ERROR(tpu_device_assignment_lookup_replicas(da, 1, 0, out, 4, &count), TPU_NOT_FOUND,
             "Can not find any replica in task: 1 contains logical_core: 0");
  tpu_device_assignment_release(da);

  /* Zero replicas: an empty assignment; every lookup is NOT_FOUND. */
  CHECK_OK(tpu_device_assignment_build(t, NULL, 0, NULL, 0, 0, TPU_DEVICE_ORDER_AUTO, &da));
  int v = -1;
  CHECK_OK(tpu_device_assignment_num_replicas(da, &v));
  assert_int_equal(v, 0);
  CHECK_OK(tpu_device_assignment_core_assignment(da, NULL, 0, &(size_t){0}));
  CHECK_ERROR(tpu_device_assignment_lookup_replicas(da, 0, 0, out, 4, &count), TPU_NOT_FOUND,
             "task: 0");
  tpu_device_assignment_release(da);
  tpu_topology_release(t);
}

static void test_topology__build_errors(void **state) {
  (void)state;
  tpu_topology *t = v38();
  tpu_device_assignment *da = NULL;
  const int32_t ones[4] = {1, 1, 1, 1}, zero_core[4] = {1, 1, 1, 0}, big[4] = {4, 1, 1, 1};
  const int32_t stride2[4] = {2, 1, 1, 1}, cs_chip[4] = {1, 1, 1, 2};
  CHECK_ERROR(tpu_device_assignment_build(t, ones, 3, NULL, 0, 1, TPU_DEVICE_ORDER_AUTO, &da),
             TPU_INVALID_ARGUMENT, "computation_shape must have shape [4]; got (3,)");
  CHECK_ERROR(tpu_device_assignment_build(t, NULL, 0, ones, 5, 1, TPU_DEVICE_ORDER_AUTO, &da),
             TPU_INVALID_ARGUMENT, "computation_stride must have shape [4]; got (5,)");
  /* Shape checks come before positivity checks. */
  CHECK_ERROR(tpu_device_assignment_build(t, zero_core, 4, ones, 3, 1, TPU_DEVICE_ORDER_AUTO, &da),
             TPU_INVALID_ARGUMENT, "computation_stride must have shape");
  CHECK_ERROR(tpu_device_assignment_build(t, zero_core, 4, NULL, 0, 1, TPU_DEVICE_ORDER_AUTO, &da),
             TPU_INVALID_ARGUMENT,
             "computation_shape must be positive; got computation_shape=[1 1 1 0]");
  CHECK_ERROR(tpu_device_assignment_build(t, NULL, 0, zero_core, 4, 1, TPU_DEVICE_ORDER_AUTO, &da),
             TPU_INVALID_ARGUMENT, "computation_stride must be positive");
  CHECK_ERROR(tpu_device_assignment_build(t, big, 4, NULL, 0, 1, TPU_DEVICE_ORDER_AUTO, &da),
             TPU_INVALID_ARGUMENT,
             "computation footprint [4 1 1 1] does not fit in TPU topology shape [2 2 1 2]");
  CHECK_ERROR(tpu_device_assignment_build(t, NULL, 0, NULL, 0, 9, TPU_DEVICE_ORDER_AUTO, &da),
             TPU_INVALID_ARGUMENT, "requested 9 replicas but only 8 replicas");
  CHECK_ERROR(tpu_device_assignment_build(t, NULL, 0, stride2, 4, 9, TPU_DEVICE_ORDER_AUTO, &da),
             TPU_INVALID_ARGUMENT,
             "and computation_stride [2 1 1 1] fit in a TPU mesh of shape [2 2 1 2]");
  CHECK_ERROR(tpu_device_assignment_build(t, NULL, 0, NULL, 0, -1, TPU_DEVICE_ORDER_AUTO, &da),
             TPU_INVALID_ARGUMENT, "num_replicas must be >= 0; got -1");
  CHECK_ERROR(tpu_device_assignment_build(t, NULL, 0, NULL, 0, 1, (tpu_device_order_mode)7, &da),
             TPU_INVALID_ARGUMENT, "device_order_mode 7");
  /* RING needs full replication of whole-chip replicas. */
  CHECK_ERROR(tpu_device_assignment_build(t, NULL, 0, NULL, 0, 8, TPU_DEVICE_ORDER_RING, &da),
             TPU_INVALID_ARGUMENT, "not compatible");
  CHECK_ERROR(tpu_device_assignment_build(t, cs_chip, 4, NULL, 0, 2, TPU_DEVICE_ORDER_RING, &da),
             TPU_INVALID_ARGUMENT, "not compatible");
  assert_null(da);
  CHECK_OK(tpu_device_assignment_build(t, cs_chip, 4, NULL, 0, 4, TPU_DEVICE_ORDER_RING, &da));
  /* Ring order: chips (0,0) (1,0) (1,1) (0,1). */
  int32_t c[4];
  CHECK_OK(tpu_device_assignment_coordinates(da, 2, 1, c, TPU_MESH_RANK, &(size_t){0}));
  const int32_t want[4] = {1, 1, 0, 1};
  assert_memory_equal(c, want, sizeof(c));
  tpu_device_assignment_release(da);
  da = NULL;
  tpu_topology_release(t);

  /* Degraded path: real messages instead of TF's bare asserts. */
  t = v38_missing();
  CHECK_ERROR(tpu_device_assignment_build(t, NULL, 0, NULL, 0, 7, TPU_DEVICE_ORDER_AUTO, &da),
             TPU_INVALID_ARGUMENT, "only 6 devices");
  CHECK_ERROR(tpu_device_assignment_build(t, cs_chip, 4, NULL, 0, 4, TPU_DEVICE_ORDER_AUTO, &da),
             TPU_INVALID_ARGUMENT, "8 devices");
  CHECK_ERROR(tpu_device_assignment_build(t, NULL, 0, stride2, 4, 2, TPU_DEVICE_ORDER_AUTO, &da),
             TPU_INVALID_ARGUMENT, "missing devices");
  assert_null(da);
  /* ... and device_order_mode is ignored there (RING does not fail). */
  CHECK_OK(tpu_device_assignment_build(t, NULL, 0, NULL, 0, 6, TPU_DEVICE_ORDER_RING, &da));
  CHECK_OK(tpu_device_assignment_coordinates(da, 5, 0, c, TPU_MESH_RANK, &(size_t){0}));
  assert_memory_equal(c, &kCoords38[5 * 4], sizeof(c));
  tpu_device_assignment_release(da);
  tpu_topology_release(t);
}

static void test_topology__explicit_assignment(void **state) {
  (void)state;
  tpu_topology *t = v38_missing();
  tpu_device_assignment *da = NULL;
  /* 2 replicas x 2 cores, in an unusual order. */
  const int32_t ok[16] = {1, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0};
  CHECK_OK(tpu_device_assignment_create(t, ok, 2, 2, &da));
  int v;
  CHECK_OK(tpu_device_assignment_tpu_ordinal(da, 0, 0, &v));
  assert_int_equal(v, 3);
  CHECK_OK(tpu_device_assignment_tpu_ordinal(da, 1, 1, &v));
  assert_int_equal(v, 2);
  tpu_device_assignment_release(da);
  da = NULL;

  const int32_t unknown[8] = {0, 0, 0, 0, 1, 1, 0, 1}; /* (1,1,0,1) is missing */
  const int32_t outside[8] = {0, 0, 0, 0, 0, 0, 1, 0}; /* z = 1 */
  const int32_t dup[8] = {0, 1, 0, 0, 0, 1, 0, 0};
  CHECK_ERROR(tpu_device_assignment_create(t, unknown, 1, 2, &da), TPU_INVALID_ARGUMENT,
             "no TPU device found for core_assignment device coordinate (1, 1, 0, 1)");
  CHECK_ERROR(tpu_device_assignment_create(t, unknown, 2, 1, &da), TPU_INVALID_ARGUMENT,
             "replica 1 logical core 0");
  CHECK_ERROR(tpu_device_assignment_create(t, outside, 2, 1, &da), TPU_INVALID_ARGUMENT,
             "(0, 0, 1, 0)");
  CHECK_ERROR(tpu_device_assignment_create(t, outside, 2, 1, &da), TPU_INVALID_ARGUMENT,
             "outside of mesh shape");
  CHECK_ERROR(tpu_device_assignment_create(t, dup, 2, 1, &da), TPU_INVALID_ARGUMENT,
             "duplicate device coordinate (0, 1, 0, 0)");
  CHECK_ERROR(tpu_device_assignment_create(t, dup, 1, 2, &da), TPU_INVALID_ARGUMENT,
             "replica 0 logical core 1");
  CHECK_ERROR(tpu_device_assignment_create(t, ok, 2, 0, &da), TPU_INVALID_ARGUMENT,
             "num_cores_per_replica must be >= 1; got 0");
  CHECK_ERROR(tpu_device_assignment_create(t, ok, -2, 1, &da), TPU_INVALID_ARGUMENT,
             "num_replicas must be >= 0; got -2");
  CHECK_ERROR(tpu_device_assignment_create(t, ok, 7, 1, &da), TPU_INVALID_ARGUMENT, "only 6");
  CHECK_ERROR(tpu_device_assignment_create(t, ok, 2147483647, 2147483647, &da), TPU_INVALID_ARGUMENT,
             "only 6");
  CHECK_ERROR(tpu_device_assignment_create(t, NULL, 1, 1, &da), TPU_INVALID_ARGUMENT,
             "'core_assignment'");
  assert_null(da);
  CHECK_OK(tpu_device_assignment_create(t, NULL, 0, 1, &da));
  tpu_device_assignment_release(da);
  tpu_topology_release(t);
}

/* ---- contracts (topology.h's sentences) --------------------------------------- */

/* num_coords other than TPU_MESH_RANK is refused; assignment lookups outside it name
 * the index and the bound; device names without a job have no job part. */
static void test_topology__coordinate_and_name_rules(void **state) {
  (void)state;
  tpu_topology *t = v38();
  const int32_t c[4] = {1, 1, 0, 1};
  int v;
  char buf[64];
  size_t len;
  CHECK_ERROR(tpu_topology_task_ordinal_at_coordinates(t, c, 3, &v), TPU_INVALID_ARGUMENT,
              "num_coords is 3");
  CHECK_ERROR(tpu_topology_device_ordinal_at_coordinates(t, c, 5, &v), TPU_INVALID_ARGUMENT,
              "num_coords is 5");
  CHECK_ERROR(tpu_topology_tpu_device_name(t, c, 2, NULL, buf, sizeof buf, &len),
              TPU_INVALID_ARGUMENT, "num_coords is 2");
  tpu_device_assignment *da = NULL;
  const int32_t cs[4] = {1, 1, 1, 2};
  CHECK_OK(tpu_device_assignment_build(t, cs, 4, NULL, 0, 4, TPU_DEVICE_ORDER_MESH, &da));
  CHECK_ERROR(tpu_device_assignment_task(da, 4, 0, &v), TPU_OUT_OF_RANGE,
              "replica 4 is outside [0, 4)");
  CHECK_ERROR(tpu_device_assignment_tpu_ordinal(da, 0, 2, &v), TPU_OUT_OF_RANGE,
              "logical_core 2 is outside [0, 2)");
  CHECK_OK(tpu_device_assignment_tpu_device(da, 3, 1, NULL, buf, sizeof buf, &len));
  assert_string_equal(buf, "/task:0/device:TPU:7");
  CHECK_OK(tpu_device_assignment_host_device(da, 3, 1, NULL, buf, sizeof buf, &len));
  assert_string_equal(buf, "/task:0/device:CPU:0");
  tpu_device_assignment_release(da);
  tpu_topology_release(t);
}

typedef struct {
  const tpu_topology *t;
  const tpu_device_assignment *da;
  const unsigned char *bytes;
  size_t len;
  atomic_int *wrong;
} shared_handles;

/* Reads both handles many times; counts every answer that differs from the one
 * known before the threads started. */
static void *read_shared(void *arg) {
  const shared_handles *h = arg;
  for (int i = 0; i < 500; ++i) {
    int32_t c[4], m[4];
    int v = -1, bad = 0;
    unsigned char bytes[256];
    size_t n = 0;
    char name[64];
    bad |= tpu_topology_mesh_shape(h->t, m, 4, &n) != TPU_OK || memcmp(m, kMesh38, sizeof m);
    for (int d = 0; d < 8; ++d) {
      bad |= tpu_topology_device_coordinates(h->t, 0, d, c, 4, &n) != TPU_OK ||
             memcmp(c, &kCoords38[d * 4], sizeof c);
      bad |= tpu_topology_device_ordinal_at_coordinates(h->t, c, 4, &v) != TPU_OK || v != d;
    }
    bad |= tpu_topology_serialize(h->t, bytes, sizeof bytes, &n) != TPU_OK || n != h->len ||
           memcmp(bytes, h->bytes, n);
    bad |= tpu_device_assignment_tpu_device(h->da, 3, 1, "w", name, sizeof name, &n) != TPU_OK ||
           strcmp(name, "/job:w/task:0/device:TPU:7");
    bad |= tpu_device_assignment_tpu_ordinal(h->da, 1, 0, &v) != TPU_OK || v != 2;
    tpu_topology *back = NULL;
    bad |= tpu_device_assignment_topology(h->da, &back) != TPU_OK ||
           tpu_topology_num_devices_per_task(back, &v) != TPU_OK || v != 8;
    tpu_topology_release(back);
    if (bad) atomic_fetch_add(h->wrong, 1);
  }
  return NULL;
}

/* "immutable after creation and safe to share between threads": four threads query
 * one topology and one assignment at once and always get the same answers. */
static void test_topology__shared_between_threads(void **state) {
  (void)state;
  tpu_topology *t = v38();
  tpu_device_assignment *da = NULL;
  const int32_t cs[4] = {1, 1, 1, 2};
  CHECK_OK(tpu_device_assignment_build(t, cs, 4, NULL, 0, 4, TPU_DEVICE_ORDER_MESH, &da));
  unsigned char bytes[256];
  size_t len = 0;
  CHECK_OK(tpu_topology_serialize(t, bytes, sizeof bytes, &len));
  atomic_int wrong = 0;
  shared_handles h = {t, da, bytes, len, &wrong};
  pthread_t th[4];
  for (int i = 0; i < 4; ++i) assert_int_equal(pthread_create(&th[i], NULL, read_shared, &h), 0);
  for (int i = 0; i < 4; ++i) pthread_join(th[i], NULL);
  assert_int_equal(atomic_load(&wrong), 0);
  tpu_device_assignment_release(da);
  tpu_topology_release(t);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_topology__accessors),
      cmocka_unit_test(test_topology__local_layout_serializes_like_tf),
      cmocka_unit_test(test_topology__names),
      cmocka_unit_test(test_topology__missing_devices),
      cmocka_unit_test(test_topology__create_errors),
      cmocka_unit_test(test_topology__parse),
      cmocka_unit_test(test_topology__parse_fuzz),
      cmocka_unit_test(test_topology__null_handles),
      cmocka_unit_test(test_topology__assignment_accessors),
      cmocka_unit_test(test_topology__lookup_not_found),
      cmocka_unit_test(test_topology__build_errors),
      cmocka_unit_test(test_topology__explicit_assignment),
      cmocka_unit_test(test_topology__coordinate_and_name_rules),
      cmocka_unit_test(test_topology__shared_between_threads),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
