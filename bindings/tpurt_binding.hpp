// The binding-support layer: C++ classes over the C ABI that SWIG wraps for every
// language (bindings/tpurt.i). Header-only, calls nothing but include/tpurt.h.
//
// Rules the language layers rely on:
//  - Every failing C call throws tpurt::Error{code, message}, with the message read on
//    the failing thread inside the same wrapper call (the last error is thread-local).
//  - No overloads and no default arguments: each language writes its own overloads
//    (SWIG turns C++ overloads into runtime dispatchers in Go).
//  - Optional arguments are objects whose empty state means "none" (an empty
//    GroupAssignment is "all replicas in one group"), so no language passes null.
//  - Callbacks are directors returning a tpu_status: a language layer catches its own
//    exception or panic and reports it through ReplicaContext::fail or
//    Computation::failHost; nothing managed unwinds through C frames.
#ifndef TPURT_BINDING_HPP
#define TPURT_BINDING_HPP

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

// ---- Tensor --------------------------------------------------------------------

// A reference to a tpu_tensor. Copies share the tensor (retain); the last one releases.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(tpu_tensor* adopted) : t_(adopted) {}
  Tensor(const Tensor& o) : t_(o.t_) {
    if (t_) tpu_tensor_retain(t_);
  }
  Tensor(Tensor&& o) noexcept : t_(o.t_) { o.t_ = nullptr; }
  Tensor& operator=(Tensor o) {
    std::swap(t_, o.t_);
    return *this;
  }
  ~Tensor() { dispose(); }
  // Drops this reference now instead of at finalization.
  void dispose() {
    if (t_) tpu_tensor_release(t_);
    t_ = nullptr;
  }
  bool isNull() const { return t_ == nullptr; }

  // A tensor of zeros.
  static Tensor zeros(DType dtype, const std::vector<long long>& dims) {
    int rank = detail::int_or_throw(dims.size(), "dims");
    return madeBy([&](tpu_tensor** t) {
      return tpu_tensor_create(static_cast<tpu_dtype>(dtype), detail::c_dims(dims), rank, nullptr, 0, t);
    });
  }
  static Tensor fromBytes(DType dtype, const std::vector<long long>& dims,
                          const std::vector<uint8_t>& bytes) {
    return create(dtype, dims, bytes.data(), bytes.size());
  }
  // Bulk copies in: `data` holds count elements (each language maps its arrays here).
  static Tensor fromFloat32(const std::vector<long long>& dims, const float* data, size_t count) {
    return create(DType::Float32, dims, data, count * sizeof(float));
  }
  static Tensor fromFloat64(const std::vector<long long>& dims, const double* data, size_t count) {
    return create(DType::Float64, dims, data, count * sizeof(double));
  }
  static Tensor fromInt32(const std::vector<long long>& dims, const int32_t* data, size_t count) {
    return create(DType::Int32, dims, data, count * sizeof(int32_t));
  }
  static Tensor fromInt64(const std::vector<long long>& dims, const long long* data, size_t count) {
    return create(DType::Int64, dims, data, count * sizeof(long long));
  }
  // Borrows `data` (tpu_tensor_wrap): the caller keeps it alive and unmoved while any
  // tensor uses it. For zero-copy from pinned or direct memory.
  static Tensor wrapFloat32(const std::vector<long long>& dims, float* data, size_t count) {
    int rank = detail::int_or_throw(dims.size(), "dims");
    return madeBy([&](tpu_tensor** t) {
      return tpu_tensor_wrap(TPU_FLOAT, detail::c_dims(dims), rank, data, count * sizeof(float), nullptr,
                             nullptr, t);
    });
  }
  // Portable forms (std::vector) for SWIG languages without the array typemaps.
  static Tensor fromFloat32Vector(const std::vector<long long>& dims, const std::vector<float>& v) {
    return fromFloat32(dims, v.data(), v.size());
  }
  static Tensor fromFloat64Vector(const std::vector<long long>& dims, const std::vector<double>& v) {
    return fromFloat64(dims, v.data(), v.size());
  }
  static Tensor fromInt32Vector(const std::vector<long long>& dims, const std::vector<int32_t>& v) {
    return fromInt32(dims, v.data(), v.size());
  }
  static Tensor fromInt64Vector(const std::vector<long long>& dims, const std::vector<long long>& v) {
    return fromInt64(dims, v.data(), v.size());
  }

  DType dtype() const {
    tpu_dtype d{};
    detail::check(tpu_tensor_dtype(handle(), &d));
    return static_cast<DType>(d);
  }
  int rank() const {
    int r = 0;
    detail::check(tpu_tensor_rank(handle(), &r));
    return r;
  }
  std::vector<long long> dims() const {
    std::vector<int64_t> d = detail::read_array<int64_t>(
        [&](int64_t* o, size_t c, size_t* n) { return tpu_tensor_dims(handle(), o, c, n); });
    return std::vector<long long>(d.begin(), d.end());
  }
  int64_t dim(int axis) const {
    int64_t d = 0;
    detail::check(tpu_tensor_dim(handle(), axis, &d));
    return d;
  }
  int64_t numElements() const {
    int64_t n = 0;
    detail::check(tpu_tensor_num_elements(handle(), &n));
    return n;
  }
  int64_t byteSize() const {
    size_t n = 0;
    detail::check(tpu_tensor_byte_size(handle(), &n));
    return static_cast<int64_t>(n);
  }
  Tensor reshape(const std::vector<long long>& dims) const {
    int rank = detail::int_or_throw(dims.size(), "dims");
    return madeBy([&](tpu_tensor** t) { return tpu_tensor_reshape(handle(), detail::c_dims(dims), rank, t); });
  }
  Tensor cast(DType dtype) const {
    return madeBy([&](tpu_tensor** t) { return tpu_tensor_cast(handle(), static_cast<tpu_dtype>(dtype), t); });
  }

  // Bulk copies out: count must equal numElements() and the dtype must match.
  void readFloat32(float* out, size_t count) const { read(DType::Float32, out, count, sizeof(float)); }
  void readFloat64(double* out, size_t count) const { read(DType::Float64, out, count, sizeof(double)); }
  void readInt32(int32_t* out, size_t count) const { read(DType::Int32, out, count, sizeof(int32_t)); }
  void readInt64(long long* out, size_t count) const { read(DType::Int64, out, count, sizeof(long long)); }
  // Overwrites the contents (copy-on-write: other references keep the old values).
  void writeFloat32(const float* data, size_t count) { write(DType::Float32, data, count, sizeof(float)); }
  void writeFloat64(const double* data, size_t count) { write(DType::Float64, data, count, sizeof(double)); }
  void writeInt32(const int32_t* data, size_t count) { write(DType::Int32, data, count, sizeof(int32_t)); }
  void writeInt64(const long long* data, size_t count) { write(DType::Int64, data, count, sizeof(long long)); }
  std::vector<uint8_t> toBytes() const {
    std::vector<uint8_t> v(static_cast<size_t>(byteSize()));
    const void* p = nullptr;
    detail::check(tpu_tensor_data(handle(), &p));
    if (!v.empty()) std::copy_n(static_cast<const uint8_t*>(p), v.size(), v.begin());
    return v;
  }
  std::vector<float> toFloat32Vector() const { return readVector<float>(DType::Float32); }
  std::vector<double> toFloat64Vector() const { return readVector<double>(DType::Float64); }
  std::vector<int32_t> toInt32Vector() const { return readVector<int32_t>(DType::Int32); }
  std::vector<long long> toInt64Vector() const { return readVector<long long>(DType::Int64); }

  tpu_tensor* handle() const {
    detail::check_handle(t_, "the tensor");
    return t_;
  }
  // The raw handle, or nullptr for an empty Tensor (inputs may be null).
  tpu_tensor* handleOrNull() const { return t_; }
#ifndef SWIG
  // The tensor a C call returns through its `tpu_tensor** out` (fn(out) -> status).
  template <typename Fn>
  static Tensor madeBy(Fn fn) {
    tpu_tensor* t = nullptr;
    detail::check(fn(&t));
    return Tensor(t);
  }
  // Borrowed handles for a C call's `tpu_tensor *const *` array (empty ones as NULL).
  static std::vector<tpu_tensor*> handles(const std::vector<Tensor>& tensors) {
    std::vector<tpu_tensor*> h;
    h.reserve(tensors.size());
    for (const Tensor& t : tensors) h.push_back(t.handleOrNull());
    return h;
  }
  // Takes over the new references a C call wrote into an array.
  static std::vector<Tensor> adopt(const std::vector<tpu_tensor*>& h) {
    std::vector<Tensor> out;
    out.reserve(h.size());
    for (tpu_tensor* t : h) out.emplace_back(t);
    return out;
  }
#endif

 private:
  // A copy of data. Null data (a nil slice, an empty vector) holds no elements here, not
  // zeros as in tpu_tensor_create: only zeros() asks for those.
  static Tensor create(DType dtype, const std::vector<long long>& dims, const void* data, size_t bytes) {
    int rank = detail::int_or_throw(dims.size(), "dims");
    static const uint8_t nothing = 0;
    return madeBy([&](tpu_tensor** t) {
      return tpu_tensor_create(static_cast<tpu_dtype>(dtype), detail::c_dims(dims), rank, data ? data : &nothing,
                               bytes, t);
    });
  }
  void check_elements(DType dtype, const void* array, size_t count) const {
    if (array == nullptr && count > 0)
      throw Error(TPU_INVALID_ARGUMENT, "the array is null but its count is " + std::to_string(count));
    if (this->dtype() != dtype)
      throw Error(TPU_INVALID_ARGUMENT, "the tensor is " + dtypeName(this->dtype()) +
                                            ", not " + dtypeName(dtype));
    if (static_cast<int64_t>(count) != numElements())
      throw Error(TPU_INVALID_ARGUMENT, "the tensor has " + std::to_string(numElements()) +
                                            " elements, the array " + std::to_string(count));
  }
  void read(DType dtype, void* out, size_t count, size_t size) const {
    check_elements(dtype, out, count);
    const void* p = nullptr;
    detail::check(tpu_tensor_data(handle(), &p));
    if (count > 0) std::copy_n(static_cast<const uint8_t*>(p), count * size, static_cast<uint8_t*>(out));
  }
  void write(DType dtype, const void* data, size_t count, size_t size) {
    check_elements(dtype, data, count);
    void* p = nullptr;
    detail::check(tpu_tensor_mutable_data(handle(), &p));
    if (count > 0) std::copy_n(static_cast<const uint8_t*>(data), count * size, static_cast<uint8_t*>(p));
  }
  template <typename T>
  std::vector<T> readVector(DType dtype) const {
    std::vector<T> v(static_cast<size_t>(numElements()));
    read(dtype, v.data(), v.size(), sizeof(T));
    return v;
  }

  tpu_tensor* t_ = nullptr;
};

