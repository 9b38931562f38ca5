/* Meshes with named axes (tpurt/mesh.h): shapes, coordinates and axis groups against a
 * naive reference computed here from row-major coordinates, the device assignment
 * round trip, every bad input, and collectives over mesh axes in a running step. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "tpurt.h"
#include "test_util.h"

TEST_SYSTEM_FIXTURE

enum { kMaxAxes = 3, kMaxSize = 8 };

/* One mesh shape over a device assignment of R replicas with k cores each. */
typedef struct {
  int replicas, cores;
  int num_axes;
  const char *names[kMaxAxes];
  int64_t sizes[kMaxAxes];
} shape;

static const shape kShapes[] = {
    {4, 2, 2, {"batch", "model"}, {4, 2}},
    {2, 4, 2, {"batch", "model"}, {2, 4}},
    {8, 1, 2, {"batch", "model"}, {8, 1}},
    {8, 1, 1, {"batch"}, {8}},
    {4, 2, 3, {"x", "y", "z"}, {2, 2, 2}},
    {2, 4, 3, {"x", "y", "z"}, {2, 2, 2}},
    {8, 1, 3, {"x", "y", "z"}, {2, 2, 2}},
};
enum { kNumShapes = sizeof kShapes / sizeof kShapes[0] };

/* Eight devices in a line: mesh [8,1,1,1], device i at (i, 0, 0, 0). */
static tpu_topology *line_topology(void) {
  const int32_t mesh[4] = {8, 1, 1, 1};
  int32_t coords[8 * 4];
  memset(coords, 0, sizeof coords);
  for (int i = 0; i < 8; ++i) coords[4 * i] = i;
  tpu_topology *t = NULL;
  CHECK_OK(tpu_topology_create(mesh, 4, coords, 1, 8, &t));
  return t;
}

/* (replica r, logical core c) on device c * R + r: not the flattened order, so a mesh
 * that followed the devices instead of (r, c) would show. */
static tpu_device_assignment *assignment(tpu_topology *t, int replicas, int cores) {
  int32_t ca[8 * 4];
  memset(ca, 0, sizeof ca);
  for (int r = 0; r < replicas; ++r)
    for (int c = 0; c < cores; ++c) ca[(r * cores + c) * 4] = c * replicas + r;
  tpu_device_assignment *da = NULL;
  CHECK_OK(tpu_device_assignment_create(t, ca, replicas, cores, &da));
  return da;
}

static tpu_mesh *make_mesh(tpu_topology *t, const shape *s) {
  tpu_device_assignment *da = assignment(t, s->replicas, s->cores);
  tpu_mesh *m = NULL;
  CHECK_OK(tpu_mesh_create(da, s->names, s->sizes, s->num_axes, &m));
  tpu_device_assignment_release(da); /* the mesh keeps its own reference */
  return m;
}

/* Naive row-major coordinates of flattened id p. */
static void naive_coords(const shape *s, int p, int64_t *coords) {
  for (int i = s->num_axes - 1; i >= 0; --i) {
    coords[i] = p % s->sizes[i];
    p /= (int)s->sizes[i];
  }
}

/* Naive groups over axes[n] (indices): participants equal on the other axes form a
 * group; groups by ascending first member; members sorted by their coordinates on
 * the named axes, in the order given. Returns the group count, fills ids. */
static int naive_groups(const shape *s, const int *axes, int n, int32_t *ids, int *group_size) {
  const int size = s->replicas * s->cores;
  int taken[kMaxSize] = {0}, out = 0, groups = 0;
  int64_t cp[kMaxAxes], cq[kMaxAxes];
  *group_size = 1;
  for (int i = 0; i < n; ++i) *group_size *= (int)s->sizes[axes[i]];
  for (int p = 0; p < size; ++p) {
    if (taken[p]) continue;
    naive_coords(s, p, cp);
    int members[kMaxSize], m = 0;
    for (int q = 0; q < size; ++q) {
      naive_coords(s, q, cq);
      int same = 1;
      for (int a = 0; a < s->num_axes; ++a) {
        int named = 0;
        for (int i = 0; i < n; ++i) named |= axes[i] == a;
        if (!named && cp[a] != cq[a]) same = 0;
      }
      if (same) members[m++] = q;
    }
    /* Insertion sort by the named coordinates, most significant first. */
    for (int i = 1; i < m; ++i)
      for (int j = i; j > 0; --j) {
        int64_t a[kMaxAxes], b[kMaxAxes];
        naive_coords(s, members[j - 1], a);
        naive_coords(s, members[j], b);
        int later = 0;
        for (int x = 0; x < n; ++x)
          if (a[axes[x]] != b[axes[x]]) {
            later = a[axes[x]] > b[axes[x]];
            break;
          }
        if (!later) break;
        int tmp = members[j];
        members[j] = members[j - 1];
        members[j - 1] = tmp;
      }
    for (int i = 0; i < m; ++i) {
      taken[members[i]] = 1;
      ids[out++] = members[i];
    }
    ++groups;
  }
  return groups;
}

