// Owning references to tensors the library makes: released when they go out of
// scope unless taken, so a throw between making a tensor and handing it out leaks
// nothing.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tpurt {

// One reference (or none).
class TensorRef {
 public:
  TensorRef() = default;
  explicit TensorRef(Tensor* t) noexcept : t_(t) {}  // adopts t's reference
  TensorRef(TensorRef&& other) noexcept : t_(other.take()) {}
  TensorRef& operator=(TensorRef&& other) noexcept {
    reset(other.take());
    return *this;
  }
  TensorRef(const TensorRef&) = delete;
  TensorRef& operator=(const TensorRef&) = delete;
  ~TensorRef() { release(t_); }

  Tensor* get() const noexcept { return t_; }
  Tensor* operator->() const noexcept { return t_; }
  // Hands the reference to the caller.
  Tensor* take() noexcept { return std::exchange(t_, nullptr); }
  void reset(Tensor* t = nullptr) noexcept { release(std::exchange(t_, t)); }

 private:
  Tensor* t_ = nullptr;
};

// An array of references, for the C-style arrays (Tensor**) that steps fill.
class TensorRefs {
 public:
  explicit TensorRefs(size_t n = 0) : v_(n, nullptr) {}
  TensorRefs(const TensorRefs&) = delete;
  TensorRefs& operator=(const TensorRefs&) = delete;
  ~TensorRefs() {
    for (Tensor* t : v_) release(t);
  }

  Tensor** data() noexcept { return v_.data(); }
  Tensor*& operator[](size_t i) { return v_[i]; }
  Tensor* take(size_t i) noexcept { return std::exchange(v_[i], nullptr); }
  void reserve(size_t n) { v_.reserve(n); }
  void push_back(Tensor* t) { v_.push_back(t); }  // after reserve: never throws

 private:
  std::vector<Tensor*> v_;
};

}  // namespace tpurt
