/* Open MPI's point-to-point over shared memory, measured as bench/shm_transport.cc
 * measures tpurt's transports (same four figures, median of RUNS runs):
 *   mpicc -O2 bench/shm_mpi_reference.c -o build/shm_mpi_reference
 *   mpirun --oversubscribe --allow-run-as-root --mca btl self,vader -np 2 build/shm_mpi_reference 5
 * Not part of make. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static double median(double* v, int n) {
  qsort(v, n, sizeof *v, cmp);
  return v[n / 2];
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int me, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  int runs = argc > 1 ? atoi(argv[1]) : 5;
  if (runs < 1 || runs > 100) runs = 5;
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  const size_t big = 16u << 20;
  char* out = malloc(big);
  char* in = malloc(big);
  memset(out, me, big);
  memset(in, 0, big);
  uint64_t so = me, si = 0;
  double pp[100], r8[100], ow[100], rb[100], ar[100];
  for (int r = 0; r <= runs; ++r) {
    const int iters = 20000;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) {
      if (me == 0) {
        MPI_Send(&so, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
        MPI_Recv(&si, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (me == 1) {
        MPI_Recv(&si, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(&so, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
      }
    }
    if (r) pp[r - 1] = (MPI_Wtime() - t0) / iters / 2;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i)
      MPI_Sendrecv(&so, 8, MPI_BYTE, next, 0, &si, 8, MPI_BYTE, prev, 0, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
    if (r) r8[r - 1] = (MPI_Wtime() - t0) / iters;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    double x = me, y = 0;
    for (int i = 0; i < iters; ++i) MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (r) ar[r - 1] = (MPI_Wtime() - t0) / iters;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (int i = 0; i < 20; ++i) {
      if (me == 0) MPI_Send(out, (int)big, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
      else if (me == 1) MPI_Recv(in, (int)big, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    if (me == 1) MPI_Send(&so, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
    if (me == 0) MPI_Recv(&si, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (r) ow[r - 1] = (MPI_Wtime() - t0) / 20;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (int i = 0; i < 10; ++i)
      MPI_Sendrecv(out, (int)big, MPI_BYTE, next, 0, in, (int)big, MPI_BYTE, prev, 0,
                   MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (r) rb[r - 1] = (MPI_Wtime() - t0) / 10;
  }
  if (me == 0) {
    printf("Open MPI, %d ranks (median of %d runs):\n", n, runs);
    printf("pingpong 8 B half round trip: %.2f us\n", median(pp, runs) * 1e6);
    printf("ring8 8 B to the next, from the previous: %.2f us per round\n", median(r8, runs) * 1e6);
    printf("allreduce 8 B (MPI_Allreduce, one double): %.2f us\n", median(ar, runs) * 1e6);
    printf("oneway 16 MiB from rank 0 to 1: %.2f GB/s\n", big / median(ow, runs) / 1e9);
    printf("ring16M 16 MiB to the next, from the previous: %.2f GB/s per rank\n",
           big / median(rb, runs) / 1e9);
  }
  free(out);
  free(in);
  MPI_Finalize();
  return 0;
}