/* axis_groups over axes[n] (indices into s->names) matches the naive groups. */
static void check_groups(const tpu_mesh *m, const shape *s, const int *axes, int n) {
  const char *names[kMaxAxes];
  for (int i = 0; i < n; ++i) names[i] = s->names[axes[i]];
  tpu_group_assignment g;
  int mode = -1;
  CHECK_OK(tpu_mesh_axis_groups(m, names, n, &g, &mode));
  assert_int_equal(mode, TPU_GROUP_MODE_FLATTENED_ID);
  int32_t want[kMaxSize];
  int want_size = 0;
  const int want_groups = naive_groups(s, axes, n, want, &want_size);
  if (g.num_groups != want_groups || g.group_size != want_size)
    CHECK_FAIL("%dx%d over %d axes starting \"%s\": %d groups of %d, expected %d of %d",
               s->replicas, s->cores, n, names[0], g.num_groups, g.group_size, want_groups,
               want_size);
  for (int i = 0; i < want_groups * want_size; ++i)
    if (g.replica_ids[i] != want[i])
      CHECK_FAIL("%dx%d over %d axes starting \"%s\": id %d is %d, expected %d", s->replicas,
                 s->cores, n, names[0], i, g.replica_ids[i], want[i]);
  /* Valid as a FLATTENED_ID assignment over every participant. */
  CHECK_OK(tpu_group_assignment_validate(&g, s->replicas * s->cores));
  /* Cached: the same call gives the same storage. */
  tpu_group_assignment again;
  CHECK_OK(tpu_mesh_axis_groups(m, names, n, &again, &mode));
  assert_ptr_equal(again.replica_ids, g.replica_ids);
}

/* ---- shapes, names, coordinates --------------------------------------------------- */

static void test_mesh__shape_names_and_coordinates(void **state) {
  (void)state;
  tpu_topology *t = line_topology();
  for (int i = 0; i < kNumShapes; ++i) {
    const shape *s = &kShapes[i];
    tpu_mesh *m = make_mesh(t, s);
    int n = 0;
    CHECK_OK(tpu_mesh_num_axes(m, &n));
    assert_int_equal(n, s->num_axes);
    int64_t size = 0;
    CHECK_OK(tpu_mesh_size(m, &size));
    assert_int_equal(size, s->replicas * s->cores);
    for (int a = 0; a < s->num_axes; ++a) {
      char name[16];
      size_t len = 0;
      CHECK_OK(tpu_mesh_axis_name(m, a, NULL, 0, &len)); /* size query */
      assert_int_equal(len, strlen(s->names[a]));
      CHECK_OK(tpu_mesh_axis_name(m, a, name, sizeof name, &len));
      assert_string_equal(name, s->names[a]);
      CHECK_ERROR(tpu_mesh_axis_name(m, a, name, len, &len), TPU_OUT_OF_RANGE, "");
      int64_t as = 0;
      CHECK_OK(tpu_mesh_axis_size(m, a, &as));
      assert_int_equal(as, s->sizes[a]);
      int index = -1;
      CHECK_OK(tpu_mesh_axis_index(m, s->names[a], &index));
      assert_int_equal(index, a);
    }
    for (int r = 0; r < s->replicas; ++r)
      for (int c = 0; c < s->cores; ++c) {
        int64_t got[kMaxAxes], want[kMaxAxes];
        size_t count = 0;
        CHECK_OK(tpu_mesh_coordinates(m, r, c, NULL, 0, &count));
        assert_int_equal(count, s->num_axes);
        CHECK_OK(tpu_mesh_coordinates(m, r, c, got, kMaxAxes, &count));
        naive_coords(s, r * s->cores + c, want);
        for (int a = 0; a < s->num_axes; ++a)
          if (got[a] != want[a])
            CHECK_FAIL("%dx%d: (replica %d, core %d) axis %d is %lld, expected %lld",
                       s->replicas, s->cores, r, c, a, (long long)got[a], (long long)want[a]);
      }
    tpu_mesh_release(m);
  }
  /* With axes (batch R, model k): "model" is the logical core, "batch" the replica. */
  tpu_mesh *m = make_mesh(t, &kShapes[0]);
  int64_t xy[2];
  size_t count;
  CHECK_OK(tpu_mesh_coordinates(m, 3, 1, xy, 2, &count));
  assert_int_equal(xy[0], 3);
  assert_int_equal(xy[1], 1);
  tpu_mesh_release(m);
  tpu_topology_release(t);
}

