// Magic words of the C handles, as NCCL's comm startMagic: every opaque handle struct
// begins with a HandleMark, a word that names its type while it lives and is poisoned
// when it is destroyed. require_not_null (core/status.h) checks it for every handle
// type listed here, so a released handle, or a handle of another type cast to this
// one, passed back through the C ABI is TPU_INVALID_ARGUMENT instead of undefined
// behaviour, as long as its memory is still mapped and was not reused by a new
// handle of the same type (docs/ABI.md, "Handles").
//
// The mark is the first member of every handle struct, so the word
// lies at offset 0 whatever the type: reading it through a handle of another type
// stays inside that handle's memory. The check is one load and one compare.
#pragma once

#include <cstdint>

struct tpu_system;
struct tpu_tensor;
struct tpu_topology;
struct tpu_device_assignment;
struct tpu_mesh;
struct tpu_cluster_resolver;
struct tpu_infeed_queue;
struct tpu_outfeed_queue;
struct tpu_replica_context;

namespace tpurt {

// XX(type, word): one line per handle type. The words are odd, so that no aligned
// pointer a freed block's allocator writes over the mark can equal one.
#define TPURT_HANDLE_TYPES(XX)               \
  XX(tpu_system, 0x5359537Bu)                \
  XX(tpu_tensor, 0x534E5455u)                \
  XX(tpu_topology, 0x504F5439u)              \
  XX(tpu_device_assignment, 0x4E474143u)     \
  XX(tpu_mesh, 0x4853454Du)                  \
  XX(tpu_cluster_resolver, 0x564C5353u)      \
  XX(tpu_infeed_queue, 0x51464E49u)          \
  XX(tpu_outfeed_queue, 0x5146544Fu)         \
  XX(tpu_replica_context, 0x58544301u)

// What a destroyed handle's mark holds.
constexpr uint32_t kReleasedHandleWord = 0xDEADBEEFu;

template <typename T>
struct HandleType {
  static constexpr bool kIsHandle = false;
};

#define TPURT_HANDLE_TYPE_(type, word)                  \
  template <>                                           \
  struct HandleType<type> {                             \
    static constexpr bool kIsHandle = true;             \
    static constexpr uint32_t kWord = word;             \
    static constexpr const char* kName = #type;         \
  };
TPURT_HANDLE_TYPES(TPURT_HANDLE_TYPE_)
#undef TPURT_HANDLE_TYPE_

// The first member of handle struct T: its word while it lives. A copy is a new
// handle (its own live word); assignment leaves the word alone.
template <typename T>
class HandleMark {
 public:
  HandleMark() noexcept : word_(HandleType<T>::kWord) {}
  HandleMark(const HandleMark&) noexcept : word_(HandleType<T>::kWord) {}
  HandleMark& operator=(const HandleMark&) noexcept { return *this; }
  ~HandleMark() { poison(); }

  bool live() const noexcept { return word_ == HandleType<T>::kWord; }
  // A volatile store: the compiler may not drop it as a store to an object whose
  // lifetime ends (GCC's -flifetime-dse would drop a plain one in a destructor).
  void poison() noexcept { *static_cast<volatile uint32_t*>(&word_) = kReleasedHandleWord; }

 private:
  uint32_t word_;
};

// Whether p (not NULL) is a live handle of its type.
template <typename T>
inline bool is_live_handle(const T* p) noexcept {
  return p->mark.live();
}

// Throws TPU_INVALID_ARGUMENT "argument 'name' is not a live type (released, or a
// handle of another type)".
[[noreturn]] void not_a_live_handle(const char* name, const char* type);

}  // namespace tpurt
