// A warp's inclusive prefix sum, the first step of the block-wide scans that compact key
// tiles (key_tile_list.cuh) and list query tiles (seq_tile_table.cuh).
#pragma once

#include <cuda_runtime.h>

namespace bspa::kernels::cuda {

// v summed over lanes 0..lane of the warp; every lane of the warp calls it.
__device__ __forceinline__ int warp_inclusive_sum(int v, int lane) {
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int u = __shfl_up_sync(0xffffffffu, v, off);
    if (lane >= off) v += u;
  }
  return v;
}

}  // namespace bspa::kernels::cuda