/* ---- axis groups -------------------------------------------------------------------- */

static void test_mesh__axis_groups_every_axis_and_pair(void **state) {
  (void)state;
  tpu_topology *t = line_topology();
  for (int i = 0; i < kNumShapes; ++i) {
    const shape *s = &kShapes[i];
    tpu_mesh *m = make_mesh(t, s);
    for (int a = 0; a < s->num_axes; ++a) check_groups(m, s, &a, 1);
    for (int a = 0; a < s->num_axes; ++a)
      for (int b = 0; b < s->num_axes; ++b)
        if (a != b) check_groups(m, s, (const int[]){a, b}, 2);
    if (s->num_axes == 3) {
      check_groups(m, s, (const int[]){0, 1, 2}, 3);
      check_groups(m, s, (const int[]){2, 0, 1}, 3);
    }
    tpu_mesh_release(m);
  }
  tpu_topology_release(t);
}

/* The examples a reader checks by eye: (batch 4, model 2). */
static void test_mesh__axis_groups_by_hand(void **state) {
  (void)state;
  tpu_topology *t = line_topology();
  tpu_mesh *m = make_mesh(t, &kShapes[0]);
  tpu_group_assignment g;
  int mode;
  CHECK_OK(tpu_mesh_axis_groups(m, (const char *[]){"model"}, 1, &g, &mode));
  const int32_t model[8] = {0, 1, 2, 3, 4, 5, 6, 7}; /* {r0c0, r0c1}, {r1c0, r1c1}, ... */
  assert_int_equal(g.num_groups, 4);
  assert_int_equal(g.group_size, 2);
  assert_memory_equal(g.replica_ids, model, sizeof model);
  const tpu_group_assignment by_model = g;
  CHECK_OK(tpu_mesh_axis_groups(m, (const char *[]){"batch"}, 1, &g, &mode));
  const int32_t batch[8] = {0, 2, 4, 6, 1, 3, 5, 7}; /* per logical core, every replica */
  assert_int_equal(g.num_groups, 2);
  assert_int_equal(g.group_size, 4);
  assert_memory_equal(g.replica_ids, batch, sizeof batch);
  CHECK_OK(tpu_mesh_axis_groups(m, (const char *[]){"model", "batch"}, 2, &g, &mode));
  const int32_t model_batch[8] = {0, 2, 4, 6, 1, 3, 5, 7}; /* model major, then batch */
  assert_int_equal(g.num_groups, 1);
  assert_memory_equal(g.replica_ids, model_batch, sizeof model_batch);
  /* The first result is untouched by the later lists. */
  assert_memory_equal(by_model.replica_ids, model, sizeof model);
  tpu_mesh_release(m);
  tpu_topology_release(t);
}

typedef struct {
  const tpu_mesh *mesh;
  const int32_t *seen[2][50];
} groups_race;

static void *race_groups(void *arg) {
  groups_race *r = arg;
  const char *lists[2][2] = {{"batch", NULL}, {"model", "batch"}};
  for (int i = 0; i < 50; ++i)
    for (int l = 0; l < 2; ++l) {
      tpu_group_assignment g;
      int mode;
      CHECK_OK(tpu_mesh_axis_groups(r->mesh, lists[l], l + 1, &g, &mode));
      r->seen[l][i] = g.replica_ids;
    }
  return NULL;
}

