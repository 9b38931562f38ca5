/* yield_round: how long P processes, bound round-robin to C CPUs, take to each run
 * once when all they do is sched_yield: the scheduler's floor under a collective of
 * P single-core tasks on C CPUs (each task must run once per collective).
 * Not part of make:
 *   gcc -O2 bench/yield_round.c -o build/yield_round && build/yield_round 8 2 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double seconds_since(const struct timespec *a) {
  struct timespec b;
  clock_gettime(CLOCK_MONOTONIC, &b);
  return (double)(b.tv_sec - a->tv_sec) + (double)(b.tv_nsec - a->tv_nsec) * 1e-9;
}

int main(int argc, char **argv) {
  const int procs = argc > 1 ? atoi(argv[1]) : 8, cpus = argc > 2 ? atoi(argv[2]) : 2;
  if (procs < 1 || cpus < 1) {
    fprintf(stderr, "usage: yield_round [processes=8] [cpus=2]\n");
    return 2;
  }
  for (int i = 0; i < procs; i++) {
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid > 0) continue;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(i % cpus, &set);
    if (sched_setaffinity(0, sizeof set, &set)) _exit(1);
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    long yields = 0;
    do {  /* a second's worth, checked every thousand yields */
      for (int k = 0; k < 1000; k++) sched_yield();
      yields += 1000;
    } while (seconds_since(&start) < 1.0);
    const double us = seconds_since(&start) / (double)yields * 1e6;
    if (i == 0) {
      const int per_cpu = (procs + cpus - 1) / cpus;
      printf("%d processes on %d CPUs: a round (each runs once) %.3f us, a turn (yield and switch) %.3f us\n",
             procs, cpus, us, us / per_cpu);
      fflush(stdout);
    }
    _exit(0);
  }
  while (wait(NULL) > 0) {
  }
  return 0;
}
