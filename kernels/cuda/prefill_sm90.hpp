// Host side of the sm90a (Hopper) prefill kernel. It takes the sm80 kernel's parameters
// (same problem mapping, filled once in prefill_cuda.cpp); one launch function per
// (element type, head dim), defined in prefill_sm90_<dtype>.cu. Query tiles are 128 rows.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/prefill_sm80.hpp"

namespace bspa::kernels::sm90 {

using Params = sm80::Params;

constexpr int kTileRows = 128;

template <class T, int D>
void launch(const Params &p, dim3 grid, cudaStream_t stream);

}  // namespace bspa::kernels::sm90
