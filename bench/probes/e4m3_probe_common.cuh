// What the e4m3 hardware probes (bench/probes/*.cu) share: host e4m3 conversions, and for
// the wgmma decode-tile probes the layouts and instruction forms of a tile over e4m3 K/V
// (bench/NOTES.md, "FP8 KV (CUDA)", "Session 25"). The Hopper wrappers the library's
// kernels use (fences, wgmma groups, descriptors, cp.async, named barriers) come from
// kernels/cuda/sm80_primitives.cuh and sm90_primitives.cuh, the CUDA error check (CUDA_OK)
// from bench/cuda_ok.hpp; build the probes with the repository root on the include path
// (-I. from it).
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "bench/cuda_ok.hpp"
#include "kernels/cuda/sm90_primitives.cuh"

namespace e4m3_probe {

using bspa::kernels::sm80::cp_async_16;
using bspa::kernels::sm80::cp_async_commit;
using bspa::kernels::sm80::cp_async_wait;
using bspa::kernels::sm80::fast_exp2;
using bspa::kernels::sm80::smem_addr;
using bspa::kernels::sm90::fence_proxy_async;
using bspa::kernels::sm90::fence_regs;
using bspa::kernels::sm90::named_barrier;
using bspa::kernels::sm90::wgmma_commit;
using bspa::kernels::sm90::wgmma_fence;
using bspa::kernels::sm90::wgmma_wait;

// The value of an e4m3 code, and the code of a float (round to nearest even, saturating).
inline float e4m3_value(uint8_t code) {
  __nv_fp8_e4m3 x;
  x.__x = code;
  return static_cast<float>(x);
}
inline uint8_t e4m3_code(float v) { return __nv_fp8_e4m3(v).__x; }

// x = hi + lo: hi its e4m3 rounding, lo the e4m3 rounding of what hi left (q and P split so
// keep about 7 significant bits where one e4m3 operand keeps 4).
__host__ __device__ inline void split_e4m3(float x, uint8_t &hi, uint8_t &lo) {
  const __nv_fp8_e4m3 h(x);
  hi = h.__x;
  lo = __nv_fp8_e4m3(x - static_cast<float>(h)).__x;
}

// Byte offset of (row, byte) in a tile of 128-byte rows under the 128-byte swizzle (16-byte
// chunk c of row r at chunk c ^ (r & 7)), the layout wgmma's descriptors read; the tile
// base is 1024-byte aligned.
__host__ __device__ constexpr int swz128(int row, int byte) {
  return row * 128 + ((((byte >> 4) ^ (row & 7)) << 4) | (byte & 15));
}

// V^T's A fragments (v_fragment) hold, for fragment row g, keys {2t, 2t + 1, 8 + 2t, 9 + 2t}
// of each 16 where the A layout names k = 4t .. 4t + 3: the column of P^T (B's K index within
// a tile) that holds key `key`, and the key that column `k` holds.
__host__ __device__ constexpr int logical_key_column(int key) {
  const int kk = key & 15, t = (kk & 7) >> 1, j = (kk & 1) + (kk >= 8 ? 2 : 0);
  return (key & ~15) + 4 * t + j;
}
__host__ __device__ constexpr int key_of_column(int k) {
  const int kk = k & 15, t = kk >> 2, j = kk & 3;
  return (k & ~15) + (j < 2 ? 2 * t + j : 8 + 2 * t + (j - 2));
}

// K-major operand of 128-byte rows, 8-row groups 1024 bytes apart.
__device__ __forceinline__ uint64_t desc(uint32_t smem_address) {
  return bspa::kernels::sm90::sw128_desc(smem_address, 1024);
}

// d (64 x N, fp32) = (accumulate ? d : 0) + A (64 x 32, descriptor or registers) * B (32 x N,
// descriptor), e4m3 operands, N = 8 (4 accumulators a thread) or 16 (8). Thread (warp w,
// lane): d[i] at row 16 w + lane / 4 + 8 ((i >> 1) & 1), column 8 (i >> 2) + 2 (lane % 4) + (i & 1).
__device__ __forceinline__ void mma_ss(float (&d)[4], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0,%1,%2,%3}, %4, %5, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(a), "l"(b), "r"(accumulate));
}
__device__ __forceinline__ void mma_ss(float (&d)[8], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(a), "l"(b), "r"(accumulate));
}
// A from registers: mma.sync m16n8k32's 8-bit A layout, per warp.
__device__ __forceinline__ void mma_rs(float (&d)[4], const uint32_t (&a)[4], uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}
__device__ __forceinline__ void mma_rs(float (&d)[8], const uint32_t (&a)[4], uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, "
      "1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}
// One wgmma group issued before: waits for it and keeps the accumulators' reads after.
template <int N>
__device__ __forceinline__ void commit_wait(float (&d)[N]) {
  wgmma_commit();
  wgmma_wait<0>();
  fence_regs(d);
}

// V^T's A fragment of one warp, 16 bytes of d by 32 keys, from the V rows at shared address
// `addr` (this lane's ldmatrix row: key 8i + j of the 32 for lane 8i + j, the warp's 16-byte
// chunk). ldmatrix.trans gives register i keys 8i + 2t, 8i + 2t + 1 (low, high half), each
// d 2g and 2g + 1 (low, high byte); the permutes pair the keys per d, so fragment row g is
// d 2g of the chunk and row g + 8 is d 2g + 1.
__device__ __forceinline__ void v_fragment(uint32_t addr, uint32_t (&a)[4]) {
  uint32_t r[4];
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
  a[0] = __byte_perm(r[0], r[1], 0x6420);  // d 2g:     keys 2t, 2t + 1, 8 + 2t, 9 + 2t
  a[1] = __byte_perm(r[0], r[1], 0x7531);  // d 2g + 1
  a[2] = __byte_perm(r[2], r[3], 0x6420);  // keys 16 + the same
  a[3] = __byte_perm(r[2], r[3], 0x7531);
}

}  // namespace e4m3_probe
