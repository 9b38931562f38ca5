// Binding-support layer (../tpurt_binding.hpp): the C ABI's enumerations, tpurt::Error,
// the detail:: helpers the other support headers use, and the free functions.
#ifndef TPURT_BINDING_SUPPORT_COMMON_HPP
#define TPURT_BINDING_SUPPORT_COMMON_HPP

#include <tpurt.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace tpurt {

// The C ABI's enumerations, with TensorFlow's numbers (checked below).
enum class Status : int {
  Ok = 0, Cancelled = 1, Unknown = 2, InvalidArgument = 3, DeadlineExceeded = 4, NotFound = 5,
  AlreadyExists = 6, PermissionDenied = 7, ResourceExhausted = 8, FailedPrecondition = 9,
  Aborted = 10, OutOfRange = 11, Unimplemented = 12, Internal = 13, Unavailable = 14,
  DataLoss = 15, Unauthenticated = 16
};
enum class DType : int {
  Float32 = 1, Float64 = 2, Int32 = 3, UInt8 = 4, Int16 = 5, Int8 = 6, Complex64 = 8,
  Int64 = 9, Bool = 10, BFloat16 = 14, Half = 19, UInt32 = 22, UInt64 = 23
};
enum class ReduceOp : int { Sum = 0, Prod = 1, Min = 2, Max = 3, Mean = 4 };
enum class PaddingSpec : int { Auto = 0, PowerOfTwo = 1 };
enum class ThreadPinning : int { Auto = 0, Always = 1, Never = 2 };
enum class DeviceOrderMode : int { Auto = 0, Ring = 1, Mesh = 2 };
// tpu_group_mode (1.3): XLA's CollectiveOpGroupMode.
enum class GroupMode : int { CrossReplica = 0, CrossPartition = 1, CrossReplicaAndPartition = 2, FlattenedId = 3 };
enum class ResolverSource : int { Auto = 0, Tpu = 1, TfConfig = 2, DTensor = 3, Slurm = 4, OpenMpi = 5 };
// embedding.h (1.4): OptimizationParameters' field numbers; TensorFlow's combiners and modes.
enum class EmbeddingOptimizer : int {
  Adagrad = 3, Sgd = 4, Ftrl = 5, Adam = 6, Momentum = 8, RmsProp = 9, CenteredRmsProp = 10, Adadelta = 12,
  ProximalAdagrad = 14, AdagradMomentum = 26
};
enum class EmbeddingCombiner : int { Sum = 0, Mean = 1, Sqrtn = 2 };
enum class EmbeddingMode : int { Unspecified = 0, Inference = 1, Training = 2, BackwardPassOnly = 3 };