/* Threads asking for the same lists at once all get the one cached copy. */
static void test_mesh__axis_groups_from_many_threads(void **state) {
  (void)state;
  tpu_topology *t = line_topology();
  tpu_mesh *m = make_mesh(t, &kShapes[0]);
  enum { kThreads = 4 };
  groups_race races[kThreads];
  pthread_t threads[kThreads];
  for (int i = 0; i < kThreads; ++i) {
    memset(&races[i], 0, sizeof races[i]);
    races[i].mesh = m;
    assert_int_equal(pthread_create(&threads[i], NULL, race_groups, &races[i]), 0);
  }
  for (int i = 0; i < kThreads; ++i) pthread_join(threads[i], NULL);
  CHECK_NO_WORKER_FAILURES();
  for (int i = 0; i < kThreads; ++i)
    for (int n = 0; n < 50; ++n)
      for (int l = 0; l < 2; ++l) assert_ptr_equal(races[i].seen[l][n], races[0].seen[l][0]);
  assert_ptr_not_equal(races[0].seen[0][0], races[0].seen[1][0]);
  tpu_mesh_release(m);
  tpu_topology_release(t);
}

/* ---- device assignment ---------------------------------------------------------------- */

static void expect_same_assignment(const tpu_device_assignment *a, const tpu_device_assignment *b) {
  int ra, rb, ka, kb;
  CHECK_OK(tpu_device_assignment_num_replicas(a, &ra));
  CHECK_OK(tpu_device_assignment_num_replicas(b, &rb));
  CHECK_OK(tpu_device_assignment_num_cores_per_replica(a, &ka));
  CHECK_OK(tpu_device_assignment_num_cores_per_replica(b, &kb));
  assert_int_equal(ra, rb);
  assert_int_equal(ka, kb);
  int32_t ca[8 * 4], cb[8 * 4];
  size_t na, nb;
  CHECK_OK(tpu_device_assignment_core_assignment(a, ca, 32, &na));
  CHECK_OK(tpu_device_assignment_core_assignment(b, cb, 32, &nb));
  assert_int_equal(na, nb);
  assert_memory_equal(ca, cb, na * sizeof(int32_t));
}

static void test_mesh__device_assignment_round_trip(void **state) {
  (void)state;
  tpu_topology *t = line_topology();
  tpu_device_assignment *da = assignment(t, 4, 2), *back = NULL;
  tpu_mesh *m = NULL;
  CHECK_OK(tpu_mesh_create(da, kShapes[0].names, kShapes[0].sizes, 2, &m));
  CHECK_OK(tpu_mesh_device_assignment(m, &back));
  expect_same_assignment(da, back);
  /* The mesh holds its own reference: it outlives the caller's handles. */
  tpu_device_assignment_release(da);
  tpu_device_assignment_release(back);
  CHECK_OK(tpu_mesh_device_assignment(m, &back));
  int replicas = 0;
  CHECK_OK(tpu_device_assignment_num_replicas(back, &replicas));
  assert_int_equal(replicas, 4);
  tpu_device_assignment_release(back);
  tpu_mesh_release(m);

  /* From the topology: one replica per core, TensorFlow's device_assignment(). */
  const char *names[2] = {"x", "y"};
  const int64_t sizes[2] = {4, 2};
  CHECK_OK(tpu_mesh_create_from_topology(t, names, sizes, 2, &m));
  CHECK_OK(tpu_mesh_device_assignment(m, &back));
  CHECK_OK(tpu_device_assignment_build(t, NULL, 0, NULL, 0, 8, TPU_DEVICE_ORDER_AUTO, &da));
  expect_same_assignment(da, back);
  int k = 0;
  CHECK_OK(tpu_device_assignment_num_cores_per_replica(back, &k));
  assert_int_equal(k, 1);
  tpu_device_assignment_release(da);
  tpu_device_assignment_release(back);
  tpu_mesh_release(m);
  /* Fewer participants than devices: the first ones, as TensorFlow places them. */
  const int64_t four[1] = {4};
  CHECK_OK(tpu_mesh_create_from_topology(t, names, four, 1, &m));
  CHECK_OK(tpu_mesh_device_assignment(m, &back));
  CHECK_OK(tpu_device_assignment_build(t, NULL, 0, NULL, 0, 4, TPU_DEVICE_ORDER_AUTO, &da));
  expect_same_assignment(da, back);
  tpu_device_assignment_release(da);
  tpu_device_assignment_release(back);
  tpu_mesh_release(m);
  tpu_topology_release(t);
}

