/* tpurt info: the topology of a freshly started system and its device assignments. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define NAME_CAP 256

static const char *format_coords(const int32_t *c, char *buf, size_t cap) {
  snprintf(buf, cap, "[%d, %d, %d, %d]", c[0], c[1], c[2], c[3]);
  return buf;
}

static void print_topology(const tpu_topology *topology, const char *job,
                           const char *device_type) {
  int32_t mesh[TPU_MESH_RANK], coords[TPU_MESH_RANK];
  int tasks, per_task, missing;
  char cbuf[64], name[NAME_CAP];
  size_t len;
  CHECK(tpu_topology_mesh_shape(topology, mesh, TPU_MESH_RANK, &(size_t){0}));
  CHECK(tpu_topology_num_tasks(topology, &tasks));
  CHECK(tpu_topology_num_devices_per_task(topology, &per_task));
  CHECK(tpu_topology_num_missing_devices(topology, &missing));
  printf("Topology\n");
  printf("  mesh shape     %s  (x, y, z, core)\n", format_coords(mesh, cbuf, sizeof cbuf));
  printf("  tasks          %d\n", tasks);
  printf("  devices/task   %d\n", per_task);
  printf("  missing        %d\n\n", missing);

  printf("  %4s  %7s  %-14s  %s\n", "task", "ordinal", "coordinates", "device");
  for (int t = 0; t < tasks; t++) {
    for (int d = 0; d < per_task; d++) {
      CHECK(tpu_topology_device_coordinates(topology, t, d, coords, TPU_MESH_RANK, &(size_t){0}));
      CHECK(tpu_device_name(job, t, device_type, d, name, sizeof name, &len));
      printf("  %4d  %7d  %-14s  %s\n", t, d, format_coords(coords, cbuf, sizeof cbuf), name);
    }
  }
  for (int m = 0; m < missing; m++) {
    CHECK(tpu_topology_missing_device(topology, m, coords, TPU_MESH_RANK, &(size_t){0}));
    printf("  %4s  %7s  %-14s  (no device)\n", "-", "-", format_coords(coords, cbuf, sizeof cbuf));
  }
  printf("\n");
}

static void print_assignment(const char *title, const tpu_device_assignment *assignment,
                             const char *job) {
  int replicas, cores;
  int32_t coords[TPU_MESH_RANK];
  char cbuf[64], name[NAME_CAP];
  size_t len;
  CHECK(tpu_device_assignment_num_replicas(assignment, &replicas));
  CHECK(tpu_device_assignment_num_cores_per_replica(assignment, &cores));
  printf("%s: %d replica%s x %d core%s\n", title, replicas, replicas == 1 ? "" : "s", cores,
         cores == 1 ? "" : "s");
  printf("  %7s  %4s  %-14s  %4s  %7s  %s\n", "replica", "core", "coordinates", "task", "ordinal",
         "device");
  for (int r = 0; r < replicas; r++) {
    for (int c = 0; c < cores; c++) {
      int task, ordinal;
      CHECK(tpu_device_assignment_coordinates(assignment, r, c, coords, TPU_MESH_RANK, &(size_t){0}));
      CHECK(tpu_device_assignment_task(assignment, r, c, &task));
      CHECK(tpu_device_assignment_tpu_ordinal(assignment, r, c, &ordinal));
      CHECK(tpu_device_assignment_tpu_device(assignment, r, c, job, name, sizeof name, &len));
      printf("  %7d  %4d  %-14s  %4d  %7d  %s\n", r, c, format_coords(coords, cbuf, sizeof cbuf),
             task, ordinal, name);
    }
  }
  printf("\n");
}

static const char info_usage[] =
    "usage: tpurt info [options]\n"
    "Starts a system and prints its transport (and why), its topology, its default\n"
    "device assignment and the environment variables the library reads, with the\n"
    "values in effect.\n"
    "\n"
    "  --cores N                  logical cores (default: TPURT_NUM_CORES, else the\n"
    "                             online CPUs)\n"
    "  -m, --mesh X,Y,Z,C         mesh shape; its product is the cores (--cores, if\n"
    "                             given too, must agree)\n"
    "  -r, --replicas R           also show a device assignment of R replicas (at most\n"
    "                             the cores / the computation shape's cores)\n"
    "  --computation-shape A,B,C,D  cores per replica for that assignment (1,1,1,1)\n"
    "  -h, --help                 this text\n";

/* The TPURT_* variables with the values the library works with. */
static void print_environment(int cores_given) {
  printf("Environment (values in effect)\n");
  for (int i = 0;; i++) {
    const char *name;
    int64_t value;
    tpu_status status = tpu_environment_variable(i, &name, &value);
    if (status == TPU_OUT_OF_RANGE) break;
    check_status(status, "reading the environment");
    const char *set = getenv(name);
    const char *note = set && *set ? "set" : "default";
    if (cores_given && !strcmp(name, "TPURT_NUM_CORES")) note = "not used: --cores or --mesh given";
    printf("  %-22s %12lld  (%s)\n", name, (long long)value, note);
  }
  printf("\n");
}

enum { OPT_CORES = 256, OPT_COMPUTATION_SHAPE };