// A tpu_shape: `dims` (-1 for an unknown size), or no shape at all (rank -1).
class Shape {
 public:
  Shape() = default;  // no shape given
  static Shape of(const std::vector<long long>& dims) {
    Shape s;
    s.dims_ = dims;
    s.known_ = true;
    return s;
  }
  static Shape unknown() { return Shape(); }
  bool isKnown() const { return known_; }
  std::vector<long long> dims() const { return dims_; }
  tpu_shape toC() const {
    tpu_shape s{};
    if (!known_) {
      s.rank = -1;
      return s;
    }
    if (dims_.size() > TPU_MAX_RANK)
      throw Error(TPU_INVALID_ARGUMENT, "a shape of rank " + std::to_string(dims_.size()) +
                                            " is above TPU_MAX_RANK " + std::to_string(TPU_MAX_RANK));
    s.rank = static_cast<int>(dims_.size());
    std::copy(dims_.begin(), dims_.end(), s.dims);
    return s;
  }

 private:
  std::vector<long long> dims_;
  bool known_ = false;
};

// replica_ids[numGroups][groupSize], flattened. Empty: all replicas in one group.
class GroupAssignment {
 public:
  GroupAssignment() = default;
  GroupAssignment(const std::vector<int32_t>& replicaIds, int numGroups, int groupSize)
      : ids_(replicaIds), num_groups_(numGroups), group_size_(groupSize) {
    if (numGroups < 0 || groupSize < 0 ||
        static_cast<int64_t>(numGroups) * groupSize != static_cast<int64_t>(ids_.size()))
      throw Error(TPU_INVALID_ARGUMENT,
                  std::to_string(ids_.size()) + " replica ids do not make " +
                      std::to_string(numGroups) + " groups of " + std::to_string(groupSize));
  }
  bool isEmpty() const { return ids_.empty() && num_groups_ == 0; }
  int numGroups() const { return num_groups_; }
  int groupSize() const { return group_size_; }
  std::vector<int32_t> replicaIds() const { return ids_; }
  void validate(int numReplicas) const {
    tpu_group_assignment g = toC();
    detail::check(tpu_group_assignment_validate(&g, numReplicas));
  }
  // nullptr when empty, else a view that lives as long as this object.
  const tpu_group_assignment* get(tpu_group_assignment* storage) const {
    if (isEmpty()) return nullptr;
    *storage = toC();
    return storage;
  }

 private:
  tpu_group_assignment toC() const { return {ids_.data(), num_groups_, group_size_}; }
  std::vector<int32_t> ids_;
  int num_groups_ = 0;
  int group_size_ = 0;
};

// ---- Topology and device assignment ---------------------------------------------

class Topology {
 public:
  explicit Topology(tpu_topology* adopted) : t_(adopted) {}
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;
  ~Topology() { close(); }
  void close() {
    if (t_) tpu_topology_release(t_);
    t_ = nullptr;
  }
  static Topology* create(const std::vector<int32_t>& meshShape,
                          const std::vector<int32_t>& deviceCoordinates, int numTasks,
                          int devicesPerTask) {
    tpu_topology* t = nullptr;
    detail::check(tpu_topology_create(meshShape.data(), detail::int_or_throw(meshShape.size(), "meshShape"),
                                      deviceCoordinates.data(), numTasks, devicesPerTask, &t));
    return new Topology(t);
  }
  static Topology* parse(const std::vector<uint8_t>& bytes) {
    tpu_topology* t = nullptr;
    detail::check(tpu_topology_parse(bytes.data(), bytes.size(), &t));
    return new Topology(t);
  }
  std::vector<uint8_t> serialize() const {
    return detail::read_array<uint8_t>(
        [&](uint8_t* o, size_t c, size_t* n) { return tpu_topology_serialize(handle(), o, c, n); });
  }
  std::vector<int32_t> meshShape() const {
    return detail::read_array<int32_t>(
        [&](int32_t* o, size_t c, size_t* n) { return tpu_topology_mesh_shape(handle(), o, c, n); });
  }
  int meshRank() const { return get_int(tpu_topology_mesh_rank); }
  int numTasks() const { return get_int(tpu_topology_num_tasks); }
  int numDevicesPerTask() const { return get_int(tpu_topology_num_devices_per_task); }
  std::vector<int32_t> deviceCoordinates(int task, int device) const {
    return detail::read_array<int32_t>([&](int32_t* o, size_t c, size_t* n) {
      return tpu_topology_device_coordinates(handle(), task, device, o, c, n);
    });
  }
  int taskOrdinalAtCoordinates(const std::vector<int32_t>& coords) const {
    int out = 0;
    detail::check(tpu_topology_task_ordinal_at_coordinates(handle(), coords.data(), coords.size(), &out));
    return out;
  }
  int deviceOrdinalAtCoordinates(const std::vector<int32_t>& coords) const {
    int out = 0;
    detail::check(tpu_topology_device_ordinal_at_coordinates(handle(), coords.data(), coords.size(), &out));
    return out;
  }
  int numMissingDevices() const { return get_int(tpu_topology_num_missing_devices); }
  std::vector<int32_t> missingDevice(int index) const {
    return detail::read_array<int32_t>([&](int32_t* o, size_t c, size_t* n) {
      return tpu_topology_missing_device(handle(), index, o, c, n);
    });
  }
  // job "": no job part.
  std::string tpuDeviceName(const std::vector<int32_t>& coords, const std::string& job) const {
    return detail::read_string([&](char* o, size_t c, size_t* n) {
      return tpu_topology_tpu_device_name(handle(), coords.data(), coords.size(),
                                          job.empty() ? nullptr : job.c_str(), o, c, n);
    });
  }
  std::string cpuDeviceName(const std::vector<int32_t>& coords, const std::string& job) const {
    return detail::read_string([&](char* o, size_t c, size_t* n) {
      return tpu_topology_cpu_device_name(handle(), coords.data(), coords.size(),
                                          job.empty() ? nullptr : job.c_str(), o, c, n);
    });
  }
  // {embedding feature, embedding devices per chip}
  std::vector<int32_t> hardwareFeature() const {
    int feature = 0, per_chip = 0;
    detail::check(tpu_topology_hardware_feature(handle(), &feature, &per_chip));
    return {feature, per_chip};
  }
  tpu_topology* handle() const {
    detail::check_handle(t_, "the topology");
    return t_;
  }

 private:
  int get_int(tpu_status (*fn)(const tpu_topology*, int*)) const {
    int out = 0;
    detail::check(fn(handle(), &out));
    return out;
  }
  tpu_topology* t_;
};

class DeviceAssignment {
 public:
  explicit DeviceAssignment(tpu_device_assignment* adopted) : a_(adopted) {}
  DeviceAssignment(const DeviceAssignment&) = delete;
  DeviceAssignment& operator=(const DeviceAssignment&) = delete;
  ~DeviceAssignment() { close(); }
  void close() {
    if (a_) tpu_device_assignment_release(a_);
    a_ = nullptr;
  }
  // TensorFlow's device_assignment(); empty shape/stride vectors mean the defaults.
  static DeviceAssignment* build(const Topology& topology, const std::vector<int32_t>& computationShape,
                                 const std::vector<int32_t>& computationStride, int numReplicas,
                                 DeviceOrderMode deviceOrderMode) {
    tpu_device_assignment* a = nullptr;
    detail::check(tpu_device_assignment_build(
        topology.handle(), computationShape.empty() ? nullptr : computationShape.data(),
        detail::int_or_throw(computationShape.size(), "computationShape"),
        computationStride.empty() ? nullptr : computationStride.data(),
        detail::int_or_throw(computationStride.size(), "computationStride"), numReplicas,
        static_cast<tpu_device_order_mode>(deviceOrderMode), &a));
    return new DeviceAssignment(a);
  }
  // coreAssignment[numReplicas][numCoresPerReplica][4], flattened.
  static DeviceAssignment* create(const Topology& topology, const std::vector<int32_t>& coreAssignment,
                                  int numReplicas, int numCoresPerReplica) {
    if (static_cast<int64_t>(numReplicas) * numCoresPerReplica * TPU_MESH_RANK !=
        static_cast<int64_t>(coreAssignment.size()))
      throw Error(TPU_INVALID_ARGUMENT,
                  "coreAssignment has " + std::to_string(coreAssignment.size()) + " entries, not " +
                      std::to_string(numReplicas) + " x " + std::to_string(numCoresPerReplica) + " x 4");
    tpu_device_assignment* a = nullptr;
    detail::check(tpu_device_assignment_create(topology.handle(), coreAssignment.data(), numReplicas,
                                               numCoresPerReplica, &a));
    return new DeviceAssignment(a);
  }
  Topology* topology() const {
    tpu_topology* t = nullptr;
    detail::check(tpu_device_assignment_topology(handle(), &t));
    return new Topology(t);
  }
  int numReplicas() const {
    int n = 0;
    detail::check(tpu_device_assignment_num_replicas(handle(), &n));
    return n;
  }
  int numCoresPerReplica() const {
    int n = 0;
    detail::check(tpu_device_assignment_num_cores_per_replica(handle(), &n));
    return n;
  }
  std::vector<int32_t> coreAssignment() const {
    return detail::read_array<int32_t>([&](int32_t* o, size_t c, size_t* n) {
      return tpu_device_assignment_core_assignment(handle(), o, c, n);
    });
  }
  std::vector<int32_t> coordinates(int replica, int logicalCore) const {
    return detail::read_array<int32_t>([&](int32_t* o, size_t c, size_t* n) {
      return tpu_device_assignment_coordinates(handle(), replica, logicalCore, o, c, n);
    });
  }
  int task(int replica, int logicalCore) const {
    int out = 0;
    detail::check(tpu_device_assignment_task(handle(), replica, logicalCore, &out));
    return out;
  }
  int tpuOrdinal(int replica, int logicalCore) const {
    int out = 0;
    detail::check(tpu_device_assignment_tpu_ordinal(handle(), replica, logicalCore, &out));
    return out;
  }
  std::string tpuDevice(int replica, int logicalCore, const std::string& job) const {
    return detail::read_string([&](char* o, size_t c, size_t* n) {
      return tpu_device_assignment_tpu_device(handle(), replica, logicalCore,
                                              job.empty() ? nullptr : job.c_str(), o, c, n);
    });
  }
  std::string hostDevice(int replica, int logicalCore, const std::string& job) const {
    return detail::read_string([&](char* o, size_t c, size_t* n) {
      return tpu_device_assignment_host_device(handle(), replica, logicalCore,
                                               job.empty() ? nullptr : job.c_str(), o, c, n);
    });
  }
  std::vector<int32_t> lookupReplicas(int task, int logicalCore) const {
    std::vector<int> v = detail::read_array<int>([&](int* o, size_t c, size_t* n) {
      return tpu_device_assignment_lookup_replicas(handle(), task, logicalCore, o, c, n);
    });
    return std::vector<int32_t>(v.begin(), v.end());
  }
  tpu_device_assignment* handle() const {
    detail::check_handle(a_, "the device assignment");
    return a_;
  }