/* ---- bad input ------------------------------------------------------------------------- */

static void test_mesh__bad_axes(void **state) {
  (void)state;
  tpu_topology *t = line_topology();
  tpu_device_assignment *da = assignment(t, 4, 2);
  tpu_mesh *m = (tpu_mesh *)(uintptr_t)1; /* must stay untouched on failure */
  const char *names[3] = {"batch", "model", "extra"};
  const int64_t sizes[3] = {4, 2, 1};

  CHECK_ERROR(tpu_mesh_create(da, names, sizes, 0, &m), TPU_INVALID_ARGUMENT, "num_axes is 0");
  CHECK_ERROR(tpu_mesh_create(da, names, sizes, -1, &m), TPU_INVALID_ARGUMENT, "num_axes is -1");
  CHECK_ERROR(tpu_mesh_create(da, (const char *[]){"batch", NULL}, sizes, 2, &m),
              TPU_INVALID_ARGUMENT, "axis_names[1] is NULL");
  CHECK_ERROR(tpu_mesh_create(da, (const char *[]){"", "model"}, sizes, 2, &m),
              TPU_INVALID_ARGUMENT, "axis_names[0] is empty");
  CHECK_ERROR(tpu_mesh_create(da, (const char *[]){"batch", "batch"}, sizes, 2, &m),
              TPU_INVALID_ARGUMENT, "axis_names[1] is \"batch\", the same as axis_names[0]");
  CHECK_ERROR(tpu_mesh_create(da, (const char *[]){"x", "y", "x"}, (const int64_t[]){2, 2, 2}, 3, &m),
              TPU_INVALID_ARGUMENT, "axis_names[2] is \"x\", the same as axis_names[0]");
  /* DTensor's reserved sharding specs. */
  const char *reserved[3] = {"unsharded", "match", "any"};
  for (int i = 0; i < 3; ++i) {
    char want[64];
    snprintf(want, sizeof want, "axis_names[1] is \"%s\", a name DTensor reserves", reserved[i]);
    CHECK_ERROR(tpu_mesh_create(da, (const char *[]){"batch", reserved[i]}, sizes, 2, &m),
                TPU_INVALID_ARGUMENT, want);
  }
  CHECK_ERROR(tpu_mesh_create(da, names, (const int64_t[]){4, 0}, 2, &m), TPU_INVALID_ARGUMENT,
              "axis_sizes[1] is 0 (axis \"model\")");
  CHECK_ERROR(tpu_mesh_create(da, names, (const int64_t[]){-8, -1}, 2, &m), TPU_INVALID_ARGUMENT,
              "axis_sizes[0] is -8 (axis \"batch\")");
  /* The product names itself and the assignment's R x k. */
  CHECK_ERROR(tpu_mesh_create(da, names, (const int64_t[]){4, 4}, 2, &m), TPU_INVALID_ARGUMENT,
              "multiply to 16 (\"batch\" 4 x \"model\" 4), but the device assignment has 4 "
              "replicas x 2 cores per replica = 8 participants");
  CHECK_ERROR(tpu_mesh_create(da, names, (const int64_t[]){2, 2}, 2, &m), TPU_INVALID_ARGUMENT,
              "multiply to 4");
  CHECK_ERROR(tpu_mesh_create(da, names, sizes, 1, &m), TPU_INVALID_ARGUMENT,
              "multiply to 4 (\"batch\" 4), but the device assignment has 4 replicas x 2");
  CHECK_ERROR(tpu_mesh_create(da, names, (const int64_t[]){1 << 20, 1 << 20, 8}, 3, &m),
              TPU_INVALID_ARGUMENT, "multiply to more than 2147483647 at axis_sizes[1]");
  /* From the topology: the same checks first, then TensorFlow's for the replicas. */
  CHECK_ERROR(tpu_mesh_create_from_topology(t, (const char *[]){"a", "a"}, sizes, 2, &m),
              TPU_INVALID_ARGUMENT, "axis_names[1] is \"a\", the same as axis_names[0]");
  CHECK_ERROR(tpu_mesh_create_from_topology(t, names, (const int64_t[]){4, 4}, 2, &m),
              TPU_INVALID_ARGUMENT, "16");
  CHECK_ERROR(tpu_mesh_create_from_topology(t, names, sizes, 0, &m), TPU_INVALID_ARGUMENT,
              "num_axes is 0");
  assert_true(m == (tpu_mesh *)(uintptr_t)1);

  /* Lookups on a good mesh. */
  CHECK_OK(tpu_mesh_create(da, names, sizes, 2, &m));
  char buf[16];
  size_t count = 0;
  int64_t v;
  int index = 7;
  CHECK_ERROR(tpu_mesh_axis_name(m, 2, buf, sizeof buf, &count), TPU_OUT_OF_RANGE,
              "axis 2 is outside [0, 2) (the mesh's axes are \"batch\", \"model\")");
  CHECK_ERROR(tpu_mesh_axis_size(m, -1, &v), TPU_OUT_OF_RANGE, "axis -1 is outside [0, 2)");
  CHECK_ERROR(tpu_mesh_axis_index(m, "data", &index), TPU_NOT_FOUND,
              "no axis \"data\"; its axes are \"batch\", \"model\"");
  assert_int_equal(index, 7);
  int64_t coords[2];
  CHECK_ERROR(tpu_mesh_coordinates(m, 4, 0, coords, 2, &count), TPU_OUT_OF_RANGE,
              "replica 4 is outside [0, 4)");
  CHECK_ERROR(tpu_mesh_coordinates(m, 0, 2, coords, 2, &count), TPU_OUT_OF_RANGE,
              "logical_core 2 is outside [0, 2)");
  CHECK_ERROR(tpu_mesh_coordinates(m, 0, 0, coords, 1, &count), TPU_OUT_OF_RANGE, "");
  assert_int_equal(count, 2);

  tpu_group_assignment g = {NULL, -1, -1};
  int mode = -1;
  CHECK_ERROR(tpu_mesh_axis_groups(m, names, 0, &g, &mode), TPU_INVALID_ARGUMENT,
              "num_axes is 0; name at least one of the mesh's axes (\"batch\", \"model\")");
  CHECK_ERROR(tpu_mesh_axis_groups(m, (const char *[]){"model", "model"}, 2, &g, &mode),
              TPU_INVALID_ARGUMENT, "axes[1] is \"model\", already named by axes[0]");
  CHECK_ERROR(tpu_mesh_axis_groups(m, (const char *[]){"model", NULL}, 2, &g, &mode),
              TPU_INVALID_ARGUMENT, "axes[1] is NULL");
  CHECK_ERROR(tpu_mesh_axis_groups(m, (const char *[]){"batch", "data"}, 2, &g, &mode),
              TPU_NOT_FOUND, "axes[1] is \"data\", not an axis of the mesh; its axes are \"batch\", \"model\"");
  CHECK_ERROR(tpu_mesh_axis_groups(m, (const char *[]){"model", "batch", "model"}, 3, &g, &mode),
              TPU_INVALID_ARGUMENT, "axes[2] is \"model\", already named by axes[0]");
  assert_null(g.replica_ids);
  assert_int_equal(mode, -1);
  tpu_mesh_release(m);
  tpu_device_assignment_release(da);
  tpu_topology_release(t);
}

