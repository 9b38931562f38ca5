/* Checks tpurt's topology and device assignment against the oracle vectors produced
 * by TensorFlow's own device_assignment.py / topology.py
 * (tests/data/device_assignment_vectors.json, a copy of shared/spec, read at run time).
 * One cmocka case per vector, named test_device_assignment__<id>. */
#define _POSIX_C_SOURCE 200809L /* PATH_MAX, readlink */
#include <jansson.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <tpurt.h>

#include "test_util.h"

#define VECTORS_NAME "device_assignment_vectors.json"

/* ---- per-case failure collection ---------------------------------------------- */

static char g_details[2048];
static int g_case_bad;

static void problem(const char *fmt, ...) {
  size_t used = strlen(g_details);
  if (used + 8 >= sizeof(g_details)) return;
  if (used) {
    strcat(g_details, "; ");
    used += 2;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_details + used, sizeof(g_details) - used, fmt, ap);
  va_end(ap);
  g_case_bad = 1;
}

static void begin_case(void) {
  g_details[0] = '\0';
  g_case_bad = 0;
}

/* ---- helpers ------------------------------------------------------------------ */

/* The vectors live in the repository: the Makefile passes the absolute path of
 * tests/data, so the test runs from any directory. */
#ifndef TPURT_TEST_DATA_DIR
#define TPURT_TEST_DATA_DIR "tests/data"
#endif

static FILE *open_vectors(char *path, size_t cap) {
  const char *env = getenv("TPURT_DA_VECTORS");
  if (env && *env)
    snprintf(path, cap, "%s", env);
  else
    snprintf(path, cap, "%s/" VECTORS_NAME, TPURT_TEST_DATA_DIR);
  return fopen(path, "rb");
}

/* Flattens nested integer arrays into out; returns the count or -1 if too many/bad. */
static int flatten_ints(json_t *v, int32_t *out, int cap, int n) {
  if (json_is_integer(v)) {
    if (n >= cap) return -1;
    out[n] = (int32_t)json_integer_value(v);
    return n + 1;
  }
  if (!json_is_array(v)) return -1;
  size_t i;
  json_t *e;
  json_array_foreach(v, i, e) {
    n = flatten_ints(e, out, cap, n);
    if (n < 0) return -1;
  }
  return n;
}

static int hex_decode(const char *hex, unsigned char *out, size_t cap) {
  size_t n = strlen(hex);
  if (n % 2 || n / 2 > cap) return -1;
  for (size_t i = 0; i < n / 2; ++i) {
    unsigned v;
    if (sscanf(hex + 2 * i, "%2x", &v) != 1) return -1;
    out[i] = (unsigned char)v;
  }
  return (int)(n / 2);
}

static void hex_encode(const unsigned char *b, size_t n, char *out, size_t cap) {
  out[0] = '\0';
  for (size_t i = 0; i < n && 2 * i + 3 <= cap; ++i) sprintf(out + 2 * i, "%02x", b[i]);
}

static int json_int(json_t *obj, const char *key, int dflt) {
  json_t *v = json_object_get(obj, key);
  return json_is_integer(v) ? (int)json_integer_value(v) : dflt;
}

/* The gist of a TensorFlow error: a phrase that must also appear in ours. */
static const char *gist_of(const char *tf_message) {
  static const char *gists[] = {"does not fit",       "must have shape", "must be positive",
                                "replicas but only",  "not compatible",  "mesh_shape",
                                "device_coordinates", "num_tasks"};
  for (size_t i = 0; i < sizeof(gists) / sizeof(gists[0]); ++i)
    if (strstr(tf_message, gists[i])) return gists[i];
  return NULL;
}

#define MAX_INTS 65536

/* ---- device assignment cases -------------------------------------------------- */

static tpu_topology *case_topology(json_t *c) {
  static int32_t mesh[8], coords[MAX_INTS];
  int mesh_n = flatten_ints(json_object_get(c, "mesh_shape"), mesh, 8, 0);
  int coords_n = flatten_ints(json_object_get(c, "device_coordinates"), coords, MAX_INTS, 0);
  if (mesh_n < 0 || coords_n < 0) {
    problem("bad mesh_shape/device_coordinates in the vectors");
    return NULL;
  }
  tpu_topology *t = NULL;
  tpu_status s = tpu_topology_create(mesh, mesh_n, coords, json_int(c, "num_tasks", -1),
                                     json_int(c, "devices_per_task", -1), &t);
  if (s != TPU_OK) problem("tpu_topology_create: %s: %s", tpu_status_name(s), tpu_last_error());
  return t;
}

