/* tpurt bench --tasks: runs the bench again as N tasks on this host, each marked by
 * TPURT_BENCH_TASKS: under `tpurt launch` (no --transport, tcp, shm) or under
 * `mpirun` (mpi). With --transport, TPURT_TRANSPORT asks the library for it and
 * TPURT_BENCH_TRANSPORT tells the tasks what to check the library's choice against. */
#define _GNU_SOURCE

#include <arpa/inet.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

const char bench_transport_names[] = "tcp, shm or mpi";

int bench_valid_transport(const char *name) {
  return !strcmp(name, "tcp") || !strcmp(name, "shm") || !strcmp(name, "mpi");
}

static void set_env(const char *name, const char *value) {
  if (setenv(name, value, 1)) {
    fprintf(stderr, "tpurt bench: cannot set %s: %s\n", name, strerror(errno));
    exit(1);
  }
}

/* The options the relaunch consumes, dropped from the tasks' command line. */
static int relaunch_option(char **argv, int i, int *skip_value) {
  static const char *const names[] = {"--tasks", "--cores-per-task", "--transport", "--timeout"};
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
    size_t len = strlen(names[k]);
    if (!strcmp(argv[i], names[k])) return *skip_value = 1, 1;
    if (!strncmp(argv[i], names[k], len) && argv[i][len] == '=') return *skip_value = 0, 1;
  }
  return 0;
}

/* The bench's own arguments, without the relaunch's options, appended to args[k...]. */
static int append_bench_args(char **args, int k, const char *self, int argc, char **argv) {
  args[k++] = (char *)self;
  args[k++] = "bench";
  for (int i = 1; i < argc; i++) {
    int skip_value;
    if (relaunch_option(argv, i, &skip_value)) {
      i += skip_value;
      continue;
    }
    args[k++] = argv[i];
  }
  args[k] = NULL;
  return k;
}

/* `name` on PATH, into buf; 0 if it is not there. */
static int find_on_path(const char *name, char *buf, size_t cap) {
  const char *path = getenv("PATH");
  if (!path) return 0;
  for (const char *p = path; *p;) {
    size_t len = strcspn(p, ":");
    if (len > 0 && (size_t)snprintf(buf, cap, "%.*s/%s", (int)len, p, name) < cap &&
        access(buf, X_OK) == 0)
      return 1;
    p += len;
    if (*p == ':') p++;
  }
  return 0;
}

/* The MPI plugin the tasks load: TPURT_MPI_PLUGIN, else lib/libtpurt_mpi.so beside this
 * tool's bin/ (build/lib in the build tree, PREFIX/lib installed). Exits with a message
 * naming the file when it is missing. */
static void locate_mpi_plugin(const char *self) {
  const char *named = getenv("TPURT_MPI_PLUGIN");
  char path[PATH_MAX], resolved[PATH_MAX], dir[PATH_MAX];
  if (named && *named) {
    if (access(named, R_OK) != 0 || !realpath(named, resolved)) {
      fprintf(stderr, "tpurt bench: --transport mpi: TPURT_MPI_PLUGIN='%s': %s\n", named,
              strerror(errno));
      exit(EXIT_USAGE);
    }
    set_env("TPURT_MPI_PLUGIN", resolved);  /* absolute, whatever directory a rank runs in */
    return;
  }
  snprintf(dir, sizeof dir, "%s", self);
  snprintf(path, sizeof path, "%s/lib/libtpurt_mpi.so", dirname(dirname(dir)));
  if (!realpath(path, resolved)) {
    fprintf(stderr, "tpurt bench: --transport mpi: the MPI plugin %s is missing (%s): build it "
            "with `make mpi` (needs an MPI compiler), or set TPURT_MPI_PLUGIN to its path\n",
            path, strerror(errno));
    exit(1);
  }
  set_env("TPURT_MPI_PLUGIN", resolved);
}

/* TPURT_TASK_ADDRESSES for the ranks: n free loopback ports, so that the ranks do not
 * take the resolver's default 127.0.0.1:8888+i, which another job may hold. Each port
 * is free when picked; another process could take it before its rank binds it. */