/* ---- collectives over mesh axes, in a step --------------------------------------------- */

enum { kR = 4, kK = 2, kN = kR * kK };

typedef struct {
  const tpu_mesh *mesh;
  /* [over model, batch, both; then CROSS_PARTITION, CROSS_REPLICA,
   * CROSS_REPLICA_AND_PARTITION with no groups][participant][element] */
  float got[6][kN][2];
  int ran[kN];
} mesh_step;

/* Participant p = r * k + c contributes {p + 1, 100 * (p + 1)}. */
static tpu_status sum_over_axes(tpu_replica_context *ctx, tpu_tensor *const *in, int ni,
                                tpu_tensor **out, int no, void *user) {
  mesh_step *s = user;
  int r = -1, c = -1;
  CHECK_OK(tpu_replica_context_replica_id(ctx, &r));
  CHECK_OK(tpu_replica_context_logical_core(ctx, &c));
  if (r < 0 || r >= kR || c < 0 || c >= kK) return TPU_INTERNAL;
  const int p = r * kK + c;
  s->ran[p]++;
  const float v[2] = {(float)(p + 1), 100.0f * (float)(p + 1)};
  const int64_t dims[1] = {2};
  tpu_tensor *x = NULL;
  tpu_status st = tpu_tensor_create(TPU_FLOAT, dims, 1, v, sizeof v, &x);
  const char *lists[3][2] = {{"model", NULL}, {"batch", NULL}, {"batch", "model"}};
  const int modes[3] = {TPU_GROUP_MODE_CROSS_PARTITION, TPU_GROUP_MODE_CROSS_REPLICA,
                        TPU_GROUP_MODE_CROSS_REPLICA_AND_PARTITION};
  for (int l = 0; l < 6 && st == TPU_OK; ++l) {
    tpu_group_assignment g;
    tpu_collective_options o = TPU_COLLECTIVE_OPTIONS_INIT;
    if (l < 3)
      st = tpu_mesh_axis_groups(s->mesh, lists[l], l == 2 ? 2 : 1, &g, &o.group_mode);
    else
      o.group_mode = modes[l - 3];
    tpu_tensor *sum = NULL;
    if (st == TPU_OK) st = tpu_cross_replica_sum(ctx, x, l < 3 ? &g : NULL, &sum, &o);
    const void *data = NULL;
    if (st == TPU_OK) st = tpu_tensor_data(sum, &data);
    if (st == TPU_OK) memcpy(s->got[l][p], data, sizeof s->got[l][p]);
    tpu_tensor_release(sum);
  }
  tpu_tensor_release(x);
  return st;
}

