// tpurt's reductions as MPI datatypes and operations: MPI's own where it has them,
// user-defined operations (MPI_Op_create) for bfloat16 and half, which accumulate
// each pair of elements in float32 and round once, as the runtime's reduce does.
#pragma once

#include <mpi.h>

#include "tpurt/collectives.h"
#include "tpurt/common.h"

namespace tpurt {
namespace mpi {

class ReduceOps {
 public:
  // Creates the user-defined operations (MPI must be initialised).
  ReduceOps();
  // Frees them (before MPI_Finalize).
  ~ReduceOps();
  ReduceOps(const ReduceOps&) = delete;
  ReduceOps& operator=(const ReduceOps&) = delete;

  // The datatype and operation of dtype and op; false when MPI cannot reduce them
  // as the runtime does (integer MEAN, which divides a wider sum; bfloat16 and half
  // MEAN, which round once after dividing). MEAN maps to the sum: the caller divides.
  bool map(tpu_dtype dtype, tpu_reduce_op op, MPI_Datatype* type, MPI_Op* mpi_op) const;

 private:
  MPI_Op bf16_[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // SUM PROD MIN MAX
  MPI_Op half_[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
};

// x[i] /= divisor for the float types MEAN offloads (float32, float64, complex64).
void divide(tpu_dtype dtype, void* x, uint64_t count, int divisor);

}  // namespace mpi
}  // namespace tpurt
