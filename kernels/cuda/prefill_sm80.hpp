// Host side of the sm80 prefill kernel: one launch function per (element type, head dim,
// tile rows), defined in prefill_sm80_<dtype>.cu, over the shared AttentionParams.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention_params.hpp"

namespace bspa::kernels::sm80 {

using Params = cuda::AttentionParams;

template <class T, int D, int BM>
void launch(const Params &p, dim3 grid, cudaStream_t stream);

}  // namespace bspa::kernels::sm80
