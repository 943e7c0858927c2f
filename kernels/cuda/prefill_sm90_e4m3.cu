// The instantiations of the sm90a prefill kernel over e4m3 pages (q and out bf16 or f16):
// the producer widens each tile (V's alone at head dim 128, whose S reads K's e4m3 bytes)
// into the 16-bit ring the consumers read.
#include "kernels/cuda/prefill_sm90.cuh"

namespace bspa::kernels::sm90 {

template void launch<__nv_bfloat16, uint8_t, 64>(const Params &, dim3, const WalkBounds &, const SplitWorkspace &,
                                                 cudaStream_t);
template void launch<__nv_bfloat16, uint8_t, 128>(const Params &, dim3, const WalkBounds &, const SplitWorkspace &,
                                                  cudaStream_t);
template void launch<__half, uint8_t, 64>(const Params &, dim3, const WalkBounds &, const SplitWorkspace &,
                                          cudaStream_t);
template void launch<__half, uint8_t, 128>(const Params &, dim3, const WalkBounds &, const SplitWorkspace &,
                                           cudaStream_t);

}  // namespace bspa::kernels::sm90