static void set_task_addresses(long n) {
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int *ports = xcalloc((size_t)n, sizeof *ports), *sockets = xcalloc((size_t)n, sizeof *sockets);
  long bound = bind_free_ports((const struct sockaddr *)&addr, sizeof addr, (int)n, ports, sockets);
  if (bound < n) {
    fprintf(stderr, "tpurt bench: cannot pick a free port on 127.0.0.1 (%ld of %ld): %s\n",
            bound + 1, n, strerror(errno));
    exit(1);
  }
  size_t cap = (size_t)n * 24 + 1;
  char *list = xcalloc(cap, 1), *p = list;
  for (long i = 0; i < n; i++) {
    p += snprintf(p, cap - (size_t)(p - list), "%s127.0.0.1:%d", i ? "," : "", ports[i]);
    close(sockets[i]);
  }
  set_env("TPURT_TASK_ADDRESSES", list);
  free(list);
  free(ports);
  free(sockets);
}

/* mpirun --oversubscribe -n N on loopback, bounded by --timeout. */
static int relaunch_under_mpirun(const char *self, int argc, char **argv, long tasks,
                                 long cores, long timeout) {
  static char mpirun[PATH_MAX];
  locate_mpi_plugin(self);
  if (!find_on_path("mpirun", mpirun, sizeof mpirun)) {
    fprintf(stderr, "tpurt bench: --transport mpi: mpirun is not on PATH (Debian: "
            "apt-get install openmpi-bin)\n");
    return 1;
  }
  if (geteuid() == 0) {  /* Open MPI refuses root without both */
    set_env("OMPI_ALLOW_RUN_AS_ROOT", "1");
    set_env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
  }
  set_task_addresses(tasks);
  char n[32], seconds[32];
  snprintf(n, sizeof n, "%ld", tasks);
  snprintf(seconds, sizeof seconds, "%ld", timeout);
  char c[32];
  snprintf(c, sizeof c, "%ld", cores);
  set_env("TPURT_NUM_CORES", c);  /* what tpurt launch --cores-per-task sets */
  char **args = xcalloc((size_t)argc + 32, sizeof *args);
  int k = 0;
  const char *fixed[] = {mpirun, "--oversubscribe", "-n", n, "--timeout", seconds,
                         /* the runtime's and MPI's TCP stay on loopback */
                         "--mca", "oob_tcp_if_include", "lo", "--mca", "btl_tcp_if_include",
                         "lo"};
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) args[k++] = (char *)fixed[i];
  /* Local ranks inherit mpirun's environment; -x says which variables matter. */
  const char *vars[] = {"TPURT_BENCH_TASKS", "TPURT_BENCH_TRANSPORT", "TPURT_TRANSPORT",
                        "TPURT_MPI_PLUGIN", "TPURT_TASK_ADDRESSES", "TPURT_NUM_CORES"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    if (getenv(vars[i])) args[k++] = "-x", args[k++] = (char *)vars[i];
  append_bench_args(args, k, self, argc, argv);
  execv(mpirun, args);
  fprintf(stderr, "tpurt bench: cannot run %s: %s\n", mpirun, strerror(errno));
  return 1;
}

int bench_relaunch(int argc, char **argv, long tasks, long cores, const char *transport,
                   long timeout) {
  static char self[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) {
    perror("tpurt bench: /proc/self/exe");
    return 1;
  }
  self[len] = '\0';
  char n[32];
  snprintf(n, sizeof n, "%ld", tasks);
  set_env("TPURT_BENCH_TASKS", n);
  if (transport) {
    set_env("TPURT_BENCH_TRANSPORT", transport);
    set_env("TPURT_TRANSPORT", transport);
    if (!strcmp(transport, "mpi"))
      return relaunch_under_mpirun(self, argc, argv, tasks, cores, timeout);
  }
  char c[32], seconds[32];
  snprintf(c, sizeof c, "%ld", cores);
  snprintf(seconds, sizeof seconds, "%ld", timeout);
  char **args = xcalloc((size_t)argc + 16, sizeof *args);
  int k = 0;
  const char *fixed[] = {self, "launch", "-n", n, "--cores-per-task", c, "--timeout", seconds,
                         "--"};
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) args[k++] = (char *)fixed[i];
  append_bench_args(args, k, self, argc, argv);
  execv(self, args);
  perror("tpurt bench: cannot run tpurt launch");
  return 1;
}
