// The f16 instantiations of the sm80 prefill kernel (one file per dtype so they build in parallel).
#include "kernels/cuda/launch_check.hpp"
#include "kernels/cuda/prefill_sm80.cuh"

namespace bspa::kernels::sm80 {

template <class T, int D, int BM>
void launch(const Params &p, dim3 grid, cudaStream_t stream) {
  constexpr int smem = Config<D, BM>::kSmemBytes;
  // The opt-in above 48 KiB is per device; setting it again is cheap and capturable.
  cuda::check_cuda(cudaFuncSetAttribute(prefill_sm80_kernel<T, D, BM>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                   "cudaFuncSetAttribute(prefill_sm80_kernel)");
  prefill_sm80_kernel<T, D, BM><<<grid, Config<D, BM>::kThreads, smem, stream>>>(p);
  cuda::check_launch("prefill_sm80_kernel", stream);
}

template void launch<__half, 64, 64>(const Params &, dim3, cudaStream_t);
template void launch<__half, 64, 128>(const Params &, dim3, cudaStream_t);
template void launch<__half, 128, 64>(const Params &, dim3, cudaStream_t);
template void launch<__half, 128, 128>(const Params &, dim3, cudaStream_t);

}  // namespace bspa::kernels::sm80
