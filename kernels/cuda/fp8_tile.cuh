// FP8 (e4m3) K/V tiles for the mma.sync kernels (decode, sm80 prefill): pages of e4m3 are
// copied to shared memory as bytes (half the bytes of a 16-bit tile) and widened there into
// the 16-bit, swizzled tile the kernels' ldmatrix reads, so the matrix code is the one the
// 16-bit pages use. Widening is exact: every e4m3 value is a bf16 and an f16 value. The
// per-head scales are not applied here: K's folds into the softmax scale and V's into the
// output (both constant over a CTA's KV head), so operands stay exact and the scales are
// applied once in fp32. Also the sm90a prefill's split of q into two e4m3 operands (hi +
// lo) for its S on FP8 tensor cores at head dim 128 (split_e4m3x2).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/sm80_primitives.cuh"

namespace bspa::kernels::fp8 {

// Four e4m3 values (byte 0 first) widened to two registers of two T values each. The bits
// of an e4m3 value placed in the exponent and mantissa fields of a 16-bit float give the
// value times 2^-8 (f16) or 2^-120 (bf16), subnormals included; one multiply by the power
// of two (exact) restores it. The e4m3 NaN codes (0x7f, 0xff) become +-480: kv_write never
// writes them (it saturates to +-448).
template <class T>
__device__ __forceinline__ void widen_e4m3x4(uint32_t w, uint32_t &lo, uint32_t &hi);

template <>
__device__ __forceinline__ void widen_e4m3x4<__half>(uint32_t w, uint32_t &lo, uint32_t &hi) {
  const uint32_t a = __byte_perm(w, 0u, 0x4140), b = __byte_perm(w, 0u, 0x4342);  // bytes 0,1 / 2,3 -> halves
  const uint32_t ha = ((a & 0x00800080u) << 8) | ((a & 0x007f007fu) << 7);
  const uint32_t hb = ((b & 0x00800080u) << 8) | ((b & 0x007f007fu) << 7);
  const __half2 k = __half2half2(__ushort_as_half(0x5C00));  // 2^8
  __half2 x = __hmul2(*reinterpret_cast<const __half2 *>(&ha), k);
  __half2 y = __hmul2(*reinterpret_cast<const __half2 *>(&hb), k);
  lo = *reinterpret_cast<uint32_t *>(&x);
  hi = *reinterpret_cast<uint32_t *>(&y);
}

template <>
__device__ __forceinline__ void widen_e4m3x4<__nv_bfloat16>(uint32_t w, uint32_t &lo, uint32_t &hi) {
  const uint32_t a = __byte_perm(w, 0u, 0x4140), b = __byte_perm(w, 0u, 0x4342);
  const uint32_t ha = ((a & 0x00800080u) << 8) | ((a & 0x007f007fu) << 4);
  const uint32_t hb = ((b & 0x00800080u) << 8) | ((b & 0x007f007fu) << 4);
  const __nv_bfloat162 k = __bfloat162bfloat162(__ushort_as_bfloat16(0x7B80));  // 2^120
  __nv_bfloat162 x = __hmul2(*reinterpret_cast<const __nv_bfloat162 *>(&ha), k);
  __nv_bfloat162 y = __hmul2(*reinterpret_cast<const __nv_bfloat162 *>(&hb), k);
  lo = *reinterpret_cast<uint32_t *>(&x);
  hi = *reinterpret_cast<uint32_t *>(&y);
}

// Four e4m3 values (byte 0 first) as two f16x2 registers by the hardware converter
// (cvt.rn.f16x2.e4m3x2, compute capability 8.9+: one instruction a pair, against about five
// for widen_e4m3x4), exact; the NaN codes stay NaN. The decode kernel's e4m3 path computes
// in f16 where it has it (decode.cuh: "the mma type"). Elsewhere: widen_e4m3x4<__half>.
__device__ __forceinline__ void convert_e4m3x4_f16(uint32_t w, uint32_t &lo, uint32_t &hi) {
#if __CUDA_ARCH__ >= 890
  // The word split into its 16-bit halves in PTX: ptxas then feeds the high half to the
  // converter as a register half (R.H1), where `w >> 16` cost a shift a pair.
  asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.rn.f16x2.e4m3x2 %0, l;\n\tcvt.rn.f16x2.e4m3x2 %1, h;\n\t}"
      : "=r"(lo), "=r"(hi)
      : "r"(w));
#else
  widen_e4m3x4<__half>(w, lo, hi);
#endif
}

// The power-of-two shift that brings the largest |q| (amax) of some rows into [2^top,
// 2^(top+1)): top 14 is the top of f16's range (the e4m3 paths convert bf16 q to f16
// operands: per row in the decode kernel, per warp's 16 rows in the sm90a prefill), top 7
// keeps q split into two e4m3 operands (split_e4m3x2) under e4m3's largest value (448), so
// none saturates. top - floor(log2 amax), kept in [-126, 126] so that 2^shift and 2^-shift
// are normal floats; 0 for zero rows. An infinite amax shifts down (the infinities stay, as
// in bf16, through f16; e4m3 has none).
__device__ __forceinline__ int q_row_shift(float amax, int top = 14) {
  if (!(amax > 0.f)) return 0;
  const int e = static_cast<int>((__float_as_uint(amax) >> 23) & 0xffu) - 127;
  return min(126, max(-126, top - e));
}