 private:
  tpu_device_assignment* a_;
};

// tpu_mesh (1.3): named axes over a device assignment's participants.
class Mesh {
 public:
  explicit Mesh(tpu_mesh* adopted) : m_(adopted) {}
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;
  ~Mesh() { close(); }
  void close() {
    if (m_) tpu_mesh_release(m_);
    m_ = nullptr;
  }
  static Mesh* create(const DeviceAssignment& assignment, const std::vector<std::string>& axisNames,
                      const std::vector<long long>& axisSizes) {
    std::vector<const char*> names = detail::names_of(axisNames, axisSizes.size(), "axisSizes");
    tpu_mesh* m = nullptr;
    detail::check(tpu_mesh_create(assignment.handle(), names.data(), detail::c_dims(axisSizes),
                                  detail::int_or_throw(names.size(), "axisNames"), &m));
    return new Mesh(m);
  }
  static Mesh* createFromTopology(const Topology& topology, const std::vector<std::string>& axisNames,
                                  const std::vector<long long>& axisSizes) {
    std::vector<const char*> names = detail::names_of(axisNames, axisSizes.size(), "axisSizes");
    tpu_mesh* m = nullptr;
    detail::check(tpu_mesh_create_from_topology(topology.handle(), names.data(), detail::c_dims(axisSizes),
                                                detail::int_or_throw(names.size(), "axisNames"), &m));
    return new Mesh(m);
  }
  DeviceAssignment* deviceAssignment() const {
    tpu_device_assignment* a = nullptr;
    detail::check(tpu_mesh_device_assignment(handle(), &a));
    return new DeviceAssignment(a);
  }
  int numAxes() const {
    int n = 0;
    detail::check(tpu_mesh_num_axes(handle(), &n));
    return n;
  }
  int64_t size() const {
    int64_t n = 0;
    detail::check(tpu_mesh_size(handle(), &n));
    return n;
  }
  std::string axisName(int axis) const {
    return detail::read_string([&](char* o, size_t c, size_t* n) { return tpu_mesh_axis_name(handle(), axis, o, c, n); });
  }
  int64_t axisSize(int axis) const {
    int64_t n = 0;
    detail::check(tpu_mesh_axis_size(handle(), axis, &n));
    return n;
  }
  int axisIndex(const std::string& name) const {
    int i = 0;
    detail::check(tpu_mesh_axis_index(handle(), name.c_str(), &i));
    return i;
  }
  std::vector<long long> coordinates(int replica, int logicalCore) const {
    std::vector<int64_t> v = detail::read_array<int64_t>([&](int64_t* o, size_t c, size_t* n) {
      return tpu_mesh_coordinates(handle(), replica, logicalCore, o, c, n);
    });
    return std::vector<long long>(v.begin(), v.end());
  }
  // The groups of a collective over the named axes; pass axisGroupMode(axes) with them.
  GroupAssignment axisGroups(const std::vector<std::string>& axes) const {
    int mode = 0;
    return axis_groups(axes, &mode);
  }
  GroupMode axisGroupMode(const std::vector<std::string>& axes) const {
    int mode = 0;
    axis_groups(axes, &mode);
    return static_cast<GroupMode>(mode);
  }
  tpu_mesh* handle() const {
    detail::check_handle(m_, "the mesh");
    return m_;
  }

 private:
  GroupAssignment axis_groups(const std::vector<std::string>& axes, int* mode) const {
    std::vector<const char*> names = detail::names_of(axes, axes.size(), "axes");
    tpu_group_assignment g{};
    detail::check(tpu_mesh_axis_groups(handle(), names.data(), detail::int_or_throw(names.size(), "axes"), &g, mode));
    return GroupAssignment(std::vector<int32_t>(g.replica_ids, g.replica_ids + int64_t(g.num_groups) * g.group_size),
                           g.num_groups, g.group_size);
  }
  tpu_mesh* m_;
};

// ---- Options ---------------------------------------------------------------------

class SystemOptions {
 public:
  SystemOptions() { detail::check(tpu_system_options_init(&o_, sizeof o_)); }
  int numCores = 0;
  std::vector<int32_t> meshShape;  // empty: [numCores, 1, 1, 1]
  std::string jobName;             // empty: "localhost"
  std::string deviceType;          // empty: "TPU"
  ThreadPinning pinThreads = ThreadPinning::Auto;
  int64_t collectiveTimeoutMs = 0;
  bool closeOnFailure = false;
  std::vector<uint8_t> embeddingConfig;
  bool privateCollectiveResults = false;
  // A C view valid while this object is unchanged.
  const tpu_system_options* toC() const {
    if (meshShape.size() > 4)
      throw Error(TPU_INVALID_ARGUMENT, "meshShape has " + std::to_string(meshShape.size()) +
                                            " entries; at most 4");
    tpu_system_options& o = o_;
    o.num_cores = numCores;
    for (size_t i = 0; i < 4; ++i) o.mesh_shape[i] = i < meshShape.size() ? meshShape[i] : 0;
    o.job_name = jobName.empty() ? nullptr : jobName.c_str();
    o.device_type = deviceType.empty() ? nullptr : deviceType.c_str();
    o.pin_threads = static_cast<int>(pinThreads);
    o.collective_timeout_ms = collectiveTimeoutMs;
    o.close_on_failure = closeOnFailure ? 1 : 0;
    o.embedding_config = embeddingConfig.empty() ? nullptr : embeddingConfig.data();
    o.embedding_config_len = embeddingConfig.size();
    o.private_collective_results = privateCollectiveResults ? 1 : 0;
    return &o;
  }

 private:
  mutable tpu_system_options o_;
};

class InfeedQueue;

class StepOptions {
 public:
  StepOptions() { detail::check(tpu_step_options_init(&o_, sizeof o_)); }
  const DeviceAssignment* deviceAssignment = nullptr;  // not owned
  std::vector<Shape> maximumShapes;                    // empty: no padding
  PaddingSpec paddingSpec = PaddingSpec::Auto;
  int64_t collectiveTimeoutMs = 0;
  InfeedQueue* infeedQueue = nullptr;  // not owned
  // (1.3) One entry per input / output: partitionDims over the cores of a replica
  // (tpu_partition_spec); an empty entry is not partitioned. Empty lists: none.
  std::vector<std::vector<int32_t>> inputPartitions;
  std::vector<std::vector<int32_t>> outputPartitions;
  // (1.4) Run on the threads that joined the cores (tpu_step_join), not the workers.
  bool callerThreads = false;
  const tpu_step_options* toC(std::vector<tpu_shape>* shapes) const;

 private:
  static void partition_specs(const std::vector<std::vector<int32_t>>& dims, const char* what,
                              std::vector<tpu_partition_spec>* out) {
    out->clear();
    for (size_t i = 0; i < dims.size(); ++i) {
      if (dims[i].size() > TPU_MAX_RANK)
        throw Error(TPU_INVALID_ARGUMENT, std::string(what) + "[" + std::to_string(i) + "] has " +
                                              std::to_string(dims[i].size()) + " dimensions; at most " +
                                              std::to_string(TPU_MAX_RANK));
      tpu_partition_spec p{};
      p.num_dims = static_cast<int>(dims[i].size());
      for (size_t d = 0; d < dims[i].size(); ++d) p.partition_dims[d] = dims[i][d];
      out->push_back(p);
    }
  }
  mutable tpu_step_options o_;
  mutable std::vector<tpu_partition_spec> input_parts_, output_parts_;
};

class CollectiveOptions {
 public:
  CollectiveOptions() { detail::check(tpu_collective_options_init(&o_, sizeof o_)); }
  int64_t timeoutMs = 0;  // 0: the step's deadline
  GroupMode groupMode = GroupMode::CrossReplica;  // (1.3) what the groups hold
  const tpu_collective_options* toC() const {
    o_.timeout_ms = timeoutMs;
    o_.group_mode = static_cast<int>(groupMode);
    return &o_;
  }

 private:
  mutable tpu_collective_options o_;
};

