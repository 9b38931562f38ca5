// A map from row ids (>= 0) to dense indices 0, 1, ... in first-insertion order:
// open addressing, reused across steps without freeing its memory.
#pragma once

#include <cstdint>
#include <vector>

namespace tpurt {
namespace embedding {

class IdIndex {
 public:
  // Forgets every id; room for `expected` ids without growing.
  void reset(size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2) cap *= 2;
    if (keys_.size() < cap) {
      keys_.assign(cap, kEmpty);
      values_.assign(cap, 0);
    } else {
      std::fill(keys_.begin(), keys_.end(), kEmpty);
    }
    size_ = 0;
  }
  // The index of id, inserted as the next one if new (*fresh tells).
  int32_t insert(int64_t id, bool* fresh) {
    if ((size_ + 1) * 2 > keys_.size()) grow();
    size_t mask = keys_.size() - 1, i = hash(id) & mask;
    while (keys_[i] != kEmpty) {
      if (keys_[i] == id) {
        *fresh = false;
        return values_[i];
      }
      i = (i + 1) & mask;
    }
    keys_[i] = id;
    values_[i] = static_cast<int32_t>(size_);
    *fresh = true;
    return static_cast<int32_t>(size_++);
  }
  size_t size() const { return size_; }

 private:
  static constexpr int64_t kEmpty = -1;
  static uint64_t hash(int64_t id) { return static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull >> 17; }
  void grow() {
    std::vector<int64_t> keys;
    std::vector<int32_t> values;
    keys.swap(keys_);
    values.swap(values_);
    keys_.assign(keys.empty() ? 16 : keys.size() * 2, kEmpty);
    values_.assign(keys_.size(), 0);
    size_t mask = keys_.size() - 1;
    for (size_t j = 0; j < keys.size(); ++j) {
      if (keys[j] == kEmpty) continue;
      size_t i = hash(keys[j]) & mask;
      while (keys_[i] != kEmpty) i = (i + 1) & mask;
      keys_[i] = keys[j];
      values_[i] = values[j];
    }
  }
  std::vector<int64_t> keys_;
  std::vector<int32_t> values_;
  size_t size_ = 0;
};

}  // namespace embedding
}  // namespace tpurt