static int cmd_info(int argc, char **argv) {
  static const struct option longopts[] = {
      {"cores", required_argument, NULL, OPT_CORES},
      {"mesh", required_argument, NULL, 'm'},
      {"replicas", required_argument, NULL, 'r'},
      {"computation-shape", required_argument, NULL, OPT_COMPUTATION_SHAPE},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  int cores = 0, replicas = 0, have_mesh = 0, have_shape = 0;
  int32_t mesh[TPU_MESH_RANK], shape[TPU_MESH_RANK] = {1, 1, 1, 1};
  for (int c; (c = next_option("info", argc, argv, "m:r:h", longopts)) != -1;) {
    switch (c) {
      case OPT_CORES: cores = (int)parse_long("info", "--cores", optarg, 1, 4096); break;
      case 'm':
        parse_int_list("info", "--mesh", optarg, mesh, TPU_MESH_RANK);
        have_mesh = 1;
        break;
      case 'r': replicas = (int)parse_long("info", "--replicas", optarg, 1, 4096); break;
      case OPT_COMPUTATION_SHAPE:
        parse_int_list("info", "--computation-shape", optarg, shape, TPU_MESH_RANK);
        have_shape = 1;
        break;
      case 'h': return print_usage(info_usage);
    }
  }

  if (have_mesh) { /* the mesh holds the cores: --cores may only agree with it */
    long long held = (long long)mesh[0] * mesh[1] * mesh[2] * mesh[3];
    if (cores && held != cores)
      usage_error("info", "--cores %d and --mesh %d,%d,%d,%d disagree: that mesh holds %lld cores "
                  "(give one of them, or a mesh whose product is --cores)", cores, mesh[0],
                  mesh[1], mesh[2], mesh[3], held);
    if (held > 4096) usage_error("info", "--mesh: %lld cores is more than 4096", held);
    cores = (int)held;
  }

  tpu_system *system = start_system(cores, have_mesh ? mesh : NULL, TPU_PIN_AUTO);
  char job[NAME_CAP], device_type[NAME_CAP];
  size_t len;
  int num_cores;
  CHECK(tpu_system_num_cores(system, &num_cores));
  CHECK(tpu_system_job_name(system, job, sizeof job, &len));
  CHECK(tpu_system_device_type(system, device_type, sizeof device_type, &len));
  tpu_topology *topology = NULL;
  CHECK_DOING(tpu_system_topology(system, &topology), "reading the topology");
  tpu_device_assignment *assignment = NULL, *built = NULL;
  CHECK_DOING(tpu_system_default_device_assignment(system, num_cores, &assignment),
              "building the default device assignment");

  /* Everything that can fail runs before the first line is printed: a failure stops
   * the command with its message alone. */
  if (replicas || have_shape) {
    long long footprint = (long long)shape[0] * shape[1] * shape[2] * shape[3];
    if (!replicas) /* as many replicas of the computation shape as fit */
      replicas = num_cores / footprint > 0 ? (int)(num_cores / footprint) : 1;
    if (footprint > num_cores)
      usage_error("info", "--computation-shape %d,%d,%d,%d holds %lld cores, but the system has %d "
                  "(--cores, else TPURT_NUM_CORES, else the online CPUs)", shape[0], shape[1],
                  shape[2], shape[3], footprint, num_cores);
    if ((long long)replicas * footprint > num_cores)
      usage_error("info", "--replicas %d of %lld core%s each need%s %lld cores, but the system has "
                  "%d (--cores, else TPURT_NUM_CORES, else the online CPUs)", replicas, footprint,
                  footprint == 1 ? "" : "s", replicas == 1 ? "s" : "",
                  (long long)replicas * footprint, num_cores);
    CHECK_DOING(tpu_device_assignment_build(topology, shape, TPU_MESH_RANK, NULL, 0, replicas,
                                            TPU_DEVICE_ORDER_AUTO, &built),
                "cannot place --replicas with --computation-shape on the mesh");
  }
  char *transport = system_string(tpu_system_transport, system, "reading the transport");
  char *reason = system_string(tpu_system_transport_reason, system, "reading why that transport");

  printf("System\n");
  printf("  runtime        tpurt %s\n", tpu_version());
  printf("  cores          %d (online CPUs: %d)\n", num_cores, online_cpus());
  printf("  job            %s\n", job);
  printf("  device type    %s\n", device_type);
  printf("  transport      %s (%s)\n\n", transport, reason);
  free(transport);
  free(reason);
  print_environment(cores != 0);
  print_topology(topology, job, device_type);
  print_assignment("Default device assignment", assignment, job);
  CHECK(tpu_device_assignment_release(assignment));
  if (built) {
    char title[128];
    snprintf(title, sizeof title, "Device assignment of computation shape [%d, %d, %d, %d]",
             shape[0], shape[1], shape[2], shape[3]);
    print_assignment(title, built, job);
    CHECK(tpu_device_assignment_release(built));
  }

  CHECK(tpu_topology_release(topology));
  CHECK(tpu_system_release(system));
  return 0;
}

const tool_command info_command = {
    "info", "start a system; print its topology, device assignment and environment",
    info_usage, cmd_info};