static void check_names(tpu_device_assignment *da, json_t *expected, int r, int c) {
  char buf[256];
  size_t len;
  json_t *want =
      json_array_get(json_array_get(json_object_get(expected, "tpu_device_job_worker"), r), c);
  tpu_status s = tpu_device_assignment_tpu_device(da, r, c, "worker", buf, sizeof(buf), &len);
  if (s != TPU_OK || !json_is_string(want) || strcmp(buf, json_string_value(want)) != 0)
    problem("tpu_device(%d, %d, \"worker\") = %s, expected %s", r, c,
            s == TPU_OK ? buf : tpu_status_name(s),
            json_is_string(want) ? json_string_value(want) : "?");
  want = json_array_get(json_array_get(json_object_get(expected, "host_device_no_job"), r), c);
  s = tpu_device_assignment_host_device(da, r, c, NULL, buf, sizeof(buf), &len);
  if (s != TPU_OK || !json_is_string(want) || strcmp(buf, json_string_value(want)) != 0)
    problem("host_device(%d, %d, NULL) = %s, expected %s", r, c,
            s == TPU_OK ? buf : tpu_status_name(s),
            json_is_string(want) ? json_string_value(want) : "?");
}

static void check_lookups(tpu_device_assignment *da, json_t *lookups) {
  const char *task_key;
  json_t *cores;
  json_object_foreach(lookups, task_key, cores) {
    const char *core_key;
    json_t *want;
    json_object_foreach(cores, core_key, want) {
      int task = atoi(task_key), core = atoi(core_key);
      int got[4096];
      size_t count = 0;
      tpu_status s = tpu_device_assignment_lookup_replicas(da, task, core, got, 4096, &count);
      if (json_is_object(want)) {
        if (s != TPU_NOT_FOUND || !strstr(tpu_last_error(), "Can not find any replica"))
          problem("lookup_replicas(%d, %d): %s \"%s\", expected NOT_FOUND", task, core,
                  tpu_status_name(s), s == TPU_OK ? "" : tpu_last_error());
        continue;
      }
      int32_t exp[4096];
      int n = flatten_ints(want, exp, 4096, 0);
      if (s != TPU_OK) {
        problem("lookup_replicas(%d, %d): %s: %s", task, core, tpu_status_name(s),
                tpu_last_error());
        continue;
      }
      int same = (size_t)n == count;
      for (int i = 0; same && i < n; ++i) same = got[i] == exp[i];
      if (!same)
        problem("lookup_replicas(%d, %d) differs (%zu replicas, expected %d)", task, core, count, n);
    }
  }
}

static void check_success(tpu_device_assignment *da, json_t *expected) {
  int R = -1, C = -1;
  tpu_device_assignment_num_replicas(da, &R);
  tpu_device_assignment_num_cores_per_replica(da, &C);
  int want_r = json_int(expected, "num_replicas", -2),
      want_c = json_int(expected, "num_cores_per_replica", -2);
  if (R != want_r || C != want_c) {
    problem("shape %d x %d, expected %d x %d", R, C, want_r, want_c);
    return;
  }
  static int32_t want[MAX_INTS], got[MAX_INTS];
  int n = flatten_ints(json_object_get(expected, "core_assignment"), want, MAX_INTS, 0);
  tpu_status s = tpu_device_assignment_core_assignment(da, got, MAX_INTS, &(size_t){0});
  if (n != R * C * 4 || s != TPU_OK) {
    problem("core_assignment: %s, %d entries expected", tpu_status_name(s), n);
    return;
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      const int32_t *w = &want[(r * C + c) * 4], *g = &got[(r * C + c) * 4];
      int32_t coords[4] = {-1, -1, -1, -1};
      tpu_device_assignment_coordinates(da, r, c, coords, TPU_MESH_RANK, &(size_t){0});
      if (memcmp(w, g, 16) != 0 || memcmp(w, coords, 16) != 0)
        problem("replica %d core %d at (%d,%d,%d,%d), expected (%d,%d,%d,%d)", r, c, g[0], g[1],
                g[2], g[3], w[0], w[1], w[2], w[3]);
      int ordinal = -1, task = -1;
      tpu_device_assignment_tpu_ordinal(da, r, c, &ordinal);
      tpu_device_assignment_task(da, r, c, &task);
      int want_ordinal = json_integer_value(
          json_array_get(json_array_get(json_object_get(expected, "tpu_ordinal"), r), c));
      int want_task = json_integer_value(
          json_array_get(json_array_get(json_object_get(expected, "host_task"), r), c));
      if (ordinal != want_ordinal)
        problem("tpu_ordinal(%d, %d) = %d, expected %d", r, c, ordinal, want_ordinal);
      if (task != want_task) problem("task(%d, %d) = %d, expected %d", r, c, task, want_task);
      check_names(da, expected, r, c);
    }
  check_lookups(da, json_object_get(expected, "lookup_replicas"));
}