// tpu_cluster_resolver_options; empty strings mean NULL (the source's default).
class ClusterResolverOptions {
 public:
  ClusterResolverOptions() { detail::check(tpu_cluster_resolver_options_init(&o_, sizeof o_)); }
  ResolverSource source = ResolverSource::Auto;
  std::string tpu;                 // TPU source: "" environment, "local", "grpc://host[:port],..."
  std::string jobName;             // "": the source's default ("worker")
  std::string coordinatorName;     // an extra job in the cluster spec ...
  std::string coordinatorAddress;  // ... at this host:port
  std::string taskType;            // TF_CONFIG: overrides task.type
  int taskId = -1;                 // TF_CONFIG: overrides task.index when >= 0
  std::string rpcLayer;            // "": the source's
  std::string environment;
  int portBase = 0;                // Slurm and Open MPI: 0 = 8888
  // A C view valid while this object is unchanged.
  const tpu_cluster_resolver_options* toC() const {
    o_.source = static_cast<int>(source);
    o_.tpu = detail::c_str_or_null(tpu);
    o_.job_name = detail::c_str_or_null(jobName);
    o_.coordinator_name = detail::c_str_or_null(coordinatorName);
    o_.coordinator_address = detail::c_str_or_null(coordinatorAddress);
    o_.task_type = detail::c_str_or_null(taskType);
    o_.task_id = taskId;
    o_.rpc_layer = detail::c_str_or_null(rpcLayer);
    o_.environment = detail::c_str_or_null(environment);
    o_.port_base = portBase;
    return &o_;
  }

 private:
  mutable tpu_cluster_resolver_options o_;
};

// tpu_cluster_options: how the tasks join; zero means the default (or the environment's).
class ClusterOptions {
 public:
  ClusterOptions() { detail::check(tpu_cluster_options_init(&o_, sizeof o_)); }
  int64_t initTimeoutMs = 0;
  int64_t heartbeatIntervalMs = 0;
  int64_t heartbeatTimeoutMs = 0;
  int64_t shutdownBarrierTimeoutMs = 0;
  std::string token;                   // "": TPURT_CLUSTER_TOKEN
  bool disableAuthentication = false;  // true: token "" whatever the environment says
  const tpu_cluster_options* toC() const {
    o_.init_timeout_ms = initTimeoutMs;
    o_.heartbeat_interval_ms = heartbeatIntervalMs;
    o_.heartbeat_timeout_ms = heartbeatTimeoutMs;
    o_.shutdown_barrier_timeout_ms = shutdownBarrierTimeoutMs;
    o_.token = disableAuthentication ? "" : detail::c_str_or_null(token);
    return &o_;
  }

 private:
  mutable tpu_cluster_options o_;
};

// ---- Cluster resolution ------------------------------------------------------------

// TensorFlow's ClusterResolver: a snapshot of the cluster taken when it is created.
// Empty job / task type / rpc layer arguments and task id -1 mean the resolver's own.
class ClusterResolver {
 public:
  explicit ClusterResolver(const ClusterResolverOptions& options) {
    detail::check(tpu_cluster_resolver_create(options.toC(), &r_));
  }
  ClusterResolver(const ClusterResolver&) = delete;
  ClusterResolver& operator=(const ClusterResolver&) = delete;
  ~ClusterResolver() { close(); }
  void close() {
    if (r_) tpu_cluster_resolver_release(r_);
    r_ = nullptr;
  }
  ResolverSource source() const {
    int out = 0;
    detail::check(tpu_cluster_resolver_source(handle(), &out));
    return static_cast<ResolverSource>(out);
  }
  std::string tpuName() const { return get_string(tpu_cluster_resolver_tpu_name); }
  // cluster_spec() as JSON: {"job": ["host:port", ...], ...}; "{}" when local.
  std::string clusterSpec() const { return get_string(tpu_cluster_resolver_cluster_spec); }
  int numTasks(const std::string& job) const {
    int out = 0;
    detail::check(tpu_cluster_resolver_num_tasks(handle(), detail::c_str_or_null(job), &out));
    return out;
  }
  std::string taskAddress(const std::string& job, int taskId) const {
    return detail::read_string([&](char* o, size_t c, size_t* n) {
      return tpu_cluster_resolver_task_address(handle(), detail::c_str_or_null(job), taskId, o, c, n);
    });
  }
  std::string master(const std::string& taskType, int taskId, const std::string& rpcLayer) const {
    return detail::read_string([&](char* o, size_t c, size_t* n) {
      return tpu_cluster_resolver_master(handle(), detail::c_str_or_null(taskType), taskId,
                                         detail::c_str_or_null(rpcLayer), o, c, n);
    });
  }
  std::string jobName() const { return get_string(tpu_cluster_resolver_job_name); }
  int taskId() const {
    int out = 0;
    detail::check(tpu_cluster_resolver_task_id(handle(), &out));
    return out;
  }
  std::string rpcLayer() const { return get_string(tpu_cluster_resolver_rpc_layer); }
  std::string environment() const { return get_string(tpu_cluster_resolver_environment); }
  std::string coordinatorAddress() const { return get_string(tpu_cluster_resolver_coordinator_address); }
  int numAccelerators() const {
    int out = 0;
    detail::check(tpu_cluster_resolver_num_accelerators(handle(), &out));
    return out;
  }
  // The context manager; exit without enter is FailedPrecondition.
  void enter() { detail::check(tpu_cluster_resolver_enter(handle())); }
  void exit() { detail::check(tpu_cluster_resolver_exit(handle())); }
  tpu_cluster_resolver* handle() const {
    detail::check_handle(r_, "the cluster resolver");
    return r_;
  }

 private:
  std::string get_string(tpu_status (*fn)(const tpu_cluster_resolver*, char*, size_t, size_t*)) const {
    return detail::read_string([&](char* o, size_t c, size_t* n) { return fn(handle(), o, c, n); });
  }
  tpu_cluster_resolver* r_ = nullptr;
};

// ---- Feeds -----------------------------------------------------------------------

class TpuSystem;

class InfeedQueue {
 public:
  InfeedQueue(const TpuSystem& system, int numReplicas, const std::vector<int32_t>& dtypes,
              const std::vector<Shape>& shapes, int capacity);
  InfeedQueue(const InfeedQueue&) = delete;
  InfeedQueue& operator=(const InfeedQueue&) = delete;
  ~InfeedQueue() { close(); }
  void close() {
    if (q_) tpu_infeed_queue_release(q_);
    q_ = nullptr;
  }
  int numElements() const { return num_elements_; }
  void enqueue(int replica, const std::vector<Tensor>& tuple) {
    std::vector<tpu_tensor*> h = Tensor::handles(tuple);
    detail::check(tpu_infeed_enqueue(handle(), replica, h.data(), detail::int_or_throw(h.size(), "tuple")));
  }
  tpu_infeed_queue* handle() const {
    detail::check_handle(q_, "the infeed queue");
    return q_;
  }

 private:
  tpu_infeed_queue* q_ = nullptr;
  int num_elements_ = 0;
};

class OutfeedQueue {
 public:
  OutfeedQueue(const TpuSystem& system, int numReplicas, const std::vector<int32_t>& dtypes,
               const std::vector<Shape>& shapes, int capacity);
  OutfeedQueue(const OutfeedQueue&) = delete;
  OutfeedQueue& operator=(const OutfeedQueue&) = delete;
  ~OutfeedQueue() { close(); }
  void close() {
    if (q_) tpu_outfeed_queue_release(q_);
    q_ = nullptr;
  }
  int numElements() const { return num_elements_; }
  std::vector<Tensor> dequeue(int replica) {
    std::vector<tpu_tensor*> h(static_cast<size_t>(num_elements_), nullptr);
    detail::check(tpu_outfeed_dequeue(handle(), replica, h.data(), num_elements_));
    return Tensor::adopt(h);
  }
  tpu_outfeed_queue* handle() const {
    detail::check_handle(q_, "the outfeed queue");
    return q_;
  }

 private:
  tpu_outfeed_queue* q_ = nullptr;
  int num_elements_ = 0;
};

inline const tpu_step_options* StepOptions::toC(std::vector<tpu_shape>* shapes) const {
  shapes->clear();
  for (const Shape& s : maximumShapes) shapes->push_back(s.toC());
  o_.device_assignment = deviceAssignment ? deviceAssignment->handle() : nullptr;
  o_.maximum_shapes = shapes->empty() ? nullptr : shapes->data();
  o_.num_maximum_shapes = shapes->size();
  o_.padding_spec = static_cast<int>(paddingSpec);
  o_.collective_timeout_ms = collectiveTimeoutMs;
  o_.infeed_queue = infeedQueue ? infeedQueue->handle() : nullptr;
  partition_specs(inputPartitions, "inputPartitions", &input_parts_);
  partition_specs(outputPartitions, "outputPartitions", &output_parts_);
  o_.input_partitions = input_parts_.empty() ? nullptr : input_parts_.data();
  o_.num_input_partitions = input_parts_.size();
  o_.output_partitions = output_parts_.empty() ? nullptr : output_parts_.data();
  o_.num_output_partitions = output_parts_.size();
  o_.caller_threads = callerThreads ? 1 : 0;
  return &o_;
}

// ---- Computations ------------------------------------------------------------------

// One feature's ids for ReplicaContext::embeddingEnqueue (tpu_embedding_feature_batch):
// COO with sampleIndices, or ragged with rowSplits; neither only for a feature without
// ids. Empty weights: every weight 1.
class EmbeddingFeatureBatch {
 public:
  int feature = 0;
  std::vector<long long> ids;
  std::vector<long long> sampleIndices;
  std::vector<long long> rowSplits;
  std::vector<float> weights;
  EmbeddingCombiner combiner = EmbeddingCombiner::Sum;
  // Array forms of the setters: one copy from the language's array, not one call per element.
  void assignIds(const long long* data, size_t count) { ids.assign(data, data + count); }
  void assignSampleIndices(const long long* data, size_t count) { sampleIndices.assign(data, data + count); }
  void assignRowSplits(const long long* data, size_t count) { rowSplits.assign(data, data + count); }
  void assignWeights(const float* data, size_t count) { weights.assign(data, data + count); }
};

// tpu_embedding_config_from_json: serialized TPUEmbeddingConfiguration bytes for
// SystemOptions::embeddingConfig.
inline std::vector<uint8_t> embeddingConfigFromJson(const std::string& json) {
  return detail::read_bytes([&](uint8_t* o, size_t c, size_t* n) {
    return tpu_embedding_config_from_json(json.c_str(), o, c, n);
  });
}

class ReplicaContext;

