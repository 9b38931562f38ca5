// Copies a rectangular box of elements between two row-major arrays of different
// shapes: the building block of gather, all-to-all and scatter layouts.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tpurt {

// Copies the box of size extent[0..rank) that starts at src_start in src (shape
// src_dims) to dst_start in dst (shape dst_dims). The box must fit in both.
void copy_box(size_t elem_size, int rank, const int64_t* extent, const void* src,
              const int64_t* src_dims, const int64_t* src_start, void* dst,
              const int64_t* dst_dims, const int64_t* dst_start);

}  // namespace tpurt
