// The f16 instantiations of the decode kernel (one file per dtype so they build in parallel).
#include "kernels/cuda/decode.cuh"

namespace bspa::kernels::decode {

template void launch<__half, 64>(const cuda::AttentionParams &, int32_t, int32_t, int32_t, const Split &, bool,
                                 cudaStream_t);
template void launch<__half, 128>(const cuda::AttentionParams &, int32_t, int32_t, int32_t, const Split &, bool,
                                  cudaStream_t);

}  // namespace bspa::kernels::decode
