// Host side of the sm80 prefill kernel: one launch function per (element type, head dim,
// tile rows), defined in prefill_sm80_<dtype>.cu, over the shared AttentionParams.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention_params.hpp"

namespace bspa::kernels::sm80 {

using Params = cuda::AttentionParams;

// T: q/out element type (__nv_bfloat16 or __half); KV: the pages' (T, or uint8_t for e4m3
// with p.k_scale / p.v_scale per KV head).
template <class T, class KV, int D, int BM>
void launch(const Params &p, dim3 grid, cudaStream_t stream);

}  // namespace bspa::kernels::sm80
