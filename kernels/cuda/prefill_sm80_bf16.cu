// The bf16 instantiations of the sm80 prefill kernel (one file per dtype so they build in parallel).
#include "kernels/cuda/prefill_sm80.cuh"

namespace bspa::kernels::sm80 {

template void launch<__nv_bfloat16, __nv_bfloat16, 64, 64>(const Params &, dim3, cudaStream_t);
template void launch<__nv_bfloat16, __nv_bfloat16, 64, 128>(const Params &, dim3, cudaStream_t);
template void launch<__nv_bfloat16, __nv_bfloat16, 128, 64>(const Params &, dim3, cudaStream_t);
template void launch<__nv_bfloat16, __nv_bfloat16, 128, 128>(const Params &, dim3, cudaStream_t);

}  // namespace bspa::kernels::sm80