static void run_assignment_case(json_t *c) {
  json_t *inputs = json_object_get(c, "inputs"), *expected = json_object_get(c, "expected");
  tpu_topology *topo = case_topology(c);
  if (!topo) return;
  int32_t shape[16], stride[16];
  json_t *js = json_object_get(inputs, "computation_shape"),
         *jt = json_object_get(inputs, "computation_stride");
  int shape_n = js ? flatten_ints(js, shape, 16, 0) : 0;
  int stride_n = jt ? flatten_ints(jt, stride, 16, 0) : 0;
  tpu_device_order_mode mode = TPU_DEVICE_ORDER_AUTO;
  const char *m = json_string_value(json_object_get(inputs, "device_order_mode"));
  if (m && strcmp(m, "RING") == 0)
    mode = TPU_DEVICE_ORDER_RING;
  else if (m && strcmp(m, "MESH") == 0)
    mode = TPU_DEVICE_ORDER_MESH;
  else if (m && strcmp(m, "AUTO") != 0)
    problem("unknown device_order_mode %s", m);

  tpu_device_assignment *da = NULL;
  tpu_status s =
      tpu_device_assignment_build(topo, js ? shape : NULL, shape_n, jt ? stride : NULL, stride_n,
                                  json_int(inputs, "num_replicas", 1), mode, &da);
  if (json_is_true(json_object_get(expected, "ok"))) {
    if (s != TPU_OK)
      problem("build failed: %s: %s", tpu_status_name(s), tpu_last_error());
    else
      check_success(da, expected);
  } else if (s != TPU_INVALID_ARGUMENT) {
    problem("build gave %s, expected INVALID_ARGUMENT", tpu_status_name(s));
  } else {
    const char *tf = json_string_value(json_object_get(expected, "error_message"));
    if (tf && *tf) {
      const char *gist = gist_of(tf);
      if (!gist)
        problem("no known gist in TF's message \"%s\"", tf);
      else if (!strstr(tpu_last_error(), gist))
        problem("message \"%s\" lacks \"%s\" (TF: \"%s\")", tpu_last_error(), gist, tf);
    }
  }
  tpu_device_assignment_release(da);
  tpu_topology_release(topo);
}

/* ---- TopologyProto vectors ---------------------------------------------------- */

static void check_round_trip(const unsigned char *bytes, int n, tpu_topology **out) {
  tpu_topology *t = NULL;
  tpu_status s = tpu_topology_parse(bytes, (size_t)n, &t);
  if (s != TPU_OK) {
    problem("parse: %s: %s", tpu_status_name(s), tpu_last_error());
    return;
  }
  unsigned char again[4096];
  size_t len = 0;
  s = tpu_topology_serialize(t, again, sizeof(again), &len);
  if (s != TPU_OK || len != (size_t)n || memcmp(again, bytes, len) != 0)
    problem("parsed topology does not serialize to the same bytes");
  *out = t;
}

static void run_proto_vector(json_t *v) {
  unsigned char want[4096], got[4096];
  int n = hex_decode(json_string_value(json_object_get(v, "serialized_hex")), want, sizeof(want));
  if (n < 0) {
    problem("bad serialized_hex");
    return;
  }
  static int32_t mesh[8], coords[MAX_INTS];
  int mesh_n = flatten_ints(json_object_get(v, "mesh_shape"), mesh, 8, 0);
  int coords_n = flatten_ints(json_object_get(v, "device_coordinates_flat"), coords, MAX_INTS, 0);
  int tasks = json_int(v, "num_tasks", -1), per_task = json_int(v, "num_tpu_devices_per_task", -1);
  json_t *hw = json_object_get(v, "tpu_hardware_feature");

  tpu_topology *created = NULL;
  tpu_status s = tpu_topology_create(mesh, mesh_n, coords, tasks, per_task, &created);
  if (s != TPU_OK) {
    problem("create: %s: %s", tpu_status_name(s), tpu_last_error());
  } else {
    size_t len = 0;
    s = tpu_topology_serialize(created, got, sizeof(got), &len);
    /* Field 5 (tag 0x2a) comes last; a topology built from arrays has none. */
    int prefix_only = json_is_object(hw);
    int same = s == TPU_OK &&
               (prefix_only ? len < (size_t)n && want[len] == 0x2a : len == (size_t)n) &&
               memcmp(got, want, len) == 0;
    if (!same) {
      char hex[8200];
      hex_encode(got, len, hex, sizeof(hex));
      problem("create+serialize gave %s", hex);
    }
  }
  tpu_topology_release(created);

  tpu_topology *parsed = NULL;
  check_round_trip(want, n, &parsed);
  if (parsed) {
    int32_t m[4], c[4];
    int t = -1, d = -1, feature = -1, per_chip = -1;
    tpu_topology_mesh_shape(parsed, m, TPU_MESH_RANK, &(size_t){0});
    tpu_topology_num_tasks(parsed, &t);
    tpu_topology_num_devices_per_task(parsed, &d);
    if (memcmp(m, mesh, sizeof(m)) != 0 || t != tasks || d != per_task)
      problem("parsed mesh/tasks/devices differ");
    for (int i = 0; i < tasks * per_task && i * 4 < coords_n; ++i) {
      tpu_topology_device_coordinates(parsed, i / per_task, i % per_task, c, TPU_MESH_RANK, &(size_t){0});
      if (memcmp(c, &coords[i * 4], sizeof(c)) != 0)
        problem("parsed coordinates of device %d differ", i);
    }
    tpu_topology_hardware_feature(parsed, &feature, &per_chip);
    int want_feature = json_int(hw, "embedding_feature", 0),
        want_chip = json_int(hw, "num_embedding_devices_per_chip", 0);
    if (feature != want_feature || per_chip != want_chip)
      problem("hardware feature (%d, %d), expected (%d, %d)", feature, per_chip, want_feature,
              want_chip);
  }
  tpu_topology_release(parsed);
}

