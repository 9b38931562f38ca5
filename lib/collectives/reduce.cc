#include "collectives/reduce.h"

#include <algorithm>
#include <complex>
#include <cstring>
#include <type_traits>

#include "core/dtype.h"
#include "core/float16.h"
#include "core/status.h"

namespace tpurt {
namespace {

struct Sum { template <typename T> static T apply(T a, T b) { return a + b; } };
struct Prod { template <typename T> static T apply(T a, T b) { return a * b; } };
struct Min { template <typename T> static T apply(T a, T b) { return b < a ? b : a; } };
struct Max { template <typename T> static T apply(T a, T b) { return a < b ? b : a; } };

// Integer sums wrap: do them in the unsigned type so overflow is defined.
template <typename T>
struct Wrapping {
  using U = std::make_unsigned_t<T>;
  static T add(T a, T b) { return static_cast<T>(static_cast<U>(a) + static_cast<U>(b)); }
  static T mul(T a, T b) { return static_cast<T>(static_cast<U>(a) * static_cast<U>(b)); }
};

// Folds K sources into dst in one pass, left to right: reading the sources together
// keeps more memory requests in flight than one pass per source (measured 1.65x
// faster for 8 sources of 16 MiB), and the order of operations is unchanged.
template <typename T, typename Op, int K, bool First>
void fold_pass(const T* const* s, T* __restrict dst, int64_t count) {
  // Restrict-qualified locals let the compiler vectorise without alias checks.
  const T* __restrict p0 = s[0];
  const T* __restrict p1 = s[K > 1 ? 1 : 0];
  const T* __restrict p2 = s[K > 2 ? 2 : 0];
  const T* __restrict p3 = s[K > 3 ? 3 : 0];
  const T* __restrict p4 = s[K > 4 ? 4 : 0];
  const T* __restrict p5 = s[K > 5 ? 5 : 0];
  const T* __restrict p6 = s[K > 6 ? 6 : 0];
  const T* __restrict p7 = s[K > 7 ? 7 : 0];
  for (int64_t i = 0; i < count; ++i) {
    T acc;
    if constexpr (First) acc = p0[i];
    else acc = Op::apply(dst[i], p0[i]);
    if constexpr (K > 1) acc = Op::apply(acc, p1[i]);
    if constexpr (K > 2) acc = Op::apply(acc, p2[i]);
    if constexpr (K > 3) acc = Op::apply(acc, p3[i]);
    if constexpr (K > 4) acc = Op::apply(acc, p4[i]);
    if constexpr (K > 5) acc = Op::apply(acc, p5[i]);
    if constexpr (K > 6) acc = Op::apply(acc, p6[i]);
    if constexpr (K > 7) acc = Op::apply(acc, p7[i]);
    dst[i] = acc;
  }
}

template <typename T, typename Op, int K>
void fold_pass(const T* const* s, bool first, T* dst, int64_t count) {
  if (first) fold_pass<T, Op, K, true>(s, dst, count);
  else fold_pass<T, Op, K, false>(s, dst, count);
}

template <typename T, typename Op>
void fold(const T* const* s, int k, bool first, T* dst, int64_t count) {
  switch (k) {
    case 1: fold_pass<T, Op, 1>(s, first, dst, count); break;
    case 2: fold_pass<T, Op, 2>(s, first, dst, count); break;
    case 3: fold_pass<T, Op, 3>(s, first, dst, count); break;
    case 4: fold_pass<T, Op, 4>(s, first, dst, count); break;
    case 5: fold_pass<T, Op, 5>(s, first, dst, count); break;
    case 6: fold_pass<T, Op, 6>(s, first, dst, count); break;
    case 7: fold_pass<T, Op, 7>(s, first, dst, count); break;
    default: fold_pass<T, Op, 8>(s, first, dst, count); break;
  }
}

// dst = fold of the sources; onto_dst: dst already holds the fold so far.
template <typename T, typename Op>
void combine(const void* const* srcs, int n, T* dst, int64_t count, bool onto_dst = false) {
  constexpr int kPerPass = 8;
  const T* s[kPerPass];
  for (int base = 0; base < n; base += kPerPass) {
    int k = std::min(kPerPass, n - base);
    for (int j = 0; j < k; ++j) s[j] = static_cast<const T*>(srcs[base + j]);
    fold<T, Op>(s, k, base == 0 && !onto_dst, dst, count);
  }
}

template <typename T>
struct IntSum { static T apply(T a, T b) { return Wrapping<T>::add(a, b); } };
template <typename T>
struct IntProd { static T apply(T a, T b) { return Wrapping<T>::mul(a, b); } };

// The integer mean: summed in a type wide enough for 2^31 values of T (sums wrap,
// a mean must not), then divided, truncating toward zero.
template <typename T>
void int_mean(const void* const* srcs, int n, T* dst, int64_t count) {
  using Wide = std::conditional_t<(sizeof(T) < 8), std::conditional_t<std::is_signed<T>::value, int64_t, uint64_t>,
                                  std::conditional_t<std::is_signed<T>::value, __int128, unsigned __int128>>;
  constexpr int64_t kPiece = 512;
  Wide acc[kPiece];
  for (int64_t base = 0; base < count; base += kPiece) {
    const int64_t m = std::min(kPiece, count - base);
    for (int64_t i = 0; i < m; ++i) acc[i] = 0;
    for (int j = 0; j < n; ++j) {
      const T* sj = static_cast<const T*>(srcs[j]) + base;
      for (int64_t i = 0; i < m; ++i) acc[i] += sj[i];
    }
    for (int64_t i = 0; i < m; ++i) dst[base + i] = static_cast<T>(acc[i] / static_cast<Wide>(n));
  }
}

template <typename T>
void reduce_typed(tpu_reduce_op op, const void* const* srcs, int n, T* dst, int64_t count) {
  constexpr bool is_int = std::is_integral<T>::value && !std::is_same<T, bool>::value;
  switch (op) {
    case TPU_REDUCE_SUM:
      if constexpr (is_int) combine<T, IntSum<T>>(srcs, n, dst, count);
      else combine<T, Sum>(srcs, n, dst, count);
      break;
    case TPU_REDUCE_MEAN:
      if constexpr (is_int) {
        int_mean<T>(srcs, n, dst, count);
      } else {
        combine<T, Sum>(srcs, n, dst, count);
        if (n > 1)
          for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<T>(dst[i] / static_cast<T>(n));
      }
      break;
    case TPU_REDUCE_PROD:
      if constexpr (is_int) combine<T, IntProd<T>>(srcs, n, dst, count);
      else combine<T, Prod>(srcs, n, dst, count);
      break;
    case TPU_REDUCE_MIN: combine<T, Min>(srcs, n, dst, count); break;
    case TPU_REDUCE_MAX: combine<T, Max>(srcs, n, dst, count); break;
  }
}

void reduce_bool(tpu_reduce_op op, const void* const* srcs, int n, uint8_t* dst, int64_t count) {
  // MIN is logical and, MAX logical or; any nonzero byte counts as true.
  for (int64_t i = 0; i < count; ++i) {
    bool acc = static_cast<const uint8_t*>(srcs[0])[i] != 0;
    for (int j = 1; j < n; ++j) {
      bool v = static_cast<const uint8_t*>(srcs[j])[i] != 0;
      acc = op == TPU_REDUCE_MIN ? (acc && v) : (acc || v);
    }
    dst[i] = acc;
  }
}

// acc[i] op= s[i] in float32, as bfloat16 and half reductions accumulate.
template <float (*ToFloat)(uint16_t)>
void accumulate_half(tpu_reduce_op op, const uint16_t* s, float* acc, int64_t m) {
  switch (op) {
    case TPU_REDUCE_SUM:
    case TPU_REDUCE_MEAN: for (int64_t i = 0; i < m; ++i) acc[i] += ToFloat(s[i]); break;
    case TPU_REDUCE_PROD: for (int64_t i = 0; i < m; ++i) acc[i] *= ToFloat(s[i]); break;
    case TPU_REDUCE_MIN: for (int64_t i = 0; i < m; ++i) acc[i] = Min::apply(acc[i], ToFloat(s[i])); break;
    case TPU_REDUCE_MAX: for (int64_t i = 0; i < m; ++i) acc[i] = Max::apply(acc[i], ToFloat(s[i])); break;
  }
}

// Folds the sources onto acc (acc_in: the fold so far, else the first source starts it).
template <float (*ToFloat)(uint16_t)>
void fold_half(tpu_reduce_op op, const float* acc_in, const void* const* srcs, int n, float* acc,
               int64_t m) {
  int first = 0;
  if (acc_in) {
    if (acc != acc_in) std::memcpy(acc, acc_in, static_cast<size_t>(m) * sizeof(float));
  } else {
    const uint16_t* s0 = static_cast<const uint16_t*>(srcs[0]);
    for (int64_t i = 0; i < m; ++i) acc[i] = ToFloat(s0[i]);
    first = 1;
  }
  for (int j = first; j < n; ++j) accumulate_half<ToFloat>(op, static_cast<const uint16_t*>(srcs[j]), acc, m);
}

// Rounds the float32 fold of n sources once, dividing first for MEAN.
template <uint16_t (*FromFloat)(float)>
void finish_half(tpu_reduce_op op, float* acc, int n, uint16_t* dst, int64_t m) {
  if (op == TPU_REDUCE_MEAN)
    for (int64_t i = 0; i < m; ++i) acc[i] /= static_cast<float>(n);
  for (int64_t i = 0; i < m; ++i) dst[i] = FromFloat(acc[i]);
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void reduce_half(tpu_reduce_op op, const void* const* srcs, int n, uint16_t* dst, int64_t count) {
  constexpr int64_t kPiece = 1024;
  float acc[kPiece];
  SourceList piece(n);
  for (int64_t base = 0; base < count; base += kPiece) {
    int64_t m = std::min(kPiece, count - base);
    for (int j = 0; j < n; ++j) piece.data()[j] = static_cast<const uint16_t*>(srcs[j]) + base;
    fold_half<ToFloat>(op, nullptr, piece.data(), n, acc, m);
    finish_half<FromFloat>(op, acc, n, dst + base, m);
  }
}

// The float types' partial fold and finish (SUM, PROD and MEAN, which folds as SUM).
template <typename T>
void fold_partial_typed(tpu_reduce_op op, const void* acc_in, const void* const* srcs, int n,
                        T* acc, int64_t count) {
  if (acc_in && acc_in != acc) std::memcpy(acc, acc_in, static_cast<size_t>(count) * sizeof(T));
  if (op == TPU_REDUCE_PROD) combine<T, Prod>(srcs, n, acc, count, acc_in != nullptr);
  else combine<T, Sum>(srcs, n, acc, count, acc_in != nullptr);
}

template <typename T>
void finish_partial_typed(tpu_reduce_op op, const T* acc, int n, T* dst, int64_t count) {
  if (op == TPU_REDUCE_MEAN && n > 1) {
    for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<T>(acc[i] / static_cast<T>(n));
  } else if (dst != acc) {
    std::memcpy(dst, acc, static_cast<size_t>(count) * sizeof(T));
  }
}

}  // namespace

void check_reduction(tpu_dtype dtype, tpu_reduce_op op) {
  if (op < TPU_REDUCE_SUM || op > TPU_REDUCE_MEAN) invalid_argument("unknown reduce op ", static_cast<int>(op));
  checked_dtype_size(dtype);
  if (dtype == TPU_BOOL && op != TPU_REDUCE_MIN && op != TPU_REDUCE_MAX)
    invalid_argument("bool tensors can only be reduced with MIN (and) or MAX (or)");
  if (dtype == TPU_COMPLEX64 && (op == TPU_REDUCE_MIN || op == TPU_REDUCE_MAX))
    invalid_argument("complex64 tensors have no MIN or MAX");
}

void reduce(tpu_dtype dtype, tpu_reduce_op op, const void* const* srcs, int n, int64_t offset,
            int64_t count, void* dst) {
  SourceList shifted(offset != 0 ? n : 0);
  const void* const* buf = srcs;
  if (offset != 0) {
    const size_t esize = dtype_size(dtype);
    for (int j = 0; j < n; ++j) shifted.data()[j] = static_cast<const char*>(srcs[j]) + offset * esize;
    buf = shifted.data();
  }
  void* d = dst;
  switch (dtype) {
    case TPU_FLOAT: reduce_typed<float>(op, buf, n, static_cast<float*>(d), count); break;
    case TPU_DOUBLE: reduce_typed<double>(op, buf, n, static_cast<double*>(d), count); break;
    case TPU_INT32: reduce_typed<int32_t>(op, buf, n, static_cast<int32_t*>(d), count); break;
    case TPU_UINT8: reduce_typed<uint8_t>(op, buf, n, static_cast<uint8_t*>(d), count); break;
    case TPU_INT16: reduce_typed<int16_t>(op, buf, n, static_cast<int16_t*>(d), count); break;
    case TPU_INT8: reduce_typed<int8_t>(op, buf, n, static_cast<int8_t*>(d), count); break;
    case TPU_INT64: reduce_typed<int64_t>(op, buf, n, static_cast<int64_t*>(d), count); break;
    case TPU_UINT32: reduce_typed<uint32_t>(op, buf, n, static_cast<uint32_t*>(d), count); break;
    case TPU_UINT64: reduce_typed<uint64_t>(op, buf, n, static_cast<uint64_t*>(d), count); break;
    case TPU_COMPLEX64: {
      auto* c = static_cast<std::complex<float>*>(d);
      switch (op) {
        case TPU_REDUCE_SUM:
        case TPU_REDUCE_MEAN:
          combine<std::complex<float>, Sum>(buf, n, c, count);
          if (op == TPU_REDUCE_MEAN && n > 1)
            for (int64_t i = 0; i < count; ++i) c[i] /= static_cast<float>(n);
          break;
        case TPU_REDUCE_PROD: combine<std::complex<float>, Prod>(buf, n, c, count); break;
        default: break;
      }
      break;
    }
    case TPU_BOOL: reduce_bool(op, buf, n, static_cast<uint8_t*>(d), count); break;
    case TPU_BFLOAT16: reduce_half<bf16_to_float, float_to_bf16>(op, buf, n, static_cast<uint16_t*>(d), count); break;
    case TPU_HALF: reduce_half<half_to_float, float_to_half>(op, buf, n, static_cast<uint16_t*>(d), count); break;
  }
}

bool partials_exact(tpu_dtype dtype, tpu_reduce_op op) {
  if (op == TPU_REDUCE_MIN || op == TPU_REDUCE_MAX) return dtype != TPU_COMPLEX64;
  if (op == TPU_REDUCE_MEAN) return false;
  switch (dtype) {
    case TPU_INT8: case TPU_INT16: case TPU_INT32: case TPU_INT64:
    case TPU_UINT8: case TPU_UINT32: case TPU_UINT64: case TPU_BOOL:
      return true;
    default:
      return false;
  }
}

bool partial_fold_supported(tpu_dtype dtype, tpu_reduce_op op) {
  if (op != TPU_REDUCE_SUM && op != TPU_REDUCE_PROD && op != TPU_REDUCE_MEAN) return false;
  switch (dtype) {
    case TPU_FLOAT: case TPU_DOUBLE: case TPU_COMPLEX64: case TPU_BFLOAT16: case TPU_HALF:
      return true;
    default: return false;
  }
}

tpu_dtype partial_dtype(tpu_dtype dtype) {
  return dtype == TPU_BFLOAT16 || dtype == TPU_HALF ? TPU_FLOAT : dtype;
}

void fold_partial(tpu_dtype dtype, tpu_reduce_op op, const void* acc_in, const void* const* srcs,
                  int n, int64_t offset, int64_t count, void* acc) {
  SourceList shifted(n);
  const void** buf = shifted.data();
  const size_t esize = dtype_size(dtype);
  for (int j = 0; j < n; ++j) buf[j] = static_cast<const char*>(srcs[j]) + offset * esize;
  switch (dtype) {
    case TPU_FLOAT: fold_partial_typed<float>(op, acc_in, buf, n, static_cast<float*>(acc), count); break;
    case TPU_DOUBLE: fold_partial_typed<double>(op, acc_in, buf, n, static_cast<double*>(acc), count); break;
    case TPU_COMPLEX64:
      fold_partial_typed<std::complex<float>>(op, acc_in, buf, n, static_cast<std::complex<float>*>(acc), count);
      break;
    case TPU_BFLOAT16:
      fold_half<bf16_to_float>(op, static_cast<const float*>(acc_in), buf, n, static_cast<float*>(acc), count);
      break;
    case TPU_HALF:
      fold_half<half_to_float>(op, static_cast<const float*>(acc_in), buf, n, static_cast<float*>(acc), count);
      break;
    default: fail(TPU_INTERNAL, "no partial fold for dtype ", static_cast<int>(dtype));
  }
}

void finish_partial(tpu_dtype dtype, tpu_reduce_op op, void* acc, int members, int64_t count, void* dst) {
  switch (dtype) {
    case TPU_FLOAT:
      finish_partial_typed<float>(op, static_cast<float*>(acc), members, static_cast<float*>(dst), count);
      break;
    case TPU_DOUBLE:
      finish_partial_typed<double>(op, static_cast<double*>(acc), members, static_cast<double*>(dst), count);
      break;
    case TPU_COMPLEX64: {
      auto* a = static_cast<std::complex<float>*>(acc);
      auto* d = static_cast<std::complex<float>*>(dst);
      if (d != a) std::memcpy(d, a, static_cast<size_t>(count) * sizeof *d);
      if (op == TPU_REDUCE_MEAN && members > 1)
        for (int64_t i = 0; i < count; ++i) d[i] /= static_cast<float>(members);
      break;
    }
    case TPU_BFLOAT16:
      finish_half<float_to_bf16>(op, static_cast<float*>(acc), members, static_cast<uint16_t*>(dst), count);
      break;
    case TPU_HALF:
      finish_half<float_to_half>(op, static_cast<float*>(acc), members, static_cast<uint16_t*>(dst), count);
      break;
    default: fail(TPU_INTERNAL, "no partial fold for dtype ", static_cast<int>(dtype));
  }
}

}  // namespace tpurt
