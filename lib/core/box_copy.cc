#include "core/box_copy.h"

#include <cstring>

#include "tpurt/common.h"

namespace tpurt {

void copy_box(size_t elem_size, int rank, const int64_t* extent, const void* src,
              const int64_t* src_dims, const int64_t* src_start, void* dst,
              const int64_t* dst_dims, const int64_t* dst_start) {
  for (int i = 0; i < rank; ++i)
    if (extent[i] == 0) return;
  if (rank == 0) {
    std::memcpy(dst, src, elem_size);
    return;
  }
  int64_t src_stride[TPU_MAX_RANK], dst_stride[TPU_MAX_RANK];
  src_stride[rank - 1] = dst_stride[rank - 1] = 1;
  for (int i = rank - 2; i >= 0; --i) {
    src_stride[i] = src_stride[i + 1] * src_dims[i + 1];
    dst_stride[i] = dst_stride[i + 1] * dst_dims[i + 1];
  }
  // Fold trailing dimensions that are whole in the box and both arrays into one run.
  int inner = rank - 1;
  int64_t run = extent[inner];
  while (inner > 0 && extent[inner] == src_dims[inner] && extent[inner] == dst_dims[inner]) {
    --inner;
    run *= extent[inner];
  }
  const size_t run_bytes = static_cast<size_t>(run) * elem_size;
  int64_t idx[TPU_MAX_RANK] = {0};
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  for (;;) {
    int64_t so = 0, doff = 0;
    for (int i = 0; i <= inner; ++i) {
      so += (src_start[i] + idx[i]) * src_stride[i];
      doff += (dst_start[i] + idx[i]) * dst_stride[i];
    }
    std::memcpy(d + doff * elem_size, s + so * elem_size, run_bytes);
    int k = inner - 1;
    while (k >= 0 && ++idx[k] == extent[k]) idx[k--] = 0;
    if (k < 0) break;
  }
}

}  // namespace tpurt
