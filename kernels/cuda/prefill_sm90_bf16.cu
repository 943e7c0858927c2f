// The bf16 instantiations of the sm90a prefill kernel (one file per dtype so they build in parallel).
#include "kernels/cuda/launch_check.hpp"
#include "kernels/cuda/prefill_sm90.cuh"

namespace bspa::kernels::sm90 {

template <class T, int D>
void launch(const Params &p, dim3 grid, cudaStream_t stream) {
  constexpr int smem = Config<D>::kSmemBytes;
  cuda::check_cuda(cudaFuncSetAttribute(prefill_sm90_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                   "cudaFuncSetAttribute(prefill_sm90_kernel)");
  prefill_sm90_kernel<T, D><<<grid, Config<D>::kThreads, smem, stream>>>(p);
  cuda::check_launch("prefill_sm90_kernel", stream);
}

template void launch<__nv_bfloat16, 64>(const Params &, dim3, cudaStream_t);
template void launch<__nv_bfloat16, 128>(const Params &, dim3, cudaStream_t);

}  // namespace bspa::kernels::sm90
