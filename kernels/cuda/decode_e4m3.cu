// The instantiations of the decode kernel over e4m3 pages (q and out bf16 or f16).
#include "kernels/cuda/decode.cuh"

namespace bspa::kernels::decode {

template void launch<__nv_bfloat16, uint8_t, 64>(const cuda::AttentionParams &, int32_t, int32_t, int32_t,
                                                 const Split &, const Overlap &, cudaStream_t);
template void launch<__nv_bfloat16, uint8_t, 128>(const cuda::AttentionParams &, int32_t, int32_t, int32_t,
                                                  const Split &, const Overlap &, cudaStream_t);
template void launch<__half, uint8_t, 64>(const cuda::AttentionParams &, int32_t, int32_t, int32_t, const Split &,
                                          const Overlap &, cudaStream_t);
template void launch<__half, uint8_t, 128>(const cuda::AttentionParams &, int32_t, int32_t, int32_t, const Split &,
                                           const Overlap &, cudaStream_t);

template bool cluster_merge_fits<__nv_bfloat16, uint8_t, 64>(int32_t, int32_t, int32_t, int64_t);
template bool cluster_merge_fits<__nv_bfloat16, uint8_t, 128>(int32_t, int32_t, int32_t, int64_t);
template bool cluster_merge_fits<__half, uint8_t, 64>(int32_t, int32_t, int32_t, int64_t);
template bool cluster_merge_fits<__half, uint8_t, 128>(int32_t, int32_t, int32_t, int64_t);

}  // namespace bspa::kernels::decode