// A host function for outside compilation. Returns a tpu_status; to fail with a
// message, return failHost(code, message).
class HostComputation {
 public:
  virtual ~HostComputation() = default;
  virtual Status run(int replicaId) = 0;
  static Status failHost(Status code, const std::string& message) { return setLastError(code, message); }
  static tpu_status trampoline(int replica, void* user_data) noexcept {
    return guard([&] { return static_cast<HostComputation*>(user_data)->run(replica); });
  }
#ifndef SWIG
  // body() -> Status, with any exception turned into the host function's error.
  template <typename Body>
  static tpu_status guard(Body body) noexcept {
    try {
      return static_cast<tpu_status>(body());
    } catch (const Error& e) {
      return tpu_set_last_error(static_cast<tpu_status>(e.code() ? e.code() : TPU_UNKNOWN), e.what());
    } catch (const std::exception& e) {
      return tpu_set_last_error(TPU_UNKNOWN, e.what());
    } catch (...) {
      return tpu_set_last_error(TPU_UNKNOWN, "the host function threw a non-standard exception");
    }
  }
#endif
};

// A host function for outside compilation with tensors: run() gets the replica's
// tensors (borrowed by the C call) and hands its own back with setOutputs, which
// reach the replica through the C call's outputs.
class HostTensorComputation {
 public:
  virtual ~HostTensorComputation() = default;
  virtual Status run(int replicaId, const std::vector<Tensor>& inputs) = 0;
  void setOutputs(const std::vector<Tensor>& outputs) { outputs_ = outputs; }
  static Status failHost(Status code, const std::string& message) { return setLastError(code, message); }
#ifndef SWIG
  // First call: runs the function (no outputs: their count is known only once it ran).
  static tpu_status trampoline(int replica, tpu_tensor* const* inputs, int numInputs, tpu_tensor** outputs,
                               int numOutputs, void* user_data) noexcept {
    return HostComputation::guard([&] {
      auto* self = static_cast<HostTensorComputation*>(user_data);
      std::vector<Tensor> in;
      for (int i = 0; i < numInputs; ++i) {
        detail::check(tpu_tensor_retain(inputs[i]));
        in.emplace_back(inputs[i]);
      }
      self->outputs_.clear();
      return self->run(replica, in);
    });
  }
  // Second call: hands the function's tensors over as the C call's outputs (an empty
  // one stays NULL, which the call names).
  static tpu_status handOver(int replica, tpu_tensor* const* inputs, int numInputs, tpu_tensor** outputs,
                             int numOutputs, void* user_data) noexcept {
    return HostComputation::guard([&] {
      auto* self = static_cast<HostTensorComputation*>(user_data);
      for (int o = 0; o < numOutputs; ++o) {
        tpu_tensor* t = self->outputs_[static_cast<size_t>(o)].handleOrNull();
        if (t) detail::check(tpu_tensor_retain(t));
        outputs[o] = t;
      }
      self->outputs_.clear();
      return Status::Ok;
    });
  }
  size_t numOutputs() const { return outputs_.size(); }
#endif

 private:
  std::vector<Tensor> outputs_;
};

// What a computation sees: its replica, its inputs and outputs, and the collectives.
// Valid only during the call it was passed to.
class ReplicaContext {
 public:
  ReplicaContext(tpu_replica_context* ctx, tpu_tensor* const* inputs, int numInputs,
                 tpu_tensor** outputs, int numOutputs)
      : ctx_(ctx), inputs_(inputs), num_inputs_(numInputs), outputs_(outputs), num_outputs_(numOutputs) {}

  int replicaId() const { return get_int(tpu_replica_context_replica_id); }
  int numReplicas() const { return get_int(tpu_replica_context_num_replicas); }
  int core() const { return get_int(tpu_replica_context_core); }
  int numCoresPerReplica() const { return get_int(tpu_replica_context_num_cores_per_replica); }
  // (1.3) The logical core within the replica: XLA's partition id, tf.tpu.core(n)'s n.
  int logicalCore() const { return get_int(tpu_replica_context_logical_core); }
  std::string deviceName() const {
    return detail::read_string([&](char* o, size_t c, size_t* n) {
      return tpu_replica_context_device_name(ctx_, o, c, n);
    });
  }
  int numInputs() const { return num_inputs_; }
  int numOutputs() const { return num_outputs_; }
  // A new reference to input i (empty if the caller passed none).
  Tensor input(int i) const {
    check_index(i, num_inputs_, "input");
    tpu_tensor* t = inputs_[i];
    if (t) detail::check(tpu_tensor_retain(t));
    return Tensor(t);
  }
  void setOutput(int i, const Tensor& t) {
    check_index(i, num_outputs_, "output");
    tpu_tensor* h = t.handleOrNull();
    if (h) detail::check(tpu_tensor_retain(h));
    if (outputs_[i]) tpu_tensor_release(outputs_[i]);
    outputs_[i] = h;
  }
  // Records why this replica fails; return the result from the computation.
  Status fail(Status code, const std::string& message) {
    return (Status)tpu_replica_context_fail(ctx_, static_cast<tpu_status>(code), message.c_str());
  }

  Tensor crossReplicaSum(const Tensor& x, const GroupAssignment& groups, const CollectiveOptions& options) {
    tpu_group_assignment g;
    return Tensor::madeBy([&](tpu_tensor** out) {
      return tpu_cross_replica_sum(ctx_, x.handle(), groups.get(&g), out, options.toC());
    });
  }
  Tensor allReduce(const Tensor& x, ReduceOp op, const GroupAssignment& groups, const CollectiveOptions& options) {
    tpu_group_assignment g;
    return Tensor::madeBy([&](tpu_tensor** out) {
      return tpu_all_reduce(ctx_, x.handle(), static_cast<tpu_reduce_op>(op), groups.get(&g), out, options.toC());
    });
  }
  Tensor allGather(const Tensor& x, int axis, const GroupAssignment& groups, const CollectiveOptions& options) {
    tpu_group_assignment g;
    return Tensor::madeBy([&](tpu_tensor** out) {
      return tpu_all_gather(ctx_, x.handle(), axis, groups.get(&g), out, options.toC());
    });
  }
  Tensor reduceScatter(const Tensor& x, ReduceOp op, int scatterAxis, const GroupAssignment& groups,
                       const CollectiveOptions& options) {
    tpu_group_assignment g;
    return Tensor::madeBy([&](tpu_tensor** out) {
      return tpu_reduce_scatter(ctx_, x.handle(), static_cast<tpu_reduce_op>(op), scatterAxis, groups.get(&g), out, options.toC());
    });
  }
  Tensor allToAll(const Tensor& x, int concatDimension, int splitDimension, int splitCount,
                  const GroupAssignment& groups, const CollectiveOptions& options) {
    tpu_group_assignment g;
    return Tensor::madeBy([&](tpu_tensor** out) {
      return tpu_all_to_all(ctx_, x.handle(), concatDimension, splitDimension, splitCount, groups.get(&g), out, options.toC());
    });
  }
  // sourceTargetPairs[numPairs][2], flattened.
  Tensor collectivePermute(const Tensor& x, const std::vector<int32_t>& sourceTargetPairs,
                           const CollectiveOptions& options) {
    if (sourceTargetPairs.size() % 2 != 0)
      throw Error(TPU_INVALID_ARGUMENT, "sourceTargetPairs has an odd number (" +
                                            std::to_string(sourceTargetPairs.size()) + ") of entries");
    int numPairs = detail::int_or_throw(sourceTargetPairs.size() / 2, "pairs");
    return Tensor::madeBy([&](tpu_tensor** out) {
      return tpu_collective_permute(ctx_, x.handle(), sourceTargetPairs.data(), numPairs, out, options.toC());
    });
  }
  Tensor broadcast(const Tensor& x, int root, const GroupAssignment& groups, const CollectiveOptions& options) {
    tpu_group_assignment g;
    return Tensor::madeBy([&](tpu_tensor** out) {
      return tpu_broadcast(ctx_, x.handle(), root, groups.get(&g), out, options.toC());
    });
  }
  void barrier(const CollectiveOptions& options) { detail::check(tpu_barrier(ctx_, options.toC())); }
  void bfloat16ScopeEnter() { detail::check(tpu_bfloat16_scope_enter(ctx_)); }
  void bfloat16ScopeExit() { detail::check(tpu_bfloat16_scope_exit(ctx_)); }
  void outsideCompilation(HostComputation& fn) {
    detail::check(tpu_outside_compilation(ctx_, &HostComputation::trampoline, &fn));
  }
  // tf.tpu.outside_compilation(computation, *args): inputs go to fn.run on the host;
  // returns the tensors it set with setOutputs. Two C calls: the replica sizes the
  // outputs, and their count is known only once fn has run.
  std::vector<Tensor> outsideCompilationTensors(HostTensorComputation& fn, const std::vector<Tensor>& inputs) {
    std::vector<tpu_tensor*> in = Tensor::handles(inputs);
    detail::check(tpu_outside_compilation_tensors(ctx_, &HostTensorComputation::trampoline, &fn, in.data(),
                                                  detail::int_or_throw(in.size(), "inputs"), nullptr, 0));
    std::vector<tpu_tensor*> out(fn.numOutputs(), nullptr);
    if (out.empty()) return {};
    detail::check(tpu_outside_compilation_tensors(ctx_, &HostTensorComputation::handOver, &fn, nullptr, 0,
                                                  out.data(), detail::int_or_throw(out.size(), "outputs")));
    return Tensor::adopt(out);
  }
  std::vector<Tensor> infeedDequeue(InfeedQueue& queue) {
    std::vector<tpu_tensor*> h(static_cast<size_t>(queue.numElements()), nullptr);
    detail::check(tpu_infeed_dequeue(ctx_, queue.handle(), h.data(), queue.numElements()));
    return Tensor::adopt(h);
  }
  void outfeedEnqueue(OutfeedQueue& queue, const std::vector<Tensor>& tuple) {
    std::vector<tpu_tensor*> h = Tensor::handles(tuple);
    detail::check(tpu_outfeed_enqueue(ctx_, queue.handle(), h.data(), detail::int_or_throw(h.size(), "tuple")));
  }

