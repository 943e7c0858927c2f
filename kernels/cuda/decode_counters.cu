// The decode split's counter clear as a kernel the decode grid overlaps (decode.hpp:
// clear_counters). A caller's workspace has no defined contents, so a decode launch that
// splits over one clears its counters first; cudaMemsetAsync did it at the cost of the
// decode grid's wait for it (1.2 us of a 34 us batch-1 launch, bench/NOTES.md "CUDA
// decode"). This kernel lets the decode grid start at once and the decode CTAs wait for it
// only before they count, long after it has finished.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/decode.hpp"
#include "kernels/cuda/launch_check.hpp"

namespace bspa::kernels::decode {
namespace {
__global__ void __launch_bounds__(256) clear_counters_kernel(int32_t *counters, int64_t n) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) counters[i] = 0;
}
}  // namespace

void clear_counters(int32_t *counters, int64_t n, cudaStream_t stream) {
  clear_counters_kernel<<<1, 256, 0, stream>>>(counters, n);
  cuda::check_launch("clear_counters_kernel", stream);
}

}  // namespace bspa::kernels::decode
