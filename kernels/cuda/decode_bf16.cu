// The bf16 instantiations of the decode kernel (one file per dtype so they build in parallel),
// and the shared-memory size of an instantiation (the same for both 16-bit dtypes).
#include "kernels/cuda/decode.cuh"

namespace bspa::kernels::decode {

size_t shared_bytes(int32_t head_dim, int32_t max_rows, bool e4m3_pages, int32_t quads) {
  if (e4m3_pages)
    return head_dim == 64    ? shared_bytes_for<64, uint8_t>(max_rows, quads)
           : head_dim == 128 ? shared_bytes_for<128, uint8_t>(max_rows, quads)
                             : 0;
  return head_dim == 64    ? shared_bytes_for<64, __nv_bfloat16>(max_rows, quads)
         : head_dim == 128 ? shared_bytes_for<128, __nv_bfloat16>(max_rows, quads)
                           : 0;
}

template void launch<__nv_bfloat16, __nv_bfloat16, 64>(const cuda::AttentionParams &, int32_t, int32_t, int32_t,
                                                       const Split &, const Overlap &, cudaStream_t);
template void launch<__nv_bfloat16, __nv_bfloat16, 128>(const cuda::AttentionParams &, int32_t, int32_t, int32_t,
                                                        const Split &, const Overlap &, cudaStream_t);

template bool cluster_merge_fits<__nv_bfloat16, __nv_bfloat16, 64>(int32_t, int32_t, int32_t, int64_t);
template bool cluster_merge_fits<__nv_bfloat16, __nv_bfloat16, 128>(int32_t, int32_t, int32_t, int64_t);

}  // namespace bspa::kernels::decode