  // ---- Embeddings (embedding.h, 1.4) ----
  void embeddingEnqueue(const std::vector<EmbeddingFeatureBatch>& features) {
    std::vector<tpu_embedding_feature_batch> c(features.size());
    for (size_t i = 0; i < features.size(); ++i) {
      const EmbeddingFeatureBatch& f = features[i];
      if (!f.weights.empty() && f.weights.size() != f.ids.size())
        throw Error(TPU_INVALID_ARGUMENT, "feature " + std::to_string(f.feature) + " has " +
                                              std::to_string(f.weights.size()) + " weights for " +
                                              std::to_string(f.ids.size()) + " ids");
      if (!f.sampleIndices.empty() && f.sampleIndices.size() != f.ids.size())
        throw Error(TPU_INVALID_ARGUMENT, "feature " + std::to_string(f.feature) + " has " +
                                              std::to_string(f.sampleIndices.size()) + " sample indices for " +
                                              std::to_string(f.ids.size()) + " ids");
      c[i].feature = f.feature;
      c[i].ids = detail::c_dims(f.ids);
      c[i].num_ids = f.ids.size();
      c[i].sample_indices = f.sampleIndices.empty() ? nullptr : detail::c_dims(f.sampleIndices);
      c[i].row_splits = f.rowSplits.empty() ? nullptr : detail::c_dims(f.rowSplits);
      c[i].num_row_splits = f.rowSplits.size();
      c[i].weights = f.weights.empty() ? nullptr : f.weights.data();
      c[i].combiner = static_cast<tpu_embedding_combiner>(f.combiner);
    }
    detail::check(tpu_embedding_enqueue(ctx_, c.data(), detail::int_or_throw(c.size(), "features")));
  }
  // One tensor per configured feature; an empty Tensor for a feature not enqueued.
  std::vector<Tensor> embeddingRecvActivations() {
    std::vector<tpu_tensor*> h(static_cast<size_t>(embeddingNumFeatures()), nullptr);
    detail::check(tpu_embedding_recv_activations(ctx_, h.data(), detail::int_or_throw(h.size(), "features")));
    return Tensor::adopt(h);
  }
  // gradients: one per configured feature (empty for a feature not enqueued);
  // learningRates: one per dynamic learning-rate tag.
  void embeddingSendGradients(const std::vector<Tensor>& gradients, const std::vector<float>& learningRates) {
    std::vector<tpu_tensor*> h = Tensor::handles(gradients);
    detail::check(tpu_embedding_send_gradients(ctx_, h.data(), detail::int_or_throw(h.size(), "gradients"),
                                               learningRates.empty() ? nullptr : learningRates.data(),
                                               detail::int_or_throw(learningRates.size(), "learningRates")));
  }
  // The configuration's feature count, read through the step's system.
  int embeddingNumFeatures() const {
    int n = 0;
    detail::check(tpu_embedding_num_features(system_(), &n));
    return n;
  }
  // Features by name inside a computation (the languages' name-keyed enqueue and activations).
  int embeddingFeatureIndex(const std::string& name) const {
    int i = 0;
    detail::check(tpu_embedding_feature_index(system_(), name.c_str(), &i));
    return i;
  }
  std::string embeddingFeatureName(int feature) const {
    tpu_system* s = system_();
    return detail::read_string([&](char* o, size_t c, size_t* n) { return tpu_embedding_feature_name(s, feature, o, c, n); });
  }

 private:
  tpu_system* system_() const {
    tpu_system* s = nullptr;
    detail::check(tpu_replica_context_system(ctx_, &s));
    return s;
  }
  static void check_index(int i, int n, const char* what) {
    if (i < 0 || i >= n)
      throw Error(TPU_INVALID_ARGUMENT, std::string(what) + " " + std::to_string(i) + " is outside [0, " +
                                            std::to_string(n) + ")");
  }
  int get_int(tpu_status (*fn)(const tpu_replica_context*, int*)) const {
    int out = 0;
    detail::check(fn(ctx_, &out));
    return out;
  }
  tpu_replica_context* ctx_;
  tpu_tensor* const* inputs_;
  int num_inputs_;
  tpu_tensor** outputs_;
  int num_outputs_;
};

// A replicated computation. run() returns a tpu_status: 0, or the result of
// ctx.fail(code, message). A C++ exception escaping run() fails the replica too.
class Computation {
 public:
  virtual ~Computation() = default;
  virtual Status run(ReplicaContext& ctx) = 0;
  static tpu_status trampoline(tpu_replica_context* c, tpu_tensor* const* inputs, int num_inputs,
                               tpu_tensor** outputs, int num_outputs, void* user_data) noexcept {
    ReplicaContext ctx(c, inputs, num_inputs, outputs, num_outputs);
    try {
      return static_cast<tpu_status>(static_cast<Computation*>(user_data)->run(ctx));
    } catch (const Error& e) {
      return tpu_replica_context_fail(c, static_cast<tpu_status>(e.code() ? e.code() : TPU_UNKNOWN), e.what());
    } catch (const std::exception& e) {
      return tpu_replica_context_fail(c, TPU_UNKNOWN, e.what());
    } catch (...) {
      return tpu_replica_context_fail(c, TPU_UNKNOWN, "the computation threw a non-standard exception");
    }
  }
};

// (1.4) A participant of a caller-threads step that this thread joined
// (TpuSystem::stepJoin, tpu_step_join): run the computation on context(), then call
// leave() once, on this same thread. userData() is the key the step's caller gave
// (TpuSystem::replicateOnJoinedThreads and friends).
class JoinedStep {
 public:
  explicit JoinedStep(const tpu_joined_step& j)
      : j_(j), outputs_(static_cast<size_t>(j.num_outputs < 0 ? 0 : j.num_outputs), nullptr),
        ctx_(j.ctx, j.inputs, j.num_inputs, outputs_.data(), j.num_outputs) {}
  JoinedStep(const JoinedStep&) = delete;
  JoinedStep& operator=(const JoinedStep&) = delete;
  ~JoinedStep() {
    for (tpu_tensor* t : outputs_)
      if (t) tpu_tensor_release(t);
  }
  ReplicaContext& context() { return ctx_; }
  int64_t userData() const { return static_cast<int64_t>(reinterpret_cast<intptr_t>(j_.user_data)); }
  int replicaId() const { return ctx_.replicaId(); }
  int numInputs() const { return j_.num_inputs; }
  int numOutputs() const { return j_.num_outputs; }
  bool hasLeft() const { return left_; }
  // Ends the participant with `status` (0, or what ctx.fail returned) and hands the
  // outputs set on context() over.
  void leave(Status status) {
    if (left_) throw Error(TPU_FAILED_PRECONDITION, "this joined step has left already");
    left_ = true;
    const tpu_status st = tpu_step_leave(j_.ctx, static_cast<tpu_status>(status), outputs_.data(),
                                         static_cast<int>(outputs_.size()));
    std::fill(outputs_.begin(), outputs_.end(), nullptr);  // taken over
    detail::check(st);
  }
  // Fails the participant with `message` (as ReplicaContext::fail) and leaves.
  void leaveFailed(Status code, const std::string& message) {
    leave(ctx_.fail(code == Status::Ok ? Status::Unknown : code, message));
  }

 private:
  tpu_joined_step j_;
  std::vector<tpu_tensor*> outputs_;
  ReplicaContext ctx_;
  bool left_ = false;
};

// ---- System --------------------------------------------------------------------------

class TpuSystem {
 public:
  explicit TpuSystem(const SystemOptions& options) {
    detail::check(tpu_system_init(options.toC(), &s_));
  }
  // tf.tpu.initialize_system: starts a system and keeps the TopologyProto it returns.
  static TpuSystem* initializeSystem(const SystemOptions& options) {
    tpu_system* s = nullptr;
    size_t count = 0;
    detail::check(tpu_initialize_system(options.toC(), &s, nullptr, 0, &count));
    return new TpuSystem(s);
  }
  // tf.tpu.experimental.initialize_tpu_system(cluster_resolver): joins the resolver's
  // cluster (null: resolved from the environment; nothing set gives a one-task system).
  // The global topology is topology().
  static TpuSystem* initializeTpuSystem(const ClusterResolver* resolver, const SystemOptions& systemOptions,
                                        const ClusterOptions& clusterOptions) {
    tpu_system* s = nullptr;
    detail::check(tpu_initialize_tpu_system(resolver ? resolver->handle() : nullptr, systemOptions.toC(),
                                            clusterOptions.toC(), &s, nullptr));
    return new TpuSystem(s);
  }
  // DTensor's initialize_accelerator_system (DTENSOR_* variables; local without
  // DTENSOR_JOBS). deviceType "": the preferred ("TPU"). The device type chosen is
  // deviceType().
  static TpuSystem* initializeAcceleratorSystem(const std::string& deviceType, bool enableCoordinationService,
                                                int numLogicalCpuDevices, bool experimentalResetContext) {
    return accelerator(&tpu_initialize_accelerator_system, deviceType, enableCoordinationService,
                       numLogicalCpuDevices, experimentalResetContext);
  }
  // DTensor's alias of initializeAcceleratorSystem.
  static TpuSystem* initializeMultiClient(const std::string& deviceType, bool enableCoordinationService,
                                          int numLogicalCpuDevices, bool experimentalResetContext) {
    return accelerator(&tpu_initialize_multi_client, deviceType, enableCoordinationService,
                       numLogicalCpuDevices, experimentalResetContext);
  }
  TpuSystem(const TpuSystem&) = delete;
  TpuSystem& operator=(const TpuSystem&) = delete;
  ~TpuSystem() { close(); }
  // Shuts down and releases the handle (idempotent).
  void close() {
    if (s_) tpu_system_release(s_);
    s_ = nullptr;
  }
  void shutdown() { detail::check(tpu_system_shutdown(handle())); }
  bool isClosed() const {
    int closed = 0;
    detail::check(tpu_system_is_closed(handle(), &closed));
    return closed != 0;
  }
  int numCores() const {
    int n = 0;
    detail::check(tpu_system_num_cores(handle(), &n));
    return n;
  }
  Topology* topology() const {
    tpu_topology* t = nullptr;
    detail::check(tpu_system_topology(handle(), &t));
    return new Topology(t);
  }
  std::vector<uint8_t> serializedTopology() const {
    return detail::read_array<uint8_t>([&](uint8_t* o, size_t c, size_t* n) {
      return tpu_system_serialized_topology(handle(), o, c, n);
    });
  }
  std::string jobName() const {
    return detail::read_string([&](char* o, size_t c, size_t* n) { return tpu_system_job_name(handle(), o, c, n); });
  }
  std::string deviceType() const {
    return detail::read_string([&](char* o, size_t c, size_t* n) { return tpu_system_device_type(handle(), o, c, n); });
  }
  // The data plane between tasks ("none" for one task, "tcp", "shm", "mpi") and, for
  // people, why it was chosen.
  std::string transport() const {
    return detail::read_string([&](char* o, size_t c, size_t* n) { return tpu_system_transport(handle(), o, c, n); });
  }
  std::string transportReason() const {
    return detail::read_string(
        [&](char* o, size_t c, size_t* n) { return tpu_system_transport_reason(handle(), o, c, n); });
  }
  std::vector<uint8_t> embeddingConfig() const {
    return detail::read_array<uint8_t>([&](uint8_t* o, size_t c, size_t* n) {
      return tpu_system_embedding_config(handle(), o, c, n);
    });
  }
  // DTensor's shutdown_accelerator_system (one-task systems; FailedPrecondition in
  // multi-client mode, where every task calls shutdown()). close() still releases.
  void shutdownAcceleratorSystem() { detail::check(tpu_shutdown_accelerator_system(handle())); }
  // This task's id and the number of tasks (0 and 1 for a one-task system).
  int numTasks() const {
    int n = 0;
    detail::check(tpu_system_num_tasks(handle(), &n));
    return n;
  }
  int taskId() const {
    int n = 0;
    detail::check(tpu_system_task_id(handle(), &n));
    return n;
  }

