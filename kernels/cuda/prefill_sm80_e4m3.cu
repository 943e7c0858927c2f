// The instantiations of the sm80 prefill kernel over e4m3 pages (q and out bf16 or f16).
// On sm90 GPUs the sm90a kernel takes them for queries over 64 rows (prefill_sm90_e4m3.cu).
#include "kernels/cuda/prefill_sm80.cuh"

namespace bspa::kernels::sm80 {

template void launch<__nv_bfloat16, uint8_t, 64, 64>(const Params &, dim3, cudaStream_t);
template void launch<__nv_bfloat16, uint8_t, 64, 128>(const Params &, dim3, cudaStream_t);
template void launch<__nv_bfloat16, uint8_t, 128, 64>(const Params &, dim3, cudaStream_t);
template void launch<__nv_bfloat16, uint8_t, 128, 128>(const Params &, dim3, cudaStream_t);
template void launch<__half, uint8_t, 64, 64>(const Params &, dim3, cudaStream_t);
template void launch<__half, uint8_t, 64, 128>(const Params &, dim3, cudaStream_t);
template void launch<__half, uint8_t, 128, 64>(const Params &, dim3, cudaStream_t);
template void launch<__half, uint8_t, 128, 128>(const Params &, dim3, cudaStream_t);

}  // namespace bspa::kernels::sm80
