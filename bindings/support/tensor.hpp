// Binding-support layer (../tpurt_binding.hpp): Tensor, Shape and GroupAssignment.
#ifndef TPURT_BINDING_SUPPORT_TENSOR_HPP
#define TPURT_BINDING_SUPPORT_TENSOR_HPP

#include "common.hpp"

namespace tpurt {

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
  // Groups of different sizes (tpu_group_assignment_ragged): row g holds groupSizes[g]
  // ids, taken in order from replicaIds. All-reduce and broadcast take them;
  // all-gather, reduce-scatter and all-to-all refuse them (tpurt/collectives.h).
  static GroupAssignment ragged(const std::vector<int32_t>& replicaIds,
                                const std::vector<int32_t>& groupSizes) {
    int64_t total = 0;
    for (int32_t n : groupSizes) total += n;
    if (total != static_cast<int64_t>(replicaIds.size()))
      throw Error(TPU_INVALID_ARGUMENT, std::to_string(replicaIds.size()) +
                                            " replica ids do not fill groups of " +
                                            std::to_string(total) + " ids in all");
    GroupAssignment g;
    const int n = static_cast<int>(groupSizes.size());
    size_t count = 0;
    tpu_group_assignment view{};
    detail::check(tpu_group_assignment_ragged(replicaIds.data(), groupSizes.data(), n, nullptr, 0,
                                              &count, &view));
    g.ids_.resize(count);
    detail::check(tpu_group_assignment_ragged(replicaIds.data(), groupSizes.data(), n, g.ids_.data(),
                                              count, &count, &view));
    g.num_groups_ = n;
    g.group_size_ = TPU_GROUP_SIZE_RAGGED;
    return g;
  }
  bool isEmpty() const { return ids_.empty() && num_groups_ == 0; }
  int numGroups() const { return num_groups_; }
  // TPU_GROUP_SIZE_RAGGED (-1) for groups of different sizes (groupSizes has each).
  int groupSize() const { return group_size_; }
  bool isRagged() const { return group_size_ == TPU_GROUP_SIZE_RAGGED; }
  std::vector<int32_t> groupSizes() const {
    std::vector<int32_t> sizes;
    forEachRow([&](const int32_t*, int32_t n) { sizes.push_back(n); });
    return sizes;
  }
  // The ids, row after row (without the ragged form's lengths).
  std::vector<int32_t> replicaIds() const {
    if (!isRagged()) return ids_;
    std::vector<int32_t> ids;
    forEachRow([&](const int32_t* row, int32_t n) { ids.insert(ids.end(), row, row + n); });
    return ids;
  }
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
  template <typename Fn>
  void forEachRow(Fn&& fn) const {
    size_t at = 0;
    for (int g = 0; g < num_groups_; ++g) {
      const int32_t n = isRagged() ? ids_[at++] : group_size_;
      fn(ids_.data() + at, n);
      at += static_cast<size_t>(n);
    }
  }
  std::vector<int32_t> ids_;
  int num_groups_ = 0;
  int group_size_ = 0;
};

}  // namespace tpurt

#endif  // TPURT_BINDING_SUPPORT_TENSOR_HPP