static void run_parse_vector(json_t *v) {
  unsigned char bytes[4096];
  int n = hex_decode(json_string_value(json_object_get(v, "serialized_hex")), bytes, sizeof(bytes));
  if (n < 0) {
    problem("bad serialized_hex");
    return;
  }
  json_t *result = json_object_get(v, "result");
  if (json_is_true(json_object_get(result, "ok"))) {
    tpu_topology *t = NULL;
    check_round_trip(bytes, n, &t);
    tpu_topology_release(t);
    return;
  }
  tpu_topology *t = NULL;
  tpu_status s = tpu_topology_parse(bytes, (size_t)n, &t);
  if (s != TPU_INVALID_ARGUMENT) {
    problem("parse gave %s, expected INVALID_ARGUMENT", tpu_status_name(s));
    tpu_topology_release(t);
    return;
  }
  const char *tf = json_string_value(json_object_get(result, "error_message"));
  const char *gist = tf ? gist_of(tf) : NULL;
  if (gist && !strstr(tpu_last_error(), gist))
    problem("message \"%s\" lacks \"%s\" (TF: \"%s\")", tpu_last_error(), gist, tf);
}

/* ---- main --------------------------------------------------------------------- */

typedef void (*vector_runner)(json_t *);

/* One cmocka case per vector: its initial state is {runner, vector}. */
typedef struct {
  vector_runner run;
  json_t *vector;
} vector_case;

static void test_device_assignment__vector(void **state) {
  const vector_case *c = *state;
  begin_case();
  c->run(c->vector);
  if (g_case_bad) fail_msg("%s", g_details);
}

int main(int argc, char **argv) {
  char path[PATH_MAX + 64];
  FILE *f = open_vectors(path, sizeof(path));
  json_error_t err;
  json_t *root = f ? json_loadf(f, 0, &err) : NULL;
  if (f) fclose(f);
  if (!root) {
    fprintf(stderr, "test_device_assignment: cannot read %s (%s); set TPURT_DA_VECTORS\n", path,
            f ? err.text : "not found");
    return 1;
  }

  const struct {
    const char *key;
    vector_runner run;
  } groups[] = {{"cases", run_assignment_case},
                {"topology_proto_vectors", run_proto_vector},
                {"topology_parse_vectors", run_parse_vector}};
  size_t total = 0;
  for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); ++g) {
    json_t *list = json_object_get(root, groups[g].key);
    if (!json_is_array(list) || json_array_size(list) == 0) {
      fprintf(stderr, "test_device_assignment: no \"%s\" in %s\n", groups[g].key, path);
      json_decref(root);
      return 1;
    }
    total += json_array_size(list);
  }
  struct CMUnitTest *tests = calloc(total, sizeof *tests);
  vector_case *cases = calloc(total, sizeof *cases);
  char (*names)[128] = calloc(total, sizeof *names);
  if (!tests || !cases || !names) return 1;
  size_t n = 0;
  for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); ++g) {
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(root, groups[g].key), i, v) {
      const char *id = json_string_value(json_object_get(v, "id"));
      snprintf(names[n], sizeof names[n], "test_device_assignment__%s", id ? id : "?");
      cases[n] = (vector_case){groups[g].run, v};
      tests[n] = (struct CMUnitTest){names[n], test_device_assignment__vector, NULL, NULL,
                                     &cases[n]};
      ++n;
    }
  }
  int failed = tpurt_run_tests(argc, argv, "vectors", tests, n, NULL, NULL);
  free(names);
  free(cases);
  free(tests);
  json_decref(root);
  return failed;
}
