#define _POSIX_C_SOURCE 200809L

#include "common.h"

#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *tool_command_name = "";

void check_status(tpu_status status, const char *doing) {
  if (status == TPU_OK) return;
  const char *message = tpu_last_error();
  fprintf(stderr, "tpurt%s%s: %s%s%s (%s)\n", *tool_command_name ? " " : "", tool_command_name,
          doing ? doing : "", doing ? ": " : "", *message ? message : "no message",
          tpu_status_name(status));
  exit(1);
}

void usage_error(const char *command, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "tpurt %s: ", command);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, " (see tpurt %s --help)\n", command);
  exit(EXIT_USAGE);
}

int next_option(const char *command, int argc, char **argv, const char *shortopts,
                const struct option *longopts) {
  char spec[64];
  /* A leading ':' makes getopt return ':' for a missing value and stay silent: the
   * messages are ours, in the tool's format. */
  snprintf(spec, sizeof spec, ":%s", shortopts);
  opterr = 0;
  int c = getopt_long(argc, argv, spec, longopts, NULL);
  if (c == '?') {
    if (optopt) usage_error(command, "unknown option '-%c'", optopt);
    usage_error(command, "unknown option '%s'", argv[optind - 1]);
  }
  if (c == ':') usage_error(command, "option '%s' needs a value", argv[optind - 1]);
  if (c == -1 && optind < argc) usage_error(command, "unexpected argument '%s'", argv[optind]);
  return c;
}

int print_usage(const char *usage) {
  fputs(usage, stdout);
  return 0;
}

void check_environment(void) {
  for (int i = 0;; i++) {
    const char *name;
    int64_t value;
    tpu_status status = tpu_environment_variable(i, &name, &value);
    if (status == TPU_OUT_OF_RANGE) return;
    if (status == TPU_INVALID_ARGUMENT) {
      fprintf(stderr, "tpurt%s%s: %s\n", *tool_command_name ? " " : "", tool_command_name,
              tpu_last_error());
      exit(EXIT_USAGE);
    }
    check_status(status, "reading the environment");
  }
}

long parse_long(const char *command, const char *what, const char *text, long min, long max) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || end == text || *end) usage_error(command, "%s: '%s' is not an integer", what, text);
  if (v < min || v > max)
    usage_error(command, "%s: %ld is outside [%ld, %ld]", what, v, min, max);
  return v;
}

double parse_double(const char *command, const char *what, const char *text) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (errno || end == text || *end || !(v > 0) || !isfinite(v))
    usage_error(command, "%s: '%s' is not a positive number", what, text);
  return v;
}

size_t parse_bytes(const char *command, const char *what, const char *text) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno || end == text || text[0] == '-')
    usage_error(command, "%s: '%s' is not a byte count", what, text);
  unsigned shift = 0;
  switch (*end) {
    case '\0': break;
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    default: usage_error(command, "%s: bad suffix in '%s' (use K, M or G)", what, text);
  }
  if (shift && end[1]) usage_error(command, "%s: bad suffix in '%s' (use K, M or G)", what, text);
  if (v == 0 || v > (1ull << 40) >> shift)
    usage_error(command, "%s: '%s' is outside [1, 1T]", what, text);
  return (size_t)(v << shift);
}

void parse_int_list(const char *command, const char *what, const char *text, int32_t *out,
                    int n) {
  const char *p = text;
  for (int k = 0; k < n; k++) {
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    int last = k == n - 1;
    if (errno || end == p || v < 1 || v > INT32_MAX || *end != (last ? '\0' : ','))
      usage_error(command, "%s: '%s' is not %d comma-separated positive integers", what, text, n);
    out[k] = (int32_t)v;
    p = end + 1;
  }
}

static tpu_system *start_with(tpu_system_options *options) {
  tpu_system *system = NULL;
  check_environment();
  /* Resolves the cluster from the environment (tpurt launch, Slurm, mpirun, TF_CONFIG,
   * DTENSOR_JOBS); with none of them set it starts a one-process system. */
  CHECK_DOING(tpu_initialize_tpu_system(NULL, options, NULL, &system, NULL), "cannot start a system");
  return system;
}