  // The coordination service's key-value store. Set is AlreadyExists for a set key;
  // get waits up to timeoutMs (DeadlineExceeded); tryGet does not wait (NotFound, as
  // TensorFlow's TryGetKeyValue); delete removes key and every key under key/.
  void kvSet(const std::string& key, const std::vector<uint8_t>& value) {
    detail::check(tpu_kv_set(handle(), key.c_str(), value.data(), value.size()));
  }
  void kvSetString(const std::string& key, const std::string& value) {
    detail::check(tpu_kv_set(handle(), key.c_str(), value.data(), value.size()));
  }
  std::vector<uint8_t> kvGet(const std::string& key, int64_t timeoutMs) {
    return detail::read_bytes([&](uint8_t* o, size_t c, size_t* n) {
      return tpu_kv_get(handle(), key.c_str(), timeoutMs, o, c, n);
    });
  }
  std::string kvGetString(const std::string& key, int64_t timeoutMs) {
    std::vector<uint8_t> v = kvGet(key, timeoutMs);
    return std::string(v.begin(), v.end());
  }
  std::vector<uint8_t> kvTryGet(const std::string& key) {
    return detail::read_bytes([&](uint8_t* o, size_t c, size_t* n) { return tpu_kv_try_get(handle(), key.c_str(), o, c, n); });
  }
  std::string kvTryGetString(const std::string& key) {
    std::vector<uint8_t> v = kvTryGet(key);
    return std::string(v.begin(), v.end());
  }
  void kvDelete(const std::string& key) { detail::check(tpu_kv_delete(handle(), key.c_str())); }
  // Waits until the listed tasks (empty: all) reach barrier `id`.
  void waitAtBarrier(const std::string& id, int64_t timeoutMs, const std::vector<int32_t>& tasks) {
    detail::check(tpu_wait_at_barrier(handle(), id.c_str(), timeoutMs, tasks.empty() ? nullptr : tasks.data(),
                                      detail::int_or_throw(tasks.size(), "tasks")));
  }
  DeviceAssignment* defaultDeviceAssignment(int numReplicas) const {
    tpu_device_assignment* a = nullptr;
    detail::check(tpu_system_default_device_assignment(handle(), numReplicas, &a));
    return new DeviceAssignment(a);
  }

  // inputs[replica * numInputs + i]; returns outputs[replica * numOutputs + j].
  std::vector<Tensor> replicate(Computation& computation, int numReplicas, int numInputs,
                                const std::vector<Tensor>& inputs, int numOutputs,
                                const StepOptions& options) {
    return replicate_(&Computation::trampoline, &computation, false, numReplicas, numInputs, inputs,
                      numOutputs, options);
  }
  std::vector<Tensor> rewrite(Computation& computation, const std::vector<Tensor>& inputs, int numOutputs,
                              const StepOptions& options) {
    return rewrite_(&Computation::trampoline, &computation, false, inputs, numOutputs, options);
  }
  // Empty axis vectors mean TensorFlow's defaults (all 0, every output concatenated).
  std::vector<Tensor> shard(Computation& computation, const std::vector<Tensor>& inputs, int numShards,
                            const std::vector<int32_t>& inputShardAxes, const std::vector<int32_t>& outputsFromAllShards,
                            const std::vector<int32_t>& outputShardAxes, int numOutputs,
                            const StepOptions& options) {
    return shard_(&Computation::trampoline, &computation, false, inputs, numShards, inputShardAxes,
                  outputsFromAllShards, outputShardAxes, numOutputs, options);
  }
  std::vector<Tensor> batchParallel(Computation& computation, const std::vector<Tensor>& inputs, int numShards,
                                    int numOutputs, const StepOptions& options) {
    return batchParallel_(&Computation::trampoline, &computation, false, inputs, numShards, numOutputs, options);
  }

  // ---- (1.4) The same steps on the caller's threads --------------------------------
  // Each participant goes to the thread that joined its core (stepJoin); `key` comes
  // back as its JoinedStep::userData(), for the binding to find the computation.
  std::vector<Tensor> replicateOnJoinedThreads(int64_t key, int numReplicas, int numInputs,
                                               const std::vector<Tensor>& inputs, int numOutputs,
                                               const StepOptions& options) {
    return replicate_(nullptr, as_user_data(key), true, numReplicas, numInputs, inputs, numOutputs, options);
  }
  std::vector<Tensor> rewriteOnJoinedThreads(int64_t key, const std::vector<Tensor>& inputs, int numOutputs,
                                             const StepOptions& options) {
    return rewrite_(nullptr, as_user_data(key), true, inputs, numOutputs, options);
  }
  std::vector<Tensor> shardOnJoinedThreads(int64_t key, const std::vector<Tensor>& inputs, int numShards,
                                           const std::vector<int32_t>& inputShardAxes,
                                           const std::vector<int32_t>& outputsFromAllShards,
                                           const std::vector<int32_t>& outputShardAxes, int numOutputs,
                                           const StepOptions& options) {
    return shard_(nullptr, as_user_data(key), true, inputs, numShards, inputShardAxes, outputsFromAllShards,
                  outputShardAxes, numOutputs, options);
  }
  std::vector<Tensor> batchParallelOnJoinedThreads(int64_t key, const std::vector<Tensor>& inputs, int numShards,
                                                   int numOutputs, const StepOptions& options) {
    return batchParallel_(nullptr, as_user_data(key), true, inputs, numShards, numOutputs, options);
  }
  // Waits up to timeoutMs (< 0: no limit) for a caller-threads step to give `core` a
  // participant (tpu_step_join). Throws DeadlineExceeded when none came, Cancelled
  // when the system shuts down meanwhile, AlreadyExists when another thread has joined
  // the core (the one error a pool may retry on), InvalidArgument for a core out of
  // range or a thread that has joined and not left (a programming error: no retry).
  JoinedStep* stepJoin(int core, int64_t timeoutMs) {
    tpu_joined_step j = TPU_JOINED_STEP_INIT;
    detail::check(tpu_step_join(handle(), core, timeoutMs, &j));
    return new JoinedStep(j);
  }

 private:
  static void* as_user_data(int64_t key) { return reinterpret_cast<void*>(static_cast<intptr_t>(key)); }
  static const tpu_step_options* step_options(const StepOptions& options, bool callerThreads,
                                              std::vector<tpu_shape>* shapes, tpu_step_options* copy) {
    *copy = *options.toC(shapes);
    if (callerThreads) copy->caller_threads = 1;
    return copy;
  }
  std::vector<Tensor> replicate_(tpu_computation_fn fn, void* userData, bool callerThreads, int numReplicas,
                                 int numInputs, const std::vector<Tensor>& inputs, int numOutputs,
                                 const StepOptions& options) {
    if (numReplicas < 0 || numOutputs < 0 ||
        static_cast<int64_t>(numReplicas) * numInputs != static_cast<int64_t>(inputs.size()))
      throw Error(TPU_INVALID_ARGUMENT, std::to_string(inputs.size()) + " inputs are not " +
                                            std::to_string(numReplicas) + " replicas x " +
                                            std::to_string(numInputs));
    std::vector<tpu_tensor*> in = Tensor::handles(inputs);
    std::vector<tpu_tensor*> out(static_cast<size_t>(numReplicas) * static_cast<size_t>(numOutputs), nullptr);
    std::vector<tpu_shape> shapes;
    tpu_step_options o;
    detail::check(tpu_replicate(handle(), fn, userData, numReplicas, numInputs, in.data(), numOutputs,
                                out.data(), step_options(options, callerThreads, &shapes, &o)));
    return Tensor::adopt(out);
  }
  std::vector<Tensor> rewrite_(tpu_computation_fn fn, void* userData, bool callerThreads,
                               const std::vector<Tensor>& inputs, int numOutputs, const StepOptions& options) {
    std::vector<tpu_tensor*> in = Tensor::handles(inputs);
    std::vector<tpu_tensor*> out(static_cast<size_t>(numOutputs < 0 ? 0 : numOutputs), nullptr);
    std::vector<tpu_shape> shapes;
    tpu_step_options o;
    detail::check(tpu_rewrite(handle(), fn, userData, detail::int_or_throw(in.size(), "inputs"), in.data(),
                              numOutputs, out.data(), step_options(options, callerThreads, &shapes, &o)));
    return Tensor::adopt(out);
  }
  std::vector<Tensor> shard_(tpu_computation_fn fn, void* userData, bool callerThreads,
                             const std::vector<Tensor>& inputs, int numShards,
                             const std::vector<int32_t>& inputShardAxes, const std::vector<int32_t>& outputsFromAllShards,
                             const std::vector<int32_t>& outputShardAxes, int numOutputs,
                             const StepOptions& options) {
    std::vector<tpu_tensor*> in = Tensor::handles(inputs);
    check_len(inputShardAxes, in.size(), "inputShardAxes");
    check_len(outputsFromAllShards, static_cast<size_t>(numOutputs < 0 ? 0 : numOutputs), "outputsFromAllShards");
    check_len(outputShardAxes, static_cast<size_t>(numOutputs < 0 ? 0 : numOutputs), "outputShardAxes");
    std::vector<tpu_tensor*> out(static_cast<size_t>(numOutputs < 0 ? 0 : numOutputs), nullptr);
    std::vector<tpu_shape> shapes;
    tpu_step_options o;
    detail::check(tpu_shard(handle(), fn, userData, detail::int_or_throw(in.size(), "inputs"), in.data(),
                            numShards, or_null(inputShardAxes), or_null(outputsFromAllShards),
                            or_null(outputShardAxes), numOutputs, out.data(),
                            step_options(options, callerThreads, &shapes, &o)));
    return Tensor::adopt(out);
  }
  std::vector<Tensor> batchParallel_(tpu_computation_fn fn, void* userData, bool callerThreads,
                                     const std::vector<Tensor>& inputs, int numShards, int numOutputs,
                                     const StepOptions& options) {
    std::vector<tpu_tensor*> in = Tensor::handles(inputs);
    std::vector<tpu_tensor*> out(static_cast<size_t>(numOutputs < 0 ? 0 : numOutputs), nullptr);
    std::vector<tpu_shape> shapes;
    tpu_step_options o;
    detail::check(tpu_batch_parallel(handle(), fn, userData, detail::int_or_throw(in.size(), "inputs"),
                                     in.data(), numShards, numOutputs, out.data(),
                                     step_options(options, callerThreads, &shapes, &o)));
    return Tensor::adopt(out);
  }

