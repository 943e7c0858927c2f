// The device form of a Layout: the analytic parameters by value, CSR arrays as device
// pointers. CSR arrays are uploaded on a layout's first CUDA use on each device and live
// as long as the layout (Layout::device_copies). That first use allocates and copies, so
// it must happen before a CUDA graph capture that launches with the layout (it is
// refused, with Error(InvalidState), while the stream is capturing).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/layout.hpp"

namespace bspa::kernels::cuda {

struct DeviceLayout {
  int32_t kind = 0;  // a LayoutKind (kernels/block_rule.hpp)
  int32_t block_size = 64;
  int32_t local_blocks = 0, vert_stride = 1, head_begin = 0, head_step = 0;
  int32_t num_block_rows = 0;
  const int32_t *crow = nullptr;
  const int32_t *col = nullptr;

#ifdef __CUDACC__
  // The rule of Layout::allowed (block_allowed, kernels/block_rule.hpp), in the kernels'
  // 32-bit block indices: kb, qb >= 0; the CSR rows past num_block_rows see nothing (the
  // host validates lengths).
  __device__ __forceinline__ bool allowed(int32_t h, int32_t qb, int32_t kb) const {
    return block_allowed(*this, h, qb, kb);
  }
#endif
};

DeviceLayout device_layout(const Layout &layout, int device, cudaStream_t stream);

}  // namespace bspa::kernels::cuda