tpu_system *start_system(int num_cores, const int32_t *mesh_shape, int pinning) {
  tpu_system_options options = TPU_SYSTEM_OPTIONS_INIT;
  options.num_cores = num_cores;
  options.pin_threads = pinning;
  if (mesh_shape) memcpy(options.mesh_shape, mesh_shape, sizeof options.mesh_shape);
  return start_with(&options);
}

tpu_system *start_embedding_system(int num_cores, const char *json, int pinning) {
  size_t len = 0;
  CHECK_DOING(tpu_embedding_config_from_json(json, NULL, 0, &len), "writing the embedding configuration");
  void *bytes = xcalloc(len ? len : 1, 1);
  CHECK_DOING(tpu_embedding_config_from_json(json, bytes, len, &len), "writing the embedding configuration");
  tpu_system_options options = TPU_SYSTEM_OPTIONS_INIT;
  options.num_cores = num_cores;
  options.pin_threads = pinning;
  options.embedding_config = bytes;
  options.embedding_config_len = len;
  tpu_system *system = start_with(&options);
  free(bytes);
  return system;
}

int bind_free_ports(const struct sockaddr *addr, socklen_t addr_len, int n, int *ports,
                    int *sockets) {
  for (int i = 0; i < n; i++) {
    struct sockaddr_storage bound;
    socklen_t len = sizeof bound;
    sockets[i] = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sockets[i] < 0 || bind(sockets[i], addr, addr_len) ||
        getsockname(sockets[i], (struct sockaddr *)&bound, &len))
      return i;
    ports[i] = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                 : ((struct sockaddr_in *)&bound)->sin_port);
  }
  return n;
}

tpu_device_assignment *assign_replicas(tpu_system *system, int k, const char *command,
                                       int *num_cores) {
  tpu_topology *topology = NULL;
  int tasks, per_task;
  CHECK(tpu_system_topology(system, &topology));
  CHECK(tpu_topology_num_tasks(topology, &tasks));
  CHECK(tpu_topology_num_devices_per_task(topology, &per_task));
  int n = tasks * per_task;
  if (k < 1 || n % k)
    usage_error(command, "--cores-per-replica %d does not divide the %d cores", k, n);
  int32_t *coords = xcalloc((size_t)n * TPU_MESH_RANK, sizeof *coords);
  for (int g = 0; g < n; g++) {
    size_t count;
    CHECK(tpu_topology_device_coordinates(topology, g / per_task, g % per_task,
                                          coords + (size_t)g * TPU_MESH_RANK, TPU_MESH_RANK,
                                          &count));
  }
  tpu_device_assignment *assignment = NULL;
  CHECK_DOING(tpu_device_assignment_create(topology, coords, n / k, k, &assignment),
              "building the device assignment");
  free(coords);
  CHECK(tpu_topology_release(topology));
  *num_cores = n;
  return assignment;
}

char *system_string(tpu_status (*get)(const tpu_system *, char *, size_t, size_t *),
                    const tpu_system *system, const char *what) {
  size_t len = 0;
  check_status(get(system, NULL, 0, &len), what);
  char *s = xcalloc(len + 1, 1);
  check_status(get(system, s, len + 1, &len), what);
  return s;
}

void *xcalloc(size_t count, size_t size) {
  void *p = calloc(count ? count : 1, size ? size : 1);
  if (!p) {
    fprintf(stderr, "tpurt: out of memory (%zu x %zu bytes)\n", count, size);
    exit(1);
  }
  return p;
}

int online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *format_bytes(double bytes, char *buf, size_t cap) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    u++;
  }
  snprintf(buf, cap, "%.*f %s", bytes == (double)(long long)bytes ? 0 : 1, bytes, units[u]);
  return buf;
}
