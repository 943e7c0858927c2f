// The f16 instantiations of the decode kernel (decode_bf16.cu holds the shared-memory size).
#include "kernels/cuda/decode.cuh"

namespace bspa::kernels::decode {

template void launch<__half, __half, 64>(const cuda::AttentionParams &, int32_t, int32_t, int32_t, const Split &,
                                         const Overlap &, cudaStream_t);
template void launch<__half, __half, 128>(const cuda::AttentionParams &, int32_t, int32_t, int32_t, const Split &,
                                          const Overlap &, cudaStream_t);

template bool cluster_merge_fits<__half, __half, 64>(int32_t, int32_t, int32_t, int64_t);
template bool cluster_merge_fits<__half, __half, 128>(int32_t, int32_t, int32_t, int64_t);

}  // namespace bspa::kernels::decode
