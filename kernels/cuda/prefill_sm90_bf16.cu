// The bf16 instantiations of the sm90a prefill kernel (one file per dtype so they build in parallel).
#include "kernels/cuda/prefill_sm90.cuh"

namespace bspa::kernels::sm90 {

template void launch<__nv_bfloat16, __nv_bfloat16, 64>(const Params &, dim3, const WalkBounds &, const SplitWorkspace &,
                                                       cudaStream_t);
template void launch<__nv_bfloat16, __nv_bfloat16, 128>(const Params &, dim3, const WalkBounds &,
                                                        const SplitWorkspace &, cudaStream_t);

}  // namespace bspa::kernels::sm90
