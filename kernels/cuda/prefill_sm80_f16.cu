// The f16 instantiations of the sm80 prefill kernel (one file per dtype so they build in parallel).
#include "kernels/cuda/prefill_sm80.cuh"

namespace bspa::kernels::sm80 {

template void launch<__half, __half, 64, 64>(const Params &, dim3, cudaStream_t);
template void launch<__half, __half, 64, 128>(const Params &, dim3, cudaStream_t);
template void launch<__half, __half, 128, 64>(const Params &, dim3, cudaStream_t);
template void launch<__half, __half, 128, 128>(const Params &, dim3, cudaStream_t);

}  // namespace bspa::kernels::sm80
