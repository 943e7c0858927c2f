// The f16 instantiations of the sm90a prefill kernel (one file per dtype so they build in parallel).
#include "kernels/cuda/launch_check.hpp"
#include "kernels/cuda/prefill_sm90.cuh"

#include <algorithm>
#include <cstdint>

namespace bspa::kernels::sm90 {

template <class T, int D>
void launch(const Params &p, dim3 grid, cudaStream_t stream) {
  constexpr int smem = Config<D>::kSmemBytes;
  cuda::check_cuda(cudaFuncSetAttribute(prefill_sm90_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                   "cudaFuncSetAttribute(prefill_sm90_kernel)");
  // Persistent: one CTA per SM (the kernel's registers and shared memory allow one) walks
  // the logical grid.
  const int64_t items = static_cast<int64_t>(grid.x) * grid.y * grid.z;
  check(items <= INT32_MAX, Errc::NotSupported, "the sm90a prefill walks at most 2^31 - 1 (query tile, head) items (",
        items, " needed)");
  const int ctas = static_cast<int>(std::min<int64_t>(items, cuda::multiprocessor_count()));
  prefill_sm90_kernel<T, D><<<ctas, Config<D>::kThreads, smem, stream>>>(p, grid);
  cuda::check_launch("prefill_sm90_kernel", stream);
}

template void launch<__half, 64>(const Params &, dim3, cudaStream_t);
template void launch<__half, 128>(const Params &, dim3, cudaStream_t);

}  // namespace bspa::kernels::sm90
