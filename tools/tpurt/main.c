/* tpurt: the command-line front end of the tpurt runtime (public C ABI only). */
#include <stdio.h>
#include <string.h>

#include "common.h"

const char tpurt_usage[] =
    "usage: tpurt <command> [options]\n"
    "\n"
    "commands:\n"
    "  info     start a system and print its topology and device assignment\n"
    "             --cores N                logical cores (default: online CPUs)\n"
    "             --mesh X,Y,Z,C           mesh shape (product = cores)\n"
    "             --replicas R             show tpu_device_assignment_build for R replicas\n"
    "             --computation-shape A,B,C,D   cores per replica (default 1,1,1,1)\n"
    "  bench    nccl-tests-style sweep of one collective\n"
    "             -c COLLECTIVE   all_reduce (default), cross_replica_sum, all_gather,\n"
    "                             reduce_scatter, all_to_all, collective_permute,\n"
    "                             broadcast, empty (= --step)\n"
    "             -b MIN -e MAX   per-replica input bytes, K/M/G suffixes (8 .. 64M)\n"
    "             -f FACTOR       size multiplier between rows (4)\n"
    "             -r REPLICAS     replicas = logical cores (default: online CPUs)\n"
    "             -d DTYPE        float32 (default), float64, bfloat16, float16, int8,\n"
    "                             int16, int32, int64, uint8, uint32, uint64\n"
    "             -o OP           sum (default), prod, min, max, mean\n"
    "             -n ITERS        fixed iterations per size (default: adaptive, ~0.3 s)\n"
    "             --pin MODE      worker pinning: auto (default), always, never\n"
    "             --private       a private copy of the result per replica (default: shared)\n"
    "             --csv           comma-separated rows instead of the table\n"
    "             --check, --no-check   verify the last call's output (default on)\n"
    "             --step          median time of an empty replicated step\n"
    "  demo     data-parallel linear regression with cross_replica_sum\n"
    "             --cores N       replicas = logical cores (default: online CPUs)\n"
    "             --steps S       SGD steps (default 100)\n"
    "  version  print the tool and runtime versions\n"
    "\n"
    "Exit status: 0 success, 1 a library call or a check failed, 2 bad usage.\n";

int is_help(const char *arg) { return !strcmp(arg, "--help") || !strcmp(arg, "-h"); }

int main(int argc, char **argv) {
  if (argc < 2) {
    fputs(tpurt_usage, stderr);
    return EXIT_USAGE;
  }
  const char *command = argv[1];
  if (is_help(command) || !strcmp(command, "help")) {
    fputs(tpurt_usage, stdout);
    return 0;
  }
  if (!strcmp(command, "version") || !strcmp(command, "--version")) {
    printf("tpurt %d.%d.%d (runtime %s)\n", TPU_VERSION_MAJOR, TPU_VERSION_MINOR,
           TPU_VERSION_PATCH, tpu_version());
    return 0;
  }
  /* Subcommands see argv from their own name on, so options start at index 1. */
  if (!strcmp(command, "info")) return cmd_info(argc - 1, argv + 1);
  if (!strcmp(command, "bench")) return cmd_bench(argc - 1, argv + 1);
  if (!strcmp(command, "demo")) return cmd_demo(argc - 1, argv + 1);
  fprintf(stderr, "tpurt: unknown command '%s'\n\n%s", command, tpurt_usage);
  return EXIT_USAGE;
}
