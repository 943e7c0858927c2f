// The f16 instantiations of the sm90a prefill kernel (one file per dtype so they build in parallel).
#include "kernels/cuda/prefill_sm90.cuh"

namespace bspa::kernels::sm90 {

template void launch<__half, __half, 64>(const Params &, dim3, const WalkBounds &, const SplitWorkspace &,
                                         cudaStream_t);
template void launch<__half, __half, 128>(const Params &, dim3, const WalkBounds &, const SplitWorkspace &,
                                          cudaStream_t);

}  // namespace bspa::kernels::sm90