#ifndef SWIG
#define TPURT_CHECK_STATUS_(name, value, str) \
  static_assert(TPU_##name == value, "tpu_status " str " changed");
TPU_STATUS_MAP(TPURT_CHECK_STATUS_)
#undef TPURT_CHECK_STATUS_
static_assert(static_cast<int>(Status::Unauthenticated) == TPU_UNAUTHENTICATED, "Status");
static_assert(static_cast<int>(DType::UInt64) == TPU_UINT64 && static_cast<int>(DType::BFloat16) == TPU_BFLOAT16 &&
                  static_cast<int>(DType::Half) == TPU_HALF, "DType");
static_assert(static_cast<int>(ReduceOp::Mean) == TPU_REDUCE_MEAN, "ReduceOp");
static_assert(static_cast<int>(PaddingSpec::PowerOfTwo) == TPU_PADDING_POWER_OF_TWO, "PaddingSpec");
static_assert(static_cast<int>(ThreadPinning::Never) == TPU_PIN_NEVER, "ThreadPinning");
static_assert(static_cast<int>(DeviceOrderMode::Mesh) == TPU_DEVICE_ORDER_MESH, "DeviceOrderMode");
static_assert(static_cast<int>(ResolverSource::OpenMpi) == TPU_RESOLVER_OPENMPI, "ResolverSource");
static_assert(static_cast<int>(EmbeddingOptimizer::AdagradMomentum) == TPU_EMBEDDING_OPTIMIZER_ADAGRAD_MOMENTUM &&
                  static_cast<int>(EmbeddingOptimizer::ProximalAdagrad) == TPU_EMBEDDING_OPTIMIZER_PROXIMAL_ADAGRAD,
              "EmbeddingOptimizer");
static_assert(static_cast<int>(EmbeddingCombiner::Sqrtn) == TPU_EMBEDDING_COMBINER_SQRTN, "EmbeddingCombiner");
static_assert(static_cast<int>(EmbeddingMode::BackwardPassOnly) == TPU_EMBEDDING_MODE_BACKWARD_PASS_ONLY,
              "EmbeddingMode");
#endif

class Error : public std::exception {
 public:
  Error(int code, std::string message) : code_(code), message_(std::move(message)) {}
  int code() const { return code_; }
  const std::string& message() const { return message_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  int code_;
  std::string message_;
};

#ifndef SWIG
namespace detail {
inline void check(tpu_status status) {
  if (status != TPU_OK) throw Error(status, tpu_last_error());
}
inline void check_handle(const void* handle, const char* what) {
  if (handle == nullptr)
    throw Error(TPU_FAILED_PRECONDITION, std::string(what) + " is closed");
}
// Reads a string through the C ABI's (out, capacity, count) size query.
template <typename Fn>
std::string read_string(Fn fn) {
  size_t count = 0;
  check(fn(nullptr, 0, &count));
  std::string s(count, '\0');
  if (count > 0) check(fn(&s[0], count + 1, &count));
  return s;
}
template <typename T, typename Fn>
std::vector<T> read_array(Fn fn) {
  size_t count = 0;
  check(fn(nullptr, 0, &count));
  std::vector<T> v(count);
  if (count > 0) check(fn(v.data(), v.size(), &count));
  v.resize(count);
  return v;
}
// long long and int64_t are the same width on every platform tpurt builds for; the
// binding layer spells 64-bit vectors as long long so SWIG's and C++'s types agree.
static_assert(sizeof(long long) == sizeof(int64_t), "long long is 64-bit");
inline const int64_t* c_dims(const std::vector<long long>& dims) {
  return reinterpret_cast<const int64_t*>(dims.data());
}
// Bytes whose size may change between a size query and the copy (a key-value entry
// deleted and set again): retries with the new size, a bounded number of times.
template <typename Fn>
std::vector<uint8_t> read_bytes(Fn fn) {
  std::vector<uint8_t> v(64);
  size_t count = 0;
  for (int attempt = 0;; ++attempt) {
    tpu_status status = fn(v.data(), v.size(), &count);
    if (status == TPU_OK) break;
    if (status != TPU_OUT_OF_RANGE || attempt == 3) check(status);
    v.resize(count + 1);
  }
  v.resize(count);
  return v;
}
inline const char* c_str_or_null(const std::string& s) { return s.empty() ? nullptr : s.c_str(); }
inline int int_or_throw(size_t n, const char* what) {
  if (n > static_cast<size_t>(INT32_MAX))
    throw Error(TPU_INVALID_ARGUMENT, std::string(what) + " has more than 2^31-1 entries");
  return static_cast<int>(n);
}
// The C strings of names, which must have `count` entries (the parallel list's size).
inline std::vector<const char*> names_of(const std::vector<std::string>& names, size_t count,
                                         const char* parallel) {
  if (names.size() != count)
    throw Error(TPU_INVALID_ARGUMENT, std::to_string(names.size()) + " names but " +
                                          std::to_string(count) + " entries in " + parallel);
  std::vector<const char*> out;
  for (const std::string& n : names) out.push_back(n.c_str());
  return out;
}
}  // namespace detail
#endif

// ---- Free functions ------------------------------------------------------------

inline std::string version() { return tpu_version(); }
inline std::string statusName(Status status) { return tpu_status_name(static_cast<tpu_status>(status)); }
inline std::string lastError() { return tpu_last_error(); }
inline void clearLastError() { tpu_clear_last_error(); }
// Returns code; sets the calling thread's last error (see tpu_set_last_error).
inline Status setLastError(Status code, const std::string& message) {
  return (Status)tpu_set_last_error(static_cast<tpu_status>(code), message.c_str());
}
inline int64_t dtypeSize(DType dtype) {
  size_t n = 0;
  detail::check(tpu_dtype_size(static_cast<tpu_dtype>(dtype), &n));
  return static_cast<int64_t>(n);
}
inline std::string dtypeName(DType dtype) {
  const char* name = nullptr;
  detail::check(tpu_dtype_name(static_cast<tpu_dtype>(dtype), &name));
  return name;
}
// tf.tpu.core(num): "device:TPU_REPLICATED_CORE:num".
inline std::string core(int num) {
  return detail::read_string([&](char* o, size_t c, size_t* n) { return tpu_core(num, o, c, n); });
}
inline std::string deviceName(const std::string& job, int task, const std::string& deviceType,
                              int device) {
  return detail::read_string([&](char* o, size_t c, size_t* n) {
    return tpu_device_name(job.c_str(), task, deviceType.c_str(), device, o, c, n);
  });
}
inline std::vector<uint16_t> floatToBfloat16(const std::vector<float>& in) {
  std::vector<uint16_t> out(in.size());
  detail::check(tpu_float_to_bfloat16(in.data(), out.data(), in.size()));
  return out;
}
inline std::vector<float> bfloat16ToFloat(const std::vector<uint16_t>& in) {
  std::vector<float> out(in.size());
  detail::check(tpu_bfloat16_to_float(in.data(), out.data(), in.size()));
  return out;
}
inline std::vector<uint16_t> floatToHalf(const std::vector<float>& in) {
  std::vector<uint16_t> out(in.size());
  detail::check(tpu_float_to_half(in.data(), out.data(), in.size()));
  return out;
}
inline std::vector<float> halfToFloat(const std::vector<uint16_t>& in) {
  std::vector<float> out(in.size());
  detail::check(tpu_half_to_float(in.data(), out.data(), in.size()));
  return out;
}
// Bytes released from the tensor block cache.
inline int64_t tensorCacheTrim(int64_t keepBytes) {
  if (keepBytes < 0) throw Error(TPU_INVALID_ARGUMENT, "keepBytes must not be negative");
  size_t released = 0;
  detail::check(tpu_tensor_cache_trim(static_cast<size_t>(keepBytes), &released));
  return static_cast<int64_t>(released);
}

// One environment variable the library reads (tpu_environment_variable).
struct EnvironmentVariable {
  std::string name;
  int64_t value = 0;  // what the library uses when the variable is unset or valid
};
inline int numEnvironmentVariables() {
  int n = 0;
  const char* name = nullptr;
  int64_t value = 0;
  while (tpu_environment_variable(n, &name, &value) == TPU_OK) ++n;
  tpu_clear_last_error();
  return n;
}
inline EnvironmentVariable environmentVariable(int index) {
  const char* name = nullptr;
  EnvironmentVariable v;
  detail::check(tpu_environment_variable(index, &name, &v.value));
  v.name = name;
  return v;
}

}  // namespace tpurt

#endif  // TPURT_BINDING_SUPPORT_COMMON_HPP
