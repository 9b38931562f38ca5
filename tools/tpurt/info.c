/* tpurt info: the topology of a freshly started system and its device assignments. */
#include <stdio.h>
#include <stdlib.h>

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

int cmd_info(int argc, char **argv) {
  int cores = 0, replicas = 0, have_mesh = 0, have_shape = 0;
  int32_t mesh[TPU_MESH_RANK], shape[TPU_MESH_RANK] = {1, 1, 1, 1};
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (is_help(argv[i])) {
      fputs(tpurt_usage, stdout);
      return 0;
    } else if (take_option("info", argc, argv, &i, NULL, "--cores", &v)) {
      cores = (int)parse_long("info", "--cores", v, 1, 65536);
    } else if (take_option("info", argc, argv, &i, NULL, "--mesh", &v)) {
      parse_int_list("info", "--mesh", v, mesh, TPU_MESH_RANK);
      have_mesh = 1;
    } else if (take_option("info", argc, argv, &i, NULL, "--replicas", &v)) {
      replicas = (int)parse_long("info", "--replicas", v, 1, 65536);
    } else if (take_option("info", argc, argv, &i, NULL, "--computation-shape", &v)) {
      parse_int_list("info", "--computation-shape", v, shape, TPU_MESH_RANK);
      have_shape = 1;
    } else {
      usage_error("info", "unknown option '%s'", argv[i]);
    }
  }

  tpu_system *system = start_system(cores, have_mesh ? mesh : NULL, TPU_PIN_AUTO);
  char job[NAME_CAP], device_type[NAME_CAP];
  size_t len;
  int num_cores;
  CHECK(tpu_system_num_cores(system, &num_cores));
  CHECK(tpu_system_job_name(system, job, sizeof job, &len));
  CHECK(tpu_system_device_type(system, device_type, sizeof device_type, &len));
  printf("System\n");
  printf("  runtime        tpurt %s\n", tpu_version());
  printf("  cores          %d (online CPUs: %d)\n", num_cores, online_cpus());
  printf("  job            %s\n", job);
  printf("  device type    %s\n\n", device_type);

  tpu_topology *topology = NULL;
  CHECK(tpu_system_topology(system, &topology));
  print_topology(topology, job, device_type);

  tpu_device_assignment *assignment = NULL;
  CHECK(tpu_system_default_device_assignment(system, num_cores, &assignment));
  print_assignment("Default device assignment", assignment, job);
  CHECK(tpu_device_assignment_release(assignment));

  if (replicas || have_shape) {
    if (!replicas) {  /* as many replicas of the computation shape as fit */
      long long footprint = (long long)shape[0] * shape[1] * shape[2] * shape[3];
      replicas = num_cores / footprint > 0 ? (int)(num_cores / footprint) : 1;
    }
    char title[128];
    snprintf(title, sizeof title, "tpu_device_assignment_build(shape [%d, %d, %d, %d])", shape[0],
             shape[1], shape[2], shape[3]);
    CHECK(tpu_device_assignment_build(topology, shape, TPU_MESH_RANK, NULL, 0, replicas,
                                      TPU_DEVICE_ORDER_AUTO, &assignment));
    print_assignment(title, assignment, job);
    CHECK(tpu_device_assignment_release(assignment));
  }

  CHECK(tpu_topology_release(topology));
  CHECK(tpu_system_release(system));
  return 0;
}