 public:
  // ---- Embeddings (embedding.h, 1.4): the tables of the embedding configuration ----
  EmbeddingMode embeddingMode() const {
    tpu_embedding_mode m = TPU_EMBEDDING_MODE_UNSPECIFIED;
    detail::check(tpu_embedding_mode_of(handle(), &m));
    return static_cast<EmbeddingMode>(m);
  }
  int embeddingNumTables() const { return get_count(tpu_embedding_num_tables); }
  int embeddingTableIndex(const std::string& name) const {
    int i = 0;
    detail::check(tpu_embedding_table_index(handle(), name.c_str(), &i));
    return i;
  }
  std::string embeddingTableName(int table) const {
    return detail::read_string([&](char* o, size_t c, size_t* n) { return tpu_embedding_table_name(handle(), table, o, c, n); });
  }
  int64_t embeddingVocabularySize(int table) const {
    int64_t v = 0;
    int32_t d = 0;
    detail::check(tpu_embedding_table_shape(handle(), table, &v, &d));
    return v;
  }
  int embeddingDimension(int table) const {
    int64_t v = 0;
    int32_t d = 0;
    detail::check(tpu_embedding_table_shape(handle(), table, &v, &d));
    return d;
  }
  EmbeddingOptimizer embeddingTableOptimizer(int table) const {
    tpu_embedding_optimizer o = TPU_EMBEDDING_OPTIMIZER_SGD;
    detail::check(tpu_embedding_table_optimizer(handle(), table, &o));
    return static_cast<EmbeddingOptimizer>(o);
  }
  int embeddingNumVariables(int table) const {
    int n = 0;
    detail::check(tpu_embedding_table_num_variables(handle(), table, &n));
    return n;
  }
  std::string embeddingVariableName(int table, int variable) const {
    return detail::read_string(
        [&](char* o, size_t c, size_t* n) { return tpu_embedding_variable_name(handle(), table, variable, o, c, n); });
  }
  // The global core holding a row's shard, and the row's index there.
  int embeddingRowCore(int table, int64_t row) const {
    int core = 0;
    int64_t shardRow = 0;
    detail::check(tpu_embedding_row_owner(handle(), table, row, &core, &shardRow));
    return core;
  }
  int64_t embeddingShardRow(int table, int64_t row) const {
    int core = 0;
    int64_t shardRow = 0;
    detail::check(tpu_embedding_row_owner(handle(), table, row, &core, &shardRow));
    return shardRow;
  }
  int embeddingNumFeatures() const { return get_count(tpu_embedding_num_features); }
  int embeddingFeatureIndex(const std::string& name) const {
    int i = 0;
    detail::check(tpu_embedding_feature_index(handle(), name.c_str(), &i));
    return i;
  }
  std::string embeddingFeatureName(int feature) const {
    return detail::read_string(
        [&](char* o, size_t c, size_t* n) { return tpu_embedding_feature_name(handle(), feature, o, c, n); });
  }
  int embeddingFeatureTable(int feature) const {
    int t = 0;
    detail::check(tpu_embedding_feature_table(handle(), feature, &t));
    return t;
  }
  std::vector<long long> embeddingFeatureShape(int feature) const {
    std::vector<int64_t> v = detail::read_array<int64_t>(
        [&](int64_t* o, size_t c, size_t* n) { return tpu_embedding_feature_shape(handle(), feature, o, c, n); });
    return std::vector<long long>(v.begin(), v.end());
  }
  // values: numRows * dimension floats, row-major.
  void embeddingLoad(int table, int variable, int64_t firstRow, int64_t numRows, const std::vector<float>& values) {
    detail::check(tpu_embedding_load(handle(), table, variable, firstRow, numRows,
                                     values.empty() ? nullptr : values.data(), values.size()));
  }
  // numRows * dimension floats; in a multi-task system the rows other tasks hold are NaN.
  std::vector<float> embeddingRetrieve(int table, int variable, int64_t firstRow, int64_t numRows) const {
    size_t count = 0;
    detail::check(tpu_embedding_retrieve(handle(), table, variable, firstRow, numRows, nullptr, 0, &count));
    std::vector<float> v(count, std::numeric_limits<float>::quiet_NaN());
    if (count > 0) detail::check(tpu_embedding_retrieve(handle(), table, variable, firstRow, numRows, v.data(), v.size(), &count));
    return v;
  }
  // Array forms of the two above (the languages' float arrays in place, no vector copy);
  // retrieve leaves the rows other tasks hold in `out` as they were.
  void embeddingLoadFloats(int table, int variable, int64_t firstRow, int64_t numRows, const float* data, size_t count) {
    detail::check(tpu_embedding_load(handle(), table, variable, firstRow, numRows, data, count));
  }
  void embeddingRetrieveInto(int table, int variable, int64_t firstRow, int64_t numRows, float* out, size_t count) const {
    size_t n = 0;
    detail::check(tpu_embedding_retrieve(handle(), table, variable, firstRow, numRows, nullptr, 0, &n));
    if (n != count)
      throw Error(TPU_INVALID_ARGUMENT, "out holds " + std::to_string(count) + " floats, " + std::to_string(numRows) +
                                            " rows of table " + std::to_string(table) + " are " + std::to_string(n) + " floats");
    if (n > 0) detail::check(tpu_embedding_retrieve(handle(), table, variable, firstRow, numRows, out, count, &n));
  }
  tpu_system* handle() const {
    detail::check_handle(s_, "the TPU system");
    return s_;
  }

 private:
  explicit TpuSystem(tpu_system* adopted) : s_(adopted) {}
  template <typename Fn>
  static TpuSystem* accelerator(Fn fn, const std::string& deviceType, bool enableCoordinationService,
                                int numLogicalCpuDevices, bool experimentalResetContext) {
    tpu_system* s = nullptr;
    char chosen[8];
    size_t count = 0;
    detail::check(fn(detail::c_str_or_null(deviceType), enableCoordinationService ? 1 : 0, numLogicalCpuDevices,
                     experimentalResetContext ? 1 : 0, &s, chosen, sizeof chosen, &count));
    return new TpuSystem(s);
  }
  static void check_len(const std::vector<int32_t>& v, size_t n, const char* what) {
    if (!v.empty() && v.size() != n)
      throw Error(TPU_INVALID_ARGUMENT, std::string(what) + " has " + std::to_string(v.size()) +
                                            " entries, not " + std::to_string(n));
  }
  int get_count(tpu_status (*fn)(const tpu_system*, int*)) const {
    int n = 0;
    detail::check(fn(handle(), &n));
    return n;
  }
  static const int* or_null(const std::vector<int32_t>& v) { return v.empty() ? nullptr : v.data(); }
  tpu_system* s_ = nullptr;
};

#ifndef SWIG
namespace detail {
template <typename Create, typename Q>
Q* make_queue(Create create, const TpuSystem& system, int numReplicas, const std::vector<int32_t>& dtypes,
              const std::vector<Shape>& shapes, int capacity) {
  if (dtypes.size() != shapes.size())
    throw Error(TPU_INVALID_ARGUMENT, std::to_string(dtypes.size()) + " dtypes but " +
                                          std::to_string(shapes.size()) + " shapes");
  std::vector<tpu_dtype> d;
  std::vector<tpu_shape> s;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    d.push_back(static_cast<tpu_dtype>(dtypes[i]));
    s.push_back(shapes[i].toC());
  }
  Q* q = nullptr;
  check(create(system.handle(), numReplicas, int_or_throw(d.size(), "dtypes"), d.data(), s.data(), capacity, &q));
  return q;
}
}  // namespace detail
#endif

inline InfeedQueue::InfeedQueue(const TpuSystem& system, int numReplicas, const std::vector<int32_t>& dtypes,
                                const std::vector<Shape>& shapes, int capacity)
    : q_(detail::make_queue<decltype(&tpu_infeed_queue_create), tpu_infeed_queue>(
          &tpu_infeed_queue_create, system, numReplicas, dtypes, shapes, capacity)),
      num_elements_(static_cast<int>(dtypes.size())) {}

inline OutfeedQueue::OutfeedQueue(const TpuSystem& system, int numReplicas, const std::vector<int32_t>& dtypes,
                                  const std::vector<Shape>& shapes, int capacity)
    : q_(detail::make_queue<decltype(&tpu_outfeed_queue_create), tpu_outfeed_queue>(
          &tpu_outfeed_queue_create, system, numReplicas, dtypes, shapes, capacity)),
      num_elements_(static_cast<int>(dtypes.size())) {}

}  // namespace tpurt

#endif  // TPURT_BINDING_HPP