/* An 8-core system, mesh (batch 4) x (model 2) on 2 cores per replica: sums over
 * "model", "batch" and both, against the sums worked out here; they are the sums of
 * the group modes CROSS_PARTITION, CROSS_REPLICA and CROSS_REPLICA_AND_PARTITION. */
static void test_mesh__cross_replica_sum_over_mesh_axes(void **state) {
  (void)state;
  tpu_system_options o = TPU_SYSTEM_OPTIONS_INIT;
  o.num_cores = kN;
  o.collective_timeout_ms = time_limit_ms(30000);
  CHECK_OK(tpu_system_init(&o, &g_sys));
  tpu_topology *t = NULL;
  CHECK_OK(tpu_system_topology(g_sys, &t));
  tpu_device_assignment *da = assignment(t, kR, kK);
  tpu_mesh *m = NULL;
  CHECK_OK(tpu_mesh_create(da, kShapes[0].names, kShapes[0].sizes, 2, &m));
  tpu_device_assignment_release(da);
  CHECK_OK(tpu_mesh_device_assignment(m, &da));

  mesh_step s;
  memset(&s, 0, sizeof s);
  s.mesh = m;
  CHECK_OK(tpu_replicate(g_sys, sum_over_axes, &s, kR, 0, NULL, 0, NULL, STEP_OPTIONS(da, NULL, 0)));
  CHECK_NO_WORKER_FAILURES();
  for (int p = 0; p < kN; ++p) {
    const int r = p / kK, c = p % kK;
    float model = 0, batch = 0, both = 0; /* naive: the members' p + 1 */
    for (int q = 0; q < kN; ++q) {
      if (q / kK == r) model += (float)(q + 1);
      if (q % kK == c) batch += (float)(q + 1);
      both += (float)(q + 1);
    }
    const float want[6] = {model, batch, both, model, batch, both};
    assert_int_equal(s.ran[p], 1);
    for (int l = 0; l < 6; ++l)
      if (s.got[l][p][0] != want[l] || s.got[l][p][1] != 100.0f * want[l])
        CHECK_FAIL("replica %d core %d, sum %d: {%g, %g}, expected {%g, %g}", r, c, l,
                   s.got[l][p][0], s.got[l][p][1], want[l], 100.0f * want[l]);
  }
  tpu_device_assignment_release(da);
  tpu_mesh_release(m);
  tpu_topology_release(t);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mesh__shape_names_and_coordinates),
      cmocka_unit_test(test_mesh__axis_groups_every_axis_and_pair),
      cmocka_unit_test(test_mesh__axis_groups_by_hand),
      cmocka_unit_test(test_mesh__axis_groups_from_many_threads),
      cmocka_unit_test(test_mesh__device_assignment_round_trip),
      cmocka_unit_test(test_mesh__bad_axes),
      cmocka_unit_test_teardown(test_mesh__cross_replica_sum_over_mesh_axes, release_system),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
