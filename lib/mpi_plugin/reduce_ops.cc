#include "mpi_plugin/reduce_ops.h"

#include <algorithm>
#include <complex>
#include <cstdint>

#include "core/float16.h"

namespace tpurt {
namespace mpi {
namespace {

struct Add { float operator()(float a, float b) const { return a + b; } };
struct Mul { float operator()(float a, float b) const { return a * b; } };
struct Min { float operator()(float a, float b) const { return b < a ? b : a; } };
struct Max { float operator()(float a, float b) const { return b > a ? b : a; } };

// inout[i] = in[i] op inout[i], in float32, rounded once. MPI passes its partial
// results as `in` and `inout` alike; the ops are commutative, so the order of the
// pair does not matter.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float), typename Op>
void pairwise(void* in, void* inout, int* len, MPI_Datatype*) {
  const uint16_t* a = static_cast<const uint16_t*>(in);
  uint16_t* b = static_cast<uint16_t*>(inout);
  Op op;
  for (int i = 0; i < *len; ++i) b[i] = FromFloat(op(ToFloat(b[i]), ToFloat(a[i])));
}

float bf16_in(uint16_t h) { return bf16_to_float(h); }
uint16_t bf16_out(float f) { return float_to_bf16(f); }
float half_in(uint16_t h) { return half_to_float(h); }
uint16_t half_out(float f) { return float_to_half(f); }

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void create_ops(MPI_Op ops[4]) {
  MPI_Op_create(&pairwise<ToFloat, FromFloat, Add>, 1, &ops[0]);
  MPI_Op_create(&pairwise<ToFloat, FromFloat, Mul>, 1, &ops[1]);
  MPI_Op_create(&pairwise<ToFloat, FromFloat, Min>, 1, &ops[2]);
  MPI_Op_create(&pairwise<ToFloat, FromFloat, Max>, 1, &ops[3]);
}

MPI_Op builtin(tpu_reduce_op op) {
  switch (op) {
    case TPU_REDUCE_SUM: case TPU_REDUCE_MEAN: return MPI_SUM;
    case TPU_REDUCE_PROD: return MPI_PROD;
    case TPU_REDUCE_MIN: return MPI_MIN;
    case TPU_REDUCE_MAX: return MPI_MAX;
  }
  return MPI_OP_NULL;
}

}  // namespace

ReduceOps::ReduceOps() {
  create_ops<bf16_in, bf16_out>(bf16_);
  create_ops<half_in, half_out>(half_);
}

ReduceOps::~ReduceOps() {
  for (MPI_Op* ops : {bf16_, half_})
    for (int i = 0; i < 4; ++i)
      if (ops[i] != MPI_OP_NULL) MPI_Op_free(&ops[i]);
}

bool ReduceOps::map(tpu_dtype dtype, tpu_reduce_op op, MPI_Datatype* type, MPI_Op* mpi_op) const {
  if (op < TPU_REDUCE_SUM || op > TPU_REDUCE_MEAN) return false;
  const bool minmax = op == TPU_REDUCE_MIN || op == TPU_REDUCE_MAX;
  *mpi_op = builtin(op);
  // Integer sums and products wrap in the runtime: unsigned arithmetic of the same
  // width gives those bits (signed overflow is undefined in MPI's C kernels).
  auto integer = [&](MPI_Datatype as_signed, MPI_Datatype as_unsigned) {
    if (op == TPU_REDUCE_MEAN) return false;
    *type = minmax ? as_signed : as_unsigned;
    return true;
  };
  switch (dtype) {
    case TPU_FLOAT: *type = MPI_FLOAT; return true;
    case TPU_DOUBLE: *type = MPI_DOUBLE; return true;
    case TPU_COMPLEX64: *type = MPI_C_FLOAT_COMPLEX; return !minmax;
    case TPU_INT8: return integer(MPI_INT8_T, MPI_UINT8_T);
    case TPU_INT16: return integer(MPI_INT16_T, MPI_UINT16_T);
    case TPU_INT32: return integer(MPI_INT32_T, MPI_UINT32_T);
    case TPU_INT64: return integer(MPI_INT64_T, MPI_UINT64_T);
    case TPU_UINT8: return integer(MPI_UINT8_T, MPI_UINT8_T);
    case TPU_UINT32: return integer(MPI_UINT32_T, MPI_UINT32_T);
    case TPU_UINT64: return integer(MPI_UINT64_T, MPI_UINT64_T);
    case TPU_BOOL: *type = MPI_UINT8_T; return minmax;  // 0 or 1 in a byte
    case TPU_BFLOAT16:
    case TPU_HALF:
      if (op == TPU_REDUCE_MEAN) return false;
      *type = MPI_UINT16_T;
      *mpi_op = (dtype == TPU_BFLOAT16 ? bf16_ : half_)[op == TPU_REDUCE_SUM ? 0 : op == TPU_REDUCE_PROD ? 1
                                                        : op == TPU_REDUCE_MIN ? 2 : 3];
      return true;
  }
  return false;
}

void divide(tpu_dtype dtype, void* x, uint64_t count, int divisor) {
  if (divisor <= 1) return;
  switch (dtype) {
    case TPU_FLOAT: {
      float* f = static_cast<float*>(x);
      for (uint64_t i = 0; i < count; ++i) f[i] = f[i] / static_cast<float>(divisor);
      break;
    }
    case TPU_DOUBLE: {
      double* d = static_cast<double*>(x);
      for (uint64_t i = 0; i < count; ++i) d[i] = d[i] / static_cast<double>(divisor);
      break;
    }
    case TPU_COMPLEX64: {
      auto* c = static_cast<std::complex<float>*>(x);
      for (uint64_t i = 0; i < count; ++i) c[i] /= static_cast<float>(divisor);
      break;
    }
    default: break;
  }
}

}  // namespace mpi
}  // namespace tpurt
