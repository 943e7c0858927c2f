// One thread's share of a 64-token K/V tile that lies inside one page, copied by cp.async:
// the sm80 prefill and the decode kernel (its strided-row way) both copy chunk kc of rows
// kr0 + i * kRowsPerPass (i < kPasses), whose swizzled destinations are one offset plus
// immediates and whose sources are one pointer plus a stride.
#pragma once

#include <cstdint>

#include "kernels/cuda/key_tile_list.cuh"
#include "kernels/cuda/sm80_primitives.cuh"

namespace bspa::kernels::cuda {

// dk / dv: this thread's first destinations in the stage; ks / vs: its first rows' chunks in
// the page; k_step / v_step: kRowsPerPass rows of the page; k0: the tile's first key, kr0
// this thread's first row in it. Rows at kv_len and past are zero-filled (nothing read;
// their addresses stay in the page); a tile that ends at or before kv_len (every tile but
// a sequence's last) checks no row.
template <int kPasses, int kRowsPerPass, int kPassBytes, class KV>
__device__ __forceinline__ void copy_tile_in_page(uint32_t dk, uint32_t dv, const KV *ks, const KV *vs, int64_t k_step,
                                                  int64_t v_step, int k0, int kr0, int kv_len) {
  if (k0 + kKeyTileTokens <= kv_len) {
#pragma unroll
    for (int i = 0; i < kPasses; ++i, ks += k_step, vs += v_step) {
      sm80::cp_async_16(dk + i * kPassBytes, ks);
      sm80::cp_async_16(dv + i * kPassBytes, vs);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kPasses; ++i, ks += k_step, vs += v_step) {
      const bool valid = k0 + kr0 + i * kRowsPerPass < kv_len;
      sm80::cp_async_16(dk + i * kPassBytes, ks, valid);
      sm80::cp_async_16(dv + i * kPassBytes, vs, valid);
    }
  }
}

}  // namespace bspa::kernels::cuda