// The f16 pair h (x, y) as two e4m3 pairs: hi their rounding, lo the rounding of what hi left.
// hi + lo is x to within 2^-8 |x| or 2^-10 (half e4m3's subnormal step), against a largest
// |x| of at least 2^7 (q_row_shift's top 7): an operand split so keeps a product's error at
// bf16's level, where one e4m3 operand would cost 2-4e-2 of the output (bench/NOTES.md,
// "Session 17").
// x - hi is exact in f16: hi is x to 4 significant bits, within a factor of two of it.
__device__ __forceinline__ void split_e4m3x2(uint32_t h, uint16_t &hi, uint16_t &lo) {
#if __CUDA_ARCH__ >= 890
  uint32_t back;
  asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(hi) : "r"(h));
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(back) : "h"(hi));
  const __half2 rest = __hsub2(*reinterpret_cast<const __half2 *>(&h), *reinterpret_cast<const __half2 *>(&back));
  asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(lo) : "r"(*reinterpret_cast<const uint32_t *>(&rest)));
#else
  hi = lo = 0;
  __trap();  // only the sm90a prefill splits q
#endif
}

// 2^e as a float, for e in [-126, 127] (q_row_shift's shifts and their inverses).
__device__ __forceinline__ float exp2i(int e) { return __uint_as_float(static_cast<uint32_t>(e + 127) << 23); }

// max(amax, |x|, |y|) over the two bf16 values of w (a register of q).
__device__ __forceinline__ float max_abs_bf16x2(uint32_t w, float amax) {
  const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&w));
  return fmaxf(amax, fmaxf(fabsf(x.x), fabsf(x.y)));
}

// The two bf16 values of w times f (2^q_row_shift) as an f16 pair.
__device__ __forceinline__ uint32_t bf16x2_to_f16x2(uint32_t w, float f) {
  const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&w));
  const __half2 h = __floats2half2_rn(x.x * f, x.y * f);
  return *reinterpret_cast<const uint32_t *>(&h);
}

// Byte offset of 16-byte chunk k of row r in an e4m3 tile read by fragments (the decode
// kernel): D = 128 rows of one 128-byte line, D = 64 two rows a line; chunks XOR-swizzled so
// that both of the kernel's access patterns are free of bank conflicts: 128-bit loads of the
// K fragments (rows 2p and 2p+1 in one phase must fill the line's two halves) and 32-bit
// loads of the V fragments (rows 2c, c = 0..3, at one 32-byte column must hit eight
// different chunks).
template <int D>
__host__ __device__ constexpr uint32_t e4m3_swz(int r, int k) {
  static_assert(D == 64 || D == 128, "e4m3 tiles of 64 or 128 bytes a row");
  if constexpr (D == 128)
    return static_cast<uint32_t>(r * 128 + ((k ^ ((((r >> 1) & 3) << 1) ^ ((r & 1) << 2))) << 4));
  else
    return static_cast<uint32_t>((r >> 1) * 128 + (((((r & 1) << 2) + k) ^ (((r >> 1) & 3) << 1)) << 4));
}
// A row's chunks k ^ j lie at its chunk k's offset XOR j * 16 (the swizzle is an XOR within
// the row's 128-byte line), and its row r + 16 at r's offset + 16 D: a thread's fragment
// offsets of one 16-row step are a few lane offsets, the others one XOR or add away (the
// decode kernel's V fragments). Checked over every row and chunk at compile time.
template <int D>
constexpr bool e4m3_swz_is_xor_within_rows() {
  for (int r = 0; r < 64; ++r)
    for (int k = 0; k < D / 16; ++k) {
      if (r + 16 < 64 && e4m3_swz<D>(r + 16, k) != e4m3_swz<D>(r, k) + 16 * D) return false;
      for (int j = 0; j < D / 16; ++j)
        if (e4m3_swz<D>(r, k ^ j) != (e4m3_swz<D>(r, k) ^ static_cast<uint32_t>(j << 4))) return false;
    }
  return true;
}
static_assert(e4m3_swz_is_xor_within_rows<64>() && e4m3_swz_is_xor_within_rows<128>());

// Widens a kRows x D e4m3 tile (row-major, D bytes a row, in shared memory) into the 16-bit
// tile at dst (sm80::swz<D> layout), with kThreads threads (threadIdx.x 0..kThreads-1).
// The caller synchronises before (src landed, dst free) and after (dst complete).
template <class T, int D, int kRows, int kThreads>
__device__ __forceinline__ void widen_e4m3_tile(const char *src, char *dst, int tid) {
  constexpr int kChunks = D / 16;  // 16-byte chunks of e4m3 a row
  static_assert(kRows * kChunks % kThreads == 0, "whole chunks per thread");
#pragma unroll
  for (int i = 0; i < kRows * kChunks / kThreads; ++i) {
    const int idx = tid + i * kThreads;
    const int r = idx / kChunks, c = idx % kChunks;
    const uint4 w = *reinterpret_cast<const uint4 *>(src + r * D + c * 16);
    uint4 a, b;
    widen_e4m3x4<T>(w.x, a.x, a.y);
    widen_e4m3x4<T>(w.y, a.z, a.w);
    widen_e4m3x4<T>(w.z, b.x, b.y);
    widen_e4m3x4<T>(w.w, b.z, b.w);
    *reinterpret_cast<uint4 *>(dst + sm80::swz<D>(r, 2 * c)) = a;
    *reinterpret_cast<uint4 *>(dst + sm80::swz<D>(r, 2 * c + 1)) = b;
  }
}

}  // namespace bspa::kernels::fp8
