/* The meeting floor: bare threads, one per replica, meeting at a barrier with no
 * library code, waiting the way tpurt does (spinning while threads fit the usable
 * CPUs; when they outnumber them, pinned round-robin and yielding, but spinning once
 * every thread on the same CPU has arrived). No collective
 * among that many replicas can be faster, so the bench prints it beside its rows,
 * as it prints the memcpy ceiling beside busbw. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

/* Rounds per run: at most this many thread-rounds (20000 rounds of 8 threads), and no
 * more than fit in FLOOR_RUN_SECONDS at the time per meeting of a first, short run,
 * since a meeting costs more than linearly in the threads once they outnumber the
 * CPUs (512 threads on 2 CPUs: ~6 ms). */
#define FLOOR_WORK_YIELDING 160000L
#define FLOOR_WORK_SPINNING 400000L
#define FLOOR_MIN_ROUNDS 10L
#define FLOOR_RUN_SECONDS 0.1
#define FLOOR_REPEATS 3
/* Above this many threads the measurement is announced on stderr. */
#define FLOOR_PROGRESS_THREADS 64

typedef struct {
  _Alignas(64) atomic_long arrived; /* the last round this thread reached */
} floor_slot;

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield" ::: "memory");
#endif
}

typedef struct {
  floor_slot *slots;
  atomic_int *go; /* 0: wait for every thread to start; 1: run; -1: give up */
  int threads, me, cpu, yielding, ncpus;
  long rounds;
  double seconds;
} floor_thread;

/* Threads i, i + C, i + 2C, ... share a CPU (C = usable CPUs). */
static int cpu_mates_arrived(const floor_thread *t, long round) {
  for (int q = t->me % t->ncpus; q < t->threads; q += t->ncpus)
    if (atomic_load(&t->slots[q].arrived) < round) return 0;
  return 1;
}

static void *meet_repeatedly(void *arg) {
  floor_thread *t = arg;
  if (t->cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(t->cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  }
  while (atomic_load(t->go) == 0) sched_yield();
  if (atomic_load(t->go) < 0) return NULL;
  double t0 = now_seconds();
  for (long round = 1; round <= t->rounds; round++) {
    atomic_store(&t->slots[t->me].arrived, round);
    for (int peer = 0; peer < t->threads; peer++)
      while (atomic_load(&t->slots[peer].arrived) < round) {
        if (t->yielding && !cpu_mates_arrived(t, round)) sched_yield();
        else cpu_relax();
      }
  }
  t->seconds = now_seconds() - t0;
  return NULL;
}

/* One run: the slowest thread's time per meeting, or a negative value on failure. */
static double floor_run(int threads, const int *cpus, int ncpus, long rounds) {
  floor_slot *slots = aligned_alloc(64, sizeof(floor_slot) * (size_t)threads);
  if (!slots) return -1;
  floor_thread *args = xcalloc((size_t)threads, sizeof *args);
  pthread_t *ids = xcalloc((size_t)threads, sizeof *ids);
  atomic_int go = 0;
  int yielding = threads > ncpus, started = 0;
  for (int i = 0; i < threads; i++) atomic_init(&slots[i].arrived, 0);
  for (int i = 0; i < threads; i++) {
    args[i] = (floor_thread){slots, &go, threads, i, yielding ? cpus[i % ncpus] : -1,
                             yielding, ncpus, rounds, 0};
    if (pthread_create(&ids[i], NULL, meet_repeatedly, &args[i]) != 0) break;
    started++;
  }
  atomic_store(&go, started == threads ? 1 : -1);  /* nobody waits for a missing thread */
  double slowest = 0;
  for (int i = 0; i < started; i++) {
    pthread_join(ids[i], NULL);
    if (args[i].seconds > slowest) slowest = args[i].seconds;
  }
  double per_meeting = started == threads ? slowest / (double)rounds : -1;
  free(ids);
  free(args);
  free(slots);
  return per_meeting;
}

double bench_meeting_floor_us(int threads) {
  cpu_set_t set;
  int cpus[CPU_SETSIZE], ncpus = 0;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; c++)
      if (CPU_ISSET(c, &set)) cpus[ncpus++] = c;
  if (ncpus == 0) return -1;
  long work = threads > ncpus ? FLOOR_WORK_YIELDING : FLOOR_WORK_SPINNING;
  int verbose = threads > FLOOR_PROGRESS_THREADS;
  double t0 = now_seconds();
  if (verbose)
    fprintf(stderr, "tpurt bench: measuring the meeting floor of %d threads...\n", threads);
  /* The first run is short and sizes the others; it competes for the best too. */
  double best = floor_run(threads, cpus, ncpus, FLOOR_MIN_ROUNDS);
  if (best < 0) return -1;
  long rounds = (long)(FLOOR_RUN_SECONDS / best);
  if (rounds > work / threads) rounds = work / threads;
  if (rounds < FLOOR_MIN_ROUNDS) rounds = FLOOR_MIN_ROUNDS;
  for (int rep = 0; rep < FLOOR_REPEATS; rep++) {
    double t = floor_run(threads, cpus, ncpus, rounds);
    if (t > 0 && t < best) best = t;
  }
  if (verbose)
    fprintf(stderr, "tpurt bench: meeting floor measured in %.1f s (%d runs of %ld rounds)\n",
            now_seconds() - t0, FLOOR_REPEATS, rounds);
  return best < 0 ? -1 : best * 1e6;
}
