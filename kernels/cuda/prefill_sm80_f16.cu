// The f16 instantiations of the sm80 prefill kernel (one file per dtype so they build in parallel).
#include <atomic>

#include "kernels/cuda/launch_check.hpp"
#include "kernels/cuda/prefill_sm80.cuh"

namespace bspa::kernels::sm80 {

template <class T, int D, int BM>
void launch(const Params &p, dim3 grid, cudaStream_t stream) {
  constexpr int smem = Config<D, BM>::kSmemBytes;
  // The opt-in above 48 KiB is per device; setting it again is cheap and capturable.
  cuda::check_cuda(cudaFuncSetAttribute(prefill_sm80_kernel<T, D, BM>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                   "cudaFuncSetAttribute(prefill_sm80_kernel)");
  if (p.splits > 1) {  // one cluster per (tile, head): its CTAs merge through shared memory
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(Config<D, BM>::kThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = static_cast<unsigned>(p.splits);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    cuda::check_cuda(cudaLaunchKernelEx(&cfg, prefill_sm80_kernel<T, D, BM>, p), "cudaLaunchKernelEx(prefill_sm80_kernel)");
  } else {
    prefill_sm80_kernel<T, D, BM><<<grid, Config<D, BM>::kThreads, smem, stream>>>(p);
  }
  cuda::check_launch("prefill_sm80_kernel", stream);
}

template <class T, int D, int BM>
int ctas_per_sm(int device) {
  constexpr int kCache = 64;
  static std::atomic<int> cache[kCache];
  if (device >= 0 && device < kCache) {
    const int c = cache[device].load(std::memory_order_relaxed);
    if (c > 0) return c;
  }
  constexpr int smem = Config<D, BM>::kSmemBytes;
  cuda::check_cuda(cudaFuncSetAttribute(prefill_sm80_kernel<T, D, BM>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                   "cudaFuncSetAttribute(prefill_sm80_kernel)");
  int n = 0;
  cuda::check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, prefill_sm80_kernel<T, D, BM>, Config<D, BM>::kThreads, smem),
                   "cudaOccupancyMaxActiveBlocksPerMultiprocessor(prefill_sm80_kernel)");
  n = n < 1 ? 1 : n;
  if (device >= 0 && device < kCache) cache[device].store(n, std::memory_order_relaxed);
  return n;
}

template void launch<__half, 64, 64>(const Params &, dim3, cudaStream_t);
template void launch<__half, 64, 128>(const Params &, dim3, cudaStream_t);
template void launch<__half, 128, 64>(const Params &, dim3, cudaStream_t);
template void launch<__half, 128, 128>(const Params &, dim3, cudaStream_t);

template int ctas_per_sm<__half, 64, 64>(int);
template int ctas_per_sm<__half, 64, 128>(int);
template int ctas_per_sm<__half, 128, 64>(int);
template int ctas_per_sm<__half, 128, 128>(int);
}  // namespace bspa::kernels::sm80
